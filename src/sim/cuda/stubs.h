// Declarations the generated cuda_stubs.cc needs. The simulated driver is compiled with
// __CUDA_API_VERSION_INTERNAL (set by CMake) so that cuda.h declares every exported name,
// legacy ABIs and per-thread-stream variants included, under its exported spelling.
#pragma once

#include <cuda.h>
#include <cudaProfiler.h>

namespace hami::sim {

// What a driver function the simulation does not model returns: CUDA_ERROR_NOT_SUPPORTED,
// after logging its name once (at info level).
CUresult NotModelled(const char* name);

}  // namespace hami::sim
