#include "harness.h"

#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>

#include "common/cleanup.h"
#include "common/clock.h"
#include "common/file.h"
#include "common/parse.h"
#include "common/strings.h"

extern char** environ;

namespace hami::bench {
namespace {

std::atomic<bool> g_deadline_expired{false};
static_assert(std::atomic<bool>::is_always_lock_free);

void OnAlarm(int) { g_deadline_expired.store(true, std::memory_order_relaxed); }

}  // namespace

int CpuCount() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return int(sysconf(_SC_NPROCESSORS_ONLN));
}

// ---- the outer deadline ----

void InstallAlarmHandler() {
  struct sigaction sa {};
  sa.sa_handler = OnAlarm;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART: waitpid() returns EINTR when the deadline passes
  sigaction(SIGALRM, &sa, nullptr);
}

Deadline::Deadline(int seconds) {
  g_deadline_expired.store(false);
  alarm(unsigned(seconds));
}

Deadline::~Deadline() {
  alarm(0);
  g_deadline_expired.store(false);
}

bool Deadline::expired() const { return g_deadline_expired.load(std::memory_order_relaxed); }

// ---- child processes ----

void KillAndReap(const std::vector<pid_t>& pids, std::vector<bool>* reaped,
                 std::vector<int>* statuses) {
  for (size_t i = 0; i < pids.size(); ++i) {
    if (!(*reaped)[i] && pids[i] > 0) kill(pids[i], SIGKILL);
  }
  for (size_t i = 0; i < pids.size(); ++i) {
    if ((*reaped)[i] || pids[i] <= 0) continue;
    int st = 0;
    while (waitpid(pids[i], &st, 0) < 0 && errno == EINTR) {
    }
    (*reaped)[i] = true;
    if (statuses != nullptr) (*statuses)[i] = st;
  }
}

char ProcessState(pid_t pid) {
  auto text = ReadFileToString("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!text.ok()) return '?';
  size_t close = text->rfind(')');
  if (close == std::string::npos || close + 2 >= text->size()) return '?';
  return (*text)[close + 2];
}

Result<BarrierPipe> MakeBarrierPipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return Error::FromErrno("pipe2");
  return BarrierPipe{UniqueFd(fds[0]), UniqueFd(fds[1])};
}

// ---- a burst of exec'd workers ----

Result<std::unique_ptr<ResultsArea>> ResultsArea::Make(const char* name, uint64_t magic,
                                                       uint32_t version, uint32_t workers,
                                                       size_t record_size) {
  UniqueFd fd(memfd_create(name, MFD_CLOEXEC));
  if (!fd.valid()) return Error::FromErrno("memfd_create");
  const size_t bytes = sizeof(ResultsHeader) + size_t(workers) * record_size;
  if (ftruncate(fd.get(), off_t(bytes)) != 0) return Error::FromErrno("ftruncate results");
  void* m = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd.get(), 0);
  if (m == MAP_FAILED) return Error::FromErrno("mmap results");
  auto* header = new (m) ResultsHeader{};
  header->magic = magic;
  header->version = version;
  header->worker_count = workers;
  header->record_size = uint32_t(record_size);
  return std::unique_ptr<ResultsArea>(new ResultsArea(std::move(fd), header, bytes));
}

ResultsArea::~ResultsArea() { munmap(header_, bytes_); }

