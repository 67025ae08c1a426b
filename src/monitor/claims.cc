#include "monitor/claims.h"

#include <algorithm>
#include <set>
#include <tuple>

namespace hami::monitor {

namespace {

using nlohmann::json;

// The string at `key` of `object`, or "" (absent, or not a string).
std::string Str(const json& object, const char* key) {
  if (!object.is_object()) return "";
  auto it = object.find(key);
  return it != object.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The array at `key` of `object`, or nullptr.
const json* Array(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it != object.end() && it->is_array() ? &*it : nullptr;
}

const json& Field(const json& object, const char* key) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(key);
  return it != object.end() ? *it : kNull;
}

struct PodUse {
  std::string created;  // RFC 3339: sorts as it reads
  std::string name;
  std::vector<ClaimUser> users;
};

}  // namespace

std::vector<ClaimUser> ClaimUsers(const std::vector<std::shared_ptr<const json>>& pods,
                                  const node::ClaimRecord& claim) {
  std::vector<PodUse> uses;
  for (const std::shared_ptr<const json>& p : pods) {
    if (p == nullptr || !p->is_object()) continue;
    const json& meta = Field(*p, "metadata");
    const json& spec = Field(*p, "spec");
    const json& status = Field(*p, "status");
    if (Str(meta, "namespace") != claim.ns) continue;
    const std::string phase = Str(status, "phase");
    if (phase == "Succeeded" || phase == "Failed") continue;

    // The pod-level claim names that resolve to the claim.
    std::set<std::string> pod_claims;
    if (const json* a = Array(spec, "resourceClaims")) {
      for (const json& c : *a) {
        if (Str(c, "resourceClaimName") == claim.name) pod_claims.insert(Str(c, "name"));
      }
    }
    if (const json* a = Array(status, "resourceClaimStatuses")) {
      for (const json& c : *a) {
        if (Str(c, "resourceClaimName") == claim.name) pod_claims.insert(Str(c, "name"));
      }
    }
    pod_claims.erase("");
    std::set<std::string> extended_containers;
    bool extended = false;
    const json& ext = Field(status, "extendedResourceClaimStatus");
    if (Str(ext, "resourceClaimName") == claim.name) {
      extended = true;
      if (const json* m = Array(ext, "requestMappings")) {
        for (const json& r : *m) extended_containers.insert(Str(r, "containerName"));
      }
    }
    if (pod_claims.empty() && !extended) continue;

    PodUse use{Str(meta, "creationTimestamp"), Str(meta, "name"), {}};
    const std::string uid = Str(meta, "uid");
    for (const char* list : {"initContainers", "containers"}) {
      const json* containers = Array(spec, list);
      if (containers == nullptr) continue;
      for (const json& c : *containers) {
        const std::string name = Str(c, "name");
        if (name.empty()) continue;
        bool uses_it = extended_containers.contains(name);
        if (const json* refs = Array(Field(c, "resources"), "claims")) {
          for (const json& r : *refs) uses_it = uses_it || pod_claims.contains(Str(r, "name"));
        }
        if (uses_it) use.users.push_back({use.name, uid, name});
      }
    }
    if (use.users.empty()) use.users.push_back({use.name, uid, ""});
    uses.push_back(std::move(use));
  }
  std::stable_sort(uses.begin(), uses.end(), [](const PodUse& a, const PodUse& b) {
    return std::tie(a.created, a.name) < std::tie(b.created, b.name);
  });
  std::vector<ClaimUser> out;
  for (PodUse& u : uses) {
    for (ClaimUser& c : u.users) out.push_back(std::move(c));
  }
  return out;
}

}  // namespace hami::monitor
