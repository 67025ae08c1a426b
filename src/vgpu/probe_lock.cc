#include "vgpu/probe_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "common/clock.h"
#include "common/futex.h"
#include "common/ofd_lock.h"

namespace hami::vgpu {
namespace {

constexpr off_t kLockByte = 0;
constexpr off_t kCounterOffset = 0;

// The holder-change counter; 0 while the file is shorter than it.
uint32_t ReadCounter(int fd) {
  uint32_t v = 0;
  if (pread(fd, &v, sizeof(v), kCounterOffset) != ssize_t(sizeof(v))) return 0;
  return v;
}

// Only the holder writes it, so the increment needs no atomicity beyond the lock.
void BumpCounter(int fd) {
  const uint32_t v = ReadCounter(fd) + 1;
  if (pwrite(fd, &v, sizeof(v), kCounterOffset) != ssize_t(sizeof(v))) {
    // A full or read-only file system: waiters still find the lock at their recheck.
  }
}

Result<UniqueFd> OpenLockFile(const std::string& path) {
  constexpr int kFlags = O_RDWR | O_CREAT;
  auto fd = OpenRegularFile(path, kFlags, 0666);
  if (!fd.ok() && fd.error().sys_errno() == ENOENT) {
    // The directory alone is missing (a host without the device plugin's preparation):
    // make it as the device plugin would, shared by every user, sticky.
    const std::string dir = path.substr(0, path.rfind('/'));
    if (!dir.empty() && mkdir(dir.c_str(), 01777) == 0) chmod(dir.c_str(), 01777);
    fd = OpenRegularFile(path, kFlags, 0666);
  }
  return fd;
}

}  // namespace

ProbeLockOptions ProbeLockOptions::ForWaitMs(uint32_t wait_ms) {
  ProbeLockOptions o;
  o.stall_ns = int64_t(wait_ms) * 1'000'000;
  o.bound_ns = kProbeLockBoundFactor * o.stall_ns;
  return o;
}

const char* ProbeLockOutcomeName(ProbeLockOutcome outcome) {
  switch (outcome) {
    case ProbeLockOutcome::kAcquired:
      return "acquired";
    case ProbeLockOutcome::kStalled:
      return "stalled";
    case ProbeLockOutcome::kBoundReached:
      return "bound-reached";
    case ProbeLockOutcome::kUnavailable:
      return "unavailable";
  }
  return "?";
}

ProbeLock& ProbeLock::operator=(ProbeLock&& other) noexcept {
  if (this != &other) {
    Release();
    fd_ = std::move(other.fd_);
    word_ = std::move(other.word_);
  }
  return *this;
}

ProbeLock ProbeLock::Acquire(const std::string& path, const ProbeLockOptions& options,
                             ProbeLockReport* report) {
  *report = ProbeLockReport{};
  auto opened = OpenLockFile(path);
  if (!opened.ok()) {
    report->error = opened.error().message();
    return ProbeLock();
  }
  UniqueFd fd = std::move(opened).value();
  fchmod(fd.get(), 0666);  // every container's user may take it (best effort)

  // The counter must lie inside the file for the kernel to sleep on it; extending a short
  // file keeps what it holds.
  struct stat st;
  if (fstat(fd.get(), &st) == 0 && st.st_size < off_t(sizeof(uint32_t))) {
    if (ftruncate(fd.get(), off_t(sizeof(uint32_t))) != 0) {
      // Read-only or full: the futex calls fail and the waits fall back to sleeping.
    }
  }
  auto mapped = MappedFile::Map(fd.get(), sizeof(uint32_t), false, path);
  MappedFile word;
  if (mapped.ok()) word = std::move(mapped).value();
  report->doorbell = word.data() != nullptr;
  const auto* futex_word = static_cast<const uint32_t*>(word.data());

  auto now = [&options] {
    return options.clock.now_ns != nullptr ? options.clock.now_ns(options.clock.arg)
                                           : MonotonicNs();
  };
  int64_t start_ns = 0, last_change_ns = 0;
  uint32_t seen = 0;
  for (bool first = true;; first = false) {
    // The counter is read before the try: a release after this read changes it, and the
    // futex then refuses to sleep on the old value.
    const uint32_t counter = ReadCounter(fd.get());
    const int err = OfdLockByte(fd.get(), kLockByte, F_WRLCK, LockWait::kNo);
    const int64_t now_ns = now();
    if (first) {
      start_ns = last_change_ns = now_ns;
      seen = counter;
    } else if (counter != seen) {
      seen = counter;
      last_change_ns = now_ns;
      report->holder_changes++;
    }
    report->waited_ns = now_ns - start_ns;
    if (err == 0) {
      BumpCounter(fd.get());
      report->outcome = ProbeLockOutcome::kAcquired;
      ProbeLock lock;
      lock.fd_ = std::move(fd);
      lock.word_ = std::move(word);
      return lock;
    }
    if (err != EAGAIN && err != EACCES) {
      report->error = "locking " + path + ": " + std::strerror(err);
      return ProbeLock();
    }
    const int64_t stall_left = last_change_ns + options.stall_ns - now_ns;
    const int64_t bound_left = start_ns + options.bound_ns - now_ns;
    if (stall_left <= 0) {
      report->outcome = ProbeLockOutcome::kStalled;
      return ProbeLock();
    }
    if (bound_left <= 0) {
      report->outcome = ProbeLockOutcome::kBoundReached;
      return ProbeLock();
    }
    const int64_t sleep_ns = std::min({options.recheck_ns, stall_left, bound_left});
    report->sleeps++;
    FutexWaitEnd end = FutexWaitEnd::kFailed;
    if (futex_word != nullptr) end = WaitOnWord(futex_word, counter, sleep_ns);
    switch (end) {
      case FutexWaitEnd::kWoken:
      case FutexWaitEnd::kValueDiffers:
        report->woken++;
        break;
      case FutexWaitEnd::kTimedOut:
        report->rechecks++;
        break;
      case FutexWaitEnd::kInterrupted:
        break;
      case FutexWaitEnd::kFailed:  // no mapping, or the file was cut short under it
        SleepForNs(sleep_ns);
        report->rechecks++;
        break;
    }
  }
}

void ProbeLock::Release() {
  if (!fd_.valid()) return;
  BumpCounter(fd_.get());
  OfdLockByte(fd_.get(), kLockByte, F_UNLCK, LockWait::kNo);
  if (word_.data() != nullptr) WakeOne(static_cast<const uint32_t*>(word_.data()));
  word_.Reset();
  fd_.Reset();
}

}  // namespace hami::vgpu