BurstProcesses RunWorkerBurst(const BurstSpec& spec, const ResultsArea& area) {
  BurstProcesses res;
  const size_t count = area.workers();
  const int workers = int(count);
  ResultsHeader* header = area.header();
  auto barrier = MakeBarrierPipe();
  if (!barrier.ok()) {
    res.error = barrier.error().message();
    return res;
  }
  UniqueFd& barrier_read = barrier->read_end;

  // Every argv and the environment are built before the first fork: the child only
  // redirects its output, clears two close-on-exec flags and execs.
  std::vector<std::string> env_strings = spec.env.value_or(std::vector<std::string>());
  std::vector<char*> envp;
  for (std::string& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  char* const* env = spec.env ? envp.data() : environ;
  std::vector<std::vector<std::string>> argvs(count);
  std::vector<std::vector<char*>> argps(count);
  for (size_t i = 0; i < count; ++i) {
    argvs[i] = {spec.worker,
                "--results-fd",
                std::to_string(area.fd()),
                "--barrier-fd",
                std::to_string(barrier_read.get()),
                "--index",
                std::to_string(i)};
    argvs[i].insert(argvs[i].end(), spec.args.begin(), spec.args.end());
    for (std::string& s : argvs[i]) argps[i].push_back(s.data());
    argps[i].push_back(nullptr);
  }

  Deadline deadline(spec.deadline_s);
  std::vector<pid_t> pids(count, -1);
  std::vector<bool> reaped(count, false);
  std::vector<int> statuses(count, 0);
  std::map<pid_t, size_t> index_of;
  res.fork_errno.assign(count, 0);
  auto kill_all = Cleanup([&] { KillAndReap(pids, &reaped, &statuses); });
  const pid_t parent = getpid();
  std::fflush(nullptr);
  res.first_fork_ns = MonotonicNs();
  int not_started = 0;
  for (size_t i = 0; i < count; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(126);
      if (spec.stdin_fd >= 0) dup2(spec.stdin_fd, STDIN_FILENO);
      if (spec.output_fd >= 0) {
        dup2(spec.output_fd, STDOUT_FILENO);
        dup2(spec.output_fd, STDERR_FILENO);
      }
      fcntl(area.fd(), F_SETFD, 0);
      fcntl(barrier_read.get(), F_SETFD, 0);
      execve(argps[i][0], argps[i].data(), env);
      if (spec.on_exec_failure) spec.on_exec_failure(i, errno);
      _exit(127);
    }
    if (pid < 0) {
      if (spec.on_fork_failure == ForkFailure::kFailRun) {
        res.error = "fork of worker " + std::to_string(i) + ": " + std::strerror(errno);
        return res;
      }
      res.fork_errno[i] = errno;
      ++not_started;
      continue;
    }
    pids[i] = pid;
    index_of[pid] = i;
    res.spawned++;
  }
  barrier_read.Reset();

  // Wait until every worker has reported ready (or died before it could) ...
  int exited_early = 0;
  auto reap_nohang = [&] {
    int st = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
      auto it = index_of.find(pid);
      if (it == index_of.end() || reaped[it->second]) continue;
      reaped[it->second] = true;
      statuses[it->second] = st;
      ++exited_early;
    }
  };
  for (;;) {
    reap_nohang();
    if (int(header->ready.load(std::memory_order_acquire)) + exited_early + not_started >=
        workers) {
      break;
    }
    if (deadline.expired()) {
      res.timed_out = true;
      res.error = "deadline: only " + std::to_string(header->ready.load()) + " of " +
                  std::to_string(workers) + " workers got ready in " +
                  std::to_string(spec.deadline_s) + " s";
      return res;
    }
    SleepForNs(200'000);
  }
  // ... and is asleep in its read() of the barrier.
  for (size_t i = 0; i < count; ++i) {
    while (pids[i] > 0 && !reaped[i] && ProcessState(pids[i]) != 'S') {
      reap_nohang();
      if (deadline.expired()) {
        res.timed_out = true;
        res.error = "deadline: worker " + std::to_string(i) + " never blocked on the barrier";
        return res;
      }
      SleepForNs(100'000);
    }
  }

  res.release_ns = MonotonicNs();
  barrier->write_end.Reset();  // EOF wakes them all
  res.last_reaped_ns = res.release_ns;
  int remaining = 0;
  for (size_t i = 0; i < count; ++i) remaining += pids[i] > 0 && !reaped[i] ? 1 : 0;
  while (remaining > 0) {
    int st = 0;
    pid_t pid = waitpid(-1, &st, 0);
    if (pid < 0) {
      if (errno == EINTR && deadline.expired()) {
        res.timed_out = true;
        break;
      }
      if (errno == EINTR) continue;
      break;  // ECHILD: nothing left
    }
    res.last_reaped_ns = MonotonicNs();
    auto it = index_of.find(pid);
    if (it == index_of.end() || reaped[it->second]) continue;
    reaped[it->second] = true;
    statuses[it->second] = st;
    --remaining;
  }
  res.exited = reaped;
  KillAndReap(pids, &reaped, &statuses);
  res.pids = pids;
  res.statuses = statuses;
  return res;
}

// ---- statistics ----

Percentiles NearestRank(std::vector<int64_t> v) {
  Percentiles p;
  p.count = v.size();
  if (v.empty()) return p;
  std::sort(v.begin(), v.end());
  p.p50 = NearestRankOf(v, 50);
  p.p95 = NearestRankOf(v, 95);
  p.p99 = NearestRankOf(v, 99);
  p.max = v.back();
  return p;
}

Json ToJson(const Percentiles& p) {
  return Json{{"count", p.count}, {"p50", p.p50}, {"p95", p.p95}, {"p99", p.p99}, {"max", p.max}};
}

// ---- flags ----

bool FlagReader::Next() {
  while (NextArgument()) {
    if (flag_ == "--quick") {
      common_->quick = true;
    } else if (flag_ == "--json") {
      std::string_view path;
      if (!TakeValue(&path)) {
        failed_ = true;
        return false;
      }
      common_->json_path = path;
    } else if (flag_ == "--help" || flag_ == "-h") {
      std::fputs(usage_, stdout);
      std::exit(0);
    } else {
      return true;
    }
  }
  return false;
}

bool FlagReader::NextArgument() {
  if (++i_ >= argc_) return false;
  const std::string_view arg = argv_[i_];
  flag_ = arg;
  value_ = {};
  has_value_ = false;
  if (size_t eq = arg.find('='); arg.rfind("--", 0) == 0 && eq != std::string_view::npos) {
    flag_ = arg.substr(0, eq);
    value_ = arg.substr(eq + 1);
    has_value_ = true;
  }
  return true;
}

bool FlagReader::TakeValue(std::string_view* value) {
  if (!has_value_) {
    if (i_ + 1 >= argc_) {
      std::fprintf(stderr, "%s: %s needs a value\n", program_, argv_[i_]);
      return false;
    }
    value_ = argv_[++i_];
    has_value_ = true;
  }
  *value = value_;
  return true;
}

void FlagReader::PrintUnknown() const {
  std::fprintf(stderr, "%s: unknown flag %s (see --help)\n", program_, argv_[i_]);
}

// ---- the report ----

std::string Fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}
std::string Us(int64_t ns) { return Fixed(double(ns) / 1e3, 1) + " us"; }
std::string Ms(int64_t ns) { return Fixed(double(ns) / 1e6, 3) + " ms"; }
std::string Duration(int64_t ns) { return ns < 1'000'000 ? Us(ns) : Ms(ns); }

