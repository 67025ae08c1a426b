// The simulated driver's process-local model: contexts, streams, events, modules,
// allocations, pools, graphs. cuda.h declares the handle types as pointers to incomplete
// structs (CUctx_st, CUstream_st, ...); they are defined here, and a handle is a pointer to
// one of them. Every handle a caller passes is looked up in a registry before it is
// dereferenced, so a stale or forged handle is an error code, never a crash.
//
// Concurrency: one process-wide mutex (Driver::mu) guards the whole model. API functions
// take it through an ApiLock at entry and never call each other with it held. Waits
// (synchronize, a full launch queue) release it first.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "common/raw_log.h"
#include "common/result.h"
#include "sim/cuda/image.h"
#include "sim/cuda/stubs.h"
#include "sim/options.h"
#include "sim/profiles.h"
#include "sim/state.h"

namespace hami::sim {

extern RawLogger g_log;

// An enum argument as the int the caller passed. A caller may pass any int; reading one
// outside the enumerators' range as the enum type is undefined, so its bytes are read.
template <typename E>
int EnumValue(const E& e) {
  static_assert(std::is_enum_v<E> && sizeof(E) == sizeof(int));
  int v;
  std::memcpy(&v, &e, sizeof v);
  return v;
}

enum class HandleKind : uint8_t {
  kContext,
  kStream,
  kEvent,
  kModule,
  kFunction,
  kArray,
  kMipmappedArray,
  kPool,
  kGraph,
  kGraphNode,
  kGraphExec,
  kLibrary,
  kKernel,
  kUserObject,
};

enum class AllocKind : uint8_t {
  kDevice,      // cuMemAlloc, cuMemAllocPitch
  kManaged,     // cuMemAllocManaged
  kPool,        // cuMemAllocAsync, cuMemAllocFromPoolAsync
  kHost,        // cuMemAllocHost, cuMemHostAlloc
  kRegistered,  // cuMemHostRegister
  kGraph,       // a graph memory-allocation node
  kModuleGlobal,
  kIpcOpened,  // another process's memory, opened with cuIpcOpenMemHandle (not charged here)
  // Another process's pool memory, imported with cuMemPoolImportPointer (not charged here).
  kPoolImported,
};

// The memfd behind an exportable memory pool (memory.cc), shared by the pool and every
// allocation mapped from it; the last owner closes it.
struct PoolFile;

// Memory a caller can address: device, managed, pool, pinned host, graph memory. Device
// memory is backed by host memory at the same address, so data round-trips exactly.
struct Allocation {
  uintptr_t base = 0;
  size_t size = 0;
  size_t mapped_size = 0;  // the host mapping behind it (0: not ours to unmap)
  AllocKind kind = AllocKind::kDevice;
  int device = -1;  // physical device, -1 for host memory
  CUctx_st* ctx = nullptr;
  uint64_t charge = 0;  // device bytes charged for it (small ones: see SmallPages)
  bool small = false;
  CUmemPoolHandle_st* pool = nullptr;
  struct GraphAlloc* graph_alloc = nullptr;
  unsigned host_flags = 0;  // cuMemHostAlloc flags
  // Managed memory: the hints cuMemAdvise gave and where it was last prefetched.
  bool read_mostly = false;
  CUmemLocation preferred{CU_MEM_LOCATION_TYPE_INVALID, 0};
  CUmemLocation last_prefetch{CU_MEM_LOCATION_TYPE_INVALID, 0};
  std::set<int> accessed_by;  // device ordinals
  // Device memory shared through cuIpcGetMemHandle: its pages are a memfd's.
  int ipc_fd = -1;
  uint64_t ipc_id = 0;
  // Memory of an exportable pool (kPool in its creator, kPoolImported in an importer): its
  // pages are the pool file's at pool_offset; export_slot is its entry in the file's table
  // of exported allocations (-1: not exported).
  std::shared_ptr<PoolFile> pool_file;
  uint64_t pool_offset = 0;
  int export_slot = -1;
};

struct GraphAlloc {
  uintptr_t base = 0;
  size_t size = 0;
  int device = 0;
  uint64_t charge = 0;
  bool resident = false;  // physical memory charged
  bool in_use = false;    // allocated by a launch and not yet freed
};

// One granule per page holds small allocations of a context on a device; the model
// ignores fragmentation: pages = ceil(bytes / granularity).
struct SmallPages {
  uint64_t bytes = 0;
  uint64_t pages = 0;
};

struct PerThreadKey;

// An interprocess event's state, in a memfd page shared by the processes that use it.
struct IpcEventPage {
  std::atomic<int64_t> time_ns;
  std::atomic<uint32_t> recorded;
};

// The attributes of a function a caller may set (cuFuncSetAttribute, cuKernelSetAttribute):
// dynamic shared memory, carveout and the cluster attributes.
struct FunctionSettings {
  int max_dynamic_smem = 48 * 1024;
  int carveout = -1;  // CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT; -1: no preference
  std::map<int, int> other;  // the cluster attributes, by CUfunction_attribute
};

// A value stored under (context, key) through the context-local-storage export table; its
// destructor runs before the context is destroyed.
struct StorageEntry {
  void* value = nullptr;
  void (*dtor)(CUcontext, void*, void*) = nullptr;
};

}  // namespace hami::sim

