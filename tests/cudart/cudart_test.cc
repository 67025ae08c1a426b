// Real CUDA runtime programs, built with nvcc, on the simulated GPU: the runtime linked shared,
// linked static, and with the per-thread default stream, then the toolkit's libraries (each
// with its own copy of the runtime). Kernels run no code here; the cases check status codes,
// bytes moved by copies and sets, device time and the memory the device has in use.
#include <cuda.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "cudart_support.h"
#include "sim/profiles.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

constexpr long long kMiB = 1 << 20;
constexpr long long kGranule = 2 * kMiB;    // HAMI_SIM_ALLOC_GRANULARITY's default
constexpr long long kContext = 500 * kMiB;  // an H100 context
constexpr double kLaunchMs = 0.003;         // HAMI_SIM_LAUNCH_NS's default
constexpr double kWaveMs = 0.020;           // HAMI_SIM_WAVE_NS's default
// A module costs one granule; its globals (the client's two) share one more page.
constexpr long long kModule = 2 * kGranule;

// The sanitizer runtime a sanitized simulated driver needs in a program built without one.
std::map<std::string, std::string> SanitizerEnv() {
#ifdef HAMI_SANITIZER_RUNTIME
  return {{"LD_PRELOAD", HAMI_SANITIZER_RUNTIME},
          {"ASAN_OPTIONS", "detect_leaks=0:verify_asan_link_order=0"}};
#else
  return {{"LD_PRELOAD", ""}};
#endif
}

class CudartTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string reason = CudartSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    state_ = SimEnv::NewStatePath();
    auto devices = sim::ParseProfileSpec("h100-80g:2", "");
    ASSERT_TRUE(devices.ok());
    devices_ = *devices;
  }

  // Runs `program` with `args` on a private simulated machine (two H100s); stderr merged.
  CudartRun Run(const std::string& program, const std::vector<std::string>& args,
                const std::map<std::string, std::string>& extra = {}) {
    std::map<std::string, std::string> env = {
        {"HAMI_SIM_STATE", state_},    {"HAMI_SIM_PROFILE", ""},
        {"HAMI_SIM_CONTEXT_SIZE", ""}, {"LD_LIBRARY_PATH", HAMI_SIM_LIB_DIR},
        {"CUDA_VISIBLE_DEVICES", ""},  {"CUDA_MODULE_LOADING", ""}};
    for (const auto& [k, v] : SanitizerEnv()) env[k] = v;
    for (const auto& [k, v] : extra) env[k] = v;
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1",
                                     CudartProgram(program)};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess p(argv, env);
    CudartRun r;
    r.out = p.ReadAll(120000);  // bounds, not expectations
    r.status = p.Wait(120000);
    return r;
  }

  std::string state_;
  std::vector<sim::DeviceSpec> devices_;
};

// ---- the runtime itself, linked three ways ----

class CudartClientTest : public CudartTest, public ::testing::WithParamInterface<const char*> {
 protected:
  CudartRun RunClient(const std::vector<std::string>& args,
                      const std::map<std::string, std::string>& extra = {}) {
    CudartRun r = Run(GetParam(), args, extra);
    EXPECT_EQ(r.status, 0) << r.out;
    return r;
  }
};

TEST_P(CudartClientTest, TheRuntimeSeesTheSimulatedDevicesAsTheDriverReportsThem) {
  CudartRun r = RunClient({"devices"});
  auto versions = CaseFields(r.out, "versions");
  ExpectSucceeded(versions, {"driver_err", "runtime_err"}, "versions");
  EXPECT_EQ(Field(versions, "driver"), CUDA_VERSION);
  EXPECT_EQ(Field(versions, "runtime") / 1000, CUDA_VERSION / 1000);
  auto count = CaseFields(r.out, "count");
  EXPECT_EQ(Field(count, "err"), 0);
  ASSERT_EQ(Field(count, "n"), 2) << r.out;
  for (int i = 0; i < 2; ++i) {
    auto d = CaseFields(r.out, "device", i);
    EXPECT_EQ(Field(d, "err"), 0);
    EXPECT_EQ(d["name"], "NVIDIA_H100_80GB_HBM3");
    EXPECT_EQ(Field(d, "total"), static_cast<long long>(devices_[size_t(i)].usable_bytes()));
    EXPECT_EQ(Field(d, "sms"), 132);
    EXPECT_EQ(d["cc"], "9.0");
    EXPECT_EQ(d["uuid"], devices_[size_t(i)].uuid);
    EXPECT_EQ(Field(d, "pci_bus"), devices_[size_t(i)].pci_bus);
    EXPECT_EQ(Field(d, "warp"), 32);
    EXPECT_EQ(Field(d, "clusters"), 1);
  }
}

