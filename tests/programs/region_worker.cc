// region_worker: a scripted shared-region process for crash and concurrency tests. Linked
// with hami_region_testing, so HAMI_KILL_POINT=<name>[:<n>] SIGKILLs it at a named point.
// It runs its steps in order and prints one line per step on stdout (flushed at once).
//
//   region_worker PATH STEP...
//
//   limit BYTES               device 0's limit in the policy it stamps if it creates the
//                             region (2 devices; device 1 unlimited); before the first open
//   open                      opens PATH (Create::kIfMissing); "opened"
//   wait-barrier FD           "ready", then blocks until FD reads end-of-file; "released"
//   register                  "slot N"
//   reserve DEV BYTES         "reserve ok" or "reserve over-limit"
//   release DEV BYTES         "released"
//   reserve-loop DEV BYTES N  N reservations of BYTES (stops at the first refusal); "reserved K"
//   release-loop DEV BYTES N  N releases of BYTES; "released N"
//   race THREADS MS DEV MAX   THREADS threads reserve random sizes (1..MAX bytes) on DEV and
//                             release them again, for MS milliseconds; "race ok=K refused=R"
//   sweep                     SweepDead(); "swept N"
//   used DEV                  "used BYTES" (the device's total)
//   hold                      "holding", then waits until stdin reaches end-of-file
//   unregister                "unregistered"
//   crash                     SIGKILLs itself (no line, nothing unregistered)
//   fork-child DEV BYTES      forks a child that calls ReopenAfterFork(), registers and
//                             reserves BYTES on DEV, then waits for stdin to close, unregisters
//                             and exits; prints "child PID SLOT" once the child holds them
//   fork-exit                 forks a child that exits at once through exit() (running exit
//                             handlers) without ReopenAfterFork(); "child-exit STATUS"
//   wait-child                reaps the fork-child child; "child-exit STATUS"
//   exec                      "exec", then execs itself with PATH and the remaining steps, the
//                             region still open (as a program that execs does)
//
// BYTES take the suffixes k, m, g. Exit status: 0 when every step succeeded; 1 with
// "error STEP MESSAGE" otherwise. At exit the region is closed (unregistering) by a static
// destructor, as the interposer's would be.
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/parse.h"
#include "region/region.h"

namespace {

using hami::region::Admission;
using hami::region::Create;
using hami::region::PolicySpec;
using hami::region::Region;
using hami::region::UsageKind;

std::unique_ptr<Region> g_region;  // destroyed by exit(), like a preloaded library's
pid_t g_child = -1;

void Print(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void Print(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::vprintf(fmt, ap);
  va_end(ap);
  std::fputc('\n', stdout);
  std::fflush(stdout);
}

[[noreturn]] void Fail(const std::string& step, const std::string& message) {
  Print("error %s %s", step.c_str(), message.c_str());
  std::exit(1);
}

// Blocks until `fd` reaches end-of-file (or fails).
void DrainToEof(int fd) {
  char buf[256];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n == 0 || (n < 0 && errno != EINTR)) return;
  }
}

int StatusOf(int st) { return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st); }

class Steps {
 public:
  Steps(int argc, char** argv) : argc_(argc), argv_(argv) {}

  int Run() {
    while (i_ < argc_) {
      step_ = argv_[i_++];
      Do();
    }
    return 0;
  }

