// The toolkit's libraries on the simulated GPU: each embeds its own copy of the CUDA
// runtime and reaches the driver through it. Runs the cases its arguments name and prints
// one line per case, `<case> key=value ...` (0 is each library's success status); a library
// this build was configured without prints `<case> skipped=<reason>`. The tests are in
// cudart_test.cc and cudart_vgpu_test.cc.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#if HAMI_HAVE_CUBLAS
#include <cublasLt.h>
#include <cublas_v2.h>
#endif
#if HAMI_HAVE_CURAND
#include <curand.h>
#endif
#if HAMI_HAVE_CUFFT
#include <cufft.h>
#endif
#if HAMI_HAVE_CUSPARSE
#include <cusparse.h>
#endif
#if HAMI_HAVE_CUSOLVER
#include <cusolverDn.h>
#endif
#if HAMI_HAVE_CUDNN
#include <cudnn.h>
#endif
#if HAMI_HAVE_NCCL
#include <nccl.h>
#endif

namespace {

class Line {
 public:
  explicit Line(const char* name) { text_ = name; }
  ~Line() { std::printf("%s\n", text_.c_str()); }
  Line& Add(const char* key, long long v) {
    text_ += " " + std::string(key) + "=" + std::to_string(v);
    return *this;
  }

 private:
  std::string text_;
};

[[maybe_unused]] void Skipped(const char* name) {
  std::printf("%s skipped=not-installed\n", name);
}

// cublasCreate, one SGEMM, destroy. With `workspace` > 0, first a user workspace of that
// size: when it cannot be allocated the handle keeps its own and the GEMM still runs.
void Cublas(size_t workspace) {
#if HAMI_HAVE_CUBLAS
  Line l("cublas");
  cublasHandle_t h;
  l.Add("create", cublasCreate(&h));
  void* ws = nullptr;
  if (workspace > 0) {
    l.Add("workspace_alloc", cudaMalloc(&ws, workspace));
    cudaGetLastError();
    if (ws != nullptr) l.Add("set_workspace", cublasSetWorkspace(h, ws, workspace));
  }
  const int n = 64;
  float *a = nullptr, *b = nullptr, *c = nullptr;
  l.Add("malloc", cudaMalloc(&a, n * n * 4) | cudaMalloc(&b, n * n * 4) | cudaMalloc(&c, n * n * 4));
  std::vector<float> host(n * n, 1.0f);
  l.Add("set_matrix", cublasSetMatrix(n, n, 4, host.data(), n, a, n));
  const float alpha = 1, beta = 0;
  l.Add("sgemm", cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, a, n, b, n, &beta, c, n));
  l.Add("sync", cudaDeviceSynchronize());
  l.Add("destroy", cublasDestroy(h));
  l.Add("free", cudaFree(a) | cudaFree(b) | cudaFree(c) | cudaFree(ws));
#else
  (void)workspace;
  Skipped("cublas");
#endif
}

// One GEMM through cuBLASLt, as PyTorch and vLLM run them: the heuristic's first algorithm for
// an n x n x n product of `type` (FP32, FP16 or BF16) accumulated in FP32, with a workspace.
void CublasLt(const char* name, cudaDataType type, int n) {
#if HAMI_HAVE_CUBLAS
  Line l(name);
  cublasLtHandle_t lt;
  l.Add("create", cublasLtCreate(&lt));
  cublasLtMatmulDesc_t op;
  l.Add("desc", cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasLtMatrixLayout_t la, lb, lc;
  l.Add("layouts", cublasLtMatrixLayoutCreate(&la, type, n, n, n) |
                       cublasLtMatrixLayoutCreate(&lb, type, n, n, n) |
                       cublasLtMatrixLayoutCreate(&lc, type, n, n, n));
  cublasLtMatmulPreference_t pref;
  l.Add("preference", cublasLtMatmulPreferenceCreate(&pref));
  size_t ws = 4 << 20;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulHeuristicResult_t results[4] = {};
  int found = 0;
  l.Add("heuristic",
        cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, 4, results, &found));
  l.Add("found", found);
  // D = 1 * A * B + 0 * C, in place of C.
  const size_t bytes = size_t(n) * size_t(n) * 4;  // room for any of the types
  void *a = nullptr, *b = nullptr, *c = nullptr, *workspace = nullptr;
  l.Add("malloc", cudaMalloc(&a, bytes) | cudaMalloc(&b, bytes) | cudaMalloc(&c, bytes) |
                      cudaMalloc(&workspace, ws));
  const float alpha = 1.0f, beta = 0.0f;
  l.Add("matmul", found > 0 ? cublasLtMatmul(lt, op, &alpha, a, la, b, lb, &beta, c, lc, c, lc,
                                             &results[0].algo, workspace, ws, nullptr)
                            : -1);
  l.Add("sync", cudaDeviceSynchronize());
  l.Add("free", cudaFree(a) | cudaFree(b) | cudaFree(c) | cudaFree(workspace));
  cublasLtMatmulPreferenceDestroy(pref);
  cublasLtMatrixLayoutDestroy(la);
  cublasLtMatrixLayoutDestroy(lb);
  cublasLtMatrixLayoutDestroy(lc);
  cublasLtMatmulDescDestroy(op);
  l.Add("destroy", cublasLtDestroy(lt));
#else
  Skipped(name);
#endif
}

void Curand() {
#if HAMI_HAVE_CURAND
  Line l("curand");
  curandGenerator_t g;
  l.Add("create", curandCreateGenerator(&g, CURAND_RNG_PSEUDO_DEFAULT));
  l.Add("seed", curandSetPseudoRandomGeneratorSeed(g, 1234));
  float* d = nullptr;
  l.Add("malloc", cudaMalloc(&d, 4096 * sizeof(float)));
  l.Add("generate", curandGenerateUniform(g, d, 4096));
  l.Add("sync", cudaDeviceSynchronize());
  l.Add("destroy", curandDestroyGenerator(g));
  l.Add("free", cudaFree(d));
#else
  Skipped("curand");
#endif
}

