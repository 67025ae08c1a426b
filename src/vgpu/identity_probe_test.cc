// The probe tier in-process, against a fake driver and a fake NVML: the PID that appears in
// NVML's process list when the probe makes its context, the one whose memory grows by the
// marker when the process already holds a context, and "exactly one candidate or nothing"
// when another process appears or allocates at the same time. The lock is a real one in a
// temporary directory; the region is a real one in a temporary file. Nothing sleeps.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "common/temp_dir.h"
#include "common/visible_devices.h"
#include "vgpu/accounting.h"
#include "vgpu/identity.h"
#include "vgpu/runtime.h"
#include "vgpu/test_state.h"

namespace hami::vgpu {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr unsigned kHostPid = 700001;       // this process, as the host's NVML names it
constexpr unsigned kNeighbourPid = 700002;  // another container's process
constexpr uint64_t kContextBytes = 300 * kMiB;

// ---- the fake machine: one GPU, the processes NVML lists on it ----

struct Listed {
  unsigned pid;
  uint64_t bytes;
};
std::vector<Listed> g_listed;
int g_primary_refs = 0;
// What else happens while the probe works: another process makes a context / allocates.
bool g_neighbour_starts_with_us = false;
bool g_neighbour_allocates_with_us = false;
bool g_nvml_lists_us = true;  // false: NVML does not list this process's contexts
const CUcontext kPrimary = reinterpret_cast<CUcontext>(0x2000);
nvmlDevice_t const kHandle = reinterpret_cast<nvmlDevice_t>(0x3000);
unsigned char g_uuid[16];

Listed* Find(unsigned pid) {
  auto it = std::find_if(g_listed.begin(), g_listed.end(),
                         [pid](const Listed& l) { return l.pid == pid; });
  return it == g_listed.end() ? nullptr : &*it;
}
void Grow(unsigned pid, uint64_t bytes) {
  if (Listed* l = Find(pid)) {
    l->bytes += bytes;
  } else {
    g_listed.push_back({pid, bytes});
  }
}

CUresult FakeDeviceGetCount(int* n) {
  *n = 1;
  return CUDA_SUCCESS;
}
CUresult FakeDeviceGet(CUdevice* d, int ordinal) {
  if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
  *d = 0;
  return CUDA_SUCCESS;
}
CUresult FakeUuid(CUuuid* u, CUdevice) {
  std::memcpy(u->bytes, g_uuid, sizeof(u->bytes));
  return CUDA_SUCCESS;
}
CUresult FakeGranularity(size_t* g, const CUmemAllocationProp*, CUmemAllocationGranularity_flags) {
  *g = 2 * kMiB;
  return CUDA_SUCCESS;
}
CUresult FakePrimaryState(CUdevice, unsigned* flags, int* active) {
  *flags = 0;
  *active = g_primary_refs > 0 ? 1 : 0;
  return CUDA_SUCCESS;
}
CUresult FakeRetain(CUcontext* ctx, CUdevice) {
  if (g_primary_refs++ == 0) {
    if (g_nvml_lists_us) Grow(kHostPid, kContextBytes);
    if (g_neighbour_starts_with_us) Grow(kNeighbourPid, kContextBytes);
  }
  *ctx = kPrimary;
  return CUDA_SUCCESS;
}
CUresult FakeRelease(CUdevice) {
  if (g_primary_refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  if (--g_primary_refs == 0) {
    g_listed.erase(std::remove_if(g_listed.begin(), g_listed.end(),
                                  [](const Listed& l) { return l.pid == kHostPid; }),
                   g_listed.end());
  }
  return CUDA_SUCCESS;
}
CUresult FakePush(CUcontext) { return CUDA_SUCCESS; }
CUresult FakePop(CUcontext* ctx) {
  *ctx = kPrimary;
  return CUDA_SUCCESS;
}
CUresult FakeGetCurrent(CUcontext* ctx) {
  *ctx = g_primary_refs > 0 ? kPrimary : nullptr;
  return CUDA_SUCCESS;
}
CUresult FakeGetDevice(CUdevice* dev) {
  *dev = 0;
  return CUDA_SUCCESS;
}
CUresult FakeAlloc(CUdeviceptr* p, size_t bytes) {
  Grow(kHostPid, bytes);
  if (g_neighbour_allocates_with_us) Grow(kNeighbourPid, bytes);
  *p = 0x10000000;
  return CUDA_SUCCESS;
}
CUresult FakeFree(CUdeviceptr) { return CUDA_SUCCESS; }

nvmlReturn_t FakeNvmlInit() { return NVML_SUCCESS; }
nvmlReturn_t FakeNvmlCount(unsigned* n) {
  *n = 1;
  return NVML_SUCCESS;
}
nvmlReturn_t FakeNvmlHandle(unsigned index, nvmlDevice_t* h) {
  if (index != 0) return NVML_ERROR_INVALID_ARGUMENT;
  *h = kHandle;
  return NVML_SUCCESS;
}
nvmlReturn_t FakeNvmlUuid(nvmlDevice_t, char* out, unsigned size) {
  const std::string text = GpuUuidText(g_uuid);
  if (text.size() + 1 > size) return NVML_ERROR_INSUFFICIENT_SIZE;
  std::memcpy(out, text.c_str(), text.size() + 1);
  return NVML_SUCCESS;
}
nvmlReturn_t FakeNvmlMemory(nvmlDevice_t, nvmlMemory_t* m) {
  uint64_t used = 0;
  for (const Listed& l : g_listed) used += l.bytes;
  m->total = 80ull << 30;
  m->used = used;
  m->free = m->total - used;
  return NVML_SUCCESS;
}
nvmlReturn_t FakeNvmlProcesses(nvmlDevice_t, unsigned* count, nvmlProcessInfo_t* infos) {
  if (*count < g_listed.size()) {
    *count = unsigned(g_listed.size());
    return NVML_ERROR_INSUFFICIENT_SIZE;
  }
  *count = unsigned(g_listed.size());
  for (size_t i = 0; i < g_listed.size(); ++i) {
    infos[i] = {};
    infos[i].pid = g_listed[i].pid;
    infos[i].usedGpuMemory = g_listed[i].bytes;
  }
  return NVML_SUCCESS;
}

// The fake libraries' tables: the test's own, handed to each test's state.
const CudaDriver& FakeCuda() {
  static const CudaDriver cuda = [] {
    CudaDriver d;
    d.aux.cuDeviceGetCount = FakeDeviceGetCount;
    d.aux.cuDeviceGet = FakeDeviceGet;
    d.aux.cuDeviceGetUuid_v2 = FakeUuid;
    d.aux.cuMemGetAllocationGranularity = FakeGranularity;
    d.aux.cuDevicePrimaryCtxGetState = FakePrimaryState;
    d.aux.cuCtxPushCurrent_v2 = FakePush;
    d.aux.cuCtxPopCurrent_v2 = FakePop;
    d.aux.cuCtxGetCurrent = FakeGetCurrent;
    d.aux.cuCtxGetDevice = FakeGetDevice;
    d.cuda.cuDevicePrimaryCtxRetain = FakeRetain;
    d.cuda.cuDevicePrimaryCtxRelease_v2 = FakeRelease;
    d.cuda.cuMemAlloc_v2 = FakeAlloc;
    d.cuda.cuMemFree_v2 = FakeFree;
    return d;
  }();
  return cuda;
}
const NvmlDriver& FakeNvml() {
  static const NvmlDriver nvml = [] {
    NvmlDriver n;
    n.nvml.nvmlInit_v2 = FakeNvmlInit;
    n.nvml.nvmlDeviceGetCount_v2 = FakeNvmlCount;
    n.nvml.nvmlDeviceGetHandleByIndex_v2 = FakeNvmlHandle;
    n.aux.nvmlDeviceGetUUID = FakeNvmlUuid;
    n.nvml.nvmlDeviceGetMemoryInfo = FakeNvmlMemory;
    n.nvml.nvmlDeviceGetComputeRunningProcesses_v3 = FakeNvmlProcesses;
    return n;
  }();
  return nvml;
}

// Each test: a state of its own over a region of its own (4 GiB on the one device); the test
// calls the probe tier itself.
class ProbeTierTest : public ::testing::Test {
 protected:
  ProbeTierTest()
      : state_(testing::MakeState({{limits::Key::kSharedCache, dir_.File("usage.cache")},
                                   {limits::Key::kMemoryLimit, "4g"},
                                   {limits::Key::kIdentityTiers, "none"},
                                   {limits::Key::kIdentityProbeLock, dir_.File("lock/probe.lock")}},
                                  &FakeCuda(), &FakeNvml())),
        rt(*state_) {}

  void SetUp() override {
    std::memset(g_uuid, 0x6b, sizeof(g_uuid));
    LearnDevicesFromCuda(rt);
    ASSERT_EQ(JoinRegion(rt), JoinState::kJoined);
    g_listed.clear();
    g_primary_refs = 0;
    g_neighbour_starts_with_us = false;
    g_neighbour_allocates_with_us = false;
    g_nvml_lists_us = true;
    g_listed.push_back({kNeighbourPid, kContextBytes});  // another container is running
  }
  TierOutcome Probe() { return ProbeTier(rt, rt.config); }
  uint64_t Used() { return ViewRegion(rt)->UsedBytes(RegionIndex(rt, 0)); }

  TempDir dir_{"hami-probe-tier-test"};
  std::unique_ptr<Runtime> state_;
  Runtime& rt;
};

TEST_F(ProbeTierTest, ThePidThatAppearsWithTheProbesContextIsTheHostPid) {
  const TierOutcome o = Probe();
  EXPECT_EQ(o.reason, IdentityReason::kNone);
  EXPECT_EQ(o.host_pid, pid_t(kHostPid));
  // The probe's context is gone again, and so is its charge.
  EXPECT_EQ(g_primary_refs, 0);
  EXPECT_EQ(Find(kHostPid), nullptr);
  EXPECT_EQ(Used(), 0u);
}

TEST_F(ProbeTierTest, TwoPidsAppearingAtOnceAreAmbiguous) {
  g_listed.clear();  // the neighbour starts its context with ours
  g_neighbour_starts_with_us = true;
  const TierOutcome o = Probe();
  EXPECT_EQ(o.reason, IdentityReason::kAmbiguous);
  EXPECT_EQ(o.host_pid, 0);
}

TEST_F(ProbeTierTest, NoPidAppearingIsNotFoundNotAGuess) {
  g_nvml_lists_us = false;
  const TierOutcome o = Probe();
  EXPECT_EQ(o.reason, IdentityReason::kNotFound);
  EXPECT_EQ(o.host_pid, 0);
  EXPECT_EQ(g_primary_refs, 0);
}

TEST_F(ProbeTierTest, AProcessHoldingAContextIsFoundByTheMarkerItAllocates) {
  CUcontext ctx;
  ASSERT_EQ(FakeRetain(&ctx, 0), CUDA_SUCCESS);  // the process's own context, made earlier
  const TierOutcome o = Probe();
  EXPECT_EQ(o.reason, IdentityReason::kNone);
  EXPECT_EQ(o.host_pid, pid_t(kHostPid));
  // The marker (two granules) was given back, and the process's own context is still there.
  EXPECT_EQ(Used(), 0u);
  EXPECT_EQ(g_primary_refs, 1);
  ASSERT_EQ(FakeRelease(0), CUDA_SUCCESS);
}

TEST_F(ProbeTierTest, AMarkerThatTwoProcessesGrewByIsAmbiguous) {
  CUcontext ctx;
  ASSERT_EQ(FakeRetain(&ctx, 0), CUDA_SUCCESS);
  g_neighbour_allocates_with_us = true;
  const TierOutcome o = Probe();
  EXPECT_EQ(o.reason, IdentityReason::kAmbiguous);
  EXPECT_EQ(o.host_pid, 0);
  ASSERT_EQ(FakeRelease(0), CUDA_SUCCESS);
}

TEST_F(ProbeTierTest, AProcessListedUnderItsOwnPidIsInTheHostNamespace) {
  g_listed.push_back({unsigned(getpid()), kContextBytes});
  const TierOutcome o = Probe();
  EXPECT_EQ(o.reason, IdentityReason::kNone);
  EXPECT_EQ(o.host_pid, getpid());
  EXPECT_EQ(g_primary_refs, 0) << "no context was needed";
}

}  // namespace
}  // namespace hami::vgpu
