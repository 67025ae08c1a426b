// cuGetExportTable: the driver's private tables that the CUDA runtime (and every NVIDIA
// library, each of which embeds a copy of it) needs during initialization, module
// registration and launch. docs/simulated-gpu.md ("Export tables") lists each table and slot
// and what the model does with it.
//
// A table is an array of pointer-sized words; in all tables but context-local storage, word
// 0 is the table's size in bytes and slot i is word i. A slot whose meaning is not known is
// a function that logs its call and returns CUDA_ERROR_NOT_SUPPORTED. An unknown table is
// CUDA_ERROR_NOT_FOUND, as in the driver. Every call is logged at HAMI_SIM_LOG_LEVEL=4.
#include <pthread.h>
#include <unistd.h>

#include <array>
#include <cinttypes>
#include <cstring>
#include <ctime>
#include <utility>

#include "sim/cuda/integrity.h"
#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

using Uuid = uint8_t[16];

// Table UUIDs, as the bytes the caller passes.
constexpr Uuid kRuntimeInterfaceId = {0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a,
                                      0x89, 0x87, 0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9};
constexpr Uuid kToolsCallbacksId = {0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74,
                                    0x93, 0xf2, 0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66};
constexpr Uuid kToolsTlsId = {0x42, 0xd8, 0x5a, 0x81, 0x23, 0xf6, 0xcb, 0x47,
                              0x82, 0x98, 0xf6, 0xe7, 0x8a, 0x3a, 0xec, 0xdc};
constexpr Uuid kContextStorageId = {0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11,
                                    0xa8, 0xc3, 0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93};
constexpr Uuid kContextChecksId = {0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43,
                                   0x92, 0xf6, 0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e};
constexpr Uuid kToolsContextId = {0x21, 0x31, 0x8c, 0x60, 0x97, 0x14, 0x32, 0x48,
                                  0x8c, 0xa6, 0x41, 0xff, 0x73, 0x24, 0xc8, 0xf2};
constexpr Uuid kToolsModuleId = {0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d,
                                 0x83, 0x5c, 0xe1, 0x82, 0xaf, 0xf1, 0x99, 0x1e};
constexpr Uuid kLtKernelsId = {0x17, 0x34, 0xdc, 0x26, 0x80, 0x0d, 0x47, 0x45,
                               0x87, 0x26, 0xc0, 0xf1, 0xe7, 0xdd, 0x8b, 0xca};
constexpr Uuid kIntegrityId = {0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b,
                               0x8d, 0x34, 0xba, 0x12, 0x3c, 0x66, 0xe1, 0xf2};

enum class Table {
  kRuntimeInterface,
  kToolsCallbacks,
  kToolsTls,
  kContextChecks,
  kIntegrity,
  kToolsContext,
  kToolsModule,
  kLtKernels,
};

const char* TableName(Table t) {
  switch (t) {
    case Table::kRuntimeInterface:
      return "runtime-interface";
    case Table::kToolsCallbacks:
      return "tools-callbacks";
    case Table::kToolsTls:
      return "tools-tls";
    case Table::kContextChecks:
      return "context-checks";
    case Table::kIntegrity:
      return "integrity";
    case Table::kToolsContext:
      return "tools-context";
    case Table::kToolsModule:
      return "tools-module";
    case Table::kLtKernels:
      return "lt-kernels";
  }
  return "?";
}

// 8-4-4-4-12 lower-case hex digits, as NVIDIA's tools print a UUID.
std::string UuidText(const CUuuid* id) { return GpuUuidString(id->bytes).substr(4); }

// A slot whose meaning the model does not know: logged, CUDA_ERROR_NOT_SUPPORTED. Called
// with whatever arguments the caller passes (the C calling convention ignores them).
template <Table kTable, int kSlot>
CUresult UnknownSlot(uint64_t a, uint64_t b, uint64_t c, uint64_t d, uint64_t e, uint64_t f) {
  g_log.Log(LogLevel::kInfo,
            "export table %s slot %d is not modelled by the simulated GPU: "
            "CUDA_ERROR_NOT_SUPPORTED (arguments %" PRIx64 " %" PRIx64 " %" PRIx64 " %" PRIx64
            " %" PRIx64 " %" PRIx64 ")",
            TableName(kTable), kSlot, a, b, c, d, e, f);
  return CUDA_ERROR_NOT_SUPPORTED;
}

template <Table kTable, int kSlot>
void* Unknown() {
  return reinterpret_cast<void*>(&UnknownSlot<kTable, kSlot>);
}

void* Word(size_t v) { return reinterpret_cast<void*>(v); }

template <typename F>
void* Fn(F* f) {
  return reinterpret_cast<void*>(f);
}

// ---- runtime interface ----