TEST_P(CudartClientTest, CopiesSetsAndSymbolsRoundTripByteForByte) {
  CudartRun r = RunClient({"memcpy", "1048576", "memcpy", "3145745"});
  for (int i = 0; i < 2; ++i) {
    auto m = CaseFields(r.out, "memcpy", i);
    ExpectSucceeded(m,
                    {"malloc", "malloc2", "h2d", "d2d", "d2h", "memset", "d2h2", "to_symbol",
                     "from_symbol", "symbol_size_err", "free", "free2"},
                    "memcpy");
    EXPECT_EQ(Field(m, "match"), 1);
    EXPECT_EQ(Field(m, "set_match"), 1);
    EXPECT_EQ(Field(m, "symbol_match"), 1);
    EXPECT_EQ(Field(m, "symbol_size"), 64) << "__constant__ float[16], read from the cubin";
  }
}

TEST_P(CudartClientTest, LaunchesTakeTheDeviceTimeOfTheirWaves) {
  // 264 blocks of 1024 threads are one wave on an H100; 2640 are ten.
  CudartRun r = RunClient({"launch", "264", "1024", "10", "launch", "2640", "1024", "1"});
  auto one_wave = CaseFields(r.out, "launch", 0);
  ExpectSucceeded(one_wave,
                  {"stream", "events", "lead", "record", "launches", "record2", "sync", "elapsed",
                   "device_sync", "func_attributes", "occupancy", "destroy"},
                  "launch");
  EXPECT_NEAR(FieldMs(one_wave, "ms"), 10 * (kLaunchMs + kWaveMs), 0.01 * 10 * kWaveMs);
  EXPECT_EQ(Field(one_wave, "max_threads"), 1024);
  EXPECT_EQ(Field(one_wave, "blocks_per_sm"), 8) << "2048 threads per SM / 256";
  EXPECT_NE(Field(one_wave, "bad_launch"), 0) << "a block of 2048 threads is refused";
  auto ten_waves = CaseFields(r.out, "launch", 1);
  EXPECT_NEAR(FieldMs(ten_waves, "ms"), kLaunchMs + 10 * kWaveMs, 0.01 * 10 * kWaveMs);
}

TEST_P(CudartClientTest, EventsTimeDeviceWork) {
  CudartRun r = RunClient({"events"});
  auto e = CaseFields(r.out, "events");
  ExpectSucceeded(e,
                  {"create", "create_untimed", "query_unrecorded", "record", "record2", "record3",
                   "sync", "query", "elapsed", "destroy"},
                  "events");
  EXPECT_NEAR(FieldMs(e, "ms"), kLaunchMs + kWaveMs, 0.01 * kWaveMs);
  EXPECT_EQ(Field(e, "elapsed_untimed"), 400) << "cudaErrorInvalidResourceHandle";
}

TEST_P(CudartClientTest, MemGetInfoCountsTheContextTheModuleAndEachAllocation) {
  CudartRun r = RunClient({"loading", "meminfo", "set-device", "0"});
  auto l = CaseFields(r.out, "loading");
  ExpectSucceeded(l, {"init", "launch", "sync"}, "loading");
  EXPECT_EQ(Field(l, "before"), kContext) << "the primary context alone";
  EXPECT_EQ(Field(l, "after"), kContext + kModule) << "the module, loaded at its first launch";
  auto m = CaseFields(r.out, "meminfo");
  EXPECT_EQ(Field(m, "total"), static_cast<long long>(devices_[0].usable_bytes()));
  EXPECT_EQ(Field(m, "total") - Field(m, "free"), kContext + kModule);
  auto s = CaseFields(r.out, "set_device");
  EXPECT_EQ(Field(s, "used"), kContext + kModule + 32 * kMiB) << "a 32 MiB cudaMalloc";
}

TEST_P(CudartClientTest, ManagedMemoryIsHostVisibleAndKeepsItsHints) {
  CudartRun r = RunClient({"managed"});
  auto m = CaseFields(r.out, "managed");
  ExpectSucceeded(
      m, {"alloc", "prefetch", "advise", "range_attr", "sync", "d2h", "attributes", "free"},
      "managed");
  EXPECT_EQ(Field(m, "read_mostly"), 1);
  EXPECT_EQ(Field(m, "match"), 1);
  EXPECT_EQ(Field(m, "type"), 3) << "cudaMemoryTypeManaged";
}

