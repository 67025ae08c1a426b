// The simulated API server's audit log: one entry per resource request, with the attributes
// RBAC authorizes on (verb, API group, resource, subresource, namespace, name) and the client's
// name from its User-Agent, so a test can check what a component asked for against the RBAC
// rules it is deployed with. Served at GET /sim/audit (and cleared by DELETE /sim/audit).
//
// Thread safety: AuditLog is safe from any thread; the helpers are pure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace hami::sim::kube {

struct AuditEntry {
  std::string user_agent;   // AuditUserAgent of the User-Agent header
  std::string verb;         // get list watch create update patch delete deletecollection
  std::string group;        // "" for the core group
  std::string resource;     // "pods"
  std::string subresource;  // "", "status", "binding", "log"
  std::string ns;           // "" for cluster-scoped resources and all-namespace requests
  std::string name;         // "" for a collection
};

// The RBAC verb of a request (kube-apiserver's RequestInfo): GET or HEAD of one object "get",
// of a collection "list", with ?watch "watch"; POST "create"; PUT "update"; PATCH "patch";
// DELETE of one object "delete", of a collection "deletecollection". Any other method: its
// name in lower case.
std::string AuditVerb(std::string_view method, bool collection, bool watch);

// The client's name: the User-Agent up to its first '/' or ' ' ("kubectl/v1.32.4 (linux)"
// reads "kubectl"; "hami-scheduler" stays whole); "" when there is none.
std::string AuditUserAgent(std::string_view user_agent_header);

class AuditLog {
 public:
  // Keeps the last `capacity` entries (at least 1); older ones are dropped and counted.
  explicit AuditLog(size_t capacity = 100000);

  void Record(AuditEntry entry);
  // {"requests":[{"user_agent":...,"verb":...,"group":...,"resource":...,"subresource":...,
  // "namespace":...,"name":...},...],"dropped":N}, oldest first; with `user_agent` not empty,
  // only that client's entries (dropped still counts them all).
  nlohmann::json ToJson(std::string_view user_agent = {}) const;
  // Forgets every entry and resets the dropped count.
  void Clear();
  size_t size() const;
  uint64_t dropped() const;

 private:
  const size_t capacity_;
  mutable std::mutex mu_;
  std::deque<AuditEntry> entries_;
  uint64_t dropped_ = 0;
};

}  // namespace hami::sim::kube
