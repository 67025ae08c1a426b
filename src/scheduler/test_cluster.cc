#include "scheduler/test_cluster.h"

#include <algorithm>

namespace hami::scheduler::testing {

using nlohmann::json;

std::string GpuUuid(std::string_view node, int index) {
  return "GPU-" + std::string(node) + "-" + std::to_string(index);
}

json GpuNode(const GpuNodeSpec& s) {
  std::vector<kube::NodeDevice> devices;
  const int per_numa = std::max(1, s.gpus / std::max(1, s.numa_nodes));
  for (int i = 0; i < s.gpus; ++i) {
    kube::NodeDevice d;
    d.id = GpuUuid(s.name, i);
    d.index = i;
    d.count = s.split;
    d.devmem_mib = s.mem_mib;
    d.devcore = 100;
    d.type = s.type;
    d.numa = i / per_numa;
    d.mode = "hami-core";
    d.health = true;
    devices.push_back(d);
  }
  const std::string gpus = std::to_string(s.gpus * s.split);
  return {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata",
           {{"name", s.name},
            {"labels", {{"kubernetes.io/hostname", s.name}}},
            {"annotations",
             {{std::string(kube::kNodeRegisterAnnotation), kube::EncodeNodeInventory(devices)}}}}},
          {"spec", json::object()},
          {"status",
           {{"capacity", {{"nvidia.com/gpu", gpus}, {"pods", "110"}}},
            {"allocatable", {{"nvidia.com/gpu", gpus}, {"pods", "110"}}},
            {"conditions", json::array({{{"type", "Ready"}, {"status", "True"}}})}}}};
}

json GpuPod(const GpuPodSpec& s) {
  json limits = {{"nvidia.com/gpu", std::to_string(s.gpus)}};
  if (s.mem_mib > 0) limits["nvidia.com/gpumem"] = std::to_string(s.mem_mib);
  if (s.cores >= 0) limits["nvidia.com/gpucores"] = std::to_string(s.cores);
  json meta = {{"name", s.name}, {"namespace", s.ns}};
  if (!s.annotations.empty()) meta["annotations"] = s.annotations;
  json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata", meta},
      {"spec",
       {{"schedulerName", s.scheduler_name},
        {"containers",
         json::array(
             {{{"name", "main"}, {"image", "cuda"}, {"resources", {{"limits", limits}}}}})}}}};
  if (s.priority) {
    pod["spec"]["priority"] = *s.priority;
    pod["spec"]["priorityClassName"] = PriorityClassName(*s.priority);
  }
  return pod;
}

std::string PriorityClassName(int32_t value) {
  return value < 0 ? "priority-minus-" + std::to_string(-int64_t{value})
                   : "priority-" + std::to_string(value);
}

nlohmann::json PriorityClass(int32_t value) {
  return {{"apiVersion", "scheduling.k8s.io/v1"},
          {"kind", "PriorityClass"},
          {"metadata", {{"name", PriorityClassName(value)}}},
          {"value", value}};
}

json RunningGpuPod(const GpuPodSpec& s, std::string_view node, const kube::PodDevices& devices) {
  json pod = GpuPod(s);
  auto text = kube::EncodePodDevices(devices, kube::kDevicesAllocatedAnnotation);
  json& ann = pod["metadata"]["annotations"];
  if (!ann.is_object()) ann = json::object();
  ann[std::string(kube::kVgpuNodeAnnotation)] = std::string(node);
  ann[std::string(kube::kDevicesAllocatedAnnotation)] = text.ok() ? *text : "";
  ann[std::string(kube::kDevicesToAllocateAnnotation)] = ";";
  ann[std::string(kube::kBindPhaseAnnotation)] = "success";
  ann[std::string(kube::kVgpuTimeAnnotation)] = "1716199325";
  ann[std::string(kube::kBindTimeAnnotation)] = "1716199325";
  pod["spec"]["nodeName"] = std::string(node);
  return pod;
}

std::string ExtenderSchedulerConfig(int port) {
  return "apiVersion: kubescheduler.config.k8s.io/v1\n"
         "kind: KubeSchedulerConfiguration\n"
         "profiles:\n"
         "- schedulerName: hami-scheduler\n"
         "extenders:\n"
         "- urlPrefix: http://127.0.0.1:" +
         std::to_string(port) +
         "\n"
         "  filterVerb: filter\n"
         "  prioritizeVerb: prioritize\n"
         "  bindVerb: bind\n"
         "  preemptVerb: preempt\n"
         "  weight: 1\n"
         "  nodeCacheCapable: true\n"
         "  httpTimeout: 30s\n"
         "  managedResources:\n"
         "  - name: nvidia.com/gpu\n"
         "    ignoredByScheduler: true\n";
}

}  // namespace hami::scheduler::testing
