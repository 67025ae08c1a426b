// Resizing a running pod's GPU share on a simulated cluster, end to end: examples/vgpu-resize.yaml
// runs one long-running CUDA process (hami-memory-demo probe) in a containerd container under
// 3000 MiB; `kubectl annotate ... hami.io/resize=cuda:gpumem=8000,gpucores=50` goes through
// hami-scheduler (accepted, the allocation annotation rewritten) and the node's device plugin
// (the container's region and limits file rewritten in place, status "applied"); the same
// process, never restarted, then allocates what it was refused, a new process in the container
// reads the new limits, and a request past the GPU is refused with the share untouched.
//
// Root only (the container runtime's namespaces); kubectl needed.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/cleanup.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using ::hami::testing::PollUntil;
using ::hami::testing::Ran;
using ::hami::testing::RunCommand;
using nlohmann::json;
using ::testing::HasSubstr;

constexpr char kPod[] = "vgpu-resize";

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }

class ResizeClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: the nodes run containerd (namespaces, mounts, cgroups)";
    }
    if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
    ASSERT_TRUE(dir_.ok());
  }

  Ran Kubectl(std::vector<std::string> args, int timeout_ms = 60000) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return RunCommand(args, {{"KUBECONFIG", cluster_ + "/kubeconfig"}}, timeout_ms);
  }
  std::string Logs() { return Kubectl({"logs", kPod}).out; }
  // The resize status annotation, decoded here from its JSON ("phase", "reason", "request").
  json ResizeStatus() {
    Ran r = Kubectl({"get", std::string("pod/") + kPod, "-o", "json"});
    if (r.code != 0) return json();
    const json pod = json::parse(r.out, nullptr, false);
    if (!pod.is_object()) return json();
    const json annotations = pod["metadata"].value("annotations", json::object());
    return json::parse(annotations.value("hami.io/resize-status", "null"), nullptr, false);
  }
  // Waits for the status that answers `request` with a final phase (applied or refused).
  json FinalStatusFor(const std::string& request) {
    json status;
    // The status is an annotation the node writes; no event of the test's own announces it.
    PollUntil(
        [&] {
          status = ResizeStatus();
          return status.is_object() && status.value("request", "") == request &&
                 (status.value("phase", "") == "applied" || status.value("phase", "") == "refused");
        },
        60000, 200000);
    return status;
  }
  // A line to the probe: it tries its 4000 MiB once more. True when the write went through.
  bool Ask() { return Kubectl({"exec", kPod, "--", "sh", "-c", "echo > /tmp/ask"}).code == 0; }
  // The probe's line numbered `n` in the pod's log, once it is there; "" when it never came.
  std::string ProbeLine(int n) {
    const std::string prefix = "probe " + std::to_string(n) + ": ";
    std::string line;
    // The probe prints into the container's log, which `kubectl logs` reads.
    PollUntil(
        [&] {
          const std::string logs = Logs();
          const size_t at = logs.find(prefix);
          if (at == std::string::npos) return false;
          line = logs.substr(at, logs.find('\n', at) - at);
          return true;
        },
        30000, 100000);
    return line;
  }

  TempDir dir_{"hami-resize-cluster-test"};
  std::string cluster_ = dir_.File("c");
};

TEST_F(ResizeClusterTest, ARunningProcessFollowsTheResizeAndANewOneReadsTheNewLimits) {
  Ran up = RunCommand({Bin("hami"), "sim", "cluster", "up", "--dir", cluster_, "--nodes", "1",
                       "--gpus", "h100-80g:1"},
                      {}, 120000);
  Cleanup down([&] {
    RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", cluster_}, {}, 120000);
  });
  ASSERT_EQ(up.code, 0) << up.out;
  Ran applied = Kubectl({"apply", "-f", std::string(HAMI_EXAMPLES_DIR) + "/vgpu-resize.yaml"});
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran ready = Kubectl(
      {"wait", "--for=condition=Ready", "--timeout=60s", std::string("pod/") + kPod}, 90000);
  ASSERT_EQ(ready.code, 0) << ready.out << Kubectl({"get", "pods", "-o", "wide"}).out;
  ASSERT_TRUE(
      PollUntil([&] { return Logs().find("probe: ready") != std::string::npos; }, 30000, 100000))
      << Logs();

  // Under its 3000 MiB share the probe is refused 4000 MiB.
  ASSERT_TRUE(Ask());
  EXPECT_EQ(ProbeLine(1), "probe 1: total 3000 MiB, cuMemAlloc(4000 MiB): CUDA_ERROR_OUT_OF_MEMORY")
      << Logs();

  const std::string grow = "cuda:gpumem=8000,gpucores=50";
  Ran annotated =
      Kubectl({"annotate", std::string("pod/") + kPod, "hami.io/resize=" + grow, "--overwrite"});
  ASSERT_EQ(annotated.code, 0) << annotated.out;
  const json grown = FinalStatusFor(grow);
  ASSERT_EQ(grown.value("phase", ""), "applied") << grown.dump();
  EXPECT_THAT(grown.value("reason", ""), HasSubstr("3000 -> 8000 MiB, 30 -> 50 cores"));

  // The same process, at its next calls: the limits file's watcher applies the rewrite within
  // milliseconds of it, so the first ask after "applied" normally sees it; a few more are
  // allowed for a loaded machine, each a call of the running process.
  std::string line;
  int n = 1;
  for (int tries = 0; tries < 10; ++tries) {
    ASSERT_TRUE(Ask());
    line = ProbeLine(++n);
    if (line.find("CUDA_SUCCESS") != std::string::npos) break;
  }
  EXPECT_THAT(line, HasSubstr(": total 8000 MiB, cuMemAlloc(4000 MiB): CUDA_SUCCESS")) << Logs();

  // A new process reads the new limits (the limits file) though its environment still says 3000.
  Ran file = Kubectl({"exec", kPod, "--", "cat", "/overrideEnv"});
  EXPECT_THAT(file.out, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=8000m\n"));
  EXPECT_THAT(file.out, HasSubstr("CUDA_DEVICE_SM_LIMIT=50\n"));
  Ran fresh = Kubectl({"exec", kPod, "--", "hami-memory-demo", "limit", "8000m"});
  EXPECT_EQ(fresh.code, 0) << fresh.out;
  Ran env = Kubectl({"exec", kPod, "--", "printenv", "CUDA_DEVICE_MEMORY_LIMIT_0"});
  EXPECT_EQ(env.out, "3000m\n") << "the container's environment is what it started with";

  // Past the GPU (80 GiB): refused, naming the amounts; the share stays 8000 MiB.
  const std::string too_big = "cuda:gpumem=90000";
  ASSERT_EQ(
      Kubectl({"annotate", std::string("pod/") + kPod, "hami.io/resize=" + too_big, "--overwrite"})
          .code,
      0);
  const json refused = FinalStatusFor(too_big);
  EXPECT_EQ(refused.value("phase", ""), "refused") << refused.dump();
  EXPECT_THAT(refused.value("reason", ""), HasSubstr("at most"));
  ASSERT_TRUE(Ask());
  EXPECT_THAT(ProbeLine(++n), HasSubstr(": total 8000 MiB, cuMemAlloc(4000 MiB): CUDA_SUCCESS"));
  Ran events =
      Kubectl({"get", "events", "--field-selector", std::string("involvedObject.name=") + kPod});
  EXPECT_THAT(events.out, HasSubstr("ResizeAccepted"));
  EXPECT_THAT(events.out, HasSubstr("ResizeRefused"));
}

}  // namespace
}  // namespace hami
