/* A helper a container could load with dlmopen(LM_ID_NEWLM): a link-map namespace of its own,
 * which the preload does not reach, so it calls the driver directly and nothing it does passes
 * through libvgpu.so. unaccounted_test.cc loads it to allocate past the limit. */
#include <cuda.h>

/* Retains device 0's primary context and allocates `bytes` on it; the driver's error. */
__attribute__((visibility("default"))) int hami_hidden_alloc(unsigned long long bytes,
                                                             CUdeviceptr* ptr) {
  CUcontext ctx = 0;
  CUresult r = cuInit(0);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, 0);
  if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
  if (r == CUDA_SUCCESS) r = cuMemAlloc(ptr, (size_t)bytes);
  return (int)r;
}

/* Frees `ptr` and releases the primary context: nothing is left past libvgpu. */
__attribute__((visibility("default"))) int hami_hidden_free(CUdeviceptr ptr) {
  CUresult r = cuMemFree(ptr);
  if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRelease(0);
  return (int)r;
}
