// A stand-in for the device plugin's side of seed 004's bind flow, for the scheduler's tests and
// benchmark (no kubelet calls Allocate on these machines): for every pod bound to a node with
// hami.io/bind-phase: allocating, it does what the plugin does once Allocate has run — sets
// hami.io/bind-phase: success, empties hami.io/vgpu-devices-to-allocate (";" per container) —
// and releases the node lock the pod holds. Not shipped; test infrastructure only.
//
// Thread safety: Start and Stop from one thread; counters from any.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.h"
#include "kube/informer.h"
#include "kube/node_lock.h"

namespace hami::scheduler {

class PluginStandin {
 public:
  // `client` must outlive the stand-in. `workers` threads write the pods and locks.
  PluginStandin(kube::Client& client, int workers = 4);
  ~PluginStandin();  // Stop()
  PluginStandin(const PluginStandin&) = delete;
  PluginStandin& operator=(const PluginStandin&) = delete;

  void Start();
  void Stop();
  // Pods whose allocation was completed, and failures to write.
  uint64_t allocated() const { return allocated_.load(); }
  uint64_t failures() const { return failures_.load(); }

 private:
  void Offer(const kube::ObjectPtr& pod);
  void Work(std::stop_token stop);

  kube::Client& client_;
  const int workers_;
  kube::NodeLocker locker_;
  std::unique_ptr<kube::Informer> pods_;
  std::mutex mu_;
  std::condition_variable_any cv_;
  std::deque<kube::ObjectPtr> queue_;
  std::vector<std::string> in_queue_;  // keys queued or in work
  std::vector<std::jthread> threads_;
  std::atomic<uint64_t> allocated_{0};
  std::atomic<uint64_t> failures_{0};
};

}  // namespace hami::scheduler