 private:
  std::string Arg() {
    if (i_ >= argc_) Fail(step_, "missing argument");
    return argv_[i_++];
  }
  uint64_t Bytes() {
    auto v = hami::ParseSize(Arg(), step_);
    if (!v.ok()) Fail(step_, v.error().message());
    return *v;
  }
  int Int() {
    auto v = hami::ParseUint64(Arg(), step_);
    if (!v.ok() || *v > 1'000'000'000) Fail(step_, "bad number");
    return int(*v);
  }

  Region& R() {
    if (g_region == nullptr) {
      auto r = Region::Open(argv_[1], &stamp_, Create::kIfMissing, nullptr);
      if (!r.ok()) Fail(step_, r.error().message());
      g_region = std::move(r).value();
    }
    return *g_region;
  }

  void Do() {
    if (step_ == "limit") {
      stamp_.memory_limit[0] = Bytes();
    } else if (step_ == "open") {
      R();
      Print("opened");
    } else if (step_ == "wait-barrier") {
      int fd = Int();
      Print("ready");
      DrainToEof(fd);
      close(fd);
      Print("released");
    } else if (step_ == "register") {
      auto slot = R().Register();
      if (!slot.ok()) Fail(step_, slot.error().message());
      Print("slot %d", *slot);
    } else if (step_ == "reserve") {
      int dev = Int();
      uint64_t bytes = Bytes();
      Admission a = R().Reserve(dev, bytes, UsageKind::kData);
      if (a == Admission::kNotRegistered) Fail(step_, "not registered");
      if (a == Admission::kNoSuchDevice) Fail(step_, "no such device");
      Print("reserve %s", a == Admission::kOk ? "ok" : "over-limit");
    } else if (step_ == "release") {
      int dev = Int();
      R().Release(dev, Bytes(), UsageKind::kData);
      Print("released");
    } else if (step_ == "reserve-loop") {
      int dev = Int();
      uint64_t bytes = Bytes();
      int n = Int(), k = 0;
      while (k < n && R().Reserve(dev, bytes, UsageKind::kData) == Admission::kOk) ++k;
      Print("reserved %d", k);
    } else if (step_ == "release-loop") {
      int dev = Int();
      uint64_t bytes = Bytes();
      int n = Int();
      for (int k = 0; k < n; ++k) R().Release(dev, bytes, UsageKind::kData);
      Print("released %d", n);
    } else if (step_ == "race") {
      Race();
    } else if (step_ == "sweep") {
      Print("swept %d", R().SweepDead());
    } else if (step_ == "used") {
      Print("used %llu", static_cast<unsigned long long>(R().Snapshot(Int()).used_bytes));
    } else if (step_ == "hold") {
      Print("holding");
      DrainToEof(0);
    } else if (step_ == "unregister") {
      R().Unregister();
      Print("unregistered");
    } else if (step_ == "crash") {
      raise(SIGKILL);
    } else if (step_ == "fork-child") {
      ForkChild();
    } else if (step_ == "fork-exit") {
      R();
      pid_t pid = fork();
      if (pid < 0) Fail(step_, std::strerror(errno));
      if (pid == 0) std::exit(0);
      int st = 0;
      waitpid(pid, &st, 0);
      Print("child-exit %d", StatusOf(st));
    } else if (step_ == "wait-child") {
      int st = 0;
      if (g_child < 0 || waitpid(g_child, &st, 0) != g_child) Fail(step_, "no child");
      g_child = -1;
      Print("child-exit %d", StatusOf(st));
    } else if (step_ == "exec") {
      Exec();
    } else {
      Fail(step_, "unknown step");
    }
  }

  void Race() {
    int threads = Int(), ms = Int(), dev = Int();
    uint64_t max = Bytes();
    Region& r = R();
    std::atomic<uint64_t> ok{0}, refused{0};
    const int64_t end = hami::MonotonicNs() + int64_t(ms) * 1'000'000;
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::mt19937_64 rng(uint64_t(getpid()) * 1000003u + uint64_t(t));
        while (hami::MonotonicNs() < end) {
          uint64_t bytes = 1 + rng() % max;
          if (r.Reserve(dev, bytes, UsageKind::kData) == Admission::kOk) {
            ok.fetch_add(1, std::memory_order_relaxed);
            if (rng() % 4 == 0) sched_yield();
            r.Release(dev, bytes, UsageKind::kData);
          } else {
            refused.fetch_add(1, std::memory_order_relaxed);
          }
        }
      });
    }
    for (std::thread& t : pool) t.join();
    Print("race ok=%llu refused=%llu", static_cast<unsigned long long>(ok.load()),
          static_cast<unsigned long long>(refused.load()));
  }

  void ForkChild() {
    int dev = Int();
    uint64_t bytes = Bytes();
    Region& r = R();
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) Fail(step_, std::strerror(errno));
    pid_t pid = fork();
    if (pid < 0) Fail(step_, std::strerror(errno));
    if (pid == 0) {
      close(ready[0]);
      int slot = -1;
      if (r.ReopenAfterFork().ok()) {
        auto s = r.Register();
        if (s.ok() && r.Reserve(dev, bytes, UsageKind::kData) == Admission::kOk) slot = *s;
      }
      if (write(ready[1], &slot, sizeof(slot)) != ssize_t(sizeof(slot))) _exit(2);
      close(ready[1]);
      if (slot < 0) _exit(1);
      DrainToEof(0);
      r.Unregister();
      _exit(0);
    }
    close(ready[1]);
    int slot = -1;
    ssize_t n;
    do {
      n = read(ready[0], &slot, sizeof(slot));
    } while (n < 0 && errno == EINTR);
    close(ready[0]);
    g_child = pid;
    if (n != ssize_t(sizeof(slot)) || slot < 0) Fail(step_, "the child could not register");
    Print("child %d %d", int(pid), slot);
  }

  void Exec() {
    Print("exec");
    std::vector<char*> args = {argv_[0], argv_[1]};
    for (int k = i_; k < argc_; ++k) args.push_back(argv_[k]);
    args.push_back(nullptr);
    execv("/proc/self/exe", args.data());
    Fail(step_, std::strerror(errno));
  }

  int argc_;
  char** argv_;
  int i_ = 2;
  std::string step_;
  PolicySpec stamp_ = [] {
    PolicySpec p;
    p.device_count = 2;
    p.memory_limit[0] = 64ull << 20;
    return p;
  }();
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: region_worker PATH STEP...\n");
    return 2;
  }
  return Steps(argc, argv).Run();
}
