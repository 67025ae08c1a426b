// The results area a burst benchmark shares with its exec'd workers, and the worker's side of
// a burst (its flags, its record, the barrier).
//
// The area is an anonymous memfd the parent creates (ResultsArea, harness.h) and every worker
// maps: a ResultsHeader followed by one record per worker, of a type each benchmark defines
// (its first field an std::atomic<uint32_t> outcome, its failed step and error text among the
// rest). The parent marks every record WorkerOutcome::kFailed before it starts a worker; a
// worker stores kOk last (release), after every other field of its record, so a worker that
// dies or fails never reads as a success. The parent also requires exit status 0.
//
// A worker is started as `<worker> --results-fd FD --barrier-fd FD --index I --region PATH
// [its own flags]`; it counts itself ready in the header, then sleeps in read() of the barrier
// pipe until the parent closes the write end (EOF releases every worker at once).
//
// Times are CLOCK_MONOTONIC nanoseconds (comparable across processes); 0 = not reached.
#pragma once

#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "common/parse.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace hami::bench {

enum class WorkerOutcome : uint32_t { kFailed = 0, kOk = 1 };

struct alignas(64) ResultsHeader {
  uint64_t magic;  // the benchmark's own
  uint32_t version;
  uint32_t worker_count;
  uint32_t record_size;
  uint32_t pad0;
  std::atomic<uint32_t> ready;  // workers about to block on the barrier
  std::atomic<uint32_t> done;   // workers past the measured call (MarkDoneAndWaitForAll)
  uint8_t reserved[32];
};

static_assert(sizeof(ResultsHeader) == 64);
static_assert(offsetof(ResultsHeader, ready) == 24);
static_assert(offsetof(ResultsHeader, done) == 28);
static_assert(std::atomic<uint32_t>::is_always_lock_free);

template <typename Record>
constexpr size_t ResultsBytes(uint32_t workers) {
  return sizeof(ResultsHeader) + size_t(workers) * sizeof(Record);
}

template <typename Record>
Record* RecordsOf(ResultsHeader* h) {
  return reinterpret_cast<Record*>(h + 1);
}

// ---- the worker's side ----

// The flags every burst worker takes.
struct WorkerArgs {
  int results_fd = -1;
  int barrier_fd = -1;
  uint32_t index = 0;
  std::string region_path;
};

// What a worker made of one of its own flags.
enum class OwnFlag { kUnknown, kTaken, kBad };

// Parses argv into `out`. The worker's own flags go to `own(flag, value)` first (`value` is
// empty for a flag named in `switches`, which takes none; every other flag takes one); `own`
// prints why when it returns kBad. Says what is wrong on stderr ("<program>: ...", or `usage`
// when a flag of WorkerArgs is missing) and returns false on bad flags.
template <typename Own>
bool ParseWorkerArgs(int argc, char** argv, const char* program,
                     std::initializer_list<std::string_view> switches, const char* usage, Own&& own,
                     WorkerArgs* out) {
  bool have_index = false;
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    bool is_switch = false;
    for (std::string_view s : switches) is_switch = is_switch || flag == s;
    if (is_switch) {
      if (own(flag, std::string_view()) != OwnFlag::kTaken) return false;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "%s: %s needs a value\n", program, argv[i]);
      return false;
    }
    const std::string_view value = argv[++i];
    if (flag == "--region") {
      out->region_path = value;
      continue;
    }
    if (const OwnFlag o = own(flag, value); o != OwnFlag::kUnknown) {
      if (o == OwnFlag::kBad) return false;
      continue;
    }
    auto n = ParseUint64(value, flag);
    if (!n.ok() || *n > 0x7fffffff) {
      std::fprintf(stderr, "%s: %s\n", program,
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
      std::fprintf(stderr, "%s: unknown flag %s\n", program, argv[i - 1]);
      return false;
    }
  }
  if (out->results_fd < 0 || out->barrier_fd < 0 || !have_index || out->region_path.empty()) {
    std::fputs(usage, stderr);
    return false;
  }
  return true;
}

