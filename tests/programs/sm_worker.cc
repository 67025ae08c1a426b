// sm_worker: keeps one GPU busy with kernel launches for a while, for the compute-limit tests.
//
//   sm_worker MS [kernel|ex|coop|graph] [GRID [BLOCK [WAVE_NS]]]
//
// It launches back to back on one stream for MS milliseconds of wall time (each launch is
// GRID blocks of BLOCK threads of a simulated kernel whose wave lasts WAVE_NS), the way the
// mode says: cuLaunchKernel, cuLaunchKernelEx, cuLaunchCooperativeKernel, or cuGraphLaunch of
// a graph of four such kernels. It prints "ready pid=PID" once launching, then
// "done launches=N" after a final synchronization. Exit 1 with "error STEP CURESULT".
#include <cuda.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "common/clock.h"

namespace {

int Fail(const char* step, CUresult r) {
  std::printf("error %s %d\n", step, int(r));
  std::fflush(stdout);
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: sm_worker MS [kernel|ex|coop|graph] [GRID [BLOCK [WAVE_NS]]]\n");
    return 2;
  }
  const int64_t ms = std::atoll(argv[1]);
  const std::string mode = argc > 2 ? argv[2] : "kernel";
  const unsigned grid = argc > 3 ? unsigned(std::atoi(argv[3])) : 4096;
  const unsigned block = argc > 4 ? unsigned(std::atoi(argv[4])) : 256;
  const std::string wave = argc > 5 ? argv[5] : "30000";

  CUcontext ctx;
  CUmodule module;
  CUfunction kernel;
  CUstream stream;
  if (CUresult r = cuInit(0); r != CUDA_SUCCESS) return Fail("init", r);
  if (CUresult r = cuDevicePrimaryCtxRetain(&ctx, 0); r != CUDA_SUCCESS) return Fail("ctx", r);
  if (CUresult r = cuCtxSetCurrent(ctx); r != CUDA_SUCCESS) return Fail("current", r);
  const std::string image = "hami-sim-module\nkernel busy wave_ns=" + wave + "\n";
  if (CUresult r = cuModuleLoadData(&module, image.c_str()); r != CUDA_SUCCESS) {
    return Fail("module", r);
  }
  if (CUresult r = cuModuleGetFunction(&kernel, module, "busy"); r != CUDA_SUCCESS) {
    return Fail("function", r);
  }
  if (CUresult r = cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING); r != CUDA_SUCCESS) {
    return Fail("stream", r);
  }

  CUgraphExec exec = nullptr;
  if (mode == "graph") {
    CUgraph graph;
    if (CUresult r = cuGraphCreate(&graph, 0); r != CUDA_SUCCESS) return Fail("graph", r);
    CUgraphNode prev = nullptr;
    for (int i = 0; i < 4; ++i) {
      CUDA_KERNEL_NODE_PARAMS p{};
      p.func = kernel;
      p.gridDimX = grid;
      p.gridDimY = p.gridDimZ = 1;
      p.blockDimX = block;
      p.blockDimY = p.blockDimZ = 1;
      CUgraphNode node;
      if (CUresult r = cuGraphAddKernelNode(&node, graph, prev ? &prev : nullptr, prev ? 1 : 0, &p);
          r != CUDA_SUCCESS) {
        return Fail("node", r);
      }
      prev = node;
    }
    if (CUresult r = cuGraphInstantiateWithFlags(&exec, graph, 0); r != CUDA_SUCCESS) {
      return Fail("instantiate", r);
    }
  }

  std::printf("ready pid=%d\n", int(getpid()));
  std::fflush(stdout);
  const int64_t until = hami::MonotonicNs() + ms * 1'000'000;
  long launches = 0;
  while (hami::MonotonicNs() < until) {
    CUresult r;
    if (mode == "ex") {
      CUlaunchConfig c{};
      c.gridDimX = grid;
      c.gridDimY = c.gridDimZ = 1;
      c.blockDimX = block;
      c.blockDimY = c.blockDimZ = 1;
      c.hStream = stream;
      r = cuLaunchKernelEx(&c, kernel, nullptr, nullptr);
    } else if (mode == "coop") {
      r = cuLaunchCooperativeKernel(kernel, grid, 1, 1, block, 1, 1, 0, stream, nullptr);
    } else if (mode == "graph") {
      r = cuGraphLaunch(exec, stream);
    } else {
      r = cuLaunchKernel(kernel, grid, 1, 1, block, 1, 1, 0, stream, nullptr, nullptr);
    }
    if (r != CUDA_SUCCESS) return Fail("launch", r);
    ++launches;
  }
  if (CUresult r = cuStreamSynchronize(stream); r != CUDA_SUCCESS) return Fail("sync", r);
  std::printf("done launches=%ld\n", launches);
  return 0;
}
