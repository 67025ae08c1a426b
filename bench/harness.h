// What the system benchmarks (hami_bench_region, hami_bench_broker, hami_bench_init) share:
// the outer deadline, child processes and the barrier they are released by, a burst of exec'd
// workers with a results area (burst_results.h), nearest-rank percentiles, flags, the report
// (tables, goals) and the JSON file.
//
// For a benchmark's main thread: nothing here is thread-safe unless it says so, and the
// deadline is one per process.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <new>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "burst_results.h"
#include "common/result.h"
#include "common/unique_fd.h"

namespace hami::bench {

using Json = nlohmann::ordered_json;

// The CPUs this process may run on (its affinity mask), else the CPUs online.
int CpuCount();

// ---- the outer deadline: SIGALRM sets a flag; blocking waits return EINTR ----

// Installs the SIGALRM handler, without SA_RESTART: a waitpid() blocked when the deadline
// passes returns EINTR. Call once, before the first Deadline.
void InstallAlarmHandler();

// alarm(seconds) for as long as it lives; one at a time.
class Deadline {
 public:
  explicit Deadline(int seconds);
  ~Deadline();
  Deadline(const Deadline&) = delete;
  Deadline& operator=(const Deadline&) = delete;
  bool expired() const;
};

// ---- child processes ----

// Kills and reaps every child in `pids` not yet reaped (reaped[i] false; pids[i] <= 0 is no
// child). `statuses` (may be null) gets the wait status of each child reaped here.
void KillAndReap(const std::vector<pid_t>& pids, std::vector<bool>* reaped,
                 std::vector<int>* statuses);

// The scheduler state letter of `pid` from /proc/<pid>/stat ('S': asleep), or '?' when
// unreadable.
char ProcessState(pid_t pid);

// The pipe a burst is released by: each process sleeps in read() of `read_end` until the
// parent closes `write_end`, whose EOF wakes them all at once. Both ends are close-on-exec.
struct BarrierPipe {
  UniqueFd read_end;
  UniqueFd write_end;
};
Result<BarrierPipe> MakeBarrierPipe();

// ---- a burst of exec'd workers ----

// The parent's side of a results area (burst_results.h): a memfd (close-on-exec) holding a
// ResultsHeader and `workers` records, mapped while the object lives.
class ResultsArea {
 public:
  // A memfd named `name`; every record value-initialized, its outcome WorkerOutcome::kFailed.
  template <typename Record>
  static Result<std::unique_ptr<ResultsArea>> Create(const char* name, uint64_t magic,
                                                     uint32_t version, uint32_t workers) {
    auto area = Make(name, magic, version, workers, sizeof(Record));
    if (!area.ok()) return area;
    Record* records = (*area)->records<Record>();
    for (uint32_t i = 0; i < workers; ++i) {
      Record* r = new (&records[i]) Record{};
      r->outcome.store(uint32_t(WorkerOutcome::kFailed), std::memory_order_relaxed);
    }
    return area;
  }
  ~ResultsArea();
  ResultsArea(const ResultsArea&) = delete;
  ResultsArea& operator=(const ResultsArea&) = delete;

  int fd() const { return fd_.get(); }
  uint32_t workers() const { return header_->worker_count; }
  ResultsHeader* header() const { return header_; }
  template <typename Record>
  Record* records() const {
    return RecordsOf<Record>(header_);
  }

 private:
  static Result<std::unique_ptr<ResultsArea>> Make(const char* name, uint64_t magic,
                                                   uint32_t version, uint32_t workers,
                                                   size_t record_size);
  ResultsArea(UniqueFd fd, ResultsHeader* header, size_t bytes)
      : fd_(std::move(fd)), header_(header), bytes_(bytes) {}

