// Every allocation family of the driver API, copies and sets, memory pools, virtual memory
// management, arrays, pinned host memory and pointer queries.
//
// Device memory is host memory at the same address (an anonymous MAP_NORESERVE mapping, so
// untouched pages cost nothing), so copies move real bytes. What a device has in use lives
// in the shared state: each allocation charges it, rounded the way the driver rounds:
// large allocations to the allocation granularity; small ones share granule pages per
// context and device.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/strings.h"
#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

constexpr size_t kSmallAlign = 512;

size_t PageSize() {
  static const size_t page = size_t(sysconf(_SC_PAGESIZE));
  return page;
}

// Freed backings are kept for reuse, as a driver keeps freed memory mapped: an mmap and a
// munmap cost microseconds, which would drown whatever a caller measures around an
// allocation. Like a driver's, reused memory is not cleared.
constexpr size_t kCachedBackings = 16;
constexpr size_t kCachedBytes = 64ull << 20;

struct BackingCache {
  std::mutex mu;
  std::vector<std::pair<void*, size_t>> free;  // most recently freed last
};

BackingCache& Backings() {
  static auto* cache = new BackingCache();  // never destroyed: frees may come at exit
  return *cache;
}

void* MapBacking(size_t bytes, bool low32 = false) {
  size_t n = RoundUp(std::max<size_t>(bytes, 1), PageSize());
  if (!low32) {
    BackingCache& c = Backings();
    std::lock_guard<std::mutex> l(c.mu);
    for (size_t i = c.free.size(); i-- > 0;) {
      if (c.free[i].second == n) {
        void* p = c.free[i].first;
        c.free.erase(c.free.begin() + long(i));
        return p;
      }
    }
  }
  int flags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | (low32 ? MAP_32BIT : 0);
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, flags, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void UnmapBacking(uintptr_t base, size_t bytes) {
  if (bytes == 0) return;
  size_t n = RoundUp(bytes, PageSize());
  if (n <= kCachedBytes && base >= (1ull << 32)) {  // low (32-bit) mappings are not reused
    BackingCache& c = Backings();
    std::lock_guard<std::mutex> l(c.mu);
    if (c.free.size() < kCachedBackings) {
      c.free.emplace_back(reinterpret_cast<void*>(base), n);
      return;
    }
  }
  munmap(reinterpret_cast<void*>(base), n);
}

// ---- the file behind an exportable pool ----
//
// A pool created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR keeps its allocations' pages
// in one memfd: a header, a table of the allocations exported so far, then the pages, each
// allocation at an offset of its own (offsets are not reused; a freed range is punched out,
// so the file stays sparse). The pool's shareable handle is a duplicate of that descriptor;
// an importer maps the same pages from it and checks export data against the table.

constexpr uint32_t kPoolFileMagic = 0x4c4f5048;  // "HPOL"
constexpr uint32_t kPoolFileVersion = 1;
constexpr char kPoolMemfdName[] = "hami-sim-pool";
constexpr uint32_t kPoolExportSlots = 65536;

// One exported allocation. The creator writes offset and size, then the id (release); an
// importer reads the id first and again last. Ids are never reused within a pool.
struct PoolFileEntry {
  std::atomic<uint64_t> id;  // 0: free
  std::atomic<uint64_t> offset;
  std::atomic<uint64_t> size;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free);

struct PoolFileHeader {
  uint32_t magic;  // written last by the creator
  uint32_t version;
  int32_t device;  // physical
  int32_t creator_pid;
  uint64_t nonce;  // names the pool in its pointers' export data
  uint64_t slots;
  PoolFileEntry entries[kPoolExportSlots];
};

constexpr uint64_t kPoolDataStart = RoundUp(sizeof(PoolFileHeader), 2ull << 20);

}  // namespace

struct PoolFile {
  int fd = -1;
  PoolFileHeader* header = nullptr;  // read-write in the creator, read-only in an importer
  // The creator's bookkeeping.
  uint64_t next_offset = kPoolDataStart;
  uint64_t next_entry_id = 1;
  uint32_t slots_used = 0;
  std::vector<uint32_t> free_slots;

  PoolFile() = default;
  PoolFile(const PoolFile&) = delete;
  PoolFile& operator=(const PoolFile&) = delete;
  ~PoolFile() {
    if (header != nullptr) munmap(header, sizeof(PoolFileHeader));
    if (fd >= 0) close(fd);
  }
};

namespace {

// Export data of a pool allocation (CUmemPoolPtrExportData).
constexpr uint32_t kPoolPtrMagic = 0x50504d48;  // "HMPP"

struct PoolPtrExport {
  uint32_t magic;
  uint32_t slot;
  uint64_t nonce;
  uint64_t entry_id;
  uint64_t offset;
  uint64_t size;
};
static_assert(sizeof(PoolPtrExport) <= sizeof(CUmemPoolPtrExportData));

uint64_t PoolNonce() {
  uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) != ssize_t(sizeof v) || v == 0) {
    v = (uint64_t(getpid()) << 32) ^ uint64_t(MonotonicNs()) ^ 1;
  }
  return v;
}

// The file of a new exportable pool on `physical`; null when it cannot be made.
std::shared_ptr<PoolFile> CreatePoolFile(int physical) {
  auto f = std::make_shared<PoolFile>();
  f->fd = memfd_create(kPoolMemfdName, MFD_CLOEXEC);
  if (f->fd < 0 || ftruncate(f->fd, off_t(kPoolDataStart)) != 0) return nullptr;
  void* p = mmap(nullptr, sizeof(PoolFileHeader), PROT_READ | PROT_WRITE, MAP_SHARED, f->fd, 0);
  if (p == MAP_FAILED) return nullptr;
  f->header = static_cast<PoolFileHeader*>(p);
  f->header->version = kPoolFileVersion;
  f->header->device = physical;
  f->header->creator_pid = getpid();
  f->header->nonce = PoolNonce();
  f->header->slots = kPoolExportSlots;
  f->header->magic = kPoolFileMagic;
  return f;
}

// The pool file a descriptor names, for an importer; null when it is not one (another
// memfd, a file, a pipe, a descriptor not open for writing, a closed number).
std::shared_ptr<PoolFile> OpenPoolFile(int fd) {
  if (fd < 0) return nullptr;
  char link[256];
  ssize_t n = readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1);
  const std::string name = "/memfd:" + std::string(kPoolMemfdName);
  std::string_view seen(link, n > 0 ? size_t(n) : 0);
  if (seen != name && seen != name + " (deleted)") return nullptr;
  struct stat st;
  int mode = fcntl(fd, F_GETFL);
  if (fstat(fd, &st) != 0 || uint64_t(st.st_size) < kPoolDataStart || mode < 0 ||
      (mode & O_ACCMODE) != O_RDWR) {
    return nullptr;
  }
  auto f = std::make_shared<PoolFile>();
  f->fd = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (f->fd < 0) return nullptr;
  void* p = mmap(nullptr, sizeof(PoolFileHeader), PROT_READ, MAP_SHARED, f->fd, 0);
  if (p == MAP_FAILED) return nullptr;
  f->header = static_cast<PoolFileHeader*>(p);
  const PoolFileHeader& h = *f->header;
  if (h.magic != kPoolFileMagic || h.version != kPoolFileVersion || h.slots != kPoolExportSlots ||
      h.device < 0 || size_t(h.device) >= D().devices.size()) {
    return nullptr;
  }
  return f;
}

// Maps `bytes` of new pages of the creator's pool file `f`; *offset is where they start.
void* MapPoolPages(PoolFile& f, size_t bytes, uint64_t* offset) {
  uint64_t n = RoundUp(std::max<size_t>(bytes, 1), PageSize());
  if (ftruncate(f.fd, off_t(f.next_offset + n)) != 0) return nullptr;
  void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, f.fd,
                 off_t(f.next_offset));
  if (p == MAP_FAILED) return nullptr;
  *offset = f.next_offset;
  f.next_offset += n;
  return p;
}

// Lists the creator's allocation `a` in its pool file's table of exports (once); false when
// the table is full.
bool PublishExport(Allocation& a) {
  if (a.export_slot >= 0) return true;
  PoolFile& f = *a.pool_file;
  uint32_t slot;
  if (!f.free_slots.empty()) {
    slot = f.free_slots.back();
    f.free_slots.pop_back();
  } else if (f.slots_used < kPoolExportSlots) {
    slot = f.slots_used++;
  } else {
    return false;
  }
  PoolFileEntry& e = f.header->entries[slot];
  e.offset.store(a.pool_offset, std::memory_order_relaxed);
  e.size.store(a.size, std::memory_order_relaxed);
  e.id.store(f.next_entry_id++, std::memory_order_release);
  a.export_slot = int(slot);
  return true;
}

void WithdrawExport(Allocation& a) {
  if (a.export_slot < 0) return;
  a.pool_file->header->entries[a.export_slot].id.store(0, std::memory_order_release);
  a.pool_file->free_slots.push_back(uint32_t(a.export_slot));
  a.export_slot = -1;
}

// True when `x` names an allocation its creator has exported from the pool of `f` and not
// freed.
bool ExportIsLive(const PoolFile& f, const PoolPtrExport& x) {
  if (x.magic != kPoolPtrMagic || x.nonce != f.header->nonce || x.slot >= kPoolExportSlots ||
      x.entry_id == 0 || x.size == 0 || x.offset < kPoolDataStart || x.offset % PageSize() != 0) {
    return false;
  }
  const PoolFileEntry& e = f.header->entries[x.slot];
  if (e.id.load(std::memory_order_acquire) != x.entry_id) return false;
  bool same = e.offset.load(std::memory_order_relaxed) == x.offset &&
              e.size.load(std::memory_order_relaxed) == x.size;
  std::atomic_thread_fence(std::memory_order_acquire);
  return same && e.id.load(std::memory_order_relaxed) == x.entry_id;
}

bool IsSmall(uint64_t bytes) { return bytes <= D().Granularity() / 2; }

// Charges `bytes` of device memory for an allocation of `ctx`, small or large.
CUresult ChargeFor(CUctx_st* ctx, int device, uint64_t bytes, uint64_t* charge, bool* small) {
  Driver& d = D();
  uint64_t g = d.Granularity();
  if (ctx != nullptr && IsSmall(bytes)) {
    SmallPages& sp = ctx->small[device];
    uint64_t new_bytes = sp.bytes + RoundUp(bytes, kSmallAlign);
    uint64_t pages = RoundUp(new_bytes, g) / g;
    if (pages > sp.pages) {
      if (CUresult r = d.Charge(device, (pages - sp.pages) * g); r != CUDA_SUCCESS) return r;
    }
    sp.bytes = new_bytes;
    sp.pages = std::max(sp.pages, pages);
    *charge = RoundUp(bytes, kSmallAlign);
    *small = true;
    return CUDA_SUCCESS;
  }
  *charge = RoundUp(bytes, g);
  *small = false;
  return d.Charge(device, *charge);
}

void UnchargeFor(CUctx_st* ctx, int device, uint64_t charge, bool small) {
  Driver& d = D();
  if (!small) {
    d.Uncharge(device, charge);
    return;
  }
  uint64_t g = d.Granularity();
  SmallPages& sp = ctx->small[device];
  sp.bytes -= std::min(sp.bytes, charge);
  uint64_t pages = RoundUp(sp.bytes, g) / g;
  if (pages < sp.pages) {
    d.Uncharge(device, (sp.pages - pages) * g);
    sp.pages = pages;
  }
}

// Allocates `bytes` of device (or managed) memory in `ctx`.
CUresult AllocDevice(CUctx_st* ctx, size_t bytes, AllocKind kind, CUdeviceptr* out,
                     bool low32 = false) {
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  Allocation a;
  a.kind = kind;
  a.device = ctx->device;
  a.ctx = ctx;
  a.size = bytes;
  if (CUresult r = ChargeFor(ctx, ctx->device, bytes, &a.charge, &a.small); r != CUDA_SUCCESS) {
    return r;
  }
  void* p = MapBacking(bytes, low32);
  if (p == nullptr) {
    UnchargeFor(ctx, ctx->device, a.charge, a.small);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a.base = reinterpret_cast<uintptr_t>(p);
  a.mapped_size = bytes;
  D().allocations[a.base] = a;
  *out = CUdeviceptr(a.base);
  return CUDA_SUCCESS;
}

// Records `size` bytes of another process's memory, mapped at `p` (`mapped` bytes), as an
// allocation of `ctx`: addressable here, charged only to the process that created it.
Allocation& RecordImport(void* p, size_t size, size_t mapped, AllocKind kind, int device,
                         CUctx_st* ctx) {
  Allocation& a = D().allocations[reinterpret_cast<uintptr_t>(p)];
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = size;
  a.mapped_size = mapped;
  a.kind = kind;
  a.device = device;
  a.ctx = ctx;
  return a;
}

void ReleaseAllocation(std::map<uintptr_t, Allocation>::iterator it) {
  Driver& d = D();
  Allocation& a = it->second;
  switch (a.kind) {
    case AllocKind::kPool:
      if (a.pool != nullptr && d.Live(a.pool, HandleKind::kPool)) {
        a.pool->used -= std::min(a.pool->used, uint64_t(a.size));
      }
      break;
    case AllocKind::kHost:
    case AllocKind::kRegistered:
    case AllocKind::kGraph:
    case AllocKind::kIpcOpened:
    case AllocKind::kPoolImported:
      break;
    default:
      UnchargeFor(a.ctx, a.device, a.charge, a.small);
  }
  if (a.pool_file != nullptr) {
    size_t len = RoundUp(a.mapped_size, PageSize());
    if (a.kind == AllocKind::kPool) {
      // The creator's free releases the pages: an importer that still maps them (which the
      // driver's documentation forbids) keeps a valid mapping that now reads zeros.
      WithdrawExport(a);
      madvise(reinterpret_cast<void*>(a.base), len, MADV_REMOVE);
    }
    munmap(reinterpret_cast<void*>(a.base), len);
  } else if (a.ipc_fd >= 0 || a.kind == AllocKind::kIpcOpened) {
    // Shared pages are not kept for reuse: the mapping goes, with the exporter's memfd.
    munmap(reinterpret_cast<void*>(a.base), RoundUp(a.mapped_size, PageSize()));
    if (a.ipc_fd >= 0) close(a.ipc_fd);
  } else if (a.kind != AllocKind::kGraph) {
    UnmapBacking(a.base, a.mapped_size);
  }
  d.allocations.erase(it);
}

CUresult MemAlloc(CUdeviceptr* dptr, size_t bytes, bool low32) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  return AllocDevice(ctx, bytes, AllocKind::kDevice, dptr, low32);
}

