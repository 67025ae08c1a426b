// The generated config.toml read back by an independent TOML reader (Python's tomllib), the
// option checks, and the errors for missing programs.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "common/temp_dir.h"
#include "sim/cri/containerd.h"
#include "support/subprocess.h"

namespace hami::sim::cri {
namespace {

using nlohmann::json;

ContainerdOptions Options(const std::string& dir) {
  ContainerdOptions o;
  o.dir = dir;
  o.cgroup_parent = "hami-sim/node-a";
  return o;
}

TEST(ContainerdConfigToml, ReadsBackWithPythonTomllibSettingBySetting) {
  TempDir tmp("hami-cri-config");
  ASSERT_TRUE(tmp.ok());
  ContainerdOptions o = Options("/tmp/x \"quoted\"");
  const std::string path = tmp.File("config.toml");
  std::ofstream(path) << ContainerdConfigToml(o, "/usr/sbin/runc");
  testing::Subprocess py({"/usr/bin/python3", "-c",
                          "import json, sys, tomllib\n"
                          "print(json.dumps(tomllib.load(open(sys.argv[1], 'rb'))))\n",
                          path},
                         {});
  const std::string out = py.ReadAll(30000);
  ASSERT_EQ(py.Wait(30000), 0) << out;
  const json c = json::parse(out);
  EXPECT_EQ(c["version"], 2);
  EXPECT_EQ(c["root"], "/tmp/x \"quoted\"/root");
  EXPECT_EQ(c["state"], "/tmp/x \"quoted\"/state");
  EXPECT_EQ(c["required_plugins"], json::array({"io.containerd.grpc.v1.cri"}));
  EXPECT_EQ(c["grpc"]["address"], "/tmp/x \"quoted\"/containerd.sock");
  EXPECT_EQ(c["plugins"]["io.containerd.internal.v1.opt"]["path"], "/tmp/x \"quoted\"/root/opt");
  const json& cri = c["plugins"]["io.containerd.grpc.v1.cri"];
  EXPECT_EQ(cri["sandbox_image"], "hami.local/sim/pause:1");
  EXPECT_EQ(cri["restrict_oom_score_adj"], true);
  EXPECT_EQ(cri["stream_server_address"], "127.0.0.1");
  EXPECT_EQ(cri["cni"]["conf_dir"], "/tmp/x \"quoted\"/cni/conf");
  EXPECT_EQ(cri["cni"]["bin_dir"], "/tmp/x \"quoted\"/cni/bin");
  EXPECT_EQ(cri["containerd"]["snapshotter"], "overlayfs");
  EXPECT_EQ(cri["containerd"]["default_runtime_name"], "runc");
  const json& runc = cri["containerd"]["runtimes"]["runc"];
  EXPECT_EQ(runc["runtime_type"], "io.containerd.runc.v2");
  EXPECT_EQ(runc["options"]["BinaryName"], "/usr/sbin/runc");
  EXPECT_EQ(runc["options"]["Root"], "/tmp/x \"quoted\"/state/runc");
  EXPECT_EQ(runc["options"]["SystemdCgroup"], false);
}

TEST(ValidateContainerdOptions, RefusesEachBadOptionNamingIt) {
  struct Case {
    void (*change)(ContainerdOptions&);
    const char* names;
  };
  const Case cases[] = {
      {[](ContainerdOptions& o) { o.dir = "relative"; }, "containerd dir 'relative'"},
      {[](ContainerdOptions& o) { o.dir = "/tmp/x/"; }, "containerd dir '/tmp/x/'"},
      {[](ContainerdOptions& o) { o.dir = "/tmp/" + std::string(90, 'd'); }, "too long"},
      {[](ContainerdOptions& o) { o.cgroup_parent = ""; }, "cgroup parent ''"},
      {[](ContainerdOptions& o) { o.cgroup_parent = "/abs"; }, "cgroup parent '/abs'"},
      {[](ContainerdOptions& o) { o.cgroup_parent = "a/../b"; }, "component '..'"},
      {[](ContainerdOptions& o) { o.cgroup_parent = "a//b"; }, "component ''"},
      {[](ContainerdOptions& o) { o.cgroup_parent = "a b"; }, "component 'a b'"},
      {[](ContainerdOptions& o) { o.log_level = "loud"; }, "log level 'loud'"},
      {[](ContainerdOptions& o) { o.stop_timeout_ms = 0; }, "timeouts"},
      {[](ContainerdOptions& o) { o.sandbox_image = "pause:3.9"; }, "sandbox image"},
  };
  EXPECT_TRUE(ValidateContainerdOptions(Options("/tmp/node")).ok());
  for (const Case& c : cases) {
    ContainerdOptions o = Options("/tmp/node");
    c.change(o);
    Status s = ValidateContainerdOptions(o);
    ASSERT_FALSE(s.ok()) << c.names;
    EXPECT_EQ(s.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(s.error().message().find(c.names), std::string::npos) << s.error().message();
  }
}

TEST(FindProgram, NamesTheDebianPackageOfAMissingProgram) {
  Result<std::string> r = FindProgram("hami-no-such-containerd", "containerd");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(r.error().message().find("install Debian's containerd package (apt-get install "
                                     "containerd)"),
            std::string::npos)
      << r.error().message();
  r = FindProgram("/nonexistent/runc", "runc");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("/nonexistent/runc"), std::string::npos);
  EXPECT_NE(r.error().message().find("Debian's runc package"), std::string::npos);
  r = FindProgram("sh", "dash");
  ASSERT_TRUE(r.ok()) << r.error().message();
  EXPECT_EQ(r->front(), '/');
}

TEST(ContainerdStart, WithoutContainerdFailsNamingThePackageAndStartsNothing) {
  TempDir tmp("hami-cri-missing");
  ASSERT_TRUE(tmp.ok());
  for (auto [change, package] :
       {std::pair{+[](ContainerdOptions& o) { o.containerd = "/nonexistent/containerd"; },
                  "containerd"},
        std::pair{+[](ContainerdOptions& o) { o.runc = "hami-no-such-runc"; }, "runc"}}) {
    ContainerdOptions o = Options(tmp.File("node"));
    change(o);
    Result<std::unique_ptr<Containerd>> c = Containerd::Start(o);
    ASSERT_FALSE(c.ok());
    EXPECT_EQ(c.error().code(), ErrorCode::kNotFound);
    EXPECT_NE(c.error().message().find(std::string("install Debian's ") + package + " package"),
              std::string::npos)
        << c.error().message();
    std::ifstream config(tmp.File("node/config.toml"));
    EXPECT_FALSE(config.good()) << "nothing is written before the programs are found";
  }
}

}  // namespace
}  // namespace hami::sim::cri
