// The container's processes under libvgpu.so: a fork child is a process of its own; a thread
// without a context and a pointer that is not ours get the driver's answers; processes that
// race for memory never pass the limit together and give everything back when they end;
// NVML's running-process lists are the region's slots, and its per-process utilization and
// accounting show only the container's processes.
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "nvml/nvml.h"
#include "region/region.h"
#include "vgpu_fixture.h"
#include "vgpu_probe.h"
#include "vgpu_raw.h"

namespace hami::testing {
namespace {

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = 1ull << 30;

// What the region charges the live process `pid` on region device `index` (-1: no slot).
int64_t SlotUsage(const region::Region& reg, pid_t pid, int index) {
  for (const region::SlotView& s : reg.Slots()) {
    if (s.pid == pid && s.alive && s.state == region::layout::SlotState::kLive) {
      return int64_t(s.used_bytes[size_t(index)]);
    }
  }
  return -1;
}

// The container's live processes on region device `index`, as NVML should list them.
std::vector<ProcessEntry> SlotsOn(const region::Region& reg, int index,
                                  const std::vector<ProcessEntry>& driver) {
  std::vector<ProcessEntry> out;
  for (const region::SlotView& s : reg.Slots()) {
    if (!s.alive || s.state != region::layout::SlotState::kLive) continue;
    bool listed = std::any_of(driver.begin(), driver.end(),
                              [&](const ProcessEntry& e) { return e.pid == s.pid; });
    if (listed || s.used_bytes[size_t(index)] != 0) {
      out.push_back({s.pid, s.used_bytes[size_t(index)]});
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A running-process query, the way a caller sizes it: count first, then the entries.
template <typename Info, typename Fn>
std::vector<ProcessEntry> Query(Fn query, nvmlReturn_t* result = nullptr) {
  unsigned n = 0;
  nvmlReturn_t r = query(&n, static_cast<Info*>(nullptr));
  std::vector<Info> infos;
  for (int attempt = 0; r == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 8; ++attempt) {
    infos.resize(n + 2);
    n = unsigned(infos.size());
    r = query(&n, infos.data());
  }
  if (result != nullptr) *result = r;
  std::vector<ProcessEntry> out;
  for (unsigned i = 0; r == NVML_SUCCESS && i < n; ++i) {
    out.push_back({pid_t(infos[i].pid), infos[i].usedGpuMemory});
  }
  std::sort(out.begin(), out.end());
  return out;
}

#define HAMI_QUERY(fn, info, h) Query<info>([&](unsigned* n, info* a) { return fn(h, n, a); })

class ProcessesTest : public VgpuTest {
 protected:
  void SetUp() override {
    VgpuTest::SetUp();
    if (HasFatalFailure()) return;
    reg_ = OpenRegionReadOnly(VgpuEnv::Get().region);
    ASSERT_NE(reg_, nullptr);
  }
  std::unique_ptr<region::Region> reg_;
};

// Reads one byte from `fd`; false at end of file (the other side died).
bool Await(int fd) {
  char c;
  return read(fd, &c, 1) == 1;
}
void Signal(int fd) {
  char c = 1;
  if (write(fd, &c, 1) != 1) _exit(90);
}

TEST_F(ProcessesTest, AForkChildIsAccountedAsItself) {
  const uint64_t before = FreeBytes();
  CUdeviceptr mine;
  ASSERT_EQ(cuMemAlloc_v2(&mine, 256 * kMiB), CUDA_SUCCESS);
  const int64_t parent = SlotUsage(*reg_, getpid(), 0);
  ASSERT_GE(parent, int64_t(256 * kMiB));
  int up[2], down[2];
  ASSERT_EQ(pipe2(up, O_CLOEXEC), 0);
  ASSERT_EQ(pipe2(down, O_CLOEXEC), 0);
  pid_t child = fork();
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    CUcontext c;
    CUdeviceptr p;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS) {
      _exit(2);
    }
    Signal(up[1]);  // 1: a context
    if (!Await(down[0]) || cuMemAlloc_v2(&p, 128 * kMiB) != CUDA_SUCCESS) _exit(3);
    Signal(up[1]);  // 2: and 128 MiB
    // Its own allocation, released from its own slot.
    if (!Await(down[0]) || cuMemFree_v2(p) != CUDA_SUCCESS) _exit(4);
    Signal(up[1]);  // 3: freed
    Await(down[0]);
    _exit(0);  // no exit handlers, as if killed: the slot is reclaimed by the others
  }
  close(up[1]);
  close(down[0]);
  auto step = [&](int n) {
    if (n > 1) Signal(down[1]);
    return Await(up[0]);
  };
  ASSERT_TRUE(step(1)) << "the child failed to make a context";
  const int64_t child_context = SlotUsage(*reg_, child, 0);
  EXPECT_GE(child_context, 0) << "the child has a slot of its own";
  EXPECT_EQ(SlotUsage(*reg_, getpid(), 0), parent);
  ASSERT_TRUE(step(2));
  EXPECT_EQ(SlotUsage(*reg_, child, 0), child_context + int64_t(128 * kMiB));
  EXPECT_EQ(SlotUsage(*reg_, getpid(), 0), parent);
  ASSERT_TRUE(step(3));
  EXPECT_EQ(SlotUsage(*reg_, child, 0), child_context);
  EXPECT_EQ(SlotUsage(*reg_, getpid(), 0), parent);
  Signal(down[1]);
  close(down[1]);
  close(up[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
  EXPECT_EQ(FreeBytesAfterSweep(), before - 256 * kMiB)
      << "the child's context returned when it died";
  EXPECT_EQ(SlotUsage(*reg_, child, 0), -1);
  EXPECT_EQ(SlotUsage(*reg_, getpid(), 0), parent);
  EXPECT_EQ(cuMemFree_v2(mine), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(ProcessesTest, AForkChildSeesTheContainersNvmlView) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  const uint64_t before = FreeBytes();
  pid_t child = fork();
  if (child == 0) {
    // NVML initialized again in the child, as a program that forks workers does.
    nvmlDevice_t h;
    nvmlMemory_t m{};
    if (nvmlInit_v2() != NVML_SUCCESS || nvmlDeviceGetHandleByIndex_v2(0, &h) != NVML_SUCCESS) {
      _exit(2);
    }
    if (nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS || m.total != 2 * kGiB) _exit(3);
    CUcontext c;
    CUdeviceptr p;
    if (cuInit(0) != CUDA_SUCCESS || cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS ||
        cuCtxSetCurrent(c) != CUDA_SUCCESS || cuMemAlloc_v2(&p, 32 * kMiB) != CUDA_SUCCESS) {
      _exit(4);
    }
    std::vector<ProcessEntry> list =
        HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, h);
    if (nvmlDeviceGetMemoryInfo(h, &m) != NVML_SUCCESS) _exit(5);
    uint64_t sum = 0;
    bool self = false, parent = false;
    for (const ProcessEntry& e : list) {
      sum += e.used_bytes;
      self |= e.pid == getpid() && e.used_bytes >= 32 * kMiB;
      parent |= e.pid == getppid();
    }
    if (!self || !parent) _exit(6);
    if (sum != m.used) _exit(7);
    _exit(0);
  }
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st)) << "status " << st;
  EXPECT_EQ(WEXITSTATUS(st), 0) << "the child's check that failed (see the exit codes above)";
  EXPECT_EQ(FreeBytesAfterSweep(), before) << "what the child held came back";
}

TEST_F(ProcessesTest, AThreadWithoutAContextGetsTheDriversErrors) {
  auto raw_alloc = HAMI_RAW_CUDA(cuMemAlloc_v2);
  auto raw_info = HAMI_RAW_CUDA(cuMemGetInfo_v2);
  ASSERT_NE(raw_alloc, nullptr);
  ASSERT_NE(raw_info, nullptr);
  const uint64_t before = FreeBytes();
  const uint64_t used0 = reg_->UsedBytes(0), used1 = reg_->UsedBytes(1);
  CUresult alloc = CUDA_SUCCESS, driver_alloc = CUDA_SUCCESS;
  CUresult info = CUDA_SUCCESS, driver_info = CUDA_SUCCESS;
  CUresult popped_alloc = CUDA_SUCCESS, popped_info = CUDA_SUCCESS;
  CUcontext seen = reinterpret_cast<CUcontext>(1);
  std::thread([&] {
    cuCtxGetCurrent(&seen);
    CUdeviceptr p = 0;
    size_t f = 0, t = 0;
    alloc = cuMemAlloc_v2(&p, 64 * kMiB);
    driver_alloc = raw_alloc(&p, 64 * kMiB);
    info = cuMemGetInfo_v2(&f, &t);
    driver_info = raw_info(&f, &t);
    // A context made current and then taken away again.
    cuCtxSetCurrent(ctx_);
    cuCtxSetCurrent(nullptr);
    popped_alloc = cuMemAlloc_v2(&p, 64 * kMiB);
    popped_info = cuMemGetInfo_v2(&f, &t);
  }).join();
  EXPECT_EQ(seen, nullptr) << "a new thread has no current context";
  EXPECT_NE(driver_alloc, CUDA_SUCCESS);
  EXPECT_EQ(alloc, driver_alloc);
  EXPECT_EQ(info, driver_info);
  EXPECT_EQ(popped_alloc, driver_alloc);
  EXPECT_EQ(popped_info, driver_info);
  EXPECT_EQ(reg_->UsedBytes(0), used0);
  EXPECT_EQ(reg_->UsedBytes(1), used1);
  EXPECT_EQ(FreeBytes(), before);
}

TEST_F(ProcessesTest, AThreadIsChargedOnItsOwnContextsDevice) {
  const uint64_t used0 = reg_->UsedBytes(0);
  CUdeviceptr p = 0;
  CUresult alloc = CUDA_ERROR_UNKNOWN, freed = CUDA_ERROR_UNKNOWN;
  uint64_t used1_with_context = 0, used1_with_alloc = 0;
  size_t free1 = 0, total1 = 0;
  std::thread([&] {
    CUcontext c;
    if (cuDevicePrimaryCtxRetain(&c, 1) != CUDA_SUCCESS || cuCtxSetCurrent(c) != CUDA_SUCCESS) {
      return;
    }
    used1_with_context = reg_->UsedBytes(1);
    alloc = cuMemAlloc_v2(&p, 64 * kMiB);
    used1_with_alloc = reg_->UsedBytes(1);
    cuMemGetInfo_v2(&free1, &total1);
    freed = cuMemFree_v2(p);
    cuDevicePrimaryCtxRelease_v2(1);
  }).join();
  ASSERT_EQ(alloc, CUDA_SUCCESS);
  EXPECT_EQ(freed, CUDA_SUCCESS);
  EXPECT_EQ(used1_with_alloc, used1_with_context + 64 * kMiB);
  EXPECT_EQ(total1, 2 * kGiB);
  EXPECT_EQ(free1, 2 * kGiB - used1_with_alloc) << "the thread sees device 1";
  EXPECT_EQ(reg_->UsedBytes(0), used0) << "nothing was charged to device 0";
}

TEST_F(ProcessesTest, FreeingAPointerNotOursIsTheDriversAnswerAndChangesNothing) {
  auto raw_alloc = HAMI_RAW_CUDA(cuMemAlloc_v2);
  auto raw_free = HAMI_RAW_CUDA(cuMemFree_v2);
  ASSERT_NE(raw_alloc, nullptr);
  ASSERT_NE(raw_free, nullptr);
  // The driver's answers, on memory libvgpu never saw.
  CUdeviceptr q;
  ASSERT_EQ(raw_alloc(&q, 64 * kMiB), CUDA_SUCCESS);
  const CUresult driver_interior = raw_free(q + 4096);
  ASSERT_EQ(raw_free(q), CUDA_SUCCESS);
  const CUresult driver_twice = raw_free(q);
  const CUresult driver_null = raw_free(0);
  const CUresult driver_unknown = raw_free(CUdeviceptr(0x1234));

  const uint64_t before = FreeBytes();
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc_v2(&p, 64 * kMiB), CUDA_SUCCESS);
  const uint64_t holding = FreeBytes();
  ASSERT_EQ(holding, before - 64 * kMiB);
  EXPECT_EQ(cuMemFree_v2(p + 4096), driver_interior);
  EXPECT_EQ(FreeBytes(), holding) << "the allocation is still held and still charged";
  EXPECT_EQ(cuMemFree_v2(0), driver_null);
  EXPECT_EQ(cuMemFree_v2(CUdeviceptr(0x1234)), driver_unknown);
  EXPECT_EQ(FreeBytes(), holding);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuMemFree_v2(p), driver_twice);
  EXPECT_EQ(FreeBytes(), before) << "a second free releases nothing twice";
}

TEST_F(ProcessesTest, RacingProcessesNeverPassTheLimitTogether) {
  constexpr int kWorkers = 8;
  Machine m("h100-80g");
  auto env = m.Env({{"CUDA_DEVICE_MEMORY_LIMIT", "3g"}, {"HAMI_SIM_CONTEXT_SIZE", "64m"}});
  std::vector<std::unique_ptr<Probe>> workers;
  for (int i = 0; i < kWorkers; ++i) {
    workers.push_back(std::make_unique<Probe>(env));
    ASSERT_EQ(workers.back()->Do("context 0").Int("r"), CUDA_SUCCESS);
  }
  auto reg = OpenRegionReadOnly(m.Region());
  ASSERT_NE(reg, nullptr);
  const uint64_t contexts = reg->Snapshot(0).used_bytes;
  ASSERT_GT(contexts, 0u);
  // Together they ask for 8 GiB in 128 MiB pieces, all at once.
  std::vector<std::thread> racers;
  std::vector<int> ok(kWorkers, -1);
  for (int i = 0; i < kWorkers; ++i) {
    racers.emplace_back([&, i] {
      Answer a = workers[size_t(i)]->Do("alloc-loop 128m 8");
      if (a.ok()) ok[size_t(i)] = a.Int("ok");
    });
  }
  for (std::thread& t : racers) t.join();
  int succeeded = 0;
  for (int n : ok) {
    ASSERT_GE(n, 0) << "a worker did not answer";
    succeeded += n;
  }
  region::DeviceSnapshot snap = reg->Snapshot(0);
  EXPECT_LE(snap.peak_bytes, 3 * kGiB);
  EXPECT_LE(snap.used_bytes, 3 * kGiB);
  EXPECT_EQ(snap.used_bytes, contexts + uint64_t(succeeded) * 128 * kMiB);
  EXPECT_EQ(uint64_t(succeeded), (3 * kGiB - contexts) / (128 * kMiB))
      << "refusals happen only once the budget is spent";
  EXPECT_GT(snap.rejected, 0u);

  // NVML in any of them lists exactly the region's slots.
  Answer list = workers[0]->Do("processes 0");
  ProcessList v3 = ParseProcessList(list.Get("v3"));
  ASSERT_EQ(v3.result, NVML_SUCCESS) << list.line;
  std::sort(v3.entries.begin(), v3.entries.end());
  EXPECT_EQ(v3.entries, SlotsOn(*reg, 0, {}));
  uint64_t sum = 0;
  for (const ProcessEntry& e : v3.entries) sum += e.used_bytes;
  EXPECT_EQ(sum, snap.used_bytes);
  for (const char* same : {"v2", "v1", "detail"}) {
    ProcessList other = ParseProcessList(list.Get(same));
    std::sort(other.entries.begin(), other.entries.end());
    EXPECT_EQ(other.result, NVML_SUCCESS) << same;
    EXPECT_EQ(other.entries, v3.entries) << same;
  }
  for (const char* none : {"graphics", "graphics_v1", "mps", "mps_v2", "detail_graphics"}) {
    EXPECT_EQ(list.Get(none), "0:-") << none;
  }

  // Half end normally, half are killed; what they held all comes back.
  for (int i = 0; i < kWorkers; ++i) {
    if (i % 2 == 0) {
      EXPECT_EQ(workers[size_t(i)]->Exit(), 0);
    } else {
      workers[size_t(i)]->Kill();
    }
  }
  Probe observer(env);
  ASSERT_EQ(observer.Do("context 0").Int("r"), CUDA_SUCCESS);
  const uint64_t own = contexts / kWorkers;
  // Every worker is reaped. A process listing returns what the dead left at once (the memory
  // view sweeps at most once per sweep interval, whoever swept last); then the view is exact.
  ASSERT_EQ(ParseProcessList(observer.Do("processes 0").Get("v3")).result, NVML_SUCCESS);
  EXPECT_EQ(observer.Do("meminfo").U64("cu_free"), 3 * kGiB - own);
  EXPECT_EQ(reg->Snapshot(0).used_bytes, own);
  EXPECT_LE(reg->Snapshot(0).peak_bytes, 3 * kGiB);
}

TEST_F(ProcessesTest, RunningProcessListsAreTheContainersSlots) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  CUdeviceptr mine;
  ASSERT_EQ(cuMemAlloc_v2(&mine, 96 * kMiB), CUDA_SUCCESS);
  // Two more processes of the container, one on each device.
  Subprocess on0({TestProgram("sim_worker"), "context", "alloc", "64m", "hold"}, {});
  Subprocess on1({TestProgram("sim_worker"), "device", "1", "context", "alloc", "32m", "hold"}, {});
  // And one of another container on the same machine.
  TempDir elsewhere("hami-vgpu-elsewhere");
  Subprocess outsider({TestProgram("sim_worker"), "context", "alloc", "48m", "hold"},
                      {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", elsewhere.File("usage.cache")}});
  for (Subprocess* s : {&on0, &on1, &outsider}) ASSERT_TRUE(s->WaitForLine("holding"));

  auto raw_by_index = HAMI_RAW_NVML(nvmlDeviceGetHandleByIndex_v2);
  auto raw_query = HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses_v3);
  ASSERT_NE(raw_by_index, nullptr);
  ASSERT_NE(raw_query, nullptr);
  for (unsigned d = 0; d < 2; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    nvmlDevice_t h;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(d, &h), NVML_SUCCESS);
    std::vector<ProcessEntry> driver = HAMI_QUERY(raw_query, nvmlProcessInfo_t, h);
    nvmlReturn_t r = NVML_ERROR_UNKNOWN;
    std::vector<ProcessEntry> v3 = Query<nvmlProcessInfo_t>(
        [&](unsigned* n, nvmlProcessInfo_t* a) {
          return nvmlDeviceGetComputeRunningProcesses_v3(h, n, a);
        },
        &r);
    ASSERT_EQ(r, NVML_SUCCESS);
    EXPECT_EQ(v3, SlotsOn(*reg_, int(d), driver));
    auto has = [](const std::vector<ProcessEntry>& list, pid_t pid) {
      return std::any_of(list.begin(), list.end(),
                         [&](const ProcessEntry& e) { return e.pid == pid; });
    };
    EXPECT_TRUE(has(v3, d == 0 ? on0.pid() : on1.pid()));
    EXPECT_TRUE(has(driver, outsider.pid()) || d == 1);
    EXPECT_FALSE(has(v3, outsider.pid())) << "another container's process";
    // Every version and layout lists the same.
    EXPECT_EQ(HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, h), v3);
    EXPECT_EQ(HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, h), v3);
    std::vector<ProcessEntry> detail =
        Query<nvmlProcessDetail_v1_t>([&](unsigned* n, nvmlProcessDetail_v1_t* a) {
          nvmlProcessDetailList_t list{};
          list.version = nvmlProcessDetailList_v1;
          list.mode = NVML_PROCESS_MODE_COMPUTE;
          list.numProcArrayEntries = *n;
          list.procArray = a;
          nvmlReturn_t rd = nvmlDeviceGetRunningProcessDetailList(h, &list);
          *n = list.numProcArrayEntries;
          return rd;
        });
    EXPECT_EQ(detail, v3);
    // The driver lists no graphics or MPS work here, and neither do we.
    EXPECT_TRUE(HAMI_QUERY(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t, h).empty());
    EXPECT_TRUE(
        HAMI_QUERY(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, h).empty());
    // The entries add up to what NVML says the container uses.
    nvmlMemory_t mem{};
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(h, &mem), NVML_SUCCESS);
    uint64_t sum = 0;
    for (const ProcessEntry& e : v3) sum += e.used_bytes;
    EXPECT_EQ(sum, mem.used);
  }

  // When they are gone, so are their entries.
  for (Subprocess* s : {&on0, &on1, &outsider}) {
    s->CloseStdin();
    EXPECT_EQ(s->Wait(), 0);
  }
  nvmlDevice_t h0;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h0), NVML_SUCCESS);
  std::vector<ProcessEntry> left =
      HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, h0);
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(left[0].pid, getpid());
  EXPECT_EQ(left[0].used_bytes, uint64_t(SlotUsage(*reg_, getpid(), 0)));
  EXPECT_EQ(cuMemFree_v2(mine), CUDA_SUCCESS);
}

