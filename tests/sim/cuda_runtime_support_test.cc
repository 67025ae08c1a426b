// What the CUDA runtime needs from the simulated driver beyond the classic driver API: the
// private export tables, libraries and kernels (lazy and eager loading), and the calls the
// runtime resolves at start (CUDA 13 pools, occupancy, stream attributes and callbacks,
// capture mode, graph edges and updates, IPC, texture objects, peer access, prefetch).
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <vector>

#include "common/file.h"
#include "sim_test_util.h"
#include "support/enum_values.h"

namespace hami::testing {
namespace {

constexpr uint64_t kGranule = 2ull << 20;

CUuuid Uuid(std::initializer_list<uint8_t> bytes) {
  CUuuid u{};
  std::memcpy(u.bytes, std::data(bytes), 16);
  return u;
}

const CUuuid kRuntimeInterface = Uuid({0x6b, 0xd5, 0xfb, 0x6c, 0x5b, 0xf4, 0xe7, 0x4a, 0x89, 0x87,
                                       0xd9, 0x39, 0x12, 0xfd, 0x9d, 0xf9});
const CUuuid kContextStorage = Uuid({0xc6, 0x93, 0x33, 0x6e, 0x11, 0x21, 0xdf, 0x11, 0xa8, 0xc3,
                                     0x68, 0xf3, 0x55, 0xd8, 0x95, 0x93});
const CUuuid kContextChecks = Uuid({0x26, 0x3e, 0x88, 0x60, 0x7c, 0xd2, 0x61, 0x43, 0x92, 0xf6,
                                    0xbb, 0xd5, 0x00, 0x6d, 0xfa, 0x7e});
const CUuuid kIntegrity = Uuid({0xd4, 0x08, 0x20, 0x55, 0xbd, 0xe6, 0x70, 0x4b, 0x8d, 0x34, 0xba,
                                0x12, 0x3c, 0x66, 0xe1, 0xf2});
const CUuuid kToolsCallbacks = Uuid({0xa0, 0x94, 0x79, 0x8c, 0x2e, 0x74, 0x2e, 0x74, 0x93, 0xf2,
                                     0x08, 0x00, 0x20, 0x0c, 0x0a, 0x66});
const CUuuid kToolsModule = Uuid({0x6e, 0x16, 0x3f, 0xbe, 0xb9, 0x58, 0x44, 0x4d, 0x83, 0x5c, 0xe1,
                                  0x82, 0xaf, 0xf1, 0x99, 0x1e});
const CUuuid kUnknownTable = Uuid({0xf8, 0xcf, 0xf9, 0x51, 0x21, 0x46, 0x8b, 0x4e, 0xb9, 0xe2, 0xfb,
                                   0x46, 0x9e, 0x7c, 0x0d, 0xd9});

void* const* Table(const CUuuid& id) {
  const void* t = nullptr;
  EXPECT_EQ(cuGetExportTable(&t, &id), CUDA_SUCCESS);
  return static_cast<void* const*>(t);
}

// ---- export tables ----

using ExportTableTest = CudaTest;

TEST_F(ExportTableTest, AnUnknownTableIsNotFoundAndKnownOnesStartWithTheirSize) {
  const void* t = reinterpret_cast<const void*>(1);
  EXPECT_EQ(cuGetExportTable(&t, &kUnknownTable), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(cuGetExportTable(nullptr, &kRuntimeInterface), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kRuntimeInterface)[0]), 13u * 8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kToolsCallbacks)[0]), 7u * 8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kContextChecks)[0]), 4u * 8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kIntegrity)[0]), 3u * 8);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(Table(kToolsModule)[0]), 64u * 8);
  EXPECT_EQ(Table(kContextStorage)[3], nullptr) << "no size word: three functions and NULL";
}

TEST_F(ExportTableTest, TheRuntimeInterfaceNamesEachDevicesPrimaryContextHandle) {
  auto primary = reinterpret_cast<CUresult (*)(CUcontext*, CUdevice)>(Table(kRuntimeInterface)[2]);
  CUcontext handle0 = nullptr, handle1 = nullptr;
  ASSERT_EQ(primary(&handle0, 0), CUDA_SUCCESS);
  EXPECT_EQ(handle0, ctx_) << "the handle cuDevicePrimaryCtxRetain gave";
  // Device 1's primary context is not active: its handle exists all the same, and the
  // activation gives the same one, without charging anything before.
  ASSERT_EQ(primary(&handle1, 1), CUDA_SUCCESS);
  ASSERT_NE(handle1, nullptr);
  unsigned flags = 0;
  int active = 1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cuCtxSetCurrent(handle1), CUDA_SUCCESS) << "an inactive handle may be made current";
  CUdeviceptr p;
  EXPECT_EQ(cuMemAlloc_v2(&p, 1 << 20), CUDA_ERROR_CONTEXT_IS_DESTROYED) << "but not used";
  CUcontext retained = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&retained, 1), CUDA_SUCCESS);
  EXPECT_EQ(retained, handle1);
  EXPECT_EQ(cuMemAlloc_v2(&p, 1 << 20), CUDA_SUCCESS) << "current there, now active";
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
}

