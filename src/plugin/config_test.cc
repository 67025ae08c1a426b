#include "plugin/config.h"

#include <gtest/gtest.h>

#include <fstream>

#include "common/temp_dir.h"

namespace hami::plugin {
namespace {

constexpr char kSource[] = "/config/config.json";

std::string ParseError(std::string_view text) {
  auto r = ParseNodeConfig(text, kSource);
  EXPECT_FALSE(r.ok()) << text;
  return r.ok() ? "" : r.error().message();
}

TEST(NodeConfig, ReadsEveryKeyOfAnEntry) {
  auto r = ParseNodeConfig(R"({"nodeconfig":[{"name":"node1","operatingmode":"mig",
      "devicesplitcount":20,"devicememoryscaling":1.5,"devicecorescaling":2,
      "preconfigureddevicememory":1024,"libcudaloglevel":"4","enablenumatopology":true,
      "migstrategy":"mixed","filterdevices":{"uuid":["GPU-a"],"index":[1,3]},
      "enablegetpreferredallocation":false,"limitdelivery":"env",
      "advertisememoryandcores":true}]})",
                           kSource);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->size(), 1u);
  const NodeConfigEntry& e = (*r)[0];
  EXPECT_EQ(e.name, "node1");
  EXPECT_EQ(e.operating_mode, OperatingMode::kMig);
  EXPECT_EQ(e.device_split_count, 20);
  EXPECT_EQ(e.device_memory_scaling, 1.5);
  EXPECT_EQ(e.device_core_scaling, 2.0);
  EXPECT_EQ(e.pre_configured_memory, 1024);
  EXPECT_EQ(e.lib_cuda_log_level, 4);
  EXPECT_EQ(e.enable_numa_topology, true);
  EXPECT_EQ(e.mig_strategy, "mixed");
  EXPECT_EQ(e.filter.uuids, std::vector<std::string>{"GPU-a"});
  EXPECT_EQ(e.filter.indices, (std::vector<int32_t>{1, 3}));
  EXPECT_EQ(e.enable_preferred, false);
  EXPECT_EQ(e.limit_delivery, LimitDelivery::kEnv);
  EXPECT_EQ(e.advertise_memory_and_cores, true);
}

TEST(NodeConfig, MatchesKeysWithoutRegardToCase) {
  auto r = ParseNodeConfig(
      R"({"NodeConfig":[{"Name":"n","limitDelivery":"env","libCudaLogLevel":3,"DeviceSplitCount":4}]})",
      kSource);
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ((*r)[0].limit_delivery, LimitDelivery::kEnv);
  EXPECT_EQ((*r)[0].lib_cuda_log_level, 3);
  EXPECT_EQ((*r)[0].device_split_count, 4);
}

TEST(NodeConfig, EmptyObjectAndNullsAreNoEntries) {
  EXPECT_TRUE(ParseNodeConfig("{}", kSource)->empty());
  EXPECT_TRUE(ParseNodeConfig(R"({"nodeconfig":null})", kSource)->empty());
  EXPECT_TRUE(ParseNodeConfig(R"({"nodeconfig":[]})", kSource)->empty());
  auto r = ParseNodeConfig(R"({"nodeconfig":[{"name":"n","devicesplitcount":null}]})", kSource);
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE((*r)[0].device_split_count.has_value());
}

TEST(NodeConfig, RejectsBadValuesNamingFileKeyAndValue) {
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","devicesplitcount":-1}]})"),
            "device plugin config /config/config.json: nodeconfig[0].devicesplitcount: -1 must "
            "be >= 1");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"a"},{"name":"n","devicesplitcount":"x"}]})"),
            "device plugin config /config/config.json: nodeconfig[1].devicesplitcount: 'x' is "
            "not an integer");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","devicesplitcount":2.5}]})"),
            "device plugin config /config/config.json: nodeconfig[0].devicesplitcount: 2.5 is "
            "not an integer");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","devicememoryscaling":0}]})"),
            "device plugin config /config/config.json: nodeconfig[0].devicememoryscaling: 0 "
            "must be > 0");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","devicecorescaling":"1"}]})"),
            "device plugin config /config/config.json: nodeconfig[0].devicecorescaling: '1' is "
            "not a number");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","libcudaloglevel":7}]})"),
            "device plugin config /config/config.json: nodeconfig[0].libcudaloglevel: 7 must "
            "be <= 4");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","preconfigureddevicememory":-5}]})"),
            "device plugin config /config/config.json: nodeconfig[0].preconfigureddevicememory: "
            "-5 must be >= 0");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","enablenumatopology":"yes"}]})"),
            "device plugin config /config/config.json: nodeconfig[0].enablenumatopology: 'yes' "
            "is not a boolean (true or false)");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","advertiseMemoryAndCores":"on"}]})"),
            "device plugin config /config/config.json: nodeconfig[0].advertiseMemoryAndCores: "
            "'on' is not a boolean (true or false)");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","operatingmode":"mps"}]})"),
            "device plugin config /config/config.json: nodeconfig[0].operatingmode: 'mps' is "
            "not one of hami-core, mig");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","migstrategy":"all"}]})"),
            "device plugin config /config/config.json: nodeconfig[0].migstrategy: 'all' is not "
            "one of none, single, mixed");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","limitDelivery":"files"}]})"),
            "device plugin config /config/config.json: nodeconfig[0].limitDelivery: 'files' is "
            "not one of file, env");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","filterdevices":{"index":[-1]}}]})"),
            "device plugin config /config/config.json: nodeconfig[0].filterdevices.index[0]: -1 "
            "must be >= 0");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","filterdevices":{"uuid":[""]}}]})"),
            "device plugin config /config/config.json: nodeconfig[0].filterdevices.uuid[0]: '' "
            "must be a non-empty string");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","filterdevices":{"uuids":[]}}]})"),
            "device plugin config /config/config.json: nodeconfig[0].filterdevices.uuids: "
            "unknown key");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","filterdevices":[]}]})"),
            "device plugin config /config/config.json: nodeconfig[0].filterdevices: [] is not "
            "an object");
}