struct CUctx_st {
  uint64_t id;
  int device;              // physical
  int handle_device = -1;  // >= 0: this is the primary-context handle of that device
  int ordinal;             // CUdevice the caller used
  unsigned flags;
  bool primary;
  int primary_refs = 0;
  uint64_t charge = 0;  // the context's own device memory
  CUstream_st* legacy_stream = nullptr;
  std::set<CUstream_st*> streams;  // every stream of the context, legacy included
  std::map<int, hami::sim::SmallPages> small;
  size_t limits[8] = {};
  std::set<uint64_t> peers;  // ids of the contexts peer access was enabled to
  std::map<const void*, hami::sim::StorageEntry> storage;  // context-local storage
};

struct CUstream_st {
  uint64_t id;
  CUctx_st* ctx;
  unsigned flags;
  int priority;
  bool legacy = false;          // the context's NULL stream
  bool per_thread = false;      // a per-thread default stream
  int64_t tail_ns = 0;          // completion time of the last work queued
  std::deque<int64_t> pending;  // end times of queued launches (queue depth)
  // Capture.
  CUgraph_st* capture = nullptr;
  CUstreamCaptureMode capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
  uint64_t capture_id = 0;
  bool capture_invalidated = false;
  std::vector<CUgraphNode_st*> capture_deps;
  std::map<int, CUstreamAttrValue> attributes;  // set with cuStreamSetAttribute
};

struct CUevent_st {
  CUctx_st* ctx;
  unsigned flags;
  bool recorded = false;
  int64_t time_ns = 0;
  // CU_EVENT_INTERPROCESS: the state lives in a page other processes map too.
  hami::sim::IpcEventPage* shared = nullptr;
  int shared_fd = -1;
  uint64_t shared_id = 0;
};

struct CUfunc_st {
  CUmod_st* module;
  std::string name;
  uint64_t wave_ns = 0;  // 0: HAMI_SIM_WAVE_NS
  hami::sim::FunctionSettings settings;
  CUkern_st* kernel = nullptr;  // the library kernel this is the context's instance of
};

struct CUmod_st {
  CUctx_st* ctx;
  bool manifest = false;
  std::map<std::string, uint64_t> manifest_kernels;  // name -> wave_ns (0: default)
  std::map<std::string, CUfunc_st*> functions;
  std::map<std::string, std::pair<CUdeviceptr, size_t>> globals;
  uint64_t charge = 0;
  // What the image declares (kernels, globals, parameters), when it could be read.
  std::shared_ptr<const hami::sim::ImageInfo> image;
  CUlib_st* library = nullptr;  // the library this is the context's instance of
};

