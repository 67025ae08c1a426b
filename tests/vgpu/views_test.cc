// What a container's processes see under libvgpu.so: NVML's devices are CUDA's, in CUDA's
// order, whatever CUDA_VISIBLE_DEVICES says; per-device limits follow the device, not the
// ordinal; CUDA and NVML give the same memory figures and NVML's never wrap; calls with
// NULL outputs get the driver's own errors. Each case runs in child processes (vgpu_probe)
// with its own environment, machine and region.
#include <cuda.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "nvml/nvml.h"
#include "region/region.h"
#include "vgpu_fixture.h"
#include "vgpu_probe.h"

namespace hami::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
// Three different devices, so that a wrong one shows.
constexpr char kProfile[] = "a100-40g,h100-80g,l4-24g";

std::string Join(const std::vector<std::string>& items) {
  if (items.empty()) return "-";
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

std::vector<std::string> Split(const std::string& list) {
  if (list == "-" || list.empty()) return {};
  std::vector<std::string> out;
  for (std::string_view part : SplitString(list, ',', false)) out.emplace_back(part);
  return out;
}

// Checks one meminfo answer: NVML (both versions) and CUDA agree, and nothing wraps.
void ExpectOneView(const Answer& m, uint64_t total) {
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(m.Int("cu"), CUDA_SUCCESS) << m.line;
  ASSERT_EQ(m.Int("nvml"), NVML_SUCCESS) << m.line;
  ASSERT_EQ(m.Int("nvml2"), NVML_SUCCESS) << m.line;
  EXPECT_EQ(m.U64("cu_total"), total) << m.line;
  EXPECT_EQ(m.U64("device_total"), total) << m.line;
  EXPECT_EQ(m.U64("nvml_total"), total) << m.line;
  EXPECT_EQ(m.U64("nvml2_total"), total) << m.line;
  EXPECT_EQ(m.U64("nvml_free"), m.U64("cu_free")) << m.line;
  EXPECT_EQ(m.U64("nvml2_free"), m.U64("cu_free")) << m.line;
  EXPECT_LE(m.U64("cu_free"), total) << m.line;
  EXPECT_EQ(m.U64("nvml_used"), total - m.U64("nvml_free")) << m.line;
  EXPECT_EQ(m.U64("nvml2_used"), total - m.U64("nvml2_free")) << m.line;
  EXPECT_EQ(m.U64("nvml2_reserved"), 0u) << m.line;
}

class ViewsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(UnderLibvgpu()) << "this test must run with LD_PRELOAD=libvgpu.so";
    // The machine's devices, as the driver enumerates them.
    Machine m(kProfile);
    Probe p(m.Env());
    ASSERT_EQ(p.Do("init").Int("r"), CUDA_SUCCESS);
    ASSERT_EQ(p.Do("nvml-init").Int("r"), NVML_SUCCESS);
    Answer d = p.Do("devices");
    uuids_ = Split(d.Get("cuda"));
    ASSERT_EQ(uuids_.size(), 3u) << d.line;
    ASSERT_EQ(d.Get("nvml"), d.Get("cuda"));
  }

  std::string Uuids(const std::vector<int>& physical) const {
    std::vector<std::string> out;
    for (int p : physical) out.push_back(uuids_[size_t(p)]);
    return Join(out);
  }

  std::vector<std::string> uuids_;
};

struct VisibleCase {
  std::string cvd;  // "$0" stands for device 0's UUID, "$1:12" for its first 12 characters
  std::vector<int> physical;
};

