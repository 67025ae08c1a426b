// Graph memory: the hooks (the policy is graphs.h; a launch's pacing is limiter.h).
#include "vgpu/graphs.h"
#include "vgpu/prologue.h"

using namespace hami;        // NOLINT: the exported C API below
using namespace hami::vgpu;  // NOLINT

extern "C" {

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* phGraphExec, CUgraph hGraph,
                                             unsigned long long flags) {
  HAMI_CUDA_PROLOGUE(cuGraphInstantiateWithFlags, phGraphExec, hGraph, flags);
  CUresult r = drv.cuda.cuGraphInstantiateWithFlags(phGraphExec, hGraph, flags);
  Instantiated(rt, r, phGraphExec, hGraph);
  return r;
}

// The pre-12 ABIs (an error node and a log buffer instead of flags).
CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* phGraphExec, CUgraph hGraph,
                                    CUgraphNode* phErrorNode, char* logBuffer, size_t bufferSize) {
  HAMI_CUDA_PROLOGUE(cuGraphInstantiate, phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  CUresult r = drv.cuda.cuGraphInstantiate(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  Instantiated(rt, r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* phGraphExec, CUgraph hGraph,
                                       CUgraphNode* phErrorNode, char* logBuffer,
                                       size_t bufferSize) {
  HAMI_CUDA_PROLOGUE(cuGraphInstantiate_v2, phGraphExec, hGraph, phErrorNode, logBuffer,
                     bufferSize);
  CUresult r =
      drv.cuda.cuGraphInstantiate_v2(phGraphExec, hGraph, phErrorNode, logBuffer, bufferSize);
  Instantiated(rt, r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* phGraphExec, CUgraph hGraph,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  HAMI_CUDA_PROLOGUE(cuGraphInstantiateWithParams, phGraphExec, hGraph, params);
  CUresult r = drv.cuda.cuGraphInstantiateWithParams(phGraphExec, hGraph, params);
  Instantiated(rt, r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* phGraphExec, CUgraph hGraph,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  HAMI_CUDA_PROLOGUE(cuGraphInstantiateWithParams_ptsz, phGraphExec, hGraph, params);
  CUresult r = drv.cuda.cuGraphInstantiateWithParams_ptsz(phGraphExec, hGraph, params);
  Instantiated(rt, r, phGraphExec, hGraph);
  return r;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec hGraphExec, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuGraphLaunch, hGraphExec, hStream);
  PaceGraphLaunch(rt, hGraphExec, hStream);
  return LaunchWithMemory(rt, hGraphExec,
                          [&] { return drv.cuda.cuGraphLaunch(hGraphExec, hStream); });
}

CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuGraphLaunch_ptsz, hGraphExec, hStream);
  PaceGraphLaunch(rt, hGraphExec, hStream);
  return LaunchWithMemory(rt, hGraphExec,
                          [&] { return drv.cuda.cuGraphLaunch_ptsz(hGraphExec, hStream); });
}

// An upload may make the graph's memory resident ahead of its first launch.
CUresult CUDAAPI cuGraphUpload(CUgraphExec hGraphExec, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuGraphUpload, hGraphExec, hStream);
  return LaunchWithMemory(rt, hGraphExec,
                          [&] { return drv.cuda.cuGraphUpload(hGraphExec, hStream); });
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec hGraphExec, CUstream hStream) {
  HAMI_CUDA_PROLOGUE(cuGraphUpload_ptsz, hGraphExec, hStream);
  return LaunchWithMemory(rt, hGraphExec,
                          [&] { return drv.cuda.cuGraphUpload_ptsz(hGraphExec, hStream); });
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec hGraphExec) {
  HAMI_CUDA_PROLOGUE(cuGraphExecDestroy, hGraphExec);
  CUresult r = drv.cuda.cuGraphExecDestroy(hGraphExec);
  if (r == CUDA_SUCCESS) GraphExecDestroyed(rt, hGraphExec);
  return r;
}

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice device) {
  HAMI_CUDA_PROLOGUE(cuDeviceGraphMemTrim, device);
  CUresult r = drv.cuda.cuDeviceGraphMemTrim(device);
  if (r == CUDA_SUCCESS) GraphMemTrimmed(rt, device);
  return r;
}

}  // extern "C"