// Another tenant's PID and load are not the container's to see: both per-process utilization
// queries are filtered to the container's processes, as the process lists are.
TEST_F(ProcessesTest, ProcessUtilizationShowsOnlyTheContainersProcesses) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  // Samples since before the workers started: each one's launches fall within them.
  const unsigned long long since_us = static_cast<unsigned long long>(RealtimeNs() / 1000);
  Subprocess member({TestProgram("sim_worker"), "context", "launch-for-ms", "200", "hold"}, {});
  TempDir elsewhere("hami-vgpu-elsewhere");
  Subprocess outsider({TestProgram("sim_worker"), "context", "launch-for-ms", "200", "hold"},
                      {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", elsewhere.File("usage.cache")}});
  for (Subprocess* s : {&member, &outsider}) ASSERT_TRUE(s->WaitForLine("holding"));
  nvmlDevice_t h;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
  using Load = std::map<unsigned, unsigned>;  // pid -> smUtil
  auto samples = [&](auto query) {
    Load out;
    nvmlProcessUtilizationSample_t got[64];
    unsigned n = 64;
    if (query(h, got, &n, since_us) == NVML_SUCCESS) {
      for (unsigned i = 0; i < n; ++i) out[got[i].pid] = got[i].smUtil;
    }
    return out;
  };
  auto infos = [&](auto query) {
    Load out;
    nvmlProcessUtilizationInfo_v1_t got[64];
    nvmlProcessesUtilizationInfo_t info{};
    info.version = nvmlProcessesUtilizationInfo_v1;
    info.processSamplesCount = 64;
    info.lastSeenTimeStamp = since_us;
    info.procUtilArray = got;
    if (query(h, &info) == NVML_SUCCESS) {
      for (unsigned i = 0; i < info.processSamplesCount; ++i) out[got[i].pid] = got[i].smUtil;
    }
    return out;
  };
  auto raw = HAMI_RAW_NVML(nvmlDeviceGetProcessUtilization);
  auto raw_info = HAMI_RAW_NVML(nvmlDeviceGetProcessesUtilizationInfo);
  ASSERT_NE(raw, nullptr);
  ASSERT_NE(raw_info, nullptr);
  struct View {
    const char* query;
    Load driver, seen;
  };
  const View views[] = {
      {"nvmlDeviceGetProcessUtilization", samples(raw), samples(&nvmlDeviceGetProcessUtilization)},
      {"nvmlDeviceGetProcessesUtilizationInfo", infos(raw_info),
       infos(&nvmlDeviceGetProcessesUtilizationInfo)}};
  for (const View& v : views) {
    SCOPED_TRACE(v.query);
    const Load& driver = v.driver;
    const Load& seen = v.seen;
    ASSERT_TRUE(driver.count(unsigned(outsider.pid()))) << "the driver samples every process";
    EXPECT_GT(driver.at(unsigned(outsider.pid())), 0u) << "with its load";
    EXPECT_FALSE(seen.count(unsigned(outsider.pid()))) << "another container's process";
    ASSERT_TRUE(seen.count(unsigned(member.pid())));
    EXPECT_GT(seen.at(unsigned(member.pid())), 0u) << "the container's own load";
    EXPECT_TRUE(seen.count(unsigned(getpid())));
    for (const auto& sample : seen) EXPECT_TRUE(driver.count(sample.first)) << sample.first;
  }
  const size_t seen_count = views[0].seen.size();
  // Sizing: the count asked for is the container's, not the device's.
  unsigned n = 0;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(h, nullptr, &n, 0), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, seen_count);
  nvmlProcessesUtilizationInfo_t info{};
  info.version = nvmlProcessesUtilizationInfo_v1;
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(h, &info), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(info.processSamplesCount, seen_count);
  std::vector<nvmlProcessUtilizationInfo_v1_t> room(seen_count);
  info.procUtilArray = room.data();
  info.processSamplesCount = unsigned(seen_count - 1);
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(h, &info), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(info.processSamplesCount, seen_count);
  // A version whose layout libvgpu does not know, and no struct, are the driver's to answer.
  nvmlProcessesUtilizationInfo_t newer = info, newer_raw = info;
  newer.version = newer_raw.version = nvmlProcessesUtilizationInfo_v1 + (1u << 24);
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(h, &newer), raw_info(h, &newer_raw));
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(h, nullptr), raw_info(h, nullptr));
  for (Subprocess* s : {&member, &outsider}) {
    s->CloseStdin();
    EXPECT_EQ(s->Wait(), 0);
  }
}

