// The CRI configs the simulated kubelet sends: what the kubelet puts in them, in its order.
#include "sim/cluster/cri_config.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace hami::sim::cluster {
namespace {

namespace v1 = cri::v1;

PodPlan Plan() {
  PodPlan p;
  p.ns = "team";
  p.name = "train";
  p.uid = "0c9e-uid";
  p.labels = {{"app", "train"}};
  p.annotations = {{"hami.io/vgpu-devices-allocated", "GPU-1,NVIDIA,3000,30:;"}};
  ContainerPlan c;
  c.name = "main";
  c.image = "hami.local/sim/base:1";
  c.command = {"sh", "-c"};
  c.args = {"echo hi"};
  c.env = {{"CUDA_DEVICE_MEMORY_LIMIT", "1g"}, {"POD", "train"}};
  c.devices = {{"nvidia.com/gpu", 1}};
  p.containers.push_back(c);
  return p;
}

kubelet::ContainerAllocation Response() {
  kubelet::ContainerAllocation r;
  r.envs = {{"NVIDIA_VISIBLE_DEVICES", "GPU-1"}, {"CUDA_DEVICE_MEMORY_LIMIT", "3000m"}};
  // The broker's socket directory nested in the container directory, listed after it.
  r.mounts = {{"/usr/local/vgpu", "/h/containers/u_main", false},
              {"/usr/local/vgpu/libvgpu.so", "/h/libvgpu.so", true},
              {"/etc/ld.so.preload", "/h/ld.so.preload", true},
              {"/tmp/vgpulock", "/tmp/vgpulock", false}};
  r.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
  r.annotations = {{"hami.io/from-plugin", "yes"}};
  return r;
}

NodeAdditions Node() {
  NodeAdditions n;
  n.envs = {{"PATH", "/opt/hami/bin:/usr/bin"}};
  n.mounts = {{"/opt/hami/bin", "/build/bin", true}};
  n.gpu_mounts = {{"/usr/lib", "/node/toolkit/usr-lib", true},
                  {"/tmp/hami-sim.state", "/node/sim.state", false}};
  n.plain_mounts = {{"/usr/lib", "/usr/lib", true}};
  return n;
}

std::vector<std::pair<std::string, std::string>> Envs(const v1::ContainerConfig& c) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const v1::KeyValue& kv : c.envs()) out.emplace_back(kv.key(), kv.value());
  return out;
}

std::vector<std::string> MountList(const v1::ContainerConfig& c) {
  std::vector<std::string> out;
  for (const v1::Mount& m : c.mounts()) {
    out.push_back(m.container_path() + "<-" + m.host_path() + (m.readonly() ? ":ro" : ":rw"));
  }
  return out;
}

TEST(SandboxConfigFor, PutsThePodOnTheNodesNetworkWithItsLogDirectoryCgroupAndLabels) {
  v1::PodSandboxConfig s = SandboxConfigFor(Plan(), "/logs/pods", "hami-sim/n1/pod0c9e", 0);
  EXPECT_EQ(s.metadata().name(), "train");
  EXPECT_EQ(s.metadata().namespace_(), "team");
  EXPECT_EQ(s.metadata().uid(), "0c9e-uid");
  EXPECT_EQ(s.hostname(), "") << "runc refuses a hostname without a UTS namespace of its own";
  EXPECT_EQ(s.log_directory(), "/logs/pods/team_train_0c9e-uid");
  EXPECT_EQ(s.linux().cgroup_parent(), "hami-sim/n1/pod0c9e");
  const v1::NamespaceOption& ns = s.linux().security_context().namespace_options();
  EXPECT_EQ(ns.network(), v1::NODE);
  EXPECT_EQ(ns.pid(), v1::CONTAINER);
  EXPECT_EQ(s.labels().at("app"), "train");
  EXPECT_EQ(s.labels().at(kPodUidLabel), "0c9e-uid");
  EXPECT_EQ(s.annotations().at("hami.io/vgpu-devices-allocated"), "GPU-1,NVIDIA,3000,30:;");
}

