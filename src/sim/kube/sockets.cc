#include "sim/kube/sockets.h"

#include <dirent.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cstdlib>
#include <string>

namespace hami::sim::kube {

namespace {

struct Endpoint {
  std::string addr;
  int port = -1;
};

bool ToEndpoint(const sockaddr_storage& ss, socklen_t len, Endpoint* out) {
  if (ss.ss_family != AF_INET && ss.ss_family != AF_INET6) return false;
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), len, host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return false;
  }
  out->addr = host;
  out->port = std::atoi(serv);
  return true;
}

bool LocalEndpoint(int fd, Endpoint* out) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  return ToEndpoint(ss, len, out);
}

bool RemoteEndpoint(int fd, Endpoint* out) {
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  if (getpeername(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) return false;
  return ToEndpoint(ss, len, out);
}

// Calls `fn(fd)` for every open descriptor of this process until it returns true; returns
// that descriptor, or -1.
template <typename Fn>
int ForEachFd(Fn fn) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  const int own = dirfd(dir);
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd == own) continue;
    if (fn(int(fd))) {
      found = int(fd);
      break;
    }
  }
  closedir(dir);
  return found;
}

}  // namespace

int FindConnectionSocket(std::string_view local_addr, int local_port, std::string_view remote_addr,
                         int remote_port) {
  return ForEachFd([&](int fd) {
    Endpoint local, remote;
    return LocalEndpoint(fd, &local) && local.port == local_port && local.addr == local_addr &&
           RemoteEndpoint(fd, &remote) && remote.port == remote_port && remote.addr == remote_addr;
  });
}

std::vector<int> ConnectionSockets(int local_port) {
  std::vector<int> out;
  ForEachFd([&](int fd) {
    Endpoint local, remote;
    if (LocalEndpoint(fd, &local) && local.port == local_port && RemoteEndpoint(fd, &remote)) {
      out.push_back(fd);
    }
    return false;
  });
  return out;
}

bool PeerClosed(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  return (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0;
}

}  // namespace hami::sim::kube
