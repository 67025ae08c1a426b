// Stream memory operations on the simulated driver: cuStreamWriteValue32/64,
// cuStreamWaitValue32/64 and cuStreamBatchMemOp (the _v2 ABI), in stream order, on device
// memory and mapped host memory, and what they refuse; the batched copies, prefetches and
// discards of CUDA 12.8 and 13; the driver's log and asynchronous notifications.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "sim_test_util.h"
#include "support/sim_env.h"

namespace hami::testing {
namespace {

using MemOpsTest = CudaTest;

uint64_t Read64(CUdeviceptr p) {
  uint64_t v = 0;
  EXPECT_EQ(cuMemcpyDtoH_v2(&v, p, sizeof(v)), CUDA_SUCCESS);
  return v;
}

TEST_F(MemOpsTest, AWriteHappensWhenItsStreamReachesIt) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(p, 0, 4096), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  ASSERT_EQ(cuStreamWriteValue32_v2(s, p, 0xabcd1234u, CU_STREAM_WRITE_VALUE_DEFAULT),
            CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS) << "the kernel queued before the write is done";
  EXPECT_EQ(uint32_t(Read64(p)), 0xabcd1234u);
  ASSERT_EQ(cuStreamWriteValue64_v2(s, p + 8, 0x1122334455667788ull,
                                    CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER),
            CUDA_SUCCESS);
  EXPECT_EQ(Read64(p + 8), 0x1122334455667788ull);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, WaitsThatAlreadyHoldPassForEveryCondition) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  const uint32_t word = 0x00000005;
  ASSERT_EQ(cuMemcpyHtoD_v2(p, &word, sizeof(word)), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 5, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 3, CU_STREAM_WAIT_VALUE_GEQ), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 4, CU_STREAM_WAIT_VALUE_AND), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 2, CU_STREAM_WAIT_VALUE_NOR), CUDA_SUCCESS);
  // GEQ compares cyclically: 5 is "after" 0xfffffff0 once the counter wrapped.
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 0xfffffff0u, CU_STREAM_WAIT_VALUE_GEQ),
            CUDA_SUCCESS);
  const uint64_t big = 0x100000000ull;
  ASSERT_EQ(cuMemcpyHtoD_v2(p + 8, &big, sizeof(big)), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWaitValue64_v2(nullptr, p + 8, big, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, AWaitHoldsItsStreamUntilAnotherStreamWritesTheWord) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD32_v2(p, 0, 1), CUDA_SUCCESS);
  CUstream waiter = nullptr, writer = nullptr;
  ASSERT_EQ(cuStreamCreate(&waiter, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCreate(&writer, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  std::atomic<bool> passed{false};
  std::thread t([&] {
    cuCtxSetCurrent(ctx_);
    EXPECT_EQ(cuStreamWaitValue32_v2(waiter, p, 7, CU_STREAM_WAIT_VALUE_EQ), CUDA_SUCCESS);
    passed = true;
  });
  EXPECT_FALSE(passed.load()) << "the word is still 0";
  ASSERT_EQ(cuStreamWriteValue32_v2(writer, p, 7, 0), CUDA_SUCCESS);
  t.join();
  EXPECT_TRUE(passed.load());
  EXPECT_EQ(cuStreamDestroy_v2(waiter), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(writer), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, ABatchRunsInOrderOnMappedHostMemory) {
  void* host = nullptr;
  ASSERT_EQ(cuMemHostAlloc(&host, 4096, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemHostGetDevicePointer_v2(&p, host, 0), CUDA_SUCCESS);
  CUstreamBatchMemOpParams ops[4] = {};
  ops[0].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
  ops[0].writeValue.address = p;
  ops[0].writeValue.value = 1;
  ops[1].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
  ops[1].waitValue.address = p;
  ops[1].waitValue.value = 1;
  ops[1].waitValue.flags = CU_STREAM_WAIT_VALUE_EQ;
  ops[2].memoryBarrier.operation = CU_STREAM_MEM_OP_BARRIER;
  ops[2].memoryBarrier.flags = CU_STREAM_MEMORY_BARRIER_TYPE_SYS;
  ops[3].writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_64;
  ops[3].writeValue.address = p + 8;
  ops[3].writeValue.value64 = 42;
  ASSERT_EQ(cuStreamBatchMemOp_v2(nullptr, 4, ops, 0), CUDA_SUCCESS)
      << "the wait in the middle passes on the write before it";
  EXPECT_EQ(static_cast<uint32_t*>(host)[0], 1u);
  EXPECT_EQ(static_cast<uint64_t*>(host)[1], 42u);
  EXPECT_EQ(cuMemFreeHost(host), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, BadOperationsAreRefusedAndNothingIsWritten) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(p, 0, 4096), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWriteValue32_v2(nullptr, p + 2, 1, 0), CUDA_ERROR_INVALID_VALUE) << "unaligned";
  EXPECT_EQ(cuStreamWriteValue64_v2(nullptr, p + 4, 1, 0), CUDA_ERROR_INVALID_VALUE)
      << "unaligned for 64 bits";
  uint64_t on_stack = 0;
  EXPECT_EQ(cuStreamWriteValue64_v2(nullptr, CUdeviceptr(uintptr_t(&on_stack)), 1, 0),
            CUDA_ERROR_INVALID_VALUE)
      << "memory the device cannot reach";
  EXPECT_EQ(on_stack, 0u);
  EXPECT_EQ(cuStreamWriteValue32_v2(nullptr, p, 1, 0x80), CUDA_ERROR_INVALID_VALUE) << "flags";
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 0, 0x7), CUDA_ERROR_INVALID_VALUE) << "flags";
  EXPECT_EQ(cuStreamWaitValue32_v2(nullptr, p, 0, CU_STREAM_WAIT_VALUE_FLUSH),
            CUDA_ERROR_NOT_SUPPORTED)
      << "no remote-write flush on this device";
  int flush = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&flush, CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(flush, 0);
  CUstreamBatchMemOpParams ops[257] = {};
  for (auto& op : ops) {
    op.writeValue.operation = CU_STREAM_MEM_OP_WRITE_VALUE_32;
    op.writeValue.address = p;
    op.writeValue.value = 9;
  }
  EXPECT_EQ(cuStreamBatchMemOp_v2(nullptr, 0, ops, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp_v2(nullptr, 257, ops, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamBatchMemOp_v2(nullptr, 1, ops, 1), CUDA_ERROR_INVALID_VALUE);
  ops[1].writeValue.address = p + 1;  // one bad operation refuses the whole batch
  EXPECT_EQ(cuStreamBatchMemOp_v2(nullptr, 2, ops, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Read64(p), 0u) << "nothing of a refused batch ran";
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, TheV1ApiIsOffAndTheV2CapabilitiesAreOn) {
  int v1 = -1, bits64 = -1, nor = -1;
  ASSERT_EQ(cuDeviceGetAttribute(&v1, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetAttribute(&bits64, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetAttribute(&nor, CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v1, 0);
  EXPECT_EQ(bits64, 1);
  EXPECT_EQ(nor, 1);
  using WriteV1 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned);
  auto write_v1 = reinterpret_cast<WriteV1>(Sym("cuStreamWriteValue32"));
  ASSERT_NE(write_v1, nullptr);
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  EXPECT_EQ(write_v1(nullptr, p, 1, 0), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, InACaptureAnOperationInvalidatesIt) {
  CUdeviceptr p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamWriteValue32_v2(s, p, 1, 0), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(s, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

// ---- batches ----

TEST_F(MemOpsTest, ABatchOfCopiesMovesEveryRangeInOrder) {
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(cuMemAlloc_v2(&a, 8192), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&b, 8192), CUDA_SUCCESS);
  std::vector<uint8_t> data(4096);
  for (size_t i = 0; i < data.size(); ++i) data[i] = uint8_t(i * 13 + 1);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  // Host to a, then a to b: the second reads what the first wrote.
  CUdeviceptr dsts[2] = {a, b + 4096};
  CUdeviceptr srcs[2] = {CUdeviceptr(uintptr_t(data.data())), a};
  size_t sizes[2] = {data.size(), data.size()};
  CUmemcpyAttributes attr{};
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_STREAM;
  size_t idx = 0;
  ASSERT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, &attr, &idx, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  std::vector<uint8_t> back(data.size());
  ASSERT_EQ(cuMemcpyDtoH_v2(back.data(), b + 4096, back.size()), CUDA_SUCCESS);
  EXPECT_EQ(back, data);

  // v1 says which copy failed; a bad batch is refused whole.
  using BatchV1 = CUresult (*)(CUdeviceptr*, CUdeviceptr*, size_t*, size_t, CUmemcpyAttributes*,
                               size_t*, size_t, size_t*, CUstream);
  auto batch_v1 = reinterpret_cast<BatchV1>(Sym("cuMemcpyBatchAsync"));
  ASSERT_NE(batch_v1, nullptr);
  size_t fail = 0;
  sizes[1] = 0;
  EXPECT_EQ(batch_v1(dsts, srcs, sizes, 2, &attr, &idx, 1, &fail, s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(fail, 1u);
  sizes[1] = data.size();
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, &attr, &idx, 1, nullptr),
            CUDA_ERROR_INVALID_VALUE)
      << "not on the legacy NULL stream";
  size_t late = 1;
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, &attr, &late, 1, s),
            CUDA_ERROR_INVALID_VALUE)
      << "the first attribute must cover the first copy";
  attr.srcAccessOrder = CU_MEMCPY_SRC_ACCESS_ORDER_INVALID;
  EXPECT_EQ(cuMemcpyBatchAsync_v2(dsts, srcs, sizes, 2, &attr, &idx, 1, s),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(b), CUDA_SUCCESS);
}

TEST_F(MemOpsTest, BatchedPrefetchesAndDiscardsTakeManagedRanges) {
  CUdeviceptr m = 0, m2 = 0, d = 0;
  ASSERT_EQ(cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAllocManaged(&m2, 1 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAlloc_v2(&d, 1 << 20), CUDA_SUCCESS);
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUdeviceptr ranges[2] = {m, m2};
  size_t sizes[2] = {4096, 4096};
  CUmemLocation locs[2] = {};
  locs[0].type = CU_MEM_LOCATION_TYPE_DEVICE;
  locs[0].id = 0;
  locs[1].type = CU_MEM_LOCATION_TYPE_HOST;
  size_t loc_idx[2] = {0, 1};
  EXPECT_EQ(cuMemPrefetchBatchAsync(ranges, sizes, 2, locs, loc_idx, 2, 0, s), CUDA_SUCCESS);
  int where = -2;
  ASSERT_EQ(cuMemRangeGetAttribute(&where, sizeof(where),
                                   CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m, 4096),
            CUDA_SUCCESS);
  EXPECT_EQ(where, 0) << "the first range went to device 0";
  ASSERT_EQ(cuMemRangeGetAttribute(&where, sizeof(where),
                                   CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION, m2, 4096),
            CUDA_SUCCESS);
  EXPECT_EQ(where, CU_DEVICE_CPU) << "the second to the host";
  EXPECT_EQ(cuMemDiscardBatchAsync(ranges, sizes, 2, 0, s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemDiscardAndPrefetchBatchAsync(ranges, sizes, 2, locs, loc_idx, 2, 0, s),
            CUDA_SUCCESS);
  CUdeviceptr plain[1] = {d};
  EXPECT_EQ(cuMemDiscardBatchAsync(plain, sizes, 1, 0, s), CUDA_ERROR_INVALID_VALUE)
      << "only managed memory is discarded";
  EXPECT_EQ(cuMemDiscardBatchAsync(ranges, sizes, 2, 1, s), CUDA_ERROR_INVALID_VALUE) << "flags";
  EXPECT_EQ(cuMemPrefetchBatchAsync(ranges, sizes, 2, locs, loc_idx, 0, 0, s),
            CUDA_ERROR_INVALID_VALUE)
      << "no location";
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m2), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(d), CUDA_SUCCESS);
}

// ---- what the driver says on its own ----

void NeverCalledLog(void*, CUlogLevel, char*, size_t) { ADD_FAILURE() << "no log to report"; }
void NeverCalledNotice(CUasyncNotificationInfo*, void*, CUasyncCallbackHandle) {
  ADD_FAILURE() << "no notification to raise";
}

TEST_F(MemOpsTest, TheDriverLogIsEmptyAndItsCallbacksAreKeptButNeverCalled) {
  CUlogsCallbackHandle h = nullptr;
  ASSERT_EQ(cuLogsRegisterCallback(NeverCalledLog, nullptr, &h), CUDA_SUCCESS);
  // A failing call, which a real driver might log.
  CUdeviceptr p = 0;
  EXPECT_EQ(cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
  CUlogIterator it = 7;
  ASSERT_EQ(cuLogsCurrent(&it, 0), CUDA_SUCCESS);
  EXPECT_EQ(it, 0u);
  char buffer[64] = "stale";
  size_t size = sizeof(buffer);
  ASSERT_EQ(cuLogsDumpToMemory(&it, buffer, &size, 0), CUDA_SUCCESS);
  EXPECT_EQ(size, 0u);
  EXPECT_STREQ(buffer, "");
  const std::string file = SimEnv::NewStatePath() + ".log";
  ASSERT_EQ(cuLogsDumpToFile(nullptr, file.c_str(), 0), CUDA_SUCCESS);
  struct stat st {};
  ASSERT_EQ(stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0);
  unlink(file.c_str());
  EXPECT_EQ(cuLogsDumpToMemory(nullptr, buffer, &size, 0), CUDA_ERROR_INVALID_VALUE)
      << "a size of 0";
  EXPECT_EQ(cuLogsUnregisterCallback(h), CUDA_SUCCESS);
  EXPECT_EQ(cuLogsUnregisterCallback(h), CUDA_ERROR_INVALID_VALUE) << "once";

  CUasyncCallbackHandle n = nullptr;
  ASSERT_EQ(cuDeviceRegisterAsyncNotification(0, NeverCalledNotice, nullptr, &n), CUDA_SUCCESS);
  EXPECT_EQ(cuDeviceUnregisterAsyncNotification(1, n), CUDA_ERROR_INVALID_VALUE)
      << "registered on device 0";
  EXPECT_EQ(cuDeviceRegisterAsyncNotification(99, NeverCalledNotice, nullptr, &n),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceUnregisterAsyncNotification(0, n), CUDA_SUCCESS);
}

}  // namespace
}  // namespace hami::testing
