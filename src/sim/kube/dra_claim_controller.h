// The duties of kube-controller-manager's resource-claim controller that the simulated cluster
// has nobody else to do (research/dra.md §2.4), run beside the kube-scheduler stand-in:
//
//   - for a pod of one of `scheduler_names` whose spec.resourceClaims[] names a
//     resourceClaimTemplateName and whose status.resourceClaimStatuses has no entry for it:
//     the claim is created from the template (generateName <pod>-<podClaimName>- with the base
//     cut to 57 characters; the template's spec.metadata labels and annotations; annotation
//     resource.kubernetes.io/pod-claim-name: <podClaimName>; the pod as controller owner;
//     spec = the template's spec.spec) and status.resourceClaimStatuses gets {name,
//     resourceClaimName} (merge patch of pods/status). A claim made earlier for the same pod
//     claim (found by owner and annotation) is used instead of making another;
//   - for every ResourceClaim: a reservedFor entry whose pod is gone (or has another UID), or
//     has Succeeded or Failed, is dropped; a claim left with no reservation loses
//     status.allocation (one update of /status) and then the finalizer
//     resource.kubernetes.io/delete-protection; a claim generated for a pod (pod-claim-name or
//     extended-resource-claim annotation, the pod as controller owner) whose pod is gone or
//     done is deleted.
// Each object is reconciled from the informers' copies on one worker thread; a failure (a
// missing template, a conflict) is logged and retried after a backoff doubling from 100 ms to
// 5 s. The informers are the factory's, shared with the stand-in.
//
// Thread safety: Start and Stop from one thread; stats() from any.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "common/result.h"
#include "kube/client.h"
#include "kube/informer.h"

namespace hami::sim::kube {

class ResourceClaimController {
 public:
  struct Stats {
    uint64_t claims_created = 0;
    uint64_t claims_deleted = 0;
    uint64_t reservations_dropped = 0;
    uint64_t deallocations = 0;
    uint64_t failures = 0;
  };

  // `client` and `factory` must outlive the controller. Nothing runs before Start().
  ResourceClaimController(hami::kube::Client& client, hami::kube::InformerFactory& factory,
                          std::vector<std::string> scheduler_names);
  ~ResourceClaimController();  // Stop()
  ResourceClaimController(const ResourceClaimController&) = delete;
  ResourceClaimController& operator=(const ResourceClaimController&) = delete;

  // Starts the worker; it waits for the informers' first lists (the factory starts them).
  void Start();
  void Stop();
  Stats stats() const;

 private:
  using SteadyTime = std::chrono::steady_clock::time_point;
  void Enqueue(const std::string& key, SteadyTime when);
  void EnqueueClaimsOf(const std::string& ns, const std::string& pod_uid);
  void Worker(std::stop_token stop);
  Status Reconcile(const std::string& key);
  Status ReconcilePod(const std::string& ns, const std::string& name);
  Status ReconcileClaim(const std::string& ns, const std::string& name);
  // Whether the pod ns/name with `uid` exists and has not finished: the informer's view, and
  // the API server's when the informer says no.
  bool PodAlive(const std::string& ns, const std::string& name, const std::string& uid) const;

  hami::kube::Client& client_;
  std::vector<std::string> names_;
  std::shared_ptr<hami::kube::Informer> pods_;
  std::shared_ptr<hami::kube::Informer> claims_;

  mutable std::mutex mu_;  // guards what follows
  std::condition_variable_any cv_;
  std::map<std::string, SteadyTime> queued_;    // key -> not before
  std::map<std::string, int> failures_;         // key -> consecutive failures
  std::map<std::string, std::string> created_;  // "<pod uid>/<pod claim>" -> claim name
  Stats stats_;
  std::jthread worker_;
  bool started_ = false;
};

}  // namespace hami::sim::kube
