// The simulated kubelet's device manager: the Registration server on <dir>/kubelet.sock and a
// DevicePlugin client per registered resource, as the kubelet's devicemanager runs them.
//
// Start():
//   - like the kubelet at its start, removes every socket in `dir` but its own (plugins must
//     notice and serve again; clean_directory_on_start = false keeps them), then serves
//     Registration on <dir>/kubelet.sock (a stale kubelet.sock is replaced).
// Register(request):
//   - a version other than "v1beta1" is refused (UNKNOWN, "requested API version \"v1\" is not
//     supported by kubelet. Supported versions are [\"v1beta1\"]"), as is a resource name
//     that is not a domain-qualified extended resource ("the ResourceName \"gpu\" is
//     invalid"), and an endpoint that is not a plain file name;
//   - otherwise it dials <dir>/<endpoint>, asks GetDevicePluginOptions (a failure refuses the
//     registration), replaces any earlier connection of the same resource, records the
//     plugin and starts its ListAndWatch on a thread of its own. Each response replaces the
//     resource's device list and bumps its generation; WaitForDevices waits on it.
// AllocateContainer(pod, container, resource, n): the device manager's choice and call for one
//   container: devices already given to this container are reused (a retried admission);
//   otherwise n healthy devices (health exactly "Healthy") not held by another container are
//   chosen: those that GetPreferredAllocation answers first (when the plugin offers it; each must
//   be available), then the rest in list order. Then Allocate with that one container's request. A
//   failed Allocate leaves the devices free again. ReleasePod frees a pod's devices.
// Stop(): stops serving, ends every ListAndWatch stream (cancelling it), removes kubelet.sock.
//   Start() again is a kubelet restart: kubelet.sock is recreated and plugins register again.
//
// It speaks the protocol through the vendor contract's generated code (kubeletapi/) and reads
// the messages with conversions of its own (convert.h, types.h), never the device plugin's:
// this is the kubelet that checks the plugin, so a field the plugin misreads must not be
// misread identically here.
//
// Thread safety: every method may be called from any thread. Waits are condition variables
// with deadlines (no polling).
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "common/result.h"
#include "kubeletapi/api.grpc.pb.h"
#include "sim/kubelet/types.h"

namespace hami::sim::kubelet {

struct KubeletOptions {
  std::string dir = kDevicePluginDir;    // where kubelet.sock and the plugins' sockets are
  bool clean_directory_on_start = true;  // remove other sockets at Start, as the kubelet
  int64_t dial_timeout_ms = 10'000;      // connecting to a plugin at Register
  int64_t call_timeout_ms = 30'000;      // each RPC to a plugin
};

// What the kubelet recorded of a registration.
struct RegisteredPlugin {
  std::string resource_name;
  std::string endpoint;  // socket file name in the directory
  std::string version;
  bool pre_start_required = false;
  bool get_preferred_allocation_available = false;  // as GetDevicePluginOptions answered
  uint64_t registrations = 0;                       // of this resource since construction
};

// One container's allocation, as the device manager keeps it.
struct AllocatedContainer {
  std::vector<std::string> device_ids;  // what the kubelet chose and sent in Allocate
  ContainerAllocation response;         // the plugin's answer
};

class Kubelet {
 public:
  explicit Kubelet(KubeletOptions options);
  ~Kubelet();  // Stop()
  Kubelet(const Kubelet&) = delete;
  Kubelet& operator=(const Kubelet&) = delete;

  // Serves Registration; an error names the socket and the reason.
  Status Start();
  // Idempotent. Keeps the recorded plugins, device lists and allocations (a restarted kubelet
  // reads them back from its checkpoint); the streams end, so `connected` turns false.
  void Stop();
  Status Restart();  // Stop() then Start()
  bool running() const;

  std::string socket_path() const;  // <dir>/kubelet.sock
  const std::string& dir() const { return options_.dir; }

  // Registrations: accepted and refused Register calls since construction, all resources.
  uint64_t registrations() const;
  uint64_t rejected_registrations() const;
  // True once registrations() >= count; false after `timeout_ms`.
  bool WaitForRegistrations(uint64_t count, int64_t timeout_ms) const;
  std::optional<RegisteredPlugin> Plugin(const std::string& resource) const;
  // The message of the last refused Register ("" when none).
  std::string last_rejection() const;

  // ListAndWatch: the latest list, the number of responses received for the resource (over
  // every connection), and whether its stream is open now.
  std::vector<Device> Devices(const std::string& resource) const;
  uint64_t DeviceGeneration(const std::string& resource) const;
  bool Connected(const std::string& resource) const;
  // Waits until a response with generation > `after_generation` arrived; returns that list
  // (the latest). kTimeout after `timeout_ms`.
  Result<std::vector<Device>> WaitForDevices(const std::string& resource, uint64_t after_generation,
                                             int64_t timeout_ms) const;
  // Waits until the resource's latest list satisfies `condition` (checked now and at every
  // response; it runs under the kubelet's lock: it must only look). False after `timeout_ms`.
  bool WaitForDevicesMatching(const std::string& resource,
                              const std::function<bool(const std::vector<Device>&)>& condition,
                              int64_t timeout_ms) const;

  // The device manager (see the top of this file).
  Result<AllocatedContainer> AllocateContainer(const std::string& pod_uid,
                                               const std::string& container,
                                               const std::string& resource, int count);
  void ReleasePod(const std::string& pod_uid);
  // The RPCs as the device manager sends them, for tests that choose the devices themselves.
  // Allocate: the device IDs of each container, one ContainerAllocateRequest per element.
  Result<std::vector<ContainerAllocation>> Allocate(
      const std::string& resource, const std::vector<std::vector<std::string>>& containers);
  Result<std::vector<std::vector<std::string>>> GetPreferredAllocation(
      const std::string& resource, const std::vector<PreferredRequest>& containers);

 private:
  class RegistrationService;
  struct Connection;

  grpc::Status Register(const v1beta1::RegisterRequest& request);
  void Reject(const std::string& message);
  void WatchLoop(Connection* connection);
  std::shared_ptr<Connection> ConnectionFor(const std::string& resource) const;
  void Disconnect(std::shared_ptr<Connection> connection);

  const KubeletOptions options_;
  std::unique_ptr<RegistrationService> service_;
  std::mutex allocate_mu_;  // one AllocateContainer at a time (held across its RPCs)

  mutable std::mutex mu_;
  mutable std::condition_variable changed_;  // registrations, device lists, streams
  std::unique_ptr<grpc::Server> server_;     // guarded by mu_ (set by Start/Stop)
  ino_t server_inode_ = 0;                   // of kubelet.sock as Start bound it; guarded by mu_
  bool accepting_ = false;  // between Start and Stop: a Register may add a connection
  uint64_t registrations_ = 0;
  uint64_t rejected_ = 0;
  std::string last_rejection_;
  std::map<std::string, RegisteredPlugin> plugins_;
  std::map<std::string, std::shared_ptr<Connection>> connections_;
  struct DeviceState {
    std::vector<Device> devices;
    uint64_t generation = 0;
  };
  std::map<std::string, DeviceState> devices_;
  // resource → (pod UID, container) → devices.
  std::map<std::string, std::map<std::pair<std::string, std::string>, std::vector<std::string>>>
      allocated_;
};

}  // namespace hami::sim::kubelet
