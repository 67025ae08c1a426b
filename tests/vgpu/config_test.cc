// What libvgpu.so makes of its variables: the options table, the limits file and the
// resolution of both with the environment (src/vgpu/config.h). In-process, no preload.
#include "vgpu/config.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "common/file.h"
#include "common/temp_dir.h"
#include "limits/vocabulary.h"

namespace hami::vgpu {
namespace {

using ::testing::AllOf;
using ::testing::Contains;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::Not;
using ::testing::Pair;
using ::testing::SizeIs;
using ::testing::StartsWith;

constexpr uint64_t kKiB = 1ull << 10;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kTiB = 1ull << 40;

using EnvMap = std::map<std::string, std::string>;

// Resolves `env` and, when given, `file_text` as the limits file at kLimitsFilePath.
Resolution Resolve(const EnvMap& env, std::optional<std::string_view> file_text = std::nullopt) {
  LimitsFile file;
  file.path = kLimitsFilePath;
  if (file_text) file = ParseLimitsFile(*file_text, kLimitsFilePath);
  return ResolveConfig(file, [&env](const char* name) -> const char* {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  });
}

const Setting* FindSetting(const Config& config, std::string_view name) {
  for (const Setting& s : config.settings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

// "CUDA_DEVICE_MEMORY_LIMIT='x': why" is how every bad value is named.
::testing::Matcher<const std::vector<std::string>&> HasProblemNaming(const std::string& name,
                                                                     const std::string& value) {
  return Contains(StartsWith(name + "='" + value + "'"));
}

constexpr uint64_t kZeroBudget = region::layout::kZeroBudgetBytes;
constexpr uint32_t kStrictest = region::layout::kStrictestSmPercent;
constexpr const char* kZeroBudgetText = "no allocation is admitted (a zero memory budget)";
constexpr const char* kStrictestText = "the compute share is the strictest, 1%";
constexpr const char* kNoHostMemoryText = "nothing is served from host memory";

// --- The vocabulary ------------------------------------------------------------------------

// Every variable of limits/vocabulary.def, written by its typed writer into a limits file (as
// the device plugin and `hami run` write), reaches the field libvgpu.so fills from it, with the
// value written. A row added to the vocabulary fails the count below until it is added here.
TEST(ConfigVocabulary, EveryTypedWriterReachesTheLibrarysFieldUnchanged) {
  const std::vector<limits::Entry> entries = {
      limits::SetMemoryLimit(3000 * kMiB),
      limits::SetDeviceMemoryLimit(2, 512 * kMiB),
      limits::SetSmLimit(30),
      limits::SetDeviceSmLimit(1, 60),
      limits::SetSharedCache("/var/run/hami/usage.cache"),
      limits::SetCorePolicy(limits::CorePolicy::kForce),
      limits::SetTaskPriority(0),
      limits::SetLogLevel(4),
      limits::SetOversubscribe(true),
      limits::SetOversubscribeHostLimit(6 * kMiB),
      limits::SetHostPidBroker(true),
      limits::SetHostProcfs("/host/proc"),
      limits::SetIdentityTiers(0b0101),
      limits::SetIdentityProbeLock("/var/lock/probe.lock"),
      limits::SetIdentityProbeWaitMs(1234),
      limits::SetUnaccountedPolicy(limits::UnaccountedPolicy::kSuspend),
      limits::SetUnaccountedTolerance(8 * kMiB),
      limits::SetVisibleDevices(std::string("1,0")),
  };
  // HAMI_LIMITS_FORMAT is the one the file's writer adds.
  ASSERT_EQ(entries.size() + 1, limits::Keys().size());
  auto text = limits::LimitsText(entries);
  ASSERT_TRUE(text.ok()) << text.error().message();
  Resolution r = Resolve({}, *text);
  EXPECT_THAT(r.problems, IsEmpty()) << *text;
  EXPECT_THAT(r.closed, IsEmpty()) << *text;
  const Config& c = r.config;
  for (int d = 0; d < kMaxDevices; ++d) {
    EXPECT_EQ(c.memory_limit[size_t(d)], d == 2 ? 512 * kMiB : 3000 * kMiB) << d;
    EXPECT_EQ(c.sm_limit[size_t(d)], d == 1 ? 60u : 30u) << d;
  }
  EXPECT_EQ(c.shared_cache, "/var/run/hami/usage.cache");
  EXPECT_EQ(c.core_policy, region::layout::CorePolicy::kForce);
  EXPECT_EQ(c.priority, 0);
  EXPECT_EQ(c.log_level, 4);
  EXPECT_TRUE(c.oversubscribe);
  EXPECT_EQ(c.host_limit, std::optional<uint64_t>(6 * kMiB));
  EXPECT_TRUE(c.hostpid_broker);
  EXPECT_EQ(c.host_procfs, "/host/proc");
  EXPECT_EQ(c.identity_tiers, 0b0101);
  EXPECT_EQ(c.probe_lock, "/var/lock/probe.lock");
  EXPECT_EQ(c.probe_wait_ms, 1234u);
  EXPECT_EQ(c.unaccounted_policy, UnaccountedPolicy::kSuspend);
  EXPECT_EQ(c.unaccounted_tolerance, 8 * kMiB);
  EXPECT_EQ(c.limits_format, 1u);
  EXPECT_EQ(c.visible_devices, std::optional<std::string>("1,0"));
  // And each was taken from the file, under the vocabulary's name.
  for (const limits::Entry& e : entries) {
    const Setting* s = FindSetting(c, e.first);
    ASSERT_NE(s, nullptr) << e.first;
    EXPECT_EQ(s->source, Source::kLimitsFile) << e.first;
    EXPECT_EQ(s->value, e.second) << e.first;
  }
}

// The options table lists the vocabulary's variables, in its order, under its names.
TEST(ConfigVocabulary, TheOptionsTableIsTheVocabularys) {
  std::span<const OptionInfo> table = OptionTable();
  ASSERT_EQ(table.size(), limits::Keys().size());
  for (size_t i = 0; i < table.size(); ++i) {
    EXPECT_STREQ(table[i].name, limits::Keys()[i].name) << i;
  }
}

// --- Quantities -------------------------------------------------------------------------

class MemoryQuantity : public ::testing::TestWithParam<std::tuple<const char*, uint64_t>> {};

TEST_P(MemoryQuantity, IsReadInBinaryUnitsForEveryDevice) {
  const auto& [text, bytes] = GetParam();
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", text}});
  EXPECT_THAT(r.problems, IsEmpty());
  for (int d = 0; d < kMaxDevices; ++d) {
    EXPECT_EQ(r.config.memory_limit[size_t(d)], bytes) << text << " on device " << d;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Config, MemoryQuantity,
    ::testing::Values(std::make_tuple("4096", 4096ull), std::make_tuple("1k", kKiB),
                      std::make_tuple("1K", kKiB), std::make_tuple("3000m", 3000 * kMiB),
                      std::make_tuple("3000M", 3000 * kMiB), std::make_tuple("2g", 2 * kGiB),
                      std::make_tuple("2G", 2 * kGiB), std::make_tuple("1t", kTiB),
                      std::make_tuple("1T", kTiB), std::make_tuple("0", 0ull),
                      std::make_tuple("0g", 0ull)));

class BadMemoryQuantity : public ::testing::TestWithParam<const char*> {};

TEST_P(BadMemoryQuantity, GivesEveryDeviceAZeroBudgetNamingTheVariableAndTheConsequence) {
  const char* text = GetParam();
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", text}});
  EXPECT_THAT(r.closed, HasProblemNaming("CUDA_DEVICE_MEMORY_LIMIT", text));
  EXPECT_THAT(r.closed, ElementsAre(HasSubstr(kZeroBudgetText)));
  EXPECT_THAT(r.problems, IsEmpty());
  for (int d = 0; d < kMaxDevices; ++d) EXPECT_EQ(r.config.memory_limit[size_t(d)], kZeroBudget);
  const Setting* s = FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, text);
  EXPECT_TRUE(s->closed);
}

INSTANTIATE_TEST_SUITE_P(Config, BadMemoryQuantity,
                         ::testing::Values("", "g", "1.5g", "1gb", "1 g", " 1g", "-1", "+1", "1p",
                                           "0x10", "18446744073709551616", "17179869184g"));

TEST(Config, ZeroMemoryLimitMeansUnlimitedAndStillBeatsTheEnvironment) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "4g"}}, "CUDA_DEVICE_MEMORY_LIMIT=0\n");
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_EQ(r.config.memory_limit[0], 0u);
  const Setting* s = FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, "0");
  EXPECT_EQ(s->source, Source::kLimitsFile);
}

