// A flood of silent connections to a Unix socket, for the broker's tests and benchmark: what
// one tenant can do to the node's broker (connect, never send a byte, connect again as soon
// as the server closes the connection). One thread, epoll, non-blocking sockets.
#pragma once

#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "common/unique_fd.h"

namespace hami::broker {

// Holds `count` silent connections to `path` until destroyed: each one the server closes is
// opened again at once; one refused by a full listen queue (EAGAIN) is tried again on the next
// round (every millisecond at most).
class SilentFlood {
 public:
  SilentFlood(const std::string& path, int count) : fds_(size_t(count), -1) {
    addr_.sun_family = AF_UNIX;
    std::memcpy(addr_.sun_path, path.c_str(), path.size() + 1);
    epoll_.Reset(epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_.valid()) {
      failed_.store(true);
      return;
    }
    thread_ = std::thread([this] { Run(); });
  }
  ~SilentFlood() {
    stop_.store(true);
    if (thread_.joinable()) thread_.join();
    for (int fd : fds_) {
      if (fd >= 0) ::close(fd);
    }
  }
  SilentFlood(const SilentFlood&) = delete;
  SilentFlood& operator=(const SilentFlood&) = delete;

  uint64_t reopened() const { return reopened_.load(std::memory_order_relaxed); }
  bool failed() const { return failed_.load(); }

 private:
  void Open(size_t i, std::vector<size_t>* waiting) {
    if (fds_[i] < 0) {
      fds_[i] = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
      if (fds_[i] < 0) {
        failed_.store(true);
        return;
      }
    }
    if (connect(fds_[i], reinterpret_cast<const sockaddr*>(&addr_), sizeof(addr_)) == 0) {
      epoll_event ev{};
      ev.events = EPOLLIN | EPOLLRDHUP;
      ev.data.u64 = i;
      if (epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, fds_[i], &ev) != 0) failed_.store(true);
    } else if (errno == EAGAIN || errno == EINTR) {
      waiting->push_back(i);
    } else {
      failed_.store(true);
    }
  }

  void Run() {
    std::vector<size_t> waiting, retry;
    for (size_t i = 0; i < fds_.size(); ++i) Open(i, &waiting);
    epoll_event events[256];
    while (!stop_.load(std::memory_order_relaxed)) {
      const int n = epoll_wait(epoll_.get(), events, 256, 1);
      for (int k = 0; k < n; ++k) {
        const size_t i = size_t(events[k].data.u64);
        ::close(fds_[i]);  // closed by the server: open it again
        fds_[i] = -1;
        reopened_.fetch_add(1, std::memory_order_relaxed);
        Open(i, &waiting);
      }
      retry.swap(waiting);
      waiting.clear();
      for (size_t i : retry) Open(i, &waiting);
    }
  }

  sockaddr_un addr_{};
  std::vector<int> fds_;
  UniqueFd epoll_;
  std::atomic<bool> stop_{false};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> reopened_{0};
  std::thread thread_;
};

}  // namespace hami::broker
