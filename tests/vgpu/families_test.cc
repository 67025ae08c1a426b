// Every accounting family, through every route a program can reach the driver by: direct
// relocation, dlsym (RTLD_DEFAULT, RTLD_NEXT, a dlopen handle of libcuda.so.1) and
// cuGetProcAddress / cuGetProcAddress_v2 asked for the newest ABI and for the oldest version
// that has the ABI used. Each family checks that what it allocates is charged to this
// process's slot under the right kind, refused past the limit with nothing left behind,
// and returned when freed.
//
// The families run are those the hook list reaches: every row of cuda_hooks.def with an
// accounting policy (kContext, kAdmit, kRelease, kReconcile) is mapped in kCoverage to the
// family case that exercises it, and a row without one fails FamilyCoverage by name.
#include <cuda.h>
#include <dlfcn.h>
#include <unistd.h>

#include <array>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/strings.h"
#include "region/region.h"
#include "vgpu/hooks.h"
#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

// The families run on h100-hgx (h100-80g's numbers, on NVLink switches), where the multicast
// family has the switch it needs; set before the environment's default (vgpu_env.h) applies.
[[maybe_unused]] const bool kOnAnNvSwitchBoard = setenv("HAMI_SIM_PROFILE", "h100-hgx:2", 0) == 0;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGranule = 2 * kMiB;  // the simulated devices' allocation granularity
using region::UsageKind;
using vgpu::Policy;

// The driver functions the families call, each with the base name cuGetProcAddress takes
// and the version that introduced the ABI used (its newest).
#define HAMI_FAMILY_API(X)                                                 \
  X(cuMemAlloc_v2, cuMemAlloc, 3020)                                       \
  X(cuMemFree_v2, cuMemFree, 3020)                                         \
  X(cuMemAllocPitch_v2, cuMemAllocPitch, 3020)                             \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000)                            \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020)                               \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020)                                 \
  X(cuMemAllocFromPoolAsync, cuMemAllocFromPoolAsync, 11020)               \
  X(cuMemPoolCreate, cuMemPoolCreate, 11020)                               \
  X(cuMemPoolDestroy, cuMemPoolDestroy, 11020)                             \
  X(cuMemPoolTrimTo, cuMemPoolTrimTo, 11020)                               \
  X(cuMemPoolSetAttribute, cuMemPoolSetAttribute, 11020)                   \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000)                        \
  X(cuMemCreate, cuMemCreate, 10020)                                       \
  X(cuMemRelease, cuMemRelease, 10020)                                     \
  X(cuMemAddressReserve, cuMemAddressReserve, 10020)                       \
  X(cuMemAddressFree, cuMemAddressFree, 10020)                             \
  X(cuMemMap, cuMemMap, 10020)                                             \
  X(cuMemRetainAllocationHandle, cuMemRetainAllocationHandle, 11000)       \
  X(cuMemUnmap, cuMemUnmap, 10020)                                         \
  X(cuMemImportFromShareableHandle, cuMemImportFromShareableHandle, 10020) \
  X(cuMemPoolImportPointer, cuMemPoolImportPointer, 11020)                 \
  X(cuMulticastAddDevice, cuMulticastAddDevice, 12010)                     \
  X(cuMulticastBindMem, cuMulticastBindMem, 12010)                         \
  X(cuMulticastBindAddr, cuMulticastBindAddr, 12010)                       \
  X(cuArrayCreate_v2, cuArrayCreate, 3020)                                 \
  X(cuArray3DCreate_v2, cuArray3DCreate, 3020)                             \
  X(cuArrayDestroy, cuArrayDestroy, 2000)                                  \
  X(cuMipmappedArrayCreate, cuMipmappedArrayCreate, 5000)                  \
  X(cuMipmappedArrayDestroy, cuMipmappedArrayDestroy, 5000)                \
  X(cuGraphCreate, cuGraphCreate, 10000)                                   \
  X(cuGraphDestroy, cuGraphDestroy, 10000)                                 \
  X(cuGraphAddMemAllocNode, cuGraphAddMemAllocNode, 11040)                 \
  X(cuGraphAddMemFreeNode, cuGraphAddMemFreeNode, 11040)                   \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040)       \
  X(cuGraphLaunch, cuGraphLaunch, 10000)                                   \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000)                         \
  X(cuDeviceGraphMemTrim, cuDeviceGraphMemTrim, 11040)                     \
  X(cuStreamBeginCapture_v2, cuStreamBeginCapture, 10010)                  \
  X(cuStreamEndCapture, cuStreamEndCapture, 10000)                         \
  X(cuModuleLoadData, cuModuleLoadData, 2000)                              \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010)                          \
  X(cuModuleUnload, cuModuleUnload, 2000)                                  \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000)                        \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000)                           \
  X(cuLibraryUnload, cuLibraryUnload, 12000)                               \
  X(cuLibraryGetKernel, cuLibraryGetKernel, 12000)                         \
  X(cuKernelGetFunction, cuKernelGetFunction, 12000)                       \
  X(cuLibraryGetModule, cuLibraryGetModule, 12000)                         \
  X(cuLibraryGetGlobal, cuLibraryGetGlobal, 12000)                         \
  X(cuMemAllocHost_v2, cuMemAllocHost, 3020)                               \
  X(cuMemFreeHost, cuMemFreeHost, 2000)                                    \
  X(cuCtxCreate_v4, cuCtxCreate, 12050)                                    \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000)              \
  X(cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxRelease, 11000)        \
  X(cuCtxDestroy_v2, cuCtxDestroy, 4000)                                   \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000)

