// The simulated driver's streams, events, modules and launches, and its execution model:
// one kernel at a time per device, each taking launch_ns + waves * wave_ns of device time,
// with waves = ceil(blocks / (SMs * resident blocks per SM)).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>

#include "sim/sim_test_util.h"

namespace hami::testing {
namespace {

// ---- streams ----

using CudaStreamTest = CudaTest;

unsigned long long StreamId(CUstream s) {
  unsigned long long id = 0;
  EXPECT_EQ(cuStreamGetId(s, &id), CUDA_SUCCESS);
  return id;
}

TEST_F(CudaStreamTest, StreamsKeepTheirFlagsAndClampTheirPriority) {
  CUstream s;
  unsigned flags = 0;
  int priority = 0, least = -1, greatest = 1;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamGetFlags(s, &flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_STREAM_NON_BLOCKING));
  CUcontext c = nullptr;
  EXPECT_EQ(cuStreamGetCtx(s, &c), CUDA_SUCCESS);
  EXPECT_EQ(c, ctx_);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetStreamPriorityRange(&least, &greatest), CUDA_SUCCESS);
  EXPECT_EQ(least, 0);
  EXPECT_EQ(greatest, -5);
  for (auto [asked, got] : {std::pair{-100, -5}, {-3, -3}, {7, 0}}) {
    ASSERT_EQ(cuStreamCreateWithPriority(&s, 0, asked), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamGetPriority(s, &priority), CUDA_SUCCESS);
    EXPECT_EQ(priority, got) << asked;
    EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  }
  EXPECT_EQ(cuStreamCreate(&s, 0x4), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaStreamTest, NullIsTheLegacyStreamAndPerThreadStreamsDifferByThread) {
  const unsigned long long legacy = StreamId(CU_STREAM_LEGACY);
  const unsigned long long per_thread = StreamId(CU_STREAM_PER_THREAD);
  EXPECT_EQ(StreamId(nullptr), legacy);
  EXPECT_NE(per_thread, legacy);
  EXPECT_EQ(StreamId(CU_STREAM_PER_THREAD), per_thread) << "the same stream on each use";
  unsigned long long ptsz_null = 0;
  auto get_id_ptsz = Proc<PFN_cuStreamGetId_v12000_ptsz>(
      "cuStreamGetId", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  ASSERT_EQ(get_id_ptsz(nullptr, &ptsz_null), CUDA_SUCCESS);
  EXPECT_EQ(ptsz_null, per_thread) << "NULL means the per-thread stream to a _ptsz call";
  std::thread([&] {
    ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(StreamId(nullptr), legacy);
    EXPECT_NE(StreamId(CU_STREAM_PER_THREAD), per_thread);
  }).join();
}

TEST_F(CudaStreamTest, DestroyingAnInvalidOrSpecialStreamIsInvalidHandle) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(CU_STREAM_LEGACY), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamDestroy_v2(CU_STREAM_PER_THREAD), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(CudaStreamTest, QueryIsNotReadyWhileWorkIsPendingAndSuccessAfterSynchronize) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaStreamTest, LegacyStreamWorkWaitsForBlockingStreamsButNotForNonBlockingOnes) {
  CUstream blocking, non_blocking;
  CUevent e;
  ASSERT_EQ(cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, non_blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(non_blocking), CUDA_SUCCESS);
}

TEST_F(CudaStreamTest, SynchronizingTheContextWaitsForWorkOfADestroyedStream) {
  CUstream doomed, probe;
  ASSERT_EQ(cuStreamCreate(&doomed, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&probe, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, doomed), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamDestroy_v2(doomed), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  // The device is idle now: a 20 ms kernel takes 20 ms, not what remained of the 100 ms one
  // plus 20.
  CUevent start, end;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, probe), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k20ms_, 1, probe), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(end, probe), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_LT(ms, 50.0f);
  for (CUevent e : {start, end}) EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(probe), CUDA_SUCCESS);
}