TEST(Config, SmLimitIsAPercentage) {
  EXPECT_EQ(Resolve({{"CUDA_DEVICE_SM_LIMIT", "30"}}).config.sm_limit[3], 30u);
  EXPECT_EQ(Resolve({{"CUDA_DEVICE_SM_LIMIT", "100"}}).config.sm_limit[0], 100u);
  EXPECT_EQ(Resolve({{"CUDA_DEVICE_SM_LIMIT", "0"}}).config.sm_limit[0], 0u);
  for (const char* bad : {"101", "30%", "-5", "", "half"}) {
    Resolution r = Resolve({{"CUDA_DEVICE_SM_LIMIT", bad}});
    EXPECT_THAT(r.closed, HasProblemNaming("CUDA_DEVICE_SM_LIMIT", bad));
    EXPECT_THAT(r.closed, ElementsAre(HasSubstr(kStrictestText)));
    EXPECT_EQ(r.config.sm_limit[0], kStrictest) << bad;
    EXPECT_EQ(r.config.sm_limit[kMaxDevices - 1], kStrictest) << bad;
  }
}

// --- Defaults and the other options -------------------------------------------------------

TEST(Config, NothingSetGivesTheDefaultsAndNoSettings) {
  Resolution r = Resolve({});
  const Config& c = r.config;
  EXPECT_THAT(r.problems, IsEmpty());
  for (int d = 0; d < kMaxDevices; ++d) {
    EXPECT_EQ(c.memory_limit[size_t(d)], 0u);
    EXPECT_EQ(c.sm_limit[size_t(d)], 0u);
  }
  EXPECT_EQ(c.shared_cache, "/tmp/cudevshr.cache");
  EXPECT_EQ(c.core_policy, region::layout::CorePolicy::kDefault);
  EXPECT_EQ(c.priority, 1);
  EXPECT_EQ(c.log_level, 2);
  EXPECT_FALSE(c.oversubscribe);
  EXPECT_FALSE(c.hostpid_broker);
  EXPECT_EQ(c.host_procfs, "");
  EXPECT_FALSE(c.visible_devices.has_value());
  EXPECT_THAT(c.settings, IsEmpty());
}

TEST(Config, CoreUtilizationPolicyIgnoresCase) {
  using region::layout::CorePolicy;
  EXPECT_EQ(Resolve({{"GPU_CORE_UTILIZATION_POLICY", "FORCE"}}).config.core_policy,
            CorePolicy::kForce);
  EXPECT_EQ(Resolve({{"GPU_CORE_UTILIZATION_POLICY", "Disable"}}).config.core_policy,
            CorePolicy::kDisable);
  Resolution r =
      Resolve({{"GPU_CORE_UTILIZATION_POLICY", "default"}}, "GPU_CORE_UTILIZATION_POLICY=force\n");
  EXPECT_EQ(r.config.core_policy, CorePolicy::kForce);
  Resolution bad = Resolve({{"GPU_CORE_UTILIZATION_POLICY", "off"}});
  EXPECT_THAT(bad.problems, HasProblemNaming("GPU_CORE_UTILIZATION_POLICY", "off"));
  EXPECT_EQ(bad.config.core_policy, CorePolicy::kDefault);
}

TEST(Config, TheUnaccountedPolicyReportsByDefaultAndSuspendsWhenAsked) {
  EXPECT_EQ(Resolve({}).config.unaccounted_policy, UnaccountedPolicy::kReport);
  EXPECT_EQ(Resolve({}).config.unaccounted_tolerance, region::kDefaultUnaccountedToleranceBytes);
  EXPECT_EQ(Resolve({{"HAMI_UNACCOUNTED_POLICY", "Suspend"}}).config.unaccounted_policy,
            UnaccountedPolicy::kSuspend);
  EXPECT_EQ(Resolve({{"HAMI_UNACCOUNTED_TOLERANCE", "16m"}}).config.unaccounted_tolerance,
            16ull << 20);
  Resolution bad = Resolve({{"HAMI_UNACCOUNTED_POLICY", "ignore"}});
  EXPECT_THAT(bad.problems, HasProblemNaming("HAMI_UNACCOUNTED_POLICY", "ignore"));
  EXPECT_EQ(bad.config.unaccounted_policy, UnaccountedPolicy::kReport);
  Resolution bad_size = Resolve({{"HAMI_UNACCOUNTED_TOLERANCE", "lots"}});
  EXPECT_THAT(bad_size.problems, HasProblemNaming("HAMI_UNACCOUNTED_TOLERANCE", "lots"));
  EXPECT_EQ(bad_size.config.unaccounted_tolerance, region::kDefaultUnaccountedToleranceBytes);
}

TEST(Config, TaskPriorityIsZeroOrOne) {
  EXPECT_EQ(Resolve({{"CUDA_TASK_PRIORITY", "0"}}).config.priority, 0);
  EXPECT_EQ(Resolve({{"CUDA_TASK_PRIORITY", "1"}}).config.priority, 1);
  Resolution bad = Resolve({{"CUDA_TASK_PRIORITY", "2"}});
  EXPECT_THAT(bad.problems, HasProblemNaming("CUDA_TASK_PRIORITY", "2"));
  EXPECT_EQ(bad.config.priority, 1);
}

