// GPU health from NVML events, as NVIDIA's k8s-device-plugin watches it: a thread registers
// Xid critical errors and single- and double-bit ECC errors (those a device supports) on every
// watched GPU and waits for events; a critical Xid marks that GPU unhealthy for the rest of
// the process's life (there is no recovery, as in NVIDIA's plugin). Other event types are
// logged and ignored, and so are the Xids an application causes (XidPolicy).
//
// Devices: every GPU NVML lists, or those named in HealthOptions.uuids. A GPU whose event
// registration NVML does not support (or a library without the event API) is not watched and
// stays healthy (logged); one whose registration fails otherwise is unhealthy from the start
// ("nvmlDeviceRegisterEvents: <NVML error>"), as is every GPU when a wait fails
// ("nvmlEventSetWait_v2: <NVML error>").
//
// NVML is opened through the one loader (nvml_library.h), initialized by Start, and shut down
// and closed by Stop.
//
// Thread safety: Start, Stop and the destructor from one thread; health() and unwatched()
// from any. The callback runs on the watcher's thread, never under its lock (it may call
// health()); it must not call Stop.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "inventory/inventory.h"
#include "nvml/nvml.h"

namespace hami::inventory {

// Which Xids leave a GPU healthy: the application errors NVIDIA's plugin ignores
// (13 graphics engine exception, 31 GPU memory page fault, 43 GPU stopped processing,
// 45 preemptive cleanup, 68 video processor exception, 109 context switch timeout), plus
// those DP_DISABLE_HEALTHCHECKS lists, minus those DP_ENABLE_HEALTHCHECKS lists. Both
// variables are comma-separated Xids; "all" or "xids" means every Xid: disabling all turns
// the watcher off (unless some are enabled), enabling all watches even the application ones.
// A malformed entry is ignored and reported in warnings().
class XidPolicy {
 public:
  XidPolicy() : XidPolicy(nullptr, nullptr) {}
  // `disable` and `enable` are the variables' values (nullptr or "": unset).
  XidPolicy(const char* disable, const char* enable);
  // From DP_DISABLE_HEALTHCHECKS and DP_ENABLE_HEALTHCHECKS of this process.
  static XidPolicy FromEnvironment();

  static const std::vector<uint64_t>& ApplicationXids();  // 13, 31, 43, 45, 68, 109

  bool all_disabled() const { return disable_all_ && enabled_.empty() && !enable_all_; }
  bool Ignores(uint64_t xid) const;
  // For the start-up log: "ignored Xids: 13,31,43,45,68,109" or "health checks disabled".
  std::string Describe() const;
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  bool disable_all_ = false;
  bool enable_all_ = false;
  std::set<uint64_t> disabled_;
  std::set<uint64_t> enabled_;
  std::vector<std::string> warnings_;
};

struct HealthChange {
  std::string uuid;
  bool healthy = true;
  std::string reason;  // "Xid 79", "nvmlDeviceRegisterEvents: Unknown Error"

  friend bool operator==(const HealthChange&, const HealthChange&) = default;
};

struct HealthOptions {
  // dlopen()ed as given (a soname is searched, a path opened as is).
  std::string nvml_library = "libnvidia-ml.so.1";
  // GPUs to watch; empty: every GPU NVML lists. A UUID NVML does not list is ignored.
  std::vector<std::string> uuids;
  XidPolicy xids;
  // Each NVML wait: how long Stop may take to be noticed.
  std::chrono::milliseconds wait_timeout{500};
  // Called on every change of a GPU's health (never twice for the same state), on the
  // watcher's thread. Initial failures are reported first.
  std::function<void(const HealthChange&)> on_change;
};

class HealthWatcher {
 public:
  // Opens and initializes NVML, registers the events and starts the thread. Fails when NVML
  // cannot be opened (kNotFound), lacks nvmlInit_v2 or the device queries (kIncompatible),
  // or nvmlInit_v2 / nvmlDeviceGetCount_v2 fail (kUnavailable). With every Xid disabled
  // (XidPolicy::all_disabled) nothing is opened and every GPU stays healthy.
  static Result<std::unique_ptr<HealthWatcher>> Start(HealthOptions options);
  ~HealthWatcher();  // Stop()
  HealthWatcher(const HealthWatcher&) = delete;
  HealthWatcher& operator=(const HealthWatcher&) = delete;

  // Ends the thread (within about one wait_timeout) and closes NVML. Idempotent.
  void Stop();

  // Every watched GPU (and every unwatched one NVML listed) by UUID: healthy or not.
  HealthMap health() const;
  // UUIDs of the GPUs whose events could not be registered (not supported): never marked.
  std::vector<std::string> unwatched() const;
  // Events the thread has handled (ignored ones included; each fully, callback included).
  uint64_t events_handled() const;
  // Waits until at least `count` events were handled or `timeout` passed; says which.
  bool WaitForEvents(uint64_t count, std::chrono::milliseconds timeout) const;

 private:
  struct Nvml;
  HealthWatcher(HealthOptions options, std::unique_ptr<Nvml> nvml);
  void Run(std::stop_token stop);
  void Handle(const nvmlEventData_t& e, const std::function<void(const HealthChange&)>& report);
  // Marks `uuid` unhealthy; true when it was healthy before.
  bool MarkUnhealthy(const std::string& uuid);

  HealthOptions options_;
  std::unique_ptr<Nvml> nvml_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // events_handled_ grew
  HealthMap health_;                    // guarded by mu_
  uint64_t events_handled_ = 0;         // guarded by mu_
  std::vector<std::string> unwatched_;  // written before the thread starts
  std::vector<HealthChange> initial_;   // reported first by the thread
  std::jthread thread_;
  bool stopped_ = false;
};

}  // namespace hami::inventory
