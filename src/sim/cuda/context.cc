// Contexts (primary and created), the per-thread context stack, streams, events and
// synchronization.
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>

#include "common/clock.h"
#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

// One entry of a thread's context stack. The id tells a context destroyed meanwhile (by
// another thread) from a new one that got the same address. A primary context's handle
// (id 0) names that context whenever it is active, as the driver's handle does.
struct StackEntry {
  CUctx_st* ctx;
  uint64_t id;
};

StackEntry EntryFor(CUctx_st* ctx) { return {ctx, ctx->handle_device >= 0 ? 0 : ctx->id}; }

// A per-thread object that is still there when a library's exit handler calls in: on the
// main thread exit() runs C++ thread_local destructors before atexit handlers, and cuFFT,
// for one, frees its buffers from such a handler. So the object is reached through a
// trivially destructible pointer, and a thread_local reaper frees it when a thread other than
// the main one ends; the main thread's object lives as long as the process. (Not a pthread
// key: a copy of this driver loaded with dlmopen brings its own libc, whose key numbers
// collide with the first libc's in each thread's one table of key values.) A call after the
// reaper ran makes a fresh object, which that thread then leaks when it ends.
template <typename T>
T& PerThread() {
  thread_local T* mine = nullptr;
  struct Reaper {
    ~Reaper() {
      if (gettid() == getpid()) return;
      delete mine;
      mine = nullptr;
    }
  };
  if (mine == nullptr) {
    mine = new T();
    thread_local Reaper reaper;
    (void)reaper;
  }
  return *mine;
}

std::vector<StackEntry>& Stack() { return PerThread<std::vector<StackEntry>>(); }
// cuThreadExchangeStreamCaptureMode's per-thread mode.
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// Interprocess events: the name of each one's memfd, which an opener checks.
uint64_t g_next_ipc_event = 1;
std::string IpcEventName(pid_t pid, uint64_t id) {
  return "hami-sim-ipc-event-" + std::to_string(pid) + "-" + std::to_string(id);
}
// Per-thread default streams, by context id (ids are never reused).
std::unordered_map<uint64_t, CUstream_st*>& PerThreadStreams() {
  return PerThread<std::unordered_map<uint64_t, CUstream_st*>>();
}

bool Destroyed(const StackEntry& e) {
  return !D().Live(e.ctx, HandleKind::kContext) || (e.id != 0 && e.ctx->id != e.id);
}

// A fork child starts with no current context (its driver starts afresh).
void ClearStackInChild() { Stack().clear(); }

void Push(CUctx_st* ctx) {
  static std::once_flag atfork_once;
  std::call_once(atfork_once, [] { pthread_atfork(nullptr, nullptr, ClearStackInChild); });
  Stack().push_back(EntryFor(ctx));
}

CUstream_st* NewStream(CUctx_st* ctx, unsigned flags, int priority) {
  Driver& d = D();
  auto* s = new CUstream_st{};
  s->id = d.next_id++;
  s->ctx = ctx;
  s->flags = flags;
  s->priority = priority;
  ctx->streams.insert(s);
  d.Register(s, HandleKind::kStream);
  return s;
}

void DeleteStream(CUstream_st* s) {
  s->ctx->streams.erase(s);
  D().Unregister(s);
  delete s;
}

// Deletes the destroyed streams of `ctx` whose work is done (see StreamDestroy).
void SweepDestroyedStreams(CUctx_st* ctx) {
  int64_t now = MonotonicNs();
  std::vector<CUstream_st*> done;
  for (CUstream_st* s : ctx->streams) {
    if (!D().Live(s, HandleKind::kStream) && s->tail_ns <= now) done.push_back(s);
  }
  for (CUstream_st* s : done) DeleteStream(s);
}