CUresult LoadWrappedModule(CUmodule* out, const void* image, const char* slot) {
  g_log.Log(LogLevel::kDebug, "export table runtime-interface %s: load module %p", slot, image);
  return cuModuleLoadData(out, image);
}

CUresult RtLoadWrapper(CUmodule* out, const void* wrapper) {
  return LoadWrappedModule(out, wrapper, "slot 1");
}

CUresult RtLoadWrapperEx(CUmodule* out, const void* wrapper, void*, void*, unsigned) {
  return LoadWrappedModule(out, wrapper, "slot 6");
}

CUresult RtLoadFatbin(const void* fatbin, CUmodule* out, void*, void*, unsigned) {
  return LoadWrappedModule(out, fatbin, "slot 8");
}

// The primary context of `dev`, active or not, without taking a reference: the handle
// cuDevicePrimaryCtxRetain returns.
CUresult RtPrimaryContext(CUcontext* out, CUdevice dev) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  *out = PrimaryHandleLocked(p);
  g_log.Log(LogLevel::kDebug, "export table runtime-interface slot 2: device %d -> %p", dev,
            static_cast<void*>(*out));
  return CUDA_SUCCESS;
}

void RtIgnore(uintptr_t) {}

// Loads the JIT compilers: nothing to load here.
CUresult RtLoadCompilers() { return CUDA_SUCCESS; }

void* const kRuntimeInterface[13] = {
    Word(sizeof(kRuntimeInterface)),
    Fn(&RtLoadWrapper),
    Fn(&RtPrimaryContext),
    Unknown<Table::kRuntimeInterface, 3>(),
    Unknown<Table::kRuntimeInterface, 4>(),
    Unknown<Table::kRuntimeInterface, 5>(),
    Fn(&RtLoadWrapperEx),
    Fn(&RtIgnore),
    Fn(&RtLoadFatbin),
    Unknown<Table::kRuntimeInterface, 9>(),
    Unknown<Table::kRuntimeInterface, 10>(),
    Unknown<Table::kRuntimeInterface, 11>(),
    Fn(&RtLoadCompilers),
};

// ---- tools runtime callbacks ----

// Two process-lifetime, zeroed buffers the runtime's tool support writes into.
uint32_t g_callback_buffer[1024];
uint32_t g_callback_flags[14];

void HooksBuffer(void** buf, size_t* n) {
  if (buf != nullptr) *buf = g_callback_buffer;
  if (n != nullptr) *n = std::size(g_callback_buffer);
}

void HooksFlags(void** buf, size_t* n) {
  if (buf != nullptr) *buf = g_callback_flags;
  if (n != nullptr) *n = std::size(g_callback_flags);
}

void* const kToolsCallbacks[7] = {
    Word(sizeof(kToolsCallbacks)),
    Unknown<Table::kToolsCallbacks, 1>(),
    Fn(&HooksBuffer),
    Unknown<Table::kToolsCallbacks, 3>(),
    Unknown<Table::kToolsCallbacks, 4>(),
    Unknown<Table::kToolsCallbacks, 5>(),
    Fn(&HooksFlags),
};

// ---- tools thread-local state ----

// Called by cuBLASLt while it creates a handle, with (pointer, small integer, pointer,
// pointer, 0, 0): no tool is attached, so there is nothing to report.
CUresult ToolsTlsQuery() { return CUDA_SUCCESS; }

void* const kToolsTls[4] = {
    Word(sizeof(kToolsTls)),
    Unknown<Table::kToolsTls, 1>(),
    Fn(&ToolsTlsQuery),
    Unknown<Table::kToolsTls, 3>(),
};

// ---- context-local storage (no size word) ----

CUresult StorageContext(CUcontext ctx, CUctx_st** out) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (ctx == nullptr) {
    ctx = CurrentContext();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (!D().Live(ctx, HandleKind::kContext)) return CUDA_ERROR_INVALID_CONTEXT;
  *out = ctx;
  return CUDA_SUCCESS;
}

CUresult StoragePut(CUcontext ctx, void* key, void* value,
                    void (*dtor)(CUcontext, void* key, void* value)) {
  ApiLock api;
  CUctx_st* c;
  if (CUresult r = StorageContext(ctx, &c); r != CUDA_SUCCESS) return r;
  c->storage[key] = {value, dtor};
  g_log.Log(LogLevel::kDebug, "export table context-storage put ctx=%p key=%p",
            static_cast<void*>(c), key);
  return CUDA_SUCCESS;
}

CUresult StorageDelete(CUcontext ctx, void* key) {
  ApiLock api;
  CUctx_st* c;
  if (CUresult r = StorageContext(ctx, &c); r != CUDA_SUCCESS) return r;
  return c->storage.erase(key) == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

// A missing entry is an error: the runtime then builds its state and puts it.
CUresult StorageGet(void** value, CUcontext ctx, void* key) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* c;
  if (CUresult r = StorageContext(ctx, &c); r != CUDA_SUCCESS) return r;
  auto it = c->storage.find(key);
  if (it == c->storage.end()) return CUDA_ERROR_INVALID_HANDLE;
  *value = it->second.value;
  return CUDA_SUCCESS;
}

