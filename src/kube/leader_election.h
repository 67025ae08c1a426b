// Leader election on a coordination.k8s.io/v1 Lease, with client-go's semantics and default
// timings.
//
// A candidate reads the Lease every retry period (jittered up to +20%), or at the moment the
// holder's lease expires when that comes sooner. It takes the Lease when there is none (create;
// AlreadyExists means another won: try again later), when the holder is empty (released), or
// when the record has not changed for a whole lease duration. Expiry is
// measured by this process's own monotonic clock from the moment it last saw the record change,
// never by comparing the record's timestamps with the local wall clock (clocks of two machines
// differ). A takeover increments spec.leaseTransitions and sets acquireTime.
//
// The leader renews every retry period by an update carrying the Lease's resourceVersion (a 409
// re-reads the Lease and decides again). When no renewal has succeeded for the renew deadline,
// or the Lease shows another holder, leadership ends AT ONCE: the leader-only work's stop token
// is requested, then OnStoppedLeading runs, even while a renewal request is still in flight. The
// renew deadline being shorter than the lease duration is what keeps two leaders from running
// together: the old one stops before any other candidate can see the Lease expire.
//
// Spec fields written: holderIdentity, leaseDurationSeconds (whole seconds, rounded up),
// acquireTime and renewTime (MicroTime), leaseTransitions; a release removes holderIdentity and
// sets leaseDurationSeconds to 1. The Lease is read with ParseLease and written with LeaseToJson
// (kube/objects.h) on the object as last read, so an update keeps every field the elector does
// not write. A Lease that does not parse counts as a failed read (logged, Stats::failures).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>

#include "common/result.h"
#include "kube/client.h"
#include "kube/objects.h"

namespace hami::kube {

struct LeaderElectionConfig {
  std::string lease_namespace = "kube-system";
  std::string lease_name;  // required
  std::string identity;    // empty: DefaultIdentity()

  // client-go's defaults. Required: lease_duration > renew_deadline > 1.2 * retry_period.
  std::chrono::milliseconds lease_duration{15000};
  std::chrono::milliseconds renew_deadline{10000};
  std::chrono::milliseconds retry_period{2000};

  // When Run's stop token is requested while leading: after the leader work has returned,
  // clear holderIdentity so that another candidate takes over at once.
  bool release_on_cancel = false;

  // Required. Runs on a thread of its own when this candidate starts leading; must return
  // promptly once `stop` is requested (Run waits for it before returning).
  std::function<void(std::stop_token stop)> on_started_leading;
  // Once per leadership, after the leader work's stop was requested; on one of the elector's
  // threads.
  std::function<void()> on_stopped_leading;
  // The holder seen in the Lease changed (this candidate included); on Run's thread, so keep
  // it short.
  std::function<void(const std::string& identity)> on_new_leader;
};

// "<hostname>_<pid>".
std::string DefaultIdentity();

class LeaderElector {
 public:
  struct Stats {
    uint64_t attempts = 0;      // reads or writes of the Lease tried
    uint64_t acquisitions = 0;  // times this candidate became the leader
    uint64_t renewals = 0;      // successful renewals while leading
    uint64_t failures = 0;      // requests that failed (conflicts included), Leases that did
                                // not parse
    uint64_t conflicts = 0;
  };

  // Checks the configuration (errors name the field). `client` must outlive the elector; its
  // requests should be bounded well below the renew deadline (request_timeout, retries), since
  // a request that outlasts it only delays Run's return, not the end of leadership.
  static Result<std::unique_ptr<LeaderElector>> Create(Client& client, LeaderElectionConfig config);
  ~LeaderElector();
  LeaderElector(const LeaderElector&) = delete;
  LeaderElector& operator=(const LeaderElector&) = delete;

  // Campaigns until this candidate leads, then renews until leadership is lost or `stop` is
  // requested; returns once the leader work has returned (and the Lease was released, when
  // configured). Returns at once (within the request in flight) when `stop` is requested while
  // campaigning. May be called again after it returned, not concurrently.
  void Run(std::stop_token stop);

  bool IsLeader() const;
  std::string leader() const;  // the holder last seen in the Lease; "" before the first read
  const std::string& identity() const { return config_.identity; }
  const LeaderElectionConfig& config() const { return config_; }
  Stats stats() const;

 private:
  enum class Attempt { kHolding, kHeldByOther, kFailed };

  // A Lease as the API returned it: the typed view and the whole object (what an update is
  // built on).
  struct Record {
    Lease lease;
    nlohmann::json object;
  };

  LeaderElector(Client& client, LeaderElectionConfig config);
  // ParseLease of `object`; a failure is logged.
  static Result<Record> ParseRecord(nlohmann::json object);
  Attempt TryAcquireOrRenew();
  // Writes `current` with this candidate as the holder (a takeover when it held another).
  Attempt WriteRecord(Record current, bool create);
  Attempt Failed(const Error& error);  // counts it
  void Observe(const Lease& lease);
  void Release();
  void Lose();
  void Watchdog(std::stop_token stop);
  bool WaitFor(std::stop_token& stop, std::chrono::steady_clock::duration d);

  Client& client_;
  LeaderElectionConfig config_;

  // Run's thread only.
  std::optional<Record> held_;     // the Lease as last written by this candidate
  std::optional<Lease> observed_;  // the record last seen (its spec fields are compared)
  std::chrono::steady_clock::time_point observed_at_;  // when it last changed

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable_any cv_;
  bool leading_ = false;
  std::chrono::steady_clock::time_point renewed_at_;  // start of the last successful attempt
  std::string leader_;
  Stats stats_;
  std::jthread work_;
};

}  // namespace hami::kube
