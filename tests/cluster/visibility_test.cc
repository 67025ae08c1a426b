// A node's GPU memory and compute where Kubernetes' own tools look, on a simulated cluster:
// with advertiseMemoryAndCores on for node-1 only (its config.json entry), node-1's status
// carries nvidia.com/gpumem and nvidia.com/gpucores in capacity and allocatable and `kubectl
// describe node` (the real kubectl) lists them, node-2's does not; a pod's share shows in the
// node's "Allocated resources" and in hami-scheduler's per-node and per-GPU metrics (allocated
// and free, promtool-clean); a GPU that fails (an Xid the simulated NVML delivers) leaves the
// node's figures.
//
// Root only (the container runtime's namespaces); kubectl needed.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/cleanup.h"
#include "common/file.h"
#include "common/temp_dir.h"
#include "support/promtool.h"
#include "support/subprocess.h"

namespace hami {
namespace {

using ::hami::testing::Ran;
using ::hami::testing::RunCommand;
using nlohmann::json;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr int64_t kMiB = 1 << 20;
constexpr char kMemory[] = "nvidia.com/gpumem";
constexpr char kCores[] = "nvidia.com/gpucores";

std::string Bin(const std::string& name) { return std::string(HAMI_BIN_DIR) + "/" + name; }

// The "  name:  value" lines of one section of `kubectl describe node` ("Capacity:",
// "Allocatable:"), by name.
std::map<std::string, std::string> DescribeSection(const std::string& text,
                                                   const std::string& title) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  bool inside = false;
  for (std::string line; std::getline(lines, line);) {
    if (!inside) {
      inside = line == title;
      continue;
    }
    if (!line.starts_with("  ")) break;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const std::string name = line.substr(2, colon - 2);
    const size_t value = line.find_first_not_of(' ', colon + 1);
    out[name] = value == std::string::npos ? "" : line.substr(value);
  }
  return out;
}

class VisibilityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root: the nodes run containerd";
    if (access("/usr/bin/kubectl", X_OK) != 0) GTEST_SKIP() << "needs kubectl (/usr/bin/kubectl)";
  }

  Ran Kubectl(std::vector<std::string> args, int timeout_ms = 60000) {
    args.insert(args.begin(), "/usr/bin/kubectl");
    return RunCommand(args, {{"KUBECONFIG", info_["kubeconfig"].get<std::string>()}}, timeout_ms);
  }
  json Get(const std::string& what) {
    Ran r = Kubectl({"get", what, "-o", "json"});
    return r.code == 0 ? json::parse(r.out, nullptr, false) : json();
  }
  // The status.<field> entry `name` of node `node`, "" when absent.
  std::string NodeStatus(const std::string& node, const char* field, const char* name) {
    const json n = Get("node/" + node);
    if (!n.is_object()) return "";
    return n["status"].value(field, json::object()).value(name, "");
  }
  // The node's inventory as its device plugin registered it (hami.io/node-nvidia-register).
  json Inventory(const std::string& node) {
    const json n = Get("node/" + node);
    if (!n.is_object()) return json();
    return json::parse(n["metadata"]["annotations"].value("hami.io/node-nvidia-register", "[]"),
                       nullptr, false);
  }
  std::string SchedulerMetrics() {
    Ran r = RunCommand({"/usr/bin/python3", "-c",
                        "import sys, urllib.request; "
                        "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10)"
                        ".read().decode())",
                        info_["scheduler_metrics"].get<std::string>() + "/metrics"});
    return r.code == 0 ? r.out : std::string();
  }

  json info_;
};