TEST_P(CudartClientTest, PitchedMemoryCopiesRowByRow) {
  CudartRun r = RunClient({"pitch"});
  auto p = CaseFields(r.out, "pitch");
  ExpectSucceeded(p, {"alloc", "h2d", "d2h", "free"}, "pitch");
  EXPECT_EQ(Field(p, "pitch"), 1024) << "1000 bytes rounded to 512";
  EXPECT_EQ(Field(p, "match"), 1);
}

TEST_P(CudartClientTest, StreamOrderedAllocationUsesTheDefaultAndACreatedPool) {
  CudartRun r = RunClient({"async"});
  auto a = CaseFields(r.out, "async");
  ExpectSucceeded(
      a,
      {"stream", "alloc", "memset", "default_pool", "free", "sync", "create_pool", "threshold",
       "pool_alloc", "pool_free", "sync2", "trim", "destroy_pool", "destroy"},
      "async");
  EXPECT_EQ(Field(a, "used"), 64 * kMiB);
  EXPECT_EQ(Field(a, "reserved"), 64 * kMiB);
  EXPECT_EQ(Field(a, "reserved_after_sync"), 0) << "release threshold 0: trimmed at the sync";
  EXPECT_EQ(Field(a, "pool_reserved"), 64 * kMiB) << "a 1 GiB threshold keeps it";
  EXPECT_EQ(Field(a, "pool_reserved_trimmed"), 0);
}

TEST_P(CudartClientTest, AStreamCaptureBecomesAGraphThatRunsWhenLaunched) {
  CudartRun r = RunClient({"graph"});
  auto g = CaseFields(r.out, "graph");
  ExpectSucceeded(g,
                  {"malloc", "stream", "begin", "is_capturing", "end", "get_nodes", "instantiate",
                   "launch", "sync", "relaunch", "sync2", "destroy", "free"},
                  "graph");
  EXPECT_EQ(Field(g, "status"), 1) << "cudaStreamCaptureStatusActive";
  EXPECT_EQ(Field(g, "nodes"), 4);
  EXPECT_EQ(Field(g, "copied_before_launch"), 0) << "captured work does not run";
  EXPECT_EQ(Field(g, "match"), 1);
}

TEST_P(CudartClientTest, PinnedHostMemoryIsMappedAndCopiesAsynchronously) {
  CudartRun r = RunClient({"host"});
  auto h = CaseFields(r.out, "host");
  ExpectSucceeded(
      h,
      {"alloc", "host_alloc", "device_pointer", "malloc", "stream", "h2d", "d2h", "sync", "free"},
      "host");
  EXPECT_EQ(Field(h, "same_address"), 1) << "unified addressing";
  EXPECT_EQ(Field(h, "match"), 1);
}

TEST_P(CudartClientTest, ThreadsEachWithTheirOwnStreamAllSucceed) {
  CudartRun r = RunClient({"threads", "8"});
  auto t = CaseFields(r.out, "threads");
  EXPECT_EQ(Field(t, "ok"), 8);
  EXPECT_EQ(Field(t, "sync"), 0);
}

TEST_P(CudartClientTest, SetDeviceOneAllocatesAndLaunchesOnTheSecondDevice) {
  CudartRun r = RunClient({"set-device", "1"});
  auto s = CaseFields(r.out, "set_device");
  ExpectSucceeded(s, {"set", "get", "malloc", "attributes", "launch", "sync", "meminfo", "free"},
                  "set_device");
  EXPECT_EQ(Field(s, "current"), 1);
  EXPECT_EQ(Field(s, "pointer_device"), 1);
  EXPECT_EQ(Field(s, "used"), kContext + kModule + 32 * kMiB) << "all of it on device 1";
}

TEST_P(CudartClientTest, CudaVisibleDevicesShowsOnlyTheNamedDevice) {
  CudartRun r = RunClient({"devices", "set-device", "0"}, {{"CUDA_VISIBLE_DEVICES", "1"}});
  ASSERT_EQ(Field(CaseFields(r.out, "count"), "n"), 1) << r.out;
  EXPECT_EQ(CaseFields(r.out, "device")["uuid"], devices_[1].uuid);
  auto s = CaseFields(r.out, "set_device");
  EXPECT_EQ(Field(s, "malloc"), 0);
  EXPECT_EQ(Field(s, "pointer_device"), 0) << "ordinal 0 is physical device 1";
}