struct Stored {
  std::vector<std::pair<void*, void*>> destroyed;  // (key, value)
};
Stored g_stored;
void RecordDestroyed(CUcontext, void* key, void* value) {
  g_stored.destroyed.emplace_back(key, value);
}

TEST_F(ExportTableTest, ContextStorageKeepsValuesAndRunsDestructorsWhenTheContextGoes) {
  using Put = CUresult (*)(CUcontext, void*, void*, void (*)(CUcontext, void*, void*));
  using Delete = CUresult (*)(CUcontext, void*);
  using Get = CUresult (*)(void**, CUcontext, void*);
  void* const* t = Table(kContextStorage);
  auto put = reinterpret_cast<Put>(t[0]);
  auto del = reinterpret_cast<Delete>(t[1]);
  auto get = reinterpret_cast<Get>(t[2]);
  int key1 = 0, key2 = 0, value = 0;
  void* out = nullptr;
  EXPECT_NE(get(&out, nullptr, &key1), CUDA_SUCCESS) << "nothing stored yet";
  ASSERT_EQ(put(nullptr, &key1, &value, &RecordDestroyed), CUDA_SUCCESS) << "NULL: current";
  ASSERT_EQ(get(&out, ctx_, &key1), CUDA_SUCCESS);
  EXPECT_EQ(out, &value);
  ASSERT_EQ(put(ctx_, &key2, &key2, &RecordDestroyed), CUDA_SUCCESS);
  EXPECT_EQ(del(ctx_, &key2), CUDA_SUCCESS);
  EXPECT_NE(get(&out, ctx_, &key2), CUDA_SUCCESS);
  // On a context of its own: destroying it runs the destructor of what is still stored.
  CUcontext other;
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(put(other, &key2, &value, &RecordDestroyed), CUDA_SUCCESS);
  g_stored.destroyed.clear();
  ASSERT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
  ASSERT_EQ(g_stored.destroyed.size(), 1u);
  EXPECT_EQ(g_stored.destroyed[0].first, &key2);
  EXPECT_EQ(g_stored.destroyed[0].second, &value);
  EXPECT_EQ(del(ctx_, &key1), CUDA_SUCCESS);
}

TEST_F(ExportTableTest, ContextChecksReportNothingSpecialAndTheIntegrityConstantsAnswer) {
  void* const* checks = Table(kContextChecks);
  uint32_t state = 7;
  void* extra = nullptr;
  EXPECT_EQ(
      reinterpret_cast<CUresult (*)(CUcontext, uint32_t*, void**)>(checks[2])(ctx_, &state, &extra),
      CUDA_SUCCESS);
  EXPECT_EQ(state, 0u);
  EXPECT_EQ(reinterpret_cast<uint32_t (*)()>(checks[3])(), 0u);
  uint64_t out[2] = {};
  auto check = reinterpret_cast<CUresult (*)(uint32_t, uint64_t, uint64_t*)>(Table(kIntegrity)[1]);
  ASSERT_EQ(check(13000, 1700000000, out), CUDA_SUCCESS);
  EXPECT_EQ(out[0], 0x3341181C03CB675Cull);
  EXPECT_EQ(out[1], 0x8ED383AA1F4CD1E8ull);
  void* buf = nullptr;
  size_t n = 0;
  reinterpret_cast<void (*)(void**, size_t*)>(Table(kToolsCallbacks)[2])(&buf, &n);
  EXPECT_NE(buf, nullptr);
  EXPECT_EQ(n, 1024u);
}

struct Visited {
  std::vector<CUfunction> functions;
  std::vector<CUmodule> owners;
};
void Visit(void* opaque, CUfunction f, CUmodule owner) {
  auto* v = static_cast<Visited*>(opaque);
  v->functions.push_back(f);
  v->owners.push_back(owner);
}

