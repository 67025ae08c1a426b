// What one process holds that is not charged to its container's device budget, kept apart
// from the ledger (ledger.h), which is the device budget's: allocations served from host
// memory when the device budget refused them (oversubscription, spill.h), and memory of other
// processes mapped here (imports, imports.h). The region records both in the process's slot
// (layout minor 5); these books say which pointer or handle each byte belongs to, so that a
// free, an unmap or a context's end gives back exactly what it held.
//
// Arithmetic only: no driver, no region. Each book's empty() is one relaxed load, for the
// free and unmap paths of processes that never spill or import.
//
// Thread safety: every method may be called from any thread (one mutex per book, never held
// across a call out). ResetInForkChild() only from a pthread_atfork child handler.
#pragma once

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/mutex.h"
#include "common/thread_annotations.h"

namespace hami::vgpu {

// An allocation served from pinned host memory mapped into the device's address space.
struct Spill {
  void* host = nullptr;     // what cuMemHostAlloc gave; cuMemFreeHost takes it back
  uint64_t charge = 0;      // bytes of the host budget it holds
  CUcontext ctx = nullptr;  // the driver frees it with this context
  int device = -1;          // the CUDA ordinal it was asked for
};

class Spills {
 public:
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }
  void Add(CUdeviceptr dptr, const Spill& spill) EXCLUDES(mu_);
  // Forgets `dptr`; nullopt when it was not served from host memory.
  std::optional<Spill> Take(CUdeviceptr dptr) EXCLUDES(mu_);
  bool Contains(CUdeviceptr dptr) const EXCLUDES(mu_);
  // Forgets every spill of a context that ended (the driver freed their memory with it).
  std::vector<Spill> TakeContext(CUcontext ctx) EXCLUDES(mu_);
  void ResetInForkChild() NO_THREAD_SAFETY_ANALYSIS;

  // What the log has said: the first spill, and a refusal since the last spill (each once).
  std::atomic<bool> spilling_said{false};
  std::atomic<bool> refusal_said{false};

 private:
  mutable Mutex mu_;
  std::map<CUdeviceptr, Spill> by_ptr_ GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};
};

// Memory another process created, mapped here. Each mapping counts its bytes once, for as
// long as it is mapped.
class Imports {
 public:
  bool empty() const { return count_.load(std::memory_order_relaxed) == 0; }

  // ---- pointers: cuIpcOpenMemHandle, cuMemPoolImportPointer ----
  // `pool` is the importing pool of a pool pointer (null for IPC), `ctx` the context the
  // driver unmaps it with (null: none).
  void AddPointer(CUdeviceptr ptr, uint64_t bytes, CUcontext ctx, CUmemoryPool pool) EXCLUDES(mu_);
  // The bytes `ptr` recorded, forgotten (0: not an imported pointer).
  uint64_t TakePointer(CUdeviceptr ptr) EXCLUDES(mu_);
  // Every pointer of a context that ended, or of a pool destroyed: their bytes.
  uint64_t TakeContext(CUcontext ctx) EXCLUDES(mu_);
  uint64_t TakePool(CUmemoryPool pool) EXCLUDES(mu_);

  // ---- VMM: handles from cuMemImportFromShareableHandle and their mappings ----
  void AddHandle(CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  // Another handle to imported memory (cuMemRetainAllocationHandle): released on its own.
  void RetainHandle(CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  void ReleaseHandle(CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  // Not memory after all (a multicast object): every reference to it goes.
  void ForgetHandle(CUmemGenericAllocationHandle handle) EXCLUDES(mu_);
  // A mapping of `size` bytes at `ptr` of `handle`: the bytes recorded (0: not imported).
  uint64_t AddMapping(CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle)
      EXCLUDES(mu_);
  // Every imported mapping that starts inside [ptr, ptr + size) is gone: their bytes.
  uint64_t TakeMappings(CUdeviceptr ptr, size_t size) EXCLUDES(mu_);

  void ResetInForkChild() NO_THREAD_SAFETY_ANALYSIS;

 private:
  struct Pointer {
    uint64_t bytes;
    CUcontext ctx;
    CUmemoryPool pool;
  };
  void Recount() REQUIRES(mu_) {
    count_.store(pointers_.size() + handles_.size() + mappings_.size(), std::memory_order_relaxed);
  }

  Mutex mu_;
  std::map<CUdeviceptr, Pointer> pointers_ GUARDED_BY(mu_);
  std::map<CUmemGenericAllocationHandle, int> handles_ GUARDED_BY(mu_);  // -> references
  std::map<CUdeviceptr, size_t> mappings_ GUARDED_BY(mu_);
  std::atomic<size_t> count_{0};
};

}  // namespace hami::vgpu
