// Graph memory.
//
// A graph's memory-allocation nodes (added with cuGraphAddMemAllocNode or captured from
// cuMemAllocAsync) take device memory when a launch makes them resident, and the driver
// keeps that memory reserved for graphs until cuDeviceGraphMemTrim. What is charged: per
// device, the graph memory the driver reports reserved for this process. What is admitted:
// when an executable graph is launched (or uploaded) for the first time since it was made
// or since the device's graph memory was trimmed, the bytes its allocation nodes need on
// each device, each rounded to the allocation granularity, are reserved before the launch.
// Past the limit the device's unused graph memory is trimmed once and the reservation
// tried again; if it still does not fit the launch fails with CUDA_ERROR_OUT_OF_MEMORY
// before anything runs. After the launch the charge is brought to what the driver reports,
// which gives back whatever the graph could reuse.
//
// What a graph needs is learned at instantiation, by walking its nodes (child graphs too).
#include <functional>
#include <vector>

#include "vgpu/accounting.h"
#include "vgpu/limiter.h"
#include "vgpu/runtime.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

namespace hami::vgpu {

namespace {

void WalkGraph(CUgraph graph, const std::function<void(CUgraphNode, CUgraphNodeType)>& fn,
               int depth) {
  const CudaAux& a = CudaOrEmpty().aux;
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
        WalkGraph(child, fn, depth + 1);
      }
    } else {
      fn(node, type);
    }
  }
}

}  // namespace

void ForEachGraphNode(CUgraph graph, const std::function<void(CUgraphNode, CUgraphNodeType)>& fn) {
  WalkGraph(graph, fn, 0);
}

namespace {

using Needs = std::array<uint64_t, kMaxDevices>;

// Adds what the allocation nodes of `graph` (and of its child graphs) need per device.
void AddNeeds(CUgraph graph, Needs* needs) {
  const CudaAux& a = CudaOrEmpty().aux;
  ForEachGraphNode(graph, [&](CUgraphNode node, CUgraphNodeType type) {
    if (type != CU_GRAPH_NODE_TYPE_MEM_ALLOC || a.cuGraphMemAllocNodeGetParams == nullptr) return;
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    if (a.cuGraphMemAllocNodeGetParams(node, &p) == CUDA_SUCCESS &&
        p.poolProps.location.type == CU_MEM_LOCATION_TYPE_DEVICE && p.poolProps.location.id >= 0 &&
        p.poolProps.location.id < kMaxDevices) {
      int d = p.poolProps.location.id;
      (*needs)[size_t(d)] += RoundUp(p.bytesize, Granularity(d));
    }
  });
}

// Brings the graph-memory charge of `device` to what the driver reports. Caller holds
// graph_mu.
void ReconcileLocked(Runtime& rt, int device) REQUIRES(rt.graph_mu) {
  const CudaDriver& drv = CudaOrEmpty();
  cuuint64_t reserved = 0;
  if (drv.aux.cuDeviceGetGraphMemAttribute == nullptr ||
      drv.aux.cuDeviceGetGraphMemAttribute(device, CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT,
                                           &reserved) != CUDA_SUCCESS) {
    return;
  }
  uint64_t& charged = rt.graph_charged[size_t(device)];
  if (reserved > charged) {
    Record(device, reserved - charged, UsageKind::kGraph);
  } else {
    Return(device, charged - reserved, UsageKind::kGraph);
  }
  charged = reserved;
}

// The device's graph memory no longer holds any graph's allocations resident for reuse.
void TrimLocked(Runtime& rt, int device) REQUIRES(rt.graph_mu) {
  const CudaDriver& drv = CudaOrEmpty();
  if (drv.cuda.cuDeviceGraphMemTrim != nullptr) drv.cuda.cuDeviceGraphMemTrim(device);
  for (auto& [exec, needs] : rt.graph_execs) needs.resident[size_t(device)] = false;
  ReconcileLocked(rt, device);
}

// Records what a new executable graph will need.
void Instantiated(CUresult r, CUgraphExec* exec, CUgraph graph) {
  if (r != CUDA_SUCCESS || exec == nullptr) return;
  LearnGraphKernels(*exec, graph);
  Needs needs{};
  AddNeeds(graph, &needs);
  bool any = false;
  for (uint64_t b : needs) any |= b != 0;
  if (!any) return;
  Runtime& rt = Rt();
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

// The first launch: admitted device by device, with graph_mu held through the launch so that
// no other launch counts on the same memory (the launch never calls back into a hook that
// takes it).
template <typename Call>
CUresult LaunchFirstLocked(Runtime& rt, CUgraphExec exec, Call call) REQUIRES(rt.graph_mu) {
  if (!NeedsAdmission(rt, exec)) return call();  // another launch made it resident
  Runtime::GraphNeeds& needs = rt.graph_execs.find(exec)->second;
  Needs admitted{};
  for (int d = 0; d < kMaxDevices; ++d) {
    uint64_t want = needs.resident[size_t(d)] ? 0 : needs.bytes[size_t(d)];
    if (want == 0) continue;
    if (!Admit(d, want, UsageKind::kGraph)) {
      TrimLocked(rt, d);
      if (!Admit(d, want, UsageKind::kGraph)) {
        for (int e = 0; e < d; ++e) {
          Return(e, admitted[size_t(e)], UsageKind::kGraph);
          rt.graph_charged[size_t(e)] -= admitted[size_t(e)];
        }
        return CUDA_ERROR_OUT_OF_MEMORY;
      }
    }
    admitted[size_t(d)] = want;
    rt.graph_charged[size_t(d)] += want;
  }
  CUresult r;
  {
    Allocating allocating;
    r = call();
  }
  for (int d = 0; d < kMaxDevices; ++d) {
    if (admitted[size_t(d)] == 0) continue;
    needs.resident[size_t(d)] = r == CUDA_SUCCESS;
    ReconcileLocked(rt, d);
  }
  return r;
}

// Admits the memory a launch (or upload) of `exec` makes resident, runs it, then settles.
template <typename Call>
CUresult LaunchWithMemory(CUgraphExec exec, Call call) {
  Runtime& rt = Rt();
  if (!rt.any_graph_memory.load(std::memory_order_relaxed)) return call();
  bool first;
  {
    MutexLock l(&rt.graph_mu);
    first = NeedsAdmission(rt, exec);
  }
  if (!first) return call();
  GateAllocation();  // before the lock: a suspended process waits holding nothing
  MutexLock l(&rt.graph_mu);
  return LaunchFirstLocked(rt, exec, call);
}

}  // namespace

void ReconcileGraphMemory(int ordinal) {
  Runtime& rt = Rt();
  if (!rt.any_graph_memory.load(std::memory_order_relaxed)) return;
  MutexLock l(&rt.graph_mu);
  for (int d = 0; d < kMaxDevices; ++d) {
    if ((ordinal < 0 || d == ordinal) && rt.graph_charged[size_t(d)] != 0) ReconcileLocked(rt, d);
  }
}

}  // namespace hami::vgpu