TEST(Config, LogLevelRunsFromZeroToFour) {
  EXPECT_EQ(Resolve({{"LIBCUDA_LOG_LEVEL", "0"}}).config.log_level, 0);
  EXPECT_EQ(Resolve({{"LIBCUDA_LOG_LEVEL", "4"}}).config.log_level, 4);
  Resolution bad = Resolve({{"LIBCUDA_LOG_LEVEL", "5"}});
  EXPECT_THAT(bad.problems, HasProblemNaming("LIBCUDA_LOG_LEVEL", "5"));
  EXPECT_EQ(bad.config.log_level, 2);
}

TEST(Config, OversubscribeTakesTheUsualBooleansInAnyCase) {
  for (const char* on : {"true", "TRUE", "1", "yes", "On"}) {
    EXPECT_TRUE(Resolve({{"CUDA_OVERSUBSCRIBE", on}}).config.oversubscribe) << on;
  }
  for (const char* off : {"false", "0", "NO", "off"}) {
    EXPECT_FALSE(Resolve({{"CUDA_OVERSUBSCRIBE", off}}).config.oversubscribe) << off;
  }
  Resolution bad = Resolve({{"CUDA_OVERSUBSCRIBE", "maybe"}});
  EXPECT_THAT(bad.problems, HasProblemNaming("CUDA_OVERSUBSCRIBE", "maybe"));
  EXPECT_FALSE(bad.config.oversubscribe);
}