CUresult CreateContext(CUctx_st** out, unsigned flags, CUdevice dev, bool primary) {
  Driver& d = D();
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  if (CUresult r = d.EnsureSlot(); r != CUDA_SUCCESS) return r;
  d.state->SweepDead();  // the memory of processes that died is free again
  {
    std::unique_ptr<SharedState::ContextCreationLock> serial;
    if (d.options.ctx_serialize) serial = d.state->LockContextCreation();
    SleepForNs(int64_t(d.options.ctx_create_us) * 1000);
  }
  uint64_t bytes = d.ContextBytes(p);
  if (CUresult r = d.Charge(p, bytes); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx = primary ? PrimaryHandleLocked(p) : new CUctx_st{};
  ctx->id = d.next_id++;
  ctx->device = p;
  ctx->ordinal = dev;
  ctx->flags = flags;
  ctx->primary = primary;
  ctx->charge = bytes;
  ctx->limits[CU_LIMIT_STACK_SIZE] = 1024;
  ctx->limits[CU_LIMIT_PRINTF_FIFO_SIZE] = 1 << 20;
  ctx->limits[CU_LIMIT_MALLOC_HEAP_SIZE] = 8 << 20;
  ctx->limits[CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH] = 2;
  ctx->limits[CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT] = 2048;
  ctx->limits[CU_LIMIT_MAX_L2_FETCH_GRANULARITY] = 64;
  d.Register(ctx, HandleKind::kContext);
  ctx->legacy_stream = NewStream(ctx, 0, 0);
  ctx->legacy_stream->legacy = true;
  d.state->AddContexts(d.slot, p, 1);
  InstantiateEagerLibrariesLocked(ctx);
  *out = ctx;
  return CUDA_SUCCESS;
}

// Runs the destructors of what the context-local-storage table stored in `ctx`, with the
// driver unlocked (they may call the driver). Stops when `ctx` is destroyed meanwhile.
void RunStorageDestructors(ApiLock& api, CUctx_st* ctx) {
  const uint64_t id = ctx->id;
  while (D().Live(ctx, HandleKind::kContext) && ctx->id == id && !ctx->storage.empty()) {
    auto it = ctx->storage.begin();
    void* key = const_cast<void*>(it->first);
    StorageEntry e = it->second;
    ctx->storage.erase(it);
    if (e.dtor == nullptr) continue;
    api.lock().unlock();
    e.dtor(ctx, key, e.value);
    api.lock().lock();
  }
}

constexpr unsigned kCtxFlagsMask = CU_CTX_SCHED_MASK | CU_CTX_MAP_HOST | CU_CTX_LMEM_RESIZE_TO_MAX |
                                   CU_CTX_COREDUMP_ENABLE | CU_CTX_USER_COREDUMP_ENABLE |
                                   CU_CTX_SYNC_MEMOPS;

CUresult CtxCreate(CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr || (flags & ~kCtxFlagsMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx;
  if (CUresult r = CreateContext(&ctx, flags, dev, false); r != CUDA_SUCCESS) return r;
  Push(ctx);
  *pctx = ctx;
  return CUDA_SUCCESS;
}

CUresult CtxDestroy(CUcontext ctx) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(ctx, HandleKind::kContext) || ctx->primary) return CUDA_ERROR_INVALID_CONTEXT;
  const uint64_t id = ctx->id;
  WaitUnlocked(api, LegacyTail(ctx));
  if (D().Live(ctx, HandleKind::kContext) && ctx->id == id) RunStorageDestructors(api, ctx);
  if (!D().Live(ctx, HandleKind::kContext) || ctx->id != id) return CUDA_ERROR_INVALID_CONTEXT;
  DestroyContextLocked(ctx);
  return CUDA_SUCCESS;
}

CUresult CtxPush(CUcontext ctx) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!IsContextHandleLocked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  Push(ctx);
  return CUDA_SUCCESS;
}

CUresult CtxPop(CUcontext* pctx) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (Stack().empty()) return CUDA_ERROR_INVALID_CONTEXT;
  CUctx_st* top = Stack().back().ctx;
  Stack().pop_back();
  if (pctx != nullptr) *pctx = top;
  return CUDA_SUCCESS;
}

CUresult PrimaryRelease(CUdevice dev) {
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  DeviceRt& rt = D().rt[size_t(p)];
  if (rt.primary == nullptr || rt.primary->primary_refs <= 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--rt.primary->primary_refs == 0) {
    WaitUnlocked(api, LegacyTail(rt.primary));
    if (rt.primary != nullptr && rt.primary->primary_refs == 0)
      RunStorageDestructors(api, rt.primary);
    // A destructor may have retained it again.
    if (rt.primary != nullptr && rt.primary->primary_refs == 0) DestroyContextLocked(rt.primary);
  }
  return CUDA_SUCCESS;
}

CUresult PrimaryReset(CUdevice dev) {
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  DeviceRt& rt = D().rt[size_t(p)];
  if (rt.primary != nullptr) {
    WaitUnlocked(api, LegacyTail(rt.primary));
    if (rt.primary != nullptr) RunStorageDestructors(api, rt.primary);
    if (rt.primary != nullptr) DestroyContextLocked(rt.primary);
  }
  rt.primary_flags = 0;
  return CUDA_SUCCESS;
}

