// The simulated kubelet's DRA manager: plugin registration through the plugins-registry
// directory, and the DRA gRPC calls (NodePrepareResources, NodeUnprepareResources) a pod's
// claims need, as the kubelet's pluginmanager and cm/dra run them (research/dra.md §5).
//
// Registration (Start() until Stop()):
//   - the registry directory is watched with inotify; a socket created there, and every socket
//     there at Start, is a plugin's registration socket, except names starting with '.', which
//     are ignored. For each: GetInfo; the answer must have type "DRAPlugin", a name, an
//     endpoint, and among supported_versions one the kubelet knows: the FIRST entry that is
//     "v1.DRAPlugin" or "v1beta1.DRAPlugin" is the version used (other entries, such as
//     "v1alpha1.DRAResourceHealth", are passed over). Then NotifyRegistrationStatus: true, or
//     false with the error, which is also kept (last_rejection()). A GetInfo that fails is
//     refused the same way, without the notification (there is no one to tell).
//   - the plugin's DRA service is dialled at unix:<endpoint>. A later registration of the
//     same driver name replaces the earlier one (the last registered instance is used).
//   - a registration socket removed from the directory deregisters the plugin it registered.
//
// Claims (the kubelet's claim cache):
//   Prepare(pod, claims): claims already prepared on the node are not sent again; the pod is
//     added to their users and their recorded devices returned. The rest are grouped by driver
//     (each claim lists the drivers of its allocation's results) and each driver gets ONE
//     NodePrepareResources call with its claims (namespace, uid, name), in the order given.
//     Per claim the answer is its devices, from every driver (request_names, pool, device,
//     cdi_device_ids, share_id), or the error: the driver's per-claim error, a failed call
//     ("<driver>: NodePrepareResources: <message> (gRPC <CODE>)"), a driver not registered, or
//     an answer that leaves the claim out or names a UID not asked for (then the whole call
//     is refused, as the kubelet ignores such an answer). A claim is recorded as prepared only
//     when every driver of it answered without error.
//   Unprepare(pod): the pod leaves every claim it used; claims no pod uses any more are sent
//     to their drivers, one NodeUnprepareResources call per driver. A claim whose unprepare
//     failed stays recorded (with no users) and is sent again by the next Unprepare call;
//     the errors are returned.
//
// It speaks the protocol through the vendor contract's generated code (draapi/) and reads the
// messages with conversions of its own, never the DRA driver's, which it checks.
//
// Thread safety: every method may be called from any thread. Prepare and Unprepare are
// serialized among themselves; waits are condition variables with deadlines.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"

namespace hami::sim::kubelet {

inline constexpr char kDraPluginType[] = "DRAPlugin";
inline constexpr char kDraV1Service[] = "v1.DRAPlugin";
inline constexpr char kDraV1beta1Service[] = "v1beta1.DRAPlugin";
inline constexpr char kPluginsRegistryDir[] = "/var/lib/kubelet/plugins_registry";

struct DraManagerOptions {
  std::string registry_dir = kPluginsRegistryDir;
  int64_t call_timeout_ms = 45'000;  // each RPC, as the kubelet's
};

// A registered DRA plugin, as the manager recorded it.
struct DraPlugin {
  std::string name;            // the driver's
  std::string endpoint;        // its DRA service's socket
  std::string version;         // kDraV1Service or kDraV1beta1Service
  std::string registration;    // the registration socket's path
  uint64_t registrations = 0;  // of this driver name since Start
};

// A claim as the kubelet sends it, with the drivers of its allocation's results.
struct DraClaim {
  std::string ns, name, uid;
  std::vector<std::string> drivers;  // each once, in the order of the results
};

// One device of a NodePrepareResourceResponse.
struct DraDevice {
  std::string driver;  // which driver answered it
  std::vector<std::string> request_names;
  std::string pool;
  std::string device;
  std::vector<std::string> cdi_device_ids;
  std::optional<std::string> share_id;  // v1 only

  friend bool operator==(const DraDevice&, const DraDevice&) = default;
};

// The answer for one claim: its devices, or an error ("" when none).
struct PreparedClaim {
  std::vector<DraDevice> devices;
  std::string error;
};

class DraManager {
 public:
  explicit DraManager(DraManagerOptions options);
  ~DraManager();  // Stop()
  DraManager(const DraManager&) = delete;
  DraManager& operator=(const DraManager&) = delete;

  // Watches the registry directory (created when missing) and registers the sockets already
  // there. An error names the directory.
  Status Start();
  // Stops watching; registered plugins are forgotten. Idempotent.
  void Stop();

  std::optional<DraPlugin> Plugin(const std::string& driver) const;
  // Refused registrations since Start, and the last one's message ("" when none).
  uint64_t rejected_registrations() const;
  std::string last_rejection() const;
  // True once `driver` is registered (false after `timeout_ms`).
  bool WaitForPlugin(const std::string& driver, int64_t timeout_ms) const;
  // True once `driver` is not registered (false after `timeout_ms`).
  bool WaitForNoPlugin(const std::string& driver, int64_t timeout_ms) const;
  // True once rejected_registrations() >= count (false after `timeout_ms`).
  bool WaitForRejections(uint64_t count, int64_t timeout_ms) const;

  // See the top of this file. The result has one entry per claim given, keyed by claim UID.
  std::map<std::string, PreparedClaim> Prepare(const std::string& pod_uid,
                                               const std::vector<DraClaim>& claims);
  // The errors of the claims whose unprepare failed, keyed by claim UID (empty: all done).
  std::map<std::string, std::string> Unprepare(const std::string& pod_uid);
  // The UIDs of the claims recorded as prepared (whether or not a pod uses them now).
  std::set<std::string> PreparedClaims() const;

 private:
  struct Connection;
  struct Prepared {
    DraClaim claim;
    std::vector<DraDevice> devices;
    std::set<std::string> pods;
  };

  void WatchLoop();
  void Register(const std::string& socket);
  void Deregister(const std::string& socket);
  void Reject(const std::string& message);
  std::shared_ptr<Connection> ConnectionFor(const std::string& driver) const;

  const DraManagerOptions options_;
  UniqueFd inotify_;
  UniqueFd wake_;  // an eventfd that ends the watch loop
  std::thread watcher_;

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;
  std::map<std::string, std::shared_ptr<Connection>> plugins_;  // by driver name
  std::map<std::string, uint64_t> registrations_;               // by driver name
  uint64_t rejected_ = 0;
  std::string last_rejection_;

  mutable std::mutex claims_mu_;              // Prepare and Unprepare, held across their RPCs
  std::map<std::string, Prepared> prepared_;  // by claim UID; guarded by claims_mu_
};

}  // namespace hami::sim::kubelet