// Unset, the host budget follows the device limits (resolved when the region is made); set,
// it is a size as the memory limits are, and 0 allows no host memory.
TEST(Config, TheHostBudgetIsASizeAndUnsetFollowsTheDeviceLimits) {
  EXPECT_EQ(Resolve({}).config.host_limit, std::nullopt);
  EXPECT_EQ(Resolve({{"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "3g"}}).config.host_limit,
            std::optional<uint64_t>(3 * kGiB));
  EXPECT_EQ(Resolve({{"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "0"}}).config.host_limit,
            std::optional<uint64_t>(0));
  Resolution r =
      Resolve({{"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "8g"}}, "CUDA_OVERSUBSCRIBE_HOST_LIMIT=1536m\n");
  EXPECT_EQ(r.config.host_limit, std::optional<uint64_t>(1536 * kMiB)) << "the file's wins";
  EXPECT_THAT(r.closed, IsEmpty());
}

// A host budget that cannot be read is no oversubscription at all (never the default, which
// would allow as much host memory as the device limits), said naming the variable.
TEST(Config, AMalformedHostBudgetAllowsNoHostMemoryAndNamesTheVariable) {
  for (const char* bad : {"1.5g", "lots", "-1", "4gb", ""}) {
    Resolution r =
        Resolve({{"CUDA_OVERSUBSCRIBE", "true"}, {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", bad}});
    EXPECT_THAT(
        r.closed,
        ElementsAre(AllOf(StartsWith("CUDA_OVERSUBSCRIBE_HOST_LIMIT='" + std::string(bad) + "'"),
                          HasSubstr(kNoHostMemoryText))))
        << bad;
    EXPECT_EQ(r.config.host_limit, std::optional<uint64_t>(0)) << bad;
    EXPECT_TRUE(r.config.oversubscribe) << bad;
  }
  // In the file, and on a line that could not be read, the environment's does not stand in.
  using namespace std::string_literals;
  for (const std::string& file :
       {"CUDA_OVERSUBSCRIBE_HOST_LIMIT=2 g\n"s, "CUDA_OVERSUBSCRIBE_HOST_LIMIT 2g\n"s}) {
    Resolution r = Resolve({{"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "4g"}}, file);
    EXPECT_THAT(r.closed,
                ElementsAre(AllOf(StartsWith("CUDA_OVERSUBSCRIBE_HOST_LIMIT"),
                                  HasSubstr("(in /overrideEnv)"), HasSubstr(kNoHostMemoryText))))
        << file;
    EXPECT_EQ(r.config.host_limit, std::optional<uint64_t>(0)) << file;
  }
}

TEST(Config, OnlyTheExactValueOneEnablesTheHostPidBroker) {
  EXPECT_TRUE(Resolve({{"LIBVGPU_HOSTPID_BROKER", "1"}}).config.hostpid_broker);
  Resolution off = Resolve({{"LIBVGPU_HOSTPID_BROKER", "0"}});
  EXPECT_FALSE(off.config.hostpid_broker);
  EXPECT_THAT(off.problems, IsEmpty());
  for (const char* other : {"true", "yes", "01", " 1"}) {
    Resolution r = Resolve({{"LIBVGPU_HOSTPID_BROKER", other}});
    EXPECT_FALSE(r.config.hostpid_broker) << other;
    EXPECT_THAT(r.problems, HasProblemNaming("LIBVGPU_HOSTPID_BROKER", other));
  }
}

TEST(Config, PathsMustBeAbsolute) {
  EXPECT_EQ(Resolve({{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/run/usage.cache"}}).config.shared_cache,
            "/run/usage.cache");
  Resolution cache = Resolve({{"CUDA_DEVICE_MEMORY_SHARED_CACHE", "usage.cache"}});
  EXPECT_THAT(cache.problems, HasProblemNaming("CUDA_DEVICE_MEMORY_SHARED_CACHE", "usage.cache"));
  EXPECT_EQ(cache.config.shared_cache, "/tmp/cudevshr.cache");

  EXPECT_EQ(Resolve({{"LIBVGPU_HOST_PROCFS", "/host/proc"}}).config.host_procfs, "/host/proc");
  Resolution procfs = Resolve({{"LIBVGPU_HOST_PROCFS", "proc"}});
  EXPECT_THAT(procfs.problems, HasProblemNaming("LIBVGPU_HOST_PROCFS", "proc"));
  EXPECT_EQ(procfs.config.host_procfs, "");
}

TEST(Config, VisibleDevicesAreKeptAsGivenEvenWhenEmpty) {
  EXPECT_EQ(Resolve({{"CUDA_VISIBLE_DEVICES", "1,GPU-abc"}}).config.visible_devices,
            std::optional<std::string>("1,GPU-abc"));
  // Set but empty means "no devices", which is not the same as unset.
  EXPECT_EQ(Resolve({{"CUDA_VISIBLE_DEVICES", ""}}).config.visible_devices,
            std::optional<std::string>(""));
}

// --- Precedence ---------------------------------------------------------------------------

TEST(Config, LimitsFileValueBeatsTheEnvironments) {
  Resolution r =
      Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}, {"CUDA_DEVICE_SM_LIMIT", "50"}},
              "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_SM_LIMIT=20\nHAMI_LIMITS_FORMAT=1\n");
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
  EXPECT_EQ(r.config.sm_limit[0], 20u);
  const Setting* s = FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, "1g");
  EXPECT_EQ(s->source, Source::kLimitsFile);
}

TEST(Config, EnvironmentAppliesWhereTheFileIsSilent) {
  Resolution r = Resolve({{"CUDA_DEVICE_SM_LIMIT", "50"}, {"CUDA_TASK_PRIORITY", "0"}},
                         "CUDA_DEVICE_MEMORY_LIMIT=1g\nHAMI_LIMITS_FORMAT=1\n");
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
  EXPECT_EQ(r.config.sm_limit[0], 50u);
  EXPECT_EQ(r.config.priority, 0);
  const Setting* s = FindSetting(r.config, "CUDA_DEVICE_SM_LIMIT");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->source, Source::kEnvironment);
}

// Which source holds the per-device and which the all-devices variable.
struct PerDeviceCase {
  Source per_device;
  Source all_devices;
};

class PerDeviceVariable : public ::testing::TestWithParam<PerDeviceCase> {
 protected:
  // Puts name=value in the environment or in the limits-file text.
  void Put(Source where, const std::string& name, const std::string& value) {
    if (where == Source::kEnvironment) {
      env_[name] = value;
    } else {
      file_ += name + "=" + value + "\n";
    }
  }
  EnvMap env_;
  std::string file_ = "HAMI_LIMITS_FORMAT=1\n";
};

TEST_P(PerDeviceVariable, BeatsTheAllDevicesOneWhicheverSourceEachCameFrom) {
  const PerDeviceCase& c = GetParam();
  Put(c.per_device, "CUDA_DEVICE_MEMORY_LIMIT_1", "1g");
  Put(c.per_device, "CUDA_DEVICE_SM_LIMIT_0", "20");
  Put(c.all_devices, "CUDA_DEVICE_MEMORY_LIMIT", "3g");
  Put(c.all_devices, "CUDA_DEVICE_SM_LIMIT", "50");
  Resolution r = Resolve(env_, file_);
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_EQ(r.config.memory_limit[0], 3 * kGiB);
  EXPECT_EQ(r.config.memory_limit[1], kGiB);
  EXPECT_EQ(r.config.memory_limit[2], 3 * kGiB);
  EXPECT_EQ(r.config.memory_limit[kMaxDevices - 1], 3 * kGiB);
  EXPECT_EQ(r.config.sm_limit[0], 20u);
  EXPECT_EQ(r.config.sm_limit[1], 50u);
  for (const char* name : {"CUDA_DEVICE_MEMORY_LIMIT_1", "CUDA_DEVICE_SM_LIMIT_0"}) {
    const Setting* s = FindSetting(r.config, name);
    ASSERT_NE(s, nullptr) << name;
    EXPECT_EQ(s->source, c.per_device) << name;
  }
  const Setting* all = FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT");
  ASSERT_NE(all, nullptr);
  EXPECT_EQ(all->source, c.all_devices);
}

INSTANTIATE_TEST_SUITE_P(
    Config, PerDeviceVariable,
    ::testing::Values(PerDeviceCase{Source::kEnvironment, Source::kEnvironment},
                      PerDeviceCase{Source::kEnvironment, Source::kLimitsFile},
                      PerDeviceCase{Source::kLimitsFile, Source::kEnvironment},
                      PerDeviceCase{Source::kLimitsFile, Source::kLimitsFile}));

TEST(Config, PerDeviceValueInTheFileBeatsTheSameVariableInTheEnvironment) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT_2", "5g"}}, "CUDA_DEVICE_MEMORY_LIMIT_2=1g\n");
  EXPECT_EQ(r.config.memory_limit[2], kGiB);
  EXPECT_EQ(r.config.memory_limit[0], 0u);
  const Setting* s = FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT_2");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->source, Source::kLimitsFile);
}

TEST(Config, TheHighestDeviceIndexIsReadAndTheNextIsNot) {
  std::string last = "CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(kMaxDevices - 1);
  std::string beyond = "CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(kMaxDevices);
  Resolution env = Resolve({{last, "1g"}, {beyond, "2g"}});
  EXPECT_EQ(env.config.memory_limit[kMaxDevices - 1], kGiB);
  EXPECT_EQ(FindSetting(env.config, beyond), nullptr);

  Resolution file = Resolve({}, beyond + "=2g\n");
  EXPECT_EQ(FindSetting(file.config, beyond), nullptr);
  EXPECT_THAT(file.notes, Contains(HasSubstr(beyond + " is not a variable libvgpu reads")));
}

TEST(Config, PerDeviceNamesAreOnlyTheDecimalOrdinalAsInTheEnvironment) {
  // The environment is only ever asked for CUDA_DEVICE_MEMORY_LIMIT_1, never _01; the file
  // must mean the same names, or a file's _01 would lose to the environment's _1.
  Resolution r =
      Resolve({{"CUDA_DEVICE_MEMORY_LIMIT_1", "2g"}, {"CUDA_DEVICE_MEMORY_LIMIT_01", "3g"}},
              "CUDA_DEVICE_MEMORY_LIMIT_01=1g\nHAMI_LIMITS_FORMAT=1\n");
  EXPECT_EQ(r.config.memory_limit[1], 2 * kGiB);
  EXPECT_EQ(FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT_01"), nullptr);
  EXPECT_THAT(r.notes,
              Contains(HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_01 is not a variable libvgpu reads")));
}

// --- Malformed values ----------------------------------------------------------------------

// The file's value is the one the process was given: the environment's (older, or another
// container's) never stands in for it.
TEST(Config, MalformedFileLimitFailsClosedEvenWhenTheEnvironmentHasOne) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}},
                         "CUDA_DEVICE_MEMORY_LIMIT=lots\nHAMI_LIMITS_FORMAT=1\n");
  EXPECT_THAT(r.closed, ElementsAre(AllOf(StartsWith("CUDA_DEVICE_MEMORY_LIMIT='lots'"),
                                          HasSubstr("(in /overrideEnv)"),
                                          HasSubstr("on every device without a value of its own"),
                                          HasSubstr(kZeroBudgetText))));
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_EQ(r.config.memory_limit[0], kZeroBudget);
  const Setting* s = FindSetting(r.config, "CUDA_DEVICE_MEMORY_LIMIT");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, "lots");
  EXPECT_EQ(s->source, Source::kLimitsFile);
}

TEST(Config, MalformedEnvironmentLimitFailsClosedWithoutNamingTheFile) {
  Resolution r = Resolve({{"CUDA_DEVICE_SM_LIMIT", "150"}}, "HAMI_LIMITS_FORMAT=1\n");
  ASSERT_THAT(r.closed, ElementsAre(StartsWith("CUDA_DEVICE_SM_LIMIT='150'")));
  EXPECT_THAT(r.closed[0], ::testing::Not(HasSubstr("/overrideEnv")));
  EXPECT_EQ(r.config.sm_limit[0], kStrictest);
}

// A valid file value is what the process was given; the environment's is never read.
TEST(Config, AMalformedEnvironmentLimitUnderAValidFileOneIsNotRead) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "lots"}}, "CUDA_DEVICE_MEMORY_LIMIT=1g\n");
  EXPECT_THAT(r.closed, IsEmpty());
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
}

TEST(Config, MalformedEverywhereLeavesTheDefaultAndReportsEachSource) {
  Resolution r = Resolve({{"CUDA_TASK_PRIORITY", "low"}}, "CUDA_TASK_PRIORITY=high\n");
  EXPECT_THAT(r.problems, HasProblemNaming("CUDA_TASK_PRIORITY", "high"));
  EXPECT_THAT(r.problems, HasProblemNaming("CUDA_TASK_PRIORITY", "low"));
  EXPECT_EQ(r.config.priority, 1);
  EXPECT_EQ(FindSetting(r.config, "CUDA_TASK_PRIORITY"), nullptr);
}

TEST(Config, MalformedPerDeviceLimitClosesThatDeviceOnly) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT_1", "1gig"}}, "CUDA_DEVICE_MEMORY_LIMIT=3g\n");
  EXPECT_THAT(r.closed,
              ElementsAre(AllOf(StartsWith("CUDA_DEVICE_MEMORY_LIMIT_1='1gig'"),
                                HasSubstr("on device 1 " + std::string(kZeroBudgetText)))));
  EXPECT_EQ(r.config.memory_limit[1], kZeroBudget);
  EXPECT_EQ(r.config.memory_limit[0], 3 * kGiB);
  EXPECT_EQ(r.config.memory_limit[2], 3 * kGiB);
}

TEST(Config, MalformedAllDevicesLimitLeavesTheDevicesWithTheirOwnValue) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "3000 m"}, {"CUDA_DEVICE_SM_LIMIT", "-1"}},
                         "CUDA_DEVICE_MEMORY_LIMIT_0=1g\nCUDA_DEVICE_SM_LIMIT_0=40\n");
  EXPECT_THAT(r.closed, SizeIs(2));
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
  EXPECT_EQ(r.config.sm_limit[0], 40u);
  for (int d = 1; d < kMaxDevices; ++d) {
    EXPECT_EQ(r.config.memory_limit[size_t(d)], kZeroBudget) << d;
    EXPECT_EQ(r.config.sm_limit[size_t(d)], kStrictest) << d;
  }
}

// Seed 003 skips a malformed line; for a line meant to set a limit, skipping would be no
// limit at all. Whatever else the file says about the variable, it is held closed.
TEST(Config, ASkippedLineMeantForALimitFailsItClosed) {
  using namespace std::string_literals;
  for (const std::string& line :
       {"CUDA_DEVICE_MEMORY_LIMIT_0=1g\0junk"s, "CUDA_DEVICE_MEMORY_LIMIT_0 1g"s,
        "CUDA_DEVICE_MEMORY_LIMIT_0 =1g"s}) {
    Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT_0", "8g"}},
                           line + "\nCUDA_DEVICE_MEMORY_LIMIT_0=2g\nCUDA_DEVICE_SM_LIMIT=30\n");
    EXPECT_THAT(r.closed,
                ElementsAre(AllOf(StartsWith("CUDA_DEVICE_MEMORY_LIMIT_0: its line"),
                                  HasSubstr("(in /overrideEnv)"), HasSubstr(kZeroBudgetText))))
        << line;
    EXPECT_EQ(r.config.memory_limit[0], kZeroBudget) << line;
    EXPECT_EQ(r.config.memory_limit[1], 0u) << line;
    EXPECT_EQ(r.config.sm_limit[0], 30u) << line;
    ASSERT_FALSE(r.problems.empty()) << line;  // the file's own report of the line
  }
}

