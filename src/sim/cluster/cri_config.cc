#include "sim/cluster/cri_config.h"

#include "sim/device_nodes.h"

namespace hami::sim::cluster {
namespace {

namespace v1 = cri::v1;

void SetNamespaces(const PodPlan& plan, v1::NamespaceOption* ns) {
  ns->set_network(v1::NODE);
  ns->set_pid(PidMode(plan));
  ns->set_ipc(v1::POD);
}

void AddMount(const kubelet::Mount& m, v1::ContainerConfig* config) {
  v1::Mount* out = config->add_mounts();
  out->set_container_path(m.container_path);
  out->set_host_path(m.host_path);
  out->set_readonly(m.read_only);
}

void AddEnv(const std::string& key, const std::string& value, v1::ContainerConfig* config) {
  v1::KeyValue* kv = config->add_envs();
  kv->set_key(key);
  kv->set_value(value);
}

}  // namespace

std::string PodLogDirectory(const std::string& root, const PodPlan& plan) {
  return root + "/" + plan.ns + "_" + plan.name + "_" + plan.uid;
}

std::string ContainerLogPath(const std::string& container, int attempt) {
  return container + "/" + std::to_string(attempt) + ".log";
}

v1::NamespaceMode PidMode(const PodPlan& plan) {
  if (plan.host_pid) return v1::NODE;
  if (plan.share_process_namespace) return v1::POD;
  return v1::CONTAINER;
}

v1::PodSandboxConfig SandboxConfigFor(const PodPlan& plan, const std::string& pod_log_root,
                                      const std::string& cgroup_parent, int attempt) {
  v1::PodSandboxConfig config;
  v1::PodSandboxMetadata* meta = config.mutable_metadata();
  meta->set_name(plan.name);
  meta->set_uid(plan.uid);
  meta->set_namespace_(plan.ns);
  meta->set_attempt(uint32_t(attempt));
  config.set_log_directory(PodLogDirectory(pod_log_root, plan));
  auto& labels = *config.mutable_labels();
  for (const auto& [k, v] : plan.labels) labels[k] = v;
  labels[kPodNameLabel] = plan.name;
  labels[kPodNamespaceLabel] = plan.ns;
  labels[kPodUidLabel] = plan.uid;
  auto& annotations = *config.mutable_annotations();
  for (const auto& [k, v] : plan.annotations) annotations[k] = v;
  v1::LinuxPodSandboxConfig* linux = config.mutable_linux();
  linux->set_cgroup_parent(cgroup_parent);
  SetNamespaces(plan, linux->mutable_security_context()->mutable_namespace_options());
  return config;
}

v1::ContainerConfig ContainerConfigFor(const PodPlan& plan, const ContainerPlan& container,
                                       const kubelet::ContainerAllocation& response,
                                       const NodeAdditions& node, const std::string& device_nodes,
                                       int attempt, const std::vector<kubelet::Mount>& volumes) {
  const bool gpu = !device_nodes.empty();
  v1::ContainerConfig config;
  config.mutable_metadata()->set_name(container.name);
  config.mutable_metadata()->set_attempt(uint32_t(attempt));
  config.mutable_image()->set_image(container.image);
  for (const std::string& c : container.command) config.add_command(c);
  for (const std::string& a : container.args) config.add_args(a);
  config.set_working_dir(container.working_dir);
  // Every pod shares the node's network here; one that did not ask for it still sees its own
  // name as its host name, as it would in a network namespace of its own.
  if (!plan.host_network) AddEnv("HOSTNAME", plan.name, &config);
  for (const auto& [k, v] : node.envs) AddEnv(k, v, &config);
  for (const auto& [k, v] : response.envs) AddEnv(k, v, &config);
  for (const auto& [k, v] : container.env) AddEnv(k, v, &config);
  for (const kubelet::Mount& m : node.mounts) AddMount(m, &config);
  for (const kubelet::Mount& m : gpu ? node.gpu_mounts : node.plain_mounts) AddMount(m, &config);
  if (gpu) AddMount({kDefaultDeviceNodesPath, device_nodes, true}, &config);
  for (const kubelet::Mount& m : response.mounts) AddMount(m, &config);
  for (const kubelet::Mount& m : volumes) AddMount(m, &config);
  for (const kubelet::DeviceSpec& d : response.devices) {
    v1::Device* out = config.add_devices();
    out->set_container_path(d.container_path);
    out->set_host_path(d.host_path);
    out->set_permissions(d.permissions);
  }
  auto& labels = *config.mutable_labels();
  labels[kContainerNameLabel] = container.name;
  labels[kPodNameLabel] = plan.name;
  labels[kPodNamespaceLabel] = plan.ns;
  labels[kPodUidLabel] = plan.uid;
  auto& annotations = *config.mutable_annotations();
  annotations[kRestartCountAnnotation] = std::to_string(attempt);
  for (const auto& [k, v] : response.annotations) annotations[k] = v;
  config.set_log_path(ContainerLogPath(container.name, attempt));
  SetNamespaces(plan,
                config.mutable_linux()->mutable_security_context()->mutable_namespace_options());
  return config;
}

}  // namespace hami::sim::cluster