  UniqueFd fd_;
  ResultsHeader* header_;
  size_t bytes_;
};

// What to do when fork() fails for a worker.
enum class ForkFailure {
  kFailRun,     // start no more workers; the burst fails ("fork of worker I: ...")
  kSkipWorker,  // go on without it (BurstProcesses::fork_errno says why)
};

struct BurstSpec {
  std::string worker;             // the worker's binary
  std::vector<std::string> args;  // after "--results-fd FD --barrier-fd FD --index I"
  // The workers' environment ("K=V"); none: this process's.
  std::optional<std::vector<std::string>> env;
  int stdin_fd = -1;   // the workers' stdin; -1: this process's
  int output_fd = -1;  // the workers' stdout and stderr; -1: this process's
  int deadline_s = 60;
  ForkFailure on_fork_failure = ForkFailure::kFailRun;
  // Called in the child when execve fails, with the worker's index and errno: async-signal-safe
  // code only (no allocation). May be empty.
  std::function<void(size_t index, int err)> on_exec_failure;
};

struct BurstProcesses {
  // Why the burst failed before the workers were released (a fork failed, or the deadline
  // passed before every worker was asleep on the barrier); empty once they were released.
  std::string error;
  bool timed_out = false;  // the deadline passed, before or after the release
  int spawned = 0;
  // Per worker, once released (error empty):
  std::vector<pid_t> pids;      // -1: never started
  std::vector<int> fork_errno;  // why it never started (ForkFailure::kSkipWorker); 0: it did
  std::vector<int> statuses;    // its wait status
  std::vector<bool> exited;     // it ended by itself, not killed at the deadline
  int64_t first_fork_ns = 0;
  int64_t release_ns = 0;      // the barrier's write end closed
  int64_t last_reaped_ns = 0;  // the last worker reaped by itself (release_ns when none)
};

// Forks and execs area.workers() workers with `spec` (after fork, only dup2, fcntl and execve;
// every argv is built before), waits until each one has counted itself ready and is asleep on
// the barrier (or has died), releases them, and reaps them, killing those still running at the
// deadline. Every worker started is reaped when it returns.
BurstProcesses RunWorkerBurst(const BurstSpec& spec, const ResultsArea& area);

// ---- statistics ----

struct Percentiles {
  size_t count = 0;
  int64_t p50 = 0, p95 = 0, p99 = 0, max = 0;
};

// Nearest rank: the smallest value with at least p% of the samples at or below it, i.e. the
// ceil(p/100 * n)-th smallest (counting from one): sample 297 of 300 for p99, 127 of 128.
// `sorted` is in ascending order and not empty.
template <typename T>
T NearestRankOf(const std::vector<T>& sorted, size_t pct) {
  const size_t rank = (pct * sorted.size() + 99) / 100;
  return sorted[std::clamp<size_t>(rank, 1, sorted.size()) - 1];
}
Percentiles NearestRank(std::vector<int64_t> v);

Json ToJson(const Percentiles& p);

// ---- flags ----

// A benchmark's main(): `parse` reads the flags (saying what is wrong on stderr), `run` runs the
// benchmark and returns its exit status. Exit status 2 on bad flags.
template <typename Options>
int BenchmarkMain(int argc, char** argv, std::optional<Options> (*parse)(int, char**),
                  int (*run)(const Options&)) {
  const std::optional<Options> options = parse(argc, argv);
  if (!options) return 2;
  return run(*options);
}

// The flags every benchmark takes: --quick, --json PATH and --help.
struct CommonOptions {
  bool quick = false;     // a short run (the smoke test)
  std::string json_path;  // where to write the JSON; empty: beside the binary
};

// Reads a benchmark's flags: "--name VALUE" or "--name=VALUE", and those that take no value.
// It takes the CommonOptions flags itself: --quick, --json PATH, and --help, which prints
// `usage` on stdout and exits 0.
class FlagReader {
 public:
  FlagReader(int argc, char** argv, const char* program, const char* usage, CommonOptions* common)
      : argc_(argc), argv_(argv), program_(program), usage_(usage), common_(common) {}

  // Moves to the next flag the benchmark reads itself; false past the last argument, or after
  // a bad common flag (failed() then says so, and why was said on stderr).
  bool Next();
  bool failed() const { return failed_; }
  // The flag, without "=VALUE".
  std::string_view flag() const { return flag_; }
  // Its value: after '=', else the next argument. Says "<program>: <argument> needs a value" on
  // stderr and returns false when there is none.
  bool TakeValue(std::string_view* value);
  // Says "<program>: unknown flag <argument> (see --help)" on stderr.
  void PrintUnknown() const;

