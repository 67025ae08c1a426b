// init_bench_worker: one process of hami_bench_init's burst. Exec'd by the benchmark with
// libvgpu.so preloaded and the simulated driver on its library path, it maps the results
// area, reports ready, blocks on the barrier pipe until the parent closes it, calls
// cuInit(0) (libvgpu.so joins the shared region and learns the host PID inside that call),
// then opens the region read-only, finds its own slot and copies what the identity code
// recorded there. With --expect own-pid the slot's host PID must be this process's PID (the
// workers run in the host's PID namespace); with --expect none it must be 0. With --expect
// bare (the baseline without libvgpu.so) the region file must not exist after cuInit: that
// proves nothing joined one.
//
// With --handoff PATH (the benchmark's direct-handoff baseline for the probe), after cuInit
// the worker runs the serialized part of the probe's work itself — retain the primary
// context of device 0 and release it — holding the process-shared semaphore in the file
// PATH, which each worker posts to the next.
//
// usage: init_bench_worker --results-fd FD --barrier-fd FD --index I --region PATH
//                          --expect own-pid|none|bare [--handoff PATH]
// Exit status: 0 on success (the record then says kOk), 1 after a failed step (the record
// names it), 2 when it cannot even reach its record.
#include <cuda.h>
#include <fcntl.h>
#include <semaphore.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <string>
#include <string_view>

#include "burst_results.h"
#include "common/cleanup.h"
#include "common/clock.h"
#include "common/file.h"
#include "init_bench_shared.h"
#include "region/region.h"