// The driver's accounting names every process that ran on the device; the container sees its
// own, and another tenant's PID has no stats for it, while it runs and after it has ended.
TEST_F(ProcessesTest, AccountingShowsOnlyTheContainersProcesses) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  Subprocess member({TestProgram("sim_worker"), "context", "alloc", "48m", "hold"}, {});
  TempDir elsewhere("hami-vgpu-elsewhere");
  Subprocess outsider({TestProgram("sim_worker"), "context", "alloc", "80m", "hold"},
                      {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", elsewhere.File("usage.cache")}});
  for (Subprocess* s : {&member, &outsider}) ASSERT_TRUE(s->WaitForLine("holding"));
  nvmlDevice_t h;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
  auto raw_pids = HAMI_RAW_NVML(nvmlDeviceGetAccountingPids);
  auto raw_stats = HAMI_RAW_NVML(nvmlDeviceGetAccountingStats);
  ASSERT_NE(raw_pids, nullptr);
  ASSERT_NE(raw_stats, nullptr);
  // The PIDs, the way a caller sizes the array: count first, then the entries.
  auto pids = [&](auto query) {
    unsigned n = 0;
    nvmlReturn_t r = query(h, &n, nullptr);
    std::vector<unsigned> out(n);
    if (r == NVML_ERROR_INSUFFICIENT_SIZE) r = query(h, &n, out.data());
    EXPECT_EQ(r, NVML_SUCCESS);
    out.resize(r == NVML_SUCCESS ? n : 0);
    std::sort(out.begin(), out.end());
    return out;
  };
  auto has = [](const std::vector<unsigned>& list, pid_t pid) {
    return std::find(list.begin(), list.end(), unsigned(pid)) != list.end();
  };
  auto hidden = [&](pid_t pid) {
    nvmlAccountingStats_t stats;
    std::memset(&stats, 0xab, sizeof(stats));
    const nvmlReturn_t r = nvmlDeviceGetAccountingStats(h, unsigned(pid), &stats);
    const auto* bytes = reinterpret_cast<const unsigned char*>(&stats);
    return r == NVML_ERROR_NOT_FOUND &&
           std::all_of(bytes, bytes + sizeof(stats), [](unsigned char b) { return b == 0xab; });
  };
  const std::vector<unsigned> driver = pids(raw_pids);
  const std::vector<unsigned> seen = pids(&nvmlDeviceGetAccountingPids);
  EXPECT_TRUE(has(driver, outsider.pid())) << "the driver accounts for every process";
  EXPECT_FALSE(has(seen, outsider.pid())) << "another container's process";
  EXPECT_TRUE(has(seen, member.pid()));
  EXPECT_TRUE(has(seen, getpid()));
  EXPECT_TRUE(std::includes(driver.begin(), driver.end(), seen.begin(), seen.end()));
  // Sizing: the count asked for is the container's, not the device's.
  unsigned n = 0;
  EXPECT_EQ(nvmlDeviceGetAccountingPids(h, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, seen.size());
  std::vector<unsigned> room(seen.size() + 1, 0);
  n = unsigned(seen.size() - 1);
  EXPECT_EQ(nvmlDeviceGetAccountingPids(h, &n, room.data()), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, seen.size());
  EXPECT_EQ(nvmlDeviceGetAccountingPids(h, nullptr, room.data()),
            raw_pids(h, nullptr, room.data()));

  // Its own stats are the driver's; another tenant's, and its load, are not shown.
  nvmlAccountingStats_t driver_stats{}, stats{};
  ASSERT_EQ(raw_stats(h, unsigned(outsider.pid()), &driver_stats), NVML_SUCCESS);
  EXPECT_GE(driver_stats.maxMemoryUsage, 80 * kMiB) << "the driver's record of it";
  EXPECT_TRUE(hidden(outsider.pid()));
  ASSERT_EQ(raw_stats(h, unsigned(member.pid()), &driver_stats), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetAccountingStats(h, unsigned(member.pid()), &stats), NVML_SUCCESS);
  EXPECT_EQ(stats.maxMemoryUsage, driver_stats.maxMemoryUsage);
  EXPECT_GE(stats.maxMemoryUsage, 48 * kMiB);
  EXPECT_EQ(stats.startTime, driver_stats.startTime);
  EXPECT_EQ(stats.isRunning, 1u);
  EXPECT_EQ(nvmlDeviceGetAccountingStats(h, unsigned(member.pid()), nullptr),
            raw_stats(h, unsigned(member.pid()), nullptr));

  // The driver keeps the record of a process that has ended; it stays hidden.
  outsider.CloseStdin();
  EXPECT_EQ(outsider.Wait(), 0);
  EXPECT_TRUE(has(pids(raw_pids), outsider.pid()));
  EXPECT_FALSE(has(pids(&nvmlDeviceGetAccountingPids), outsider.pid()));
  ASSERT_EQ(raw_stats(h, unsigned(outsider.pid()), &driver_stats), NVML_SUCCESS);
  EXPECT_EQ(driver_stats.isRunning, 0u);
  EXPECT_TRUE(hidden(outsider.pid()));
  member.CloseStdin();
  EXPECT_EQ(member.Wait(), 0);
}

TEST_F(ProcessesTest, AChargedProcessTheDriverDoesNotListIsShownUnderItsRecordedPid) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  // A member of the container whose host pid is one the driver does not know (as for a
  // process in another PID namespace), holding 64 MiB on device 0.
  auto opened =
      region::Region::Open(VgpuEnv::Get().region, nullptr, region::Create::kNever, nullptr);
  ASSERT_TRUE(opened.ok()) << opened.error().message();
  std::unique_ptr<region::Region> member = std::move(opened).value();
  ASSERT_TRUE(member->Register().ok());
  constexpr pid_t kHostPid = 4'000'321;
  member->SetHostPid(kHostPid, region::IdentitySource::kBroker);
  ASSERT_EQ(member->Reserve(0, 64 * kMiB, region::UsageKind::kData), region::Admission::kOk);

  nvmlDevice_t h;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
  std::vector<ProcessEntry> v3 =
      HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, h);
  EXPECT_TRUE(std::count(v3.begin(), v3.end(), ProcessEntry{kHostPid, 64 * kMiB}) == 1);
  EXPECT_EQ(HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, h), v3);
  EXPECT_TRUE(HAMI_QUERY(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t, h).empty())
      << "the region does not say it does graphics";
  nvmlMemory_t mem{};
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(h, &mem), NVML_SUCCESS);
  uint64_t sum = 0;
  for (const ProcessEntry& e : v3) sum += e.used_bytes;
  EXPECT_EQ(sum, mem.used);
  // Not on a device where it holds nothing.
  nvmlDevice_t h1;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &h1), NVML_SUCCESS);
  for (const ProcessEntry& e :
       HAMI_QUERY(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, h1)) {
    EXPECT_NE(e.pid, kHostPid);
  }
  member->Release(0, 64 * kMiB, region::UsageKind::kData);
  member->Unregister();
}

