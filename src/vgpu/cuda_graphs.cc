// Graph memory: the hooks (the policy is graphs.h).
#include "vgpu/graphs.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

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