TEST_F(ViewsTest, NvmlShowsOnlyTheVisibleDevicesInCudasOrder) {
  const VisibleCase cases[] = {
      {"1,0", {1, 0}},
      {"2", {2}},
      {"$1", {1}},
      {"2,$0,1", {2, 0, 1}},
      {"$2:12,0", {2, 0}},
      {"0,1,2", {0, 1, 2}},
      // The driver's list ends at an entry that names no device or repeats one.
      {"1,7,0", {1}},
      {"2,2,0", {2}},
      {"9", {}},
  };
  for (const VisibleCase& c : cases) {
    std::string cvd = c.cvd;
    for (int i = 0; i < 3; ++i) {
      for (const std::string& key : {"$" + std::to_string(i) + ":12", "$" + std::to_string(i)}) {
        size_t at = cvd.find(key);
        if (at == std::string::npos) continue;
        cvd.replace(at, key.size(),
                    key.size() > 2 ? uuids_[size_t(i)].substr(0, 12) : uuids_[size_t(i)]);
      }
    }
    SCOPED_TRACE("CUDA_VISIBLE_DEVICES=" + cvd);
    const std::string expected = Uuids(c.physical);
    // NVML first (the devices come from CUDA_VISIBLE_DEVICES over NVML's list), then CUDA.
    for (const char* first : {"nvml-init", "init"}) {
      SCOPED_TRACE(std::string("first call: ") + first);
      Machine m(kProfile);
      Probe p(m.Env({{"CUDA_VISIBLE_DEVICES", cvd}}));
      Answer a = p.Do(first);
      Answer b = p.Do(first == std::string("init") ? "nvml-init" : "init");
      Answer init = a.command == "init" ? a : b;
      ASSERT_EQ(init.Int("r"), c.physical.empty() ? CUDA_ERROR_NO_DEVICE : CUDA_SUCCESS);
      Answer d = p.Do("devices");
      ASSERT_TRUE(d.ok());
      EXPECT_EQ(d.Get("nvml"), expected) << d.line;
      EXPECT_EQ(d.Get("nvml1"), expected) << d.line;
      EXPECT_EQ(d.Get("cuda"), expected) << d.line;
      std::vector<std::string> index;
      for (size_t i = 0; i < c.physical.size(); ++i) index.push_back(std::to_string(i));
      EXPECT_EQ(d.Get("index"), Join(index)) << d.line;
      EXPECT_EQ(d.Int("past_end"), NVML_ERROR_INVALID_ARGUMENT) << d.line;
      // The driver's handle of a device the container does not see leads nowhere; one it
      // sees works everywhere.
      for (int visible : c.physical) {
        Answer h = p.Do("hidden " + uuids_[size_t(visible)]);
        EXPECT_EQ(h.Int("visible"), 1) << h.line;
        for (const char* key : {"processes", "processes_v1", "graphics", "mps", "detail", "index",
                                "by_uuid", "by_serial", "by_pci"}) {
          EXPECT_EQ(h.Int(key), NVML_SUCCESS) << key << ": " << h.line;
        }
      }
      for (int hidden = 0; hidden < 3; ++hidden) {
        if (std::find(c.physical.begin(), c.physical.end(), hidden) != c.physical.end()) continue;
        Answer h = p.Do("hidden " + uuids_[size_t(hidden)]);
        ASSERT_TRUE(h.ok());
        EXPECT_EQ(h.Int("visible"), 0) << h.line;
        for (const char* key : {"processes", "processes_v1", "graphics", "mps", "detail", "index",
                                "by_uuid", "by_serial", "by_pci"}) {
          EXPECT_EQ(h.Int(key), NVML_ERROR_NOT_FOUND) << key << ": " << h.line;
        }
      }
    }
  }
}

