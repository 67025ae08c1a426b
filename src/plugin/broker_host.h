// The host-PID broker embedded in the device plugin (seed 000): starts the broker server
// (broker/server.h) when the gate says so, after checking what the broker needs to answer
// correctly, and reports the server's end so that the plugin exits with the broker's error
// ("Broker exits after plugin startup: the device plugin exits with the broker error").
//
// The gate: only the exact string "1" enables the broker (LIBVGPU_HOSTPID_BROKER, the
// variable allocate.h names kBrokerGateEnv, or the same value from the configuration); "true",
// "yes", " 1" and an unset value leave it off, and then no socket is created.
//
// Enabled, StartBrokerHost refuses, naming the reason:
//   - an effective UID other than 0 (the broker's directory and lock are root's);
//   - a process outside the host's PID namespace: the kernel reports each client's PID in
//     the server's PID namespace, so a plugin pod without hostPID would hand out container
//     PIDs. "The host's" is the initial PID namespace, known by its fixed inode
//     (PROC_PID_INIT_INO) on /proc/self/ns/pid, as libvgpu.so's namespace tier checks it;
//   - whatever the server refuses (an unsafe directory, another broker on the same
//     directory, ...), with the server's message.
//
// Thread safety: every method may be called from any thread. The server's serving thread
// inherits the signal mask of the thread calling StartBrokerHost (block SIGINT/SIGTERM first
// to read them from a signalfd).
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "broker/server.h"
#include "common/result.h"
#include "node/paths.h"

namespace hami::plugin {

// The inode the kernel gives the initial PID namespace (PROC_PID_INIT_INO).
inline constexpr uint64_t kInitialPidNamespaceInode = 0xEFFFFFFCu;

// Whether a gate value enables the broker: exactly "1".
bool BrokerGateEnabled(std::optional<std::string_view> value);

struct BrokerHostOptions {
  // The gate's value as read (std::getenv(kBrokerGateEnv) or the configuration);
  // nullopt: unset.
  std::optional<std::string> gate;
  std::string socket_dir = node::kBrokerHostDir;  // the socket is <socket_dir>/broker.sock
  uid_t expected_uid = 0;  // must own the directory, lock and socket (the server's rule)
  int max_active = 512;
  int max_per_uid = 0;  // 0: max_active / 4 (broker/server.h)
  int64_t transaction_timeout_ns = 1'000'000'000;
  // The PID namespace the plugin must run in: the initial one. Tests of the refusal keep it.
  uint64_t host_pid_namespace_inode = kInitialPidNamespaceInode;
};

class BrokerHost {
 public:
  ~BrokerHost();  // Stop()
  BrokerHost(const BrokerHost&) = delete;
  BrokerHost& operator=(const BrokerHost&) = delete;

  const std::string& socket_path() const { return server_->path(); }
  const std::string& lock_path() const { return server_->lock_path(); }

  // The server's counters now (broker/server.h), for logs and metrics.
  broker::ServerCounters Counters() const { return server_->Counters(); }

  // Readable once the server has stopped serving, for the daemon's poll loop (an eventfd
  // that stays readable).
  int done_fd() const { return server_->done_fd(); }

  // Blocks until the server stops serving. OK only after Stop(); a server that ended on its
  // own yields its error, with context naming the broker and its socket:
  //   "the host-PID broker at /var/run/hami/hostpid/broker.sock stopped: serving ...: accept
  //   on ...: <errno text>"
  Status Wait();

  // Whether the server is still serving (false after Stop() or once it ended on its own).
  bool serving() const;

  // Stops the server; removes its socket (broker/server.h). Idempotent.
  void Stop();

 private:
  friend Result<std::unique_ptr<BrokerHost>> StartBrokerHost(const BrokerHostOptions&);
  explicit BrokerHost(std::unique_ptr<broker::Server> server) : server_(std::move(server)) {}
  std::unique_ptr<broker::Server> server_;
  std::atomic<bool> stopped_{false};
};

// Starts the broker when the gate enables it: the host (serving once this returns), or
// nullptr when the gate leaves the broker off (nothing is created). An error when enabled
// but refused (see the top of this file): the plugin must not start then.
Result<std::unique_ptr<BrokerHost>> StartBrokerHost(const BrokerHostOptions& options);

// Checks that this process runs in the PID namespace whose inode is `inode` (by default the
// initial one): kPermission naming this process's namespace otherwise, kIo when
// /proc/self/ns/pid cannot be read.
Status CheckHostPidNamespace(uint64_t inode = kInitialPidNamespaceInode);

}  // namespace hami::plugin
