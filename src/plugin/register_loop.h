// The registration loop of seed 004: keeps the Node's hami.io/node-nvidia-register equal to
// the plugin's inventory. Every `period` (30 s), and at once on Kick() (the health watcher
// kicks on every change), it computes the node's devices (devices.h), encodes them
// (kube::EncodeNodeInventory) and, only when the text differs from the last one it wrote
// (health included), merge-patches the annotation onto the Node. After a failed compute or
// patch it tries again after `error_retry` (5 s) instead of a period. The first check after
// Start always writes (nothing written yet).
//
// The patch is a plain merge patch of that one annotation, without a resourceVersion: the
// plugin is the annotation's only writer, and a merge patch leaves every other annotation as
// it is. The handshake annotation (hami.io/node-handshake) is not written: the scheduler
// (scheduler/handshake.h) treats an absent, Reported or Requesting value alike while the
// node's allocatable GPU count is positive, and HAMi's current plugin writes only the
// register annotation.
//
// Thread safety: Start, Stop and the destructor from one thread; Kick, RunOnce (not while
// the loop runs), stats, last_written and WaitFor from any. The devices function runs on the
// loop's thread.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "plugin/node_resources.h"

namespace hami::plugin {

struct RegisterLoopOptions {
  std::string node_name;
  std::chrono::milliseconds period{30000};
  std::chrono::milliseconds error_retry{5000};
  // The node's devices now (e.g. ComputeDevices(inventory, options, watcher.health())
  // .node_devices); an error counts as a failed check.
  std::function<Result<std::vector<kube::NodeDevice>>()> devices;
  // The Node's status resources: published (kOn) or removed (kOff), under these names.
  Advertise advertise = Advertise::kOff;
  NodeResourceNames resource_names;
};

class RegisterLoop {
 public:
  struct Stats {
    uint64_t checks = 0;         // checks completed, whatever their outcome
    uint64_t writes = 0;         // annotation patches the API server accepted
    uint64_t status_writes = 0;  // status patches (GPU memory and cores) it accepted
    uint64_t errors = 0;         // checks that failed (compute or patch)
  };

  // `client` must outlive the loop.
  RegisterLoop(kube::Client& client, RegisterLoopOptions options);
  ~RegisterLoop();  // Stop()
  RegisterLoop(const RegisterLoop&) = delete;
  RegisterLoop& operator=(const RegisterLoop&) = delete;

  // Starts the thread; its first check runs at once.
  void Start();
  // Ends the thread (a check in progress finishes first). Idempotent.
  void Stop();
  // Asks for a check now (the next one, if one is running); cheap, never blocks on I/O.
  void Kick();

  // One check on the calling thread: true when it wrote, false when the annotation and the
  // status resources were already current. Errors name the node and what was patched
  // ("patching node n1's hami.io/node-nvidia-register: ...", "patching node n1's status
  // (nvidia.com/gpumem, nvidia.com/gpucores): ...").
  Result<bool> RunOnce();

  Stats stats() const;
  std::string last_written() const;  // empty until the first write
  // Waits until `done(stats())` holds or `timeout` passed; says which (for tests).
  bool WaitFor(const std::function<bool(const Stats&)>& done,
               std::chrono::milliseconds timeout) const;

 private:
  void Run(std::stop_token stop);

  kube::Client& client_;
  const RegisterLoopOptions options_;
  mutable std::mutex mu_;
  mutable std::condition_variable_any cv_;  // a kick, a stop, a finished check
  bool kicked_ = false;                     // guarded by mu_
  Stats stats_;                             // guarded by mu_
  std::string last_written_;                // guarded by mu_
  nlohmann::json node_;                     // guarded by mu_: the Node as last patched
  std::jthread thread_;
};

}  // namespace hami::plugin