TEST_F(ViewsTest, PerDeviceLimitsFollowTheDeviceWhateverTheOrder) {
  Machine m(kProfile);
  // Limits by ordinal, as every process of the container is given them.
  const std::map<std::string, std::string> limits = {{"CUDA_DEVICE_MEMORY_LIMIT_0", "1g"},
                                                     {"CUDA_DEVICE_MEMORY_LIMIT_1", "3g"}};
  auto with = [&](const std::string& cvd) {
    auto env = m.Env(limits);
    env["CUDA_VISIBLE_DEVICES"] = cvd;
    return env;
  };
  // The region is stamped in device order: device 0 has 1 GiB, device 1 has 3 GiB.
  Probe a(with("0,1"));
  ASSERT_EQ(a.Do("context 0").Int("r"), CUDA_SUCCESS);
  ExpectOneView(a.Do("meminfo"), 1 * kGiB);
  ASSERT_EQ(a.Do("context 1").Int("r"), CUDA_SUCCESS);
  ExpectOneView(a.Do("meminfo"), 3 * kGiB);
  auto reg = OpenRegionReadOnly(m.Region());
  ASSERT_NE(reg, nullptr);
  const uint64_t used0 = reg->Snapshot(0).used_bytes, used1 = reg->Snapshot(1).used_bytes;

  // Reversed: this process's ordinal 0 is device 1 and has device 1's limit.
  Probe b(with("1,0"));
  ASSERT_EQ(b.Do("context 1").Int("r"), CUDA_SUCCESS);
  Answer b1 = b.Do("meminfo");
  EXPECT_EQ(b1.Get("uuid"), uuids_[0]);
  ExpectOneView(b1, 1 * kGiB);
  ASSERT_EQ(b.Do("context 0").Int("r"), CUDA_SUCCESS);
  Answer b0 = b.Do("meminfo");
  EXPECT_EQ(b0.Get("uuid"), uuids_[1]);
  ExpectOneView(b0, 3 * kGiB);
  const uint64_t b_contexts0 = reg->Snapshot(0).used_bytes - used0;
  const uint64_t b_contexts1 = reg->Snapshot(1).used_bytes - used1;

  // Its allocation on ordinal 0 is charged to device 1.
  ASSERT_EQ(b.Do("alloc 512m").Int("r"), CUDA_SUCCESS);
  EXPECT_EQ(reg->Snapshot(1).used_bytes, used1 + b_contexts1 + 512 * kMiB);
  EXPECT_EQ(reg->Snapshot(0).used_bytes, used0 + b_contexts0);
  Answer a1 = a.Do("meminfo");  // a's current device is 1
  EXPECT_EQ(a1.U64("cu_free"), b.Do("meminfo").U64("cu_free"));
  EXPECT_EQ(a1.U64("cu_free"), 3 * kGiB - reg->Snapshot(1).used_bytes);

  // A process that sees device 1 alone, by UUID, shares the same figures.
  Probe c(with(uuids_[1]));
  ASSERT_EQ(c.Do("context 0").Int("r"), CUDA_SUCCESS);
  Answer c0 = c.Do("meminfo");
  ExpectOneView(c0, 3 * kGiB);
  EXPECT_EQ(c0.U64("cu_free"), 3 * kGiB - reg->Snapshot(1).used_bytes);
  EXPECT_EQ(c0.U64("cu_free"), a.Do("meminfo").U64("cu_free"));
}

