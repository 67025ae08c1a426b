// Stream memory operations: cuStreamWriteValue32/64, cuStreamWaitValue32/64 and
// cuStreamBatchMemOp (the _v2 ABI and its per-thread-stream variants).
//
// Like a host function (cuLaunchHostFunc), an operation happens when its stream reaches it,
// on the caller's thread: the call waits for the work queued before it. A write then stores
// the value; later work of the stream is ordered after it. A wait then holds the caller
// until the condition holds, reading the word every kWaitPollNs with the driver unlocked, so
// that another thread or process (a peer's write, the host) can satisfy it. On a GPU the
// caller would go on and the stream would wait: a program that queues a wait and only then,
// from the same thread, makes it come true blocks here (docs/simulated-gpu.md says so).
//
// The word must be memory the device can reach: device memory, mapped VMM ranges with the
// access the operation needs, or registered and mapped host memory. The v1 ABI
// (cuStreamWaitValue32 without _v2, ...) is off, as on a node whose kernel module has not
// enabled it (CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_MEM_OPS_V1 is 0): its exports stay
// CUDA_ERROR_NOT_SUPPORTED. Flushing remote writes is not supported
// (CU_DEVICE_ATTRIBUTE_CAN_FLUSH_REMOTE_WRITES is 0). In a stream capture an operation
// would become a graph node, which the model does not have: the capture is invalidated and
// the call fails with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED.
#include <atomic>
#include <cstring>

#include "common/clock.h"
#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

constexpr int64_t kWaitPollNs = 20'000;
// cuStreamBatchMemOp's limit on operations per call (the driver's documented 256).
constexpr unsigned kMaxBatch = 256;

bool Holds(uint64_t word, uint64_t value, unsigned op, bool is64) {
  switch (op) {
    case CU_STREAM_WAIT_VALUE_GEQ:
      // Cyclic comparison, so that a counter that wraps still passes.
      return is64 ? int64_t(word - value) >= 0 : int32_t(uint32_t(word) - uint32_t(value)) >= 0;
    case CU_STREAM_WAIT_VALUE_EQ:
      return word == value;
    case CU_STREAM_WAIT_VALUE_AND:
      return (word & value) != 0;
    case CU_STREAM_WAIT_VALUE_NOR:
      return (is64 ? ~(word | value) : uint32_t(~(word | value))) != 0;
    default:
      return false;
  }
}

uint64_t Load(uintptr_t addr, bool is64) {
  if (is64) {
    return reinterpret_cast<const std::atomic<uint64_t>*>(addr)->load(std::memory_order_acquire);
  }
  return reinterpret_cast<const std::atomic<uint32_t>*>(addr)->load(std::memory_order_acquire);
}

void Store(uintptr_t addr, uint64_t value, bool is64) {
  if (is64) {
    reinterpret_cast<std::atomic<uint64_t>*>(addr)->store(value, std::memory_order_release);
  } else {
    reinterpret_cast<std::atomic<uint32_t>*>(addr)->store(uint32_t(value),
                                                          std::memory_order_release);
  }
}