void Cufft() {
#if HAMI_HAVE_CUFFT
  Line l("cufft");
  const int n = 256, batch = 4;
  cufftComplex* d = nullptr;
  l.Add("malloc", cudaMalloc(&d, sizeof(cufftComplex) * n * batch));
  cufftHandle plan;
  l.Add("plan", cufftPlan1d(&plan, n, CUFFT_C2C, 1));
  l.Add("exec", cufftExecC2C(plan, d, d, CUFFT_FORWARD));
  int dims[1] = {n};
  cufftHandle many;
  l.Add("plan_many",
        cufftPlanMany(&many, 1, dims, nullptr, 1, n, nullptr, 1, n, CUFFT_C2C, batch));
  l.Add("exec_many", cufftExecC2C(many, d, d, CUFFT_INVERSE));
  // A large size takes kernels the library ships as compressed cubins.
  const int large = 1 << 20;
  cufftComplex* big = nullptr;
  l.Add("malloc_large", cudaMalloc(&big, sizeof(cufftComplex) * large));
  cufftHandle plan_large;
  l.Add("plan_large", cufftPlan1d(&plan_large, large, CUFFT_C2C, 1));
  l.Add("exec_large", cufftExecC2C(plan_large, big, big, CUFFT_FORWARD));
  l.Add("sync", cudaDeviceSynchronize());
  l.Add("destroy", cufftDestroy(plan) | cufftDestroy(many) | cufftDestroy(plan_large));
  l.Add("free", cudaFree(d) | cudaFree(big));
#else
  Skipped("cufft");
#endif
}

void Cusparse() {
#if HAMI_HAVE_CUSPARSE
  Line l("cusparse");
  cusparseHandle_t h;
  l.Add("create", cusparseCreate(&h));
  int version = 0;
  l.Add("version", cusparseGetVersion(h, &version));
  l.Add("destroy", cusparseDestroy(h));
#else
  Skipped("cusparse");
#endif
}

void Cusolver() {
#if HAMI_HAVE_CUSOLVER
  Line l("cusolver");
  cusolverDnHandle_t h;
  l.Add("create", cusolverDnCreate(&h));
  l.Add("destroy", cusolverDnDestroy(h));
#else
  Skipped("cusolver");
#endif
}

void Cudnn() {
#if HAMI_HAVE_CUDNN
  Line l("cudnn");
  cudnnHandle_t h;
  l.Add("create", cudnnCreate(&h));
  l.Add("version", static_cast<long long>(cudnnGetVersion()));
  l.Add("destroy", cudnnDestroy(h));
#else
  Skipped("cudnn");
#endif
}

// One communicator per simulated device, an all-reduce on each, destroy.
void Nccl() {
#if HAMI_HAVE_NCCL
  Line l("nccl");
  int n = 0;
  l.Add("count", cudaGetDeviceCount(&n)).Add("devices", n);
  if (n > 8) n = 8;
  ncclComm_t comms[8];
  l.Add("init_all", ncclCommInitAll(comms, n, nullptr));
  std::vector<float*> buffers(size_t(n), nullptr);
  std::vector<cudaStream_t> streams(static_cast<size_t>(n));
  int setup = 0;
  for (int i = 0; i < n; ++i) {
    setup |= cudaSetDevice(i) | cudaMalloc(&buffers[size_t(i)], 1024 * sizeof(float)) |
             cudaStreamCreate(&streams[size_t(i)]);
  }
  l.Add("setup", setup);
  int reduce = ncclGroupStart();
  for (int i = 0; i < n; ++i) {
    reduce |= ncclAllReduce(buffers[size_t(i)], buffers[size_t(i)], 1024, ncclFloat, ncclSum,
                            comms[i], streams[size_t(i)]);
  }
  reduce |= ncclGroupEnd();
  l.Add("all_reduce", reduce);
  int sync = 0;
  for (int i = 0; i < n; ++i) sync |= cudaSetDevice(i) | cudaStreamSynchronize(streams[size_t(i)]);
  l.Add("sync", sync);
  int destroyed = 0;
  for (int i = 0; i < n; ++i) destroyed |= ncclCommDestroy(comms[i]);
  l.Add("destroy", destroyed);
#else
  Skipped("nccl");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  for (int i = 1; i < argc; ++i) {
    std::string c = argv[i];
    if (c == "cublas") {
      size_t workspace = 0;
      if (i + 1 < argc && argv[i + 1][0] >= '0' && argv[i + 1][0] <= '9') {
        workspace = std::strtoull(argv[++i], nullptr, 0);
      }
      Cublas(workspace);
    } else if (c == "cublaslt") {
      CublasLt("cublaslt", CUDA_R_32F, 64);
    } else if (c == "cublaslt-fp16") {
      CublasLt("cublaslt-fp16", CUDA_R_16F, 1024);
    } else if (c == "cublaslt-bf16") {
      CublasLt("cublaslt-bf16", CUDA_R_16BF, 1024);
    } else if (c == "curand") {
      Curand();
    } else if (c == "cufft") {
      Cufft();
    } else if (c == "cusparse") {
      Cusparse();
    } else if (c == "cusolver") {
      Cusolver();
    } else if (c == "cudnn") {
      Cudnn();
    } else if (c == "nccl") {
      Nccl();
    } else {
      std::fprintf(stderr, "unknown case '%s'\n", c.c_str());
      return 2;
    }
  }
  return 0;
}
