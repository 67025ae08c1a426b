// The kubelet's half of seed 004's bind flow for many nodes at once, in one process and without
// gRPC, for the scheduler's tests and benchmark: it asks each node's real device-plugin
// Allocator (plugin/allocator.h) what the kubelet's device manager would ask, so that the
// plugin's side of the protocol the scheduler is checked against is the product's code, not a
// copy of it. Not shipped; test infrastructure only.
//
// It watches pods (a kube::Informer over every namespace). A pod bound to a node
// (spec.nodeName) whose hami.io/bind-phase is allocating is admitted on that node, once per pod
// UID, as the kubelet admits a pod:
//   1. On the node's first pod the node's Allocator is made: its GPUs are those the Node's
//      hami.io/node-nvidia-register lists (id, index, health), its configuration
//      PluginConfig's defaults for the node, its hook path <root>/<node>/hook (with the hook
//      files hami-device-plugin installs: vgpu/libvgpu.so, a stand-in, and vgpu/ld.so.preload)
//      and its lock directory <root>/<node>/vgpulock (owned by this process's user), <root> being a
//      temporary directory the driver owns and removes. A node whose inventory cannot be read
//      fails the pod and is read again for its next one.
//   2. For each container that asks for nvidia.com/gpu (limits, else requests), init containers
//      first and then containers (the device manager's order), one Allocate call with one
//      ContainerRequest of that many replica IDs: a free replica "<GPU-UUID>-<i>" (the lowest
//      free i below the GPU's count) of each GPU the container's chunk of
//      hami.io/vgpu-devices-to-allocate assigns, in the chunk's order (what the kubelet asks
//      when it follows GetPreferredAllocation), then, when the container asks for more, free
//      replicas of the node's other GPUs in index order. A replica is free when no live pod
//      holds it; a pod's replicas are freed when it is deleted or has ended (Succeeded,
//      Failed).
//   3. Each answer must be for this pod and container: the directory it mounts at
//      /usr/local/vgpu must be <hook>/vgpu/containers/<pod UID>_<container>.
//   4. Once every such container has its answer, no chunk may be left with devices: a chunk
//      of a container that asks for no nvidia.com/gpu (or of no container at all) would never
//      be allocated by a kubelet, and the pod would wait forever.
// The Allocator does the rest, for real: it finds the pending pod, publishes the limits files,
// patches bind-phase success and releases the node lock.
//
// A pod that passes every step counts as allocated; one that fails at any step counts as a
// failure, its error is kept (failure_messages()) and written to stderr, and it is not tried
// again (a kubelet rejects the pod: UnexpectedAdmissionError). The Allocator's own lines that
// are not a plain successful allocation (warnings, a lock it could not release, a pod it marked
// failed) are kept and written the same way.
//
// Pods of one node are admitted one at a time, in the order their events came (a kubelet admits
// pods one after another, and the Allocator runs one Allocate at a time); `workers` threads
// serve every node.
//
// Thread safety: Start and Stop from one thread; the counters and failure_messages() from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "common/result.h"
#include "common/temp_dir.h"
#include "kube/client.h"
#include "kube/informer.h"
#include "kube/objects.h"
#include "plugin/allocator.h"

namespace hami::plugin {

class KubeletDriver {
 public:
  // `client` must outlive the driver. `workers` threads call the Allocators.
  explicit KubeletDriver(kube::Client& client, int workers = 4);
  ~KubeletDriver();  // Stop()
  KubeletDriver(const KubeletDriver&) = delete;
  KubeletDriver& operator=(const KubeletDriver&) = delete;

  void Start();
  // Returns once no worker runs; an admission under way finishes first.
  void Stop();

  // Pods whose every container got its answer, and pods that failed (see the top).
  uint64_t allocated() const { return allocated_.load(); }
  uint64_t failures() const { return failures_.load(); }
  // The failures' errors and the Allocators' warnings, oldest first (the first 100 kept).
  std::vector<std::string> failure_messages() const;

  // <root>/<node>/hook: where `node`'s Allocator publishes containers' directories and limits
  // files.
  std::string HookPath(std::string_view node) const;

 private:
  struct NodeState {
    std::unique_ptr<Allocator> allocator;  // made on the node's first pod
    std::vector<kube::NodeDevice> gpus;    // from hami.io/node-nvidia-register, index order
    std::set<std::string> held;            // replica IDs live pods hold
    std::deque<kube::ObjectPtr> pending;   // pods waiting for admission
    bool scheduled = false;                // in ready_ or being worked
  };

  void Offer(const kube::ObjectPtr& pod);
  // The pod ended or was deleted: its replicas are free. Called with mu_ held.
  void ReleaseLocked(const std::string& uid);
  void Work(std::stop_token stop);
  // Admits one pod on `node`; the error names the pod and what was wrong.
  Status Admit(const std::string& node, const kube::ObjectPtr& object);
  // The node's Allocator, made on first use. Called only by the worker that works `node`.
  Result<Allocator*> NodeAllocator(const std::string& node);
  // Free replicas for one container, marked held by `uid`.
  Result<std::vector<std::string>> TakeReplicas(const std::string& node, const std::string& uid,
                                                const kube::ContainerDevices& chunk, int64_t count);
  void Note(std::string message);

  kube::Client& client_;
  const int workers_;
  TempDir root_{"hami-kubelet-driver"};
  std::unique_ptr<kube::Informer> pods_;

  mutable std::mutex mu_;
  std::condition_variable_any cv_;
  std::map<std::string, NodeState> nodes_;
  std::deque<std::string> ready_;  // nodes with pending pods
  struct PodEntry {
    std::string node;
    std::vector<std::string> held;  // replica IDs
    bool gone = false;              // ended or deleted: holds nothing, never admitted again
  };
  std::map<std::string, PodEntry> pods_seen_;  // by UID: every pod queued, for the driver's life
  std::vector<std::string> messages_;
  std::vector<std::jthread> threads_;
  std::atomic<uint64_t> allocated_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace hami::plugin