CUresult MemFree(CUdeviceptr dptr) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (dptr == 0) return CUDA_SUCCESS;
  CUctx_st* ctx = CurrentContext();
  // Freeing device memory waits for the device, as the driver's cuMemFree does.
  if (ctx != nullptr && D().Live(ctx, HandleKind::kContext)) WaitUnlocked(api, LegacyTail(ctx));
  return FreeLocked(uintptr_t(dptr), false);
}

CUresult MemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  const DeviceSpec& s = D().spec(ctx->device);
  // A real driver frees a dead process's memory at once; here the first query after the
  // death does.
  D().state->SweepDead();
  uint64_t used = D().state->UsedBytes(ctx->device);
  uint64_t usable = s.usable_bytes();
  if (free_bytes != nullptr) *free_bytes = used >= usable ? 0 : usable - used;
  if (total_bytes != nullptr) *total_bytes = usable;
  return CUDA_SUCCESS;
}

// Waits as a synchronous copy does: for all prior work of the current context's legacy
// stream (or the per-thread stream for the _ptds variants).
CUresult SyncForCopy(ApiLock& api, bool ptds) {
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (ptds) {
    CUstream_st* s;
    if (CUresult r = ResolveStream(nullptr, true, &s); r != CUDA_SUCCESS) return r;
    WaitUnlocked(api, StreamTail(s));
  } else {
    WaitUnlocked(api, LegacyTail(ctx));
  }
  return RequireContext(&ctx);
}

// True when `p` lies in memory the driver handed out: an allocation or a reserved range.
bool InDeviceAddressSpace(uintptr_t p) {
  Driver& d = D();
  if (d.FindAllocation(p, 1) != nullptr) return true;
  auto it = d.reservations.upper_bound(p);
  if (it == d.reservations.begin()) return false;
  --it;
  return p - it->second.base < it->second.size;
}

// Where a 3D copy's side lives; validates the whole range it touches.
CUresult CopySide(Driver::Access access, CUmemorytype type, const void* host, CUdeviceptr device,
                  CUarray array, size_t x, size_t y, size_t z, size_t pitch, size_t height,
                  size_t width, size_t rows, size_t depth, uint8_t** base, size_t* out_pitch,
                  size_t* out_height) {
  Driver& d = D();
  if (type == CU_MEMORYTYPE_ARRAY) {
    if (!d.Live(array, HandleKind::kArray)) return CUDA_ERROR_INVALID_HANDLE;
    pitch = array->desc.Width * array->element_bytes;
    height = std::max<size_t>(array->desc.Height, 1);
    size_t adepth = std::max<size_t>(array->desc.Depth, 1);
    if (x + width > pitch || y + rows > height || z + depth > adepth) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    *base = static_cast<uint8_t*>(array->data);
  } else {
    uintptr_t p;
    if (type == CU_MEMORYTYPE_HOST) {
      p = reinterpret_cast<uintptr_t>(host);
    } else if (type == CU_MEMORYTYPE_DEVICE || type == CU_MEMORYTYPE_UNIFIED) {
      p = uintptr_t(device);
    } else {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (p == 0) return CUDA_ERROR_INVALID_VALUE;
    if (pitch == 0) pitch = x + width;
    if (height == 0) height = y + rows;
    if (x + width > pitch) return CUDA_ERROR_INVALID_VALUE;
    // A unified pointer the driver knows (an allocation or reserved address space) is
    // held to its bounds as a device pointer is; any other one is pageable host memory.
    if (type == CU_MEMORYTYPE_DEVICE ||
        (type == CU_MEMORYTYPE_UNIFIED && InDeviceAddressSpace(p))) {
      size_t span = (z + depth - 1) * pitch * height + (y + rows - 1) * pitch + x + width;
      if (!d.DeviceAccessible(p, span, access)) return CUDA_ERROR_INVALID_VALUE;
    }
    *base = reinterpret_cast<uint8_t*>(p);
  }
  *out_pitch = pitch;
  *out_height = height;
  return CUDA_SUCCESS;
}

CUDA_MEMCPY3D From2D(const CUDA_MEMCPY2D& c) {
  CUDA_MEMCPY3D p{};
  p.srcXInBytes = c.srcXInBytes;
  p.srcY = c.srcY;
  p.srcMemoryType = c.srcMemoryType;
  p.srcHost = c.srcHost;
  p.srcDevice = c.srcDevice;
  p.srcArray = c.srcArray;
  p.srcPitch = c.srcPitch;
  p.dstXInBytes = c.dstXInBytes;
  p.dstY = c.dstY;
  p.dstMemoryType = c.dstMemoryType;
  p.dstHost = c.dstHost;
  p.dstDevice = c.dstDevice;
  p.dstArray = c.dstArray;
  p.dstPitch = c.dstPitch;
  p.WidthInBytes = c.WidthInBytes;
  p.Height = c.Height;
  p.Depth = 1;
  return p;
}

enum class Sync { kSync, kSyncPtds, kAsync, kAsyncPtsz };

// The start of a copy or set through the API: a synchronous one waits as SyncForCopy does;
// an asynchronous one resolves its stream, and *capturing is that stream when it is being
// captured (the operation then becomes a graph node instead of happening now).
CUresult BeginMemoryOp(ApiLock& api, Sync sync, CUstream stream, CUstream_st** capturing) {
  *capturing = nullptr;
  if (sync == Sync::kSync || sync == Sync::kSyncPtds) {
    return SyncForCopy(api, sync == Sync::kSyncPtds);
  }
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, sync == Sync::kAsyncPtsz, &s); r != CUDA_SUCCESS) {
    return r;
  }
  if (s->capture != nullptr) *capturing = s;
  return CUDA_SUCCESS;
}

CUresult ApiCopy3D(const CUDA_MEMCPY3D* p, Sync sync, CUstream stream) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* capturing;
  if (CUresult r = BeginMemoryOp(api, sync, stream, &capturing); r != CUDA_SUCCESS) return r;
  if (capturing != nullptr) {
    AppendCaptureNode(capturing, NodeKind::kMemcpy)->copy = *p;
    return CUDA_SUCCESS;
  }
  return Copy3DLocked(*p);
}

CUresult ApiCopy(uintptr_t dst, uintptr_t src, size_t bytes, CUmemorytype dst_type,
                 CUmemorytype src_type, Sync sync, CUstream stream) {
  CUDA_MEMCPY3D p{};
  p.srcMemoryType = src_type;
  p.srcHost = reinterpret_cast<const void*>(src);
  p.srcDevice = CUdeviceptr(src);
  p.dstMemoryType = dst_type;
  p.dstHost = reinterpret_cast<void*>(dst);
  p.dstDevice = CUdeviceptr(dst);
  p.WidthInBytes = bytes;
  p.Height = 1;
  p.Depth = 1;
  if (bytes == 0) return CUDA_SUCCESS;
  return ApiCopy3D(&p, sync, stream);
}

CUresult ApiCopyArray(CUarray array, size_t offset, uintptr_t other, size_t bytes,
                      CUmemorytype other_type, bool to_array, Sync sync, CUstream stream) {
  {
    ApiLock api;
    if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
    if (!D().Live(array, HandleKind::kArray)) return CUDA_ERROR_INVALID_HANDLE;
    if (offset > array->bytes || bytes > array->bytes - offset) return CUDA_ERROR_INVALID_VALUE;
  }
  // Linear view of the array: one row of its whole size.
  CUDA_MEMCPY3D q{};
  q.WidthInBytes = bytes;
  q.Height = 1;
  q.Depth = 1;
  auto set_array = [&](bool dst) {
    if (dst) {
      q.dstMemoryType = CU_MEMORYTYPE_HOST;
      q.dstHost = static_cast<uint8_t*>(array->data) + offset;
    } else {
      q.srcMemoryType = CU_MEMORYTYPE_HOST;
      q.srcHost = static_cast<const uint8_t*>(array->data) + offset;
    }
  };
  auto set_other = [&](bool dst) {
    if (dst) {
      q.dstMemoryType = other_type;
      q.dstHost = reinterpret_cast<void*>(other);
      q.dstDevice = CUdeviceptr(other);
    } else {
      q.srcMemoryType = other_type;
      q.srcHost = reinterpret_cast<const void*>(other);
      q.srcDevice = CUdeviceptr(other);
    }
  };
  set_array(to_array);
  set_other(!to_array);
  return ApiCopy3D(&q, sync, stream);
}

CUresult ApiMemset(uintptr_t dst, size_t pitch, unsigned value, unsigned elem, size_t width,
                   size_t height, Sync sync, CUstream stream) {
  ApiLock api;
  CUstream_st* capturing;
  if (CUresult r = BeginMemoryOp(api, sync, stream, &capturing); r != CUDA_SUCCESS) return r;
  if (capturing != nullptr) {
    CUDA_MEMSET_NODE_PARAMS& m = AppendCaptureNode(capturing, NodeKind::kMemset)->memset;
    m.dst = CUdeviceptr(dst);
    m.pitch = pitch;
    m.value = value;
    m.elementSize = elem;
    m.width = width;
    m.height = height;
    return CUDA_SUCCESS;
  }
  return MemsetLocked(dst, pitch, value, elem, width, height);
}

CUmemPoolHandle_st* NewPool(int device, bool is_default) {
  auto* p = new CUmemPoolHandle_st{};
  p->device = device;
  p->is_default = is_default;
  D().Register(p, HandleKind::kPool);
  return p;
}

CUmemPoolHandle_st* CurrentPool(int device) {
  DeviceRt& rt = D().rt[size_t(device)];
  if (rt.default_pool == nullptr) rt.default_pool = NewPool(device, true);
  if (rt.current_pool == nullptr || !D().Live(rt.current_pool, HandleKind::kPool)) {
    rt.current_pool = rt.default_pool;
  }
  return rt.current_pool;
}

void TrimPool(CUmemPoolHandle_st* pool, uint64_t keep) {
  keep = std::max(keep, RoundUp(pool->used, D().Granularity()));
  if (pool->reserved > keep) {
    D().Uncharge(pool->device, pool->reserved - keep);
    pool->reserved = keep;
  }
}

CUresult AllocAsync(CUdeviceptr* dptr, size_t bytes, CUmemPoolHandle_st* pool, CUstream stream,
                    bool ptsz) {
  if (dptr == nullptr || bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (pool != nullptr && (!D().Live(pool, HandleKind::kPool) || pool->imported)) {
    return CUDA_ERROR_INVALID_VALUE;  // an imported pool serves only imported pointers
  }
  if (pool == nullptr) pool = CurrentPool(s->ctx->device);
  if (s->capture != nullptr) {
    // Becomes a memory-allocation node: the address is fixed now, the memory is charged
    // when the graph first runs.
    auto ga = std::make_shared<GraphAlloc>();
    void* p = MapBacking(bytes);
    if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
    ga->base = reinterpret_cast<uintptr_t>(p);
    ga->size = bytes;
    ga->device = pool->device;
    ga->charge = RoundUp(bytes, D().Granularity());
    Allocation a;
    a.base = ga->base;
    a.size = bytes;
    a.mapped_size = bytes;
    a.kind = AllocKind::kGraph;
    a.device = ga->device;
    a.ctx = s->ctx;
    a.graph_alloc = ga.get();
    D().allocations[a.base] = a;
    D().graph_allocs.push_back(ga);
    CUgraphNode_st* n = AppendCaptureNode(s, NodeKind::kMemAlloc);
    n->alloc = ga;
    *dptr = CUdeviceptr(ga->base);
    return CUDA_SUCCESS;
  }
  return AllocFromPoolLocked(pool, s->ctx, bytes, dptr);
}

CUresult FreeAsync(CUdeviceptr dptr, CUstream stream, bool ptsz) {
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != nullptr) {
    Allocation* a = D().FindAllocation(uintptr_t(dptr), 1);
    if (a == nullptr || a->base != uintptr_t(dptr)) return CUDA_ERROR_INVALID_VALUE;
    CUgraphNode_st* n = AppendCaptureNode(s, NodeKind::kMemFree);
    n->free_ptr = dptr;
    return CUDA_SUCCESS;
  }
  return FreeLocked(uintptr_t(dptr), true);
}