// As cuFFT uses it: a module of PTX with one kernel, whose function it takes from the walk.
TEST_F(ExportTableTest, TheToolsModuleTableWalksTheFunctionsOfAModule) {
  void* const* t = Table(kToolsModule);
  ASSERT_GT(reinterpret_cast<uintptr_t>(t[0]), 7u * 8) << "cuFFT requires slot 7";
  using Walk = unsigned (*)(CUcontext, CUmodule, void (*)(void*, CUfunction, CUmodule), void*);
  auto walk = reinterpret_cast<Walk>(t[7]);
  auto fatbin =
      ReadFileToString(std::string(HAMI_IMAGE_CORPUS) + "/kernels_ptx_lz4.fatbin", 1 << 20);
  ASSERT_TRUE(fatbin.ok());
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, fatbin->data()), CUDA_SUCCESS);
  Visited v;
  EXPECT_EQ(walk(ctx_, m, &Visit, &v), 2u);
  CUfunction k, k2;
  ASSERT_EQ(cuModuleGetFunction(&k, m, "_Z1kPi"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&k2, m, "_Z2k2Pfi"), CUDA_SUCCESS);
  EXPECT_EQ(v.functions, (std::vector<CUfunction>{k, k2})) << "the handles the module gives";
  EXPECT_EQ(v.owners, (std::vector<CUmodule>{m, m}));
  EXPECT_EQ(walk(nullptr, m, nullptr, nullptr), 2u) << "NULL context: the module's own";
  void* params[] = {nullptr};
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc_v2(&p, 256), CUDA_SUCCESS);
  params[0] = &p;
  EXPECT_EQ(cuLaunchKernel(v.functions[0], 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  CUcontext other;
  ASSERT_EQ(cuCtxCreate(&other, nullptr, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(walk(other, m, &Visit, &v), 0u) << "not a module of that context";
  ASSERT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
  EXPECT_EQ(walk(ctx_, m, &Visit, &v), 0u) << "an unloaded module";
  // An image the model cannot see into lists nothing.
  auto zstd =
      ReadFileToString(std::string(HAMI_IMAGE_CORPUS) + "/kernels_ptx_zstd.fatbin", 1 << 20);
  ASSERT_TRUE(zstd.ok());
  ASSERT_EQ(cuModuleLoadData(&m, zstd->data()), CUDA_SUCCESS);
  v = {};
  EXPECT_EQ(walk(ctx_, m, &Visit, &v), 0u);
  EXPECT_TRUE(v.functions.empty());
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
}

TEST_F(ExportTableTest, APtxModuleHasTheKernelsAndGlobalsItsTextDeclares) {
  const char* ptx =
      ".version 8.0\n.target sm_80\n.address_size 64\n"
      ".global .align 4 .u32 counter[2] = {5, 6};\n"
      ".visible .entry only(.param .u64 only_param_0)\n{\n\tret;\n}\n";
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, ptx), CUDA_SUCCESS);
  CUfunction f;
  EXPECT_EQ(cuModuleGetFunction(&f, m, "other"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(cuModuleGetFunction(&f, m, "only"), CUDA_SUCCESS);
  size_t offset = 1, size = 0;
  ASSERT_EQ(cuFuncGetParamInfo(f, 0, &offset, &size), CUDA_SUCCESS);
  EXPECT_EQ(offset, 0u);
  EXPECT_EQ(size, 8u);
  unsigned count = 0;
  ASSERT_EQ(cuModuleGetFunctionCount(&count, m), CUDA_SUCCESS);
  EXPECT_EQ(count, 1u);
  CUdeviceptr g;
  size_t bytes = 0;
  ASSERT_EQ(cuModuleGetGlobal_v2(&g, &bytes, m, "counter"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 8u);
  uint32_t values[2] = {};
  ASSERT_EQ(cuMemcpyDtoH_v2(values, g, sizeof(values)), CUDA_SUCCESS);
  EXPECT_EQ(values[0], 5u);
  EXPECT_EQ(values[1], 6u);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
}

// ---- libraries and kernels ----

using LibraryTest = CudaTest;

uint64_t UsedBytes() {
  size_t free_bytes = 0, total = 0;
  EXPECT_EQ(cuMemGetInfo_v2(&free_bytes, &total), CUDA_SUCCESS);
  return total - free_bytes;
}

TEST_F(LibraryTest, ALibraryIsChargedInAContextAtItsFirstUseAndLaunchesThroughItsKernel) {
  const uint64_t before = UsedBytes();
  CUlibrary lib;
  ASSERT_EQ(cuLibraryLoadData(&lib, kManifest, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), before) << "lazy: nothing loaded into a context yet";
  CUkernel k;
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "k1ms"), CUDA_SUCCESS);
  EXPECT_EQ(cuLibraryGetKernel(&k, lib, "undeclared"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "k1ms"), CUDA_SUCCESS);
  const char* name = nullptr;
  ASSERT_EQ(cuKernelGetName(&name, k), CUDA_SUCCESS);
  EXPECT_STREQ(name, "k1ms");
  // A CUkernel where a CUfunction is expected: its instance in the current context.
  EXPECT_DEVICE_MS(DeviceMs(reinterpret_cast<CUfunction>(k), kH100Wave1024), kLaunchMs + 1);
  // Its module; its 4 KiB global shares the small page the fixture's module charged.
  EXPECT_EQ(UsedBytes(), before + kGranule);
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 32;
  config.blockDimY = config.blockDimZ = 1;
  EXPECT_EQ(cuLaunchKernelEx(&config, reinterpret_cast<CUfunction>(k), nullptr, nullptr),
            CUDA_SUCCESS);
  CUfunction f;
  ASSERT_EQ(cuKernelGetFunction(&f, k), CUDA_SUCCESS);
  CUmodule m, same;
  ASSERT_EQ(cuLibraryGetModule(&m, lib), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetModule(&same, f), CUDA_SUCCESS);
  EXPECT_EQ(m, same);
  EXPECT_EQ(cuModuleUnload(m), CUDA_ERROR_INVALID_HANDLE) << "it goes with its library";
  CUdeviceptr global;
  size_t bytes = 0;
  ASSERT_EQ(cuLibraryGetGlobal(&global, &bytes, lib, "counters"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 4096u);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  ASSERT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
  EXPECT_EQ(UsedBytes(), before);
  EXPECT_EQ(cuKernelGetName(&name, k), CUDA_ERROR_INVALID_HANDLE);
}

TEST_F(LibraryTest, KernelAttributesApplyPerDeviceToEveryInstance) {
  CUlibrary lib;
  ASSERT_EQ(cuLibraryLoadData(&lib, kManifest, nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUkernel k;
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "dflt"), CUDA_SUCCESS);
  ASSERT_EQ(cuKernelSetAttribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 100 << 10, k, 0),
            CUDA_SUCCESS);
  int v = 0;
  ASSERT_EQ(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 100 << 10);
  ASSERT_EQ(cuKernelGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, k, 1),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 48 << 10) << "device 1 keeps the default";
  CUfunction f;
  ASSERT_EQ(cuKernelGetFunction(&f, k), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetAttribute(&v, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, f),
            CUDA_SUCCESS);
  EXPECT_EQ(v, 100 << 10) << "the instance on device 0 follows";
  EXPECT_EQ(cuLaunchKernel(reinterpret_cast<CUfunction>(k), 1, 1, 1, 32, 1, 1, 90 << 10, nullptr,
                           nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
}

TEST_F(LibraryTest, ACubinDeclaresItsKernelsParametersAndGlobals) {
  auto cubin = ReadFileToString(std::string(HAMI_IMAGE_CORPUS) + "/kernels.cubin", 1 << 20);
  ASSERT_TRUE(cubin.ok());
  CUlibrary lib;
  ASSERT_EQ(cuLibraryLoadData(&lib, cubin->data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
            CUDA_SUCCESS);
  CUkernel k;
  EXPECT_EQ(cuLibraryGetKernel(&k, lib, "_Z6helperi"), CUDA_ERROR_NOT_FOUND);
  ASSERT_EQ(cuLibraryGetKernel(&k, lib, "_Z2k2Pfi"), CUDA_SUCCESS);
  size_t offset = 0, size = 0;
  ASSERT_EQ(cuKernelGetParamInfo(k, 1, &offset, &size), CUDA_SUCCESS);
  EXPECT_EQ(offset, 8u);
  EXPECT_EQ(size, 4u);
  EXPECT_EQ(cuKernelGetParamInfo(k, 2, &offset, &size), CUDA_ERROR_INVALID_VALUE);
  CUfunction f;
  ASSERT_EQ(cuKernelGetFunction(&f, k), CUDA_SUCCESS);
  ASSERT_EQ(cuFuncGetParamInfo(f, 0, &offset, &size), CUDA_SUCCESS);
  EXPECT_EQ(size, 8u);
  unsigned count = 0;
  ASSERT_EQ(cuLibraryGetKernelCount(&count, lib), CUDA_SUCCESS);
  EXPECT_EQ(count, 2u);
  CUdeviceptr coef;
  size_t bytes = 0;
  ASSERT_EQ(cuLibraryGetGlobal(&coef, &bytes, lib, "coef"), CUDA_SUCCESS);
  EXPECT_EQ(bytes, 64u);
  float first[3] = {};
  ASSERT_EQ(cuMemcpyDtoH_v2(first, coef, sizeof(first)), CUDA_SUCCESS);
  EXPECT_EQ(first[1], 2.0f) << "initialized from the cubin";
  EXPECT_EQ(cuLibraryGetGlobal(&coef, &bytes, lib, "nothing"), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(cuLibraryUnload(lib), CUDA_SUCCESS);
}

TEST(LibraryLoading, EagerLoadingChargesEveryContextAtLoadAndAtCreation) {
  EXPECT_IN_CHILD({{"CUDA_MODULE_LOADING", "EAGER"}}, [] {
    CUcontext ctx;
    CUmodule module = StartCudaWithManifest();
    (void)module;
    CUmoduleLoadingMode mode;
    ASSERT_EQ(cuModuleGetLoadingMode(&mode), CUDA_SUCCESS);
    EXPECT_EQ(mode, CU_MODULE_EAGER_LOADING);
    const uint64_t before = UsedBytes();
    CUlibrary lib;
    ASSERT_EQ(cuLibraryLoadData(&lib, "hami-sim-module\nkernel k\n", nullptr, nullptr, 0, nullptr,
                                nullptr, 0),
              CUDA_SUCCESS);
    EXPECT_EQ(UsedBytes(), before + kGranule) << "loaded into the current context at once";
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(UsedBytes(), (500ull << 20) + kGranule) << "and into a context made later";
  });
}

// ---- what the runtime resolves at start ----

using RuntimeCallsTest = CudaTest;

TEST_F(RuntimeCallsTest, Cuda13PoolsByLocationAreTheDevicesPools) {
  CUmemLocation loc{CU_MEM_LOCATION_TYPE_DEVICE, 0};
  CUmemoryPool by_location, by_device, current;
  ASSERT_EQ(cuMemGetDefaultMemPool(&by_location, &loc, CU_MEM_ALLOCATION_TYPE_PINNED),
            CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGetDefaultMemPool(&by_device, 0), CUDA_SUCCESS);
  EXPECT_EQ(by_location, by_device);
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location = loc;
  CUmemoryPool mine;
  ASSERT_EQ(cuMemPoolCreate(&mine, &props), CUDA_SUCCESS);
  ASSERT_EQ(cuMemSetMemPool(&loc, CU_MEM_ALLOCATION_TYPE_PINNED, mine), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetMemPool(&current, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_SUCCESS);
  EXPECT_EQ(current, mine);
  CUmemLocation host{CU_MEM_LOCATION_TYPE_HOST, 0};
  EXPECT_EQ(cuMemGetMemPool(&current, &host, CU_MEM_ALLOCATION_TYPE_PINNED),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemPoolDestroy(mine), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetMemPool(&current, &loc, CU_MEM_ALLOCATION_TYPE_PINNED), CUDA_SUCCESS);
  EXPECT_EQ(current, by_device) << "back to the default";
}

TEST_F(RuntimeCallsTest, OccupancyFollowsTheDevicesLimits) {
  int blocks = 0, grid = 0, block = 0;
  ASSERT_EQ(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, k1ms_, 256, 0, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(blocks, 8);
  ASSERT_EQ(cuOccupancyMaxPotentialBlockSize(&grid, &block, k1ms_, nullptr, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(block * (grid / 132), 2048) << "a full SM";
  size_t smem = 0;
  ASSERT_EQ(cuOccupancyAvailableDynamicSMemPerBlock(&smem, k1ms_, 2, 256), CUDA_SUCCESS);
  EXPECT_GT(smem, 0u);
  CUlaunchAttribute cluster{};
  cluster.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
  cluster.value.clusterDim.x = 2;
  cluster.value.clusterDim.y = cluster.value.clusterDim.z = 1;
  CUlaunchConfig config{};
  config.gridDimX = config.gridDimY = config.gridDimZ = 1;
  config.blockDimX = 1024;
  config.blockDimY = config.blockDimZ = 1;
  config.attrs = &cluster;
  config.numAttrs = 1;
  int clusters = 0;
  ASSERT_EQ(cuOccupancyMaxActiveClusters(&clusters, k1ms_, &config), CUDA_SUCCESS);
  EXPECT_EQ(clusters, 132);
  cluster.value.clusterDim.x = 9;
  EXPECT_EQ(cuOccupancyMaxActiveClusters(&clusters, k1ms_, &config),
            CUDA_ERROR_INVALID_CLUSTER_SIZE);
}

TEST_F(RuntimeCallsTest, StreamAttributesDeviceAndCallbacks) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  CUstreamAttrValue v{};
  v.priority = -3;
  ASSERT_EQ(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_PRIORITY, &v), CUDA_SUCCESS);
  int priority = 0;
  ASSERT_EQ(cuStreamGetPriority(s, &priority), CUDA_SUCCESS);
  EXPECT_EQ(priority, -3);
  v = {};
  v.syncPolicy = CU_SYNC_POLICY_BLOCKING_SYNC;
  ASSERT_EQ(cuStreamSetAttribute(s, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &v), CUDA_SUCCESS);
  CUstream copy;
  ASSERT_EQ(cuStreamCreate(&copy, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamCopyAttributes(copy, s), CUDA_SUCCESS);
  CUstreamAttrValue got{};
  ASSERT_EQ(cuStreamGetAttribute(copy, CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY, &got),
            CUDA_SUCCESS);
  EXPECT_EQ(got.syncPolicy, CU_SYNC_POLICY_BLOCKING_SYNC);
  CUdevice dev = -1;
  ASSERT_EQ(cuStreamGetDevice(s, &dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  // A callback runs after the stream's earlier work, with the stream and a success status.
  static std::atomic<int> calls{0};
  static CUstream seen = nullptr;
  ASSERT_EQ(Launch(k20ms_, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamAddCallback(
                s,
                [](CUstream stream, CUresult status, void* data) {
                  seen = stream;
                  calls += status == CUDA_SUCCESS && data == &calls ? 1 : 100;
                },
                &calls, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS) << "the callback waited for the kernel";
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(seen, s);
  EXPECT_EQ(cuStreamAddCallback(s, nullptr, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuStreamDestroy_v2(copy), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(RuntimeCallsTest, TheCaptureModeIsExchangedPerThread) {
  CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_GLOBAL) << "the default";
  std::thread([] {
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL;
    EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&m), CUDA_SUCCESS);
    EXPECT_EQ(m, CU_STREAM_CAPTURE_MODE_GLOBAL) << "another thread has its own";
  }).join();
  ASSERT_EQ(cuThreadExchangeStreamCaptureMode(&mode), CUDA_SUCCESS);
  EXPECT_EQ(mode, CU_STREAM_CAPTURE_MODE_RELAXED);
  auto bad = UnnamedValue<CUstreamCaptureMode>(7);
  EXPECT_EQ(cuThreadExchangeStreamCaptureMode(&bad), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(RuntimeCallsTest, CtxSynchronizeV2WaitsForTheNamedContext) {
  ASSERT_EQ(Launch(k20ms_, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize_v2(ctx_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSynchronize_v2(nullptr), CUDA_SUCCESS) << "NULL: the current context";
}

TEST_F(RuntimeCallsTest, PrefetchAndAdviceAreKeptAsRangeAttributes) {
  CUdeviceptr m;
  ASSERT_EQ(cuMemAllocManaged(&m, 1 << 20, CU_MEM_ATTACH_GLOBAL), CUDA_SUCCESS);
  CUmemLocation dev1{CU_MEM_LOCATION_TYPE_DEVICE, 1};
  ASSERT_EQ(cuMemAdvise_v2(m, 1 << 20, CU_MEM_ADVISE_SET_PREFERRED_LOCATION, dev1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemAdvise_v2(m, 1 << 20, CU_MEM_ADVISE_SET_ACCESSED_BY, dev1), CUDA_SUCCESS);
  ASSERT_EQ(cuMemPrefetchAsync(m, 1 << 20, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, nullptr),
            CUDA_SUCCESS);
  int preferred = -9, last = -9, accessed[2] = {};
  ASSERT_EQ(
      cuMemRangeGetAttribute(&preferred, 4, CU_MEM_RANGE_ATTRIBUTE_PREFERRED_LOCATION, m, 1 << 20),
      CUDA_SUCCESS);
  EXPECT_EQ(preferred, 1);
  void* data[] = {&last, accessed};
  size_t sizes[] = {4, sizeof(accessed)};
  CUmem_range_attribute attrs[] = {CU_MEM_RANGE_ATTRIBUTE_LAST_PREFETCH_LOCATION,
                                   CU_MEM_RANGE_ATTRIBUTE_ACCESSED_BY};
  ASSERT_EQ(cuMemRangeGetAttributes(data, sizes, attrs, 2, m, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(last, 0);
  EXPECT_EQ(accessed[0], 1);
  EXPECT_EQ(accessed[1], -2) << "CU_DEVICE_INVALID fills the rest";
  CUdeviceptr plain;
  ASSERT_EQ(cuMemAlloc_v2(&plain, 1 << 20), CUDA_SUCCESS);
  EXPECT_EQ(cuMemPrefetchAsync(plain, 1 << 20, {CU_MEM_LOCATION_TYPE_DEVICE, 0}, 0, nullptr),
            CUDA_ERROR_INVALID_VALUE)
      << "not managed memory";
  EXPECT_EQ(cuMemFree_v2(plain), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(m), CUDA_SUCCESS);
}

TEST_F(RuntimeCallsTest, PeerAccessIsEnabledOnceBetweenTwoDevices) {
  int can = 0;
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 0, 1), CUDA_SUCCESS);
  EXPECT_EQ(can, 1);
  ASSERT_EQ(cuDeviceCanAccessPeer(&can, 0, 0), CUDA_SUCCESS);
  EXPECT_EQ(can, 0);
  int atomics = 0;
  ASSERT_EQ(
      cuDeviceGetP2PAttribute(&atomics, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, 0, 1),
      CUDA_SUCCESS);
  EXPECT_EQ(atomics, 1);
  CUcontext peer;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&peer, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxEnablePeerAccess(peer, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxEnablePeerAccess(peer, 0), CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDisablePeerAccess(peer), CUDA_ERROR_PEER_ACCESS_NOT_ENABLED);
  EXPECT_EQ(cuCtxEnablePeerAccess(ctx_, 0), CUDA_ERROR_INVALID_DEVICE) << "itself";
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
}

TEST_F(RuntimeCallsTest, TextureAndSurfaceObjectsKeepWhatTheyDescribe) {
  CUDA_ARRAY3D_DESCRIPTOR desc{};
  desc.Width = 64;
  desc.Height = 64;
  desc.Format = CU_AD_FORMAT_FLOAT;
  desc.NumChannels = 1;
  CUarray plain, surface_array;
  ASSERT_EQ(cuArray3DCreate_v2(&plain, &desc), CUDA_SUCCESS);
  desc.Flags = CUDA_ARRAY3D_SURFACE_LDST;
  ASSERT_EQ(cuArray3DCreate_v2(&surface_array, &desc), CUDA_SUCCESS);
  CUDA_RESOURCE_DESC res{};
  res.resType = CU_RESOURCE_TYPE_ARRAY;
  res.res.array.hArray = plain;
  CUDA_TEXTURE_DESC tex{};
  tex.filterMode = CU_TR_FILTER_MODE_LINEAR;
  CUtexObject t = 0;
  ASSERT_EQ(cuTexObjectCreate(&t, &res, &tex, nullptr), CUDA_SUCCESS);
  EXPECT_NE(t, 0u);
  CUDA_TEXTURE_DESC back{};
  ASSERT_EQ(cuTexObjectGetTextureDesc(&back, t), CUDA_SUCCESS);
  EXPECT_EQ(back.filterMode, CU_TR_FILTER_MODE_LINEAR);
  CUsurfObject s = 0;
  EXPECT_EQ(cuSurfObjectCreate(&s, &res), CUDA_ERROR_INVALID_VALUE) << "not made for load/store";
  res.res.array.hArray = surface_array;
  ASSERT_EQ(cuSurfObjectCreate(&s, &res), CUDA_SUCCESS);
  CUDA_RESOURCE_DESC got{};
  ASSERT_EQ(cuSurfObjectGetResourceDesc(&got, s), CUDA_SUCCESS);
  EXPECT_EQ(got.res.array.hArray, surface_array);
  EXPECT_EQ(cuTexObjectDestroy(s), CUDA_ERROR_INVALID_VALUE) << "a surface is not a texture";
  EXPECT_EQ(cuSurfObjectDestroy(s), CUDA_SUCCESS);
  EXPECT_EQ(cuTexObjectDestroy(t), CUDA_SUCCESS);
  EXPECT_EQ(cuTexObjectDestroy(t), CUDA_ERROR_INVALID_VALUE);
  CUDA_RESOURCE_DESC linear{};
  linear.resType = CU_RESOURCE_TYPE_LINEAR;
  linear.res.linear.devPtr = 0x1000;
  linear.res.linear.sizeInBytes = 256;
  EXPECT_EQ(cuTexObjectCreate(&t, &linear, &tex, nullptr), CUDA_ERROR_INVALID_VALUE)
      << "not memory of the device";
  EXPECT_EQ(cuArrayDestroy(plain), CUDA_SUCCESS);
  EXPECT_EQ(cuArrayDestroy(surface_array), CUDA_SUCCESS);
}

TEST_F(RuntimeCallsTest, DeviceMemoryAndEventsAreSharedWithAnotherProcessThroughIpcHandles) {
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc_v2(&p, 8 << 20), CUDA_SUCCESS);
  std::vector<unsigned char> data(8 << 20);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<unsigned char>(i * 7);
  ASSERT_EQ(cuMemcpyHtoD_v2(p, data.data(), data.size()), CUDA_SUCCESS);
  CUipcMemHandle handle;
  ASSERT_EQ(cuIpcGetMemHandle(&handle, p + 4096), CUDA_SUCCESS);
  CUdeviceptr own;
  EXPECT_EQ(cuIpcOpenMemHandle_v2(&own, handle, 0), CUDA_ERROR_INVALID_CONTEXT)
      << "not in the exporting process";
  CUevent e;
  ASSERT_EQ(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  CUipcEventHandle event_handle;
  ASSERT_EQ(cuIpcGetEventHandle(&event_handle, e), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(e, nullptr), CUDA_SUCCESS);
  EXPECT_IN_CHILD({}, [&] {
    StartCudaWithManifest();
    CUdeviceptr q;
    ASSERT_EQ(cuIpcOpenMemHandle_v2(&q, handle, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), CUDA_SUCCESS);
    std::vector<unsigned char> seen(4096);
    ASSERT_EQ(cuMemcpyDtoH_v2(seen.data(), q, seen.size()), CUDA_SUCCESS);
    EXPECT_EQ(std::memcmp(seen.data(), data.data() + 4096, seen.size()), 0);
    unsigned char mark = 0xab;
    ASSERT_EQ(cuMemcpyHtoD_v2(q, &mark, 1), CUDA_SUCCESS);
    EXPECT_EQ(cuIpcCloseMemHandle(q), CUDA_SUCCESS);
    CUevent other;
    ASSERT_EQ(cuIpcOpenEventHandle(&other, event_handle), CUDA_SUCCESS);
    EXPECT_EQ(cuEventSynchronize(other), CUDA_SUCCESS) << "waits for the exporter's kernel";
    EXPECT_EQ(cuEventQuery(other), CUDA_SUCCESS);
    EXPECT_EQ(cuEventDestroy_v2(other), CUDA_SUCCESS);
  });
  unsigned char back = 0;
  ASSERT_EQ(cuMemcpyDtoH_v2(&back, p + 4096, 1), CUDA_SUCCESS);
  EXPECT_EQ(back, 0xab) << "the other process wrote into the same memory";
  EXPECT_EQ(cuEventDestroy_v2(e), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
}

// ---- graph edges and updates ----

using GraphEdgeTest = CudaTest;

CUDA_KERNEL_NODE_PARAMS KernelParams(CUfunction f, unsigned grid) {
  CUDA_KERNEL_NODE_PARAMS p{};
  p.func = f;
  p.gridDimX = grid;
  p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 1024;
  p.blockDimY = p.blockDimZ = 1;
  return p;
}

TEST_F(GraphEdgeTest, EdgesAddedLaterOrderTheLaunchAndAreListed) {
  CUgraph g;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  CUgraphNode a, b;
  auto pa = KernelParams(k1ms_, 1), pb = KernelParams(k20ms_, 1);
  ASSERT_EQ(cuGraphAddKernelNode_v2(&a, g, nullptr, 0, &pa), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphAddKernelNode_v2(&b, g, nullptr, 0, &pb), CUDA_SUCCESS);
  // b before a, although a was added first.
  ASSERT_EQ(cuGraphAddDependencies_v2(g, &b, &a, nullptr, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphAddDependencies(g, &b, &a, nullptr, 1), CUDA_ERROR_INVALID_VALUE)
      << "already there";
  CUgraphNode from[2], to[2];
  CUgraphEdgeData edges[2];
  size_t n = 2;
  ASSERT_EQ(cuGraphGetEdges_v2(g, from, to, edges, &n), CUDA_SUCCESS);
  ASSERT_EQ(n, 1u);
  EXPECT_EQ(from[0], b);
  EXPECT_EQ(to[0], a);
  size_t roots = 2;
  CUgraphNode root[2];
  ASSERT_EQ(cuGraphGetRootNodes(g, root, &roots), CUDA_SUCCESS);
  ASSERT_EQ(roots, 1u);
  EXPECT_EQ(root[0], b);
  size_t deps = 0;
  ASSERT_EQ(cuGraphNodeGetDependentNodes_v2(b, nullptr, nullptr, &deps), CUDA_SUCCESS);
  EXPECT_EQ(deps, 1u);
  ASSERT_EQ(cuGraphAddDependencies(g, &a, &b, nullptr, 1), CUDA_SUCCESS);
  CUgraphExec cyclic;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&cyclic, g, 0), CUDA_ERROR_INVALID_VALUE) << "a cycle";
  ASSERT_EQ(cuGraphRemoveDependencies(g, &a, &b, nullptr, 1), CUDA_SUCCESS);
  CUgraphExec e;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(e, s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(s), CUDA_SUCCESS);
  // The same nodes with new parameters update the executable graph; a node more does not.
  pa = KernelParams(k100ms_, 1);
  ASSERT_EQ(cuGraphKernelNodeSetParams_v2(a, &pa), CUDA_SUCCESS);
  CUgraphExecUpdateResultInfo info{};
  ASSERT_EQ(cuGraphExecUpdate_v2(e, g, &info), CUDA_SUCCESS);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_SUCCESS);
  CUgraphNode extra;
  ASSERT_EQ(cuGraphAddEmptyNode(&extra, g, &a, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecUpdate_v2(e, g, &info), CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE);
  EXPECT_EQ(info.result, CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED);
  ASSERT_EQ(cuGraphNodeSetEnabled(e, b, 0), CUDA_SUCCESS);
  unsigned enabled = 1;
  ASSERT_EQ(cuGraphNodeGetEnabled(e, b, &enabled), CUDA_SUCCESS);
  EXPECT_EQ(enabled, 0u);
  // Only the updated 100 ms kernel runs now.
  CUevent start, end;
  ASSERT_EQ(cuEventCreate(&start, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, 0), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, s), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(e, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(end, s), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_DEVICE_MS(ms, kLaunchMs + 100);
  EXPECT_EQ(cuGraphDestroyNode(extra), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(start) | cuEventDestroy_v2(end) | cuStreamDestroy_v2(s),
            CUDA_SUCCESS);
}

TEST_F(GraphEdgeTest, CaptureDependenciesCanBeReplaced) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(s, CU_STREAM_CAPTURE_MODE_RELAXED), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k1ms_, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k1ms_, 1, s), CUDA_SUCCESS);
  CUstreamCaptureStatus status;
  CUgraph g = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t n = 0;
  ASSERT_EQ(cuStreamGetCaptureInfo_v3(s, &status, nullptr, &g, &deps, nullptr, &n), CUDA_SUCCESS);
  ASSERT_EQ(n, 1u);
  size_t count = 0;
  ASSERT_EQ(cuGraphGetNodes(g, nullptr, &count), CUDA_SUCCESS);
  std::vector<CUgraphNode> nodes(count);
  ASSERT_EQ(cuGraphGetNodes(g, nodes.data(), &count), CUDA_SUCCESS);
  // The next captured node depends on the first only.
  ASSERT_EQ(cuStreamUpdateCaptureDependencies_v2(s, &nodes[0], nullptr, 1,
                                                 CU_STREAM_SET_CAPTURE_DEPENDENCIES),
            CUDA_SUCCESS);
  ASSERT_EQ(Launch(k1ms_, 1, s), CUDA_SUCCESS);
  CUgraph captured;
  ASSERT_EQ(cuStreamEndCapture(s, &captured), CUDA_SUCCESS);
  size_t dependents = 0;
  ASSERT_EQ(cuGraphNodeGetDependentNodes(nodes[0], nullptr, nullptr, &dependents), CUDA_SUCCESS);
  EXPECT_EQ(dependents, 2u);
  EXPECT_EQ(cuGraphDestroy(captured), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(GraphEdgeTest, UserObjectsAreDestroyedWithTheirLastReference) {
  static int destroyed = 0;
  CUuserObject o;
  ASSERT_EQ(cuUserObjectCreate(
                &o, &destroyed, [](void* p) { ++*static_cast<int*>(p); }, 1,
                CU_USER_OBJECT_NO_DESTRUCTOR_SYNC),
            CUDA_SUCCESS);
  CUgraph g;
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphRetainUserObject(g, o, 1, CU_GRAPH_USER_OBJECT_MOVE), CUDA_SUCCESS);
  CUgraphExec e;
  ASSERT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(destroyed, 0) << "the executable graph holds it";
  ASSERT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(destroyed, 1);
}

// ---- device attributes ----

TEST(CudaDeviceAttributes, ComeFromTheProfileOrAreConstants) {
  SimEnv::Setup("h100-80g:2");
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  int v = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 132);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 32);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), CUDA_SUCCESS);
  EXPECT_EQ(v, 0x17);
  ASSERT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID, 0), CUDA_SUCCESS);
  EXPECT_EQ(v, 0) << "a real attribute without a row";
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CUdevice_attribute(0), 0), CUDA_ERROR_INVALID_VALUE);
}

}  // namespace
}  // namespace hami::testing
