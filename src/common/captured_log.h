// For tests of code that logs through a RawLogger: a logger whose lines go to a pipe, and
// what it wrote so far.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "common/raw_log.h"

namespace hami {

class CapturedLog {
 public:
  explicit CapturedLog(LogLevel level = LogLevel::kWarn) : logger_("test", level) {
    if (pipe2(fds_, O_NONBLOCK | O_CLOEXEC) == 0) logger_.set_fd(fds_[1]);
  }
  ~CapturedLog() {
    if (fds_[0] >= 0) close(fds_[0]);
    if (fds_[1] >= 0) close(fds_[1]);
  }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  bool ok() const { return fds_[0] >= 0; }
  RawLogger& logger() { return logger_; }
  // Everything logged since the last call.
  std::string Drain() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = read(fds_[0], buf, sizeof(buf))) > 0) out.append(buf, size_t(n));
    return out;
  }

 private:
  RawLogger logger_;
  int fds_[2] = {-1, -1};
};

}  // namespace hami