 private:
  // Moves to the next argument; false past the last.
  bool NextArgument();

  int argc_;
  char** argv_;
  const char* program_;
  const char* usage_;
  CommonOptions* common_;
  int i_ = 0;
  std::string_view flag_, value_;
  bool has_value_ = false;
  bool failed_ = false;
};

// ---- the report ----

// `v` with `decimals` digits after the point.
std::string Fixed(double v, int decimals);
std::string Us(int64_t ns);        // "12.3 us"
std::string Ms(int64_t ns);        // "1.234 ms"
std::string Duration(int64_t ns);  // Us below a millisecond, else Ms

// Whether PrintTable drops the spaces at the end of each line (an empty last cell leaves some).
enum class TrailingSpaces { kKeep, kTrim };

// Prints `rows` as a table: the first row is the head, then a rule ("---|---"); cells are
// padded to their column's width, right-aligned in columns [right_from, right_to), left-aligned
// in the others (the last column, when left-aligned, is not padded); " | " between columns.
void PrintTable(const std::vector<std::vector<std::string>>& rows, size_t right_from,
                size_t right_to, TrailingSpaces trailing);

// A line of the goal table: metric | measured | goal | meets.
struct Row {
  std::string metric, measured, goal, meets;
};

// The goal table: its head, then `rows`; the measured column right-aligned.
void PrintTable(const std::vector<Row>& rows);

// A goal beside its measurement.
struct Goal {
  std::string name;
  Json measured;  // a number, integral or not as the benchmark counts it
  std::string unit;
  std::string goal;          // "<= 100"
  Json bound;                // a number
  bool measured_ok = false;  // the measurement exists (its phase ran)
  bool meets = false;        // measured, and within the bound
  std::string conditions;    // what the goal is stated for ("300 clients"); "" for any run
  bool conditions_match = true;
};

// A goal met when measured_ok and measured <= bound ("<= 1.2", "<= 50").
Goal AtMost(std::string name, double measured, std::string unit, double bound, bool measured_ok,
            std::string conditions = "", bool conditions_match = true);

// The meets column: "yes", "no" or "no (not measured)", and " (goal is for <conditions>)" when
// the run is not what the goal is stated for.
std::string MeetsText(const Goal& g);

// {name, measured, unit, goal, bound, meets, measured_ok, conditions, conditions_match}
Json ToJson(const Goal& g);

// Writes `text` to `path`; says "<program>: cannot write <path>" on stderr and returns false
// when that fails.
bool WriteTextFile(const std::string& path, const std::string& text, const char* program);

// WriteTextFile of `doc`, indented by 2, with a final newline.
bool WriteJson(const std::string& path, const Json& doc, const char* program);

// ---- list flags ----
// "30,10,30" -> {10, 30}: sorted, without repeats, each from `min` to `max`. A bad item, an
// empty list or a trailing comma is reported on stderr as "PROGRAM: ..." naming `flag`.
std::optional<std::vector<int>> ParseNumberList(std::string_view text, std::string_view flag,
                                                int min, int max, const char* program);
// "b,a" -> the indexes of the items in `names` (in the order of `names`, without repeats).
// An unknown item is reported as "PROGRAM: FLAG 'item' is not EXPECTED".
std::optional<std::vector<size_t>> ParseNameList(std::string_view text, std::string_view flag,
                                                 const std::vector<std::string>& names,
                                                 std::string_view expected, const char* program);

// ---- the benchmark's surroundings ----
// The directory of this program's executable (its binaries' siblings live there).
std::string SelfDir();
// A field of /proc/<pid>/status given in kB ("VmRSS", "VmHWM"), as bytes; 0 when unreadable.
int64_t StatusBytes(pid_t pid, const std::string& field);

// ---- SVG text ----
// Appends printf-formatted text to *out.
[[gnu::format(printf, 2, 3)]] void Appendf(std::string* out, const char* fmt, ...);
// `s` with <, > and & escaped for XML text.
std::string Escape(const std::string& s);

}  // namespace hami::bench
