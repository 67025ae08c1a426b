// Serving the DevicePlugin service in the kubelet's device-plugins directory and registering
// it with the kubelet, again after every kubelet restart.
//
// One thread does it all, driven by events:
//   1. serve the service on <dir>/<socket_name> (UnixServer; a stale socket is replaced);
//   2. call Registration.Register on <dir>/kubelet.sock: version "v1beta1", endpoint
//      <socket_name>, the service's resource name and PluginOptions();
//   3. watch the directory (inotify): kubelet.sock created or moved in (the kubelet restarted)
//      or the plugin's own socket removed or replaced → stop serving, serve and register again
//      at once. Events the plugin causes itself (replacing its own stale socket) are
//      recognised by the socket's inode and ignored.
// A server that fails to start or a Register that fails is retried after a backoff
// (`backoff.initial_ms`, doubling up to `backoff.max_ms`, back to the start after a success or
// a kubelet restart), and the reason is logged each time. The kubelet absent at first is a
// failed Register like any other; its socket appearing starts a new attempt at once.
//
// Stop() ends the thread (cancelling a Register in flight), ends the service's streams, stops
// the server and removes the plugin's socket only while it is still the one it bound; it
// never touches kubelet.sock or another plugin's socket.
//
// Thread safety: every method may be called from any thread; Stop() is idempotent and run by
// the destructor. The service must outlive the registrar.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/result.h"
#include "common/unique_fd.h"
#include "plugin/api.h"

namespace hami::plugin {

struct Backoff {
  int64_t initial_ms = 1000;
  int64_t max_ms = 30'000;
};

struct RegistrarOptions {
  // The kubelet's registration socket (--kubelet-socket); the plugin serves in its directory.
  std::string kubelet_socket = std::string(kDevicePluginDir) + "/" + kKubeletSocketName;
  std::string socket_name = kDefaultPluginSocketName;  // RegisterRequest.endpoint
  Backoff backoff;
  int64_t register_timeout_ms = 10'000;  // one Register call
  int64_t stop_grace_ms = 1000;          // calls still running when the server stops
};

struct RegistrarCounters {
  uint64_t serves = 0;             // servers started
  uint64_t serve_failures = 0;     // servers that failed to start
  uint64_t registrations = 0;      // Register calls the kubelet accepted
  uint64_t register_failures = 0;  // Register calls that failed
  uint64_t kubelet_restarts = 0;   // kubelet.sock (re)created while running
  uint64_t socket_losses = 0;      // the plugin's own socket removed or replaced
  bool registered = false;         // the last Register succeeded and nothing changed since
  std::string last_error;          // the reason of the last failure ("" when none)

  // "serves=1 serve_failures=0 registrations=1 ... registered=1": a structured log line.
  std::string ToKeyValues() const;
};

class Registrar {
 public:
  Registrar(DevicePluginService* service, RegistrarOptions options);
  ~Registrar();
  Registrar(const Registrar&) = delete;
  Registrar& operator=(const Registrar&) = delete;

  // Checks the options, watches the directory and starts the thread; returns at once (the
  // first serve and Register happen on the thread: WaitForRegistrations). Errors: a relative
  // or malformed kubelet socket path, a socket name with a '/', a directory that cannot be
  // watched (missing: the kubelet creates it), each naming the path.
  Status Start();
  void Stop();

  std::string plugin_socket() const;  // <dir>/<socket_name>
  const std::string& directory() const { return dir_; }
  RegistrarCounters Counters() const;
  // True once Counters().registrations >= count; false after `timeout_ms`.
  bool WaitForRegistrations(uint64_t count, int64_t timeout_ms) const;
  // True once `condition` holds for the counters (checked at every change); false after
  // `timeout_ms`. `condition` runs under the registrar's lock: it must only look.
  bool WaitForCounters(const std::function<bool(const RegistrarCounters&)>& condition,
                       int64_t timeout_ms) const;

 private:
  void Run();
  bool Serve();
  bool Register();
  void StopServing();
  // Reads the pending inotify events; true when serving and registering must start again.
  bool ReadEvents();
  void Failed(const std::string& what, const Error& error);

  DevicePluginService* const service_;
  const RegistrarOptions options_;
  std::string dir_;
  std::string kubelet_name_;  // the kubelet socket's file name

  UniqueFd inotify_fd_;
  UniqueFd wake_fd_;  // eventfd: Stop() wakes the thread
  std::thread thread_;
  std::unique_ptr<UnixServer> server_;  // the thread's own
  int64_t backoff_ms_ = 0;              // the thread's own: the next retry's wait

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  RegistrarCounters counters_;
  bool stopping_ = false;
  grpc::ClientContext* register_context_ = nullptr;  // the Register in flight, for Stop()
};

}  // namespace hami::plugin