TEST(Config, ASkippedLineForAnotherVariableIsOnlyReported) {
  using namespace std::string_literals;
  Resolution r = Resolve({}, "CUDA_DEVICE_MEMORY_SHARED_CACHE=/a\0b\nLIBCUDA_LOG_LEVEL 3\n"s);
  EXPECT_THAT(r.closed, IsEmpty());
  EXPECT_THAT(r.problems, SizeIs(2));
  EXPECT_EQ(r.config.memory_limit[0], 0u);
}

TEST(Config, AZeroBudgetReadsAsOne) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "lots"}});
  size_t row = 0;
  while (std::string_view(OptionTable()[row].name) != "CUDA_DEVICE_MEMORY_LIMIT") ++row;
  OptionValue v = DescribeOption(r.config, row, 0);
  EXPECT_THAT(v.text, HasSubstr("zero budget"));
  EXPECT_EQ(v.number, kZeroBudget);
}

TEST(Config, LaterLineForTheSameVariableReplacesTheEarlierOne) {
  Resolution r = Resolve({}, "CUDA_DEVICE_MEMORY_LIMIT=1g\nCUDA_DEVICE_MEMORY_LIMIT=2g\n");
  EXPECT_EQ(r.config.memory_limit[0], 2 * kGiB);
  EXPECT_EQ(std::count_if(r.config.settings.begin(), r.config.settings.end(),
                          [](const Setting& s) { return s.name == "CUDA_DEVICE_MEMORY_LIMIT"; }),
            1);
}

// --- The limits file ----------------------------------------------------------------------

TEST(LimitsFile, KeepsEntriesInFileOrderAndValuesWhole) {
  LimitsFile f = ParseLimitsFile(
      "HAMI_LIMITS_FORMAT=1\r\n\nCUDA_VISIBLE_DEVICES=a=b\nCUDA_DEVICE_MEMORY_LIMIT=", "/f");
  EXPECT_TRUE(f.present);
  EXPECT_EQ(f.path, "/f");
  EXPECT_THAT(f.problems, IsEmpty());
  EXPECT_THAT(f.entries,
              ElementsAre(Pair("HAMI_LIMITS_FORMAT", "1"), Pair("CUDA_VISIBLE_DEVICES", "a=b"),
                          Pair("CUDA_DEVICE_MEMORY_LIMIT", "")));
}

TEST(LimitsFile, SkipsMalformedLinesAndReportsTheirNumbers) {
  LimitsFile f = ParseLimitsFile(
      "CUDA_DEVICE_MEMORY_LIMIT=1g\n"
      "garbage\n"
      "\n"
      "cuda_device_sm_limit=30\n"
      "=5\n"
      "CUDA_DEVICE_SM_LIMIT =30\n"
      "# a comment\n"
      "CUDA_DEVICE_SM_LIMIT=30\n",
      "/overrideEnv");
  EXPECT_THAT(f.entries, ElementsAre(Pair("CUDA_DEVICE_MEMORY_LIMIT", "1g"),
                                     Pair("CUDA_DEVICE_SM_LIMIT", "30")));
  EXPECT_THAT(f.problems,
              ElementsAre("/overrideEnv line 2 'garbage': not KEY=VALUE; skipped",
                          "/overrideEnv line 4 'cuda_device_sm_limit=30': the key is not a "
                          "variable name; skipped",
                          "/overrideEnv line 5 '=5': the key is not a variable name; skipped",
                          "/overrideEnv line 6 'CUDA_DEVICE_SM_LIMIT =30': the key is not a "
                          "variable name; skipped",
                          "/overrideEnv line 7 '# a comment': not KEY=VALUE; skipped"));
}

TEST(LimitsFile, ShowsAtMostEightyCharactersOfABadLine) {
  std::string line(200, 'x');
  LimitsFile f = ParseLimitsFile(line, "/f");
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_EQ(f.problems[0], "/f line 1 '" + std::string(80, 'x') + "': not KEY=VALUE; skipped");
}