namespace hami::bench {
namespace {

constexpr char kProgram[] = "init_bench_worker";

struct Args {
  WorkerArgs common;
  InitExpect expect = InitExpect::kOwnPid;
  bool have_expect = false;
  std::string handoff_path;  // the baseline's semaphore file; empty in the identity modes
};

constexpr char kUsage[] =
    "usage: init_bench_worker --results-fd FD --barrier-fd FD --index I --region PATH "
    "--expect own-pid|none|bare [--handoff PATH]\n";

bool ParseArgs(int argc, char** argv, Args* out) {
  auto own = [out](std::string_view flag, std::string_view value) {
    if (flag == "--handoff") {
      out->handoff_path = value;
      return OwnFlag::kTaken;
    }
    if (flag != "--expect") return OwnFlag::kUnknown;
    if (value != "own-pid" && value != "none" && value != "bare") {
      std::fprintf(stderr, "init_bench_worker: --expect %.*s is not own-pid, none or bare\n",
                   int(value.size()), value.data());
      return OwnFlag::kBad;
    }
    out->expect = value == "none"   ? InitExpect::kNoPid
                  : value == "bare" ? InitExpect::kBare
                                    : InitExpect::kOwnPid;
    out->have_expect = true;
    return OwnFlag::kTaken;
  };
  if (!ParseWorkerArgs(argc, argv, kProgram, {}, kUsage, own, &out->common)) return false;
  if (!out->have_expect) {
    std::fputs(kUsage, stderr);
    return false;
  }
  return true;
}

// The serialized work the simulated GPU charges the probe for (vgpu/identity_probe.cc): a
// primary-context retain and release on the first device, run under the semaphore in the
// file at `path` instead of the probe lock, so that sem_post hands it straight to the next
// worker. The probe's own bookkeeping around it (two NVML process listings, which from an
// application go through libvgpu.so's process view and cost more than the probe's direct
// calls) is left out: the baseline does no more than the probe does.
Status RunHandoff(const std::string& path) {
  auto fail = [](const char* what, CUresult code) {
    return Error(ErrorCode::kIo, std::string(what) + " returned " + std::to_string(int(code)));
  };
  auto fd = OpenRegularFile(path, O_RDWR);
  if (!fd.ok()) return std::move(fd).error();
  auto mapped = MappedFile::Map(fd->get(), sizeof(sem_t), true, path);
  if (!mapped.ok()) return std::move(mapped).error();
  auto* sem = static_cast<sem_t*>(mapped->data());
  CUdevice dev;
  if (const CUresult c = cuDeviceGet(&dev, 0); c != CUDA_SUCCESS) return fail("cuDeviceGet", c);

  while (sem_wait(sem) != 0) {
    if (errno != EINTR) return Error::FromErrno("sem_wait " + path);
  }
  Cleanup post([sem] { sem_post(sem); });
  CUcontext ctx;
  if (const CUresult c = cuDevicePrimaryCtxRetain(&ctx, dev); c != CUDA_SUCCESS) {
    return fail("cuDevicePrimaryCtxRetain", c);
  }
  if (const CUresult c = cuDevicePrimaryCtxRelease(dev); c != CUDA_SUCCESS) {
    return fail("cuDevicePrimaryCtxRelease", c);
  }
  return OkStatus();
}

int Run(const Args& a, InitWorkerRecord* r, ResultsHeader* h, int64_t main_ns) {
  const pid_t self = getpid();
  r->pid = int32_t(self);
  r->main_ns = main_ns;
  const Status released = AwaitRelease(h, a.common.barrier_fd, &r->ready_ns, &r->released_ns);
  if (!released.ok()) {
    return Fail(r, InitStep::kBarrier, "%s", released.error().message().c_str());
  }

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const CUresult cu = cuInit(0);
  r->cuinit_ns = MonotonicNs();
  Status handoff = OkStatus();
  if (cu == CUDA_SUCCESS && !a.handoff_path.empty()) {
    handoff = RunHandoff(a.handoff_path);
    r->handoff_ns = MonotonicNs();
  }
  getrusage(RUSAGE_SELF, &after);
  auto ns = [](const timeval& t) { return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_usec * 1000; };
  r->cpu_ns = ns(after.ru_utime) + ns(after.ru_stime) - ns(before.ru_utime) - ns(before.ru_stime);
  r->voluntary_switches = uint32_t(after.ru_nvcsw - before.ru_nvcsw);
  r->involuntary_switches = uint32_t(after.ru_nivcsw - before.ru_nivcsw);
  r->cu_result = int32_t(cu);
  // What follows (reading the region) is the benchmark's, not the measured start-up: it runs
  // once every worker of the burst is past cuInit.
  MarkDoneAndWaitForAll(h, 10'000'000'000);
  if (cu != CUDA_SUCCESS) return Fail(r, InitStep::kCuInit, "cuInit(0) returned %d", int(cu));
  if (!handoff.ok()) {
    return Fail(r, InitStep::kHandoff, "%s", handoff.error().message().c_str());
  }

  if (a.expect == InitExpect::kBare) {
    struct stat st;
    if (stat(a.common.region_path.c_str(), &st) == 0) {
      return Fail(r, InitStep::kRegionOpen,
                  "the region %s exists in the baseline without libvgpu.so (was it loaded?)",
                  a.common.region_path.c_str());
    }
    return Succeed(r);
  }
  auto opened = region::Region::Open(a.common.region_path, nullptr, region::Create::kNever, nullptr,
                                     region::Access::kReadOnly);
  if (!opened.ok()) {
    return Fail(r, InitStep::kRegionOpen, "%s", opened.error().message().c_str());
  }
  bool found = false;
  for (const region::SlotView& s : (*opened)->Slots()) {
    if (s.pid != self) continue;
    found = true;
    r->host_pid = int32_t(s.host_pid);
    r->identity_source = uint32_t(s.identity);
    r->identity_attempts = s.identity_attempts;
    for (int t = 0; t < region::kIdentityTiers; ++t) {
      r->identity_reason[t] = uint8_t(s.identity_reason[size_t(t)]);
    }
    r->identity_ns = s.identity_ns;
    break;
  }
  if (!found) {
    return Fail(r, InitStep::kSlot, "no slot of the region carries pid %d (libvgpu.so not loaded?)",
                int(self));
  }
  const pid_t expected = a.expect == InitExpect::kOwnPid ? self : 0;
  if (r->host_pid != expected) {
    return Fail(r, InitStep::kIdentity, "host PID %d from %s, expected %d", int(r->host_pid),
                region::IdentitySourceName(region::IdentitySource(r->identity_source)),
                int(expected));
  }
  return Succeed(r);
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  namespace bench = hami::bench;
  return bench::WorkerMain<bench::InitWorkerRecord>(
      argc, argv, bench::kProgram, bench::kInitResultsMagic, bench::kInitResultsVersion,
      bench::ParseArgs, bench::Run);
}