// One operation, checked: the address aligned and reachable, the flags known.
CUresult CheckOp(const CUstreamBatchMemOpParams& p) {
  switch (p.operation) {
    case CU_STREAM_MEM_OP_WAIT_VALUE_32:
    case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
      const bool is64 = p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
      const uintptr_t addr = uintptr_t(p.waitValue.address);
      if ((p.waitValue.flags & CU_STREAM_WAIT_VALUE_FLUSH) != 0) return CUDA_ERROR_NOT_SUPPORTED;
      if ((p.waitValue.flags & ~0x3u) != 0 || addr % (is64 ? 8 : 4) != 0 ||
          !D().DeviceAccessible(addr, is64 ? 8 : 4, Driver::Access::kRead)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    }
    case CU_STREAM_MEM_OP_WRITE_VALUE_32:
    case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
      const bool is64 = p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
      const uintptr_t addr = uintptr_t(p.writeValue.address);
      if ((p.writeValue.flags & ~unsigned(CU_STREAM_WRITE_VALUE_NO_MEMORY_BARRIER)) != 0 ||
          addr % (is64 ? 8 : 4) != 0 ||
          !D().DeviceAccessible(addr, is64 ? 8 : 4, Driver::Access::kWrite)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      return CUDA_SUCCESS;
    }
    case CU_STREAM_MEM_OP_BARRIER:
      return p.memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_SYS ||
                     p.memoryBarrier.flags == CU_STREAM_MEMORY_BARRIER_TYPE_GPU
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_STREAM_MEM_OP_FLUSH_REMOTE_WRITES:
      return CUDA_ERROR_NOT_SUPPORTED;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// Runs checked operations in order, at the stream's turn.
void RunOps(ApiLock& api, CUstream_st* s, const CUstreamBatchMemOpParams* ops, unsigned count) {
  WaitUnlocked(api, StreamTail(s));
  for (unsigned i = 0; i < count; ++i) {
    const CUstreamBatchMemOpParams& p = ops[i];
    switch (p.operation) {
      case CU_STREAM_MEM_OP_WRITE_VALUE_32:
      case CU_STREAM_MEM_OP_WRITE_VALUE_64: {
        const bool is64 = p.operation == CU_STREAM_MEM_OP_WRITE_VALUE_64;
        Store(uintptr_t(p.writeValue.address), is64 ? p.writeValue.value64 : p.writeValue.value,
              is64);
        break;
      }
      case CU_STREAM_MEM_OP_WAIT_VALUE_32:
      case CU_STREAM_MEM_OP_WAIT_VALUE_64: {
        const bool is64 = p.operation == CU_STREAM_MEM_OP_WAIT_VALUE_64;
        const uintptr_t addr = uintptr_t(p.waitValue.address);
        const uint64_t value = is64 ? p.waitValue.value64 : p.waitValue.value;
        const unsigned op = p.waitValue.flags & 0x3u;
        while (!Holds(Load(addr, is64), value, op, is64)) {
          // The word changes through other threads and processes: let them in.
          WaitUnlocked(api, MonotonicNs() + kWaitPollNs);
        }
        break;
      }
      default:  // a barrier: every operation here is already complete
        break;
    }
  }
  // Later work of the stream starts after these.
  s->tail_ns = std::max(s->tail_ns, MonotonicNs());
}

CUresult BatchMemOp(CUstream stream, unsigned count, const CUstreamBatchMemOpParams* ops,
                    unsigned flags, bool ptsz) {
  if (count == 0 || count > kMaxBatch || ops == nullptr || flags != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  for (unsigned i = 0; i < count; ++i) {
    if (CUresult r = CheckOp(ops[i]); r != CUDA_SUCCESS) return r;
  }
  if (s->capture != nullptr) {
    s->capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  RunOps(api, s, ops, count);
  return CUDA_SUCCESS;
}

CUresult WaitValue(CUstream stream, CUdeviceptr addr, uint64_t value, unsigned flags, bool is64,
                   bool ptsz) {
  CUstreamBatchMemOpParams p{};
  p.waitValue.operation = is64 ? CU_STREAM_MEM_OP_WAIT_VALUE_64 : CU_STREAM_MEM_OP_WAIT_VALUE_32;
  p.waitValue.address = addr;
  if (is64) {
    p.waitValue.value64 = value;
  } else {
    p.waitValue.value = cuuint32_t(value);
  }
  p.waitValue.flags = flags;
  return BatchMemOp(stream, 1, &p, 0, ptsz);
}

CUresult WriteValue(CUstream stream, CUdeviceptr addr, uint64_t value, unsigned flags, bool is64,
                    bool ptsz) {
  CUstreamBatchMemOpParams p{};
  p.writeValue.operation = is64 ? CU_STREAM_MEM_OP_WRITE_VALUE_64 : CU_STREAM_MEM_OP_WRITE_VALUE_32;
  p.writeValue.address = addr;
  if (is64) {
    p.writeValue.value64 = value;
  } else {
    p.writeValue.value = cuuint32_t(value);
  }
  p.writeValue.flags = flags;
  return BatchMemOp(stream, 1, &p, 0, ptsz);
}

}  // namespace

}  // namespace hami::sim

using namespace hami::sim;  // NOLINT: the exported C API below

extern "C" {

CUresult CUDAAPI cuStreamWaitValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                        unsigned int flags) {
  return WaitValue(s, addr, value, flags, false, false);
}
CUresult CUDAAPI cuStreamWaitValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                             unsigned int flags) {
  return WaitValue(s, addr, value, flags, false, true);
}
CUresult CUDAAPI cuStreamWaitValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                        unsigned int flags) {
  return WaitValue(s, addr, value, flags, true, false);
}
CUresult CUDAAPI cuStreamWaitValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                             unsigned int flags) {
  return WaitValue(s, addr, value, flags, true, true);
}
CUresult CUDAAPI cuStreamWriteValue32_v2(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                         unsigned int flags) {
  return WriteValue(s, addr, value, flags, false, false);
}
CUresult CUDAAPI cuStreamWriteValue32_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint32_t value,
                                              unsigned int flags) {
  return WriteValue(s, addr, value, flags, false, true);
}
CUresult CUDAAPI cuStreamWriteValue64_v2(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                         unsigned int flags) {
  return WriteValue(s, addr, value, flags, true, false);
}
CUresult CUDAAPI cuStreamWriteValue64_v2_ptsz(CUstream s, CUdeviceptr addr, cuuint64_t value,
                                              unsigned int flags) {
  return WriteValue(s, addr, value, flags, true, true);
}
CUresult CUDAAPI cuStreamBatchMemOp_v2(CUstream s, unsigned int count,
                                       CUstreamBatchMemOpParams* ops, unsigned int flags) {
  return BatchMemOp(s, count, ops, flags, false);
}
CUresult CUDAAPI cuStreamBatchMemOp_v2_ptsz(CUstream s, unsigned int count,
                                            CUstreamBatchMemOpParams* ops, unsigned int flags) {
  return BatchMemOp(s, count, ops, flags, true);
}

}  // extern "C"