TEST(LimitsFile, LineWithANulByteIsSkippedAndReportedReadably) {
  // A NUL would cut the value short wherever it is used as a C string.
  using namespace std::string_literals;
  LimitsFile f = ParseLimitsFile(
      "CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/a\0/b\nCUDA_DEVICE_MEMORY_LIMIT=1g\n"s, "/f");
  EXPECT_THAT(f.entries, ElementsAre(Pair("CUDA_DEVICE_MEMORY_LIMIT", "1g")));
  ASSERT_EQ(f.problems.size(), 1u);
  EXPECT_THAT(f.problems[0], StartsWith("/f line 1 'CUDA_DEVICE_MEMORY_SHARED_CACHE=/tmp/a"));
  EXPECT_THAT(f.problems[0], HasSubstr("NUL"));
  EXPECT_EQ(f.problems[0].find('\0'), std::string::npos);
}

TEST(LimitsFile, MalformedLinesAreReportedAndTheRestApplies) {
  Resolution r = Resolve({{"CUDA_DEVICE_SM_LIMIT", "70"}},
                         "CUDA_DEVICE_MEMORY_LIMIT=1g\n"
                         "not a setting\n"
                         "CUDA_DEVICE_SM_LIMIT=30\n"
                         "HAMI_LIMITS_FORMAT=1\n");
  EXPECT_THAT(r.problems, ElementsAre(StartsWith("/overrideEnv line 2 'not a setting'")));
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
  EXPECT_EQ(r.config.sm_limit[0], 30u);
}

TEST(LimitsFile, UnknownVariablesAreNotedAndIgnored) {
  Resolution r = Resolve({}, "NVIDIA_VISIBLE_DEVICES=all\nHAMI_LIMITS_FORMAT=1\n");
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_THAT(r.notes, ElementsAre("/overrideEnv: NVIDIA_VISIBLE_DEVICES is not a variable "
                                   "libvgpu reads; ignored"));
  EXPECT_EQ(FindSetting(r.config, "NVIDIA_VISIBLE_DEVICES"), nullptr);
}

TEST(LimitsFile, AbsentFileIsANoteNotAProblem) {
  Resolution r = Resolve({{"CUDA_DEVICE_MEMORY_LIMIT", "2g"}});
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_THAT(r.notes, ElementsAre("/overrideEnv absent: limits come from the environment"));
  EXPECT_EQ(r.config.memory_limit[0], 2 * kGiB);
}