TEST(NodeConfig, RejectsStructuralProblems) {
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n","devicesplitcoun":2}]})"),
            "device plugin config /config/config.json: nodeconfig[0].devicesplitcoun: unknown "
            "key");
  EXPECT_EQ(ParseError(R"({"nodeconfigs":[]})"),
            "device plugin config /config/config.json: nodeconfigs: unknown key");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"devicesplitcount":2}]})"),
            "device plugin config /config/config.json: nodeconfig[0].name: missing (every entry "
            "names its node)");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[{"name":"n"},{"name":"n"}]})"),
            "device plugin config /config/config.json: nodeconfig[1].name: 'n' is also the name "
            "of nodeconfig[0]");
  EXPECT_EQ(
      ParseError(R"({"nodeconfig":[{"name":"n","limitdelivery":"env","limitDelivery":"file"}]})"),
      "device plugin config /config/config.json: nodeconfig[0].limitdelivery: key given "
      "twice (keys are matched without regard to case)");
  EXPECT_EQ(ParseError(R"({"nodeconfig":{}})"),
            "device plugin config /config/config.json: nodeconfig: {} is not an array");
  EXPECT_EQ(ParseError(R"({"nodeconfig":[3]})"),
            "device plugin config /config/config.json: nodeconfig[0]: 3 is not an object");
  EXPECT_EQ(ParseError("[]"), "device plugin config /config/config.json: not a JSON object");
  EXPECT_NE(ParseError("{").find("device plugin config /config/config.json: not valid JSON"),
            std::string::npos);
}

TEST(PluginConfig, NodeEntryOverridesGlobalValues) {
  config::DeviceConfig global;
  global.device_split_count = 10;
  global.limit_delivery = "env";
  global.lib_cuda_log_level = 1;
  auto nodes = ParseNodeConfig(R"({"nodeconfig":[{"name":"other","devicesplitcount":3},
      {"name":"node1","devicesplitcount":5,"devicememoryscaling":2,"limitdelivery":"file",
       "filterdevices":{"uuid":["GPU-x"]},"operatingmode":"mig"}]})",
                               kSource);
  ASSERT_TRUE(nodes.ok());
  auto c = ResolvePluginConfig(global, *nodes, "node1");
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_TRUE(c->node_entry_found);
  EXPECT_EQ(c->device.device_split_count, 5);
  EXPECT_EQ(c->device.device_memory_scaling, 2.0);
  EXPECT_EQ(c->device.lib_cuda_log_level, 1);  // not named by the entry: global
  EXPECT_EQ(c->limit_delivery, LimitDelivery::kFile);
  EXPECT_EQ(c->operating_mode, OperatingMode::kMig);
  EXPECT_TRUE(c->filter.Excludes("GPU-x", 7));
  EXPECT_FALSE(c->filter.Excludes("GPU-y", 0));

  auto other = ResolvePluginConfig(global, *nodes, "node9");
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(other->node_entry_found);
  EXPECT_EQ(other->device.device_split_count, 10);
  EXPECT_EQ(other->limit_delivery, LimitDelivery::kEnv);  // global
  EXPECT_EQ(other->operating_mode, OperatingMode::kHamiCore);
}