TEST_P(CudartClientTest, EagerLoadingLoadsModulesWithTheContextLazyAtTheirFirstLaunch) {
  auto lazy = CaseFields(RunClient({"loading"}, {{"CUDA_MODULE_LOADING", "LAZY"}}).out, "loading");
  EXPECT_EQ(Field(lazy, "before"), kContext);
  EXPECT_EQ(Field(lazy, "after"), kContext + kModule);
  state_ = SimEnv::NewStatePath();
  auto eager =
      CaseFields(RunClient({"loading"}, {{"CUDA_MODULE_LOADING", "EAGER"}}).out, "loading");
  EXPECT_EQ(Field(eager, "before"), kContext + kModule);
  EXPECT_EQ(Field(eager, "after"), kContext + kModule);
}

INSTANTIATE_TEST_SUITE_P(SharedStaticAndPerThread, CudartClientTest,
                         ::testing::Values("cudart_client_shared", "cudart_client_static",
                                           "cudart_client_ptds"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           return n.substr(n.rfind('_') + 1);
                         });

// ---- the toolkit's libraries ----

class CudartLibsTest : public CudartTest {
 protected:
  // The fields of `name`'s line; skips the test when the library is not installed.
  std::map<std::string, std::string> Library(const std::vector<std::string>& args,
                                             const std::string& name) {
    CudartRun r = Run("cudart_libs", args);
    EXPECT_EQ(r.status, 0) << r.out;
    auto fields = CaseFields(r.out, name);
    if (fields.count("skipped") != 0) {
      skipped_ = name + " is not installed (missing when the build was configured: " +
                 HAMI_CUDART_MISSING + ")";
    }
    return fields;
  }
  std::string skipped_;
};

#define HAMI_SKIP_IF_MISSING() \
  if (!skipped_.empty()) GTEST_SKIP() << skipped_

TEST_F(CudartLibsTest, CublasCreatesRunsAGemmAndDestroys) {
  auto f = Library({"cublas"}, "cublas");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(f, {"create", "malloc", "set_matrix", "sgemm", "sync", "destroy", "free"},
                  "cublas");
}

// FP32, and the half-precision types of PyTorch and vLLM (the heuristic asks the driver for
// a private table of its own for those: docs/simulated-gpu.md, "Export tables").
TEST_F(CudartLibsTest, CublasLtFindsAnAlgorithmAndRunsAGemmInEachType) {
  for (const char* c : {"cublaslt", "cublaslt-fp16", "cublaslt-bf16"}) {
    auto f = Library({c}, c);
    HAMI_SKIP_IF_MISSING();
    ExpectSucceeded(f,
                    {"create", "desc", "layouts", "preference", "heuristic", "malloc", "matmul",
                     "sync", "free", "destroy"},
                    c);
    EXPECT_GE(Field(f, "found"), 1) << c;
  }
}

TEST_F(CudartLibsTest, CurandGeneratesIntoDeviceMemory) {
  auto f = Library({"curand"}, "curand");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(f, {"create", "seed", "malloc", "generate", "sync", "destroy", "free"}, "curand");
}

// cuFFT loads each kernel it uses as a module of LZ4-compressed PTX or cubin and takes its
// function from the tools-module table (slot 7), which walks the module's functions.
TEST_F(CudartLibsTest, CufftMakesPlansAndExecutesThem) {
  auto f = Library({"cufft"}, "cufft");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(f,
                  {"malloc", "plan", "exec", "plan_many", "exec_many", "malloc_large", "plan_large",
                   "exec_large", "sync", "destroy", "free"},
                  "cufft");
}

TEST_F(CudartLibsTest, CusparseAndCusolverHandlesAreCreatedAndDestroyed) {
  auto sparse = Library({"cusparse"}, "cusparse");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(sparse, {"create", "version", "destroy"}, "cusparse");
  auto solver = Library({"cusolver"}, "cusolver");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(solver, {"create", "destroy"}, "cusolver");
}

TEST_F(CudartLibsTest, CudnnCreatesAHandle) {
  auto f = Library({"cudnn"}, "cudnn");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(f, {"create", "destroy"}, "cudnn");
  EXPECT_GT(Field(f, "version"), 0);
}

TEST_F(CudartLibsTest, NcclInitAllJoinsEverySimulatedDeviceAndAllReduces) {
  auto f = Library({"nccl"}, "nccl");
  HAMI_SKIP_IF_MISSING();
  ExpectSucceeded(f, {"count", "init_all", "setup", "all_reduce", "sync", "destroy"}, "nccl");
  EXPECT_EQ(Field(f, "devices"), 2);
}

}  // namespace
}  // namespace hami::testing