TEST_F(ProcessesTest, RunningProcessQueriesSizeTheirArrayAsTheDriverDoes) {
  ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
  Subprocess other({TestProgram("sim_worker"), "context", "alloc", "16m", "hold"}, {});
  ASSERT_TRUE(other.WaitForLine("holding"));
  nvmlDevice_t h;
  ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &h), NVML_SUCCESS);
  auto raw = HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses_v3);
  ASSERT_NE(raw, nullptr);
  nvmlProcessInfo_t infos[8];
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, nullptr, infos), raw(h, nullptr, infos));
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, nullptr, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  unsigned n = 0;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, 2u) << "this process and the other";
  n = 1;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, infos), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(n, 2u);
  n = 8;
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE)
      << "no array for a list that is not empty";
  EXPECT_EQ(n, 2u);
  n = 8;
  ASSERT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(h, &n, infos), NVML_SUCCESS);
  EXPECT_EQ(n, 2u);
  for (unsigned i = 0; i < n; ++i) {
    EXPECT_EQ(infos[i].gpuInstanceId, 0xFFFFFFFFu);
    EXPECT_EQ(infos[i].computeInstanceId, 0xFFFFFFFFu);
  }
  EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(nullptr, &n, infos), raw(nullptr, &n, infos));
  other.CloseStdin();
  EXPECT_EQ(other.Wait(), 0);
}

}  // namespace
}  // namespace hami::testing
