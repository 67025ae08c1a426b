#include "sim/options.h"

#include <cuda.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <set>
#include <string>

namespace hami::sim {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// A fake environment: only the variables in `vars` are set.
Result<SimOptions> Load(const std::map<std::string, std::string>& vars) {
  return LoadSimOptions([&vars](const char* name) -> const char* {
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

TEST(LoadSimOptions, WithNothingSetGivesTheDocumentedDefaults) {
  auto o = Load({});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(o->profile_spec, "h100-80g:2");
  EXPECT_EQ(o->node, "");
  EXPECT_EQ(o->state_path, "/tmp/hami-sim.state");
  EXPECT_EQ(o->device_nodes_path, "/run/hami-sim/device-nodes");
  EXPECT_EQ(o->driver_version, CUDA_VERSION);
  EXPECT_EQ(o->init_us, 0u);
  EXPECT_EQ(o->ctx_create_us, 0u);
  EXPECT_FALSE(o->ctx_serialize);
  EXPECT_EQ(o->nvml_us, 0u);
  EXPECT_EQ(o->launch_ns, 3000u);
  EXPECT_EQ(o->wave_ns, 20000u);
  EXPECT_EQ(o->queue_depth, 1024u);
  EXPECT_EQ(o->util_window_ms, 1000u);
  EXPECT_EQ(o->context_bytes, 0u);
  EXPECT_EQ(o->alloc_granularity, 2ull << 20);
  EXPECT_EQ(o->log_level, 2);
  EXPECT_EQ(o->kill_point, "");
}

TEST(LoadSimOptions, AppliesEveryVariableThatIsSet) {
  auto o = Load({{"HAMI_SIM_PROFILE", "a100-40g:4"},
                 {"HAMI_SIM_NODE", "node-7"},
                 {"HAMI_SIM_STATE", "/run/x.state"},
                 {"HAMI_SIM_DEVICE_NODES", "/run/x.nodes"},
                 {"HAMI_SIM_DRIVER_VERSION", "12040"},
                 {"HAMI_SIM_INIT_US", "5"},
                 {"HAMI_SIM_CTX_CREATE_US", "6"},
                 {"HAMI_SIM_CTX_SERIALIZE", "yes"},
                 {"HAMI_SIM_NVML_US", "7"},
                 {"HAMI_SIM_LAUNCH_NS", "0"},
                 {"HAMI_SIM_WAVE_NS", "1"},
                 {"HAMI_SIM_QUEUE_DEPTH", "65536"},
                 {"HAMI_SIM_UTIL_WINDOW_MS", "10"},
                 {"HAMI_SIM_CONTEXT_SIZE", "300m"},
                 {"HAMI_SIM_ALLOC_GRANULARITY", "1g"},
                 {"HAMI_SIM_LOG_LEVEL", "4"},
                 {"HAMI_SIM_KILL_POINT", "device-lock-held"}});
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(o->profile_spec, "a100-40g:4");
  EXPECT_EQ(o->node, "node-7");
  EXPECT_EQ(o->state_path, "/run/x.state");
  EXPECT_EQ(o->device_nodes_path, "/run/x.nodes");
  EXPECT_EQ(o->driver_version, 12040);
  EXPECT_EQ(o->init_us, 5u);
  EXPECT_EQ(o->ctx_create_us, 6u);
  EXPECT_TRUE(o->ctx_serialize);
  EXPECT_EQ(o->nvml_us, 7u);
  EXPECT_EQ(o->launch_ns, 0u);
  EXPECT_EQ(o->wave_ns, 1u);
  EXPECT_EQ(o->queue_depth, 65536u);
  EXPECT_EQ(o->util_window_ms, 10u);
  EXPECT_EQ(o->context_bytes, 300ull << 20);
  EXPECT_EQ(o->alloc_granularity, 1ull << 30);
  EXPECT_EQ(o->log_level, 4);
  EXPECT_EQ(o->kill_point, "device-lock-held");
}

TEST(LoadSimOptions, AcceptsEveryPowerOfTwoGranularityUpToOneGig) {
  EXPECT_EQ(Load({{"HAMI_SIM_ALLOC_GRANULARITY", "1"}})->alloc_granularity, 1u);
  EXPECT_EQ(Load({{"HAMI_SIM_ALLOC_GRANULARITY", "64k"}})->alloc_granularity, 64u << 10);
}

struct BadValue {
  const char* name;
  const char* value;
  const char* why;
};

class LoadSimOptionsRejects : public ::testing::TestWithParam<BadValue> {};

TEST_P(LoadSimOptionsRejects, NamingTheVariableAndItsValue) {
  const BadValue& c = GetParam();
  auto o = Load({{c.name, c.value}});
  ASSERT_FALSE(o.ok()) << c.name << "=" << c.value;
  EXPECT_EQ(o.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(o.error().message(),
              StartsWith(std::string(c.name) + "='" + std::string(c.value) + "'"));
  EXPECT_THAT(o.error().message(), HasSubstr(c.why));
}

INSTANTIATE_TEST_SUITE_P(
    Values, LoadSimOptionsRejects,
    ::testing::Values(BadValue{"HAMI_SIM_STATE", "relative/x.state", "must be an absolute path"},
                      BadValue{"HAMI_SIM_STATE", "", "must be an absolute path"},
                      BadValue{"HAMI_SIM_DEVICE_NODES", "nodes", "must be an absolute path"},
                      BadValue{"HAMI_SIM_DEVICE_NODES", "", "must be an absolute path"},
                      BadValue{"HAMI_SIM_DRIVER_VERSION", "12.4", "trailing characters"},
                      BadValue{"HAMI_SIM_DRIVER_VERSION", "1999", "must be from 2000 to 99990"},
                      BadValue{"HAMI_SIM_DRIVER_VERSION", "99991", "must be from 2000 to 99990"},
                      BadValue{"HAMI_SIM_INIT_US", "-1", "not a non-negative integer"},
                      BadValue{"HAMI_SIM_INIT_US", "10000001", "must be from 0 to 10000000"},
                      BadValue{"HAMI_SIM_CTX_CREATE_US", "1ms", "trailing characters"},
                      BadValue{"HAMI_SIM_CTX_SERIALIZE", "maybe", "expected 1/0"},
                      BadValue{"HAMI_SIM_NVML_US", "", "empty value"},
                      BadValue{"HAMI_SIM_LAUNCH_NS", "1000000001", "must be from 0 to 1000000000"},
                      BadValue{"HAMI_SIM_LAUNCH_NS", " 3000", "not a non-negative integer"},
                      BadValue{"HAMI_SIM_WAVE_NS", "0", "must be from 1 to 10000000000"},
                      BadValue{"HAMI_SIM_WAVE_NS", "abc", "not a non-negative integer"},
                      BadValue{"HAMI_SIM_QUEUE_DEPTH", "0", "must be from 1 to 65536"},
                      BadValue{"HAMI_SIM_QUEUE_DEPTH", "65537", "must be from 1 to 65536"},
                      BadValue{"HAMI_SIM_UTIL_WINDOW_MS", "9", "must be from 10 to 60000"},
                      BadValue{"HAMI_SIM_UTIL_WINDOW_MS", "60001", "must be from 10 to 60000"},
                      BadValue{"HAMI_SIM_CONTEXT_SIZE", "12x", "unknown size suffix"},
                      BadValue{"HAMI_SIM_ALLOC_GRANULARITY", "0", "must be a power of two"},
                      BadValue{"HAMI_SIM_ALLOC_GRANULARITY", "3k", "must be a power of two"},
                      BadValue{"HAMI_SIM_ALLOC_GRANULARITY", "2g",
                               "must be a power of two from 1 byte to 1g"},
                      BadValue{"HAMI_SIM_ALLOC_GRANULARITY", "2q", "unknown size suffix"},
                      BadValue{"HAMI_SIM_LOG_LEVEL", "5", "must be from 0 to 4"},
                      BadValue{"HAMI_SIM_LOG_LEVEL", "debug", "not a non-negative integer"}));

TEST(LoadSimOptions, TheFirstMalformedVariableInTableOrderFailsTheWholeLoad) {
  auto o = Load({{"HAMI_SIM_LOG_LEVEL", "9"}, {"HAMI_SIM_WAVE_NS", "0"}});
  ASSERT_FALSE(o.ok());
  EXPECT_THAT(o.error().message(), StartsWith("HAMI_SIM_WAVE_NS='0'"));
}

TEST(SimOptionTable, ListsUniqueDocumentedVariablesAndLoadReadsEachOfThem) {
  std::set<std::string> listed, read;
  for (const SimOptionInfo& info : SimOptionTable()) {
    EXPECT_THAT(info.name, StartsWith("HAMI_SIM_"));
    EXPECT_TRUE(listed.insert(info.name).second) << info.name << " is listed twice";
    EXPECT_NE(std::string(info.doc), "") << info.name;
    EXPECT_NE(info.default_text, nullptr) << info.name;
    EXPECT_NE(info.apply, nullptr) << info.name;
  }
  ASSERT_TRUE(LoadSimOptions([&read](const char* name) -> const char* {
                read.insert(name);
                return nullptr;
              }).ok());
  EXPECT_EQ(read, listed);
}

TEST(LoadSimOptionsFromEnvironment, ReadsTheProcessEnvironment) {
  setenv("HAMI_SIM_QUEUE_DEPTH", "17", 1);
  auto o = LoadSimOptionsFromEnvironment();
  unsetenv("HAMI_SIM_QUEUE_DEPTH");
  ASSERT_TRUE(o.ok()) << o.error().message();
  EXPECT_EQ(o->queue_depth, 17u);
}

}  // namespace
}  // namespace hami::sim
