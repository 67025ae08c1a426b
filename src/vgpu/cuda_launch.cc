// Kernel launches: each passes the pause/suspend gates and is charged to the container's
// compute budget on its device (limiter.h) before the driver sees it. With no limit in force
// anywhere that is a few relaxed loads.
#include "vgpu/limiter.h"
#include "vgpu/prologue.h"

using hami::vgpu::PaceLaunch;

extern "C" {

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                unsigned int gridDimZ, unsigned int blockDimX,
                                unsigned int blockDimY, unsigned int blockDimZ,
                                unsigned int sharedMemBytes, CUstream hStream, void** kernelParams,
                                void** extra) {
  HAMI_CUDA_PROLOGUE(cuLaunchKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                     blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
  PaceLaunch(rt, hStream, uint64_t(gridDimX) * gridDimY * gridDimZ,
             uint64_t(blockDimX) * blockDimY * blockDimZ);
  return drv.cuda.cuLaunchKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY, blockDimZ,
                                 sharedMemBytes, hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gridDimX, unsigned int gridDimY,
                                     unsigned int gridDimZ, unsigned int blockDimX,
                                     unsigned int blockDimY, unsigned int blockDimZ,
                                     unsigned int sharedMemBytes, CUstream hStream,
                                     void** kernelParams, void** extra) {
  HAMI_CUDA_PROLOGUE(cuLaunchKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                     blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
  PaceLaunch(rt, hStream, uint64_t(gridDimX) * gridDimY * gridDimZ,
             uint64_t(blockDimX) * blockDimY * blockDimZ);
  return drv.cuda.cuLaunchKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                      blockDimZ, sharedMemBytes, hStream, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** kernelParams,
                                  void** extra) {
  HAMI_CUDA_PROLOGUE(cuLaunchKernelEx, config, f, kernelParams, extra);
  if (config != nullptr) {
    PaceLaunch(rt, config->hStream,
               uint64_t(config->gridDimX) * config->gridDimY * config->gridDimZ,
               uint64_t(config->blockDimX) * config->blockDimY * config->blockDimZ);
  }
  return drv.cuda.cuLaunchKernelEx(config, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f,
                                       void** kernelParams, void** extra) {
  HAMI_CUDA_PROLOGUE(cuLaunchKernelEx_ptsz, config, f, kernelParams, extra);
  if (config != nullptr) {
    PaceLaunch(rt, config->hStream,
               uint64_t(config->gridDimX) * config->gridDimY * config->gridDimZ,
               uint64_t(config->blockDimX) * config->blockDimY * config->blockDimZ);
  }
  return drv.cuda.cuLaunchKernelEx_ptsz(config, f, kernelParams, extra);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gridDimX,
                                           unsigned int gridDimY, unsigned int gridDimZ,
                                           unsigned int blockDimX, unsigned int blockDimY,
                                           unsigned int blockDimZ, unsigned int sharedMemBytes,
                                           CUstream hStream, void** kernelParams) {
  HAMI_CUDA_PROLOGUE(cuLaunchCooperativeKernel, f, gridDimX, gridDimY, gridDimZ, blockDimX,
                     blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
  PaceLaunch(rt, hStream, uint64_t(gridDimX) * gridDimY * gridDimZ,
             uint64_t(blockDimX) * blockDimY * blockDimZ);
  return drv.cuda.cuLaunchCooperativeKernel(f, gridDimX, gridDimY, gridDimZ, blockDimX, blockDimY,
                                            blockDimZ, sharedMemBytes, hStream, kernelParams);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gridDimX,
                                                unsigned int gridDimY, unsigned int gridDimZ,
                                                unsigned int blockDimX, unsigned int blockDimY,
                                                unsigned int blockDimZ, unsigned int sharedMemBytes,
                                                CUstream hStream, void** kernelParams) {
  HAMI_CUDA_PROLOGUE(cuLaunchCooperativeKernel_ptsz, f, gridDimX, gridDimY, gridDimZ, blockDimX,
                     blockDimY, blockDimZ, sharedMemBytes, hStream, kernelParams);
  PaceLaunch(rt, hStream, uint64_t(gridDimX) * gridDimY * gridDimZ,
             uint64_t(blockDimX) * blockDimY * blockDimZ);
  return drv.cuda.cuLaunchCooperativeKernel_ptsz(f, gridDimX, gridDimY, gridDimZ, blockDimX,
                                                 blockDimY, blockDimZ, sharedMemBytes, hStream,
                                                 kernelParams);
}

}  // extern "C"
