// The policy in-process, against a fake driver: the driver's typed tables (driver.h) are
// filled with functions of this test, and the region is a real one in a temporary file. No
// process is started and nothing sleeps. Each family's charge and refusal: linear and
// pitched memory, arrays (every format and shape), VMM, modules and libraries, pools, graph
// memory, contexts, and the CUDA memory views.
#include <gtest/gtest.h>

#include <cstring>

#include "common/temp_dir.h"
#include "vgpu/accounting.h"
#include "vgpu/arrays.h"
#include "vgpu/graphs.h"
#include "vgpu/limiter.h"
#include "vgpu/modules.h"
#include "vgpu/pools.h"
#include "vgpu/runtime.h"
#include "vgpu/test_state.h"
#include "vgpu/views.h"
#include "vgpu/vmm.h"

namespace hami::vgpu {
namespace {

constexpr uint64_t kGranule = 2ull << 20;
constexpr uint64_t kLimit = 64ull << 20;

// The fake driver: one device, one current context.
CUcontext g_current = reinterpret_cast<CUcontext>(0x100);
CUdeviceptr g_next = 0x10000000;

CUresult FakeCtxGetCurrent(CUcontext* ctx) {
  *ctx = g_current;
  return CUDA_SUCCESS;
}
CUresult FakeCtxGetDevice(CUdevice* dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}
CUresult FakeGranularity(size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
  *g = kGranule;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGet(CUdevice* d, int ordinal) {
  *d = ordinal;
  return CUDA_SUCCESS;
}
CUresult FakeUuid(CUuuid* u, CUdevice) {
  std::memset(u->bytes, 0x5a, sizeof(u->bytes));
  return CUDA_SUCCESS;
}
// The device's free memory as the driver reports it (modules are measured by it).
constexpr uint64_t kPhysical = 16ull << 30;
uint64_t g_free = 8ull << 30;
CUresult FakeMemGetInfo(size_t* free, size_t* total) {
  *free = g_free;
  *total = kPhysical;
  return CUDA_SUCCESS;
}
// Frees the driver was asked for.
std::vector<CUdeviceptr> g_freed;
CUresult FakeMemFree(CUdeviceptr p) {
  g_freed.push_back(p);
  return CUDA_SUCCESS;
}
// One pool's figures as the driver reports them.
uint64_t g_pool_reserved = 0;
uint64_t g_pool_used = 0;
CUresult FakePoolAttribute(CUmemoryPool, CUmemPool_attribute attr, void* value) {
  *static_cast<cuuint64_t*>(value) =
      attr == CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT ? g_pool_reserved : g_pool_used;
  return CUDA_SUCCESS;
}
// Graphs of one memory-allocation node on device 0, of g_graph_bytes; the device's graph
// memory as the driver reports it.
uint64_t g_graph_bytes = 0;
uint64_t g_graph_reserved = 0;
int g_graph_trims = 0;
CUresult FakeGraphNodes(CUgraph, CUgraphNode* nodes, size_t* n) {
  if (nodes != nullptr && *n >= 1) nodes[0] = reinterpret_cast<CUgraphNode>(0x900);
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult FakeNodeType(CUgraphNode, CUgraphNodeType* type) {
  *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
  return CUDA_SUCCESS;
}
CUresult FakeAllocNode(CUgraphNode, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  *p = CUDA_MEM_ALLOC_NODE_PARAMS{};
  p->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p->poolProps.location.id = 0;
  p->bytesize = g_graph_bytes;
  return CUDA_SUCCESS;
}
CUresult FakeGraphMem(CUdevice, CUgraphMem_attribute, void* value) {
  *static_cast<cuuint64_t*>(value) = g_graph_reserved;
  return CUDA_SUCCESS;
}
CUresult FakeGraphTrim(CUdevice) {
  ++g_graph_trims;
  g_graph_reserved = 0;  // nothing of it was in use
  return CUDA_SUCCESS;
}
// Whether device 0's primary context is active.
bool g_primary_active = false;
CUresult FakePrimaryState(CUdevice, unsigned* flags, int* active) {
  *flags = 0;
  *active = g_primary_active ? 1 : 0;
  return CUDA_SUCCESS;
}

// The fake driver's tables: the test's own, handed to each test's state (never published as
// the process's driver).
const CudaDriver& FakeDriver() {
  static const CudaDriver fake = [] {
    CudaDriver d;
    d.aux.cuCtxGetCurrent = FakeCtxGetCurrent;
    d.aux.cuCtxGetDevice = FakeCtxGetDevice;
    d.aux.cuMemGetAllocationGranularity = FakeGranularity;
    d.aux.cuDeviceGetCount = FakeDeviceGetCount;
    d.aux.cuDeviceGet = FakeDeviceGet;
    d.aux.cuDeviceGetUuid_v2 = FakeUuid;
    d.aux.cuDevicePrimaryCtxGetState = FakePrimaryState;
    d.aux.cuMemPoolGetAttribute = FakePoolAttribute;
    d.aux.cuGraphGetNodes = FakeGraphNodes;
    d.aux.cuGraphNodeGetType = FakeNodeType;
    d.aux.cuGraphMemAllocNodeGetParams = FakeAllocNode;
    d.aux.cuDeviceGetGraphMemAttribute = FakeGraphMem;
    d.cuda.cuDeviceGraphMemTrim = FakeGraphTrim;
    d.cuda.cuMemGetInfo_v2 = FakeMemGetInfo;
    d.cuda.cuMemFree_v2 = FakeMemFree;
    return d;
  }();
  return fake;
}

// Each test: a state of its own over a region of its own (64 MiB on the one device), and the
// fake driver as it starts.
class PolicyTest : public ::testing::Test {
 protected:
  PolicyTest()
      : state_(testing::MakeState({{limits::Key::kSharedCache, dir_.File("usage.cache")},
                                   {limits::Key::kMemoryLimit, "64m"},
                                   {limits::Key::kIdentityTiers, "none"}},
                                  &FakeDriver())),
        rt(*state_) {}

  void SetUp() override {
    g_current = reinterpret_cast<CUcontext>(0x100);
    g_free = 8ull << 30;
    g_freed.clear();
    g_pool_reserved = g_pool_used = 0;
    g_graph_bytes = g_graph_reserved = 0;
    g_graph_trims = 0;
    g_primary_active = false;
    LearnDevicesFromCuda(rt);
    ASSERT_EQ(JoinRegion(rt), JoinState::kJoined);
  }
  void TearDown() override {
    // Everything went through this test's state: the process's own was never made, and no
    // library was loaded for it.
    EXPECT_EQ(g_runtime.load(), nullptr);
    EXPECT_EQ(internal::g_cuda.load(), nullptr);
    EXPECT_EQ(internal::g_nvml.load(), nullptr);
  }

  TempDir dir_{"hami-policy-test"};
  std::unique_ptr<Runtime> state_;
  Runtime& rt;

  uint64_t Used() { return ViewRegion(rt)->UsedBytes(RegionIndex(rt, 0)); }
  // What this process is charged on device 0 under `kind`.
  uint64_t Kind(UsageKind kind) {
    uint64_t sum = 0;
    for (const auto& [slot, kinds] : ViewRegion(rt)->Snapshot(RegionIndex(rt, 0)).slots) {
      sum += kinds[size_t(kind)];
    }
    return sum;
  }
  uint64_t Room() { return kLimit - Used(); }

  // An allocation through the admission path, with the driver call faked.
  CUresult Alloc(CUdeviceptr* p, uint64_t bytes, CUresult driver = CUDA_SUCCESS) {
    return AdmitAllocation(rt, p, bytes, UsageKind::kData, [&] {
      if (driver == CUDA_SUCCESS) *p = (g_next += 0x10000000);
      return driver;
    });
  }
  void Free(CUdeviceptr p) {
    ASSERT_EQ(FreeAllocation(rt, p, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  }
};

// A launch tells a node agent's feedback loop that the container is active: the first one,
// then one per kActivityBatch, and the first one after the loop decayed the container's
// recent-kernel counter to 0, however few launches came between.
TEST_F(PolicyTest, ALaunchAfterTheDecayToIdleIsRecordedAtOnce) {
  region::Region* reg = ViewRegion(rt);
  int ordinal = -1;
  auto launches = [&] {
    for (const region::SlotView& s : reg->Slots()) {
      if (s.pid == getpid()) return s.launches;
    }
    return uint64_t(0);
  };
  auto decay_to_idle = [&] {
    ASSERT_TRUE(reg->UpdateRecentKernel([](uint32_t) -> uint32_t { return 0; }).ok());
    ASSERT_EQ(reg->RecentKernel(), 0u);
  };
  decay_to_idle();
  LimitedDevice(rt, reg, nullptr, &ordinal);
  EXPECT_EQ(reg->RecentKernel(), region::kRecentKernelOnLaunch);
  // The loop decays it again; of the next three launches the first says so at once, with
  // itself as the one launch not yet counted, and the other two wait for a later flush.
  decay_to_idle();
  const uint64_t before = launches();
  for (int i = 0; i < 3; ++i) LimitedDevice(rt, reg, nullptr, &ordinal);
  EXPECT_EQ(reg->RecentKernel(), region::kRecentKernelOnLaunch);
  EXPECT_EQ(launches() - before, 1u);
}

TEST_F(PolicyTest, TheRegionHoldsTheDeviceWithTheLimit) {
  ASSERT_GE(RegionIndex(rt, 0), 0);
  EXPECT_EQ(LimitOf(rt, 0), kLimit);
  EXPECT_EQ(BooksFor(rt, 0), Books::kAccounted);
  EXPECT_EQ(BooksFor(rt, 5), Books::kRefused) << "a device the region does not hold is refused";
}

TEST_F(PolicyTest, LargeAllocationsAreChargedInWholeGranules) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  ASSERT_EQ(Alloc(&p, 3ull << 20), CUDA_SUCCESS);
  EXPECT_EQ(Used() - before, 2 * kGranule);
  Free(p);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, SmallAllocationsShareOnePage) {
  const uint64_t before = Used();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(Alloc(&a, 4096), CUDA_SUCCESS);
  EXPECT_EQ(Used() - before, kGranule);
  ASSERT_EQ(Alloc(&b, 4096), CUDA_SUCCESS);
  EXPECT_EQ(Used() - before, kGranule) << "the second shares the first's page";
  Free(a);
  EXPECT_EQ(Used() - before, kGranule);
  Free(b);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, PastTheLimitIsRefusedAndTheDriverIsNotAsked) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  bool asked = false;
  CUresult r = AdmitAllocation(rt, &p, kLimit + 1, UsageKind::kData, [&] {
    asked = true;
    return CUDA_SUCCESS;
  });
  EXPECT_EQ(r, CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, AFailedDriverCallGivesTheReservationBack) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  EXPECT_EQ(Alloc(&p, 8ull << 20, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Alloc(&p, 512, CUDA_ERROR_INVALID_VALUE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, TheBudgetIsExactlyTheLimit) {
  const uint64_t before = Used();
  std::vector<CUdeviceptr> held;
  for (;;) {
    CUdeviceptr p = 0;
    if (Alloc(&p, kGranule) != CUDA_SUCCESS) break;
    held.push_back(p);
  }
  EXPECT_EQ(before + held.size() * kGranule, kLimit);
  for (CUdeviceptr p : held) Free(p);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, AnEndedContextReturnsWhatWasAllocatedInIt) {
  const uint64_t before = Used();
  CUdeviceptr a = 0, b = 0;
  ASSERT_EQ(Alloc(&a, 8ull << 20), CUDA_SUCCESS);
  ASSERT_EQ(Alloc(&b, 1024), CUDA_SUCCESS);
  ContextEnded(rt, g_current);
  EXPECT_EQ(Used(), before);
  // Freeing afterwards is the driver's business only: nothing is returned twice.
  Free(a);
  Free(b);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, WithoutACurrentContextTheDriverAnswers) {
  CUcontext saved = g_current;
  g_current = nullptr;
  CUdeviceptr p = 0;
  bool asked = false;
  CUresult r = AdmitAllocation(rt, &p, 4096, UsageKind::kData, [&] {
    asked = true;
    return CUDA_ERROR_INVALID_CONTEXT;
  });
  g_current = saved;
  EXPECT_EQ(r, CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_TRUE(asked);
}

// ---- pitched memory ----

// The driver's pitched allocation, faked: the pitch it chose.
CUresult FakePitched(CUdeviceptr* p, size_t* pitch, size_t chosen) {
  *p = (g_next += 0x10000000);
  *pitch = chosen;
  return CUDA_SUCCESS;
}

TEST_F(PolicyTest, APitchedAllocationIsChargedItsRealPitchTimesItsHeight) {
  EXPECT_EQ(PitchEstimate(1000, 3000), 1024u * 3000) << "the width rounded to 512 bytes";
  const uint64_t before = Kind(UsageKind::kData);
  CUdeviceptr p = 0;
  size_t pitch = 0;
  ASSERT_EQ(AllocPitch(rt, &p, &pitch, 1000, 3000, [&] { return FakePitched(&p, &pitch, 1024); }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData) - before, RoundUp(1024 * 3000, kGranule));
  Free(p);
  EXPECT_EQ(Kind(UsageKind::kData), before);
}

TEST_F(PolicyTest, APitchWiderThanEstimatedIsChargedWhatItReallyTook) {
  const uint64_t before = Kind(UsageKind::kData);
  CUdeviceptr p = 0;
  size_t pitch = 0;
  // Estimated at 1 MiB (half a granule: a share of a page), taken at 2 MiB: a whole granule.
  ASSERT_EQ(AllocPitch(rt, &p, &pitch, 1000, 1024, [&] { return FakePitched(&p, &pitch, 2048); }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData) - before, kGranule);
  Free(p);
  EXPECT_EQ(Kind(UsageKind::kData), before);
}

TEST_F(PolicyTest, APitchWiderThanTheRoomLeftIsFreedAndRefused) {
  const uint64_t before = Used();
  std::vector<CUdeviceptr> fill;
  while (Room() > kGranule) {
    CUdeviceptr f = 0;
    ASSERT_EQ(Alloc(&f, kGranule), CUDA_SUCCESS);
    fill.push_back(f);
  }
  ASSERT_EQ(Room(), kGranule);
  g_freed.clear();
  CUdeviceptr p = 0;
  size_t pitch = 0;
  // Estimated at 2 MiB, which fits; the driver took 4 MiB, which does not.
  EXPECT_EQ(AllocPitch(rt, &p, &pitch, 2048, 1024, [&] { return FakePitched(&p, &pitch, 4096); }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(g_freed, std::vector<CUdeviceptr>{p}) << "the memory went back to the driver";
  EXPECT_EQ(Room(), kGranule) << "and nothing stays charged";
  for (CUdeviceptr f : fill) Free(f);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, APitchedAllocationPastTheLimitIsRefusedBeforeTheDriver) {
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  size_t pitch = 0;
  bool asked = false;
  EXPECT_EQ(AllocPitch(rt, &p, &pitch, 1 << 20, kLimit,
                       [&] {
                         asked = true;
                         return CUDA_SUCCESS;
                       }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked);
  // A width times height that does not fit in 64 bits saturates instead of wrapping.
  EXPECT_EQ(PitchEstimate(uint64_t(1) << 40, uint64_t(1) << 40), UINT64_MAX);
  EXPECT_EQ(AllocPitch(rt, &p, &pitch, uint64_t(1) << 40, uint64_t(1) << 40,
                       [&] {
                         asked = true;
                         return CUDA_SUCCESS;
                       }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked);
  EXPECT_EQ(Used(), before);
}

// ---- arrays ----

CUDA_ARRAY_DESCRIPTOR Desc2D(size_t w, size_t h, CUarray_format f, unsigned channels) {
  CUDA_ARRAY_DESCRIPTOR d{};
  d.Width = w;
  d.Height = h;
  d.Format = f;
  d.NumChannels = channels;
  return d;
}

CUDA_ARRAY3D_DESCRIPTOR Desc3D(size_t w, size_t h, size_t depth, CUarray_format f,
                               unsigned channels, unsigned flags = 0) {
  CUDA_ARRAY3D_DESCRIPTOR d{};
  d.Width = w;
  d.Height = h;
  d.Depth = depth;
  d.Format = f;
  d.NumChannels = channels;
  d.Flags = flags;
  return d;
}

TEST(ArrayBytes, EveryFormatAndShape) {
  struct Row {
    const char* what;
    ArrayShape shape;
    unsigned levels;
    uint64_t bytes;
  };
  const Row rows[] = {
      {"2D float4", ShapeOf(Desc2D(1024, 1024, CU_AD_FORMAT_FLOAT, 4)), 1, 16ull << 20},
      {"1D half2 (height 0)", ShapeOf(Desc2D(4096, 0, CU_AD_FORMAT_HALF, 2)), 1, 4096 * 4},
      {"3D uint8", ShapeOf(Desc3D(1000, 1000, 3, CU_AD_FORMAT_UNSIGNED_INT8, 1)), 1, 3'000'000},
      {"int16 x2 channels", ShapeOf(Desc2D(100, 100, CU_AD_FORMAT_SIGNED_INT16, 2)), 1, 40'000},
      {"int32 x1", ShapeOf(Desc2D(100, 100, CU_AD_FORMAT_SIGNED_INT32, 1)), 1, 40'000},
      {"BC1: at most a byte a texel", ShapeOf(Desc2D(1024, 1024, CU_AD_FORMAT_BC1_UNORM, 1)), 1,
       1ull << 20},
      {"packed 8x4: channels do not multiply",
       ShapeOf(Desc2D(256, 256, CU_AD_FORMAT_UNORM_INT8X4, 4)), 1, 256 * 256 * 4},
      {"NV12", ShapeOf(Desc2D(256, 256, CU_AD_FORMAT_NV12, 3)), 1, 256 * 256 * 2},
      {"16x4", ShapeOf(Desc2D(16, 16, CU_AD_FORMAT_UNORM_INT16X4, 1)), 1, 16 * 16 * 8},
      {"a format this build does not know: 16 bytes",
       ShapeOf(Desc2D(16, 16, CUarray_format(0x7777), 1)), 1, 16 * 16 * 16},
      {"mip levels halve every dimension",
       ShapeOf(Desc3D(64, 64, 64, CU_AD_FORMAT_UNSIGNED_INT8, 1)), 2, 64 * 64 * 64 + 32 * 32 * 32},
      {"at least 1 in each dimension", ShapeOf(Desc3D(4, 1, 0, CU_AD_FORMAT_UNSIGNED_INT8, 1)), 4,
       4 + 2 + 1 + 1},
      {"a layered array keeps its layers",
       ShapeOf(Desc3D(256, 256, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_LAYERED)), 3,
       (256 * 256 + 128 * 128 + 64 * 64) * 6 * 4},
      {"so does a cube map",
       ShapeOf(Desc3D(64, 64, 6, CU_AD_FORMAT_FLOAT, 1, CUDA_ARRAY3D_CUBEMAP)), 2,
       (64 * 64 + 32 * 32) * 6 * 4},
      {"no level, nothing", ShapeOf(Desc2D(64, 64, CU_AD_FORMAT_FLOAT, 1)), 0, 0},
      {"too large for any device",
       ShapeOf(Desc3D(size_t(1) << 40, size_t(1) << 40, 1, CU_AD_FORMAT_FLOAT, 4)), 1,
       kUnfittableBytes},
  };
  for (const Row& r : rows) EXPECT_EQ(ArrayBytes(r.shape, r.levels), r.bytes) << r.what;
  CUDA_ARRAY_DESCRIPTOR_v1 v1{};
  v1.Width = 10;
  v1.Height = 10;
  v1.Format = CU_AD_FORMAT_FLOAT;
  v1.NumChannels = 2;
  EXPECT_EQ(ArrayBytes(ShapeOf(v1), 1), 800u) << "the 32-bit descriptor";
}

// The driver's array creation, faked: a new handle.
template <typename Handle>
CUresult FakeCreate(Handle* h) {
  *h = reinterpret_cast<Handle>(g_next += 0x1000);
  return CUDA_SUCCESS;
}

TEST_F(PolicyTest, AnArrayIsChargedItsBytesInWholeGranulesUntilDestroyed) {
  const uint64_t before = Kind(UsageKind::kData);
  const CUDA_ARRAY3D_DESCRIPTOR d = Desc3D(1000, 1000, 3, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  CUarray a = nullptr;
  ASSERT_EQ(CreateArray(rt, &a, &d, 1, [&] { return FakeCreate(&a); }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData) - before, RoundUp(3'000'000, kGranule));
  CUmipmappedArray m = nullptr;
  const CUDA_ARRAY3D_DESCRIPTOR md = Desc3D(1024, 1024, 0, CU_AD_FORMAT_FLOAT, 1);
  ASSERT_EQ(CreateArray(rt, &m, &md, 11, [&] { return FakeCreate(&m); }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData) - before,
            RoundUp(3'000'000, kGranule) + RoundUp(ArrayBytes(ShapeOf(md), 11), kGranule));
  ASSERT_EQ(DestroyObject(rt, a, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  ASSERT_EQ(DestroyObject(rt, m, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kData), before);
  // Destroying it again is the driver's business only.
  EXPECT_EQ(DestroyObject(rt, a, [] { return CUDA_ERROR_INVALID_HANDLE; }),
            CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(Kind(UsageKind::kData), before);
}

TEST_F(PolicyTest, AnArrayPastTheLimitIsRefusedAndTheDriverIsNotAsked) {
  const uint64_t before = Used();
  const CUDA_ARRAY3D_DESCRIPTOR d = Desc3D(1 << 16, 1 << 14, 1, CU_AD_FORMAT_UNSIGNED_INT8, 1);
  CUarray a = nullptr;
  bool asked = false;
  EXPECT_EQ(CreateArray(rt, &a, &d, 1,
                        [&] {
                          asked = true;
                          return CUDA_SUCCESS;
                        }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked);
  const CUDA_ARRAY3D_DESCRIPTOR huge =
      Desc3D(size_t(1) << 40, size_t(1) << 40, 1 << 20, CU_AD_FORMAT_FLOAT, 4);
  EXPECT_EQ(CreateArray(rt, &a, &huge, 1,
                        [&] {
                          asked = true;
                          return CUDA_SUCCESS;
                        }),
            CUDA_ERROR_OUT_OF_MEMORY)
      << "a size past 64 bits does not wrap to a small charge";
  EXPECT_FALSE(asked);
  EXPECT_EQ(Used(), before);
}

TEST_F(PolicyTest, AnArrayTheDriverRefusesIsNotCharged) {
  const uint64_t before = Used();
  const CUDA_ARRAY_DESCRIPTOR d = Desc2D(1024, 1024, CU_AD_FORMAT_FLOAT, 4);
  CUarray a = nullptr;
  EXPECT_EQ(CreateArray(rt, &a, &d, 1, [] { return CUDA_ERROR_INVALID_VALUE; }),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Used(), before);
  // No descriptor: the driver answers, nothing is charged.
  const CUDA_ARRAY_DESCRIPTOR* none = nullptr;
  EXPECT_EQ(CreateArray(rt, &a, none, 1, [] { return CUDA_ERROR_INVALID_VALUE; }),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Used(), before);
}

// ---- VMM ----

CUmemAllocationProp OnDevice(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

CUresult FakePhysical(CUmemGenericAllocationHandle* h) {
  *h = (g_next += 0x1000);
  return CUDA_SUCCESS;
}

TEST_F(PolicyTest, PhysicalMemoryIsChargedUntilReleasedAndUnmapped) {
  const CUmemAllocationProp prop = OnDevice(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(CreatePhysical(rt, &h, 8ull << 20, &prop, [&] { return FakePhysical(&h); }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 8ull << 20) << "its size, as asked";
  const CUdeviceptr va = 0x7000000000;
  ASSERT_EQ(MapPhysical(rt, va, 4ull << 20, h, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  ASSERT_EQ(MapPhysical(rt, va + (4ull << 20), 4ull << 20, h, [] { return CUDA_SUCCESS; }),
            CUDA_SUCCESS);
  ASSERT_EQ(ReleasePhysical(rt, h, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 8ull << 20) << "still mapped twice";
  ASSERT_EQ(UnmapPhysical(rt, va, 4ull << 20, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 8ull << 20) << "still mapped once";
  ASSERT_EQ(UnmapPhysical(rt, va + (4ull << 20), 4ull << 20, [] { return CUDA_SUCCESS; }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 0u) << "released and unmapped";
}

TEST_F(PolicyTest, ARetainedHandleMustBeReleasedToo) {
  const CUmemAllocationProp prop = OnDevice(0);
  CUmemGenericAllocationHandle h = 0;
  ASSERT_EQ(CreatePhysical(rt, &h, 4ull << 20, &prop, [&] { return FakePhysical(&h); }),
            CUDA_SUCCESS);
  CUmemGenericAllocationHandle again = 0;
  ASSERT_EQ(RetainPhysical(rt, &again,
                           [&] {
                             again = h;
                             return CUDA_SUCCESS;
                           }),
            CUDA_SUCCESS);
  ASSERT_EQ(ReleasePhysical(rt, h, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 4ull << 20) << "one handle is left";
  // A release the driver refuses changes nothing.
  EXPECT_EQ(ReleasePhysical(rt, again, [] { return CUDA_ERROR_INVALID_VALUE; }),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Kind(UsageKind::kVmm), 4ull << 20);
  ASSERT_EQ(ReleasePhysical(rt, again, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kVmm), 0u);
}

TEST_F(PolicyTest, PhysicalMemoryPastTheLimitIsRefusedAndHostMemoryIsNotCharged) {
  const uint64_t before = Used();
  const CUmemAllocationProp prop = OnDevice(0);
  CUmemGenericAllocationHandle h = 0;
  bool asked = false;
  EXPECT_EQ(CreatePhysical(rt, &h, Room() + kGranule, &prop,
                           [&] {
                             asked = true;
                             return CUDA_SUCCESS;
                           }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked);
  EXPECT_EQ(CreatePhysical(rt, &h, 8ull << 20, &prop, [] { return CUDA_ERROR_OUT_OF_MEMORY; }),
            CUDA_ERROR_OUT_OF_MEMORY)
      << "the driver's own refusal";
  EXPECT_EQ(Used(), before) << "gives the reservation back";
  CUmemAllocationProp host = prop;
  host.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(PhysicalDevice(&host), -1);
  ASSERT_EQ(CreatePhysical(rt, &h, kLimit * 2, &host, [&] { return FakePhysical(&h); }),
            CUDA_SUCCESS);
  EXPECT_EQ(Used(), before) << "host memory is not the device's";
  ASSERT_EQ(ReleasePhysical(rt, h, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Used(), before);
}

// ---- modules and libraries ----

// A load that takes `bytes` of the device's free memory.
template <typename Handle>
auto Load(Handle* h, uint64_t bytes) {
  return [h, bytes] {
    g_free -= bytes;
    return FakeCreate(h);
  };
}

TEST_F(PolicyTest, AModuleIsChargedWhatItsLoadTookUntilUnloaded) {
  const uint64_t free_before = g_free;
  CUmodule m = nullptr;
  ASSERT_EQ(MeasuredLoad(rt, &m, LoadScope::kContext, Load(&m, 3ull << 20),
                         [](CUmodule) {
                           ADD_FAILURE() << "unloaded";
                           return CUDA_SUCCESS;
                         }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 3ull << 20) << "the drop in free memory, as measured";
  ASSERT_EQ(DestroyObject(rt, m, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  g_free = free_before;
}

TEST_F(PolicyTest, AModulePastTheLimitIsUnloadedAndRefused) {
  const uint64_t free_before = g_free;
  const uint64_t before = Used();
  CUmodule m = nullptr;
  std::vector<CUmodule> unloaded;
  EXPECT_EQ(MeasuredLoad(rt, &m, LoadScope::kContext, Load(&m, Room() + kGranule),
                         [&](CUmodule u) {
                           unloaded.push_back(u);
                           return CUDA_SUCCESS;
                         }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(unloaded, std::vector<CUmodule>{m});
  EXPECT_EQ(Used(), before);
  g_free = free_before;
}

TEST_F(PolicyTest, ALoadThatOverlappedAnAllocationIsNotCharged) {
  const uint64_t free_before = g_free;
  CUmodule m = nullptr;
  auto unload = [](CUmodule) { return CUDA_SUCCESS; };
  // Another allocating call began (and ended) while the load ran: the drop is not the load's.
  ASSERT_EQ(MeasuredLoad(
                rt, &m, LoadScope::kContext,
                [&] {
                  { Allocating other(rt); }
                  return Load(&m, 4ull << 20)();
                },
                unload),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  // A load that took nothing, or that failed, is not charged either.
  ASSERT_EQ(MeasuredLoad(rt, &m, LoadScope::kContext, Load(&m, 0), unload), CUDA_SUCCESS);
  EXPECT_EQ(MeasuredLoad(
                rt, &m, LoadScope::kContext, [] { return CUDA_ERROR_INVALID_IMAGE; }, unload),
            CUDA_ERROR_INVALID_IMAGE);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  // Nor one that could not be undone (the driver lacks the unload).
  using Unload = CUresult (*)(CUmodule);
  ASSERT_EQ(MeasuredLoad(rt, &m, LoadScope::kContext, Load(&m, 4ull << 20), Unload{nullptr}),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  g_free = free_before;
}

TEST_F(PolicyTest, AModuleGoesWithItsContextALibraryWithTheProcess) {
  const uint64_t free_before = g_free;
  CUmodule m = nullptr;
  CUlibrary lib = nullptr;
  auto unload_module = [](CUmodule) { return CUDA_SUCCESS; };
  auto unload_library = [](CUlibrary) { return CUDA_SUCCESS; };
  ASSERT_EQ(MeasuredLoad(rt, &m, LoadScope::kContext, Load(&m, 2ull << 20), unload_module),
            CUDA_SUCCESS);
  ASSERT_EQ(MeasuredLoad(rt, &lib, LoadScope::kProcess, Load(&lib, 6ull << 20), unload_library),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 8ull << 20);
  ContextEnded(rt, g_current);
  EXPECT_EQ(Kind(UsageKind::kModule), 6ull << 20) << "the library stays";
  ASSERT_EQ(DestroyObject(rt, lib, [] { return CUDA_SUCCESS; }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kModule), 0u);
  g_free = free_before;
}

// ---- contexts ----

constexpr uint64_t kContextBytes = 5ull << 20;

CUresult FakeContext(CUcontext* ctx) {
  *ctx = reinterpret_cast<CUcontext>(g_next += 0x1000);
  return CUDA_SUCCESS;
}

TEST_F(PolicyTest, EveryContextIsChargedTheMeasuredSizeUntilItEnds) {
  rt.ledger.SetContextBytes(0, kContextBytes);
  const uint64_t before = Kind(UsageKind::kContext);
  CUcontext a = nullptr, b = nullptr;
  ASSERT_EQ(CreateContext(rt, 0, &a, false, [&] { return FakeContext(&a); }), CUDA_SUCCESS);
  ASSERT_EQ(CreateContext(rt, 0, &b, false, [&] { return FakeContext(&b); }), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kContext) - before, 2 * kContextBytes);
  ContextEnded(rt, a);
  EXPECT_EQ(Kind(UsageKind::kContext) - before, kContextBytes);
  ContextEnded(rt, b);
  EXPECT_EQ(Kind(UsageKind::kContext), before);
  // A creation the driver refuses charges nothing.
  CUcontext c = nullptr;
  EXPECT_EQ(CreateContext(rt, 0, &c, false, [] { return CUDA_ERROR_OUT_OF_MEMORY; }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(Kind(UsageKind::kContext), before);
}

TEST_F(PolicyTest, APrimaryContextIsChargedOnceAndReleasedWhenItEnds) {
  rt.ledger.SetContextBytes(0, kContextBytes);
  const uint64_t before = Kind(UsageKind::kContext);
  g_primary_active = false;
  CUcontext primary = nullptr;
  ASSERT_EQ(CreateContext(rt, 0, &primary, true, [&] { return FakeContext(&primary); }),
            CUDA_SUCCESS);
  g_primary_active = true;
  CUcontext again = nullptr;
  ASSERT_EQ(CreateContext(rt, 0, &again, true,
                          [&] {
                            again = primary;
                            return CUDA_SUCCESS;
                          }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kContext) - before, kContextBytes) << "a retain of an active one";
  PrimaryMayHaveEnded(rt, 0);
  EXPECT_EQ(Kind(UsageKind::kContext) - before, kContextBytes) << "still active";
  g_primary_active = false;
  PrimaryMayHaveEnded(rt, 0);
  EXPECT_EQ(Kind(UsageKind::kContext), before) << "its last release";
}

// A context of a known size is admitted before the driver is asked: past the budget the
// driver is never called, and nothing is charged.
TEST_F(PolicyTest, AContextPastTheBudgetIsRefusedBeforeTheDriverIsAsked) {
  rt.ledger.SetContextBytes(0, kContextBytes);
  const uint64_t before = Used();
  std::vector<CUdeviceptr> fill;
  for (;;) {
    CUdeviceptr f = 0;
    if (Alloc(&f, kGranule) != CUDA_SUCCESS) break;
    fill.push_back(f);
  }
  ASSERT_EQ(Used(), kLimit);
  CUcontext ctx = nullptr;
  int calls = 0;
  EXPECT_EQ(CreateContext(rt, 0, &ctx, false,
                          [&] {
                            ++calls;
                            return FakeContext(&ctx);
                          }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(calls, 0) << "refused before the driver was asked";
  EXPECT_EQ(Used(), kLimit);
  // Room for it again: admitted, charged, and given back at its end.
  constexpr uint64_t kFreed = (kContextBytes + kGranule - 1) / kGranule;
  for (uint64_t i = 0; i < kFreed; ++i) {
    Free(fill.back());
    fill.pop_back();
  }
  ASSERT_EQ(CreateContext(rt, 0, &ctx, false, [&] { return FakeContext(&ctx); }), CUDA_SUCCESS);
  EXPECT_EQ(Used(), kLimit - kFreed * kGranule + kContextBytes);
  ContextEnded(rt, ctx);
  for (CUdeviceptr f : fill) Free(f);
  EXPECT_EQ(Used(), before);
}

// A failed driver call gives back what was admitted for the context.
TEST_F(PolicyTest, AContextTheDriverRefusesLeavesNothingCharged) {
  rt.ledger.SetContextBytes(0, kContextBytes);
  const uint64_t before = Used();
  CUcontext ctx = nullptr;
  EXPECT_EQ(CreateContext(rt, 0, &ctx, false, [] { return CUDA_ERROR_INVALID_DEVICE; }),
            CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(Used(), before);
}

// ---- pools ----

TEST_F(PolicyTest, APoolIsChargedWhatItReservesUntilTrimmedOrDestroyed) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = 0;
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(0x5000);
  PoolCreated(rt, pool, props);
  EXPECT_EQ(Kind(UsageKind::kPool), 0u) << "a new pool holds nothing";
  CUdeviceptr p = 0;
  ASSERT_EQ(PoolAlloc(rt, &p, 3ull << 20, pool, nullptr, false,
                      [&] {
                        g_pool_reserved = 4ull << 20;  // grown by whole granules
                        g_pool_used = 3ull << 20;
                        p = (g_next += 0x10000000);
                        return CUDA_SUCCESS;
                      }),
            CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kPool), 4ull << 20);
  bool asked = false;
  ASSERT_EQ(PoolAlloc(rt, &p, 1ull << 20, pool, nullptr, false,
                      [&] {
                        asked = true;
                        g_pool_used = 4ull << 20;
                        return CUDA_SUCCESS;
                      }),
            CUDA_SUCCESS);
  EXPECT_TRUE(asked);
  EXPECT_EQ(Kind(UsageKind::kPool), 4ull << 20) << "what the pool caches costs nothing new";
  asked = false;
  EXPECT_EQ(PoolAlloc(rt, &p, Room() + kGranule, pool, nullptr, false,
                      [&] {
                        asked = true;
                        return CUDA_SUCCESS;
                      }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(asked) << "the growth past the limit is refused before the driver";
  EXPECT_EQ(Kind(UsageKind::kPool), 4ull << 20);
  g_pool_used = 0;
  g_pool_reserved = 2ull << 20;
  PoolTrimmed(rt, pool);
  EXPECT_EQ(Kind(UsageKind::kPool), 2ull << 20) << "a trim gives back all but what it keeps";
  PoolDestroyed(rt, pool);
  EXPECT_EQ(Kind(UsageKind::kPool), 0u);
  g_pool_reserved = 0;
}

TEST_F(PolicyTest, APoolOfHostMemoryIsNotCharged) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemoryPool pool = reinterpret_cast<CUmemoryPool>(0x6000);
  PoolCreated(rt, pool, props);
  const uint64_t before = Used();
  CUdeviceptr p = 0;
  bool asked = false;
  ASSERT_EQ(PoolAlloc(rt, &p, kLimit * 2, pool, nullptr, false,
                      [&] {
                        asked = true;
                        g_pool_reserved = kLimit * 2;
                        return CUDA_SUCCESS;
                      }),
            CUDA_SUCCESS);
  EXPECT_TRUE(asked);
  EXPECT_EQ(Used(), before);
  PoolDestroyed(rt, pool);
  EXPECT_EQ(Used(), before);
  g_pool_reserved = 0;
}

// ---- graph memory ----

TEST_F(PolicyTest, AGraphsMemoryIsAdmittedAtItsFirstLaunchAndGivenBackAtATrim) {
  CUgraphExec exec = reinterpret_cast<CUgraphExec>(0xa000);
  g_graph_bytes = 3ull << 20;
  Instantiated(rt, CUDA_SUCCESS, &exec, reinterpret_cast<CUgraph>(0xb000));
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u) << "nothing is resident before a launch";
  int launches = 0;
  auto launch = [&] {
    ++launches;
    g_graph_reserved = 4ull << 20;  // the node's 3 MiB in whole granules
    return CUDA_SUCCESS;
  };
  ASSERT_EQ(LaunchWithMemory(rt, exec, launch), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 4ull << 20);
  ASSERT_EQ(LaunchWithMemory(rt, exec, launch), CUDA_SUCCESS);
  EXPECT_EQ(launches, 2);
  EXPECT_EQ(Kind(UsageKind::kGraph), 4ull << 20) << "a relaunch reuses it";
  g_graph_reserved = 0;
  GraphMemTrimmed(rt, 0);
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u);
  ASSERT_EQ(LaunchWithMemory(rt, exec, launch), CUDA_SUCCESS);
  EXPECT_EQ(Kind(UsageKind::kGraph), 4ull << 20) << "admitted again after the trim";
  g_graph_reserved = 0;
  GraphExecDestroyed(rt, exec);
  EXPECT_EQ(Kind(UsageKind::kGraph), 0u);
  g_graph_bytes = 0;
}

TEST_F(PolicyTest, AGraphWhoseMemoryPassesTheLimitFailsToLaunchAndRunsNothing) {
  const uint64_t before = Used();
  CUgraphExec exec = reinterpret_cast<CUgraphExec>(0xa100);
  g_graph_bytes = Room() + kGranule;
  Instantiated(rt, CUDA_SUCCESS, &exec, reinterpret_cast<CUgraph>(0xb100));
  g_graph_trims = 0;
  bool launched = false;
  EXPECT_EQ(LaunchWithMemory(rt, exec,
                             [&] {
                               launched = true;
                               return CUDA_SUCCESS;
                             }),
            CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_FALSE(launched);
  EXPECT_EQ(g_graph_trims, 1) << "the device's unused graph memory was trimmed once first";
  EXPECT_EQ(Used(), before);
  GraphExecDestroyed(rt, exec);
  g_graph_bytes = 0;
}

// ---- views ----

TEST_F(PolicyTest, CudaSeesTheLimitAsItsTotalAndWhatIsLeftOfItAsFree) {
  CUdeviceptr p = 0;
  ASSERT_EQ(Alloc(&p, 8ull << 20), CUDA_SUCCESS);
  size_t free = 8ull << 30, total = kPhysical;
  ASSERT_EQ(ContainerMemInfo(rt, &free, &total, CUDA_SUCCESS), CUDA_SUCCESS);
  EXPECT_EQ(total, kLimit);
  EXPECT_EQ(free, kLimit - Used());
  free = 1ull << 20;
  total = kPhysical;
  ASSERT_EQ(ContainerMemInfo(rt, &free, &total, CUDA_SUCCESS), CUDA_SUCCESS);
  EXPECT_EQ(free, 1ull << 20) << "never more than the device has free";
  EXPECT_EQ(ContainerMemInfo(rt, &free, &total, CUDA_ERROR_INVALID_CONTEXT),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(ContainerTotalMem(rt, 0, kPhysical), kLimit);
  EXPECT_EQ(ContainerTotalMem(rt, 0, 1ull << 20), 1ull << 20);
  EXPECT_EQ(ContainerTotalMem(rt, 5, kPhysical), kPhysical) << "a device the region does not hold";
  Free(p);
}

}  // namespace
}  // namespace hami::vgpu