TEST(SandboxConfigFor, HostPidAndASharedProcessNamespaceSetThePidMode) {
  PodPlan p = Plan();
  p.share_process_namespace = true;
  EXPECT_EQ(PidMode(p), v1::POD);
  p.host_pid = true;
  EXPECT_EQ(PidMode(p), v1::NODE);
  EXPECT_EQ(SandboxConfigFor(p, "/l", "c", 0).linux().security_context().namespace_options().pid(),
            v1::NODE);
}

constexpr char kDeviceNodes[] = "/node/toolkit/containers/0c9e-uid_main/device-nodes";

TEST(ContainerConfigFor, OrdersEnvsSoThePodWinsOverThePluginAndThePluginOverTheNode) {
  PodPlan p = Plan();
  v1::ContainerConfig c =
      ContainerConfigFor(p, p.containers[0], Response(), Node(), kDeviceNodes, 0);
  // No CUDA_VISIBLE_DEVICES: a real container has none; its device nodes choose its GPUs.
  const std::vector<std::pair<std::string, std::string>> want = {
      {"HOSTNAME", "train"},
      {"PATH", "/opt/hami/bin:/usr/bin"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "3000m"},
      {"NVIDIA_VISIBLE_DEVICES", "GPU-1"},
      {"CUDA_DEVICE_MEMORY_LIMIT", "1g"},
      {"POD", "train"}};
  EXPECT_EQ(Envs(c), want);
  EXPECT_EQ(std::vector<std::string>(c.command().begin(), c.command().end()),
            (std::vector<std::string>{"sh", "-c"}));
  EXPECT_EQ(std::vector<std::string>(c.args().begin(), c.args().end()),
            (std::vector<std::string>{"echo hi"}));
  EXPECT_EQ(c.image().image(), "hami.local/sim/base:1");
}

TEST(ContainerConfigFor, KeepsThePluginsMountsInTheResponsesOrderAfterTheNodes) {
  PodPlan p = Plan();
  v1::ContainerConfig c =
      ContainerConfigFor(p, p.containers[0], Response(), Node(), kDeviceNodes, 2);
  const std::vector<std::string> want = {
      "/opt/hami/bin<-/build/bin:ro",
      "/usr/lib<-/node/toolkit/usr-lib:ro",
      "/tmp/hami-sim.state<-/node/sim.state:rw",
      std::string("/run/hami-sim/device-nodes<-") + kDeviceNodes + ":ro",
      "/usr/local/vgpu<-/h/containers/u_main:rw",
      "/usr/local/vgpu/libvgpu.so<-/h/libvgpu.so:ro",
      "/etc/ld.so.preload<-/h/ld.so.preload:ro",
      "/tmp/vgpulock<-/tmp/vgpulock:rw"};
  EXPECT_EQ(MountList(c), want);
  ASSERT_EQ(c.devices_size(), 1);
  EXPECT_EQ(c.devices(0).container_path(), "/dev/nvidia0");
  EXPECT_EQ(c.devices(0).permissions(), "rw");
  EXPECT_EQ(c.annotations().at("hami.io/from-plugin"), "yes");
  EXPECT_EQ(c.annotations().at(kRestartCountAnnotation), "2");
  EXPECT_EQ(c.metadata().attempt(), 2u);
  EXPECT_EQ(c.log_path(), "main/2.log");
  EXPECT_EQ(c.labels().at(kContainerNameLabel), "main");
  EXPECT_EQ(c.linux().security_context().namespace_options().pid(), v1::CONTAINER)
      << "without it containerd puts the container in the pod's PID namespace";
}

TEST(ContainerConfigFor, AContainerWithoutDevicesGetsThePlainMountsAndNoGpuVariable) {
  PodPlan p = Plan();
  p.containers[0].devices.clear();
  v1::ContainerConfig c = ContainerConfigFor(p, p.containers[0], {}, Node(), "", 0);
  EXPECT_EQ(MountList(c),
            (std::vector<std::string>{"/opt/hami/bin<-/build/bin:ro", "/usr/lib<-/usr/lib:ro"}));
  for (const auto& [k, v] : Envs(c)) EXPECT_NE(k, "CUDA_VISIBLE_DEVICES");
}

}  // namespace
}  // namespace hami::sim::cluster