TEST_F(ViewsTest, CudaAndNvmlGiveTheSameFiguresForTheSameDevice) {
  Machine m(kProfile);
  auto env = m.Env({{"CUDA_VISIBLE_DEVICES", "2,0"}, {"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  Probe p(env);
  Probe other(env);
  ASSERT_EQ(p.Do("nvml-init").Int("r"), NVML_SUCCESS);
  for (const char* device : {"0", "1"}) {
    SCOPED_TRACE(std::string("device ") + device);
    ASSERT_EQ(p.Do(std::string("context ") + device).Int("r"), CUDA_SUCCESS);
    ExpectOneView(p.Do("meminfo"), 2 * kGiB);
    ASSERT_EQ(p.Do("alloc 100m").Int("r"), CUDA_SUCCESS);
    ExpectOneView(p.Do("meminfo"), 2 * kGiB);
    // Another process's use shows in both.
    ASSERT_EQ(other.Do(std::string("context ") + device).Int("r"), CUDA_SUCCESS);
    ASSERT_EQ(other.Do("alloc 300m").Int("r"), CUDA_SUCCESS);
    Answer after = p.Do("meminfo");
    ExpectOneView(after, 2 * kGiB);
    EXPECT_EQ(after.U64("cu_free"), other.Do("meminfo").U64("cu_free"));
  }
}

// A context is admitted like any memory: one larger than the budget is refused, as a full
// GPU refuses it, and leaves nothing charged.
TEST_F(ViewsTest, AContextLargerThanTheLimitIsRefused) {
  Machine m(kProfile);
  // An A100 context takes 420 MiB.
  Probe p(m.Env({{"CUDA_DEVICE_MEMORY_LIMIT", "100m"}}));
  EXPECT_EQ(p.Do("context 0").Int("r"), CUDA_ERROR_OUT_OF_MEMORY);
  auto reg = OpenRegionReadOnly(m.Region());
  ASSERT_NE(reg, nullptr);
  EXPECT_EQ(reg->Snapshot(0).used_bytes, 0u);
}

TEST_F(ViewsTest, NvmlNeverWrapsWhenTheContainerIsOverItsLimit) {
  Machine m(kProfile);
  Probe p(m.Env({{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}}));
  ASSERT_EQ(p.Do("context 0").Int("r"), CUDA_SUCCESS);
  ASSERT_EQ(p.Do("alloc 2g").Int("r"), CUDA_SUCCESS);
  ExpectOneView(p.Do("meminfo"), 4 * kGiB);
  // An operator lowers the limit below what the container already holds.
  {
    auto reg = region::Region::Open(m.Region(), nullptr, region::Create::kNever, nullptr);
    ASSERT_TRUE(reg.ok()) << reg.error().message();
    ASSERT_TRUE((*reg)->SetMemoryLimit(0, 1 * kGiB).ok());
    EXPECT_GT((*reg)->UsedBytes(0), 1 * kGiB);
  }
  Answer v = p.Do("meminfo");
  ExpectOneView(v, 1 * kGiB);
  EXPECT_EQ(v.U64("cu_free"), 0u) << v.line;
  EXPECT_EQ(v.U64("nvml_used"), 1 * kGiB) << v.line;
  EXPECT_EQ(p.Do("alloc 1m").Int("r"), CUDA_ERROR_OUT_OF_MEMORY);
  // Freeing brings the figures back under the limit.
  EXPECT_EQ(p.Do("free-all").Int("r"), CUDA_SUCCESS);
  Answer freed = p.Do("meminfo");
  ExpectOneView(freed, 1 * kGiB);
  EXPECT_GT(freed.U64("cu_free"), 0u) << freed.line;
}

TEST_F(ViewsTest, NullOutputsGetTheDriversOwnErrors) {
  for (const char* cvd : {"", "1,0"}) {
    SCOPED_TRACE(std::string("CUDA_VISIBLE_DEVICES=") + cvd);
    Machine m(kProfile);
    Probe p(m.Env({{"CUDA_VISIBLE_DEVICES", cvd}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}));
    ASSERT_EQ(p.Do("nvml-init").Int("r"), NVML_SUCCESS);
    ASSERT_EQ(p.Do("context 0").Int("r"), CUDA_SUCCESS);
    Answer n = p.Do("nulls");
    ASSERT_TRUE(n.ok());
    EXPECT_GE(n.fields.size(), 20u) << n.line;
    for (const auto& [call, results] : n.fields) {
      size_t slash = results.find('/');
      ASSERT_NE(slash, std::string::npos) << call;
      EXPECT_EQ(results.substr(0, slash), results.substr(slash + 1))
          << call << ": libvgpu's answer, then the driver's";
      EXPECT_NE(results.substr(0, slash), "0") << call << " succeeded with a NULL output";
    }
  }
}

TEST_F(ViewsTest, AVisibleDeviceEntryThatNamesNoDeviceHidesTheRestAsTheDriverDoes) {
  Machine m(kProfile);
  Probe p(m.Env(
      {{"CUDA_VISIBLE_DEVICES", "2,GPU-does-not-exist,0"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}));
  ASSERT_EQ(p.Do("nvml-init").Int("r"), NVML_SUCCESS);
  ASSERT_EQ(p.Do("context 0").Int("r"), CUDA_SUCCESS);
  Answer d = p.Do("devices");
  EXPECT_EQ(d.Get("cuda"), uuids_[2]) << d.line;
  EXPECT_EQ(d.Get("nvml"), uuids_[2]) << d.line;
  Answer v = p.Do("meminfo");
  EXPECT_EQ(v.Get("uuid"), uuids_[2]);
  ExpectOneView(v, 1 * kGiB);
  EXPECT_EQ(p.Do("context 1").Int("r"), CUDA_ERROR_INVALID_DEVICE);
}

}  // namespace
}  // namespace hami::testing