CUresult PrimarySetFlags(CUdevice dev, unsigned flags) {
  if ((flags & ~kCtxFlagsMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  DeviceRt& rt = D().rt[size_t(p)];
  rt.primary_flags = flags;
  if (rt.primary != nullptr) rt.primary->flags = flags;
  return CUDA_SUCCESS;
}

CUresult SyncStream(CUstream h, bool ptsz) {
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != nullptr) {
    s->capture_invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  int device = s->ctx->device;
  WaitUnlocked(api, StreamDone(s));
  TrimPoolsAtSyncLocked(device);
  return CUDA_SUCCESS;
}

CUresult QueryStream(CUstream h, bool ptsz) {
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != nullptr) {
    s->capture_invalidated = true;  // as synchronizing does: the capture cannot go on
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return MonotonicNs() >= StreamDone(s) ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult EventRecord(CUevent e, CUstream h, bool ptsz) {
  ApiLock api;
  if (!D().Live(e, HandleKind::kEvent)) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->ctx != e->ctx) return CUDA_ERROR_INVALID_HANDLE;
  SetEventTime(e, std::max(MonotonicNs(), StreamTail(s)));
  return CUDA_SUCCESS;
}

CUresult WaitEvent(CUstream h, CUevent e, bool ptsz) {
  ApiLock api;
  if (!D().Live(e, HandleKind::kEvent)) return CUDA_ERROR_INVALID_HANDLE;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  int64_t t;
  if (EventTime(e, &t)) s->tail_ns = std::max(s->tail_ns, t);
  return CUDA_SUCCESS;
}

CUresult ElapsedTime(float* ms, CUevent start, CUevent end) {
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(start, HandleKind::kEvent) || !D().Live(end, HandleKind::kEvent)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  int64_t t0, t1;
  if (((start->flags | end->flags) & CU_EVENT_DISABLE_TIMING) != 0 || !EventTime(start, &t0) ||
      !EventTime(end, &t1)) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  int64_t now = MonotonicNs();
  if (now < t0 || now < t1) return CUDA_ERROR_NOT_READY;
  *ms = float(double(t1 - t0) / 1e6);
  return CUDA_SUCCESS;
}

CUresult StreamGetCtx(CUstream h, CUcontext* pctx, bool ptsz) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *pctx = s->ctx;
  return CUDA_SUCCESS;
}

}  // namespace

void SetEventTime(CUevent_st* e, int64_t time_ns) {
  e->recorded = true;
  e->time_ns = time_ns;
  if (e->shared != nullptr) {
    e->shared->time_ns.store(time_ns, std::memory_order_relaxed);
    e->shared->recorded.store(1, std::memory_order_release);
  }
}

bool EventTime(const CUevent_st* e, int64_t* time_ns) {
  if (e->shared != nullptr) {
    if (e->shared->recorded.load(std::memory_order_acquire) == 0) return false;
    *time_ns = e->shared->time_ns.load(std::memory_order_relaxed);
    return true;
  }
  *time_ns = e->time_ns;
  return e->recorded;
}

void DeleteEvent(CUevent_st* e) {
  if (e->shared != nullptr) munmap(e->shared, sizeof(IpcEventPage));
  if (e->shared_fd >= 0) close(e->shared_fd);
  delete e;
}

CUctx_st* CurrentContext() {
  return Stack().empty() || Destroyed(Stack().back()) ? nullptr : Stack().back().ctx;
}

void SetCurrentContext(CUctx_st* ctx) {
  if (ctx == nullptr) {
    if (!Stack().empty()) Stack().pop_back();
    return;
  }
  if (Stack().empty()) {
    Push(ctx);
  } else {
    Stack().back() = EntryFor(ctx);
  }
}

CUresult RequireContext(CUctx_st** ctx) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (Stack().empty()) return CUDA_ERROR_INVALID_CONTEXT;
  // A context another thread destroyed stays current here, unusable, as in the driver.
  if (Destroyed(Stack().back())) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  *ctx = Stack().back().ctx;
  return CUDA_SUCCESS;
}

CUresult ResolveStream(CUstream handle, bool ptsz, CUstream_st** out) {
  if (handle == CU_STREAM_PER_THREAD || (handle == nullptr && ptsz)) {
    CUctx_st* ctx;
    if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
    CUstream_st*& s = PerThreadStreams()[ctx->id];
    if (s == nullptr || !D().Live(s, HandleKind::kStream)) {
      s = NewStream(ctx, 0, 0);
      s->per_thread = true;
    }
    *out = s;
    return CUDA_SUCCESS;
  }
  if (handle == nullptr || handle == CU_STREAM_LEGACY) {
    CUctx_st* ctx;
    if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
    *out = ctx->legacy_stream;
    return CUDA_SUCCESS;
  }
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(handle, HandleKind::kStream)) return CUDA_ERROR_INVALID_HANDLE;
  *out = handle;
  return CUDA_SUCCESS;
}

int64_t StreamTail(CUstream_st* s) {
  if (s->legacy) return LegacyTail(s->ctx);
  // Work on a blocking stream (the per-thread default stream is one) follows the work
  // already queued to the legacy stream.
  if ((s->flags & CU_STREAM_NON_BLOCKING) == 0) {
    return std::max(s->tail_ns, s->ctx->legacy_stream->tail_ns);
  }
  return s->tail_ns;
}

int64_t StreamDone(CUstream_st* s) { return s->legacy ? LegacyTail(s->ctx) : s->tail_ns; }

int64_t LegacyTail(CUctx_st* ctx) {
  int64_t t = 0;
  for (CUstream_st* s : ctx->streams) {
    if (s->legacy || (s->flags & CU_STREAM_NON_BLOCKING) == 0) t = std::max(t, s->tail_ns);
  }
  return t;
}

void WaitUnlocked(ApiLock& api, int64_t deadline_ns) {
  if (deadline_ns <= MonotonicNs()) return;
  api.lock().unlock();
  SleepUntilNs(deadline_ns);
  api.lock().lock();
}

