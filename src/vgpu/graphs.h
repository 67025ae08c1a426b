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
#pragma once

#include <cuda.h>

#include <array>

#include "vgpu/accounting.h"
#include "vgpu/limiter.h"
#include "vgpu/runtime.h"

namespace hami::vgpu {

using Needs = std::array<uint64_t, kMaxDevices>;

// Adds what the allocation nodes of `graph` (and of its child graphs) need per device.
void AddNeeds(Runtime& rt, CUgraph graph, Needs* needs);
// Brings the graph-memory charge of `device` to what the driver reports.
void ReconcileLocked(Runtime& rt, int device) REQUIRES(rt.graph_mu);
// The device's graph memory no longer holds any graph's allocations resident for reuse.
void TrimLocked(Runtime& rt, int device) REQUIRES(rt.graph_mu);
// Records what a new executable graph will need.
void Instantiated(Runtime& rt, CUresult r, CUgraphExec* exec, CUgraph graph);
// After a successful cuGraphExecDestroy: what the graph needed is forgotten, and the graph
// memory charge brought to what the driver still reserves.
void GraphExecDestroyed(Runtime& rt, CUgraphExec exec);
// After a successful cuDeviceGraphMemTrim on CUDA device `device`: no graph's memory is
// resident there any more, and the charge is brought to what the driver still reserves.
void GraphMemTrimmed(Runtime& rt, CUdevice device);
// Whether a launch of `exec` makes graph memory resident that is not yet admitted.
bool NeedsAdmission(Runtime& rt, CUgraphExec exec) REQUIRES(rt.graph_mu);

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
    if (!Admit(rt, d, want, UsageKind::kGraph)) {
      TrimLocked(rt, d);
      if (!Admit(rt, d, want, UsageKind::kGraph)) {
        for (int e = 0; e < d; ++e) {
          Return(rt, e, admitted[size_t(e)], UsageKind::kGraph);
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
    Allocating allocating(rt);
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
CUresult LaunchWithMemory(Runtime& rt, CUgraphExec exec, Call call) {
  if (!rt.any_graph_memory.load(std::memory_order_relaxed)) return call();
  bool first;
  {
    MutexLock l(&rt.graph_mu);
    first = NeedsAdmission(rt, exec);
  }
  if (!first) return call();
  GateAllocation(rt);  // before the lock: a suspended process waits holding nothing
  MutexLock l(&rt.graph_mu);
  return LaunchFirstLocked(rt, exec, call);
}

}  // namespace hami::vgpu