TEST_F(CudaStreamTest, WorkOnABlockingStreamFollowsEarlierLegacyStreamWork) {
  CUstream blocking, non_blocking;
  ASSERT_EQ(cuStreamCreate(&blocking, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&non_blocking, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUevent on_blocking, on_per_thread, on_non_blocking;
  for (CUevent* e : {&on_blocking, &on_per_thread, &on_non_blocking}) {
    ASSERT_EQ(cuEventCreate(e, 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_blocking, blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_per_thread, CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(on_non_blocking, non_blocking), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(on_blocking), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(on_per_thread), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventQuery(on_non_blocking), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  for (CUevent e : {on_blocking, on_per_thread, on_non_blocking}) {
    EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  }
  for (CUstream s : {blocking, non_blocking}) EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// ---- events ----

using CudaEventTest = CudaTest;

TEST_F(CudaEventTest, CreateRefusesUnknownFlagsAndTimedInterprocessEvents) {
  CUevent e;
  EXPECT_EQ(cuEventCreate(&e, 0x100), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuEventCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(CudaEventTest, QueryAndSynchronizeFollowTheWorkBeforeTheRecord) {
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS) << "an event never recorded is complete";
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventSynchronize(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(e), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
}

TEST_F(CudaEventTest, ElapsedTimeNeedsTwoRecordedCompletedTimingEvents) {
  CUevent timed, untimed, unrecorded;
  ASSERT_EQ(cuEventCreate(&timed, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&unrecorded, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(timed, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(untimed, nullptr), CUDA_SUCCESS);
  float ms = 0;
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, timed, untimed), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, timed, unrecorded), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuEventElapsedTime_v2(nullptr, timed, timed), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(unrecorded, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, timed, unrecorded), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuEventSynchronize(unrecorded), CUDA_SUCCESS);
  EXPECT_EQ(cuEventElapsedTime_v2(&ms, timed, unrecorded), CUDA_SUCCESS);
  EXPECT_GE(ms, 100.0f);
  for (CUevent e : {timed, untimed, unrecorded}) EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
}

TEST_F(CudaEventTest, ElapsedTimeIsTheModelledDeviceTimeOfTheLaunches) {
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, kH100Wave1024, 10), 10 * (kLaunchMs + 1.0));
  EXPECT_DEVICE_MS(DeviceMs(k20ms_, kH100Wave1024, 2), 2 * (kLaunchMs + 20.0));
}

TEST_F(CudaEventTest, StreamWaitEventOrdersLaterWorkAfterTheEvent) {
  CUstream a, b;
  CUevent done_a, done_b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&done_a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&done_b, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, a), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(done_a, a), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(b), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamWaitEvent(b, done_a, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(b), CUDA_ERROR_NOT_READY) << "b now waits for a's kernel";
  ASSERT_EQ(Launch(k1ms_, kH100Wave1024, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(done_b, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(done_b), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, done_a, done_b), CUDA_SUCCESS);
  EXPECT_DEVICE_MS(ms, kLaunchMs + 1.0);
  EXPECT_EQ(cuStreamWaitEvent(b, reinterpret_cast<CUevent>(&ms), 0), CUDA_ERROR_INVALID_HANDLE);
  for (CUevent e : {done_a, done_b}) EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  for (CUstream s : {a, b}) EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

// ---- modules ----

using CudaModuleTest = CudaTest;

TEST_F(CudaModuleTest, AnyImageLoadsAndNamesAnyFunctionOfTheDefaultCost) {
  const char image[] =
      "\x7f"
      "ELF\x02\x01\x01\0not really a cubin";
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, image), CUDA_SUCCESS);
  CUfunction f = Function(m, "_Z6kernelPfi");
  ASSERT_NE(f, nullptr);
  EXPECT_DEVICE_MS(DeviceMs(f, kH100Wave1024), kLaunchMs + 0.020);  // HAMI_SIM_WAVE_NS
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
}

TEST_F(CudaModuleTest, AManifestModuleHasOnlyTheKernelsItDeclares) {
  CUfunction f;
  EXPECT_EQ(cuModuleGetFunction(&f, module_, "dflt"), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleGetFunction(&f, module_, "undeclared"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuModuleGetFunction(&f, module_, "counters"), CUDA_ERROR_NOT_FOUND) << "a global";
  EXPECT_EQ(cuModuleGetFunction(nullptr, module_, "dflt"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuModuleGetFunction(&f, module_, nullptr), CUDA_ERROR_INVALID_VALUE);
  CUfunction again;
  ASSERT_EQ(cuModuleGetFunction(&again, module_, "k1ms"), CUDA_SUCCESS);
  EXPECT_EQ(again, k1ms_) << "one handle per function";
  const char* name = nullptr;
  ASSERT_EQ(cuFuncGetName(&name, k1ms_), CUDA_SUCCESS);
  EXPECT_STREQ(name, "k1ms");
}

TEST_F(CudaModuleTest, AMalformedManifestIsAnInvalidImageAndNullIsInvalid) {
  CUmodule m;
  EXPECT_EQ(cuModuleLoadData(&m, "hami-sim-module\nkernel k wave_ns=fast\n"),
            CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(cuModuleLoadData(&m, "hami-sim-module\ntexture t\n"), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(cuModuleLoadData(&m, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuModuleLoadData(nullptr, kManifest), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaModuleTest, ModuleLoadReadsAFileAndReportsAMissingOne) {
  char dir[] = "/tmp/hami-test-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string path = std::string(dir) + "/kernels.hsm";
  const std::string empty = std::string(dir) + "/empty.cubin";
  FILE* f = std::fopen(path.c_str(), "w");
  ASSERT_NE(f, nullptr);
  std::fputs("hami-sim-module\nkernel from_file wave_ns=5\n", f);
  std::fclose(f);
  std::fclose(std::fopen(empty.c_str(), "w"));
  CUmodule m;
  ASSERT_EQ(cuModuleLoad(&m, path.c_str()), CUDA_SUCCESS);
  CUfunction fn;
  EXPECT_EQ(cuModuleGetFunction(&fn, m, "from_file"), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleGetFunction(&fn, m, "k1ms"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleLoad(&m, (std::string(dir) + "/missing.cubin").c_str()),
            CUDA_ERROR_FILE_NOT_FOUND);
  EXPECT_EQ(cuModuleLoad(&m, empty.c_str()), CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(cuModuleLoad(&m, nullptr), CUDA_ERROR_INVALID_VALUE);
  unlink(path.c_str());
  unlink(empty.c_str());
  rmdir(dir);
}

TEST_F(CudaModuleTest, AGlobalIsDeviceMemoryOfItsDeclaredSize) {
  CUdeviceptr p = 0, base = 0;
  size_t bytes = 0, size = 0;
  ASSERT_EQ(cuModuleGetGlobal_v2(&p, &bytes, module_, "counters"), CUDA_SUCCESS);
  EXPECT_NE(p, 0u);
  EXPECT_EQ(bytes, 4096u);
  ASSERT_EQ(cuMemGetAddressRange_v2(&base, &size, p + 100), CUDA_SUCCESS);
  EXPECT_EQ(base, p);
  EXPECT_EQ(size, 4096u);
  EXPECT_EQ(cuModuleGetGlobal_v2(nullptr, &bytes, module_, "counters"), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleGetGlobal_v2(&p, &bytes, module_, "k1ms"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuModuleGetGlobal_v2(&p, &bytes, module_, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaModuleTest, UnloadReturnsTheModulesMemoryAndInvalidatesItsHandles) {
  size_t before = 0, loaded = 0, after = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&before, &total), CUDA_SUCCESS);
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, kManifest), CUDA_SUCCESS);
  CUfunction f = Function(m, "k1ms");
  CUdeviceptr global;
  ASSERT_EQ(cuModuleGetGlobal_v2(&global, nullptr, m, "counters"), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&loaded, &total), CUDA_SUCCESS);
  EXPECT_LT(loaded, before);
  ASSERT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&after, &total), CUDA_SUCCESS);
  EXPECT_EQ(after, before);
  int v;
  EXPECT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, f), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Launch(f, 1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleGetFunction(&f, m, "k1ms"), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(CudaModuleTest, FunctionAttributesDescribeTheKernelOnItsDevice) {
  int v = -1;
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, k1ms_), CUDA_SUCCESS);
  EXPECT_EQ(v, 1024);
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_BINARY_VERSION, k1ms_), CUDA_SUCCESS);
  EXPECT_EQ(v, 90);
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k1ms_),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 48 * 1024);
  EXPECT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX, k1ms_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetAttribute(nullptr, CU_FUNC_ATTRIBUTE_NUM_REGS, k1ms_),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_NUM_REGS, reinterpret_cast<CUfunction>(&v)),
            CUDA_ERROR_INVALID_HANDLE);
  int blocks = 0;
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k1ms_, 1024, 0), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 2);
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k1ms_, 256, 0), CUDA_SUCCESS);
  EXPECT_EQ(blocks, 8);
}