void* const kContextStorage[4] = {Fn(&StoragePut), Fn(&StorageDelete), Fn(&StorageGet), nullptr};

// ---- context checks ----

// Reports a context's special state: none (bits never set on this model).
CUresult ContextState(CUcontext, uint32_t* state, void**) {
  if (state != nullptr) *state = 0;
  return CUDA_SUCCESS;
}

uint32_t ContextChecksInit() { return 0; }

void* const kContextChecks[4] = {
    Word(sizeof(kContextChecks)),
    Unknown<Table::kContextChecks, 1>(),
    Fn(&ContextState),
    Fn(&ContextChecksInit),
};

// ---- integrity check ----

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t out[2]);

CUresult IntegrityEnable(int) { return CUDA_SUCCESS; }

void* const kIntegrity[3] = {
    Word(sizeof(kIntegrity)),
    Fn(&IntegrityCheck),
    Fn(&IntegrityEnable),
};

CUresult IntegrityCheck(uint32_t version, uint64_t unix_seconds, uint64_t out[2]) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  IntegrityCaller caller;
  std::vector<IntegrityDevice> devices;
  {
    ApiLock api;
    if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
    const Driver& d = D();
    caller.driver_version = uint32_t(d.options.driver_version);
    for (int physical : d.visible) {
      const DeviceSpec& s = d.spec(physical);
      IntegrityDevice dev;
      std::memcpy(dev.uuid, s.uuid_bytes, sizeof(dev.uuid));
      dev.pci_domain = s.pci_domain;
      dev.pci_bus = s.pci_bus;
      dev.pci_device = s.pci_device;
      devices.push_back(dev);
    }
  }
  caller.pid = uint32_t(getpid());
  caller.thread_low32 = uint32_t(uint64_t(pthread_self()));
  caller.runtime_table = reinterpret_cast<uintptr_t>(&kRuntimeInterface);
  caller.integrity_table = reinterpret_cast<uintptr_t>(&kIntegrity);
  caller.check_function = reinterpret_cast<uintptr_t>(kIntegrity[1]);
  bool known = IntegrityAnswer(caller, version, unix_seconds, devices, out);
  g_log.Log(LogLevel::kDebug, "export table integrity slot 1: version=%u time=%" PRIu64 " -> %s",
            version, unix_seconds, known ? "answered" : "unknown request");
  return known ? CUDA_SUCCESS : CUDA_ERROR_NOT_SUPPORTED;
}

// ---- tools context (95 words; cuBLAS, cuBLASLt and cuFFT ask for it) ----
//
// Three slots are called by the libraries of CUDA 13.0; their meanings are not public. The
// answers are those a public stand-in driver gives, which let the libraries go on.