void DestroyContextLocked(CUctx_st* ctx) {
  Driver& d = D();
  // Modules first (their globals are allocations of the context).
  std::vector<CUmod_st*> modules;
  for (auto& [h, kind] : d.handles) {
    if (kind == HandleKind::kModule && static_cast<const CUmod_st*>(h)->ctx == ctx) {
      modules.push_back(const_cast<CUmod_st*>(static_cast<const CUmod_st*>(h)));
    }
  }
  for (CUmod_st* m : modules) DestroyModuleLocked(m);
  std::vector<const void*> owned;
  for (auto& [h, kind] : d.handles) {
    if ((kind == HandleKind::kEvent && static_cast<const CUevent_st*>(h)->ctx == ctx) ||
        (kind == HandleKind::kArray && static_cast<const CUarray_st*>(h)->ctx == ctx) ||
        (kind == HandleKind::kMipmappedArray &&
         static_cast<const CUmipmappedArray_st*>(h)->ctx == ctx)) {
      owned.push_back(h);
    }
  }
  for (const void* h : owned) {
    if (d.handles[h] == HandleKind::kMipmappedArray) {
      // Its levels are arrays of the same context, freed by the branch below.
      auto* m = const_cast<CUmipmappedArray_st*>(static_cast<const CUmipmappedArray_st*>(h));
      d.Uncharge(m->ctx->device, m->charge);
      delete m;
    } else if (d.handles[h] == HandleKind::kArray) {
      auto* a = const_cast<CUarray_st*>(static_cast<const CUarray_st*>(h));
      d.Uncharge(a->ctx->device, a->charge);
      std::free(a->data);
      delete a;
    } else {
      DeleteEvent(const_cast<CUevent_st*>(static_cast<const CUevent_st*>(h)));
    }
    d.Unregister(h);
  }
  FreeContextMemoryLocked(ctx);
  std::vector<CUstream_st*> streams(ctx->streams.begin(), ctx->streams.end());
  for (CUstream_st* s : streams) DeleteStream(s);
  d.Uncharge(ctx->device, ctx->charge);
  d.state->AddContexts(d.slot, ctx->device, -1);
  DeviceRt& rt = d.rt[size_t(ctx->device)];
  if (rt.primary == ctx) rt.primary = nullptr;
  d.Unregister(ctx);
  if (ctx == rt.primary_handle) {
    // The handle stays for the next activation, current where it was.
    const int device = ctx->device;
    *ctx = CUctx_st{};
    ctx->device = device;
    ctx->handle_device = device;
  } else {
    std::erase_if(Stack(), [ctx](const StackEntry& e) { return e.ctx == ctx && e.id == ctx->id; });
    delete ctx;
  }
}

CUctx_st* PrimaryHandleLocked(int physical) {
  DeviceRt& rt = D().rt[size_t(physical)];
  if (rt.primary_handle == nullptr) {
    rt.primary_handle = new CUctx_st{};
    rt.primary_handle->device = physical;
    rt.primary_handle->handle_device = physical;
  }
  return rt.primary_handle;
}

