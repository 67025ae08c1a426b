// Fuzzes the parsers of what reaches hami-scheduler from outside: ExtenderArgs (filter and
// prioritize bodies, the pod in them and its HAMi requests, constraints and policy),
// ExtenderBindingArgs, ExtenderPreemptionArgs (both victim forms), and the node annotations
// hami.io/node-nvidia-score and hami.io/device-cordon. Nothing crashes, every rejection has a
// message, and a pod that is accepted fits a small node without breaking FitPod's invariants.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "scheduler/extender_api.h"
#include "scheduler/fit.h"
#include "scheduler/node_annotations.h"
#include "scheduler/policy.h"
#include "scheduler/request.h"

namespace {

using namespace hami::scheduler;

void CheckPod(const hami::kube::Pod& pod) {
  auto request = ParsePodRequest(pod, hami::config::DeviceConfig{});
  if (!request.ok()) {
    if (request.error().message().empty()) std::abort();
    return;
  }
  auto constraints = ConstraintsForPod(pod.metadata);
  auto gpu = ParseGpuPolicy("spread", "fuzz");
  if (!constraints.ok() || !gpu.ok()) return;
  auto policy = PolicyForPod(pod.metadata, *gpu, NodePolicy::kBinpack);
  if (!policy.ok()) return;
  NodeGpus node;
  node.name = "n";
  for (int i = 0; i < 4; ++i) {
    hami::kube::NodeDevice d;
    d.id = "GPU-" + std::to_string(i);
    d.index = i;
    d.count = 4;
    d.devmem_mib = 16384;
    d.devcore = 100;
    d.type = "NVIDIA-A100";
    d.numa = i / 2;
    d.health = true;
    node.gpus.push_back({d, {}, false});
  }
  FitResult r = FitPod(node, *request, *constraints, *policy, {});
  if (r.fits) {
    if (r.score < 0 || r.score > 10) std::abort();
    if (r.devices.size() != request->init_containers.size() + request->containers.size()) {
      std::abort();
    }
  } else if (r.reason.empty()) {
    std::abort();
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto args = ParseExtenderArgs(text);
  if (args.ok()) {
    CheckPod(args->pod);
  } else if (args.error().message().empty()) {
    std::abort();
  }
  auto preemption = ParseExtenderPreemptionArgs(text);
  if (preemption.ok()) {
    CheckPod(preemption->pod);
    for (const auto& [node, victims] : preemption->victims) {
      if (node.empty()) std::abort();
    }
  } else if (preemption.error().message().empty()) {
    std::abort();
  }
  auto binding = ParseExtenderBindingArgs(text);
  if (!binding.ok() && binding.error().message().empty()) std::abort();
  auto scores = DecodePairScores(text);
  if (!scores.ok() && scores.error().message().empty()) std::abort();
  for (const auto& entry : DecodeCordonList(text)) {
    if (entry.empty()) std::abort();
  }
  return 0;
}
