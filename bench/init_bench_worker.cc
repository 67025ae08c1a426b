// init_bench_worker: one process of hami_bench_init's burst. Exec'd by the benchmark with
// libvgpu.so preloaded and the simulated driver on its library path, it maps the results
// area, reports ready, blocks on the barrier pipe until the parent closes it, calls
// cuInit(0) (libvgpu.so joins the shared region and learns the host PID inside that call),
// then opens the region read-only, finds its own slot and copies what the identity code
// recorded there. With --expect own-pid the slot's host PID must be this process's PID (the
// workers run in the host's PID namespace); with --expect none it must be 0.
//
// usage: init_bench_worker --results-fd FD --barrier-fd FD --index I --region PATH
//                          --expect own-pid|none
// Exit status: 0 on success (the record then says kOk), 1 after a failed step (the record
// names it), 2 when it cannot even reach its record.
#include <cuda.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/parse.h"
#include "common/unique_fd.h"
#include "init_bench_shared.h"
#include "region/region.h"

namespace hami::bench {
namespace {

struct Args {
  int results_fd = -1;
  int barrier_fd = -1;
  uint32_t index = 0;
  std::string region_path;
  InitExpect expect = InitExpect::kOwnPid;
};

constexpr char kUsage[] =
    "usage: init_bench_worker --results-fd FD --barrier-fd FD --index I --region PATH "
    "--expect own-pid|none\n";

bool ParseArgs(int argc, char** argv, Args* out) {
  bool have_index = false, have_expect = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (i + 1 >= argc) {
      std::fprintf(stderr, "init_bench_worker: %s needs a value\n", argv[i]);
      return false;
    }
    std::string_view value = argv[++i];
    if (flag == "--region") {
      out->region_path = value;
      continue;
    }
    if (flag == "--expect") {
      if (value != "own-pid" && value != "none") {
        std::fprintf(stderr, "init_bench_worker: --expect %.*s is not own-pid or none\n",
                     int(value.size()), value.data());
        return false;
      }
      out->expect = value == "none" ? InitExpect::kNoPid : InitExpect::kOwnPid;
      have_expect = true;
      continue;
    }
    auto n = ParseUint64(value, flag);
    if (!n.ok() || *n > 0x7fffffff) {
      std::fprintf(stderr, "init_bench_worker: %s\n",
                   n.ok() ? "value out of range" : n.error().message().c_str());
      return false;
    }
    if (flag == "--results-fd") {
      out->results_fd = int(*n);
    } else if (flag == "--barrier-fd") {
      out->barrier_fd = int(*n);
    } else if (flag == "--index") {
      out->index = uint32_t(*n);
      have_index = true;
    } else {
      std::fprintf(stderr, "init_bench_worker: unknown flag %s\n", argv[i - 1]);
      return false;
    }
  }
  if (out->results_fd < 0 || out->barrier_fd < 0 || !have_index || !have_expect ||
      out->region_path.empty()) {
    std::fputs(kUsage, stderr);
    return false;
  }
  return true;
}

// Maps the results area and returns this worker's record, or null.
InitWorkerRecord* MapRecord(const Args& a, InitResultsHeader** header) {
  struct stat st;
  if (fstat(a.results_fd, &st) != 0 || st.st_size < off_t(sizeof(InitResultsHeader))) {
    std::fprintf(stderr, "init_bench_worker: results fd %d is not a results area\n", a.results_fd);
    return nullptr;
  }
  void* m = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, a.results_fd, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "init_bench_worker: mmap results: %s\n", std::strerror(errno));
    return nullptr;
  }
  auto* h = static_cast<InitResultsHeader*>(m);
  if (h->magic != kInitResultsMagic || h->version != kInitResultsVersion ||
      h->record_size != sizeof(InitWorkerRecord) || a.index >= h->worker_count ||
      uint64_t(st.st_size) < InitResultsBytes(h->worker_count)) {
    std::fprintf(stderr, "init_bench_worker: results area does not match this build\n");
    return nullptr;
  }
  *header = h;
  return &InitRecords(h)[a.index];
}

[[gnu::format(printf, 3, 4)]] int Fail(InitWorkerRecord* r, InitStep step, const char* fmt, ...) {
  r->failed_step = uint32_t(step);
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(r->error, sizeof(r->error), fmt, ap);
  va_end(ap);
  return 1;
}

int Run(const Args& a, InitWorkerRecord* r, InitResultsHeader* h, int64_t main_ns) {
  const pid_t self = getpid();
  r->pid = int32_t(self);
  r->main_ns = main_ns;
  UniqueFd barrier(a.barrier_fd);
  r->ready_ns = MonotonicNs();
  h->ready.fetch_add(1, std::memory_order_acq_rel);
  char byte;
  ssize_t n;
  do {
    n = read(barrier.get(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  r->released_ns = MonotonicNs();
  if (n != 0) {
    return Fail(r, InitStep::kBarrier, "barrier read returned %zd (%s)", n,
                n < 0 ? std::strerror(errno) : "data instead of EOF");
  }
  barrier.Reset();

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  const CUresult cu = cuInit(0);
  r->cuinit_ns = MonotonicNs();
  getrusage(RUSAGE_SELF, &after);
  auto ns = [](const timeval& t) { return int64_t(t.tv_sec) * 1'000'000'000 + t.tv_usec * 1000; };
  r->cpu_ns = ns(after.ru_utime) + ns(after.ru_stime) - ns(before.ru_utime) - ns(before.ru_stime);
  r->voluntary_switches = uint32_t(after.ru_nvcsw - before.ru_nvcsw);
  r->involuntary_switches = uint32_t(after.ru_nivcsw - before.ru_nivcsw);
  r->cu_result = int32_t(cu);
  if (cu != CUDA_SUCCESS) return Fail(r, InitStep::kCuInit, "cuInit(0) returned %d", int(cu));

  auto opened = region::Region::Open(a.region_path, nullptr, region::Create::kNever, nullptr,
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
  r->outcome.store(uint32_t(InitOutcome::kOk), std::memory_order_release);
  return 0;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  const int64_t main_ns = hami::MonotonicNs();
  hami::bench::Args args;
  if (!hami::bench::ParseArgs(argc, argv, &args)) return 2;
  hami::bench::InitResultsHeader* header = nullptr;
  hami::bench::InitWorkerRecord* record = hami::bench::MapRecord(args, &header);
  if (record == nullptr) return 2;
  return hami::bench::Run(args, record, header, main_ns);
}