void PrintTable(const std::vector<std::vector<std::string>>& rows, size_t right_from,
                size_t right_to, TrailingSpaces trailing) {
  if (rows.empty()) return;
  std::vector<size_t> w(rows[0].size(), 0);
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) w[c] = std::max(w[c], row[c].size());
  }
  auto print = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      const bool right = c >= right_from && c < right_to;
      const std::string pad(w[c] - row[c].size(), ' ');
      line += c == 0 ? "" : " | ";
      if (right) {
        line += pad + row[c];
      } else {
        line += c + 1 < row.size() ? row[c] + pad : row[c];
      }
    }
    if (trailing == TrailingSpaces::kTrim) {
      while (!line.empty() && line.back() == ' ') line.pop_back();
    }
    std::printf("%s\n", line.c_str());
  };
  print(rows[0]);
  std::string rule;
  for (size_t c = 0; c < w.size(); ++c) rule += (c == 0 ? "" : "-|-") + std::string(w[c], '-');
  std::printf("%s\n", rule.c_str());
  for (size_t i = 1; i < rows.size(); ++i) print(rows[i]);
}

void PrintTable(const std::vector<Row>& rows) {
  std::vector<std::vector<std::string>> table = {{"metric", "measured", "goal", "meets"}};
  for (const Row& r : rows) table.push_back({r.metric, r.measured, r.goal, r.meets});
  PrintTable(table, 1, 2, TrailingSpaces::kKeep);
}

