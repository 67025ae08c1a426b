// region_bench_worker: one process of hami_bench_region's burst. Exec'd by the benchmark
// (so each worker goes through the loader afresh), it maps the results area, reports ready,
// blocks on the barrier pipe until the parent closes it, then opens the shared region,
// registers, reserves and releases 1 MiB, unregisters, and writes its timestamps. With
// --control it does everything but the region calls.
//
// usage: region_bench_worker --results-fd FD --barrier-fd FD --index I --region PATH
//                            [--control]
// Exit status: 0 on success (the record then says kOk), 1 after a failed step (the record
// names it), 2 when it cannot even reach its record.
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/parse.h"
#include "common/unique_fd.h"
#include "region/region.h"
#include "region_bench_shared.h"

namespace hami::bench {
namespace {

struct Args {
  int results_fd = -1;
  int barrier_fd = -1;
  uint32_t index = 0;
  std::string region_path;
  bool control = false;
};

bool ParseArgs(int argc, char** argv, Args* out) {
  bool have_index = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i];
    if (flag == "--control") {
      out->control = true;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "region_bench_worker: %s needs a value\n", argv[i]);
      return false;
    }
    std::string_view value = argv[++i];
    if (flag == "--region") {
      out->region_path = value;
      continue;
    }
    auto n = ParseUint64(value, flag);
    if (!n.ok() || *n > 0x7fffffff) {
      std::fprintf(stderr, "region_bench_worker: %s\n",
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
      std::fprintf(stderr, "region_bench_worker: unknown flag %s\n", argv[i - 1]);
      return false;
    }
  }
  if (out->results_fd < 0 || out->barrier_fd < 0 || !have_index || out->region_path.empty()) {
    std::fprintf(stderr,
                 "usage: region_bench_worker --results-fd FD --barrier-fd FD --index I "
                 "--region PATH [--control]\n");
    return false;
  }
  return true;
}

// Maps the results area and returns this worker's record, or null.
WorkerRecord* MapRecord(const Args& a, ResultsHeader** header) {
  struct stat st;
  if (fstat(a.results_fd, &st) != 0 || st.st_size < off_t(sizeof(ResultsHeader))) {
    std::fprintf(stderr, "region_bench_worker: results fd %d is not a results area\n",
                 a.results_fd);
    return nullptr;
  }
  void* m = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, a.results_fd, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "region_bench_worker: mmap results: %s\n", std::strerror(errno));
    return nullptr;
  }
  auto* h = static_cast<ResultsHeader*>(m);
  if (h->magic != kResultsMagic || h->version != kResultsVersion ||
      h->record_size != sizeof(WorkerRecord) || a.index >= h->worker_count ||
      uint64_t(st.st_size) < ResultsBytes(h->worker_count)) {
    std::fprintf(stderr, "region_bench_worker: results area does not match this build\n");
    return nullptr;
  }
  *header = h;
  return &Records(h)[a.index];
}

[[gnu::format(printf, 3, 4)]] int Fail(WorkerRecord* r, WorkerStep step, const char* fmt, ...) {
  r->failed_step = uint32_t(step);
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(r->error, sizeof(r->error), fmt, ap);
  va_end(ap);
  return 1;
}

int Run(const Args& a, WorkerRecord* r, ResultsHeader* h, int64_t main_ns) {
  r->pid = int32_t(getpid());
  r->main_ns = main_ns;
  UniqueFd barrier(a.barrier_fd);
  h->ready.fetch_add(1, std::memory_order_acq_rel);
  char byte;
  ssize_t n;
  do {
    n = read(barrier.get(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (n != 0) {
    return Fail(r, WorkerStep::kBarrier, "barrier read returned %zd (%s)", n,
                n < 0 ? std::strerror(errno) : "data instead of EOF");
  }
  barrier.Reset();

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  r->start_ns = MonotonicNs();
  std::unique_ptr<region::Region> region;
  if (a.control) {
    r->opened_ns = MonotonicNs();
    r->registered_ns = MonotonicNs();
  } else {
    const region::PolicySpec policy = BenchPolicy();
    std::vector<region::PolicyDifference> differences;
    auto opened =
        region::Region::Open(a.region_path, &policy, region::Create::kIfMissing, &differences);
    if (!opened.ok()) return Fail(r, WorkerStep::kOpen, "%s", opened.error().message().c_str());
    region = std::move(opened).value();
    r->opened_ns = MonotonicNs();
    auto slot = region->Register();
    if (!slot.ok()) return Fail(r, WorkerStep::kRegister, "%s", slot.error().message().c_str());
    r->registered_ns = MonotonicNs();
  }
  getrusage(RUSAGE_SELF, &after);
  r->involuntary_switches = uint32_t(after.ru_nivcsw - before.ru_nivcsw);
  r->voluntary_switches = uint32_t(after.ru_nvcsw - before.ru_nvcsw);

  if (a.control) {
    r->reserved_ns = MonotonicNs();
    r->end_ns = MonotonicNs();
  } else {
    region::Admission admitted = region->Reserve(0, kBurstReserveBytes, region::UsageKind::kData);
    if (admitted != region::Admission::kOk) {
      return Fail(r, WorkerStep::kReserve, "Reserve(0, 1 MiB) refused (%d)", int(admitted));
    }
    region->Release(0, kBurstReserveBytes, region::UsageKind::kData);
    r->reserved_ns = MonotonicNs();
    region->Unregister();
    r->end_ns = MonotonicNs();
    region.reset();
  }
  r->outcome.store(uint32_t(WorkerOutcome::kOk), std::memory_order_release);
  return 0;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  const int64_t main_ns = hami::MonotonicNs();
  hami::bench::Args args;
  if (!hami::bench::ParseArgs(argc, argv, &args)) return 2;
  hami::bench::ResultsHeader* header = nullptr;
  hami::bench::WorkerRecord* record = hami::bench::MapRecord(args, &header);
  if (record == nullptr) return 2;
  return hami::bench::Run(args, record, header, main_ns);
}
