// nvcc -cubin -arch=sm_80 -o kernels.cubin kernels.cu; nvcc -fatbin -arch=sm_80 -o kernels.fatbin kernels.cu
__device__ int table[100];
__constant__ float coef[16] = {1, 2, 3};
__device__ __noinline__ int helper(int x) { return x * 3; }
__global__ void k(int* p) { p[threadIdx.x] = helper(threadIdx.x) + table[3] + coef[1]; }
__global__ void k2(float* p, int n) { p[n] = 1; }
