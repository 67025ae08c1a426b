// `kubectl exec` on a simulated cluster, as on a node: the real kubectl 1.32 speaks WebSocket
// (v5.channel.k8s.io) to the simulated API server, which asks the node's kubelet server for
// the container's streaming URL (CRI Exec) and speaks SPDY to the node's containerd. A GPU
// pod's /overrideEnv, exit codes, stdin and its end, stdout and stderr apart, a terminal and
// its size, the API's refusals, a container that does not run, a node without a kubelet; and
// `kubectl get events --sort-by=.lastTimestamp`.
//
// Root only (the container runtime's namespaces); kubectl needed.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using nlohmann::json;

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }
std::string Example(const std::string& name) { return std::string(HAMI_EXAMPLES_DIR) + "/" + name; }

constexpr char kPod[] = "vgpu-3000m-30";

using ::hami::testing::Ran;
using ::hami::testing::RunCommand;

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// A loopback port nothing listens on (bound, then closed).
int ClosedPort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return 1;
  socklen_t len = sizeof(a);
  getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len);
  return ntohs(a.sin_port);
}

class ExecClusterTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (geteuid() != 0 || access("/usr/bin/kubectl", X_OK) != 0) return;
    base_ = new TempDir("hami-exec-test");
    dir_ = base_->path() + "/cluster";
    Ran up = RunCommand({Bin("hami"), "sim", "cluster", "up", "--dir", dir_, "--nodes", "1",
                         "--gpus", "h100-80g:2"},
                        {}, 120000);
    up_output_ = up.out;
    up_code_ = up.code;
    if (up.code != 0) return;
    Ran applied = Kubectl({"apply", "-f", Example("vgpu-3000m-30.yaml")});
    Ran waited = Kubectl(
        {"wait", "--for=condition=Ready", "--timeout=60s", std::string("pod/") + kPod}, 90000);
    ready_ = applied.code == 0 && waited.code == 0;
    if (!ready_)
      up_output_ += applied.out + waited.out + Kubectl({"get", "pods", "-o", "wide"}).out;
  }
  static void TearDownTestSuite() {
    if (base_ == nullptr) return;
    RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", dir_}, {}, 120000);
    delete base_;
    base_ = nullptr;
  }

  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the nodes run containerd (namespaces, mounts, cgroups), "
                      "and the device plugin prepares /tmp/vgpulock";
    }
    if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
    ASSERT_EQ(up_code_, 0) << "hami sim cluster up failed:\n" << up_output_;
    ASSERT_TRUE(ready_) << kPod << " did not become Ready:\n" << up_output_;
  }

  static std::map<std::string, std::string> Env() {
    return {{"KUBECONFIG", dir_ + "/kubeconfig"}, {"KUBECACHEDIR", base_->path() + "/kcache"}};
  }
  // kubectl with stdout only (stderr goes to the test's log).
  static Ran Kubectl(std::vector<std::string> args, int timeout_ms = 60000) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return RunCommand(args, Env(), timeout_ms);
  }
  // A shell line with kubectl in it, stdout and stderr merged.
  static Ran Shell(const std::string& line, int timeout_ms = 60000) {
    return RunCommand({"/bin/sh", "-c", "exec 2>&1; " + line}, Env(), timeout_ms);
  }

  static TempDir* base_;
  static std::string dir_;
  static std::string up_output_;
  static int up_code_;
  static bool ready_;
};

TempDir* ExecClusterTest::base_ = nullptr;
std::string ExecClusterTest::dir_;
std::string ExecClusterTest::up_output_;
int ExecClusterTest::up_code_ = -1;
bool ExecClusterTest::ready_ = false;

TEST_F(ExecClusterTest, CatOverrideEnvShowsTheGpuPodsLimits) {
  Ran r = Kubectl({"exec", kPod, "--", "cat", "/overrideEnv"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_TRUE(Has(r.out, "CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n")) << r.out;
  EXPECT_TRUE(Has(r.out, "CUDA_DEVICE_SM_LIMIT=30\n")) << r.out;
  EXPECT_TRUE(Has(r.out, "HAMI_LIMITS_FORMAT=1\n")) << r.out;
}

TEST_F(ExecClusterTest, TheCommandsExitCodeIsKubectls) {
  Ran r = Shell("kubectl exec " + std::string(kPod) + " -- sh -c 'exit 7'");
  EXPECT_EQ(r.code, 7) << r.out;
  EXPECT_TRUE(Has(r.out, "command terminated with exit code 7")) << r.out;
  r = Kubectl({"exec", kPod, "--", "true"});
  EXPECT_EQ(r.code, 0) << r.out;
}

// The command's output only: kubectl's own log lines go to the test's log. (kubectl's
// WebSocket client may log that it discarded a message: the empty one on the lowest output
// channel that says the session is open, when it arrives before the client has set up its
// streams.)
TEST_F(ExecClusterTest, StdinAndItsEndReachTheCommand) {
  Ran r =
      RunCommand({"/bin/sh", "-c", "echo hi | kubectl exec -i " + std::string(kPod) + " -- cat"},
                 Env(), 60000);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "hi\n");
  r = RunCommand(
      {"/bin/sh", "-c", "seq 1 5000 | kubectl exec -i " + std::string(kPod) + " -- wc -l"}, Env(),
      60000);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "5000\n");
}