extern "C" {

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphInstantiateWithFlags, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
  if (!scope.nested()) Instantiated(r, phGraphExec, hGraph);
  return r;
}

// The pre-12 ABIs (an error node and a log buffer instead of flags).
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                    CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphInstantiate, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  if (!scope.nested()) Instantiated(r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                       CUgraphNode* phErrorNode, char* logBuffer,
                                       size_t bufferSize) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphInstantiate_v2, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r =
      drv.cuda.cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  if (!scope.nested()) Instantiated(r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphInstantiateWithParams, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuGraphInstantiateWithParams(phGraphExec, hGraph, params);
  if (!scope.nested()) Instantiated(r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphInstantiateWithParams_ptsz, CUDA_ERROR_NOT_INITIALIZED);
  CUresult r = drv.cuda.cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, params);
  if (!scope.nested()) Instantiated(r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphLaunch, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuGraphLaunch(hGraphExec, hStream); };
  if (scope.nested()) return call();
  PaceGraphLaunch(hGraphExec, hStream);
  return LaunchWithMemory(hGraphExec, call);
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphLaunch_ptsz, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuGraphLaunch_ptsz(hGraphExec, hStream); };
  if (scope.nested()) return call();
  PaceGraphLaunch(hGraphExec, hStream);
  return LaunchWithMemory(hGraphExec, call);
}

// An upload may make the graph's memory resident ahead of its first launch.
CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphUpload, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuGraphUpload(hGraphExec, hStream); };
  if (scope.nested()) return call();
  return LaunchWithMemory(hGraphExec, call);
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphUpload_ptsz, CUDA_ERROR_NOT_INITIALIZED);
  auto call = [&] { return drv.cuda.cuGraphUpload_ptsz(hGraphExec, hStream); };
  if (scope.nested()) return call();
  return LaunchWithMemory(hGraphExec, call);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  HookScope scope;
  HAMI_CUDA_REAL(cuGraphExecDestroy, CUDA_ERROR_NOT_INITIALIZED);
  Runtime& rt = Rt();
  CUresult r = drv.cuda.cuGraphExecDestroy(hGraphExec);
  if (r == CUDA_SUCCESS && !scope.nested()) ForgetGraphKernels(hGraphExec);
  if (r != CUDA_SUCCESS || scope.nested() || !rt.any_graph_memory.load()) return r;
  {
    MutexLock l(&rt.graph_mu);
    rt.graph_execs.erase(hGraphExec);
  }
  ReconcileGraphMemory(-1);
  return r;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  HookScope scope;
  HAMI_CUDA_REAL(cuDeviceGraphMemTrim, CUDA_ERROR_NOT_INITIALIZED);
  Runtime& rt = Rt();
  CUresult r = drv.cuda.cuDeviceGraphMemTrim(device);
  if (r != CUDA_SUCCESS || scope.nested() || device < 0 || device >= kMaxDevices) return r;
  MutexLock l(&rt.graph_mu);
  for (auto& [exec, needs] : rt.graph_execs) needs.resident[size_t(device)] = false;
  ReconcileLocked(rt, device);
  return r;
}

}  // extern "C"
