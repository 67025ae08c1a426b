#include "vgpu/graphs.h"

#include <functional>
#include <vector>

namespace hami::vgpu {

namespace {

void WalkGraph(const Runtime& rt, CUgraph graph,
               const std::function<void(CUgraphNode, CUgraphNodeType)>& fn, int depth) {
  const CudaAux& a = rt.CudaOrEmpty().aux;
  if (depth > 16 || a.cuGraphGetNodes == nullptr || a.cuGraphNodeGetType == nullptr) return;
  size_t n = 0;
  if (a.cuGraphGetNodes(graph, nullptr, &n) != CUDA_SUCCESS || n == 0) return;
  std::vector<CUgraphNode> nodes(n);
  if (a.cuGraphGetNodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return;
  nodes.resize(std::min(n, nodes.size()));
  for (CUgraphNode node : nodes) {
    CUgraphNodeType type;
    if (a.cuGraphNodeGetType(node, &type) != CUDA_SUCCESS) continue;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH && a.cuGraphChildGraphNodeGetGraph != nullptr) {
      CUgraph child;
      if (a.cuGraphChildGraphNodeGetGraph(node, &child) == CUDA_SUCCESS) {
        WalkGraph(rt, child, fn, depth + 1);
      }
    } else {
      fn(node, type);
    }
  }
}

}  // namespace

void ForEachGraphNode(Runtime& rt, CUgraph graph,
                      const std::function<void(CUgraphNode, CUgraphNodeType)>& fn) {
  WalkGraph(rt, graph, fn, 0);
}

// Adds what the allocation nodes of `graph` (and of its child graphs) need per device.
void AddNeeds(Runtime& rt, CUgraph graph, Needs* needs) {
  const CudaAux& a = rt.CudaOrEmpty().aux;
  ForEachGraphNode(rt, graph, [&](CUgraphNode node, CUgraphNodeType type) {
    if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || a.cuGraphMemAllocNodeGetParams == nullptr) return;
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    if (a.cuGraphMemAllocNodeGetParams(node, &p) == CUDA_SUCCESS &&
        p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE && p.poolProps.location.id >= 0 &&
        p.poolProps.location.id < kMaxDevices) {
      int d = p.poolProps.location.id;
      (*needs)[size_t(d)] += RoundUp(p.bytesize, Granularity(rt, d));
    }
  });
}

// Brings the graph-memory charge of `device` to what the driver reports. Caller holds
// graph_mu.
void ReconcileLocked(Runtime& rt, int device) REQUIRES(rt.graph_mu) {
  const CudaDriver& drv = rt.CudaOrEmpty();
  cuuint64_t reserved = 0;
  if (drv.aux.cuDeviceGetGraphMemAttribute == nullptr ||
      drv.aux.cuDeviceGetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                           &reserved) != CUDA_SUCCESS) {
    return;
  }
  uint64_t& charged = rt.graph_charged[size_t(device)];
  if (reserved > charged) {
    Record(rt, device, reserved - charged, UsageKind::kGraph);
  } else {
    Return(rt, device, charged - reserved, UsageKind::kGraph);
  }
  charged = reserved;
}

// The device's graph memory no longer holds any graph's allocations resident for reuse.
void TrimLocked(Runtime& rt, int device) REQUIRES(rt.graph_mu) {
  const CudaDriver& drv = rt.CudaOrEmpty();
  if (drv.cuda.cuDeviceGraphMemTrim != nullptr) drv.cuda.cuDeviceGraphMemTrim(device);
  for (auto& [exec, needs] : rt.graph_execs) needs.resident[size_t(device)] = false;
  ReconcileLocked(rt, device);
}

// Records what a new executable graph will need.
void Instantiated(Runtime& rt, CUresult r, CUgraphExec* exec, CUgraph graph) {
  if (r != CUDA_SUCCESS || exec == nullptr) return;
  LearnGraphKernels(rt, *exec, graph);
  Needs needs{};
  AddNeeds(rt, graph, &needs);
  bool any = false;
  for (uint64_t b : needs) any |= b != 0;
  if (!any) return;
  MutexLock l(&rt.graph_mu);
  rt.graph_execs[*exec].bytes = needs;
  rt.any_graph_memory.store(true, std::memory_order_relaxed);
}

// Whether a launch of `exec` makes graph memory resident that is not yet admitted.
bool NeedsAdmission(Runtime& rt, CUgraphExec exec) REQUIRES(rt.graph_mu) {
  auto it = rt.graph_execs.find(exec);
  if (it == rt.graph_execs.end()) return false;
  for (int d = 0; d < kMaxDevices; ++d) {
    if (it->second.bytes[size_t(d)] != 0 && !it->second.resident[size_t(d)]) return true;
  }
  return false;
}

void GraphExecDestroyed(Runtime& rt, CUgraphExec exec) {
  ForgetGraphKernels(rt, exec);
  if (!rt.any_graph_memory.load()) return;
  {
    MutexLock l(&rt.graph_mu);
    rt.graph_execs.erase(exec);
  }
  ReconcileGraphMemory(rt, -1);
}

void GraphMemTrimmed(Runtime& rt, CUdevice device) {
  if (device < 0 || device >= kMaxDevices) return;
  MutexLock l(&rt.graph_mu);
  for (auto& [exec, needs] : rt.graph_execs) needs.resident[size_t(device)] = false;
  ReconcileLocked(rt, device);
}

void ReconcileGraphMemory(Runtime& rt, int ordinal) {
  if (!rt.any_graph_memory.load(std::memory_order_relaxed)) return;
  MutexLock l(&rt.graph_mu);
  for (int d = 0; d < kMaxDevices; ++d) {
    if ((ordinal < 0 || d == ordinal) && rt.graph_charged[size_t(d)] != 0) ReconcileLocked(rt, d);
  }
}

}  // namespace hami::vgpu
