// Fuzzes the parsers of what reaches hami-scheduler from outside: ExtenderArgs (filter and
// prioritize bodies, the pod in them and its HAMi requests, constraints and policy),
// ExtenderBindingArgs, ExtenderPreemptionArgs (both victim forms), and the node annotations
// hami.io/node-nvidia-score and hami.io/device-cordon. Nothing crashes, every rejection has a
// message, and a pod that is accepted fits a small node without breaking FitPod's invariants.
// ExtenderPreemptionArgs is read both ways (ScanExtenderPreemptionArgs, then a document, and a
// document only): the answers and the messages agree.
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

bool SameArgs(const ExtenderPreemptionArgs& a, const ExtenderPreemptionArgs& b) {
  if (a.pod.metadata.name != b.pod.metadata.name || a.pod.metadata.ns != b.pod.metadata.ns ||
      a.pod.metadata.uid != b.pod.metadata.uid || a.pod.priority != b.pod.priority ||
      a.victims.size() != b.victims.size()) {
    return false;
  }
  for (auto i = a.victims.begin(), j = b.victims.begin(); i != a.victims.end(); ++i, ++j) {
    if (i->first != j->first || i->second.num_pdb_violations != j->second.num_pdb_violations ||
        i->second.pods.size() != j->second.pods.size()) {
      return false;
    }
    for (size_t k = 0; k < i->second.pods.size(); ++k) {
      const VictimRef& x = i->second.pods[k];
      const VictimRef& y = j->second.pods[k];
      if (x.uid != y.uid || x.ns != y.ns || x.name != y.name || x.priority != y.priority) {
        return false;
      }
    }
  }
  return true;
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
  // The scan, where it answers, and the verb's reading answer as the document does.
  auto document = ParseExtenderPreemptionArgs(text, PreemptionArgsReading::kDocumentOnly);
  if (preemption.ok() != document.ok()) std::abort();
  if (!preemption.ok() && preemption.error().message() != document.error().message()) {
    std::abort();
  }
  if (auto scan = ScanExtenderPreemptionArgs(text)) {
    if (!document.ok() || !SameArgs(*scan, *document)) std::abort();
  }
  if (preemption.ok() && !SameArgs(*preemption, *document)) std::abort();
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