TEST_F(CudaModuleTest, RaisingTheDynamicSharedMemoryLimitAllowsLargerLaunches) {
  constexpr unsigned kSmem = 100 * 1024;
  EXPECT_EQ(Launch(k1ms_, 1, nullptr, 32, kSmem), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuFuncSetAttribute(k1ms_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, kSmem),
            CUDA_SUCCESS);
  int v = 0;
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k1ms_),
            CUDA_SUCCESS);
  EXPECT_EQ(v, int(kSmem));
  // Two 100 KiB blocks fit in an SM's 228 KiB: one wave is 264 blocks.
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 264, 1, 32, kSmem), kLaunchMs + 1.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 265, 1, 32, kSmem), kLaunchMs + 2.0);
  EXPECT_EQ(cuFuncSetAttribute(k1ms_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 232449),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(k1ms_, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, -1),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuFuncSetAttribute(k1ms_, CU_FUNC_ATTRIBUTE_NUM_REGS, 64), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaModuleTest, APreferredSharedMemoryCarveoutIsCheckedAndReadBack) {
  int v = 0;
  ASSERT_EQ(cuFuncSetAttribute(k1ms_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 50),
            CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, k1ms_),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 50);
  EXPECT_EQ(cuFuncSetAttribute(k1ms_, CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT, 101),
            CUDA_ERROR_INVALID_VALUE);
}

