// nvcc -cubin -arch=sm_80 -o kernels.cubin kernels.cu; nvcc -fatbin -arch=sm_80 -o kernels.fatbin kernels.cu
// PTX only (nvcc 13.0): nvcc -fatbin -arch=compute_80 -code=compute_80 followed by
//   --no-compress -o kernels_ptx.fatbin,
//   --compress-mode=speed -Xfatbin -compress-all -o kernels_ptx_lz4.fatbin (LZ4),
//   --compress-mode=default -Xfatbin -compress-all -o kernels_ptx_zstd.fatbin (Zstandard)
// LZ4: nvcc -fatbin -arch=sm_80 --compress-mode=speed -Xfatbin -compress-all -o kernels_lz4.fatbin
__device__ int table[100];
__constant__ float coef[16] = {1, 2, 3};
__device__ __noinline__ int helper(int x) { return x * 3; }
__global__ void k(int* p) { p[threadIdx.x] = helper(threadIdx.x) + table[3] + coef[1]; }
__global__ void k2(float* p, int n) { p[n] = 1; }