// A library (cuLibraryLoadData): context-independent code, instantiated as one module per
// context that uses it — at load and at context creation when loading is eager, at first
// use of a kernel, module or global when it is lazy (the default).
struct CUlib_st {
  uint64_t id;
  bool eager = false;
  std::shared_ptr<const hami::sim::ImageInfo> image;
  std::string manifest_text;  // the image, when it is a manifest (each instance parses it)
  std::map<std::string, CUkern_st*> kernels;
  std::map<uint64_t, CUmod_st*> modules;  // by context id
};

// A kernel of a library, valid in every context; launching it runs its instance in the
// current context. Attributes set on it apply per device.
struct CUkern_st {
  CUlib_st* library;
  std::string name;
  hami::sim::FunctionSettings settings[hami::sim::kMaxDevices];  // by physical device
};

struct CUarray_st {
  CUctx_st* ctx;
  CUDA_ARRAY3D_DESCRIPTOR desc;
  size_t element_bytes;
  size_t bytes;
  uint64_t charge;
  void* data;
  CUmipmappedArray_st* mipmap = nullptr;  // a level of this mipmapped array (not charged)
};

// Its levels are arrays (registered as such, so copies reach them); the mipmapped array
// is charged for all of them together.
struct CUmipmappedArray_st {
  CUctx_st* ctx;
  CUDA_ARRAY3D_DESCRIPTOR desc;
  uint64_t charge;
  std::vector<CUarray_st*> levels;
};

struct CUmemPoolHandle_st {
  int device;
  bool is_default;
  uint64_t reserved = 0, used = 0;
  uint64_t reserved_high = 0, used_high = 0;
  uint64_t release_threshold = 0;
  int reuse_flags[3] = {1, 1, 1};
  // Sharing: the handle types it was created with, its memfd (null unless exportable or
  // imported), whether another process created it (nothing may be allocated from it), and
  // the access other devices have (by physical index; its own device is always read-write).
  unsigned handle_types = 0;
  std::shared_ptr<hami::sim::PoolFile> file;
  bool imported = false;
  std::map<int, CUmemAccess_flags> access;
};

namespace hami::sim {

enum class NodeKind : uint8_t {
  kKernel,
  kMemcpy,
  kMemset,
  kEmpty,
  kMemAlloc,
  kMemFree,
  kHost,
  kEventRecord,
  kEventWait,
};

}  // namespace hami::sim

struct CUgraphNode_st {
  CUgraph_st* graph;
  hami::sim::NodeKind kind;
  std::vector<CUgraphNode_st*> deps;
  // Kernel.
  CUfunc_st* func = nullptr;
  unsigned grid[3] = {1, 1, 1}, block[3] = {1, 1, 1};
  unsigned shared_mem = 0;
  // Memcpy / memset: kept as the caller described them.
  CUDA_MEMCPY3D copy{};
  CUDA_MEMSET_NODE_PARAMS memset{};
  // Memory nodes.
  std::shared_ptr<hami::sim::GraphAlloc> alloc;
  CUdeviceptr free_ptr = 0;
  // Host node.
  CUhostFn host_fn = nullptr;
  void* host_data = nullptr;
  // Event record and wait nodes.
  CUevent event = nullptr;
  std::map<int, CUkernelNodeAttrValue> attributes;  // kernel node attributes
  // In an executable graph: the graph node this copy was made from (null for nodes the
  // instantiation added), its number of dependencies, and whether it runs.
  CUgraphNode_st* origin = nullptr;
  size_t deps_count = 0;
  bool enabled = true;
};

// A user object (cuUserObjectCreate): `destroy(ptr)` runs when the last reference goes.
struct CUuserObject_st {
  void* ptr;
  CUhostFn destroy;
  unsigned refs;
};

struct CUgraph_st {
  std::vector<CUgraphNode_st*> nodes;  // insertion order; dependencies may point forward
  int instantiated = 0;
  std::map<CUuserObject_st*, unsigned> user_objects;  // references the graph holds
};

struct CUgraphExec_st {
  std::vector<CUgraphNode_st> nodes;  // a copy, in topological order: later edits of the
                                      // graph do not affect it
  CUctx_st* ctx;
  unsigned long long flags = 0;
  std::map<CUuserObject_st*, unsigned> user_objects;
};