TEST_F(ExecClusterTest, StdoutAndStderrStayApart) {
  Ran r = Shell("kubectl exec " + std::string(kPod) +
                " -- sh -c 'echo out; echo err >&2; exit 3' 2>/dev/null");
  EXPECT_EQ(r.code, 3) << r.out;
  EXPECT_EQ(r.out, "out\n");
  r = Shell("kubectl exec " + std::string(kPod) + " -- sh -c 'echo out; echo err >&2' >/dev/null");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out, "err\n");
}

TEST_F(ExecClusterTest, ATerminalGetsItsSize) {
  if (access("/usr/bin/script", X_OK) != 0) GTEST_SKIP() << "needs script(1) for a terminal";
  // kubectl sends the size once the session is open, and the runtime applies it while the
  // command may already run (as on a node): the command waits for it.
  Ran r = Shell("script -qec \"stty cols 100 rows 30; kubectl exec -it " + std::string(kPod) +
                " -- sh -c 'for i in 1 2 3 4 5 6 7 8 9 10; do s=\\$(stty size); "
                "[ \\\"\\$s\\\" != \\\"0 0\\\" ] && break; sleep 0.2; done; echo \\$s; exit 4'\" "
                "/dev/null </dev/null");
  EXPECT_TRUE(Has(r.out, "30 100")) << r.out;
  EXPECT_TRUE(Has(r.out, "command terminated with exit code 4")) << r.out;
}

TEST_F(ExecClusterTest, AContainerThePodDoesNotHaveIsTheApisBadRequest) {
  Ran r = Shell("kubectl exec " + std::string(kPod) + " -c nosuch -- true");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out, "Error from server (BadRequest): container nosuch is not valid for pod " +
                             std::string(kPod)))
      << r.out;
}

TEST_F(ExecClusterTest, AContainerThatDoesNotRunIsNotFoundByTheKubelet) {
  // An image the node does not have: the container never starts (ErrImagePull).
  const std::string file = base_->path() + "/waiting.yaml";
  ASSERT_TRUE(std::ofstream(file) << R"(apiVersion: v1
kind: Pod
metadata:
  name: waiting
  labels:
    hami.io/webhook: ignore
spec:
  schedulerName: default-scheduler
  containers:
  - name: main
    image: hami.local/sim/absent:1
    command: ["sleep", "600"]
)");
  ASSERT_EQ(Kubectl({"apply", "-f", file}).code, 0);
  Ran bound = Kubectl(
      {"wait", "--for=jsonpath={.spec.nodeName}=node-1", "--timeout=60s", "pod/waiting"}, 90000);
  ASSERT_EQ(bound.code, 0) << bound.out;
  Ran r = Shell("kubectl exec waiting -- true");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(Has(r.out,
                  "error: Internal error occurred: unable to upgrade connection: container "
                  "not found (\"main\")"))
      << r.out;
  Kubectl({"delete", "pod", "waiting", "--wait=false"});
}

TEST_F(ExecClusterTest, ANodeWithoutAKubeletServerIsNamed) {
  const int port = ClosedPort();
  const std::string file = base_->path() + "/ghost.yaml";
  ASSERT_TRUE(std::ofstream(file) << R"(apiVersion: v1
kind: Node
metadata:
  name: ghost
---
apiVersion: v1
kind: Pod
metadata:
  name: haunted
  labels:
    hami.io/webhook: ignore
spec:
  nodeName: ghost
  containers:
  - name: main
    image: hami.local/sim/base:1
    command: ["sleep", "600"]
)");
  ASSERT_EQ(Kubectl({"apply", "-f", file}).code, 0);
  Ran patched = Kubectl(
      {"patch", "node", "ghost", "--subresource=status", "--type=merge", "-p",
       json{{"status",
             {{"addresses", json::array({{{"type", "InternalIP"}, {"address", "127.0.0.1"}}})},
              {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", port}}}}}}}}
           .dump()});
  ASSERT_EQ(patched.code, 0) << patched.out;
  Ran r = Shell("kubectl exec haunted -- true");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_TRUE(
      Has(r.out, "error: Internal error occurred: dial tcp 127.0.0.1:" + std::to_string(port) +
                     ": connect: connection refused (the kubelet of node \"ghost\")"))
      << r.out;
  Kubectl({"delete", "-f", file, "--wait=false"});
}

TEST_F(ExecClusterTest, EventsSortByLastTimestamp) {
  Ran r = Kubectl({"get", "events", "--sort-by=.lastTimestamp"});
  EXPECT_EQ(r.code, 0) << r.out;
  // The kubelet's events of the pod, oldest first: pulled before started.
  const size_t pulled = r.out.find("Pulled"), started = r.out.find("Started");
  ASSERT_NE(pulled, std::string::npos) << r.out;
  ASSERT_NE(started, std::string::npos) << r.out;
  EXPECT_TRUE(Has(r.out, "pod/" + std::string(kPod))) << r.out;
  Ran json_out = Kubectl({"get", "events", "-o", "json"});
  ASSERT_EQ(json_out.code, 0);
  for (const json& e : json::parse(json_out.out)["items"]) {
    if (e["source"].value("component", "") != "kubelet") continue;
    EXPECT_TRUE(e["lastTimestamp"].is_string()) << e.dump();
    EXPECT_TRUE(e["firstTimestamp"].is_string()) << e.dump();
  }
}

}  // namespace
}  // namespace hami