// ---- launches ----

using CudaLaunchTest = CudaTest;

TEST_F(CudaLaunchTest, RefusesBadDimensionsAndBothParamsAndExtra) {
  auto launch = [&](unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {
    return cuLaunchKernel(k1ms_, gx, gy, gz, bx, by, bz, 0, nullptr, nullptr, nullptr);
  };
  EXPECT_EQ(launch(1, 1, 1, 32, 32, 1), CUDA_SUCCESS);
  EXPECT_EQ(launch(1, 1, 1, 32, 33, 1), CUDA_ERROR_INVALID_VALUE) << "1056 threads";
  EXPECT_EQ(launch(1, 1, 1, 2048, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 1, 1, 65), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(0, 1, 1, 32, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 0, 1, 32, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 1, 1, 32, 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(launch(1, 65536, 1, 32, 1, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Launch(k1ms_, 1, nullptr, 32, 48 * 1024 + 1), CUDA_ERROR_INVALID_VALUE);
  int arg = 0;
  void* params[] = {&arg};
  void* extra[] = {CU_LAUNCH_PARAM_END};
  EXPECT_EQ(cuLaunchKernel(k1ms_, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(k1ms_, 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernel(k1ms_, 1, 1, 1, 32, 1, 1, 0, nullptr, params, extra),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaLaunchTest, AFunctionOrStreamOfAnotherContextIsAnInvalidHandle) {
  CUcontext other;
  CUstream other_stream;
  ASSERT_EQ(cuCtxCreate_v4(&other, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&other_stream, 0), CUDA_SUCCESS);
  EXPECT_EQ(Launch(k1ms_, 1), CUDA_ERROR_INVALID_HANDLE) << "k1ms_ belongs to ctx_";
  CUcontext popped;
  ASSERT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
  EXPECT_EQ(Launch(k1ms_, 1, other_stream), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Launch(k1ms_, 1), CUDA_SUCCESS);
  int not_a_function = 0;
  EXPECT_EQ(Launch(reinterpret_cast<CUfunction>(&not_a_function), 1), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
}

TEST_F(CudaLaunchTest, ThePtszVariantLaunchesOnThePerThreadStream) {
  auto launch_ptsz = Proc<PFN_cuLaunchKernel_v7000_ptsz>(
      "cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM);
  ASSERT_EQ(launch_ptsz(k100ms_, 1, 1, 1, 1, 1, 1, 0, nullptr, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamSynchronize(CU_STREAM_PER_THREAD), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(CU_STREAM_PER_THREAD), CUDA_SUCCESS) << "the plain call used NULL";
  EXPECT_EQ(cuStreamQuery(CU_STREAM_LEGACY), CUDA_ERROR_NOT_READY);
}

CUlaunchConfig Config(unsigned grid, CUlaunchAttribute* attrs, unsigned num_attrs) {
  CUlaunchConfig c{};
  c.gridDimX = grid;
  c.gridDimY = c.gridDimZ = 1;
  c.blockDimX = 1024;
  c.blockDimY = c.blockDimZ = 1;
  c.attrs = attrs;
  c.numAttrs = num_attrs;
  return c;
}

TEST_F(CudaLaunchTest, LaunchKernelExIsCooperativeOnlyWithTheAttribute) {
  CUlaunchAttribute cooperative{};
  cooperative.id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
  cooperative.value.cooperative = 1;
  CUlaunchConfig fits = Config(kH100Wave1024, &cooperative, 1);
  CUlaunchConfig too_large = Config(kH100Wave1024 + 1, &cooperative, 1);
  CUlaunchConfig plain = Config(kH100Wave1024 + 1, nullptr, 0);
  EXPECT_EQ(cuLaunchKernelEx(&fits, k1ms_, nullptr, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuLaunchKernelEx(&too_large, k1ms_, nullptr, nullptr),
            CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(cuLaunchKernelEx(&plain, k1ms_, nullptr, nullptr), CUDA_SUCCESS);
  cooperative.value.cooperative = 0;
  EXPECT_EQ(cuLaunchKernelEx(&too_large, k1ms_, nullptr, nullptr), CUDA_SUCCESS);
  CUlaunchConfig missing = Config(1, nullptr, 1);
  EXPECT_EQ(cuLaunchKernelEx(&missing, k1ms_, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuLaunchKernelEx(nullptr, k1ms_, nullptr, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaLaunchTest, ACooperativeGridMustBeResidentAllAtOnce) {
  auto cooperative = [&](unsigned grid, unsigned block) {
    return cuLaunchCooperativeKernel(k1ms_, grid, 1, 1, block, 1, 1, 0, nullptr, nullptr);
  };
  EXPECT_EQ(cooperative(kH100Wave1024, 1024), CUDA_SUCCESS);
  EXPECT_EQ(cooperative(kH100Wave1024 + 1, 1024), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(cooperative(132 * 8, 256), CUDA_SUCCESS);
  EXPECT_EQ(cooperative(132 * 8 + 1, 256), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
  EXPECT_EQ(Launch(k1ms_, kH100Wave1024 + 1), CUDA_SUCCESS) << "an ordinary launch may be larger";
}

// ---- the execution model ----

using CudaExecutionModelTest = CudaTest;

TEST_F(CudaExecutionModelTest, AKernelTakesOneWaveTimeForEachFullOrPartialWave) {
  // 1024-thread blocks: 2 per SM, 264 per wave.
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 1), kLaunchMs + 1.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 264), kLaunchMs + 1.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 265), kLaunchMs + 2.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 528), kLaunchMs + 2.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 529), kLaunchMs + 3.0);
  // 256-thread blocks: 8 per SM, 1056 per wave.
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 1056, 1, 256), kLaunchMs + 1.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 1057, 1, 256), kLaunchMs + 2.0);
  // Single-thread blocks: the 32-block per-SM limit, 4224 per wave.
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 4224, 1, 1), kLaunchMs + 1.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 4225, 1, 1), kLaunchMs + 2.0);
  // 48 KiB of shared memory per 32-thread block: 4 per SM, 528 per wave.
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 528, 1, 32, 48 * 1024), kLaunchMs + 1.0);
  EXPECT_DEVICE_MS(DeviceMs(k1ms_, 529, 1, 32, 48 * 1024), kLaunchMs + 2.0);
}

TEST_F(CudaExecutionModelTest, BlocksOfEveryGridDimensionCount) {
  CUstream s;
  CUevent start, end;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, s), CUDA_SUCCESS);  // the device is busy while we queue
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  // 11 x 12 x 2 = 264 blocks of 32 x 32 threads: one wave.
  ASSERT_EQ(cuLaunchKernel(k1ms_, 11, 12, 2, 32, 32, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
  // 11 x 12 x 3 = 396 blocks: two.
  ASSERT_EQ(cuLaunchKernel(k1ms_, 11, 12, 3, 32, 32, 1, 0, s, nullptr, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(end, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_DEVICE_MS(ms, 2 * kLaunchMs + 3.0);
  EXPECT_EQ(cuEventDestroy_v2(start), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(end), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaExecutionModelTest, KernelsOfTwoStreamsRunOneAfterTheOther) {
  CUstream a, b;
  CUevent done_a, done_b;
  ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&done_a, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&done_b, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k1ms_, 5 * kH100Wave1024, a), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(done_a, a), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k1ms_, 5 * kH100Wave1024, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(done_b, b), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(done_b), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, done_a, done_b), CUDA_SUCCESS);
  EXPECT_DEVICE_MS(ms, kLaunchMs + 5.0) << "b's kernel starts when a's ends";
  for (CUevent e : {done_a, done_b}) EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  for (CUstream s : {a, b}) EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaExecutionModelTest, TheLargestLegalGridKeepsTheDeviceBusyRatherThanWrapping) {
  // Done in a child with a machine of its own: the kernel would hold the device for days.
  EXPECT_IN_CHILD({{"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    CUmodule m = StartCudaWithManifest();
    CUstream a, b;
    ASSERT_EQ(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
    ASSERT_EQ(cuLaunchKernel(Function(m, "dflt"), 2147483647u, 65535, 65535, 1024, 1, 1, 0, a,
                             nullptr, nullptr),
              CUDA_SUCCESS);
    EXPECT_EQ(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    ASSERT_EQ(Launch(Function(m, "k1ms"), 1, b), CUDA_SUCCESS);
    EXPECT_EQ(cuStreamQuery(b), CUDA_ERROR_NOT_READY) << "queued behind the huge kernel";
  });
}

TEST_F(CudaExecutionModelTest, LaunchAndWaveTimesComeFromTheEnvironment) {
  EXPECT_IN_CHILD({{"HAMI_SIM_LAUNCH_NS", "500000"},
                   {"HAMI_SIM_WAVE_NS", "2000000"},
                   {"HAMI_SIM_STATE", SimEnv::NewStatePath()}},
                  [] {
                    CUmodule m = StartCudaWithManifest();
                    CUfunction lead = Function(m, "k100ms");
                    // dflt takes HAMI_SIM_WAVE_NS; k1ms keeps its own wave time.
                    EXPECT_DEVICE_MS(::hami::testing::DeviceMs(lead, Function(m, "dflt"), 264, 4),
                                     4 * (0.5 + 2.0));
                    EXPECT_DEVICE_MS(::hami::testing::DeviceMs(lead, Function(m, "k1ms"), 265),
                                     0.5 + 2.0);
                  });
}

TEST_F(CudaExecutionModelTest, LaunchesReturnAtOnceWhileTheQueueHasRoom) {
  CUevent first;
  ASSERT_EQ(cuEventCreate(&first, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(first, nullptr), CUDA_SUCCESS);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuEventQuery(first), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuEventDestroy_v2(first), CUDA_SUCCESS);
}

TEST_F(CudaExecutionModelTest, AFullQueueBlocksTheNextLaunchUntilTheOldestCompletes) {
  EXPECT_IN_CHILD({{"HAMI_SIM_QUEUE_DEPTH", "4"}, {"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    CUfunction k = Function(StartCudaWithManifest(), "k100ms");
    CUevent first, second;
    ASSERT_EQ(cuEventCreate(&first, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuEventCreate(&second, 0), CUDA_SUCCESS);
    ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(first, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuEventRecord(second, nullptr), CUDA_SUCCESS);
    ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);
    ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);
    EXPECT_EQ(cuEventQuery(first), CUDA_ERROR_NOT_READY);
    ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);  // the fifth: waits
    EXPECT_EQ(cuEventQuery(first), CUDA_SUCCESS);
    EXPECT_EQ(cuEventQuery(second), CUDA_ERROR_NOT_READY);
  });
}

}  // namespace
}  // namespace hami::testing