Goal AtMost(std::string name, double measured, std::string unit, double bound, bool measured_ok,
            std::string conditions, bool conditions_match) {
  Goal g;
  g.name = std::move(name);
  g.measured = measured;
  g.unit = std::move(unit);
  g.goal = "<= " + Fixed(bound, bound == std::floor(bound) ? 0 : 1);
  g.bound = bound;
  g.measured_ok = measured_ok;
  g.meets = measured_ok && measured <= bound;
  g.conditions = std::move(conditions);
  g.conditions_match = conditions_match;
  return g;
}

std::string MeetsText(const Goal& g) {
  std::string s = !g.measured_ok ? "no (not measured)" : g.meets ? "yes" : "no";
  if (!g.conditions_match) s += " (goal is for " + g.conditions + ")";
  return s;
}

Json ToJson(const Goal& g) {
  return Json{{"name", g.name},
              {"measured", g.measured},
              {"unit", g.unit},
              {"goal", g.goal},
              {"bound", g.bound},
              {"meets", g.meets},
              {"measured_ok", g.measured_ok},
              {"conditions", g.conditions},
              {"conditions_match", g.conditions_match}};
}

bool WriteTextFile(const std::string& path, const std::string& text, const char* program) {
  std::ofstream out(path);
  out << text;
  out.close();
  if (!out) {
    std::fprintf(stderr, "%s: cannot write %s\n", program, path.c_str());
    return false;
  }
  return true;
}

bool WriteJson(const std::string& path, const Json& doc, const char* program) {
  return WriteTextFile(path, doc.dump(2) + "\n", program);
}

std::optional<std::vector<int>> ParseNumberList(std::string_view text, std::string_view flag,
                                                int min, int max, const char* program) {
  const int f = int(flag.size());
  std::vector<int> out;
  const std::vector<std::string_view> items =
      text.empty() ? std::vector<std::string_view>() : SplitString(text, ',', false);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0 && i + 1 == items.size() && items[i].empty()) {
      std::fprintf(stderr, "%s: %.*s ends with a comma\n", program, f, flag.data());
      return std::nullopt;
    }
    auto n = ParseUint64(items[i], flag);
    if (!n.ok()) {
      std::fprintf(stderr, "%s: %s\n", program, n.error().message().c_str());
      return std::nullopt;
    }
    if (*n < uint64_t(min) || *n > uint64_t(max)) {
      std::fprintf(stderr, "%s: %.*s %" PRIu64 " is not from %d to %d\n", program, f, flag.data(),
                   *n, min, max);
      return std::nullopt;
    }
    out.push_back(int(*n));
  }
  if (out.empty()) {
    std::fprintf(stderr, "%s: %.*s is empty\n", program, f, flag.data());
    return std::nullopt;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

std::optional<std::vector<size_t>> ParseNameList(std::string_view text, std::string_view flag,
                                                 const std::vector<std::string>& names,
                                                 std::string_view expected, const char* program) {
  std::vector<bool> chosen(names.size(), false);
  for (const std::string_view item : SplitString(text, ',', false)) {
    auto it = std::find(names.begin(), names.end(), item);
    if (it == names.end()) {
      std::fprintf(stderr, "%s: %.*s '%.*s' is not %.*s\n", program, int(flag.size()), flag.data(),
                   int(item.size()), item.data(), int(expected.size()), expected.data());
      return std::nullopt;
    }
    chosen[size_t(it - names.begin())] = true;
  }
  std::vector<size_t> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (chosen[i]) out.push_back(i);
  }
  return out;
}

void Appendf(std::string* out, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  va_list again;
  va_copy(again, ap);
  const int n = std::vsnprintf(nullptr, 0, fmt, ap);
  va_end(ap);
  if (n > 0) {
    const size_t at = out->size();
    out->resize(at + size_t(n) + 1);
    std::vsnprintf(out->data() + at, size_t(n) + 1, fmt, again);
    out->resize(at + size_t(n));
  }
  va_end(again);
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string SelfDir() {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
  std::string path = n > 0 ? std::string(self, size_t(n)) : std::string("./x");
  return path.substr(0, path.rfind('/'));
}

int64_t StatusBytes(pid_t pid, const std::string& field) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1)) * 1024;
  }
  return 0;
}

}  // namespace hami::bench
