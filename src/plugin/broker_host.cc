#include "plugin/broker_host.h"

#include <poll.h>
#include <sys/stat.h>

#include <utility>

#include "limits/vocabulary.h"

namespace hami::plugin {

bool BrokerGateEnabled(std::optional<std::string_view> value) { return value && *value == "1"; }

Status CheckHostPidNamespace(uint64_t inode) {
  struct stat st;
  if (stat("/proc/self/ns/pid", &st) != 0) {
    return Error::FromErrno(
        "the host-PID broker cannot tell its PID namespace (stat /proc/self/ns/pid)");
  }
  if (uint64_t(st.st_ino) != inode) {
    return Error(ErrorCode::kPermission,
                 "the host-PID broker must run in the host's PID namespace (hostPID: true): this "
                 "process is in pid:[" +
                     std::to_string(st.st_ino) + "], not the host's pid:[" + std::to_string(inode) +
                     "]; it would answer container PIDs (the kernel reports each client's PID in "
                     "the server's namespace)");
  }
  return OkStatus();
}

Result<std::unique_ptr<BrokerHost>> StartBrokerHost(const BrokerHostOptions& options) {
  if (!BrokerGateEnabled(options.gate)) return std::unique_ptr<BrokerHost>();
  if (geteuid() != 0) {
    return Error(ErrorCode::kPermission,
                 "the host-PID broker is enabled (" +
                     std::string(limits::Name(limits::Key::kHostPidBroker)) +
                     "=1) but the device plugin does not run as root (effective UID " +
                     std::to_string(geteuid()) + ")");
  }
  HAMI_TRY(CheckHostPidNamespace(options.host_pid_namespace_inode));
  if (options.socket_dir.empty() || options.socket_dir[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 "the host-PID broker's directory '" + options.socket_dir + "' is not absolute");
  }
  std::string dir = options.socket_dir;
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  broker::ServerOptions so;
  so.socket_path = dir + "/" + node::kBrokerSocketName;
  so.max_active = options.max_active;
  so.max_per_uid = options.max_per_uid;
  so.transaction_timeout_ns = options.transaction_timeout_ns;
  so.expected_uid = options.expected_uid;
  auto server = broker::Server::Start(so);
  if (!server.ok()) {
    return std::move(server).error().Context("starting the host-PID broker");
  }
  return std::unique_ptr<BrokerHost>(new BrokerHost(std::move(server).value()));
}

BrokerHost::~BrokerHost() { Stop(); }

Status BrokerHost::Wait() {
  Status s = server_->Wait();
  if (!s.ok()) {
    return std::move(s).error().Context("the host-PID broker at " + server_->path() + " stopped");
  }
  if (!stopped_.load(std::memory_order_acquire)) {
    return Error(ErrorCode::kInternal,
                 "the host-PID broker at " + server_->path() + " stopped serving");
  }
  return OkStatus();
}

bool BrokerHost::serving() const {
  pollfd p{server_->done_fd(), POLLIN, 0};
  return poll(&p, 1, 0) == 0;
}

void BrokerHost::Stop() {
  stopped_.store(true, std::memory_order_release);
  server_->Stop();
}

}  // namespace hami::plugin
