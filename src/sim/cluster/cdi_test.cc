// The simulated node's CDI reader: spec files in JSON and YAML, the version rules, unknown
// fields, qualified names, directory priority, and the resolution into env, mounts and device
// nodes.
#include "sim/cluster/cdi.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"

namespace hami::sim::cluster {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr char kJsonSpec[] = R"({
  "cdiVersion": "0.5.0",
  "kind": "k8s.example.com/claim",
  "containerEdits": {
    "env": ["CUDA_DEVICE_MEMORY_LIMIT_0=3000m", "SHARED=spec"],
    "mounts": [{"hostPath": "/h/limits", "containerPath": "/overrideEnv",
                "options": ["ro", "nosuid", "nodev", "bind"]},
               {"hostPath": "/h/lock", "containerPath": "/tmp/vgpulock",
                "options": ["rw", "bind"]}]
  },
  "devices": [
    {"name": "0c1d-gpu-0", "containerEdits": {"env": ["DEV=0"]}},
    {"name": "0c1d-gpu-1", "containerEdits": {"env": ["DEV=1", "SHARED=device"],
     "deviceNodes": [{"path": "/dev/x1"}, {"path": "/dev/y", "hostPath": "/dev/y1",
                                           "permissions": "r"}]}}
  ]
})";

constexpr char kYamlSpec[] = R"(cdiVersion: "0.6.0"
kind: vendor.example/gpu
annotations:
  owner: test
devices:
- name: a
  containerEdits:
    env:
    - "FROM=yaml"
    deviceNodes:
    - path: /dev/a
      major: 195
      minor: 0
)";

class CdiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(root_.ok());
    std::filesystem::create_directories(Etc());
    std::filesystem::create_directories(Run());
  }
  std::string Etc() { return root_.File("etc-cdi"); }
  std::string Run() { return root_.File("run-cdi"); }
  void Write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

  TempDir root_{"hami-sim-cdi"};
};

TEST_F(CdiTest, ResolvesJsonAndYamlSpecsIntoEnvMountsAndDeviceNodes) {
  Write(Run() + "/k8s.example.com-claim_0c1d.json", kJsonSpec);
  Write(Etc() + "/vendor.yaml", kYamlSpec);
  Write(Etc() + "/notes.txt", "not a spec, not read");
  auto edits = ResolveCdiDevices(
      {Etc(), Run()}, {"k8s.example.com/claim=0c1d-gpu-0", "k8s.example.com/claim=0c1d-gpu-1",
                       "vendor.example/gpu=a"});
  ASSERT_TRUE(edits.ok()) << edits.error().message();
  EXPECT_EQ(edits->env, (std::map<std::string, std::string>{{"CUDA_DEVICE_MEMORY_LIMIT_0", "3000m"},
                                                            {"DEV", "1"},
                                                            {"FROM", "yaml"},
                                                            {"SHARED", "device"}}));
  ASSERT_EQ(edits->mounts.size(), 2u) << "the spec's own edits once for its two devices";
  EXPECT_EQ(edits->mounts[0], (kubelet::Mount{"/overrideEnv", "/h/limits", true}));
  EXPECT_EQ(edits->mounts[1], (kubelet::Mount{"/tmp/vgpulock", "/h/lock", false}));
  EXPECT_THAT(edits->devices, ElementsAre(kubelet::DeviceSpec{"/dev/x1", "/dev/x1", "rwm"},
                                          kubelet::DeviceSpec{"/dev/y", "/dev/y1", "r"},
                                          kubelet::DeviceSpec{"/dev/a", "/dev/a", "rwm"}));
}