namespace hami::sim {

struct VaReservation {
  uintptr_t base;
  size_t size;
};

// The device of a VMM allocation whose pages are host memory (a HOST or HOST_NUMA location).
inline constexpr int kHostPhysical = -1;

struct PhysicalAlloc {
  int device;  // physical index, or kHostPhysical
  size_t size;
  uint64_t charge;            // 0 for host memory and for an import (charged to its creator)
  int fd;                     // memfd backing the physical pages, so several mappings share data
  unsigned handle_types = 0;  // CUmemAllocationHandleType bits it may be exported as
  int mappings = 0;
  int handle_refs = 1;    // cuMemCreate's reference plus cuMemRetainAllocationHandle's
  bool released = false;  // every handle reference has been released
};

struct VaMapping {
  uintptr_t base;
  size_t size;
  CUmemGenericAllocationHandle handle;
  int prot = 0;  // PROT_* granted by cuMemSetAccess
  // A mapping of a multicast object: `offset` is where in the object it starts. No host
  // pages stand behind it; copies into it reach the memory bound to the object.
  bool multicast = false;
  size_t offset = 0;
};

// Memory of one team device that this process bound to a range of a multicast object
// (cuMulticastBindMem, cuMulticastBindAddr).
struct MulticastBinding {
  int device;  // physical
  size_t mc_offset;
  size_t size;
  CUmemGenericAllocationHandle memory;  // a PhysicalAlloc's handle
  size_t mem_offset;
  int slot;  // its entry in the object's shared table
};

// What every process that holds a multicast object shares: its properties, its team and the
// memory each process bound (multicast.cc), in a memfd page.
struct MulticastShared;

// A multicast object (cuMulticastCreate, multicast.cc). It owns no memory: nothing is charged
// for it; a binding does not keep the bound memory alive (cuMemRelease frees memory once its
// handles and mappings are gone, and its bindings go with it). Its handle is a
// CUmemGenericAllocationHandle from the same numbering as cuMemCreate's; released, it lives on
// while a mapping of it is in place, as memory does. Exported as a POSIX file descriptor and
// imported, it is the same object in several processes.
struct MulticastObject {
  unsigned num_devices = 0;
  size_t size = 0;  // bytes each device may bind
  unsigned handle_types = 0;
  int fd = -1;                             // the memfd of `shared`
  MulticastShared* shared = nullptr;       // mapped from fd
  bool shareable_out = false;              // exported or imported: other processes may add devices
  std::vector<MulticastBinding> bindings;  // this process's
  int mappings = 0;
  bool released = false;
};

// A texture or surface object (cuTexObjectCreate, cuSurfObjectCreate).
struct TextureObject {
  bool surface = false;
  CUctx_st* ctx = nullptr;
  CUDA_RESOURCE_DESC res{};
  CUDA_TEXTURE_DESC tex{};
  CUDA_RESOURCE_VIEW_DESC view{};
  bool has_view = false;
};

// Per physical device state of this process.
struct DeviceRt {
  CUctx_st* primary = nullptr;  // the active primary context, or null
  // The primary context's handle: one object for the process's life, handed out before the
  // context is active (the runtime asks for it at start) and reused by every activation.
  CUctx_st* primary_handle = nullptr;
  unsigned primary_flags = 0;
  CUmemPoolHandle_st* default_pool = nullptr;
  CUmemPoolHandle_st* current_pool = nullptr;
  uint64_t graph_used_high = 0, graph_reserved_high = 0;
};

class Driver {
 public:
  std::mutex mu;

  // Set by cuInit (under mu); read without it by the calls that touch only the calling
  // thread's own state, as cuCtxGetCurrent does.
  std::atomic<bool> initialized{false};
  SimOptions options;
  std::vector<DeviceSpec> devices;  // physical
  std::vector<int> visible;         // CUdevice ordinal -> physical index
  std::unique_ptr<SharedState> state;
  std::vector<DeviceRt> rt;