TEST(PluginConfig, AdvertisingIsGlobalUnlessTheNodesEntrySaysOtherwise) {
  config::DeviceConfig global;
  global.advertise_memory_and_cores = true;
  auto nodes = ParseNodeConfig(R"({"nodeconfig":[{"name":"quiet","advertisememoryandcores":false},
      {"name":"plain","devicesplitcount":4}]})",
                               kSource);
  ASSERT_TRUE(nodes.ok()) << nodes.error().message();
  EXPECT_FALSE(ResolvePluginConfig(global, *nodes, "quiet")->device.advertise_memory_and_cores);
  EXPECT_TRUE(ResolvePluginConfig(global, *nodes, "plain")->device.advertise_memory_and_cores);
  EXPECT_TRUE(ResolvePluginConfig(global, *nodes, "absent")->device.advertise_memory_and_cores);

  global.advertise_memory_and_cores = false;
  auto loud = ParseNodeConfig(R"({"nodeconfig":[{"name":"loud","advertiseMemoryAndCores":true}]})",
                              kSource);
  ASSERT_TRUE(loud.ok()) << loud.error().message();
  EXPECT_TRUE(ResolvePluginConfig(global, *loud, "loud")->device.advertise_memory_and_cores);
  EXPECT_FALSE(ResolvePluginConfig(global, *loud, "other")->device.advertise_memory_and_cores);
}

TEST(PluginConfig, FilterByIndex) {
  DeviceFilter f;
  f.indices = {2};
  EXPECT_TRUE(f.Excludes("GPU-any", 2));
  EXPECT_FALSE(f.Excludes("GPU-any", 1));
  EXPECT_FALSE(f.Excludes("", -1));
}

TEST(LimitDelivery, PodAnnotationThenNodeThenGlobalThenFile) {
  PluginConfig c;
  EXPECT_EQ(*ResolveLimitDelivery(c, nullptr), LimitDelivery::kFile);  // default
  c.limit_delivery = LimitDelivery::kEnv;
  EXPECT_EQ(*ResolveLimitDelivery(c, nullptr), LimitDelivery::kEnv);
  const std::string file = "file";
  EXPECT_EQ(*ResolveLimitDelivery(c, &file), LimitDelivery::kFile);
  const std::string bad = "Files";
  auto r = ResolveLimitDelivery(c, &bad);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "hami.io/limit-delivery: 'Files' is not one of file, env");
  const std::string empty;
  EXPECT_FALSE(ResolveLimitDelivery(c, &empty).ok());
}

TEST(PluginConfig, GlobalLimitDeliveryMustBeKnown) {
  config::DeviceConfig global;
  global.limit_delivery = "mail";
  auto c = ResolvePluginConfig(global, {}, "n");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message(), "nvidia.limitDelivery: 'mail' is not one of file, env");
}

TEST(NodeName, FlagThenEnvironment) {
  EXPECT_EQ(*ResolveNodeName("a", "b"), "a");
  EXPECT_EQ(*ResolveNodeName("", "b"), "b");
  auto r = ResolveNodeName("", "");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "node name: neither --node-name nor NODE_NAME is set");
  EXPECT_FALSE(ResolveNodeName("", nullptr).ok());
}

TEST(LoadPluginConfig, ReadsBothFilesAndToleratesAnAbsentNodeFile) {
  TempDir dir("plugin-config");
  ASSERT_TRUE(dir.ok());
  std::ofstream(dir.File("device-config.yaml")) << "nvidia:\n  deviceSplitCount: 7\n  "
                                                   "limitDelivery: env\n";
  LoadOptions o;
  o.node_name = "n1";
  o.device_config_path = dir.File("device-config.yaml");
  o.node_config_path = dir.File("absent.json");
  auto c = LoadPluginConfig(o);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->device.device_split_count, 7);
  EXPECT_EQ(c->limit_delivery, LimitDelivery::kEnv);
  EXPECT_EQ(c->node_name, "n1");

  std::ofstream(dir.File("config.json"))
      << R"({"nodeconfig":[{"name":"n1","devicesplitcount":3}]})";
  o.node_config_path = dir.File("config.json");
  c = LoadPluginConfig(o);
  ASSERT_TRUE(c.ok()) << c.error().message();
  EXPECT_EQ(c->device.device_split_count, 3);

  std::ofstream(dir.File("bad.json")) << R"({"nodeconfig":[{"name":"n1","devicesplitcount":0}]})";
  o.node_config_path = dir.File("bad.json");
  c = LoadPluginConfig(o);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().message(), "device plugin config " + dir.File("bad.json") +
                                     ": nodeconfig[0].devicesplitcount: 0 must be >= 1");

  std::ofstream(dir.File("bad.yaml")) << "nvidia:\n  deviceSplitCont: 7\n";
  o.device_config_path = dir.File("bad.yaml");
  c = LoadPluginConfig(o);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message().find("nvidia.deviceSplitCont: unknown key"), std::string::npos);
}

}  // namespace
}  // namespace hami::plugin