// Maps the results area and returns this worker's record, or null after saying why on stderr.
// The area must carry `magic`, `version` and Record's size, and hold record `a.index`.
template <typename Record>
Record* MapRecord(const char* program, const WorkerArgs& a, uint64_t magic, uint32_t version,
                  ResultsHeader** header) {
  struct stat st;
  if (fstat(a.results_fd, &st) != 0 || st.st_size < off_t(sizeof(ResultsHeader))) {
    std::fprintf(stderr, "%s: results fd %d is not a results area\n", program, a.results_fd);
    return nullptr;
  }
  void* m = mmap(nullptr, size_t(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, a.results_fd, 0);
  if (m == MAP_FAILED) {
    std::fprintf(stderr, "%s: mmap results: %s\n", program, std::strerror(errno));
    return nullptr;
  }
  auto* h = static_cast<ResultsHeader*>(m);
  if (h->magic != magic || h->version != version || h->record_size != sizeof(Record) ||
      a.index >= h->worker_count || uint64_t(st.st_size) < ResultsBytes<Record>(h->worker_count)) {
    std::fprintf(stderr, "%s: results area does not match this build\n", program);
    return nullptr;
  }
  *header = h;
  return &RecordsOf<Record>(h)[a.index];
}

// Records why the worker failed, and at which step, in its record; returns 1 (the worker's
// exit status after a failed step).
template <typename Record, typename Step>
[[gnu::format(printf, 3, 4)]] int Fail(Record* r, Step step, const char* fmt, ...) {
  r->failed_step = uint32_t(step);
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(r->error, sizeof(r->error), fmt, ap);
  va_end(ap);
  return 1;
}

// Records the worker's success: kOk, stored last (release), after every other field of its
// record. Returns 0 (the worker's exit status on success).
template <typename Record>
int Succeed(Record* r) {
  r->outcome.store(uint32_t(WorkerOutcome::kOk), std::memory_order_release);
  return 0;
}

// Counts this worker ready in `header`, then sleeps in read() of the barrier until the parent
// closes its write end, and closes the barrier. `ready_ns` (stamped just before the count) and
// `released_ns` (just after the read) may be null. An error when the read ends in anything
// but EOF.
inline Status AwaitRelease(ResultsHeader* header, int barrier_fd, int64_t* ready_ns = nullptr,
                           int64_t* released_ns = nullptr) {
  UniqueFd barrier(barrier_fd);
  if (ready_ns != nullptr) *ready_ns = MonotonicNs();
  header->ready.fetch_add(1, std::memory_order_acq_rel);
  char byte;
  ssize_t n;
  do {
    n = read(barrier.get(), &byte, 1);
  } while (n < 0 && errno == EINTR);
  if (released_ns != nullptr) *released_ns = MonotonicNs();
  if (n != 0) {
    char why[96];
    std::snprintf(why, sizeof(why), "barrier read returned %zd (%s)", n,
                  n < 0 ? std::strerror(errno) : "data instead of EOF");
    return Error(ErrorCode::kIo, why);
  }
  return OkStatus();
}

// Counts this worker past the call the burst measures, then waits (a shared futex on the
// count, at most `max_wait_ns`) until every worker of the burst has counted itself, so that
// what a worker does afterwards (reading the region, exiting) takes no CPU from a worker still
// inside the measured call. The bound keeps a burst with a worker that never got there (it
// could not be started, or died) from waiting for it; such a burst fails anyway.
inline void MarkDoneAndWaitForAll(ResultsHeader* header, int64_t max_wait_ns) {
  const uint32_t all = header->worker_count;
  uint32_t seen = header->done.fetch_add(1, std::memory_order_acq_rel) + 1;
  auto* word = reinterpret_cast<uint32_t*>(&header->done);
  if (seen >= all) {
    syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
    return;
  }
  const int64_t end = MonotonicNs() + max_wait_ns;
  while (seen < all) {
    const int64_t left = end - MonotonicNs();
    if (left <= 0) return;
    timespec ts{time_t(left / 1'000'000'000), long(left % 1'000'000'000)};
    // Not FUTEX_PRIVATE: the word is in memory every worker maps.
    syscall(SYS_futex, word, FUTEX_WAIT, seen, &ts, nullptr, 0);
    seen = header->done.load(std::memory_order_acquire);
  }
}

// A burst worker's main(): stamps entering main, parses the flags into Args (`parse`, which says
// what is wrong on stderr; Args::common holds the WorkerArgs), maps the worker's record from an
// area carrying `magic` and `version`, and returns what `run` returns (0 on success, 1 after a
// failed step); 2 on bad flags or when the worker cannot reach its record.
template <typename Record, typename Args>
int WorkerMain(int argc, char** argv, const char* program, uint64_t magic, uint32_t version,
               bool (*parse)(int, char**, Args*),
               int (*run)(const Args&, Record*, ResultsHeader*, int64_t main_ns)) {
  const int64_t main_ns = MonotonicNs();
  Args args;
  if (!parse(argc, argv, &args)) return 2;
  ResultsHeader* header = nullptr;
  Record* record = MapRecord<Record>(program, args.common, magic, version, &header);
  if (record == nullptr) return 2;
  return run(args, record, header, main_ns);
}

}  // namespace hami::bench