// Attaching managed memory to a stream changes who may touch it on a real GPU; the model
// only checks the request.
CUresult AttachMem(CUstream stream, CUdeviceptr dptr, size_t length, unsigned flags, bool ptsz) {
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST &&
      flags != CU_MEM_ATTACH_SINGLE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  Allocation* a = D().FindAllocation(uintptr_t(dptr), std::max<size_t>(length, 1));
  if (a == nullptr || a->kind != AllocKind::kManaged) return CUDA_ERROR_INVALID_VALUE;
  if (length != 0 && (uintptr_t(dptr) != a->base || length != a->size)) {
    return CUDA_ERROR_INVALID_VALUE;  // the whole allocation, or 0 for it
  }
  return CUDA_SUCCESS;
}

// ---- virtual memory management ----

// The name of a VMM allocation's memfd: it says where the pages live, so that a process
// importing the descriptor (cuMemImportFromShareableHandle) knows the allocation's device
// and can tell a descriptor of the simulated driver from any other file.
constexpr std::string_view kVmmMemfdPrefix = "hami-sim-vmm-";

std::string VmmMemfdName(int physical) {
  return std::string(kVmmMemfdPrefix) +
         (physical == kHostPhysical ? std::string("host") : "gpu" + std::to_string(physical));
}

}  // namespace