TEST_F(VisibilityTest, DescribeNodeShowsGpuMemoryAndCoresOnlyWhereTurnedOnAndInStepWithHealth) {
  TempDir dir("hami-visibility-test");
  // The deployment's configuration, with one node entry turning the key on.
  const std::string config = dir.File("config");
  std::filesystem::create_directories(config);
  for (const char* f : {"device-config.yaml", "kube-scheduler-config.yaml"}) {
    std::filesystem::copy_file(std::string(HAMI_SOURCE_DIR) + "/deploy/base/config/" + f,
                               config + "/" + f);
  }
  {
    auto out = OpenRegularFile(config + "/config.json", O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_TRUE(out.ok()) << out.error().message();
    ASSERT_TRUE(WriteAll(out->get(),
                         R"({"nodeconfig": [{"name": "node-1", "advertisememoryandcores": true}]})")
                    .ok());
  }
  const std::string c = dir.File("c");
  Ran up = RunCommand({Bin("hami"), "sim", "cluster", "up", "--dir", c, "--nodes", "2", "--gpus",
                       "h100-80g:2", "--config-dir", config},
                      {}, 120000);
  Cleanup down([&] {
    RunCommand({Bin("hami"), "sim", "cluster", "down", "--dir", c}, {}, 120000);
  });
  ASSERT_EQ(up.code, 0) << up.out;
  auto text = ReadFileToString(c + "/cluster.json", 1 << 20);
  ASSERT_TRUE(text.ok()) << text.error().message();
  info_ = json::parse(*text, nullptr, false);
  ASSERT_TRUE(info_.is_object());

  // node-1 publishes the sums of its two GPUs, in capacity and allocatable alike.
  const json gpus = Inventory("node-1");
  ASSERT_TRUE(gpus.is_array() && gpus.size() == 2) << gpus.dump();
  int64_t devmem = 0;
  for (const json& g : gpus) devmem += g.value("devmem", 0);
  ASSERT_GT(devmem, 0);
  ASSERT_TRUE(::hami::testing::PollUntil(
      [&] { return NodeStatus("node-1", "allocatable", kCores) == "200"; }, 30000, 200000))
      << Get("node/node-1").dump(2);
  for (const char* field : {"capacity", "allocatable"}) {
    EXPECT_EQ(NodeStatus("node-1", field, kMemory), std::to_string(devmem)) << field;
    EXPECT_EQ(NodeStatus("node-1", field, kCores), "200") << field;
    EXPECT_EQ(NodeStatus("node-2", field, kMemory), "") << field;
    EXPECT_EQ(NodeStatus("node-2", field, kCores), "") << field;
  }

  Ran described = Kubectl({"describe", "node", "node-1"});
  ASSERT_EQ(described.code, 0) << described.out;
  for (const char* section : {"Capacity:", "Allocatable:"}) {
    const auto values = DescribeSection(described.out, section);
    EXPECT_EQ(values.count(kMemory) ? values.at(kMemory) : "", std::to_string(devmem))
        << section << "\n"
        << described.out;
    EXPECT_EQ(values.count(kCores) ? values.at(kCores) : "", "200") << section;
    EXPECT_EQ(values.count("nvidia.com/gpu") ? values.at("nvidia.com/gpu") : "", "20") << section;
  }
  Ran other = Kubectl({"describe", "node", "node-2"});
  ASSERT_EQ(other.code, 0) << other.out;
  EXPECT_EQ(DescribeSection(other.out, "Capacity:").count(kMemory), 0u) << other.out;
  EXPECT_EQ(DescribeSection(other.out, "Allocatable:").count(kCores), 0u) << other.out;

  // A pod's share, on node-1's first GPU (nvidia.com/use-gpuuuid): in the node's "Allocated
  // resources" (kubectl adds up the pods' requests of what the node offers) and in
  // hami-scheduler's metrics.
  auto example = ReadFileToString(std::string(HAMI_SOURCE_DIR) + "/examples/vgpu-3000m-30.yaml");
  ASSERT_TRUE(example.ok()) << example.error().message();
  std::string manifest = *example;
  const std::string named = "  name: vgpu-3000m-30\n";
  ASSERT_NE(manifest.find(named), std::string::npos);
  manifest.insert(manifest.find(named) + named.size(),
                  "  annotations:\n    nvidia.com/use-gpuuuid: " + gpus[0].value("id", "") + "\n");
  {
    auto out = OpenRegularFile(dir.File("pod.yaml"), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ASSERT_TRUE(out.ok()) << out.error().message();
    ASSERT_TRUE(WriteAll(out->get(), manifest).ok());
  }
  Ran applied = Kubectl({"apply", "-f", dir.File("pod.yaml")});
  ASSERT_EQ(applied.code, 0) << applied.out;
  Ran ready =
      Kubectl({"wait", "--for=condition=Ready", "--timeout=60s", "pod/vgpu-3000m-30"}, 90000);
  ASSERT_EQ(ready.code, 0) << ready.out << Kubectl({"get", "pods", "-o", "wide"}).out;
  const std::string node = Get("pod/vgpu-3000m-30")["spec"].value("nodeName", "");
  ASSERT_EQ(node, "node-1");
  Ran with_pod = Kubectl({"describe", "node", node});
  ASSERT_EQ(with_pod.code, 0) << with_pod.out;
  const std::string allocated = with_pod.out.substr(with_pod.out.find("Allocated resources:"));
  EXPECT_THAT(allocated, ::testing::ContainsRegex("\n  nvidia.com/gpumem +3k +3k\n")) << allocated;
  EXPECT_THAT(allocated, ::testing::ContainsRegex("\n  nvidia.com/gpucores +30 +30\n"))
      << allocated;

  const int64_t node_mem = devmem;  // both nodes have the same two GPUs
  std::string metrics;
  ASSERT_TRUE(::hami::testing::PollUntil(
      [&] {
        metrics = SchedulerMetrics();
        return metrics.find("hami_node_gpu_memory_allocated_bytes{node=\"" + node + "\"} " +
                            std::to_string(3000 * kMiB) + "\n") != std::string::npos;
      },
      30000, 200000))
      << metrics;
  const std::string free_line = "hami_node_gpu_memory_free_bytes{node=\"" + node + "\"} " +
                                std::to_string((node_mem - 3000) * kMiB) + "\n";
  EXPECT_THAT(metrics, HasSubstr(free_line));
  EXPECT_THAT(metrics,
              HasSubstr("hami_node_gpu_core_allocated_ratio{node=\"" + node + "\"} 0.3\n"));
  EXPECT_THAT(metrics, HasSubstr("hami_node_gpu_core_free_ratio{node=\"" + node + "\"} 1.7\n"));
  EXPECT_THAT(metrics, ::testing::ContainsRegex(
                           "hami_gpu_memory_free_bytes\\{node=\"" + node + "\"[^}]*\\} " +
                           std::to_string((gpus[0].value("devmem", 0) - 3000) * kMiB) + "\n"));
  const auto lint = ::hami::testing::PromtoolCheckMetrics(metrics);
  if (lint.available) {
    for (const std::string& line : lint.findings) {
      EXPECT_THAT(line, HasSubstr("hami_gpu_shared_count")) << "promtool: " << line;
    }
  }

  // GPU 1 of node-1 falls off the bus: its memory and cores leave node-1's status.
  Ran xid = RunCommand(
      {Bin("hami"), "sim", "xid", "1", "79", "--state", info_["nodes"][0].value("sim_state", "")});
  ASSERT_EQ(xid.code, 0) << xid.out;
  Ran dropped = Kubectl({"wait", "--for=jsonpath={.status.allocatable.nvidia\\.com/gpucores}=100",
                         "--timeout=60s", "node/node-1"},
                        90000);
  ASSERT_EQ(dropped.code, 0) << dropped.out << Get("node/node-1").dump(2);
  const int64_t healthy_mem = gpus[0].value("devmem", 0);
  for (const char* field : {"capacity", "allocatable"}) {
    EXPECT_EQ(NodeStatus("node-1", field, kMemory), std::to_string(healthy_mem)) << field;
    EXPECT_EQ(NodeStatus("node-1", field, kCores), "100") << field;
  }
  EXPECT_THAT(Kubectl({"describe", "node", "node-2"}).out,
              Not(HasSubstr("  nvidia.com/gpucores:")));
}

}  // namespace
}  // namespace hami
