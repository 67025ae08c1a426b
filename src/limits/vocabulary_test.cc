#include "limits/vocabulary.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <set>
#include <vector>

#include "limits/limits_file.h"

namespace hami::limits {
namespace {

using ::testing::HasSubstr;

// Values every writer may write, per codec: the edges of each range and ordinary values.
template <typename Codec>
std::vector<typename Codec::Value> Samples();
template <>
std::vector<uint64_t> Samples<SizeCodec>() {
  return {0,          1,
          1023,       1024,
          1536,       3000ull << 20,
          1ull << 30, (1ull << 40) + 1,
          5ull << 40, std::numeric_limits<uint64_t>::max()};
}
template <>
std::vector<uint32_t> Samples<PercentCodec>() {
  return {0, 1, 30, 99, 100};
}
template <>
std::vector<std::string> Samples<PathCodec>() {
  return {"/", "/usr/local/vgpu/usage.cache", "/tmp/with space/x=y"};
}
template <>
std::vector<std::string> Samples<OptionalPathCodec>() {
  return {"/host/proc"};
}
template <>
std::vector<CorePolicy> Samples<CorePolicyCodec>() {
  return {CorePolicy::kDefault, CorePolicy::kForce, CorePolicy::kDisable};
}
template <>
std::vector<UnaccountedPolicy> Samples<UnaccountedPolicyCodec>() {
  return {UnaccountedPolicy::kReport, UnaccountedPolicy::kSuspend};
}
template <>
std::vector<int32_t> Samples<PriorityCodec>() {
  return {0, 1};
}
template <>
std::vector<int> Samples<LogLevelCodec>() {
  return {0, 1, 2, 3, 4};
}
template <>
std::vector<bool> Samples<BoolCodec>() {
  return {false, true};
}
template <>
std::vector<bool> Samples<BrokerGateCodec>() {
  return {false, true};
}
template <>
std::vector<uint8_t> Samples<IdentityTiersCodec>() {
  std::vector<uint8_t> all;
  for (unsigned m = 0; m <= kAllIdentityTiers; ++m) all.push_back(static_cast<uint8_t>(m));
  return all;
}
template <>
std::vector<uint32_t> Samples<MillisecondsCodec>() {
  return {0, 1, 10000, 600000};
}
template <>
std::vector<uint32_t> Samples<FormatCodec>() {
  return {1};
}
template <>
std::vector<std::optional<std::string>> Samples<DeviceListCodec>() {
  return {std::string(), std::string("0"), std::string("1,GPU-8f6b"), std::string("MIG-1/2/3")};
}

// Writes `entry` through the limits file's writer, reads the text back with its reader, finds
// the entry's key in the vocabulary, and returns the entry read.
Entry ThroughTheFile(const Entry& entry) {
  // The format line is the one the writer adds itself: it must be what SetLimitsFormat says.
  const bool format_line = entry.first == kFormatKey;
  if (format_line) {
    EXPECT_EQ(entry.second, kFormat);
  }
  Entry written = entry;
  auto text = LimitsText(std::span<const Entry>(&written, format_line ? 0 : 1));
  EXPECT_TRUE(text.ok()) << entry.first << ": " << text.error().message();
  if (!text.ok()) return {};
  LimitsFile file = ParseLimitsFile(*text, "/test");
  EXPECT_TRUE(file.problems.empty()) << *text;
  for (const Entry& e : file.entries) {
    if (e.first == entry.first) return e;
  }
  ADD_FAILURE() << entry.first << " not read back from:\n" << *text;
  return {};
}

template <typename Codec, typename Writer, typename Reader>
void RoundTrip(Key key, int device, Writer write, Reader read, std::set<Key>* seen) {
  seen->insert(key);
  for (const typename Codec::Value& v : Samples<Codec>()) {
    Entry entry = write(v);
    EXPECT_EQ(entry.first, Name(key, device));
    int found_device = -1;
    const KeyInfo* info = Lookup(entry.first, &found_device);
    ASSERT_NE(info, nullptr) << entry.first;
    EXPECT_EQ(info->key, key) << entry.first;
    if (info->scope == Scope::kPerDevice) {
      EXPECT_EQ(found_device, device);
    }
    Entry back = ThroughTheFile(entry);
    auto parsed = read(back.second);
    ASSERT_TRUE(parsed.ok()) << entry.first << "=" << entry.second << ": "
                             << parsed.error().message();
    EXPECT_EQ(*parsed, v) << entry.first << "=" << entry.second;
  }
}

TEST(Vocabulary, EveryRowRoundTripsThroughTheLimitsFile) {
  std::set<Key> seen;
  const int device = 3;
#define HAMI_ROUND_TRIP_kScalar(id, codec)                             \
  RoundTrip<codec>(                                                    \
      Key::k##id, 0, [](const codec::Value& v) { return Set##id(v); }, \
      [](std::string_view t) { return Parse##id(t); }, &seen);
#define HAMI_ROUND_TRIP_kAllDevices(id, codec) HAMI_ROUND_TRIP_kScalar(id, codec)
#define HAMI_ROUND_TRIP_kPerDevice(id, codec)                                        \
  RoundTrip<codec>(                                                                  \
      Key::k##id, device, [&](const codec::Value& v) { return Set##id(device, v); }, \
      [&](std::string_view t) { return Parse##id(device, t); }, &seen);
#define HAMI_LIMIT_KEY(id, name, codec, scope, unit) HAMI_ROUND_TRIP_##scope(id, codec)
#include "limits/vocabulary.def"
#undef HAMI_LIMIT_KEY
  EXPECT_EQ(seen.size(), Keys().size());
}

TEST(Vocabulary, SizesAreWrittenAsHamiWritesThem) {
  EXPECT_EQ(SetMemoryLimit(3000ull << 20).second, "3000m");
  EXPECT_EQ(SetDeviceMemoryLimit(0, 2048ull << 20), Entry("CUDA_DEVICE_MEMORY_LIMIT_0", "2048m"));
  EXPECT_EQ(SetMemoryLimit(1536).second, "1536");
  EXPECT_EQ(SetMemoryLimit(4096).second, "4k");
  EXPECT_EQ(SetMemoryLimit(0).second, "0");
}

TEST(Vocabulary, NamesAndLookupAgree) {
  for (const KeyInfo& k : Keys()) {
    int device = -1;
    const std::string name = Name(k.key, 15);
    const KeyInfo* found = Lookup(name, &device);
    ASSERT_NE(found, nullptr) << name;
    EXPECT_EQ(found->key, k.key);
    if (k.scope == Scope::kPerDevice) {
      EXPECT_EQ(device, 15);
      EXPECT_EQ(Lookup(Name(k.key, 0) + "0", nullptr), nullptr) << "two-digit 00";
      std::string prefix = std::string(k.name).substr(0, std::string(k.name).size() - 3);
      EXPECT_EQ(Lookup(prefix + "01", nullptr), nullptr);
      EXPECT_EQ(Lookup(prefix + "16", nullptr), nullptr);
      EXPECT_EQ(Lookup(prefix + "x", nullptr), nullptr);
    }
  }
  EXPECT_EQ(Lookup("CUDA_DEVICE_MEMORY_LIMITS", nullptr), nullptr);
  EXPECT_EQ(Name(Key::kDeviceSmLimit, 7), "CUDA_DEVICE_SM_LIMIT_7");
}

TEST(Vocabulary, ReadersRefuseWhatTheLibraryRefusesNamingTheVariable) {
  EXPECT_THAT(ParseSmLimit("150").error().message(),
              HasSubstr("CUDA_DEVICE_SM_LIMIT='150': must be a percentage from 0 to 100"));
  EXPECT_THAT(ParseDeviceMemoryLimit(2, "12q").error().message(),
              HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_2='12q'"));
  EXPECT_THAT(ParseCorePolicy("hard").error().message(),
              HasSubstr("expected default, force or disable"));
  EXPECT_EQ(*ParseCorePolicy("FORCE"), CorePolicy::kForce);
  EXPECT_THAT(ParseTaskPriority("2").error().message(), HasSubstr("expected 0 (high) or 1 (low)"));
  EXPECT_FALSE(ParseSharedCache("relative/path").ok());
  EXPECT_FALSE(ParseHostPidBroker("true").ok());
  EXPECT_EQ(*ParseHostPidBroker(""), false);
  EXPECT_FALSE(ParseIdentityTiers("broker,carrier-pigeon").ok());
  EXPECT_EQ(*ParseIdentityTiers("PROBE,broker"), 0b1001);
  EXPECT_FALSE(ParseIdentityProbeWaitMs("600001").ok());
  EXPECT_FALSE(ParseLimitsFormat("2").ok());
  EXPECT_FALSE(ParseLogLevel("5").ok());
}

}  // namespace
}  // namespace hami::limits