// The handle types an allocation may request: POSIX file descriptors are modelled (a memfd);
// the simulated machine has no NVLink fabric (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED
// is 0) and is not Windows, so those types answer CUDA_ERROR_NOT_SUPPORTED, as the driver
// answers a type the device lacks.
CUresult CheckHandleTypes(unsigned types) {
  if ((types & ~unsigned(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                         CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return (types & ~unsigned(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)) != 0
             ? CUDA_ERROR_NOT_SUPPORTED
             : CUDA_SUCCESS;
}

namespace {

// A host NUMA node of the simulated machine: node 0 (always there, NUMA or not), one a
// simulated device names as its own, or one this machine has.
bool HostNumaNodeExists(int id) {
  if (id == 0) return true;
  if (id < 0) return false;
  for (const DeviceSpec& s : D().devices) {
    if (s.numa_node == id) return true;
  }
  struct stat st;
  return stat(("/sys/devices/system/node/node" + std::to_string(id)).c_str(), &st) == 0;
}

// Where a VMM allocation of `loc` lives: *physical is a device's physical index or
// kHostPhysical for the host locations.
CUresult CheckLocation(const CUmemLocation& loc, int* physical) {
  switch (loc.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
      return PhysicalDevice(loc.id, physical);
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
      *physical = kHostPhysical;
      return CUDA_SUCCESS;
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
      if (!HostNumaNodeExists(loc.id)) return CUDA_ERROR_INVALID_VALUE;
      *physical = kHostPhysical;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CheckAllocProp(const CUmemAllocationProp* prop, int* physical) {
  if (prop == nullptr || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckHandleTypes(unsigned(prop->requestedHandleTypes)); r != CUDA_SUCCESS) {
    return r;
  }
  return CheckLocation(prop->location, physical);
}

void DropPhysicalIfUnused(CUmemGenericAllocationHandle h) {
  Driver& d = D();
  auto it = d.physical_allocs.find(h);
  if (it == d.physical_allocs.end() || !it->second.released || it->second.mappings > 0) return;
  if (it->second.charge > 0) d.Uncharge(it->second.device, it->second.charge);
  close(it->second.fd);
  d.physical_allocs.erase(it);
  ForgetMulticastBindingsLocked(h);
}

// Graph memory of `device`: resident (reserved) and allocated by a launch (used).
void GraphMemUsage(int device, uint64_t* used, uint64_t* reserved) {
  *used = *reserved = 0;
  for (auto& g : D().graph_allocs) {
    if (g->device != device || !g->resident) continue;
    *reserved += g->charge;
    if (g->in_use) *used += g->charge;
  }
}

}  // namespace

const VaMapping* FindMappingLocked(uintptr_t p) {
  auto it = D().mappings.upper_bound(p);
  if (it == D().mappings.begin()) return nullptr;
  --it;
  return p < it->second.base + it->second.size ? &it->second : nullptr;
}

// ---- shared with graphs and contexts ----

CUresult CopyLocked(uintptr_t dst, uintptr_t src, size_t bytes, bool dst_device, bool src_device) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (const VaMapping* m = dst_device ? FindMappingLocked(dst) : nullptr;
      m != nullptr && m->multicast) {
    if (src_device && !D().DeviceAccessible(src, bytes, Driver::Access::kRead)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    return MulticastWriteLocked(*m, dst, reinterpret_cast<const void*>(src), bytes);
  }
  if ((dst_device && !D().DeviceAccessible(dst, bytes, Driver::Access::kWrite)) ||
      (src_device && !D().DeviceAccessible(src, bytes, Driver::Access::kRead))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult Copy3DLocked(const CUDA_MEMCPY3D& p) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  size_t width = p.WidthInBytes, rows = std::max<size_t>(p.Height, 1),
         depth = std::max<size_t>(p.Depth, 1);
  if (width == 0) return CUDA_SUCCESS;
  uint8_t *src, *dst;
  size_t spitch, sheight, dpitch, dheight;
  if (CUresult r = CopySide(Driver::Access::kRead, p.srcMemoryType, p.srcHost, p.srcDevice,
                            p.srcArray, p.srcXInBytes, p.srcY, p.srcZ, p.srcPitch, p.srcHeight,
                            width, rows, depth, &src, &spitch, &sheight);
      r != CUDA_SUCCESS) {
    return r;
  }
  // Into a multicast object's mapping: one linear range, written to every team device's
  // memory bound there.
  if (const VaMapping* m =
          p.dstMemoryType == CU_MEMORYTYPE_DEVICE || p.dstMemoryType == CU_MEMORYTYPE_UNIFIED
              ? FindMappingLocked(uintptr_t(p.dstDevice))
              : nullptr;
      m != nullptr && m->multicast) {
    if (rows != 1 || depth != 1) return CUDA_ERROR_INVALID_VALUE;
    return MulticastWriteLocked(*m, uintptr_t(p.dstDevice) + p.dstXInBytes,
                                src + p.srcZ * spitch * sheight + p.srcY * spitch + p.srcXInBytes,
                                width);
  }
  if (CUresult r = CopySide(Driver::Access::kWrite, p.dstMemoryType, p.dstHost, p.dstDevice,
                            p.dstArray, p.dstXInBytes, p.dstY, p.dstZ, p.dstPitch, p.dstHeight,
                            width, rows, depth, &dst, &dpitch, &dheight);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (size_t z = 0; z < depth; ++z) {
    for (size_t y = 0; y < rows; ++y) {
      std::memmove(dst + (p.dstZ + z) * dpitch * dheight + (p.dstY + y) * dpitch + p.dstXInBytes,
                   src + (p.srcZ + z) * spitch * sheight + (p.srcY + y) * spitch + p.srcXInBytes,
                   width);
    }
  }
  return CUDA_SUCCESS;
}

CUresult MemsetLocked(uintptr_t dst, size_t pitch, unsigned value, unsigned elem, size_t width,
                      size_t height) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (width == 0 || height == 0) return CUDA_SUCCESS;
  if (elem != 1 && elem != 2 && elem != 4) return CUDA_ERROR_INVALID_VALUE;
  if (dst % elem != 0 || (height > 1 && (pitch % elem != 0 || pitch < width * elem))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (height == 1) pitch = width * elem;
  size_t span = (height - 1) * pitch + width * elem;
  if (!D().DeviceAccessible(dst, span, Driver::Access::kWrite)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t y = 0; y < height; ++y) {
    auto* row = reinterpret_cast<uint8_t*>(dst + y * pitch);
    if (elem == 1) {
      std::memset(row, int(value & 0xff), width);
    } else if (elem == 2) {
      auto v = uint16_t(value);
      for (size_t i = 0; i < width; ++i) std::memcpy(row + 2 * i, &v, 2);
    } else {
      auto v = uint32_t(value);
      for (size_t i = 0; i < width; ++i) std::memcpy(row + 4 * i, &v, 4);
    }
  }
  return CUDA_SUCCESS;
}

CUresult AllocFromPoolLocked(CUmemPoolHandle_st* pool, CUctx_st* ctx, size_t bytes,
                             CUdeviceptr* out) {
  Driver& d = D();
  uint64_t cached = pool->reserved - pool->used;
  if (bytes > cached) {
    uint64_t grow = RoundUp(bytes - cached, d.Granularity());
    CUresult r = d.Charge(pool->device, grow);
    if (r == CUDA_ERROR_OUT_OF_MEMORY && pool->reserved > pool->used) {
      TrimPool(pool, 0);  // give back what the pool caches, then try again
      cached = pool->reserved - pool->used;
      grow = bytes > cached ? RoundUp(bytes - cached, d.Granularity()) : 0;
      r = d.Charge(pool->device, grow);
    }
    if (r != CUDA_SUCCESS) return r;
    pool->reserved += grow;
  }
  uint64_t offset = 0;
  void* p = pool->file != nullptr ? MapPoolPages(*pool->file, bytes, &offset) : MapBacking(bytes);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  pool->used += bytes;
  pool->used_high = std::max(pool->used_high, pool->used);
  pool->reserved_high = std::max(pool->reserved_high, pool->reserved);
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = bytes;
  a.mapped_size = bytes;
  a.kind = AllocKind::kPool;
  a.device = pool->device;
  a.ctx = ctx;
  a.pool = pool;
  a.pool_file = pool->file;
  a.pool_offset = offset;
  d.allocations[a.base] = a;
  *out = CUdeviceptr(a.base);
  return CUDA_SUCCESS;
}

CUresult FreeLocked(uintptr_t ptr, bool async) {
  Driver& d = D();
  auto it = d.allocations.find(ptr);
  if (it == d.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  switch (it->second.kind) {
    case AllocKind::kDevice:
    case AllocKind::kManaged:
    case AllocKind::kPool:
    case AllocKind::kPoolImported:
      ReleaseAllocation(it);
      return CUDA_SUCCESS;
    case AllocKind::kGraph:
      // Graph memory is allocated only between a launch of its node and its free.
      if (it->second.graph_alloc == nullptr || !it->second.graph_alloc->in_use) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      GraphFreeLocked(ptr);
      return CUDA_SUCCESS;
    default:
      (void)async;
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult AllocModuleGlobalLocked(CUctx_st* ctx, size_t bytes, CUdeviceptr* out) {
  return AllocDevice(ctx, bytes, AllocKind::kModuleGlobal, out);
}

void FreeModuleGlobalLocked(CUdeviceptr ptr) {
  auto it = D().allocations.find(uintptr_t(ptr));
  if (it != D().allocations.end() && it->second.kind == AllocKind::kModuleGlobal) {
    ReleaseAllocation(it);
  }
}

CUresult GraphAllocLaunchLocked(GraphAlloc* a) {
  if (!a->resident) {
    if (CUresult r = D().Charge(a->device, a->charge); r != CUDA_SUCCESS) return r;
    a->resident = true;
  }
  a->in_use = true;
  DeviceRt& rt = D().rt[size_t(a->device)];
  uint64_t used, reserved;
  GraphMemUsage(a->device, &used, &reserved);
  rt.graph_used_high = std::max(rt.graph_used_high, used);
  rt.graph_reserved_high = std::max(rt.graph_reserved_high, reserved);
  return CUDA_SUCCESS;
}

void GraphFreeLocked(uintptr_t ptr) {
  Allocation* a = D().FindAllocation(ptr, 1);
  if (a != nullptr && a->kind == AllocKind::kGraph && a->graph_alloc != nullptr) {
    a->graph_alloc->in_use = false;
  }
  PruneGraphAllocsLocked();
}

void PruneGraphAllocsLocked() {
  Driver& d = D();
  std::erase_if(d.graph_allocs, [&d](const std::shared_ptr<GraphAlloc>& g) {
    // Only this list still knows it (its graph and executable graphs are gone) and no launch
    // holds it: nothing can reach the memory again.
    if (g.use_count() > 1 || g->in_use) return false;
    if (g->resident) d.Uncharge(g->device, g->charge);
    UnmapBacking(g->base, g->size);
    d.allocations.erase(g->base);
    return true;
  });
}

void FreeContextMemoryLocked(CUctx_st* ctx) {
  Driver& d = D();
  for (auto it = d.allocations.begin(); it != d.allocations.end();) {
    auto next = std::next(it);
    Allocation& a = it->second;
    if (a.ctx == ctx && a.kind != AllocKind::kGraph) ReleaseAllocation(it);
    it = next;
  }
  for (auto& [device, sp] : ctx->small) {
    d.Uncharge(device, sp.pages * d.Granularity());
    sp = {};
  }
  // The last context of this process on the device: its pools hold nothing any more.
  bool others = false;
  for (auto& [h, kind] : d.handles) {
    if (kind == HandleKind::kContext && h != ctx &&
        static_cast<const CUctx_st*>(h)->device == ctx->device) {
      others = true;
    }
  }
  if (!others) {
    for (auto& [h, kind] : d.handles) {
      if (kind != HandleKind::kPool) continue;
      auto* pool = const_cast<CUmemPoolHandle_st*>(static_cast<const CUmemPoolHandle_st*>(h));
      if (pool->device == ctx->device) TrimPool(pool, 0);
    }
  }
}

void TrimPoolsAtSyncLocked(int physical) {
  for (auto& [h, kind] : D().handles) {
    if (kind != HandleKind::kPool) continue;
    auto* pool = const_cast<CUmemPoolHandle_st*>(static_cast<const CUmemPoolHandle_st*>(h));
    if (pool->device == physical) TrimPool(pool, pool->release_threshold);
  }
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

// ---- device memory ----

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
  return MemAlloc(dptr, bytesize, false);
}

// The 32-bit ABI of CUDA 2.x: device pointers below 4 GiB.
CUresult CUDAAPI cuMemAlloc(CUdeviceptr_v1* dptr, unsigned int bytesize) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUdeviceptr p = 0;
  CUresult r = MemAlloc(&p, bytesize, true);
  if (r == CUDA_SUCCESS) *dptr = CUdeviceptr_v1(p);
  return r;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) { return MemFree(dptr); }
CUresult CUDAAPI cuMemFree(CUdeviceptr_v1 dptr) { return MemFree(dptr); }

CUresult CUDAAPI cuMemAllocPitch_v2(CUdeviceptr* dptr, size_t* pPitch, size_t WidthInBytes,
                                    size_t Height, unsigned int ElementSizeBytes) {
  if (dptr == nullptr || pPitch == nullptr || WidthInBytes == 0 || Height == 0 ||
      (ElementSizeBytes != 4 && ElementSizeBytes != 8 && ElementSizeBytes != 16)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t pitch = RoundUp(WidthInBytes, 512);
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (CUresult r = AllocDevice(ctx, pitch * Height, AllocKind::kDevice, dptr); r != CUDA_SUCCESS) {
    return r;
  }
  *pPitch = pitch;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocManaged(CUdeviceptr* dptr, size_t bytesize, unsigned int flags) {
  if (dptr == nullptr || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  return AllocDevice(ctx, bytesize, AllocKind::kManaged, dptr);
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free, size_t* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return MemGetInfo(free, total);
}

CUresult CUDAAPI cuMemGetInfo(unsigned int* free, unsigned int* total) {
  if (free == nullptr || total == nullptr) return CUDA_ERROR_INVALID_VALUE;
  size_t f, t;
  CUresult r = MemGetInfo(&f, &t);
  if (r == CUDA_SUCCESS) {
    *free = unsigned(std::min<size_t>(f, 0xffffffffu));
    *total = unsigned(std::min<size_t>(t, 0xffffffffu));
  }
  return r;
}

CUresult CUDAAPI cuMemGetAddressRange_v2(CUdeviceptr* pbase, size_t* psize, CUdeviceptr dptr) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = D().FindAllocation(uintptr_t(dptr), 1);
  if (a == nullptr) {
    // Virtual memory: the range of the mapping the address is in.
    if (const VaMapping* m = FindMappingLocked(uintptr_t(dptr)); m != nullptr) {
      if (pbase != nullptr) *pbase = CUdeviceptr(m->base);
      if (psize != nullptr) *psize = m->size;
      return CUDA_SUCCESS;
    }
  }
  if (a == nullptr || a->kind == AllocKind::kHost || a->kind == AllocKind::kRegistered) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (pbase != nullptr) *pbase = CUdeviceptr(a->base);
  if (psize != nullptr) *psize = a->size;
  return CUDA_SUCCESS;
}

// ---- pinned host memory ----

CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
  constexpr unsigned kMask =
      CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
  if (pp == nullptr || bytesize == 0 || (Flags & ~kMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  void* p = MapBacking(bytesize);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation a;
  a.base = reinterpret_cast<uintptr_t>(p);
  a.size = bytesize;
  a.mapped_size = bytesize;
  a.kind = AllocKind::kHost;
  a.ctx = ctx;
  a.host_flags = Flags;
  D().allocations[a.base] = a;
  *pp = p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}
CUresult CUDAAPI cuMemAllocHost(void** pp, unsigned int bytesize) {
  return cuMemHostAlloc(pp, bytesize, 0);
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto it = D().allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == D().allocations.end() || it->second.kind != AllocKind::kHost) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ReleaseAllocation(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister_v2(void* p, size_t bytesize, unsigned int Flags) {
  constexpr unsigned kMask = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                             CU_MEMHOSTREGISTER_IOMEMORY | CU_MEMHOSTREGISTER_READ_ONLY;
  if (p == nullptr || bytesize == 0 || (Flags & ~kMask) != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  auto base = reinterpret_cast<uintptr_t>(p);
  auto it = D().allocations.lower_bound(base);
  bool overlaps = (it != D().allocations.end() && it->first < base + bytesize) ||
                  (it != D().allocations.begin() &&
                   std::prev(it)->second.base + std::prev(it)->second.size > base);
  if (overlaps) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  Allocation a;
  a.base = base;
  a.size = bytesize;
  a.kind = AllocKind::kRegistered;
  a.ctx = ctx;
  D().allocations[base] = a;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostRegister(void* p, size_t bytesize, unsigned int Flags) {
  return cuMemHostRegister_v2(p, bytesize, Flags);
}

CUresult CUDAAPI cuMemHostUnregister(void* p) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto it = D().allocations.find(reinterpret_cast<uintptr_t>(p));
  if (it == D().allocations.end() || it->second.kind != AllocKind::kRegistered) {
    return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  }
  ReleaseAllocation(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
  if (pdptr == nullptr || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = D().FindAllocation(reinterpret_cast<uintptr_t>(p), 1);
  if (a == nullptr || (a->kind != AllocKind::kHost && a->kind != AllocKind::kRegistered)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *pdptr = CUdeviceptr(reinterpret_cast<uintptr_t>(p));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetFlags(unsigned int* pFlags, void* p) {
  if (pFlags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = D().FindAllocation(reinterpret_cast<uintptr_t>(p), 1);
  if (a == nullptr || a->kind != AllocKind::kHost) return CUDA_ERROR_INVALID_VALUE;
  *pFlags = a->host_flags;
  return CUDA_SUCCESS;
}

// ---- copies ----

CUresult CUDAAPI cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpy_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED, Sync::kSyncPtds,
                 nullptr);
}
CUresult CUDAAPI cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpyAsync_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_UNIFIED, CU_MEMORYTYPE_UNIFIED, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dst, const void* src, size_t n) {
  return ApiCopy(dst, uintptr_t(src), n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, Sync::kSync,
                 nullptr);
}
CUresult CUDAAPI cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void* src, size_t n) {
  return ApiCopy(dst, uintptr_t(src), n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, Sync::kSyncPtds,
                 nullptr);
}
CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr_v1 dst, const void* src, unsigned int n) {
  return cuMemcpyHtoD_v2(dst, src, n);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return ApiCopy(dst, uintptr_t(src), n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpyHtoDAsync_v2_ptsz(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  return ApiCopy(dst, uintptr_t(src), n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_HOST, Sync::kAsyncPtsz,
                 s);
}
CUresult CUDAAPI cuMemcpyDtoH_v2(void* dst, CUdeviceptr src, size_t n) {
  return ApiCopy(uintptr_t(dst), src, n, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, Sync::kSync,
                 nullptr);
}
CUresult CUDAAPI cuMemcpyDtoH_v2_ptds(void* dst, CUdeviceptr src, size_t n) {
  return ApiCopy(uintptr_t(dst), src, n, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, Sync::kSyncPtds,
                 nullptr);
}
CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr_v1 src, unsigned int n) {
  return cuMemcpyDtoH_v2(dst, src, n);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy(uintptr_t(dst), src, n, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpyDtoHAsync_v2_ptsz(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy(uintptr_t(dst), src, n, CU_MEMORYTYPE_HOST, CU_MEMORYTYPE_DEVICE, Sync::kAsyncPtsz,
                 s);
}
CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext, size_t n,
                                   CUstream s) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kAsync, s);
}

CUresult CUDAAPI cuMemcpyHtoA_v2(CUarray dst, size_t offset, const void* src, size_t n) {
  return ApiCopyArray(dst, offset, uintptr_t(src), n, CU_MEMORYTYPE_HOST, true, Sync::kSync,
                      nullptr);
}
CUresult CUDAAPI cuMemcpyAtoH_v2(void* dst, CUarray src, size_t offset, size_t n) {
  return ApiCopyArray(src, offset, uintptr_t(dst), n, CU_MEMORYTYPE_HOST, false, Sync::kSync,
                      nullptr);
}
CUresult CUDAAPI cuMemcpyDtoA_v2(CUarray dst, size_t offset, CUdeviceptr src, size_t n) {
  return ApiCopyArray(dst, offset, src, n, CU_MEMORYTYPE_DEVICE, true, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpyAtoD_v2(CUdeviceptr dst, CUarray src, size_t offset, size_t n) {
  return ApiCopyArray(src, offset, dst, n, CU_MEMORYTYPE_DEVICE, false, Sync::kSync, nullptr);
}

CUresult CUDAAPI cuMemcpy2D_v2(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = From2D(*p);
  return ApiCopy3D(&q, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpy2DUnaligned_v2(const CUDA_MEMCPY2D* p) { return cuMemcpy2D_v2(p); }
CUresult CUDAAPI cuMemcpy2DAsync_v2(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = From2D(*p);
  return ApiCopy3D(&q, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpy3D_v2(const CUDA_MEMCPY3D* p) {
  return ApiCopy3D(p, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpy3DAsync_v2(const CUDA_MEMCPY3D* p, CUstream s) {
  return ApiCopy3D(p, Sync::kAsync, s);
}

// ---- sets ----

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr d, unsigned char v, size_t n) {
  return ApiMemset(d, 0, v, 1, n, 1, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemsetD8_v2_ptds(CUdeviceptr d, unsigned char v, size_t n) {
  return ApiMemset(d, 0, v, 1, n, 1, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemsetD16_v2(CUdeviceptr d, unsigned short v, size_t n) {
  return ApiMemset(d, 0, v, 2, n, 1, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr d, unsigned int v, size_t n) {
  return ApiMemset(d, 0, v, 4, n, 1, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemsetD32_v2_ptds(CUdeviceptr d, unsigned int v, size_t n) {
  return ApiMemset(d, 0, v, 4, n, 1, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemsetD2D8_v2(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h) {
  return ApiMemset(d, pitch, v, 1, w, h, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemsetD2D16_v2(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                  size_t h) {
  return ApiMemset(d, pitch, v, 2, w, h, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemsetD2D32_v2(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h) {
  return ApiMemset(d, pitch, v, 4, w, h, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return ApiMemset(d, 0, v, 1, n, 1, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemsetD8Async_ptsz(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  return ApiMemset(d, 0, v, 1, n, 1, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return ApiMemset(d, 0, v, 2, n, 1, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  return ApiMemset(d, 0, v, 4, n, 1, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemsetD32Async_ptsz(CUdeviceptr d, unsigned int v, size_t n, CUstream s) {
  return ApiMemset(d, 0, v, 4, n, 1, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemsetD2D8Async(CUdeviceptr d, size_t pitch, unsigned char v, size_t w, size_t h,
                                   CUstream s) {
  return ApiMemset(d, pitch, v, 1, w, h, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemsetD2D32Async(CUdeviceptr d, size_t pitch, unsigned int v, size_t w, size_t h,
                                    CUstream s) {
  return ApiMemset(d, pitch, v, 4, w, h, Sync::kAsync, s);
}

// ---- stream-ordered allocation and pools ----

CUresult CUDAAPI cuMemAllocAsync(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return AllocAsync(dptr, bytesize, nullptr, s, false);
}
CUresult CUDAAPI cuMemAllocAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUstream s) {
  return AllocAsync(dptr, bytesize, nullptr, s, true);
}
CUresult CUDAAPI cuMemAllocFromPoolAsync(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                         CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, bytesize, pool, s, false);
}
CUresult CUDAAPI cuMemAllocFromPoolAsync_ptsz(CUdeviceptr* dptr, size_t bytesize, CUmemoryPool pool,
                                              CUstream s) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return AllocAsync(dptr, bytesize, pool, s, true);
}
CUresult CUDAAPI cuMemFreeAsync(CUdeviceptr dptr, CUstream s) { return FreeAsync(dptr, s, false); }
CUresult CUDAAPI cuMemFreeAsync_ptsz(CUdeviceptr dptr, CUstream s) {
  return FreeAsync(dptr, s, true);
}

CUresult CUDAAPI cuDeviceGetDefaultMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  CurrentPool(p);
  *pool = D().rt[size_t(p)].default_pool;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetMemPool(CUmemoryPool* pool, CUdevice dev) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  *pool = CurrentPool(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceSetMemPool(CUdevice dev, CUmemoryPool pool) {
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool) || pool->device != p || pool->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  D().rt[size_t(p)].current_pool = pool;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolCreate(CUmemoryPool* pool, const CUmemPoolProps* props) {
  if (pool == nullptr || props == nullptr || props->allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      props->location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The handle types answer as cuMemCreate's do: POSIX descriptors or none.
  const auto types = unsigned(props->handleTypes);
  if (CUresult r = CheckHandleTypes(types); r != CUDA_SUCCESS) return r;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(props->location.id, &p); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : r;
  }
  std::shared_ptr<PoolFile> file;
  if (types != 0) {
    file = CreatePoolFile(p);
    if (file == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pool = NewPool(p, false);
  (*pool)->handle_types = types;
  (*pool)->file = std::move(file);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolDestroy(CUmemoryPool pool) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool) || pool->is_default) return CUDA_ERROR_INVALID_VALUE;
  // Outstanding allocations stay addressable; their memory returns with the pool's.
  for (auto& [base, a] : D().allocations) {
    if (a.pool == pool) a.pool = nullptr;
  }
  D().Uncharge(pool->device, pool->reserved);
  DeviceRt& rt = D().rt[size_t(pool->device)];
  if (rt.current_pool == pool) rt.current_pool = rt.default_pool;
  D().Unregister(pool);
  delete pool;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolTrimTo(CUmemoryPool pool, size_t minBytesToKeep) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool)) return CUDA_ERROR_INVALID_VALUE;
  TrimPool(pool, minBytesToKeep);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolSetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool)) return CUDA_ERROR_INVALID_VALUE;
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      pool->reuse_flags[int(attr) - 1] = *static_cast<int*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      pool->release_threshold = *static_cast<cuuint64_t*>(value);
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
      if (attr == CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH) {
        pool->reserved_high = pool->reserved;
      } else {
        pool->used_high = pool->used;
      }
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemPoolGetAttribute(CUmemoryPool pool, CUmemPool_attribute attr, void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool)) return CUDA_ERROR_INVALID_VALUE;
  auto* u64 = static_cast<cuuint64_t*>(value);
  switch (attr) {
    case CU_MEMPOOL_ATTR_REUSE_FOLLOW_EVENT_DEPENDENCIES:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC:
    case CU_MEMPOOL_ATTR_REUSE_ALLOW_INTERNAL_DEPENDENCIES:
      *static_cast<int*>(value) = pool->reuse_flags[int(attr) - 1];
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RELEASE_THRESHOLD:
      *u64 = pool->release_threshold;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT:
      *u64 = pool->reserved;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_RESERVED_MEM_HIGH:
      *u64 = pool->reserved_high;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_CURRENT:
      *u64 = pool->used;
      return CUDA_SUCCESS;
    case CU_MEMPOOL_ATTR_USED_MEM_HIGH:
      *u64 = pool->used_high;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- pool sharing ----

CUresult CUDAAPI cuMemPoolSetAccess(CUmemoryPool pool, const CUmemAccessDesc* map, size_t count) {
  if (map == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool)) return CUDA_ERROR_INVALID_VALUE;
  // Every descriptor is checked before any applies.
  std::vector<std::pair<int, CUmemAccess_flags>> changes;
  for (size_t i = 0; i < count; ++i) {
    const int flags = EnumValue(map[i].flags);
    if (map[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        (flags != CU_MEM_ACCESS_FLAGS_PROT_NONE && flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
         flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    int p;
    if (PhysicalDevice(map[i].location.id, &p) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
    // The pool's own device keeps read-write access.
    if (p == pool->device && flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    changes.emplace_back(p, map[i].flags);
  }
  for (const auto& [p, flags] : changes) {
    if (p != pool->device) pool->access[p] = flags;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolGetAccess(CUmemAccess_flags* flags, CUmemoryPool memPool,
                                    CUmemLocation* location) {
  if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(memPool, HandleKind::kPool) || location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int p;
  if (PhysicalDevice(location->id, &p) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
  auto it = memPool->access.find(p);
  if (p == memPool->device) {
    *flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  } else {
    *flags = it != memPool->access.end() ? it->second : CU_MEM_ACCESS_FLAGS_PROT_NONE;
  }
  return CUDA_SUCCESS;
}

// A pool's shareable handle is a duplicate of its memfd: another process that receives it
// (over a Unix socket) imports the pool, then the pointers exported from it.
CUresult CUDAAPI cuMemPoolExportToShareableHandle(void* handle_out, CUmemoryPool pool,
                                                  CUmemAllocationHandleType handleType,
                                                  unsigned long long flags) {
  if (handle_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckHandleTypes(unsigned(handleType)); r != CUDA_SUCCESS) return r;
  // Only a type the pool was created with (the default pool has none).
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || pool->file == nullptr ||
      (pool->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int fd = fcntl(pool->file->fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(handle_out) = fd;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportFromShareableHandle(CUmemoryPool* pool_out, void* handle,
                                                    CUmemAllocationHandleType handleType,
                                                    unsigned long long flags) {
  if (pool_out == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckHandleTypes(unsigned(handleType)); r != CUDA_SUCCESS) return r;
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  // The descriptor comes by value in the pointer, as the driver takes it.
  std::shared_ptr<PoolFile> file = OpenPoolFile(int(reinterpret_cast<intptr_t>(handle)));
  if (file == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUmemPoolHandle_st* pool = NewPool(file->header->device, false);
  pool->handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  pool->file = std::move(file);
  pool->imported = true;
  *pool_out = pool;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolExportPointer(CUmemPoolPtrExportData* shareData_out, CUdeviceptr ptr) {
  if (shareData_out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  // The address an allocation of an exportable pool returned, in the process that made it.
  auto it = D().allocations.find(uintptr_t(ptr));
  if (it == D().allocations.end() || it->second.kind != AllocKind::kPool ||
      it->second.pool_file == nullptr) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation& a = it->second;
  if (!PublishExport(a)) return CUDA_ERROR_OUT_OF_MEMORY;
  PoolPtrExport x{kPoolPtrMagic,
                  uint32_t(a.export_slot),
                  a.pool_file->header->nonce,
                  a.pool_file->header->entries[a.export_slot].id.load(std::memory_order_relaxed),
                  a.pool_offset,
                  a.size};
  std::memset(shareData_out, 0, sizeof(*shareData_out));
  std::memcpy(shareData_out->reserved, &x, sizeof(x));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPoolImportPointer(CUdeviceptr* ptr_out, CUmemoryPool pool,
                                        CUmemPoolPtrExportData* shareData) {
  if (ptr_out == nullptr || shareData == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool) || !pool->imported) return CUDA_ERROR_INVALID_VALUE;
  PoolPtrExport x;
  std::memcpy(&x, shareData->reserved, sizeof(x));
  // Export leaves the rest of the data zero.
  const auto* rest = reinterpret_cast<const unsigned char*>(shareData->reserved) + sizeof(x);
  if (std::any_of(rest, rest + sizeof(shareData->reserved) - sizeof(x),
                  [](unsigned char c) { return c != 0; }) ||
      !ExportIsLive(*pool->file, x)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t len = RoundUp(x.size, PageSize());
  void* p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_NORESERVE, pool->file->fd,
                 off_t(x.offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  Allocation& a = RecordImport(p, x.size, len, AllocKind::kPoolImported, pool->device, ctx);
  a.pool = pool;
  a.pool_file = pool->file;
  a.pool_offset = x.offset;
  *ptr_out = CUdeviceptr(a.base);
  return CUDA_SUCCESS;
}

// ---- virtual memory management ----

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
  if (granularity == nullptr || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                                 option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  int p;
  if (CUresult r = CheckAllocProp(prop, &p); r != CUDA_SUCCESS) return r;
  *granularity = D().Granularity();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size,
                             const CUmemAllocationProp* prop, unsigned long long flags) {
  if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = CheckAllocProp(prop, &p); r != CUDA_SUCCESS) return r;
  Driver& d = D();
  if (size == 0 || size % d.Granularity() != 0) return CUDA_ERROR_INVALID_VALUE;
  int fd = memfd_create(VmmMemfdName(p).c_str(), MFD_CLOEXEC);
  if (fd < 0 || ftruncate(fd, off_t(size)) != 0) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  // Host memory is the machine's: no device is charged for it.
  uint64_t charge = p == kHostPhysical ? 0 : size;
  if (charge > 0) {
    if (CUresult r = d.Charge(p, charge); r != CUDA_SUCCESS) {
      close(fd);
      return r;
    }
  }
  CUmemGenericAllocationHandle h = d.next_physical++;
  PhysicalAlloc a{p, size, charge, fd};
  a.handle_types = unsigned(prop->requestedHandleTypes);
  d.physical_allocs[h] = a;
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto it = D().physical_allocs.find(handle);
  if (it == D().physical_allocs.end()) return ReleaseMulticastLocked(handle);
  if (it->second.released) return CUDA_ERROR_INVALID_VALUE;
  if (--it->second.handle_refs == 0) it->second.released = true;
  DropPhysicalIfUnused(handle);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment,
                                     CUdeviceptr addr, unsigned long long flags) {
  if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  size_t g = D().Granularity();
  if (size == 0 || size % g != 0 || (alignment != 0 && (alignment & (alignment - 1)) != 0)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t align = std::max(alignment, g);
  size_t span = size + align;
  void* hint = reinterpret_cast<void*>(addr);
  void* raw = mmap(hint, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto base = RoundUp(reinterpret_cast<uintptr_t>(raw), align);
  // Keep exactly [base, base + size).
  if (base > reinterpret_cast<uintptr_t>(raw)) munmap(raw, base - reinterpret_cast<uintptr_t>(raw));
  uintptr_t end = reinterpret_cast<uintptr_t>(raw) + span;
  if (end > base + size) munmap(reinterpret_cast<void*>(base + size), end - base - size);
  D().reservations[base] = VaReservation{base, size};
  *ptr = CUdeviceptr(base);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto it = D().reservations.find(uintptr_t(ptr));
  if (it == D().reservations.end() || it->second.size != size) return CUDA_ERROR_INVALID_VALUE;
  for (auto& [base, m] : D().mappings) {
    if (base >= it->second.base && base < it->second.base + size) return CUDA_ERROR_INVALID_VALUE;
  }
  munmap(reinterpret_cast<void*>(ptr), size);
  D().reservations.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset,
                          CUmemGenericAllocationHandle handle, unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Driver& d = D();
  // A multicast object maps as memory does, once its team is complete (the driver waits for
  // it); its minimum granularity is the allocation granularity.
  if (FindMulticastLocked(handle) != nullptr) {
    if (CUresult r = AwaitMulticastTeamLocked(api, handle); r != CUDA_SUCCESS) return r;
  }
  auto ph = d.physical_allocs.find(handle);
  MulticastObject* mc = ph == d.physical_allocs.end() ? FindMulticastLocked(handle) : nullptr;
  if (mc == nullptr && (ph == d.physical_allocs.end() || ph->second.released)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t g = d.Granularity();
  auto base = uintptr_t(ptr);
  if (size == 0 || size % g != 0 || offset % g != 0 || base % g != 0 ||
      offset + size > (mc != nullptr ? mc->size : ph->second.size)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto rv = d.reservations.upper_bound(base);
  if (rv == d.reservations.begin()) return CUDA_ERROR_INVALID_VALUE;
  --rv;
  if (base < rv->second.base || base + size > rv->second.base + rv->second.size) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto next = d.mappings.lower_bound(base);
  if ((next != d.mappings.end() && next->first < base + size) ||
      (next != d.mappings.begin() &&
       std::prev(next)->second.base + std::prev(next)->second.size > base)) {
    return CUDA_ERROR_INVALID_VALUE;  // already mapped
  }
  if (mc != nullptr) {
    mc->mappings += 1;
    VaMapping m{base, size, handle, 0};
    m.multicast = true;
    m.offset = offset;
    d.mappings[base] = m;
    return CUDA_SUCCESS;
  }
  void* p = mmap(reinterpret_cast<void*>(base), size, PROT_NONE, MAP_SHARED | MAP_FIXED,
                 ph->second.fd, off_t(offset));
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  ph->second.mappings += 1;
  d.mappings[base] = VaMapping{base, size, handle, 0};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Driver& d = D();
  auto base = uintptr_t(ptr);
  // The range is one mapping or several whole ones back to back (a pool that grew by
  // mapping at its end is unmapped by one call); never part of one, never a hole.
  auto first = d.mappings.find(base);
  auto last = first;
  for (uintptr_t cursor = base; cursor < base + size; ++last) {
    if (last == d.mappings.end() || last->first != cursor ||
        last->second.size > base + size - cursor) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    cursor += last->second.size;
  }
  if (first == last) return CUDA_ERROR_INVALID_VALUE;
  mmap(reinterpret_cast<void*>(base), size, PROT_NONE,
       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  std::vector<CUmemGenericAllocationHandle> handles, multicast_handles;
  for (auto it = first; it != last; ++it) {
    (it->second.multicast ? multicast_handles : handles).push_back(it->second.handle);
  }
  d.mappings.erase(first, last);
  for (CUmemGenericAllocationHandle h : multicast_handles) MulticastUnmappedLocked(h);
  for (CUmemGenericAllocationHandle h : handles) {
    auto ph = d.physical_allocs.find(h);
    if (ph == d.physical_allocs.end()) continue;
    ph->second.mappings -= 1;
    DropPhysicalIfUnused(h);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc,
                                size_t count) {
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  int prot = 0;
  for (size_t i = 0; i < count; ++i) {
    int p;
    if (CheckLocation(desc[i].location, &p) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE) prot = PROT_READ | PROT_WRITE;
    if (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ && prot == 0) prot = PROT_READ;
  }
  Driver& d = D();
  auto base = uintptr_t(ptr);
  // Every byte of the range must be mapped.
  uintptr_t cursor = base;
  std::vector<VaMapping*> hit;
  for (auto it = d.mappings.lower_bound(base); it != d.mappings.end() && it->first < base + size;
       ++it) {
    if (it->first != cursor) return CUDA_ERROR_INVALID_VALUE;
    hit.push_back(&it->second);
    cursor = it->first + it->second.size;
  }
  if (cursor < base + size || hit.empty()) return CUDA_ERROR_INVALID_VALUE;
  // Access to a multicast mapping is for the devices of its team: the driver answers
  // CUDA_ERROR_ILLEGAL_STATE for any other.
  for (VaMapping* m : hit) {
    if (!m->multicast) continue;
    const MulticastObject* mc = FindMulticastLocked(m->handle);
    for (size_t i = 0; i < count; ++i) {
      int p;
      if (CheckLocation(desc[i].location, &p) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_DEVICE;
      if (mc == nullptr || !InMulticastTeamLocked(*mc, p)) {
        return CUDA_ERROR_ILLEGAL_STATE;
      }
    }
  }
  for (VaMapping* m : hit) {
    // No host pages stand behind a multicast mapping: it stays inaccessible to the host.
    if (!m->multicast) mprotect(reinterpret_cast<void*>(m->base), m->size, prot);
    m->prot = prot;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
  if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto it = D().physical_allocs.find(handle);
  if (it == D().physical_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  *prop = CUmemAllocationProp{};
  prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop->requestedHandleTypes = CUmemAllocationHandleType(it->second.handle_types);
  if (it->second.device == kHostPhysical) {
    prop->location.type = CU_MEM_LOCATION_TYPE_HOST;
    return CUDA_SUCCESS;
  }
  prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  for (size_t i = 0; i < D().visible.size(); ++i) {
    if (D().visible[i] == it->second.device) prop->location.id = int(i);
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  const VaMapping* m = FindMappingLocked(reinterpret_cast<uintptr_t>(addr));
  if (m == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto ph = D().physical_allocs.find(m->handle);
  if (ph == D().physical_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
  ph->second.handle_refs += 1;  // the caller must release this reference too
  ph->second.released = false;
  *handle = m->handle;
  return CUDA_SUCCESS;
}

// A shareable handle is a duplicate of the allocation's memfd: pass it to another process
// (over a Unix socket) and cuMemImportFromShareableHandle there gives a handle to the same
// pages. The memory stays charged to the process that created it; an importer is charged
// nothing for it.
CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle,
                                              CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType,
                                              unsigned long long flags) {
  if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (MulticastObject* mc = FindMulticastLocked(handle); mc != nullptr) {
    return ExportMulticastLocked(mc, handleType, static_cast<int*>(shareableHandle));
  }
  auto it = D().physical_allocs.find(handle);
  if (it == D().physical_allocs.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckHandleTypes(unsigned(handleType)); r != CUDA_SUCCESS) return r;
  // Only a type the allocation asked for at creation may be exported.
  if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      (it->second.handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int fd = fcntl(it->second.fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  *static_cast<int*>(shareableHandle) = fd;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle,
                                                void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
  if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckHandleTypes(unsigned(shHandleType)); r != CUDA_SUCCESS) return r;
  if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  // The descriptor (passed by value in the pointer, as the driver takes it) must be a memfd
  // of the simulated driver's VMM allocations, whose name says the device, or of a multicast
  // object.
  int fd = int(reinterpret_cast<intptr_t>(osHandle));
  if (CUresult r = ImportMulticastLocked(fd, handle); r != CUDA_ERROR_NOT_FOUND) return r;
  char link[256];
  ssize_t n =
      fd < 0 ? -1
             : readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1);
  const std::string prefix = "/memfd:" + std::string(kVmmMemfdPrefix);
  std::string_view name(link, n > 0 ? size_t(n) : 0);
  if (name.substr(0, prefix.size()) != prefix) return CUDA_ERROR_INVALID_VALUE;
  name.remove_prefix(prefix.size());
  name = name.substr(0, name.find(' '));  // " (deleted)"
  int physical = kHostPhysical;
  if (name != "host") {
    if (name.substr(0, 3) != "gpu") return CUDA_ERROR_INVALID_VALUE;
    physical = 0;
    for (char c : name.substr(3)) {
      if (c < '0' || c > '9') return CUDA_ERROR_INVALID_VALUE;
      physical = physical * 10 + (c - '0');
    }
    if (physical >= int(D().devices.size())) return CUDA_ERROR_INVALID_VALUE;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || size_t(st.st_size) % D().Granularity() != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  CUmemGenericAllocationHandle h = D().next_physical++;
  PhysicalAlloc a{physical, size_t(st.st_size), 0, own};
  a.handle_types = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  D().physical_allocs[h] = a;
  *handle = h;
  return CUDA_SUCCESS;
}

// ---- arrays ----

// Bytes per element of an array of `desc`'s format and channels; 0 when unsupported.
static size_t ElementBytes(const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  if (desc.NumChannels != 1 && desc.NumChannels != 2 && desc.NumChannels != 4) return 0;
  switch (desc.Format) {
    case CU_AD_FORMAT_UNSIGNED_INT8:
    case CU_AD_FORMAT_SIGNED_INT8:
      return desc.NumChannels;
    case CU_AD_FORMAT_UNSIGNED_INT16:
    case CU_AD_FORMAT_SIGNED_INT16:
    case CU_AD_FORMAT_HALF:
      return 2 * desc.NumChannels;
    case CU_AD_FORMAT_UNSIGNED_INT32:
    case CU_AD_FORMAT_SIGNED_INT32:
    case CU_AD_FORMAT_FLOAT:
      return 4 * desc.NumChannels;
    default:
      return 0;
  }
}

static size_t ArrayBytes(const CUDA_ARRAY3D_DESCRIPTOR& desc, size_t elem) {
  return desc.Width * elem * std::max<size_t>(desc.Height, 1) * std::max<size_t>(desc.Depth, 1);
}

// An array's object and zeroed storage; charges nothing. Caller holds the API lock.
static CUarray_st* NewArrayLocked(CUctx_st* ctx, const CUDA_ARRAY3D_DESCRIPTOR& desc, size_t elem,
                                  uint64_t charge) {
  size_t bytes = ArrayBytes(desc, elem);
  void* data = std::calloc(1, bytes);
  if (data == nullptr) return nullptr;
  auto* a = new CUarray_st{ctx, desc, elem, bytes, charge, data};
  D().Register(a, HandleKind::kArray);
  return a;
}

static CUresult ArrayCreate(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR& desc) {
  size_t elem = ElementBytes(desc);
  if (pHandle == nullptr || desc.Width == 0 || elem == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  uint64_t charge = RoundUp(ArrayBytes(desc, elem), D().Granularity());
  if (CUresult r = D().Charge(ctx->device, charge); r != CUDA_SUCCESS) return r;
  CUarray_st* a = NewArrayLocked(ctx, desc, elem, charge);
  if (a == nullptr) {
    D().Uncharge(ctx->device, charge);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  *pHandle = a;
  return CUDA_SUCCESS;
}

// Level `level` of a mipmapped array: each dimension halved per level (at least 1); the
// layers of a layered or cube map array are not.
static CUDA_ARRAY3D_DESCRIPTOR LevelDescriptor(const CUDA_ARRAY3D_DESCRIPTOR& d, unsigned level) {
  CUDA_ARRAY3D_DESCRIPTOR l = d;
  auto shrink = [level](size_t v) { return v == 0 ? 0 : std::max<size_t>(v >> level, 1); };
  l.Width = shrink(d.Width);
  l.Height = shrink(d.Height);
  if ((d.Flags & (CUDA_ARRAY3D_LAYERED | CUDA_ARRAY3D_CUBEMAP)) == 0) l.Depth = shrink(d.Depth);
  return l;
}

static void DestroyMipmapLocked(CUmipmappedArray_st* m) {
  for (CUarray_st* a : m->levels) {
    std::free(a->data);
    D().Unregister(a);
    delete a;
  }
  D().Uncharge(m->ctx->device, m->charge);
  D().Unregister(m);
  delete m;
}

CUresult CUDAAPI cuMipmappedArrayCreate(CUmipmappedArray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d,
                                        unsigned int levels) {
  if (pHandle == nullptr || d == nullptr || d->Width == 0 || levels == 0 || levels > 32) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  size_t elem = ElementBytes(*d);
  if (elem == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  uint64_t bytes = 0;
  for (unsigned l = 0; l < levels; ++l) bytes += ArrayBytes(LevelDescriptor(*d, l), elem);
  uint64_t charge = RoundUp(bytes, D().Granularity());
  if (CUresult r = D().Charge(ctx->device, charge); r != CUDA_SUCCESS) return r;
  auto* m = new CUmipmappedArray_st{ctx, *d, charge, {}};
  D().Register(m, HandleKind::kMipmappedArray);
  for (unsigned l = 0; l < levels; ++l) {
    CUarray_st* a = NewArrayLocked(ctx, LevelDescriptor(*d, l), elem, 0);
    if (a == nullptr) {
      DestroyMipmapLocked(m);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    a->mipmap = m;
    m->levels.push_back(a);
  }
  *pHandle = m;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMipmappedArrayGetLevel(CUarray* pLevelArray, CUmipmappedArray m,
                                          unsigned int level) {
  if (pLevelArray == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kMipmappedArray)) return CUDA_ERROR_INVALID_HANDLE;
  if (level >= m->levels.size()) return CUDA_ERROR_INVALID_VALUE;
  *pLevelArray = m->levels[level];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMipmappedArrayDestroy(CUmipmappedArray m) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kMipmappedArray)) return CUDA_ERROR_INVALID_HANDLE;
  DestroyMipmapLocked(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArrayCreate_v2(CUarray* pHandle, const CUDA_ARRAY_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = d->Width;
  desc.Height = d->Height;
  desc.Format = d->Format;
  desc.NumChannels = d->NumChannels;
  return ArrayCreate(pHandle, desc);
}

CUresult CUDAAPI cuArray3DCreate_v2(CUarray* pHandle, const CUDA_ARRAY3D_DESCRIPTOR* d) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ArrayCreate(pHandle, *d);
}

CUresult CUDAAPI cuArrayDestroy(CUarray a) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(a, HandleKind::kArray)) return CUDA_ERROR_INVALID_HANDLE;
  if (a->mipmap != nullptr) return CUDA_ERROR_INVALID_VALUE;  // its mipmapped array owns it
  D().Uncharge(a->ctx->device, a->charge);
  std::free(a->data);
  D().Unregister(a);
  delete a;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArrayGetDescriptor_v2(CUDA_ARRAY_DESCRIPTOR* d, CUarray a) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(a, HandleKind::kArray)) return CUDA_ERROR_INVALID_HANDLE;
  d->Width = a->desc.Width;
  d->Height = a->desc.Height;
  d->Format = a->desc.Format;
  d->NumChannels = a->desc.NumChannels;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuArray3DGetDescriptor_v2(CUDA_ARRAY3D_DESCRIPTOR* d, CUarray a) {
  if (d == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(a, HandleKind::kArray)) return CUDA_ERROR_INVALID_HANDLE;
  *d = a->desc;
  return CUDA_SUCCESS;
}

// ---- managed memory hints ----

// The managed allocation holding [p, p + count), or null.
static Allocation* ManagedRange(CUdeviceptr p, size_t count) {
  Allocation* a = D().FindAllocation(uintptr_t(p), std::max<size_t>(count, 1));
  return a != nullptr && a->kind == AllocKind::kManaged ? a : nullptr;
}

// A location as a caller gives it: a visible device, or the host.
static bool ValidLocation(const CUmemLocation& l) {
  if (l.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    return l.id >= 0 && size_t(l.id) < D().visible.size();
  }
  return l.type == CU_MEM_LOCATION_TYPE_HOST || l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA ||
         l.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT;
}

static CUmemLocation FromDevice(CUdevice dev) {
  return dev == CU_DEVICE_CPU ? CUmemLocation{CU_MEM_LOCATION_TYPE_HOST, 0}
                              : CUmemLocation{CU_MEM_LOCATION_TYPE_DEVICE, dev};
}

static CUresult Advise(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation where) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = ManagedRange(p, count);
  if (a == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  const bool needs_location = advice == CU_MEM_ADVISE_SET_PREFERRED_LOCATION ||
                              advice == CU_MEM_ADVISE_SET_ACCESSED_BY ||
                              advice == CU_MEM_ADVISE_UNSET_ACCESSED_BY;
  if (needs_location && !ValidLocation(where)) return CUDA_ERROR_INVALID_DEVICE;
  switch (advice) {
    case CU_MEM_ADVISE_SET_READ_MOSTLY:
      a->read_mostly = true;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_READ_MOSTLY:
      a->read_mostly = false;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_PREFERRED_LOCATION:
      a->preferred = where;
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_UNSET_PREFERRED_LOCATION:
      a->preferred = {CU_MEM_LOCATION_TYPE_INVALID, 0};
      return CUDA_SUCCESS;
    case CU_MEM_ADVISE_SET_ACCESSED_BY:
    case CU_MEM_ADVISE_UNSET_ACCESSED_BY: {
      int id = where.type == CU_MEM_LOCATION_TYPE_DEVICE ? where.id : CU_DEVICE_CPU;
      if (advice == CU_MEM_ADVISE_SET_ACCESSED_BY) {
        a->accessed_by.insert(id);
      } else {
        a->accessed_by.erase(id);
      }
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemAdvise(CUdeviceptr p, size_t count, CUmem_advise advice, CUdevice dev) {
  return Advise(p, count, advice, FromDevice(dev));
}
CUresult CUDAAPI cuMemAdvise_v2(CUdeviceptr p, size_t count, CUmem_advise advice,
                                CUmemLocation location) {
  return Advise(p, count, advice, location);
}

// A prefetch moves nothing (device memory is host memory here): it records the location,
// in stream order (a captured prefetch is not recorded as a node).
static CUresult Prefetch(CUdeviceptr p, size_t count, CUmemLocation where, unsigned flags,
                         CUstream stream, bool ptsz) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  Allocation* a = ManagedRange(p, count);
  if (a == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!ValidLocation(where)) return CUDA_ERROR_INVALID_DEVICE;
  a->last_prefetch = where;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUdevice dev, CUstream s) {
  return Prefetch(p, count, FromDevice(dev), 0, s, false);
}
CUresult CUDAAPI cuMemPrefetchAsync_ptsz(CUdeviceptr p, size_t count, CUdevice dev, CUstream s) {
  return Prefetch(p, count, FromDevice(dev), 0, s, true);
}
CUresult CUDAAPI cuMemPrefetchAsync_v2(CUdeviceptr p, size_t count, CUmemLocation location,
                                       unsigned int flags, CUstream s) {
  return Prefetch(p, count, location, flags, s, false);
}
CUresult CUDAAPI cuMemPrefetchAsync_v2_ptsz(CUdeviceptr p, size_t count, CUmemLocation location,
                                            unsigned int flags, CUstream s) {
  return Prefetch(p, count, location, flags, s, true);
}

static int LegacyDevice(const CUmemLocation& l) {
  if (l.type == CU_MEM_LOCATION_TYPE_DEVICE) return l.id;
  return l.type == CU_MEM_LOCATION_TYPE_INVALID ? -2 : CU_DEVICE_CPU;  // -2: CU_DEVICE_INVALID
}

static CUresult RangeAttribute(const Allocation& a, void* data, size_t size,
                               CUmem_range_attribute attr) {
  auto put_int = [&](int v) {
    if (size != 4) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(data, &v, 4);
    return CUDA_SUCCESS;
  };
  switch (attr) {
    case CU_MEM_RANGE_ATTRIBUTE_READ_MOSTLY:
      return put_int(a.read_mostly ? 1 : 0);
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION:
      return put_int(LegacyDevice(a.preferred));
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION:
      return put_int(LegacyDevice(a.last_prefetch));
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_TYPE:
      return put_int(int(a.preferred.type));
    case CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION_ID:
      return put_int(a.preferred.id);
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_TYPE:
      return put_int(int(a.last_prefetch.type));
    case CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION_ID:
      return put_int(a.last_prefetch.id);
    case CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY: {
      // An array of 4-byte device ids, the unused rest CU_DEVICE_INVALID (-2).
      if (size == 0 || size % 4 != 0) return CUDA_ERROR_INVALID_VALUE;
      auto* out = static_cast<int*>(data);
      size_t n = 0;
      for (int dev : a.accessed_by) {
        if (n < size / 4) out[n++] = dev;
      }
      for (; n < size / 4; ++n) out[n] = -2;
      return CUDA_SUCCESS;
    }
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult CUDAAPI cuMemRangeGetAttribute(void* data, size_t dataSize,
                                        CUmem_range_attribute attribute, CUdeviceptr devPtr,
                                        size_t count) {
  if (data == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = ManagedRange(devPtr, count);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return RangeAttribute(*a, data, dataSize, attribute);
}

CUresult CUDAAPI cuMemRangeGetAttributes(void** data, size_t* dataSizes,
                                         CUmem_range_attribute* attributes, size_t numAttributes,
                                         CUdeviceptr devPtr, size_t count) {
  if (data == nullptr || dataSizes == nullptr || attributes == nullptr || numAttributes == 0 ||
      count == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = ManagedRange(devPtr, count);
  if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = RangeAttribute(*a, data[i], dataSizes[i], attributes[i]); r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamAttachMemAsync(CUstream stream, CUdeviceptr dptr, size_t length,
                                        unsigned int flags) {
  return AttachMem(stream, dptr, length, flags, false);
}
CUresult CUDAAPI cuStreamAttachMemAsync_ptsz(CUstream stream, CUdeviceptr dptr, size_t length,
                                             unsigned int flags) {
  return AttachMem(stream, dptr, length, flags, true);
}

// ---- pointer attributes ----

static CUresult PointerAttribute(void* data, CUpointer_attribute attr, CUdeviceptr ptr,
                                 bool lenient) {
  Driver& d = D();
  auto put32 = [data](uint32_t v) { std::memcpy(data, &v, sizeof(v)); };
  auto put64 = [data](uint64_t v) { std::memcpy(data, &v, sizeof(v)); };
  // The attributes of pointer size; every other one is 32 bits (the booleans too).
  const bool wide =
      attr == CU_POINTER_ATTRIBUTE_CONTEXT || attr == CU_POINTER_ATTRIBUTE_DEVICE_POINTER ||
      attr == CU_POINTER_ATTRIBUTE_HOST_POINTER || attr == CU_POINTER_ATTRIBUTE_BUFFER_ID ||
      attr == CU_POINTER_ATTRIBUTE_RANGE_START_ADDR || attr == CU_POINTER_ATTRIBUTE_RANGE_SIZE ||
      attr == CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES ||
      attr == CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE || attr == CU_POINTER_ATTRIBUTE_MAPPING_SIZE ||
      attr == CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR ||
      attr == CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID;
  if (int(attr) < int(CU_POINTER_ATTRIBUTE_CONTEXT) ||
      int(attr) > int(CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE) || int(attr) == 5) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Allocation* a = d.FindAllocation(uintptr_t(ptr), 1);
  if (a == nullptr) {
    if (!lenient) return CUDA_ERROR_INVALID_VALUE;
    // cuPointerGetAttributes gives unknown memory default NULL values.
    if (wide) {
      put64(0);
    } else {
      put32(attr == CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL ? uint32_t(-2) : 0);
    }
    return CUDA_SUCCESS;
  }
  const bool host = a->kind == AllocKind::kHost || a->kind == AllocKind::kRegistered;
  int ordinal = -2;
  for (size_t i = 0; i < d.visible.size(); ++i) {
    if (a->device >= 0 && d.visible[i] == a->device) ordinal = int(i);
  }
  switch (attr) {
    case CU_POINTER_ATTRIBUTE_CONTEXT:
      put64(reinterpret_cast<uintptr_t>(a->ctx));
      break;
    case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
      put32(host ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE);
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_POINTER:
      put64(ptr);
      break;
    case CU_POINTER_ATTRIBUTE_HOST_POINTER:
      // Device memory has no host address (cuPointerGetAttributes reports NULL).
      if (!host && a->kind != AllocKind::kManaged) {
        if (!lenient) return CUDA_ERROR_INVALID_VALUE;
        put64(0);
      } else {
        put64(ptr);
      }
      break;
    case CU_POINTER_ATTRIBUTE_IS_MANAGED:
      put32(a->kind == AllocKind::kManaged ? 1 : 0);
      break;
    case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
      put32(uint32_t(host ? (a->ctx ? a->ctx->ordinal : 0) : ordinal));
      break;
    case CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE:
      put32(a->kind == AllocKind::kDevice ? 1 : 0);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR:
    case CU_POINTER_ATTRIBUTE_MAPPING_BASE_ADDR:
      put64(a->base);
      break;
    case CU_POINTER_ATTRIBUTE_RANGE_SIZE:
    case CU_POINTER_ATTRIBUTE_MAPPING_SIZE:
      put64(a->size);
      break;
    case CU_POINTER_ATTRIBUTE_MAPPED:
      put32(1);
      break;
    case CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES:
      put64(0);  // not memory of cuMemCreate: no shareable handle types
      break;
    case CU_POINTER_ATTRIBUTE_IS_GPU_DIRECT_RDMA_CAPABLE:
    case CU_POINTER_ATTRIBUTE_IS_HW_DECOMPRESS_CAPABLE:
      put32(0);
      break;
    case CU_POINTER_ATTRIBUTE_ACCESS_FLAGS:
      put32(CU_POINTER_ATTRIBUTE_ACCESS_FLAG_READWRITE);
      break;
    case CU_POINTER_ATTRIBUTE_BUFFER_ID:
    case CU_POINTER_ATTRIBUTE_MEMORY_BLOCK_ID:
      put64(a->base);
      break;
    case CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE:
      put64(reinterpret_cast<uintptr_t>(a->pool));
      break;
    case CU_POINTER_ATTRIBUTE_SYNC_MEMOPS:
      put32(1);
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuPointerGetAttribute(void* data, CUpointer_attribute attribute, CUdeviceptr ptr) {
  if (data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  return PointerAttribute(data, attribute, ptr, false);
}

CUresult CUDAAPI cuPointerGetAttributes(unsigned int numAttributes, CUpointer_attribute* attributes,
                                        void** data, CUdeviceptr ptr) {
  if (attributes == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  for (unsigned i = 0; i < numAttributes; ++i) {
    if (data[i] == nullptr) continue;
    if (CUresult r = PointerAttribute(data[i], attributes[i], ptr, true); r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

// ---- graph memory ----

CUresult CUDAAPI cuDeviceGraphMemTrim(CUdevice dev) {
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  for (auto& g : D().graph_allocs) {
    if (g->device == p && g->resident && !g->in_use) {
      D().Uncharge(p, g->charge);
      g->resident = false;
    }
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                              void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  uint64_t used, reserved;
  GraphMemUsage(p, &used, &reserved);
  auto* out = static_cast<cuuint64_t*>(value);
  const DeviceRt& rt = D().rt[size_t(p)];
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT:
      *out = used;
      break;
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      *out = rt.graph_used_high;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT:
      *out = reserved;
      break;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      *out = rt.graph_reserved_high;
      break;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Only the high watermarks can be set, and only to zero: they restart from current usage.
CUresult CUDAAPI cuDeviceSetGraphMemAttribute(CUdevice dev, CUgraphMem_attribute attr,
                                              void* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  if (*static_cast<cuuint64_t*>(value) != 0) return CUDA_ERROR_INVALID_VALUE;
  uint64_t used, reserved;
  GraphMemUsage(p, &used, &reserved);
  DeviceRt& rt = D().rt[size_t(p)];
  switch (attr) {
    case CU_GRAPH_MEM_ATTR_USED_MEM_HIGH:
      rt.graph_used_high = used;
      return CUDA_SUCCESS;
    case CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH:
      rt.graph_reserved_high = reserved;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

// ---- per-thread-stream variants and array copies ----

CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                   size_t n) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext, CUdeviceptr src, CUcontext,
                                        size_t n, CUstream s) {
  return ApiCopy(dst, src, n, CU_MEMORYTYPE_DEVICE, CU_MEMORYTYPE_DEVICE, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemcpyHtoA_v2_ptds(CUarray dst, size_t offset, const void* src, size_t n) {
  return ApiCopyArray(dst, offset, uintptr_t(src), n, CU_MEMORYTYPE_HOST, true, Sync::kSyncPtds,
                      nullptr);
}
CUresult CUDAAPI cuMemcpyAtoH_v2_ptds(void* dst, CUarray src, size_t offset, size_t n) {
  return ApiCopyArray(src, offset, uintptr_t(dst), n, CU_MEMORYTYPE_HOST, false, Sync::kSyncPtds,
                      nullptr);
}
CUresult CUDAAPI cuMemcpyDtoA_v2_ptds(CUarray dst, size_t offset, CUdeviceptr src, size_t n) {
  return ApiCopyArray(dst, offset, src, n, CU_MEMORYTYPE_DEVICE, true, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpyAtoD_v2_ptds(CUdeviceptr dst, CUarray src, size_t offset, size_t n) {
  return ApiCopyArray(src, offset, dst, n, CU_MEMORYTYPE_DEVICE, false, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpyHtoAAsync_v2(CUarray dst, size_t offset, const void* src, size_t n,
                                      CUstream s) {
  return ApiCopyArray(dst, offset, uintptr_t(src), n, CU_MEMORYTYPE_HOST, true, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpyHtoAAsync_v2_ptsz(CUarray dst, size_t offset, const void* src, size_t n,
                                           CUstream s) {
  return ApiCopyArray(dst, offset, uintptr_t(src), n, CU_MEMORYTYPE_HOST, true, Sync::kAsyncPtsz,
                      s);
}
CUresult CUDAAPI cuMemcpyAtoHAsync_v2(void* dst, CUarray src, size_t offset, size_t n, CUstream s) {
  return ApiCopyArray(src, offset, uintptr_t(dst), n, CU_MEMORYTYPE_HOST, false, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpyAtoHAsync_v2_ptsz(void* dst, CUarray src, size_t offset, size_t n,
                                           CUstream s) {
  return ApiCopyArray(src, offset, uintptr_t(dst), n, CU_MEMORYTYPE_HOST, false, Sync::kAsyncPtsz,
                      s);
}

static CUresult CopyArrayToArray(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset,
                                 size_t n, Sync sync) {
  CUDA_MEMCPY3D q{};
  {
    ApiLock api;
    if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
    if (!D().Live(dst, HandleKind::kArray) || !D().Live(src, HandleKind::kArray)) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
    if (dst_offset > dst->bytes || n > dst->bytes - dst_offset || src_offset > src->bytes ||
        n > src->bytes - src_offset) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    q.srcMemoryType = CU_MEMORYTYPE_HOST;
    q.srcHost = static_cast<const uint8_t*>(src->data) + src_offset;
    q.dstMemoryType = CU_MEMORYTYPE_HOST;
    q.dstHost = static_cast<uint8_t*>(dst->data) + dst_offset;
    q.WidthInBytes = n;
    q.Height = 1;
    q.Depth = 1;
  }
  return ApiCopy3D(&q, sync, nullptr);
}
CUresult CUDAAPI cuMemcpyAtoA_v2(CUarray dst, size_t dst_offset, CUarray src, size_t src_offset,
                                 size_t n) {
  return CopyArrayToArray(dst, dst_offset, src, src_offset, n, Sync::kSync);
}
CUresult CUDAAPI cuMemcpyAtoA_v2_ptds(CUarray dst, size_t dst_offset, CUarray src,
                                      size_t src_offset, size_t n) {
  return CopyArrayToArray(dst, dst_offset, src, src_offset, n, Sync::kSyncPtds);
}

CUresult CUDAAPI cuMemcpy2D_v2_ptds(const CUDA_MEMCPY2D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = From2D(*p);
  return ApiCopy3D(&q, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpy2DUnaligned_v2_ptds(const CUDA_MEMCPY2D* p) {
  return cuMemcpy2D_v2_ptds(p);
}
CUresult CUDAAPI cuMemcpy2DAsync_v2_ptsz(const CUDA_MEMCPY2D* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = From2D(*p);
  return ApiCopy3D(&q, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemcpy3D_v2_ptds(const CUDA_MEMCPY3D* p) {
  return ApiCopy3D(p, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpy3DAsync_v2_ptsz(const CUDA_MEMCPY3D* p, CUstream s) {
  return ApiCopy3D(p, Sync::kAsyncPtsz, s);
}

// Device memory of every context is in this process's address space: a peer copy is a copy.
static CUDA_MEMCPY3D FromPeer(const CUDA_MEMCPY3D_PEER& c) {
  CUDA_MEMCPY3D p{};
  p.srcXInBytes = c.srcXInBytes;
  p.srcY = c.srcY;
  p.srcZ = c.srcZ;
  p.srcMemoryType = c.srcMemoryType;
  p.srcHost = c.srcHost;
  p.srcDevice = c.srcDevice;
  p.srcArray = c.srcArray;
  p.srcPitch = c.srcPitch;
  p.srcHeight = c.srcHeight;
  p.dstXInBytes = c.dstXInBytes;
  p.dstY = c.dstY;
  p.dstZ = c.dstZ;
  p.dstMemoryType = c.dstMemoryType;
  p.dstHost = c.dstHost;
  p.dstDevice = c.dstDevice;
  p.dstArray = c.dstArray;
  p.dstPitch = c.dstPitch;
  p.dstHeight = c.dstHeight;
  p.WidthInBytes = c.WidthInBytes;
  p.Height = c.Height;
  p.Depth = c.Depth;
  return p;
}
CUresult CUDAAPI cuMemcpy3DPeer(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = FromPeer(*p);
  return ApiCopy3D(&q, Sync::kSync, nullptr);
}
CUresult CUDAAPI cuMemcpy3DPeer_ptds(const CUDA_MEMCPY3D_PEER* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = FromPeer(*p);
  return ApiCopy3D(&q, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemcpy3DPeerAsync(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = FromPeer(*p);
  return ApiCopy3D(&q, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemcpy3DPeerAsync_ptsz(const CUDA_MEMCPY3D_PEER* p, CUstream s) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUDA_MEMCPY3D q = FromPeer(*p);
  return ApiCopy3D(&q, Sync::kAsyncPtsz, s);
}

CUresult CUDAAPI cuMemsetD16_v2_ptds(CUdeviceptr d, unsigned short v, size_t n) {
  return ApiMemset(d, 0, v, 2, n, 1, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemsetD16Async_ptsz(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  return ApiMemset(d, 0, v, 2, n, 1, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemsetD2D8_v2_ptds(CUdeviceptr d, size_t pitch, unsigned char v, size_t w,
                                      size_t h) {
  return ApiMemset(d, pitch, v, 1, w, h, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemsetD2D16_v2_ptds(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                       size_t h) {
  return ApiMemset(d, pitch, v, 2, w, h, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemsetD2D32_v2_ptds(CUdeviceptr d, size_t pitch, unsigned int v, size_t w,
                                       size_t h) {
  return ApiMemset(d, pitch, v, 4, w, h, Sync::kSyncPtds, nullptr);
}
CUresult CUDAAPI cuMemsetD2D8Async_ptsz(CUdeviceptr d, size_t pitch, unsigned char v, size_t w,
                                        size_t h, CUstream s) {
  return ApiMemset(d, pitch, v, 1, w, h, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemsetD2D16Async(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                    size_t h, CUstream s) {
  return ApiMemset(d, pitch, v, 2, w, h, Sync::kAsync, s);
}
CUresult CUDAAPI cuMemsetD2D16Async_ptsz(CUdeviceptr d, size_t pitch, unsigned short v, size_t w,
                                         size_t h, CUstream s) {
  return ApiMemset(d, pitch, v, 2, w, h, Sync::kAsyncPtsz, s);
}
CUresult CUDAAPI cuMemsetD2D32Async_ptsz(CUdeviceptr d, size_t pitch, unsigned int v, size_t w,
                                         size_t h, CUstream s) {
  return ApiMemset(d, pitch, v, 4, w, h, Sync::kAsyncPtsz, s);
}

// ---- CUDA 13 pools by location ----

// A device location's physical index; CUDA_ERROR_NOT_SUPPORTED for host locations (the model
// has device pools only).
static CUresult PoolLocation(const CUmemLocation* location, CUmemAllocationType type,
                             int* physical) {
  if (location == nullptr || type != CU_MEM_ALLOCATION_TYPE_PINNED) {
    return location == nullptr ? CUDA_ERROR_INVALID_VALUE : CUDA_ERROR_NOT_SUPPORTED;
  }
  if (location->type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return location->type == CU_MEM_LOCATION_TYPE_INVALID ? CUDA_ERROR_INVALID_VALUE
                                                          : CUDA_ERROR_NOT_SUPPORTED;
  }
  CUresult r = PhysicalDevice(location->id, physical);
  return r == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : r;
}

CUresult CUDAAPI cuMemGetDefaultMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                        CUmemAllocationType type) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PoolLocation(location, type, &p); r != CUDA_SUCCESS) return r;
  CurrentPool(p);
  *pool = D().rt[size_t(p)].default_pool;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetMemPool(CUmemoryPool* pool, CUmemLocation* location,
                                 CUmemAllocationType type) {
  if (pool == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PoolLocation(location, type, &p); r != CUDA_SUCCESS) return r;
  *pool = CurrentPool(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetMemPool(CUmemLocation* location, CUmemAllocationType type,
                                 CUmemoryPool pool) {
  ApiLock api;
  int p;
  if (CUresult r = PoolLocation(location, type, &p); r != CUDA_SUCCESS) return r;
  if (!D().Live(pool, HandleKind::kPool) || pool->device != p || pool->imported) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  D().rt[size_t(p)].current_pool = pool;
  return CUDA_SUCCESS;
}

// ---- IPC memory handles ----
//
// Exporting device memory moves its pages into a memfd (same address, same contents); the
// handle names the exporting process, that descriptor and the allocation, and a process on
// the same machine maps the pages through /proc/<pid>/fd. The memory stays charged to the
// exporter; the importer's mapping is not charged again.

namespace {

constexpr uint32_t kIpcMagic = 0x50494d48;  // "HMIP"

struct IpcMemHandle {
  uint32_t magic;
  int32_t pid;
  int32_t fd;
  int32_t device;  // physical
  uint64_t id;
  uint64_t size;
  uint64_t offset;  // of the exported pointer in its allocation
};
static_assert(sizeof(IpcMemHandle) <= CU_IPC_HANDLE_SIZE);

uint64_t g_next_ipc_id = 1;

std::string IpcMemfdName(pid_t pid, uint64_t id) {
  return "hami-sim-ipc-" + std::to_string(pid) + "-" + std::to_string(id);
}

// Moves `a`'s pages into a memfd, keeping address and contents.
CUresult ShareAllocation(Allocation* a) {
  if (a->ipc_fd >= 0) return CUDA_SUCCESS;
  uint64_t id = g_next_ipc_id++;
  size_t bytes = RoundUp(a->mapped_size, PageSize());
  int fd = memfd_create(IpcMemfdName(getpid(), id).c_str(), MFD_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  if (ftruncate(fd, off_t(bytes)) != 0 ||
      pwrite(fd, reinterpret_cast<void*>(a->base), a->size, 0) != ssize_t(a->size)) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = mmap(reinterpret_cast<void*>(a->base), bytes, PROT_READ | PROT_WRITE,
                 MAP_SHARED | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  a->ipc_fd = fd;
  a->ipc_id = id;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle* pHandle, CUdeviceptr dptr) {
  if (pHandle == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = D().FindAllocation(uintptr_t(dptr), 1);
  if (a == nullptr || a->kind != AllocKind::kDevice) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = ShareAllocation(a); r != CUDA_SUCCESS) return r;
  IpcMemHandle h{
      kIpcMagic, getpid(), a->ipc_fd, a->device, a->ipc_id, a->size, uintptr_t(dptr) - a->base};
  std::memset(pHandle, 0, sizeof(*pHandle));
  std::memcpy(pHandle->reserved, &h, sizeof(h));
  return CUDA_SUCCESS;
}

static CUresult IpcOpen(CUdeviceptr* pdptr, const CUipcMemHandle& handle, unsigned flags) {
  if (pdptr == nullptr || (flags & ~unsigned(CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  IpcMemHandle h;
  std::memcpy(&h, handle.reserved, sizeof(h));
  if (h.magic != kIpcMagic || h.pid <= 0 || h.fd < 0 || h.size == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (h.pid == getpid()) return CUDA_ERROR_INVALID_CONTEXT;  // not in the exporting process
  // The descriptor must still be the exporter's memfd of that allocation.
  const std::string fd_path = "/proc/" + std::to_string(h.pid) + "/fd/" + std::to_string(h.fd);
  char link[256];
  ssize_t n = readlink(fd_path.c_str(), link, sizeof(link) - 1);
  const std::string expected = "/memfd:" + IpcMemfdName(h.pid, h.id);
  if (n <= 0 || std::string_view(link, size_t(n)).substr(0, expected.size()) != expected) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  int fd = open(fd_path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) return CUDA_ERROR_INVALID_HANDLE;
  size_t bytes = RoundUp(h.size, PageSize());
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  RecordImport(p, h.size, bytes, AllocKind::kIpcOpened, h.device, ctx);
  *pdptr = CUdeviceptr(reinterpret_cast<uintptr_t>(p) + h.offset);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr* pdptr, CUipcMemHandle handle, unsigned int flags) {
  return IpcOpen(pdptr, handle, flags);
}
CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr* pdptr, CUipcMemHandle handle,
                                       unsigned int flags) {
  return IpcOpen(pdptr, handle, flags);
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Allocation* a = D().FindAllocation(uintptr_t(dptr), 1);
  if (a == nullptr || a->kind != AllocKind::kIpcOpened) return CUDA_ERROR_INVALID_VALUE;
  munmap(reinterpret_cast<void*>(a->base), a->mapped_size);
  D().allocations.erase(a->base);
  return CUDA_SUCCESS;
}

}  // extern "C"