  CUmoduleLoadingMode loading_mode = CU_MODULE_LAZY_LOADING;  // CUDA_MODULE_LOADING
  int slot = -1;  // this process's slot in the state, claimed with its first context
  uint64_t next_id = 1;

  std::unordered_map<const void*, HandleKind> handles;
  std::map<uintptr_t, Allocation> allocations;  // by base address
  std::vector<std::shared_ptr<GraphAlloc>> graph_allocs;
  std::map<uintptr_t, VaReservation> reservations;
  std::map<uintptr_t, VaMapping> mappings;
  std::map<CUmemGenericAllocationHandle, PhysicalAlloc> physical_allocs;
  std::map<CUmemGenericAllocationHandle, MulticastObject> multicasts;
  CUmemGenericAllocationHandle next_physical = 1;
  std::map<unsigned long long, TextureObject> textures;  // texture and surface objects by id
  unsigned long long next_texture = 1;

  bool Live(const void* h, HandleKind kind) const {
    auto it = handles.find(h);
    return it != handles.end() && it->second == kind;
  }
  void Register(const void* h, HandleKind kind) { handles[h] = kind; }
  void Unregister(const void* h) { handles.erase(h); }

  const DeviceSpec& spec(int physical) const { return devices[size_t(physical)]; }
  uint64_t ContextBytes(int physical) const;
  uint64_t Granularity() const { return options.alloc_granularity; }

  // Device memory accounting against the shared state. Charge fails with
  // CUDA_ERROR_OUT_OF_MEMORY at physical capacity.
  CUresult Charge(int physical, uint64_t bytes);
  void Uncharge(int physical, uint64_t bytes);
  CUresult EnsureSlot();

  // Finds the allocation containing [ptr, ptr + bytes), or null.
  Allocation* FindAllocation(uintptr_t ptr, size_t bytes);
  // True when [ptr, ptr + bytes) is memory the simulation backs that the device may read
  // (or write): an allocation, or mapped virtual memory granted that access, possibly over
  // several adjacent mappings.
  enum class Access { kRead, kWrite };
  bool DeviceAccessible(uintptr_t ptr, size_t bytes, Access access);
};

Driver& D();

// Locks the driver for one API call.
class ApiLock {
 public:
  ApiLock() : lock_(D().mu) {}
  std::unique_lock<std::mutex>& lock() { return lock_; }