TEST_F(CdiTest, TheLaterDirectoryWinsAndTwoFilesOfOneDirectoryConflict) {
  const std::string spec = R"({"cdiVersion":"0.3.0","kind":"v.example/c",
    "devices":[{"name":"d","containerEdits":{"env":["WHERE=)";
  Write(Etc() + "/a.json", spec + "etc\"]}}]}");
  Write(Run() + "/a.json", spec + "run\"]}}]}");
  auto edits = ResolveCdiDevices({Etc(), Run()}, {"v.example/c=d"});
  ASSERT_TRUE(edits.ok()) << edits.error().message();
  EXPECT_EQ(edits->env.at("WHERE"), "run");

  Write(Run() + "/b.json", spec + "again\"]}}]}");
  auto conflict = ResolveCdiDevices({Etc(), Run()}, {"v.example/c=d"});
  ASSERT_FALSE(conflict.ok());
  EXPECT_THAT(conflict.error().message(), HasSubstr("CDI device v.example/c=d is defined by both " +
                                                    Run() + "/a.json and " + Run() + "/b.json"));
}

TEST_F(CdiTest, RefusesFieldsNewerThanTheSpecsVersionNamingFileAndField) {
  struct Case {
    std::string spec, error;
  };
  const std::vector<Case> cases = {
      {R"({"cdiVersion":"0.4.0","kind":"v.example/c","devices":[{"name":"1abc","containerEdits":{}}]})",
       "devices[0].name '1abc' starts with a digit, which needs cdiVersion 0.5.0 or later (the "
       "spec says 0.4.0)"},
      {R"({"cdiVersion":"0.3.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "mounts":[{"hostPath":"/a","containerPath":"/b","type":"bind"}]}}]})",
       "devices[0].containerEdits.mounts[0].type is set, which needs cdiVersion 0.4.0"},
      {R"({"cdiVersion":"0.4.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "deviceNodes":[{"path":"/dev/a","hostPath":"/dev/b"}]}}]})",
       "devices[0].containerEdits.deviceNodes[0].hostPath is set, which needs cdiVersion 0.5.0"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","annotations":{"a":"b"},
         "devices":[{"name":"d","containerEdits":{}}]})",
       "annotations is set, which needs cdiVersion 0.6.0"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c.x","devices":[{"name":"d","containerEdits":{}}]})",
       "kind 'v.example/c.x' has a dot in its class, which needs cdiVersion 0.6.0"},
      {R"({"cdiVersion":"0.6.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "additionalGids":[5]}}]})",
       "devices[0].containerEdits.additionalGids is set, which needs cdiVersion 0.7.0"},
      {R"({"cdiVersion":"1.0.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "netDevices":[]}}]})",
       "devices[0].containerEdits.netDevices is set, which needs cdiVersion 1.1.0"},
      {R"({"cdiVersion":"0.2.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{}}]})",
       "cdiVersion 0.2.0 is no longer supported (the earliest is 0.3.0)"},
      {R"({"cdiVersion":"0.9.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{}}]})",
       "cdiVersion '0.9.0' is not a CDI version this reader knows"},
      {R"({"kind":"v.example/c","devices":[{"name":"d","containerEdits":{}}]})",
       "cdiVersion is required"},
  };
  for (const Case& c : cases) {
    auto spec = ParseCdiSpec(c.spec, false, "/cdi/x.json");
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_THAT(spec.error().message(), HasSubstr("CDI spec /cdi/x.json: " + c.error));
  }
  EXPECT_TRUE(
      ParseCdiSpec(
          R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"1abc","containerEdits":{}}]})",
          false, "/cdi/x.json")
          .ok())
      << "0.5.0 accepts a name that starts with a digit";
}