// (u64 value, u64* out): writes 1 for a non-zero value, else 0. cuBLASLt asks ~75 times
// while it creates a handle and chooses kernels.
CUresult ToolsContextFlag(uint64_t value, uint64_t* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = value != 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// (handle, u64 key, u64* out): writes 0. cuBLAS asks once before its first GEMM.
CUresult ToolsContextQuery(void*, uint64_t key, uint64_t* out) {
  if (key == 0 || out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *out = 0;
  return CUDA_SUCCESS;
}

// (handle, u64 key, void** out): hands out a process-lifetime zeroed object; the key ~0 is
// refused as an invalid handle. cuBLAS asks once before its first GEMM.
uint64_t g_tools_context_object[64];
CUresult ToolsContextObject(void*, uint64_t key, void** out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (key == UINT64_MAX) return CUDA_ERROR_INVALID_HANDLE;
  *out = g_tools_context_object;
  return CUDA_SUCCESS;
}

template <Table kTable, size_t... I>
constexpr std::array<void*, sizeof...(I) + 1> UnknownSlots(std::index_sequence<I...>) {
  return {Word(8 * (sizeof...(I) + 1)), Unknown<kTable, int(I) + 1>()...};
}

std::array<void*, 95> MakeToolsContext() {
  auto t = UnknownSlots<Table::kToolsContext>(std::make_index_sequence<94>());
  t[4] = Fn(&ToolsContextFlag);
  t[39] = Fn(&ToolsContextQuery);
  t[51] = Fn(&ToolsContextObject);
  return t;
}
const std::array<void*, 95> kToolsContext = MakeToolsContext();

// ---- tools module (cuFFT asks for it) ----
//
// Slot 7 walks the functions of a module. cuFFT loads each kernel it uses as a module
// holding that one kernel (LZ4-compressed PTX, or an LZ4-compressed cubin for large sizes),
// asks this slot for "the" function (its visitor keeps the last function it is given) and
// requires the count to be exactly 1; then it queries the function's attributes and
// launches it with cuLaunchKernel, as any CUfunction.

// Called once per function: (opaque, function, the module it belongs to).
using FunctionVisitor = void (*)(void* opaque, CUfunction f, CUmodule owner);

// (ctx, module, visitor, opaque) -> how many functions were visited: the module's kernels in
// name order. 0 for a module that is not live or not of `ctx` (NULL: any), and for one
// whose image the model cannot list (compressed with Zstandard, say). The visitor runs with
// the driver unlocked.
unsigned ToolsModuleEachFunction(CUcontext ctx, CUmodule m, FunctionVisitor visit, void* opaque) {
  std::vector<CUfunction> functions;
  {
    ApiLock api;
    if (RequireInit() != CUDA_SUCCESS || !D().Live(m, HandleKind::kModule) ||
        (ctx != nullptr && ctx != m->ctx)) {
      g_log.Log(LogLevel::kInfo, "export table tools-module slot 7: %p is no module of context %p",
                static_cast<void*>(m), static_cast<void*>(ctx));
      return 0;
    }
    if (!m->image->complete) {
      g_log.Log(LogLevel::kInfo,
                "export table tools-module slot 7: the model cannot list the functions of "
                "module %p (its image is one it cannot see into)",
                static_cast<void*>(m));
      return 0;
    }
    for (const auto& [name, k] : m->image->kernels) {
      CUfunction f;
      if (ModuleFunctionLocked(m, name, &f) != CUDA_SUCCESS) return 0;
      functions.push_back(f);
    }
  }
  g_log.Log(LogLevel::kDebug, "export table tools-module slot 7: module %p has %zu functions",
            static_cast<void*>(m), functions.size());
  if (visit != nullptr) {
    for (CUfunction f : functions) visit(opaque, f, m);
  }
  return unsigned(functions.size());
}

// 64 words: the real table's size is not known (cuFFT requires more than 7); its other
// slots are not modelled.
std::array<void*, 64> MakeToolsModule() {
  auto t = UnknownSlots<Table::kToolsModule>(std::make_index_sequence<63>());
  t[7] = Fn(&ToolsModuleEachFunction);
  return t;
}
const std::array<void*, 64> kToolsModule = MakeToolsModule();

// ---- the table cuBLASLt asks for when it chooses half-precision kernels ----
//
// Found by running cuBLASLt 13 on the simulated GPU: cublasLtMatmulAlgoGetHeuristic for FP16
// and BF16 on compute capability 9.0 asks for this table and dereferences what it gets
// (without it, the process dies of SIGSEGV); it then calls slot 4 and goes on when the slot
// answers CUDA_ERROR_NOT_SUPPORTED. What the table is for is not public: every slot is
// unknown, and its size (64 words) is a guess that covers what was seen.
const std::array<void*, 64> kLtKernels =
    UnknownSlots<Table::kLtKernels>(std::make_index_sequence<63>());

struct TableEntry {
  const uint8_t* id;
  const void* table;
  const char* name;
};

const TableEntry kTables[] = {
    {kRuntimeInterfaceId, kRuntimeInterface, "runtime-interface"},
    {kToolsCallbacksId, kToolsCallbacks, "tools-callbacks"},
    {kToolsTlsId, kToolsTls, "tools-tls"},
    {kContextStorageId, kContextStorage, "context-storage"},
    {kContextChecksId, kContextChecks, "context-checks"},
    {kIntegrityId, kIntegrity, "integrity"},
    {kToolsContextId, kToolsContext.data(), "tools-context"},
    {kToolsModuleId, kToolsModule.data(), "tools-module"},
    {kLtKernelsId, kLtKernels.data(), "lt-kernels"},
};

}  // namespace

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

CUresult CUDAAPI cuGetExportTable(const void** ppExportTable, const CUuuid* pExportTableId) {
  if (ppExportTable == nullptr || pExportTableId == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ConfigureLogFromEnvironment();
  for (const TableEntry& t : kTables) {
    if (std::memcmp(t.id, pExportTableId->bytes, 16) == 0) {
      *ppExportTable = t.table;
      g_log.Log(LogLevel::kDebug, "cuGetExportTable %s -> %s", UuidText(pExportTableId).c_str(),
                t.name);
      return CUDA_SUCCESS;
    }
  }
  *ppExportTable = nullptr;
  g_log.Log(LogLevel::kDebug, "cuGetExportTable %s -> CUDA_ERROR_NOT_FOUND",
            UuidText(pExportTableId).c_str());
  return CUDA_ERROR_NOT_FOUND;
}

}  // extern "C"
