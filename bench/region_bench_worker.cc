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
#include <sys/resource.h>
#include <unistd.h>

#include <memory>
#include <string_view>
#include <vector>

#include "burst_results.h"
#include "common/clock.h"
#include "region/region.h"
#include "region_bench_shared.h"

namespace hami::bench {
namespace {

constexpr char kProgram[] = "region_bench_worker";

struct Args {
  WorkerArgs common;
  bool control = false;
};

bool ParseArgs(int argc, char** argv, Args* out) {
  auto own = [out](std::string_view flag, std::string_view) {
    if (flag != "--control") return OwnFlag::kUnknown;
    out->control = true;
    return OwnFlag::kTaken;
  };
  return ParseWorkerArgs(argc, argv, kProgram, {"--control"},
                         "usage: region_bench_worker --results-fd FD --barrier-fd FD --index I "
                         "--region PATH [--control]\n",
                         own, &out->common);
}

int Run(const Args& a, WorkerRecord* r, ResultsHeader* h, int64_t main_ns) {
  r->pid = int32_t(getpid());
  r->main_ns = main_ns;
  if (Status released = AwaitRelease(h, a.common.barrier_fd); !released.ok()) {
    return Fail(r, WorkerStep::kBarrier, "%s", released.error().message().c_str());
  }

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
    auto opened = region::Region::Open(a.common.region_path, &policy, region::Create::kIfMissing,
                                       &differences);
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
  return Succeed(r);
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  namespace bench = hami::bench;
  return bench::WorkerMain<bench::WorkerRecord>(argc, argv, bench::kProgram, bench::kResultsMagic,
                                                bench::kResultsVersion, bench::ParseArgs,
                                                bench::Run);
}