struct Api {
#define HAMI_FIELD(name, base, version) decltype(&::name) name = nullptr;
  HAMI_FAMILY_API(HAMI_FIELD)
#undef HAMI_FIELD
};

enum class Route {
  kDirect,
  kDlsymDefault,
  kDlsymNext,
  kDlopenHandle,
  kProcAddressNewest,
  kProcAddressOldest,
  kProcAddressV2Newest,
  kProcAddressV2Oldest,
};

const char* RouteName(Route r) {
  switch (r) {
    case Route::kDirect:
      return "Direct";
    case Route::kDlsymDefault:
      return "DlsymDefault";
    case Route::kDlsymNext:
      return "DlsymNext";
    case Route::kDlopenHandle:
      return "DlopenHandle";
    case Route::kProcAddressNewest:
      return "ProcAddressNewest";
    case Route::kProcAddressOldest:
      return "ProcAddressOldest";
    case Route::kProcAddressV2Newest:
      return "ProcAddressV2Newest";
    case Route::kProcAddressV2Oldest:
      return "ProcAddressV2Oldest";
  }
  return "?";
}

void* Lookup(Route route, void* direct, const char* name, const char* base, int version) {
  void* p = nullptr;
  switch (route) {
    case Route::kDirect:
      return direct;
    case Route::kDlsymDefault:
      return dlsym(RTLD_DEFAULT, name);
    case Route::kDlsymNext:
      return dlsym(RTLD_NEXT, name);
    case Route::kDlopenHandle: {
      void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD);
      return h != nullptr ? dlsym(h, name) : nullptr;
    }
    case Route::kProcAddressNewest:
    case Route::kProcAddressOldest: {
      int v = route == Route::kProcAddressNewest ? CUDA_VERSION : version;
      return cuGetProcAddress(base, &p, v, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS ? p
                                                                                        : nullptr;
    }
    case Route::kProcAddressV2Newest:
    case Route::kProcAddressV2Oldest: {
      int v = route == Route::kProcAddressV2Newest ? CUDA_VERSION : version;
      CUdriverProcAddressQueryResult status;
      return cuGetProcAddress_v2(base, &p, v, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS
                 ? p
                 : nullptr;
    }
  }
  return nullptr;
}

// Fills every field through `route`; false (with the failure recorded) if one is missing.
bool Resolve(Route route, Api* api) {
  bool ok = true;
#define HAMI_RESOLVE(name, base, version)                                      \
  api->name = reinterpret_cast<decltype(&::name)>(                             \
      Lookup(route, reinterpret_cast<void*>(&::name), #name, #base, version)); \
  if (api->name == nullptr) {                                                  \
    ADD_FAILURE() << RouteName(route) << " found no " #name;                   \
    ok = false;                                                                \
  }
  HAMI_FAMILY_API(HAMI_RESOLVE)
#undef HAMI_RESOLVE
  return ok;
}

// This process's charges on device 0, by kind.
std::array<uint64_t, region::kUsageKinds> MyUsage() {
  std::array<uint64_t, region::kUsageKinds> out{};
  auto reg = OpenRegionReadOnly(VgpuEnv::Get().region);
  if (reg == nullptr) return out;
  int mine = -1;
  for (const region::SlotView& s : reg->Slots()) {
    if (s.pid == getpid() && s.alive) mine = s.index;
  }
  for (const auto& [slot, kinds] : reg->Snapshot(0).slots) {
    if (slot == mine) out = kinds;
  }
  return out;
}

uint64_t Kind(UsageKind k) { return MyUsage()[size_t(k)]; }

// Other processes' memory this process's slot records as mapped here (never charged).
uint64_t MyImported() {
  auto reg = OpenRegionReadOnly(VgpuEnv::Get().region);
  if (reg == nullptr) return 0;
  for (const region::SlotView& s : reg->Slots()) {
    if (s.pid == getpid() && s.alive) return s.imported_bytes;
  }
  return 0;
}

struct Case {
  const char* family;
  void (*run)(const Api& api, uint64_t free_bytes);
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.family; }
void PrintTo(Route r, std::ostream* os) { *os << RouteName(r); }

// ---- the families ----

void Linear(const Api& api, uint64_t free_bytes) {
  const uint64_t data = Kind(UsageKind::kData);
  CUdeviceptr p = 0;
  ASSERT_EQ(api.cuMemAlloc_v2(&p, 64 * kMiB + 1), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data + 66 * kMiB) << "rounded up to whole granules";
  EXPECT_EQ(VgpuTest::FreeBytes(), free_bytes - 66 * kMiB);
  CUdeviceptr q = 0;
  EXPECT_EQ(api.cuMemAlloc_v2(&q, VgpuTest::FreeBytes() + kMiB), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Kind(UsageKind::kData), data + 66 * kMiB) << "a refusal leaves nothing behind";
  ASSERT_EQ(api.cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data);
}

void Pitched(const Api& api, uint64_t) {
  const uint64_t data = Kind(UsageKind::kData);
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(api.cuMemAllocPitch_v2(&p, &pitch, 1000, 3000, 4), CUDA_SUCCESS);
  ASSERT_GE(pitch, 1000u);
  EXPECT_EQ(Kind(UsageKind::kData), data + RoundUp(pitch * 3000, kGranule))
      << "the real pitch times the height";
  ASSERT_EQ(api.cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data);
}

void Managed(const Api& api, uint64_t free_bytes) {
  const uint64_t data = Kind(UsageKind::kData);
  CUdeviceptr p = 0;
  ASSERT_EQ(api.cuMemAllocManaged(&p, 8 * kMiB, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data + 8 * kMiB);
  CUdeviceptr q = 0;
  EXPECT_EQ(api.cuMemAllocManaged(&q, free_bytes, CU_MEM_ATTACH_GLOBAL), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api.cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data);
}

void StreamOrdered(const Api& api, uint64_t free_bytes) {
  CUdeviceptr p = 0;
  ASSERT_EQ(api.cuMemAllocAsync(&p, 16 * kMiB, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 16 * kMiB) << "the default pool's reserved memory";
  CUdeviceptr q = 0;
  EXPECT_EQ(api.cuMemAllocAsync(&q, free_bytes, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Kind(UsageKind::kPool), 16 * kMiB);
  ASSERT_EQ(api.cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 16 * kMiB) << "freed memory stays in the pool until a sync";
  ASSERT_EQ(api.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 0u) << "the release threshold (0) gave it back";
}

void OwnPool(const Api& api, uint64_t) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr;
  ASSERT_EQ(api.cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  cuuint64_t keep = ~cuuint64_t(0);
  ASSERT_EQ(api.cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &keep),
            CUDA_SUCCESS);
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(api.cuMemAllocFromPoolAsync(&a, 8 * kMiB, pool, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemAllocFromPoolAsync(&b, 8 * kMiB, pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 16 * kMiB);
  ASSERT_EQ(api.cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 16 * kMiB) << "the pool keeps its high-water";
  ASSERT_EQ(api.cuMemAllocFromPoolAsync(&a, 8 * kMiB, pool, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 16 * kMiB) << "reuse of cached memory costs nothing";
  ASSERT_EQ(api.cuMemFreeAsync(a, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemFreeAsync(b, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemPoolTrimTo(pool, 4 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 4 * kMiB) << "a trim gives back all but what it keeps";
  ASSERT_EQ(api.cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 0u);
}

void VirtualMemory(const Api& api, uint64_t free_bytes) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(api.cuMemCreate(&h, 32 * kMiB, &prop, 0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 32 * kMiB);
  CUmemGenericAllocationHandle big = 0;
  EXPECT_EQ(api.cuMemCreate(&big, RoundUp(free_bytes, kGranule), &prop, 0),
            CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr va = 0;
  ASSERT_EQ(api.cuMemAddressReserve(&va, 32 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemMap(va, 32 * kMiB, 0, h, 0), CUDA_SUCCESS);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(api.cuMemRetainAllocationHandle(&again, reinterpret_cast<void*>(va)), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemRelease(h), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 32 * kMiB) << "still mapped: the memory is still held";
  ASSERT_EQ(api.cuMemUnmap(va, 32 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 32 * kMiB) << "a retained handle is still unreleased";
  ASSERT_EQ(api.cuMemRelease(again), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 0u) << "released and unmapped";
  EXPECT_EQ(api.cuMemAddressFree(va, 32 * kMiB), CUDA_SUCCESS);
}

// A multicast object imported from a descriptor (here from this same process): not memory.
// Each of three imported handles of it is told apart by another hook (a device added, memory
// bound by handle, memory bound by address), and its mapping is then not recorded as imported;
// nothing is charged for the object, only for the memory bound to it.
void MulticastImport(const Api& api, uint64_t) {
  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  prop.size = kGranule;
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle mc = 0;
  ASSERT_EQ(cuMulticastCreate(&mc, &prop), CUDA_SUCCESS);
  auto import = [&](CUmemGenericAllocationHandle* out) {
    int fd = -1;
    ASSERT_EQ(cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemImportFromShareableHandle(out, reinterpret_cast<void*>(intptr_t(fd)),
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_SUCCESS);
    close(fd);
  };
  CUmemGenericAllocationHandle added = 0, by_memory = 0, by_address = 0;
  ASSERT_NO_FATAL_FAILURE(import(&added));
  ASSERT_NO_FATAL_FAILURE(import(&by_memory));
  ASSERT_NO_FATAL_FAILURE(import(&by_address));
  ASSERT_EQ(api.cuMulticastAddDevice(added, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastAddDevice(mc, 1), CUDA_SUCCESS);

  CUmemAllocationProp mem{};
  mem.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  mem.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  mem.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle a = 0, b = 0;
  mem.location.id = 0;
  ASSERT_EQ(cuMemCreate(&a, kGranule, &mem, 0), CUDA_SUCCESS);
  mem.location.id = 1;
  ASSERT_EQ(cuMemCreate(&b, kGranule, &mem, 0), CUDA_SUCCESS);
  CUmemAccessDesc access[2] = {};
  for (int d = 0; d < 2; ++d) {
    access[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[d].location.id = d;
    access[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CUdeviceptr b_va = 0;
  ASSERT_EQ(cuMemAddressReserve(&b_va, kGranule, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(b_va, kGranule, 0, b, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetAccess(b_va, kGranule, access, 2), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMulticastBindMem(by_memory, 0, a, 0, kGranule, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMulticastBindAddr(by_address, 0, b_va, kGranule, 0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), kGranule) << "device 0's bound memory, once";

  for (CUmemGenericAllocationHandle h : {added, by_memory, by_address}) {
    CUdeviceptr va = 0;
    ASSERT_EQ(cuMemAddressReserve(&va, kGranule, 0, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemMap(va, kGranule, 0, h, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMemSetAccess(va, kGranule, access, 2), CUDA_SUCCESS);
    EXPECT_EQ(MyImported(), 0u) << "a multicast object's mapping is no other process's memory";
    EXPECT_EQ(Kind(UsageKind::kVmm), kGranule) << "nothing charged for the object";
    ASSERT_EQ(api.cuMemUnmap(va, kGranule), CUDA_SUCCESS);
    ASSERT_EQ(cuMemAddressFree(va, kGranule), CUDA_SUCCESS);
  }
  ASSERT_EQ(cuMemUnmap(b_va, kGranule), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAddressFree(b_va, kGranule), CUDA_SUCCESS);
  for (CUmemGenericAllocationHandle h : {added, by_memory, by_address, mc, a, b}) {
    ASSERT_EQ(api.cuMemRelease(h), CUDA_SUCCESS);
  }
  EXPECT_EQ(MyImported(), 0u);
}

// Memory imported from a shareable handle and from an exported pool pointer (here from this
// same process, as the driver allows; share_patterns_test does it across processes): recorded
// while mapped, never charged a second time.
void Imports(const Api& api, uint64_t) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = 0;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle h = 0, imported = 0;
  ASSERT_EQ(cuMemCreate(&h, 8 * kMiB, &prop, 0), CUDA_SUCCESS);
  int fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(intptr_t(fd)),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_SUCCESS);
  close(fd);
  EXPECT_EQ(MyImported(), 0u) << "a handle alone maps nothing";
  CUdeviceptr va = 0;
  ASSERT_EQ(api.cuMemAddressReserve(&va, 8 * kMiB, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemMap(va, 8 * kMiB, 0, imported, 0), CUDA_SUCCESS);
  EXPECT_EQ(MyImported(), 8 * kMiB);
  EXPECT_EQ(Kind(UsageKind::kVmm), 8 * kMiB) << "charged once, to its creation";
  ASSERT_EQ(api.cuMemRelease(imported), CUDA_SUCCESS);
  EXPECT_EQ(MyImported(), 8 * kMiB) << "still mapped";
  ASSERT_EQ(api.cuMemUnmap(va, 8 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(MyImported(), 0u);
  ASSERT_EQ(api.cuMemAddressFree(va, 8 * kMiB), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemRelease(h), CUDA_SUCCESS);

  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = nullptr, opened = nullptr;
  ASSERT_EQ(api.cuMemPoolCreate(&pool, &props), CUDA_SUCCESS);
  ASSERT_EQ(
      cuMemPoolExportToShareableHandle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
      CUDA_SUCCESS);
  ASSERT_EQ(cuMemPoolImportFromShareableHandle(&opened, reinterpret_cast<void*>(intptr_t(fd)),
                                               CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  close(fd);
  CUdeviceptr p = 0, q = 0;
  ASSERT_EQ(api.cuMemAllocFromPoolAsync(&p, 4 * kMiB, pool, nullptr), CUDA_SUCCESS);
  CUmemPoolPtrExportData data{};
  ASSERT_EQ(cuMemPoolExportPointer(&data, p), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemPoolImportPointer(&q, opened, &data), CUDA_SUCCESS);
  EXPECT_EQ(MyImported(), 4 * kMiB);
  EXPECT_EQ(Kind(UsageKind::kPool), 4 * kMiB) << "charged once, to the exporting pool";
  ASSERT_EQ(api.cuMemFreeAsync(q, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(MyImported(), 0u);
  ASSERT_EQ(api.cuMemFreeAsync(p, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemPoolDestroy(opened), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemPoolDestroy(pool), CUDA_SUCCESS);
  EXPECT_EQ(MyImported(), 0u);
}

void Arrays(const Api& api, uint64_t free_bytes) {
  const uint64_t data = Kind(UsageKind::kData);
  CUDA_ARRAY_DESCRIPTOR d2{};
  d2.Width = 1024;
  d2.Height = 1024;
  d2.Format = CU_AD_FORMAT_FLOAT;
  d2.NumChannels = 4;
  CUarray a = nullptr;
  ASSERT_EQ(api.cuArrayCreate_v2(&a, &d2), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data + 16 * kMiB);
  CUDA_ARRAY3D_DESCRIPTOR d3{};
  d3.Width = 1000;
  d3.Height = 1000;
  d3.Depth = 3;
  d3.Format = CU_AD_FORMAT_UNSIGNED_INT8;
  d3.NumChannels = 1;
  CUarray b = nullptr;
  ASSERT_EQ(api.cuArray3DCreate_v2(&b, &d3), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data + 16 * kMiB + RoundUp(3'000'000, kGranule));
  CUDA_ARRAY3D_DESCRIPTOR huge = d3;
  huge.Width = 1 << 16;
  huge.Height = 1 << 14;
  huge.Depth = free_bytes / (1ull << 30) + 1;
  CUarray c = nullptr;
  EXPECT_EQ(api.cuArray3DCreate_v2(&c, &huge), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(api.cuArrayDestroy(a), CUDA_SUCCESS);
  ASSERT_EQ(api.cuArrayDestroy(b), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data);
}

void Mipmapped(const Api& api, uint64_t) {
  const uint64_t data = Kind(UsageKind::kData);
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = 1024;
  d.Height = 1024;
  d.Format = CU_AD_FORMAT_FLOAT;
  d.NumChannels = 1;
  CUmipmappedArray m = nullptr;
  ASSERT_EQ(api.cuMipmappedArrayCreate(&m, &d, 11), CUDA_SUCCESS);
  uint64_t levels = 0;
  for (int l = 0; l < 11; ++l) levels += uint64_t(1024 >> l) * (1024 >> l) * 4;
  EXPECT_EQ(Kind(UsageKind::kData), data + RoundUp(levels, kGranule)) << "every level";
  ASSERT_EQ(api.cuMipmappedArrayDestroy(m), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), data);
}

void GraphMemory(const Api& api, uint64_t free_bytes) {
  CUgraph g = nullptr;
  ASSERT_EQ(api.cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUDA_MEM_ALLOC_NODE_PARAMS params{};
  params.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params.poolProps.location.id = 0;
  params.bytesize = 32 * kMiB;
  CUgraphNode alloc = nullptr, free_node = nullptr;
  ASSERT_EQ(api.cuGraphAddMemAllocNode(&alloc, g, nullptr, 0, &params), CUDA_SUCCESS);
  ASSERT_EQ(api.cuGraphAddMemFreeNode(&free_node, g, &alloc, 1, params.dptr), CUDA_SUCCESS);
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u) << "nothing is resident before a launch";
  ASSERT_EQ(api.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 32 * kMiB) << "reserved for graphs until a trim";
  ASSERT_EQ(api.cuGraphLaunch(exec, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 32 * kMiB) << "a relaunch reuses it";
  ASSERT_EQ(api.cuStreamSynchronize(nullptr), CUDA_SUCCESS);
  ASSERT_EQ(api.cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u);

  // A graph whose memory would pass the limit fails to launch, and runs nothing.
  CUgraph big = nullptr;
  ASSERT_EQ(api.cuGraphCreate(&big, 0), CUDA_SUCCESS);
  params.bytesize = RoundUp(free_bytes, kGranule) + kGranule;
  ASSERT_EQ(api.cuGraphAddMemAllocNode(&alloc, big, nullptr, 0, &params), CUDA_SUCCESS);
  ASSERT_EQ(api.cuGraphAddMemFreeNode(&free_node, big, &alloc, 1, params.dptr), CUDA_SUCCESS);
  CUgraphExec big_exec = nullptr;
  ASSERT_EQ(api.cuGraphInstantiateWithFlags(&big_exec, big, 0), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphLaunch(big_exec, nullptr), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u);
  EXPECT_EQ(api.cuGraphExecDestroy(big_exec), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphDestroy(big), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphDestroy(g), CUDA_SUCCESS);
}

void CapturedAllocation(const Api& api, uint64_t) {
  CUstream s = nullptr;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(api.cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  CUdeviceptr p = 0;
  ASSERT_EQ(api.cuMemAllocAsync(&p, 16 * kMiB, s), CUDA_SUCCESS);
  ASSERT_EQ(api.cuMemFreeAsync(p, s), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(api.cuStreamEndCapture(s, &g), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 0u) << "a captured allocation is a graph node";
  CUgraphExec exec = nullptr;
  ASSERT_EQ(api.cuGraphInstantiateWithFlags(&exec, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(api.cuGraphLaunch(exec, s), CUDA_SUCCESS);
  ASSERT_EQ(api.cuStreamSynchronize(s), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 16 * kMiB);
  EXPECT_EQ(api.cuGraphExecDestroy(exec), CUDA_SUCCESS);
  EXPECT_EQ(api.cuGraphDestroy(g), CUDA_SUCCESS);
  ASSERT_EQ(api.cuDeviceGraphMemTrim(0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

void Module(const Api& api, uint64_t) {
  CUmodule m = nullptr;
  ASSERT_EQ(api.cuModuleLoadData(&m, "hami-sim-module\nkernel busy\n"), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), kGranule) << "what the load took from the device";
  ASSERT_EQ(api.cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  ASSERT_EQ(api.cuModuleLoadDataEx(&m, "hami-sim-module\nkernel busy\n", 0, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), kGranule);
  ASSERT_EQ(api.cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
}

// A library loaded lazily (CUDA's default) holds nothing on the device until its code is made
// ready in a context: by the lookup of a kernel, the kernel's function, the library's module
// or one of its globals, whichever comes first. Then its instance is charged once, exactly
// what the device lost, and all of it goes back when the library is unloaded. Functions of
// a loaded module cost nothing more than the module.
void LibraryCode(const Api& api, uint64_t free_bytes) {
  const char kImage[] = "hami-sim-module\nkernel busy\nkernel idle\nglobal table bytes=4k\n";
  auto load = [&](CUlibrary* lib) {
    return api.cuLibraryLoadData(lib, kImage, nullptr, nullptr, 0, nullptr, nullptr, 0);
  };
  // The runtime's path: a kernel looked up just before its first use.
  CUlibrary lib = nullptr;
  ASSERT_EQ(load(&lib), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u) << "loaded lazily: nothing on the device yet";
  EXPECT_EQ(VgpuTest::FreeBytes(), free_bytes);
  CUkernel busy = nullptr, idle = nullptr;
  ASSERT_EQ(api.cuLibraryGetKernel(&busy, lib, "busy"), CUDA_SUCCESS);
  const uint64_t instance = free_bytes - VgpuTest::FreeBytes();
  EXPECT_GE(instance, kGranule) << "the lookup made the code ready in the context";
  EXPECT_EQ(Kind(UsageKind::kModule), instance) << "and that is charged, exactly";
  ASSERT_EQ(api.cuLibraryGetKernel(&idle, lib, "idle"), CUDA_SUCCESS);
  CUfunction f = nullptr;
  ASSERT_EQ(api.cuKernelGetFunction(&f, idle), CUDA_SUCCESS);
  CUmodule m = nullptr;
  ASSERT_EQ(api.cuLibraryGetModule(&m, lib), CUDA_SUCCESS);
  CUdeviceptr table = 0;
  size_t bytes = 0;
  ASSERT_EQ(api.cuLibraryGetGlobal(&table, &bytes, lib, "table"), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), instance) << "the same instance, charged once";
  EXPECT_EQ(VgpuTest::FreeBytes(), free_bytes - instance);
  ASSERT_EQ(api.cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);

  // Each other call that makes the code ready, first on a fresh library.
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&ctx), CUDA_SUCCESS);
  for (int first = 0; first < 3; ++first) {
    SCOPED_TRACE(first);
    ASSERT_EQ(load(&lib), CUDA_SUCCESS);
    switch (first) {
      case 0:  // a kernel looked up with no context current, its function asked for later
        ASSERT_EQ(cuCtxSetCurrent(nullptr), CUDA_SUCCESS);
        ASSERT_EQ(api.cuLibraryGetKernel(&busy, lib, "busy"), CUDA_SUCCESS);
        ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
        EXPECT_EQ(Kind(UsageKind::kModule), 0u);
        ASSERT_EQ(api.cuKernelGetFunction(&f, busy), CUDA_SUCCESS);
        break;
      case 1:
        ASSERT_EQ(api.cuLibraryGetModule(&m, lib), CUDA_SUCCESS);
        break;
      case 2:
        ASSERT_EQ(api.cuLibraryGetGlobal(&table, &bytes, lib, "table"), CUDA_SUCCESS);
        break;
    }
    EXPECT_EQ(Kind(UsageKind::kModule), instance);
    EXPECT_EQ(VgpuTest::FreeBytes(), free_bytes - instance);
    ASSERT_EQ(api.cuLibraryUnload(lib), CUDA_SUCCESS);
    EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  }

  ASSERT_EQ(api.cuModuleLoadData(&m, kImage), CUDA_SUCCESS);
  const uint64_t module = Kind(UsageKind::kModule);
  EXPECT_EQ(module, free_bytes - VgpuTest::FreeBytes());
  ASSERT_EQ(api.cuModuleGetFunction(&f, m, "busy"), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), module) << "a module's functions are in its load";
  ASSERT_EQ(api.cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
}

void HostPinned(const Api& api, uint64_t free_bytes) {
  void* p = nullptr;
  ASSERT_EQ(api.cuMemAllocHost_v2(&p, 64 * kMiB), CUDA_SUCCESS);
  EXPECT_EQ(VgpuTest::FreeBytes(), free_bytes) << "host memory is not the device's";
  EXPECT_EQ(api.cuMemFreeHost(p), CUDA_SUCCESS);
}

void Context(const Api& api, uint64_t free_bytes) {
  const uint64_t contexts = Kind(UsageKind::kContext);
  ASSERT_GT(contexts, 0u) << "the primary context is charged";
  CUcontext ctx = nullptr, current = nullptr;
  ASSERT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  ASSERT_EQ(api.cuCtxCreate_v4(&ctx, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kContext), 2 * contexts) << "the same size per context";
  EXPECT_EQ(VgpuTest::FreeBytes(), free_bytes - contexts);
  ASSERT_EQ(api.cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kContext), contexts);
  ASSERT_EQ(api.cuCtxSetCurrent(current), CUDA_SUCCESS);
  // The primary context is active (the fixture holds it): retained again and released, it is
  // charged once all along.
  CUcontext primary = nullptr;
  ASSERT_EQ(api.cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  EXPECT_EQ(primary, current);
  EXPECT_EQ(Kind(UsageKind::kContext), contexts);
  ASSERT_EQ(api.cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kContext), contexts);
}

const Case kCases[] = {
    {"Linear", Linear},           {"Pitched", Pitched},
    {"Managed", Managed},         {"StreamOrdered", StreamOrdered},
    {"OwnPool", OwnPool},         {"VirtualMemory", VirtualMemory},
    {"Imports", Imports},         {"MulticastImport", MulticastImport},
    {"Arrays", Arrays},           {"Mipmapped", Mipmapped},
    {"GraphMemory", GraphMemory}, {"CapturedAllocation", CapturedAllocation},
    {"Module", Module},           {"LibraryCode", LibraryCode},
    {"HostPinned", HostPinned},   {"Context", Context},
};

// Families of functions that are not hooked: run whatever the lists say.
constexpr const char* kUnhookedFamilies[] = {"HostPinned"};

// ---- the rows, from the hook list ----

struct ListedHook {
  const char* name;
  Policy policy;
};

constexpr ListedHook kListed[] = {
#define HAMI_CUDA_HOOK(name, policy, version) {#name, Policy::policy},
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
};

constexpr bool Accounting(Policy p) {
  return p == Policy::kContext || p == Policy::kAdmit || p == Policy::kRelease ||
         p == Policy::kReconcile;
}

// Every function a family calls through the routes (HAMI_FAMILY_API).
constexpr const char* kCalled[] = {
#define HAMI_NAME(name, base, version) #name,
    HAMI_FAMILY_API(HAMI_NAME)
#undef HAMI_NAME
};

// Which family cases exercise each accounting hook (one row per case). `stand_in` null: the case
// calls the hook itself, through every route. Otherwise the case calls `stand_in`, which shares the
// hook's policy code (another ABI of the same function, or a sibling the same policy template
// serves), and the hook is reached through the routes by vgpu_routes_test.
struct Coverage {
  const char* hook;
  const char* family;
  const char* stand_in;
};

constexpr Coverage kCoverage[] = {
    // Contexts.
    {"cuDevicePrimaryCtxRetain", "Context", nullptr},
    {"cuDevicePrimaryCtxRelease", "Context", "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxRelease_v2", "Context", nullptr},
    {"cuDevicePrimaryCtxReset", "Context", "cuDevicePrimaryCtxRelease_v2"},
    {"cuDevicePrimaryCtxReset_v2", "Context", "cuDevicePrimaryCtxRelease_v2"},
    {"cuCtxCreate", "Context", "cuCtxCreate_v4"},
    {"cuCtxCreate_v2", "Context", "cuCtxCreate_v4"},
    {"cuCtxCreate_v3", "Context", "cuCtxCreate_v4"},
    {"cuCtxCreate_v4", "Context", nullptr},
    {"cuCtxDestroy", "Context", "cuCtxDestroy_v2"},
    {"cuCtxDestroy_v2", "Context", nullptr},
    // Linear memory.
    {"cuMemAlloc", "Linear", "cuMemAlloc_v2"},
    {"cuMemAlloc_v2", "Linear", nullptr},
    {"cuMemAllocPitch", "Pitched", "cuMemAllocPitch_v2"},
    {"cuMemAllocPitch_v2", "Pitched", nullptr},
    {"cuMemAllocManaged", "Managed", nullptr},
    {"cuMemFree", "Linear", "cuMemFree_v2"},
    {"cuMemFree_v2", "Linear", nullptr},
    // Stream-ordered allocation and pools.
    {"cuMemAllocAsync", "StreamOrdered", nullptr},
    {"cuMemAllocAsync", "CapturedAllocation", nullptr},  // on a capturing stream
    {"cuMemAllocAsync_ptsz", "StreamOrdered", "cuMemAllocAsync"},
    {"cuMemAllocFromPoolAsync", "OwnPool", nullptr},
    {"cuMemAllocFromPoolAsync_ptsz", "OwnPool", "cuMemAllocFromPoolAsync"},
    {"cuMemPoolCreate", "OwnPool", nullptr},
    {"cuMemPoolTrimTo", "OwnPool", nullptr},
    {"cuMemPoolDestroy", "OwnPool", nullptr},
    {"cuCtxSynchronize", "StreamOrdered", "cuStreamSynchronize"},
    {"cuCtxSynchronize_v2", "StreamOrdered", "cuStreamSynchronize"},
    {"cuStreamSynchronize", "StreamOrdered", nullptr},
    {"cuStreamSynchronize_ptsz", "StreamOrdered", "cuStreamSynchronize"},
    {"cuEventSynchronize", "StreamOrdered", "cuStreamSynchronize"},
    // VMM.
    {"cuMemCreate", "VirtualMemory", nullptr},
    {"cuMemRelease", "VirtualMemory", nullptr},
    {"cuMemRetainAllocationHandle", "VirtualMemory", nullptr},
    {"cuMemMap", "VirtualMemory", nullptr},
    {"cuMemUnmap", "VirtualMemory", nullptr},
    // Other processes' memory, recorded (IPC shares the pool pointer's recording).
    {"cuMemImportFromShareableHandle", "Imports", nullptr},
    {"cuMemMap", "Imports", nullptr},
    {"cuMemUnmap", "Imports", nullptr},
    {"cuMemPoolImportPointer", "Imports", nullptr},
    // Multicast objects: imported handles of them are not memory.
    {"cuMulticastAddDevice", "MulticastImport", nullptr},
    {"cuMulticastBindMem", "MulticastImport", nullptr},
    {"cuMulticastBindAddr", "MulticastImport", nullptr},
    {"cuIpcOpenMemHandle", "Imports", "cuMemPoolImportPointer"},
    {"cuIpcOpenMemHandle_v2", "Imports", "cuMemPoolImportPointer"},
    {"cuIpcCloseMemHandle", "Imports", "cuMemFreeAsync"},
    {"cuMemFreeAsync", "Imports", nullptr},
    {"cuMemFreeAsync", "StreamOrdered", nullptr},
    {"cuMemFreeAsync_ptsz", "StreamOrdered", "cuMemFreeAsync"},
    // Arrays.
    {"cuArrayCreate", "Arrays", "cuArrayCreate_v2"},
    {"cuArrayCreate_v2", "Arrays", nullptr},
    {"cuArray3DCreate", "Arrays", "cuArray3DCreate_v2"},
    {"cuArray3DCreate_v2", "Arrays", nullptr},
    {"cuArrayDestroy", "Arrays", nullptr},
    {"cuMipmappedArrayCreate", "Mipmapped", nullptr},
    {"cuMipmappedArrayDestroy", "Mipmapped", nullptr},
    // Graphs.
    {"cuGraphInstantiate", "GraphMemory", "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiate_v2", "GraphMemory", "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithFlags", "GraphMemory", nullptr},
    {"cuGraphInstantiateWithParams", "GraphMemory", "cuGraphInstantiateWithFlags"},
    {"cuGraphInstantiateWithParams_ptsz", "GraphMemory", "cuGraphInstantiateWithFlags"},
    {"cuGraphExecDestroy", "GraphMemory", nullptr},
    {"cuGraphLaunch", "GraphMemory", nullptr},
    {"cuGraphLaunch_ptsz", "GraphMemory", "cuGraphLaunch"},
    {"cuDeviceGraphMemTrim", "GraphMemory", nullptr},
    {"cuGraphUpload", "GraphMemory", "cuGraphLaunch"},
    {"cuGraphUpload_ptsz", "GraphMemory", "cuGraphLaunch"},
    // Modules and libraries.
    {"cuModuleLoad", "Module", "cuModuleLoadData"},
    {"cuModuleLoadData", "Module", nullptr},
    {"cuModuleLoadDataEx", "Module", nullptr},
    {"cuModuleLoadFatBinary", "Module", "cuModuleLoadData"},
    {"cuModuleUnload", "Module", nullptr},
    {"cuLibraryLoadData", "LibraryCode", nullptr},
    {"cuLibraryLoadFromFile", "LibraryCode", "cuLibraryLoadData"},
    {"cuLibraryUnload", "LibraryCode", nullptr},
    // Code made ready in a context.
    {"cuModuleGetFunction", "LibraryCode", nullptr},
    {"cuLibraryGetModule", "LibraryCode", nullptr},
    {"cuLibraryGetKernel", "LibraryCode", nullptr},
    {"cuKernelGetFunction", "LibraryCode", nullptr},
    {"cuLibraryGetGlobal", "LibraryCode", nullptr},
    {"cuLibraryGetManaged", "LibraryCode", "cuLibraryGetGlobal"},
};

std::string_view View(const char* s) { return s != nullptr ? s : ""; }

const ListedHook* Listed(std::string_view name) {
  for (const ListedHook& h : kListed) {
    if (name == h.name) return &h;
  }
  return nullptr;
}

const Coverage* CoverageOf(std::string_view hook) {
  for (const Coverage& c : kCoverage) {
    if (hook == c.hook) return &c;
  }
  return nullptr;
}

const Case* CaseNamed(std::string_view family) {
  for (const Case& c : kCases) {
    if (family == c.family) return &c;
  }
  return nullptr;
}

bool Called(std::string_view name) {
  for (const char* c : kCalled) {
    if (name == c) return true;
  }
  return false;
}

// The family cases to run: those the accounting rows reach, in list order, then the
// unhooked ones.
std::vector<Case> FamiliesFromTheLists() {
  std::vector<Case> out;
  auto add = [&](std::string_view family) {
    const Case* c = CaseNamed(family);
    if (c == nullptr) return;
    for (const Case& have : out) {
      if (family == have.family) return;
    }
    out.push_back(*c);
  };
  for (const ListedHook& h : kListed) {
    if (!Accounting(h.policy)) continue;
    for (const Coverage& c : kCoverage) {
      if (std::string_view(c.hook) == h.name) add(c.family);
    }
  }
  for (const char* f : kUnhookedFamilies) add(f);
  return out;
}

TEST(FamilyCoverage, EveryAccountingHookOfTheListHasAFamilyCase) {
  int rows = 0;
  for (const ListedHook& h : kListed) {
    if (!Accounting(h.policy)) continue;
    ++rows;
    EXPECT_NE(CoverageOf(h.name), nullptr)
        << h.name << " (an accounting row of cuda_hooks.def) has no family case: map it in "
        << "kCoverage to the case that exercises it";
  }
  EXPECT_GT(rows, 50);
  for (const Coverage& c : kCoverage) {
    const ListedHook* h = Listed(c.hook);
    if (h == nullptr || !Accounting(h->policy)) {
      ADD_FAILURE() << c.hook << " is mapped but is not an accounting row of cuda_hooks.def";
      continue;
    }
    EXPECT_NE(CaseNamed(c.family), nullptr) << c.hook << ": no family case " << c.family;
    if (c.stand_in == nullptr) {
      EXPECT_TRUE(Called(c.hook)) << c.hook << ": the " << c.family
                                  << " case does not call it (add it to HAMI_FAMILY_API)";
      continue;
    }
    EXPECT_NE(View(c.stand_in), View(c.hook)) << c.hook << " stands in for itself";
    EXPECT_TRUE(Called(c.stand_in))
        << c.hook << ": its stand-in " << c.stand_in << " is not called by any family";
    const ListedHook* s = Listed(c.stand_in);
    if (s == nullptr) {
      ADD_FAILURE() << c.hook << ": its stand-in " << c.stand_in << " is not a hook";
      continue;
    }
    EXPECT_EQ(int(s->policy), int(h->policy))
        << c.hook << ": its stand-in " << c.stand_in << " has another policy";
  }
  const std::vector<Case> run = FamiliesFromTheLists();
  for (const Case& c : kCases) {
    bool reached = false;
    for (const Case& r : run) reached |= std::string_view(r.family) == c.family;
    EXPECT_TRUE(reached) << "the " << c.family << " case is reached by no row and never runs";
  }
}

constexpr Route kRoutes[] = {
    Route::kDirect,
    Route::kDlsymDefault,
    Route::kDlsymNext,
    Route::kDlopenHandle,
    Route::kProcAddressNewest,
    Route::kProcAddressOldest,
    Route::kProcAddressV2Newest,
    Route::kProcAddressV2Oldest,
};

class FamilyTest : public VgpuTest,
                   public ::testing::WithParamInterface<std::tuple<Case, Route>> {};

TEST_P(FamilyTest, IsChargedRefusedPastTheLimitAndReturned) {
  auto [c, route] = GetParam();
  Api api;
  ASSERT_TRUE(Resolve(route, &api));
  const uint64_t free_bytes = FreeBytes();
  const auto usage = MyUsage();
  c.run(api, free_bytes);
  if (HasFatalFailure()) return;
  EXPECT_EQ(MyUsage(), usage) << "everything went back";
  EXPECT_EQ(FreeBytes(), free_bytes);
}

INSTANTIATE_TEST_SUITE_P(EveryRoute, FamilyTest,
                         ::testing::Combine(::testing::ValuesIn(FamiliesFromTheLists()),
                                            ::testing::ValuesIn(kRoutes)),
                         [](const ::testing::TestParamInfo<std::tuple<Case, Route>>& p) {
                           return std::string(std::get<0>(p.param).family) + "_" +
                                  RouteName(std::get<1>(p.param));
                         });

}  // namespace
}  // namespace hami::testing