bool IsContextHandleLocked(const CUctx_st* ctx) {
  if (D().Live(ctx, HandleKind::kContext)) return true;
  for (const DeviceRt& rt : D().rt) {
    if (ctx != nullptr && ctx == rt.primary_handle) return true;
  }
  return false;
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

// ---- contexts ----

CUresult CUDAAPI cuCtxCreate(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreate(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v2(CUcontext* pctx, unsigned int flags, CUdevice dev) {
  return CtxCreate(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* paramsArray, int numParams,
                                unsigned int flags, CUdevice dev) {
  if (numParams < 0 || (numParams > 0 && paramsArray == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  return CtxCreate(pctx, flags, dev);
}
CUresult CUDAAPI cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* params, unsigned int flags,
                                CUdevice dev) {
  if (params != nullptr && params->numExecAffinityParams > 0 && params->cigParams != nullptr) {
    return CUDA_ERROR_INVALID_VALUE;  // the two are mutually exclusive
  }
  return CtxCreate(pctx, flags, dev);
}

CUresult CUDAAPI cuCtxDestroy(CUcontext ctx) { return CtxDestroy(ctx); }
CUresult CUDAAPI cuCtxDestroy_v2(CUcontext ctx) { return CtxDestroy(ctx); }
CUresult CUDAAPI cuCtxPushCurrent(CUcontext ctx) { return CtxPush(ctx); }
CUresult CUDAAPI cuCtxPushCurrent_v2(CUcontext ctx) { return CtxPush(ctx); }
CUresult CUDAAPI cuCtxPopCurrent(CUcontext* pctx) { return CtxPop(pctx); }
CUresult CUDAAPI cuCtxPopCurrent_v2(CUcontext* pctx) { return CtxPop(pctx); }

// Reads only the calling thread's stack, so it takes no lock: the real driver answers it from
// thread-local state too, and an interposer asks it on every allocation.
CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  *pctx = Stack().empty() ? nullptr : Stack().back().ctx;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (ctx != nullptr && !IsContextHandleLocked(ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  SetCurrentContext(ctx);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *device = ctx->ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice_v2(CUdevice* device, CUcontext ctx) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (ctx == nullptr) return cuCtxGetDevice(device);
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(ctx, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  *device = ctx->ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetFlags(unsigned int* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetFlags(unsigned int flags) {
  if ((flags & ~kCtxFlagsMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  ctx->flags = flags;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetId(CUcontext ctx, unsigned long long* ctxId) {
  if (ctxId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (ctx == nullptr) {
    if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  } else if (!D().Live(ctx, HandleKind::kContext)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *ctxId = ctx->id;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (ctx == nullptr) {
    if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  } else if (!D().Live(ctx, HandleKind::kContext)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *version = 3020;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  int64_t t = 0;
  for (CUstream_st* s : ctx->streams) t = std::max(t, s->tail_ns);
  int device = ctx->device;
  WaitUnlocked(api, t);
  TrimPoolsAtSyncLocked(device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  if (pvalue == nullptr || EnumValue(limit) < 0 || EnumValue(limit) >= 8)
    return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *pvalue = ctx->limits[limit];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  if (EnumValue(limit) < 0 || EnumValue(limit) >= 8) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  ctx->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCacheConfig(CUfunc_cache* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *config = CU_FUNC_CACHE_PREFER_NONE;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCacheConfig(CUfunc_cache config) {
  if (EnumValue(config) < 0 || EnumValue(config) > 3) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  return RequireContext(&ctx);
}

CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (leastPriority != nullptr) *leastPriority = 0;
  if (greatestPriority != nullptr) *greatestPriority = -5;
  return CUDA_SUCCESS;
}

// ---- primary contexts ----

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  DeviceRt& rt = D().rt[size_t(p)];
  if (rt.primary == nullptr) {
    CUctx_st* ctx;
    if (CUresult r = CreateContext(&ctx, rt.primary_flags, dev, true); r != CUDA_SUCCESS) {
      return r;
    }
    rt.primary = ctx;
  }
  rt.primary->primary_refs += 1;
  *pctx = rt.primary;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) { return PrimaryRelease(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) { return PrimaryRelease(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset(CUdevice dev) { return PrimaryReset(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxReset_v2(CUdevice dev) { return PrimaryReset(dev); }
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned int flags) {
  return PrimarySetFlags(dev, flags);
}
CUresult CUDAAPI cuDevicePrimaryCtxSetFlags_v2(CUdevice dev, unsigned int flags) {
  return PrimarySetFlags(dev, flags);
}

CUresult CUDAAPI cuDevicePrimaryCtxGetState(CUdevice dev, unsigned int* flags, int* active) {
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  const DeviceRt& rt = D().rt[size_t(p)];
  *flags = rt.primary_flags;
  *active = rt.primary != nullptr && rt.primary->primary_refs > 0;
  return CUDA_SUCCESS;
}

// ---- streams ----

CUresult CUDAAPI cuStreamCreate(CUstream* phStream, unsigned int Flags) {
  if (phStream == nullptr || (Flags & ~unsigned(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *phStream = NewStream(ctx, Flags, 0);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreateWithPriority(CUstream* phStream, unsigned int flags, int priority) {
  if (phStream == nullptr || (flags & ~unsigned(CU_STREAM_NON_BLOCKING)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *phStream = NewStream(ctx, flags, std::clamp(priority, -5, 0));
  return CUDA_SUCCESS;
}

static CUresult StreamDestroy(CUstream h) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(h, HandleKind::kStream) || h->legacy || h->per_thread) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // Work already queued still completes, and synchronizing the context waits for it: the
  // handle dies now, the stream stays in its context until its work is done.
  CUctx_st* ctx = h->ctx;
  D().Unregister(h);
  SweepDestroyedStreams(ctx);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream h) { return StreamDestroy(h); }
CUresult CUDAAPI cuStreamDestroy_v2(CUstream h) { return StreamDestroy(h); }
CUresult CUDAAPI cuStreamSynchronize(CUstream h) { return SyncStream(h, false); }
CUresult CUDAAPI cuStreamSynchronize_ptsz(CUstream h) { return SyncStream(h, true); }
CUresult CUDAAPI cuStreamQuery(CUstream h) { return QueryStream(h, false); }
CUresult CUDAAPI cuStreamQuery_ptsz(CUstream h) { return QueryStream(h, true); }
CUresult CUDAAPI cuStreamWaitEvent(CUstream h, CUevent e, unsigned int) {
  return WaitEvent(h, e, false);
}
CUresult CUDAAPI cuStreamWaitEvent_ptsz(CUstream h, CUevent e, unsigned int) {
  return WaitEvent(h, e, true);
}
CUresult CUDAAPI cuStreamGetCtx(CUstream h, CUcontext* pctx) {
  return StreamGetCtx(h, pctx, false);
}
CUresult CUDAAPI cuStreamGetCtx_ptsz(CUstream h, CUcontext* pctx) {
  return StreamGetCtx(h, pctx, true);
}
CUresult CUDAAPI cuStreamGetCtx_v2(CUstream h, CUcontext* pctx, CUgreenCtx* green) {
  if (green != nullptr) *green = nullptr;
  return StreamGetCtx(h, pctx, false);
}
CUresult CUDAAPI cuStreamGetCtx_v2_ptsz(CUstream h, CUcontext* pctx, CUgreenCtx* green) {
  if (green != nullptr) *green = nullptr;
  return StreamGetCtx(h, pctx, true);
}

static CUresult StreamGetFlags(CUstream h, unsigned int* flags, bool ptsz) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *flags = s->flags;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamGetFlags(CUstream h, unsigned int* f) {
  return StreamGetFlags(h, f, false);
}
CUresult CUDAAPI cuStreamGetFlags_ptsz(CUstream h, unsigned int* f) {
  return StreamGetFlags(h, f, true);
}

static CUresult StreamGetPriority(CUstream h, int* priority, bool ptsz) {
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *priority = s->priority;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamGetPriority(CUstream h, int* p) { return StreamGetPriority(h, p, false); }
CUresult CUDAAPI cuStreamGetPriority_ptsz(CUstream h, int* p) {
  return StreamGetPriority(h, p, true);
}

static CUresult StreamGetId(CUstream h, unsigned long long* id, bool ptsz) {
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *id = s->id;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamGetId(CUstream h, unsigned long long* id) {
  return StreamGetId(h, id, false);
}
CUresult CUDAAPI cuStreamGetId_ptsz(CUstream h, unsigned long long* id) {
  return StreamGetId(h, id, true);
}

// ---- events ----

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
  constexpr unsigned kMask =
      CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
  if (phEvent == nullptr || (Flags & ~kMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((Flags & CU_EVENT_INTERPROCESS) != 0 && (Flags & CU_EVENT_DISABLE_TIMING) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  auto* e = new CUevent_st{ctx, Flags};
  if ((Flags & CU_EVENT_INTERPROCESS) != 0) {
    // Its state lives in a page other processes map (cuIpcOpenEventHandle).
    e->shared_id = g_next_ipc_event++;
    const std::string name = IpcEventName(getpid(), e->shared_id);
    int fd = memfd_create(name.c_str(), MFD_CLOEXEC);
    void* page = MAP_FAILED;
    if (fd >= 0 && ftruncate(fd, off_t(sizeof(IpcEventPage))) == 0) {
      page = mmap(nullptr, sizeof(IpcEventPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    }
    if (page == MAP_FAILED) {
      if (fd >= 0) close(fd);
      delete e;
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    e->shared = static_cast<IpcEventPage*>(page);
    e->shared_fd = fd;
  }
  D().Register(e, HandleKind::kEvent);
  *phEvent = e;
  return CUDA_SUCCESS;
}

static CUresult EventDestroy(CUevent e) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kEvent)) return CUDA_ERROR_INVALID_HANDLE;
  D().Unregister(e);
  DeleteEvent(e);
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuEventDestroy(CUevent e) { return EventDestroy(e); }
CUresult CUDAAPI cuEventDestroy_v2(CUevent e) { return EventDestroy(e); }
CUresult CUDAAPI cuEventRecord(CUevent e, CUstream s) { return EventRecord(e, s, false); }
CUresult CUDAAPI cuEventRecord_ptsz(CUevent e, CUstream s) { return EventRecord(e, s, true); }
CUresult CUDAAPI cuEventRecordWithFlags(CUevent e, CUstream s, unsigned int) {
  return EventRecord(e, s, false);
}
CUresult CUDAAPI cuEventRecordWithFlags_ptsz(CUevent e, CUstream s, unsigned int) {
  return EventRecord(e, s, true);
}

CUresult CUDAAPI cuEventQuery(CUevent e) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kEvent)) return CUDA_ERROR_INVALID_HANDLE;
  int64_t t;
  return !EventTime(e, &t) || MonotonicNs() >= t ? CUDA_SUCCESS : CUDA_ERROR_NOT_READY;
}

CUresult CUDAAPI cuEventSynchronize(CUevent e) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kEvent)) return CUDA_ERROR_INVALID_HANDLE;
  int64_t t;
  if (EventTime(e, &t)) {
    int device = e->ctx->device;
    WaitUnlocked(api, t);
    TrimPoolsAtSyncLocked(device);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventElapsedTime(float* ms, CUevent s, CUevent e) {
  return ElapsedTime(ms, s, e);
}
CUresult CUDAAPI cuEventElapsedTime_v2(float* ms, CUevent s, CUevent e) {
  return ElapsedTime(ms, s, e);
}

CUresult CUDAAPI cuCtxSynchronize_v2(CUcontext ctx) {
  if (ctx == nullptr) return cuCtxSynchronize();
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(ctx, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  int64_t t = 0;
  for (CUstream_st* s : ctx->streams) t = std::max(t, s->tail_ns);
  int device = ctx->device;
  WaitUnlocked(api, t);
  TrimPoolsAtSyncLocked(device);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetSharedMemConfig(CUsharedconfig* config) {
  if (config == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  *config = CU_SHARED_MEM_CONFIG_FOUR_BYTE_BANK_SIZE;
  return CUDA_SUCCESS;
}

// Bank size is fixed on every modelled architecture: accepted, no effect.
CUresult CUDAAPI cuCtxSetSharedMemConfig(CUsharedconfig config) {
  if (EnumValue(config) < 0 || EnumValue(config) > 2) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  return RequireContext(&ctx);
}

CUresult CUDAAPI cuCtxResetPersistingL2Cache() {
  ApiLock api;
  CUctx_st* ctx;
  return RequireContext(&ctx);
}

// Records `e` after all work of every stream of `ctx` queued so far (cuCtxRecordEvent).
CUresult CUDAAPI cuCtxRecordEvent(CUcontext ctx, CUevent e) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr || !D().Live(ctx, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!D().Live(e, HandleKind::kEvent) || e->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  int64_t t = MonotonicNs();
  for (CUstream_st* s : ctx->streams) t = std::max(t, s->tail_ns);
  SetEventTime(e, t);
  return CUDA_SUCCESS;
}

// Every stream of `ctx` waits for `e`.
CUresult CUDAAPI cuCtxWaitEvent(CUcontext ctx, CUevent e) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) ctx = CurrentContext();
  if (ctx == nullptr || !D().Live(ctx, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  if (!D().Live(e, HandleKind::kEvent)) return CUDA_ERROR_INVALID_HANDLE;
  int64_t t;
  if (EventTime(e, &t)) {
    for (CUstream_st* s : ctx->streams) s->tail_ns = std::max(s->tail_ns, t);
  }
  return CUDA_SUCCESS;
}

// ---- peer access (every device of the model can reach every other) ----

CUresult CUDAAPI cuCtxEnablePeerAccess(CUcontext peer, unsigned int flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (!D().Live(peer, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  if (peer->device == ctx->device) return CUDA_ERROR_INVALID_DEVICE;
  if (!ctx->peers.insert(peer->id).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxDisablePeerAccess(CUcontext peer) {
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (!D().Live(peer, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  return ctx->peers.erase(peer->id) == 1 ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

// ---- stream attributes, device, callbacks, capture mode ----

static CUresult StreamAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* value,
                                bool ptsz) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *value = CUstreamAttrValue{};
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      value->priority = s->priority;
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN: {
      auto it = s->attributes.find(int(attr));
      if (it != s->attributes.end()) *value = it->second;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

static CUresult SetStreamAttribute(CUstream h, CUstreamAttrID attr, const CUstreamAttrValue* value,
                                   bool ptsz) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  switch (attr) {
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
      s->priority = std::clamp(value->priority, -5, 0);
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
      if (int(value->syncPolicy) < 1 || int(value->syncPolicy) > 4) return CUDA_ERROR_INVALID_VALUE;
      s->attributes[int(attr)] = *value;
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
      if (value->accessPolicyWindow.hitRatio < 0 || value->accessPolicyWindow.hitRatio > 1) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      s->attributes[int(attr)] = *value;
      return CUDA_SUCCESS;
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
      s->attributes[int(attr)] = *value;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuStreamGetAttribute(CUstream h, CUstreamAttrID attr, CUstreamAttrValue* value) {
  return StreamAttribute(h, attr, value, false);
}
CUresult CUDAAPI cuStreamGetAttribute_ptsz(CUstream h, CUstreamAttrID attr,
                                           CUstreamAttrValue* value) {
  return StreamAttribute(h, attr, value, true);
}
CUresult CUDAAPI cuStreamSetAttribute(CUstream h, CUstreamAttrID attr,
                                      const CUstreamAttrValue* value) {
  return SetStreamAttribute(h, attr, value, false);
}
CUresult CUDAAPI cuStreamSetAttribute_ptsz(CUstream h, CUstreamAttrID attr,
                                           const CUstreamAttrValue* value) {
  return SetStreamAttribute(h, attr, value, true);
}

static CUresult CopyStreamAttributes(CUstream dst, CUstream src, bool ptsz) {
  ApiLock api;
  CUstream_st *d, *s;
  if (CUresult r = ResolveStream(dst, ptsz, &d); r != CUDA_SUCCESS) return r;
  if (CUresult r = ResolveStream(src, ptsz, &s); r != CUDA_SUCCESS) return r;
  d->attributes = s->attributes;
  d->priority = s->priority;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamCopyAttributes(CUstream dst, CUstream src) {
  return CopyStreamAttributes(dst, src, false);
}
CUresult CUDAAPI cuStreamCopyAttributes_ptsz(CUstream dst, CUstream src) {
  return CopyStreamAttributes(dst, src, true);
}

static CUresult StreamGetDevice(CUstream h, CUdevice* device, bool ptsz) {
  if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
  *device = s->ctx->ordinal;
  return CUDA_SUCCESS;
}
CUresult CUDAAPI cuStreamGetDevice(CUstream h, CUdevice* device) {
  return StreamGetDevice(h, device, false);
}
CUresult CUDAAPI cuStreamGetDevice_ptsz(CUstream h, CUdevice* device) {
  return StreamGetDevice(h, device, true);
}

namespace {

struct StreamCallback {
  CUstreamCallback fn;
  CUstream stream;
  void* data;
};

void RunStreamCallback(void* arg) {
  std::unique_ptr<StreamCallback> c(static_cast<StreamCallback*>(arg));
  c->fn(c->stream, CUDA_SUCCESS, c->data);
}

}  // namespace

// A callback runs as a host function does, when the stream reaches it; it may not be
// captured into a graph.
static CUresult AddCallback(CUstream h, CUstreamCallback fn, void* data, unsigned flags,
                            bool ptsz) {
  if (fn == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  {
    ApiLock api;
    CUstream_st* s;
    if (CUresult r = ResolveStream(h, ptsz, &s); r != CUDA_SUCCESS) return r;
    if (s->capture != nullptr) {
      s->capture_invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  auto* c = new StreamCallback{fn, h, data};
  CUresult r = ptsz ? cuLaunchHostFunc_ptsz(h, &RunStreamCallback, c)
                    : cuLaunchHostFunc(h, &RunStreamCallback, c);
  if (r != CUDA_SUCCESS) delete c;
  return r;
}
CUresult CUDAAPI cuStreamAddCallback(CUstream h, CUstreamCallback fn, void* data,
                                     unsigned int flags) {
  return AddCallback(h, fn, data, flags, false);
}
CUresult CUDAAPI cuStreamAddCallback_ptsz(CUstream h, CUstreamCallback fn, void* data,
                                          unsigned int flags) {
  return AddCallback(h, fn, data, flags, true);
}

// The calling thread's capture interaction mode (the model records it; it does not forbid
// calls during another thread's capture).
CUresult CUDAAPI cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  if (mode == nullptr || EnumValue(*mode) < 0 || EnumValue(*mode) > 2)
    return CUDA_ERROR_INVALID_VALUE;
  CUstreamCaptureMode previous = t_capture_mode;
  t_capture_mode = *mode;
  *mode = previous;
  return CUDA_SUCCESS;
}

// ---- IPC events ----

namespace {

constexpr uint32_t kIpcEventMagic = 0x45494d48;  // "HMIE"

struct IpcEventHandle {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  uint32_t pad;
  uint64_t id;
};
static_assert(sizeof(IpcEventHandle) <= CU_IPC_HANDLE_SIZE);

}  // namespace

CUresult CUDAAPI cuIpcGetEventHandle(CUipcEventHandle* pHandle, CUevent e) {
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kEvent) || e->shared == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  IpcEventHandle h{kIpcEventMagic, getpid(), e->shared_fd, 0, e->shared_id};
  std::memset(pHandle, 0, sizeof(*pHandle));
  std::memcpy(pHandle->reserved, &h, sizeof(h));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenEventHandle(CUevent* phEvent, CUipcEventHandle handle) {
  if (phEvent == nullptr) return CUDA_ERROR_INVALID_VALUE;
  IpcEventHandle h;
  std::memcpy(&h, handle.reserved, sizeof(h));
  if (h.magic != kIpcEventMagic || h.pid <= 0 || h.fd < 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;
  const std::string fd_path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  char link[256];
  ssize_t n = readlink(fd_path.c_str(), link, sizeof(link) - 1);
  const std::string expected = "/memfd:" + IpcEventName(h.pid, h.id);
  if (n <= 0 || std::string_view(link, size_t(n)).substr(0, expected.size()) != expected) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  int fd = open(fd_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  void* page = mmap(nullptr, sizeof(IpcEventPage), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (page == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  auto* e = new CUevent_st{ctx, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS};
  e->shared = static_cast<IpcEventPage*>(page);
  e->shared_fd = fd;
  D().Register(e, HandleKind::kEvent);
  *phEvent = e;
  return CUDA_SUCCESS;
}

// ---- profiler control: nothing to profile, accepted ----

CUresult CUDAAPI cuProfilerInitialize(const char*, const char*, CUoutput_mode mode) {
  if (EnumValue(mode) < 0 || EnumValue(mode) > 1) return CUDA_ERROR_INVALID_VALUE;
  return RequireInit();
}
CUresult CUDAAPI cuProfilerStart() {
  ApiLock api;
  CUctx_st* ctx;
  return RequireContext(&ctx);
}
CUresult CUDAAPI cuProfilerStop() {
  ApiLock api;
  CUctx_st* ctx;
  return RequireContext(&ctx);
}

}  // extern "C"