 private:
  std::unique_lock<std::mutex> lock_;
};

// ---- shared helpers (implemented in context.cc, exec.cc, memory.cc) ----

// The calling thread's current context, or null.
CUctx_st* CurrentContext();
void SetCurrentContext(CUctx_st* ctx);

// CUDA_SUCCESS when initialized and a live context is current (then *ctx is it).
CUresult RequireContext(CUctx_st** ctx);
CUresult RequireInit();
// Maps a CUdevice ordinal to its physical index.
CUresult PhysicalDevice(CUdevice dev, int* physical);

// Resolves a stream handle as the caller meant it (NULL, CU_STREAM_LEGACY,
// CU_STREAM_PER_THREAD, or a created stream). `ptsz` is true for the per-thread-default
// variants of the API, where NULL names the per-thread stream.
CUresult ResolveStream(CUstream handle, bool ptsz, CUstream_st** out);

// An event's recorded time (SetEventTime records it; EventTime is false when the event was
// never recorded); DeleteEvent frees an unregistered event.
void SetEventTime(CUevent_st* e, int64_t time_ns);
bool EventTime(const CUevent_st* e, int64_t* time_ns);
void DeleteEvent(CUevent_st* e);

// Completion time of everything a legacy-stream operation in `ctx` waits for.
int64_t LegacyTail(CUctx_st* ctx);
// Earliest time at which work queued to `s` now may start: after the stream's own work
// and, for a blocking stream, after the legacy stream's.
int64_t StreamTail(CUstream_st* s);
// Time at which the work already queued to `s` is complete (what query/synchronize see).
int64_t StreamDone(CUstream_st* s);
// Sleeps until `deadline_ns` with the driver unlocked.
void WaitUnlocked(ApiLock& api, int64_t deadline_ns);

// Destroys a context and everything it owns (memory returned to the device). A primary
// context's handle object survives for its next activation.
void DestroyContextLocked(CUctx_st* ctx);
// The handle of the primary context of `physical`, active or not (the same object for the
// process's life); never null.
CUctx_st* PrimaryHandleLocked(int physical);
// True for a live context and for every primary-context handle, active or not: what
// cuCtxSetCurrent and cuCtxPushCurrent accept.
bool IsContextHandleLocked(const CUctx_st* ctx);
// Frees every allocation of `ctx` (memory.cc).
void FreeContextMemoryLocked(CUctx_st* ctx);
// Trims the memory pools of `ctx`'s device at a synchronization point (memory.cc).
void TrimPoolsAtSyncLocked(int physical);
// ---- modules, libraries and kernels (module.cc) ----

// A module of `image` in `ctx` (an instance of `library` when it is not null): charges one
// granule and allocates the globals a complete image declares.
CUresult InstantiateModuleLocked(CUctx_st* ctx, std::shared_ptr<const ImageInfo> image,
                                 CUlib_st* library, CUmod_st** out);
void DestroyModuleLocked(CUmod_st* m);
// The function `name` of `m` (one handle per name); CUDA_ERROR_NOT_FOUND when a complete
// image does not declare it.
CUresult ModuleFunctionLocked(CUmod_st* m, const std::string& name, CUfunc_st** out);
CUresult ModuleGlobalLocked(CUmod_st* m, const std::string& name, CUdeviceptr* dptr, size_t* bytes);
// The instance of `lib` in `ctx`, made now when there is none.
CUresult LibraryModuleLocked(CUlib_st* lib, CUctx_st* ctx, CUmod_st** out);
// The instance of kernel `k` in `ctx`.
CUresult KernelFunctionLocked(CUkern_st* k, CUctx_st* ctx, CUfunc_st** out);
// What a CUfunction argument names: a function, or a CUkernel's instance in the current
// context (as the driver accepts a CUkernel wherever a CUfunction is expected).
CUresult FunctionForCallLocked(CUfunction f, CUfunc_st** out);
// Instantiates every eagerly loaded library in a new context.
void InstantiateEagerLibrariesLocked(CUctx_st* ctx);
// CUDA_MODULE_LOADING, as the driver reads it at cuInit: EAGER or LAZY (the default).
CUmoduleLoadingMode LoadingModeFromEnvironment();
// What `image` declares about kernel `name`, or null.
const ImageKernel* DescribedKernel(const ImageInfo& image, const std::string& name);

// A function attribute as cuFuncGetAttribute reports it on a device of profile `p`, and the
// check and update of cuFuncSetAttribute (exec.cc).
CUresult FunctionAttribute(const DeviceProfile& p, const ImageKernel* described,
                           const FunctionSettings& settings, CUfunction_attribute attrib, int* out);
CUresult SetFunctionAttribute(const DeviceProfile& p, CUfunction_attribute attrib, int value,
                              FunctionSettings* settings);

// Appends a node of `kind` to the graph `s` is capturing, after the capture's current
// dependencies, and makes it the new dependency (graph.cc).
CUgraphNode_st* AppendCaptureNode(CUstream_st* s, NodeKind kind);

// Queues a kernel of `func` on `stream` (exec.cc); validates dimensions.
CUresult LaunchLocked(ApiLock& api, CUfunc_st* func, const unsigned grid[3],
                      const unsigned block[3], unsigned shared_mem, CUstream_st* stream,
                      bool cooperative);
// Device time of one launch.
int64_t KernelDurationNs(const DeviceSpec& spec, const SimOptions& options, uint64_t wave_ns,
                         const unsigned grid[3], const unsigned block[3], unsigned shared_mem);

// Memory operations shared by the direct API and graph execution (memory.cc).
CUresult CopyLocked(uintptr_t dst, uintptr_t src, size_t bytes, bool dst_device, bool src_device);
CUresult Copy3DLocked(const CUDA_MEMCPY3D& p);
CUresult MemsetLocked(uintptr_t dst, size_t pitch, unsigned value, unsigned element_size,
                      size_t width, size_t height);
CUresult AllocFromPoolLocked(CUmemPoolHandle_st* pool, CUctx_st* ctx, size_t bytes,
                             CUdeviceptr* out);
CUresult FreeLocked(uintptr_t ptr, bool async);
// Device memory of a module's global in `ctx`, charged as an allocation of `ctx` is; freed by
// FreeModuleGlobalLocked only (cuMemFree refuses it).
CUresult AllocModuleGlobalLocked(CUctx_st* ctx, size_t bytes, CUdeviceptr* out);
void FreeModuleGlobalLocked(CUdeviceptr ptr);
CUresult GraphAllocLaunchLocked(GraphAlloc* a);
void GraphFreeLocked(uintptr_t ptr);
// Drops graph memory that no graph, executable graph or launch can reach any more.
void PruneGraphAllocsLocked();

// ---- multicast objects (multicast.cc) ----

// The recommended multicast granularity (cuMulticastGetGranularity); the minimum is the VMM
// allocation granularity.
inline constexpr size_t kMulticastRecommendedBytes = size_t(512) << 20;

// The handle types a VMM allocation or multicast object may request (memory.cc): POSIX file
// descriptors; the others answer CUDA_ERROR_NOT_SUPPORTED, unknown bits
// CUDA_ERROR_INVALID_VALUE.
CUresult CheckHandleTypes(unsigned types);
// The unreleased multicast object of `handle`, or null.
MulticastObject* FindMulticastLocked(CUmemGenericAllocationHandle handle);
// Whether the multicast object `handle` may be mapped or bound now: every device of its team
// has been added. Where another process may still add some (the object was exported or
// imported), waits for them with the driver unlocked, as the driver does, for at most a
// minute; otherwise (or past that) CUDA_ERROR_NOT_PERMITTED.
CUresult AwaitMulticastTeamLocked(ApiLock& api, CUmemGenericAllocationHandle handle);
// Whether physical device `device` is in the team of `mc`.
bool InMulticastTeamLocked(const MulticastObject& mc, int device);
// cuMemExportToShareableHandle of a multicast object: a descriptor of its memfd.
CUresult ExportMulticastLocked(MulticastObject* mc, CUmemAllocationHandleType type, int* fd);
// cuMemImportFromShareableHandle of a descriptor whose memfd is a multicast object's;
// CUDA_ERROR_NOT_FOUND when it is not one (nothing changed).
CUresult ImportMulticastLocked(int fd, CUmemGenericAllocationHandle* handle);
// A mapping of a multicast object is gone; the object goes too when it was released.
void MulticastUnmappedLocked(CUmemGenericAllocationHandle handle);
// cuMemRelease of a multicast object's handle.
CUresult ReleaseMulticastLocked(CUmemGenericAllocationHandle handle);
// The physical allocation `memory` is freed: its bindings to multicast objects go with it.
void ForgetMulticastBindingsLocked(CUmemGenericAllocationHandle memory);
// A copy of `bytes` from host-visible `src` to `dst`, which lies in a mapping of a multicast
// object: written to the memory every team device bound there. CUDA_ERROR_INVALID_VALUE when
// the range leaves the mapping or a team device has no memory bound under part of it.
CUresult MulticastWriteLocked(const VaMapping& m, uintptr_t dst, const void* src, size_t bytes);
// The VMM mapping `p` lies in, or null (memory.cc).
const VaMapping* FindMappingLocked(uintptr_t p);

// Sets the log level from HAMI_SIM_LOG_LEVEL once, for calls that come before cuInit
// (cuGetProcAddress, cuGetExportTable); true when debug logging is on.
bool ConfigureLogFromEnvironment();

// Converts a project error to the CUresult the boundary reports, logging the message.
CUresult ToCuResult(const Error& error);

}  // namespace hami::sim