TEST_F(CdiTest, RefusesUnknownFieldsAndMalformedValuesNamingTheField) {
  struct Case {
    std::string spec, error;
  };
  const std::vector<Case> cases = {
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","extra":1,"devices":[{"name":"d","containerEdits":{}}]})",
       "extra is not a field of the CDI specification"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"d","edits":{}}]})",
       "devices[0].edits is not a field of the CDI specification"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "mounts":[{"hostPath":"/a","containerPath":"/b","readOnly":true}]}}]})",
       "devices[0].containerEdits.mounts[0].readOnly is not a field of the CDI specification"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "env":["NOEQUALS"]}}]})",
       "devices[0].containerEdits.env[0] 'NOEQUALS' is not KEY=VALUE"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{
         "mounts":[{"hostPath":"/a"}]}}]})",
       "devices[0].containerEdits.mounts[0].containerPath is required"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"d"}]})",
       "devices[0].containerEdits is required"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[]})",
       "devices is required: a list of at least one device"},
      {R"({"cdiVersion":"0.5.0","kind":"example","devices":[{"name":"d","containerEdits":{}}]})",
       "kind 'example' is not <vendor>/<class>"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"-d","containerEdits":{}}]})",
       "devices[0].name '-d' does not start with a letter or digit"},
      {R"({"cdiVersion":"0.5.0","kind":"v.example/c","devices":[{"name":"d","containerEdits":{}},
         {"name":"d","containerEdits":{}}]})",
       "devices[1].name 'd' is a duplicate"},
  };
  for (const Case& c : cases) {
    auto spec = ParseCdiSpec(c.spec, false, "/cdi/x.json");
    ASSERT_FALSE(spec.ok()) << c.spec;
    EXPECT_THAT(spec.error().message(), HasSubstr("CDI spec /cdi/x.json: " + c.error));
  }
  auto yaml = ParseCdiSpec(
      "cdiVersion: \"0.5.0\"\nkind: v.example/c\ndevices:\n- name: d\n"
      "  containerEdits:\n    unknown: 1\n",
      true, "/cdi/x.yaml");
  ASSERT_FALSE(yaml.ok());
  EXPECT_THAT(yaml.error().message(),
              HasSubstr("CDI spec /cdi/x.yaml: devices[0].containerEdits.unknown is not a field"));
}

TEST_F(CdiTest, ParsesQualifiedNamesAndRefusesMalformedOnes) {
  auto unqualified = ParseCdiQualifiedName("vendor/class");
  ASSERT_FALSE(unqualified.ok());
  EXPECT_EQ(unqualified.error().message(),
            "CDI device 'vendor/class' is not a qualified name <vendor>/<class>=<name>");
  auto q = ParseCdiQualifiedName("k8s.hami-core-gpu.project-hami.io/claim=0c1d-hami-gpu-0-s:1");
  ASSERT_TRUE(q.ok()) << q.error().message();
  EXPECT_EQ(q->vendor, "k8s.hami-core-gpu.project-hami.io");
  EXPECT_EQ(q->cls, "claim");
  EXPECT_EQ(q->name, "0c1d-hami-gpu-0-s:1");
  for (const auto& [id, error] : std::vector<std::pair<std::string, std::string>>{
           {"1vendor/class=d", "vendor does not start with a letter"},
           {"vendor/cl@ss=d", "class holds '@'"},
           {"vendor/class=d-", "name does not end with a letter or digit"},
           {"vendor/class=", "name is empty"}}) {
    auto bad = ParseCdiQualifiedName(id);
    ASSERT_FALSE(bad.ok()) << id;
    EXPECT_THAT(bad.error().message(), HasSubstr("CDI device '" + id + "': " + error)) << id;
  }
}

TEST_F(CdiTest, AnUnknownDeviceNamesTheDirectoriesAndTheSpecsThatFailedToLoad) {
  Write(Run() + "/broken.json", "{\"cdiVersion\": \"0.5.0\", ");
  auto edits = ResolveCdiDevices({Etc(), Run()}, {"v.example/c=d"});
  ASSERT_FALSE(edits.ok());
  EXPECT_EQ(edits.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(edits.error().message(),
              HasSubstr("CDI device v.example/c=d is not defined by any spec in " + Etc() + ", " +
                        Run() + "; CDI spec " + Run() + "/broken.json: not valid JSON"));
}

TEST_F(CdiTest, RefusesEditsTheNodeCannotApplyNamingFileAndDevice) {
  Write(Run() + "/h.json", R"({"cdiVersion":"0.5.0","kind":"v.example/c",
    "devices":[{"name":"d","containerEdits":{"hooks":[{"hookName":"createContainer",
    "path":"/bin/true"}]}}]})");
  auto edits = ResolveCdiDevices({Run()}, {"v.example/c=d"});
  ASSERT_FALSE(edits.ok());
  EXPECT_EQ(edits.error().code(), ErrorCode::kUnsupported);
  EXPECT_THAT(edits.error().message(), HasSubstr("CDI spec " + Run() +
                                                 "/h.json device d: its containerEdits use hooks, "
                                                 "which the simulated node cannot apply"));
}

}  // namespace
}  // namespace hami::sim::cluster