TEST(LimitsFile, ReadingAMissingOrEmptyFileGivesAnAbsentFile) {
  TempDir dir("hami-config-test");
  ASSERT_TRUE(dir.ok());
  LimitsFile missing = ReadLimitsFile(dir.File("none"));
  EXPECT_FALSE(missing.present);
  EXPECT_THAT(missing.problems, IsEmpty());

  std::string empty_path = dir.File("empty");
  {
    auto fd = OpenRegularFile(empty_path, O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(fd.ok());
  }
  LimitsFile empty = ReadLimitsFile(empty_path);
  EXPECT_FALSE(empty.present);
  EXPECT_THAT(empty.problems, IsEmpty());
  EXPECT_EQ(empty.path, empty_path);

  std::string full_path = dir.File("limits");
  {
    auto fd = OpenRegularFile(full_path, O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(fd.ok());
    ASSERT_TRUE(WriteAll(fd->get(), "CUDA_DEVICE_MEMORY_LIMIT=1g\nbad\n").ok());
  }
  LimitsFile full = ReadLimitsFile(full_path);
  EXPECT_TRUE(full.present);
  EXPECT_THAT(full.entries, ElementsAre(Pair("CUDA_DEVICE_MEMORY_LIMIT", "1g")));
  EXPECT_THAT(full.problems, ElementsAre(StartsWith(full_path + " line 2 'bad'")));
}

TEST(LimitsFile, UnreadableFileIsAProblemNamingIt) {
  TempDir dir("hami-config-test");
  ASSERT_TRUE(dir.ok());
  // A directory where the file should be: it exists but cannot be read as one.
  LimitsFile f = ReadLimitsFile(dir.path());
  EXPECT_FALSE(f.present);
  EXPECT_TRUE(f.unreadable);
  EXPECT_THAT(f.problems, ElementsAre(HasSubstr(dir.path())));
}

// What an unreadable file says is unknown, and it beats the environment: every limit of
// every device is held closed, whatever the environment sets.
TEST(LimitsFile, AnUnreadableOrOversizeFileHoldsEveryDeviceClosed) {
  TempDir dir("hami-config-test");
  ASSERT_TRUE(dir.ok());
  const std::string big = dir.File("big");
  {
    auto fd = OpenRegularFile(big, O_CREAT | O_WRONLY, 0644);
    ASSERT_TRUE(fd.ok());
    std::string text = "CUDA_DEVICE_MEMORY_LIMIT=1g\n";
    text += std::string(limits::kMaxFileBytes, '#');
    ASSERT_TRUE(WriteAll(fd->get(), text).ok());
  }
  for (const std::string& path : {dir.path(), big}) {
    LimitsFile f = ReadLimitsFile(path);
    ASSERT_TRUE(f.unreadable) << path;
    Resolution r = ResolveConfig(f, [](const char* name) -> const char* {
      std::string_view n = name;
      if (n == "CUDA_DEVICE_MEMORY_LIMIT" || n == "CUDA_DEVICE_MEMORY_LIMIT_0") return "8g";
      if (n == "CUDA_DEVICE_SM_LIMIT_1") return "50";
      return nullptr;
    });
    EXPECT_THAT(
        r.closed,
        ElementsAre(
            AllOf(StartsWith("CUDA_DEVICE_MEMORY_LIMIT: " + path), HasSubstr(kZeroBudgetText)),
            AllOf(StartsWith("CUDA_DEVICE_SM_LIMIT: " + path), HasSubstr(kStrictestText)),
            AllOf(StartsWith("CUDA_OVERSUBSCRIBE_HOST_LIMIT: " + path),
                  HasSubstr(kNoHostMemoryText))))
        << path;
    EXPECT_EQ(r.config.host_limit, std::optional<uint64_t>(0)) << path;
    for (int d = 0; d < kMaxDevices; ++d) {
      EXPECT_EQ(r.config.memory_limit[size_t(d)], kZeroBudget) << path << " device " << d;
      EXPECT_EQ(r.config.sm_limit[size_t(d)], kStrictest) << path << " device " << d;
    }
    EXPECT_THAT(r.notes, ::testing::Not(Contains(HasSubstr("absent"))));
  }
}

// --- HAMI_LIMITS_FORMAT -------------------------------------------------------------------

TEST(LimitsFormat, FormatOneIsRecordedWithoutComment) {
  Resolution r = Resolve({}, "CUDA_DEVICE_MEMORY_LIMIT=1g\nHAMI_LIMITS_FORMAT=1\n");
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_THAT(r.notes, IsEmpty());
  const Setting* s = FindSetting(r.config, "HAMI_LIMITS_FORMAT");
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(s->value, "1");
  EXPECT_EQ(s->source, Source::kLimitsFile);
}

TEST(LimitsFormat, MissingFormatLineIsNotedAndTheFileIsReadAsFormatOne) {
  Resolution r = Resolve({}, "CUDA_DEVICE_MEMORY_LIMIT=1g\n");
  EXPECT_THAT(r.problems, IsEmpty());
  EXPECT_THAT(r.notes, ElementsAre("/overrideEnv has no HAMI_LIMITS_FORMAT line; reading it as "
                                   "format 1"));
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
}

TEST(LimitsFormat, UnknownFormatIsAProblemButTheFileStillApplies) {
  Resolution r = Resolve({}, "HAMI_LIMITS_FORMAT=2\nCUDA_DEVICE_MEMORY_LIMIT=1g\n");
  EXPECT_THAT(r.problems, ElementsAre(AllOf(StartsWith("HAMI_LIMITS_FORMAT='2'"),
                                            HasSubstr("reading it as format 1"))));
  EXPECT_EQ(r.config.memory_limit[0], kGiB);
  EXPECT_EQ(FindSetting(r.config, "HAMI_LIMITS_FORMAT"), nullptr);
}

// --- What a running process follows ---------------------------------------------------------

TEST(LimitsFromFile, TakesTheFilesLimitsPerDeviceBeatingAllAndNeverTheEnvironment) {
  ::setenv("CUDA_DEVICE_SM_LIMIT", "10", 1);
  LimitsFile f = ParseLimitsFile(
      "CUDA_DEVICE_MEMORY_LIMIT=2g\nCUDA_DEVICE_MEMORY_LIMIT_1=3g\nHAMI_LIMITS_FORMAT=1\n", "/f");
  FileLimits l = LimitsFromFile(f);
  ::unsetenv("CUDA_DEVICE_SM_LIMIT");
  EXPECT_EQ(l.memory_limit[0], std::optional<uint64_t>(2ull << 30));
  EXPECT_EQ(l.memory_limit[1], std::optional<uint64_t>(3ull << 30));
  EXPECT_EQ(l.memory_limit[2], std::optional<uint64_t>(2ull << 30));
  EXPECT_EQ(l.sm_limit[0], std::nullopt) << "the file sets no SM limit: the process's own stands";
  EXPECT_THAT(l.closed, IsEmpty());
}

TEST(LimitsFromFile, AnAbsentFileLoosensNothingAndAnUnreadableOneClosesEveryDevice) {
  LimitsFile absent;
  absent.path = "/f";
  FileLimits none = LimitsFromFile(absent);
  EXPECT_EQ(none.memory_limit[0], std::nullopt);
  EXPECT_EQ(none.sm_limit[0], std::nullopt);
  LimitsFile unreadable = absent;
  unreadable.unreadable = true;
  FileLimits closed = LimitsFromFile(unreadable);
  EXPECT_EQ(closed.memory_limit[0], std::optional<uint64_t>(region::layout::kZeroBudgetBytes));
  EXPECT_EQ(closed.sm_limit[0], std::optional<uint32_t>(1));
  EXPECT_THAT(closed.closed, Not(IsEmpty()));
}

// The host budget a running process follows: the file's value when it sets one, nothing when it
// does not, and none at all (0, said as closed) when the value or the file cannot be read.
TEST(LimitsFromFile, TheHostBudgetIsTheFilesAndHeldClosedWhenItCannotBeRead) {
  FileLimits set = LimitsFromFile(ParseLimitsFile(
      "CUDA_OVERSUBSCRIBE=true\nCUDA_OVERSUBSCRIBE_HOST_LIMIT=4g\nHAMI_LIMITS_FORMAT=1\n", "/f"));
  EXPECT_EQ(set.host_limit, std::optional<uint64_t>(4ull << 30));
  EXPECT_THAT(set.closed, IsEmpty());
  FileLimits unset =
      LimitsFromFile(ParseLimitsFile("CUDA_DEVICE_MEMORY_LIMIT=1g\nHAMI_LIMITS_FORMAT=1\n", "/f"));
  EXPECT_EQ(unset.host_limit, std::nullopt) << "the process's own stands";
  FileLimits bad = LimitsFromFile(ParseLimitsFile(
      "CUDA_OVERSUBSCRIBE=true\nCUDA_OVERSUBSCRIBE_HOST_LIMIT=lots\nHAMI_LIMITS_FORMAT=1\n", "/f"));
  EXPECT_EQ(bad.host_limit, std::optional<uint64_t>(0)) << "malformed: no host memory, never more";
  EXPECT_THAT(bad.closed, Contains(HasSubstr("CUDA_OVERSUBSCRIBE_HOST_LIMIT")));
  LimitsFile unreadable;
  unreadable.path = "/f";
  unreadable.unreadable = true;
  EXPECT_EQ(LimitsFromFile(unreadable).host_limit, std::optional<uint64_t>(0));
}

TEST(LimitsFileState, ChangesExactlyWhenWhatTheFileConfiguresChanges) {
  const std::string a = "CUDA_DEVICE_MEMORY_LIMIT=1g\nHAMI_LIMITS_FORMAT=1\n";
  EXPECT_EQ(LimitsFileState(ParseLimitsFile(a, "/f")), LimitsFileState(ParseLimitsFile(a, "/g")));
  EXPECT_NE(LimitsFileState(ParseLimitsFile(a, "/f")),
            LimitsFileState(ParseLimitsFile("CUDA_DEVICE_MEMORY_LIMIT=3g\n", "/f")));
  EXPECT_NE(LimitsFileState(ParseLimitsFile(a, "/f")),
            LimitsFileState(ParseLimitsFile(a + "garbage\n", "/f")))
      << "a skipped line closes a limit";
  LimitsFile unreadable;
  unreadable.unreadable = true;
  EXPECT_NE(LimitsFileState(unreadable), LimitsFileState(LimitsFile{}));
}

TEST(LimitsFormat, AbsentFileGetsNoFormatNote) {
  Resolution r = Resolve({});
  EXPECT_THAT(r.notes, ::testing::Not(Contains(HasSubstr("HAMI_LIMITS_FORMAT"))));
}

// --- Sources ------------------------------------------------------------------------------

TEST(Config, EverySettingRemembersItsValueAndSource) {
  Resolution r = Resolve({{"CUDA_DEVICE_SM_LIMIT", "40"}, {"LIBCUDA_LOG_LEVEL", "3"}},
                         "CUDA_DEVICE_MEMORY_LIMIT=3000m\nCUDA_DEVICE_MEMORY_LIMIT_0=1g\n"
                         "HAMI_LIMITS_FORMAT=1\n");
  std::map<std::string, std::pair<std::string, Source>> got;
  for (const Setting& s : r.config.settings) got[s.name] = {s.value, s.source};
  EXPECT_THAT(got, ElementsAre(Pair("CUDA_DEVICE_MEMORY_LIMIT", Pair("3000m", Source::kLimitsFile)),
                               Pair("CUDA_DEVICE_MEMORY_LIMIT_0", Pair("1g", Source::kLimitsFile)),
                               Pair("CUDA_DEVICE_SM_LIMIT", Pair("40", Source::kEnvironment)),
                               Pair("HAMI_LIMITS_FORMAT", Pair("1", Source::kLimitsFile)),
                               Pair("LIBCUDA_LOG_LEVEL", Pair("3", Source::kEnvironment))));
  EXPECT_EQ(r.config.settings.size(), got.size()) << "one setting per variable";
}

TEST(Config, SourcesHaveTheNamesPeopleRead) {
  EXPECT_STREQ(SourceName(Source::kDefault), "default");
  EXPECT_STREQ(SourceName(Source::kEnvironment), "environment");
  EXPECT_STREQ(SourceName(Source::kLimitsFile), "limits file");
}

// --- The options table --------------------------------------------------------------------

// A valid value for each row of the table; a row without one fails the tests below.
const std::map<std::string, std::string>& SampleValues() {
  static const std::map<std::string, std::string> samples = {
      {"CUDA_DEVICE_MEMORY_LIMIT", "3000m"},
      {"CUDA_DEVICE_MEMORY_LIMIT_<i>", "1g"},
      {"CUDA_DEVICE_SM_LIMIT", "30"},
      {"CUDA_DEVICE_SM_LIMIT_<i>", "20"},
      {"CUDA_DEVICE_MEMORY_SHARED_CACHE", "/tmp/x.cache"},
      {"GPU_CORE_UTILIZATION_POLICY", "force"},
      {"CUDA_TASK_PRIORITY", "0"},
      {"LIBCUDA_LOG_LEVEL", "3"},
      {"CUDA_OVERSUBSCRIBE", "true"},
      {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", "2g"},
      {"LIBVGPU_HOSTPID_BROKER", "1"},
      {"LIBVGPU_HOST_PROCFS", "/host/proc"},
      {"HAMI_IDENTITY_TIERS", "broker,probe"},
      {"HAMI_IDENTITY_PROBE_LOCK", "/tmp/probe.lock"},
      {"HAMI_IDENTITY_PROBE_WAIT_MS", "500"},
      {"HAMI_UNACCOUNTED_POLICY", "suspend"},
      {"HAMI_UNACCOUNTED_TOLERANCE", "16m"},
      {"HAMI_LIMITS_FORMAT", "1"},
      {"CUDA_VISIBLE_DEVICES", "0"},
  };
  return samples;
}

// "CUDA_DEVICE_SM_LIMIT_<i>" -> "CUDA_DEVICE_SM_LIMIT_3".
std::string Concrete(std::string_view row_name) {
  std::string name(row_name);
  if (name.ends_with("<i>")) name.replace(name.size() - 3, 3, "3");
  return name;
}

TEST(OptionTable, ListsEveryVariableTheDesignNames) {
  std::set<std::string> names;
  for (const OptionInfo& o : OptionTable()) names.insert(o.name);
  for (const char* expected :
       {"CUDA_DEVICE_MEMORY_LIMIT", "CUDA_DEVICE_MEMORY_LIMIT_<i>", "CUDA_DEVICE_SM_LIMIT",
        "CUDA_DEVICE_SM_LIMIT_<i>", "CUDA_DEVICE_MEMORY_SHARED_CACHE",
        "GPU_CORE_UTILIZATION_POLICY", "CUDA_TASK_PRIORITY", "LIBCUDA_LOG_LEVEL",
        "CUDA_OVERSUBSCRIBE", "LIBVGPU_HOSTPID_BROKER", "LIBVGPU_HOST_PROCFS", "HAMI_LIMITS_FORMAT",
        "CUDA_VISIBLE_DEVICES"}) {
    EXPECT_TRUE(names.contains(expected)) << expected;
  }
}

TEST(OptionTable, RowsAreUniqueAndDocumented) {
  std::set<std::string> names;
  for (const OptionInfo& o : OptionTable()) {
    EXPECT_TRUE(names.insert(o.name).second) << "duplicate row " << o.name;
    EXPECT_NE(std::string_view(o.default_text), "") << o.name;
    EXPECT_NE(std::string_view(o.doc), "") << o.name;
  }
}

TEST(OptionTable, EveryRowIsReadFromTheEnvironmentAndFromTheLimitsFile) {
  for (const OptionInfo& o : OptionTable()) {
    auto sample = SampleValues().find(o.name);
    ASSERT_NE(sample, SampleValues().end()) << "no sample value for " << o.name;
    const std::string name = Concrete(o.name);

    Resolution env = Resolve({{name, sample->second}});
    EXPECT_THAT(env.problems, IsEmpty()) << name;
    const Setting* from_env = FindSetting(env.config, name);
    ASSERT_NE(from_env, nullptr) << name;
    EXPECT_EQ(from_env->value, sample->second);
    EXPECT_EQ(from_env->source, Source::kEnvironment);

    Resolution file = Resolve({}, name + "=" + sample->second + "\n");
    EXPECT_THAT(file.problems, IsEmpty()) << name;
    const Setting* from_file = FindSetting(file.config, name);
    ASSERT_NE(from_file, nullptr) << name;
    EXPECT_EQ(from_file->source, Source::kLimitsFile);
  }
}

TEST(IdentityOptions, TiersAreASubsetInAFixedOrderOrNone) {
  using region::layout::IdentityTier;
  auto bit = [](IdentityTier t) { return uint8_t(1u << unsigned(t)); };
  EXPECT_EQ(Resolve({}).config.identity_tiers, kAllIdentityTiers);
  EXPECT_EQ(Resolve({{"HAMI_IDENTITY_TIERS", "probe,BROKER"}}).config.identity_tiers,
            bit(IdentityTier::kBroker) | bit(IdentityTier::kProbe));
  EXPECT_EQ(Resolve({{"HAMI_IDENTITY_TIERS", "none"}}).config.identity_tiers, 0);
  EXPECT_EQ(IdentityTiersText(bit(IdentityTier::kProbe) | bit(IdentityTier::kProcfs)),
            "procfs,probe");
  EXPECT_EQ(IdentityTiersText(0), "none");

  Resolution bad = Resolve({{"HAMI_IDENTITY_TIERS", "broker,nvml"}});
  EXPECT_EQ(bad.config.identity_tiers, kAllIdentityTiers);  // ignored as a whole
  ASSERT_EQ(bad.problems.size(), 1u);
  EXPECT_THAT(bad.problems[0], HasSubstr("HAMI_IDENTITY_TIERS='broker,nvml'"));
  EXPECT_THAT(Resolve({{"HAMI_IDENTITY_TIERS", ""}}).problems, SizeIs(1));
  EXPECT_THAT(Resolve({{"HAMI_IDENTITY_PROBE_WAIT_MS", "700000"}}).problems, SizeIs(1));
  EXPECT_THAT(Resolve({{"HAMI_IDENTITY_PROBE_LOCK", "relative.lock"}}).problems, SizeIs(1));
}

TEST(OptionTable, TheConfigurationPageDocumentsEveryRow) {
  auto page = ReadFileToString(HAMI_CONFIGURATION_DOC);
  ASSERT_TRUE(page.ok()) << page.error().message();
  for (const OptionInfo& o : OptionTable()) {
    EXPECT_THAT(*page, HasSubstr("| `" + std::string(o.name) + "` |"))
        << "docs/configuration.md has no table row for " << o.name;
  }
}

}  // namespace
}  // namespace hami::vgpu
