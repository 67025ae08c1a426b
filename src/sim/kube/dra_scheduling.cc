#include "sim/kube/dra_scheduling.h"

#include <algorithm>
#include <set>
#include <utility>

#include "common/quote.h"
#include "kube/objects.h"
#include "kube/quantity.h"
#include "kube/resource.h"
#include "log/log.h"

namespace hami::sim::kube {

using hami::kube::ObjectPtr;
using nlohmann::json;

namespace {

constexpr size_t kMaxReservations = 256;
constexpr int kWriteTries = 5;

Error Unschedulable(std::string why) { return Error(ErrorCode::kInvalidArgument, std::move(why)); }

bool ReservedFor(const json& claim, std::string_view pod_uid) {
  const json* reserved = JsonAt(claim, {"status", "reservedFor"});
  if (reserved == nullptr || !reserved->is_array()) return false;
  for (const json& r : *reserved) {
    if (JsonStringAt(r, {"uid"}) == pod_uid) return true;
  }
  return false;
}

size_t Reservations(const json& claim) {
  const json* reserved = JsonAt(claim, {"status", "reservedFor"});
  return reserved != nullptr && reserved->is_array() ? reserved->size() : 0;
}

bool ControlledBy(const json& object, std::string_view uid) {
  const json* owners = JsonAt(object, {"metadata", "ownerReferences"});
  if (owners == nullptr || !owners->is_array()) return false;
  for (const json& o : *owners) {
    const json* controller = JsonAt(o, {"controller"});
    if (JsonStringAt(o, {"uid"}) == uid && controller != nullptr && controller->is_boolean() &&
        controller->get<bool>()) {
      return true;
    }
  }
  return false;
}

bool Deleting(const json& object) { return JsonAt(object, {"metadata", "deletionTimestamp"}); }

NodeView ViewOf(const json& node) {
  NodeView v;
  v.name = MetaOf(node, "name");
  if (const json* labels = JsonAt(node, {"metadata", "labels"}); labels && labels->is_object()) {
    for (auto it = labels->begin(); it != labels->end(); ++it) {
      if (it->is_string()) v.labels[it.key()] = it->get<std::string>();
    }
  }
  return v;
}

// The node serves `resource` itself (a device plugin): status.allocatable lists it above 0.
bool NodeAllocates(const json& node, const std::string& resource) {
  const json* q = JsonAt(node, {"status", "allocatable", resource});
  if (q == nullptr) return false;
  auto parsed = hami::kube::ParseQuantity(QuantityText(*q), "");
  return parsed.ok() && parsed->Sign() > 0;
}

std::string ExtendedKey(std::string_view pod_uid) { return "extended/" + std::string(pod_uid); }

}  // namespace

DraScheduler::DraScheduler(hami::kube::Client& client, hami::kube::InformerFactory& factory)
    : client_(client),
      slices_(factory.Get(hami::kube::kResourceSlices)),
      classes_(factory.Get(hami::kube::kDeviceClasses)),
      claims_(factory.Get(hami::kube::kResourceClaims)) {
  claims_->AddHandler({
      .on_add = [this](const ObjectPtr& o) { ObserveClaim(o, false); },
      .on_update = [this](const ObjectPtr&, const ObjectPtr& o) { ObserveClaim(o, false); },
      .on_delete = [this](const ObjectPtr& o) { ObserveClaim(o, true); },
  });
}

void DraScheduler::ObserveClaim(const ObjectPtr& claim, bool deleted) {
  if (!deleted && JsonAt(*claim, {"status", "allocation"}) == nullptr) return;
  std::lock_guard lock(mu_);
  in_flight_.erase(MetaOf(*claim, "uid"));
}

std::vector<DraScheduler::ExtendedRequest> DraScheduler::ExtendedRequests(
    const json& pod, const std::vector<ObjectPtr>& device_classes) {
  // resource name -> class: the class created last, then the first name, wins.
  std::map<std::string, std::pair<std::string, std::string>> mapped;  // -> (created, name)
  std::set<std::string> names;
  for (const ObjectPtr& c : device_classes) {
    const std::string name = MetaOf(*c, "name");
    names.insert(name);
    const std::string resource = JsonStringAt(*c, {"spec", "extendedResourceName"});
    if (resource.empty()) continue;
    const std::string created = MetaOf(*c, "creationTimestamp");
    auto [it, fresh] = mapped.try_emplace(resource, created, name);
    if (!fresh &&
        (created > it->second.first || (created == it->second.first && name < it->second.second))) {
      it->second = {created, name};
    }
  }
  auto class_of = [&](const std::string& resource) -> std::string {
    if (auto it = mapped.find(resource); it != mapped.end()) return it->second.second;
    const std::string_view prefix = kImplicitExtendedResourcePrefix;
    if (resource.starts_with(prefix)) {
      std::string name = resource.substr(prefix.size());
      if (names.contains(name)) return name;
    }
    return {};
  };
  std::vector<ExtendedRequest> out;
  size_t i = 0;
  for (const char* list : {"initContainers", "containers"}) {
    const json* containers = JsonAt(pod, {"spec", list});
    if (containers == nullptr || !containers->is_array()) continue;
    for (const json& c : *containers) {
      const json* requests = JsonAt(c, {"resources", "requests"});
      if (requests != nullptr && requests->is_object()) {
        std::vector<std::string> keys;
        for (auto it = requests->begin(); it != requests->end(); ++it) keys.push_back(it.key());
        std::sort(keys.begin(), keys.end());
        for (size_t j = 0; j < keys.size(); ++j) {
          const std::string cls = class_of(keys[j]);
          const std::string q = QuantityText((*requests)[keys[j]]);
          if (cls.empty() || q.empty()) continue;
          auto count = hami::kube::ParseQuantity(q, "");
          if (!count.ok() || count->Value() <= 0) continue;
          out.push_back({JsonStringAt(c, {"name"}), keys[j],
                         "container-" + std::to_string(i) + "-request-" + std::to_string(j), cls,
                         count->Value()});
        }
      }
      ++i;
    }
  }
  std::sort(out.begin(), out.end(), [](const ExtendedRequest& a, const ExtendedRequest& b) {
    return a.request < b.request;
  });
  return out;
}

Result<DraScheduler::Attempt> DraScheduler::PreFilter(const json& pod) {
  Attempt a;
  a.pod_name = MetaOf(pod, "name");
  a.pod_namespace = MetaOf(pod, "namespace");
  a.pod_uid = MetaOf(pod, "uid");
  a.pod_key = a.pod_namespace + "/" + a.pod_name;
  const std::vector<ObjectPtr> device_classes = classes_->store().List();
  a.extended = ExtendedRequests(pod, device_classes);
  const json* pod_claims = JsonAt(pod, {"spec", "resourceClaims"});
  const bool has_claims = pod_claims != nullptr && pod_claims->is_array() && !pod_claims->empty();
  if (!has_claims && a.extended.empty()) return a;
  a.active = true;

  std::map<std::string, std::string> generated;  // pod claim name -> claim name
  if (const json* statuses = JsonAt(pod, {"status", "resourceClaimStatuses"});
      statuses != nullptr && statuses->is_array()) {
    for (const json& s : *statuses)
      generated[JsonStringAt(s, {"name"})] = JsonStringAt(s, {"resourceClaimName"});
  }
  std::set<std::string> seen;
  for (size_t i = 0; has_claims && i < pod_claims->size(); ++i) {
    const json& pc = (*pod_claims)[i];
    const std::string pod_claim = JsonStringAt(pc, {"name"});
    std::string name = JsonStringAt(pc, {"resourceClaimName"});
    const bool from_template = name.empty();
    if (from_template) {
      if (JsonStringAt(pc, {"resourceClaimTemplateName"}).empty()) {
        return Unschedulable("pod claim " + QuoteInput(pod_claim) +
                             " names neither resourceClaimName nor resourceClaimTemplateName");
      }
      auto it = generated.find(pod_claim);
      if (it == generated.end()) {
        return Unschedulable("waiting for the ResourceClaim of pod claim " + QuoteInput(pod_claim) +
                             " to be created");
      }
      if (it->second.empty()) continue;  // no claim needed
      name = it->second;
    }
    if (!seen.insert(name).second) continue;
    ObjectPtr claim = claims_->store().Get(a.pod_namespace, name);
    if (claim == nullptr) return Unschedulable("resourceclaim \"" + name + "\" not found");
    if (from_template && !ControlledBy(*claim, a.pod_uid)) {
      return Unschedulable("ResourceClaim " + a.pod_namespace + "/" + name +
                           " was not created for pod " + a.pod_key + " (pod is not owner)");
    }
    if (Deleting(*claim)) return Unschedulable("resourceclaim \"" + name + "\" is being deleted");
    const bool reserved = ReservedFor(*claim, a.pod_uid);
    if (!reserved && Reservations(*claim) >= kMaxReservations) {
      return Unschedulable("resourceclaim \"" + name + "\" is reserved for " +
                           std::to_string(kMaxReservations) + " pods already");
    }
    if (JsonAt(*claim, {"status", "allocation"}) != nullptr) {
      a.allocated.push_back(claim);
      continue;
    }
    {
      std::lock_guard lock(mu_);
      if (in_flight_.contains(MetaOf(*claim, "uid"))) {
        return Unschedulable("resourceclaim \"" + name + "\" is being allocated for another pod");
      }
    }
    auto parsed = ParseClaimSpec(*claim);
    if (!parsed.ok()) return Unschedulable(parsed.error().message());
    a.pending.push_back(claim);
    a.parsed.push_back(std::move(*parsed));
  }

  // A special claim from an earlier attempt: kept when it is allocated for the pod, else removed
  // so that a new one is made.
  for (const ObjectPtr& claim : claims_->store().List()) {
    if (MetaOf(*claim, "namespace") != a.pod_namespace || !ControlledBy(*claim, a.pod_uid) ||
        JsonStringAt(*claim, {"metadata", "annotations", kExtendedResourceClaimAnnotation}) !=
            "true") {
      continue;
    }
    if (JsonAt(*claim, {"status", "allocation"}) != nullptr && ReservedFor(*claim, a.pod_uid) &&
        !Deleting(*claim)) {
      a.allocated.push_back(claim);
      a.special_claim_name = MetaOf(*claim, "name");
      a.extended.clear();
      continue;
    }
    json stale = *claim;
    std::string name = MetaOf(stale, "name");
    stale["metadata"].erase("finalizers");
    (void)client_.Update(hami::kube::kResourceClaims, stale);
    auto deleted = client_.Delete(hami::kube::kResourceClaims, a.pod_namespace, name);
    HAMI_LOG(kInfo, "event=dra_stale_extended_claim_deleted pod=%s claim=%s ok=%d",
             a.pod_key.c_str(), name.c_str(), int(deleted.ok()));
    return Unschedulable("a stale extended resource claim " + QuoteInput(name) +
                         " of the pod was deleted; retrying");
  }

  // The device classes the requests name must exist, and their selectors compile.
  std::set<std::string> wanted;
  for (const ClaimToAllocate& c : a.parsed) {
    for (const ClaimRequest& r : c.requests) {
      for (const RequestBody& b : r.alternatives) wanted.insert(b.device_class);
    }
  }
  for (const ExtendedRequest& e : a.extended) wanted.insert(e.device_class);
  for (const std::string& name : wanted) {
    ObjectPtr cls = classes_->store().Get(name);
    if (cls == nullptr) {
      return Unschedulable("device class " + QuoteInput(name) + " does not exist");
    }
    auto info = ParseDeviceClass(*cls);
    if (!info.ok()) return Unschedulable(info.error().message());
    a.classes.emplace(name, std::move(*info));
  }
  a.state = InUse();
  return a;
}

AllocatedState DraScheduler::InUse() {
  AllocatedState state;
  std::set<std::string> allocated;
  std::lock_guard lock(mu_);  // held across both reads: see ObserveClaim
  for (const ObjectPtr& claim : claims_->store().List()) {
    const json* allocation = JsonAt(*claim, {"status", "allocation"});
    if (allocation == nullptr) continue;
    state.Add(*allocation);
    allocated.insert(MetaOf(*claim, "uid"));
  }
  for (const auto& [key, allocation] : in_flight_) {
    if (!allocated.contains(key)) state.Add(allocation);
  }
  return state;
}

std::vector<ClaimToAllocate> DraScheduler::ClaimsFor(const Attempt& a, const json& node,
                                                     bool* special) const {
  std::vector<ClaimToAllocate> claims = a.parsed;
  ClaimToAllocate extra;
  extra.key = a.pod_namespace + "/" + a.pod_name + "-extended-resources";
  for (const ExtendedRequest& e : a.extended) {
    if (NodeAllocates(node, e.resource)) continue;  // the device plugin's path
    RequestBody body;
    body.name = e.request;
    body.device_class = e.device_class;
    body.count = e.count;
    extra.requests.push_back({e.request, {std::move(body)}});
  }
  *special = !extra.requests.empty();
  if (*special) claims.push_back(std::move(extra));
  return claims;
}

std::string DraScheduler::Allocate(const Attempt& a, const json& node, const AllocatedState& state,
                                   std::vector<json>* allocations, bool* special) {
  const NodeView view = ViewOf(node);
  for (const ObjectPtr& claim : a.allocated) {
    const json* selector = JsonAt(*claim, {"status", "allocation", "nodeSelector"});
    if (selector != nullptr && !NodeSelectorMatches(*selector, view)) {
      return "resourceclaim " + QuoteInput(MetaOf(*claim, "name")) + " not available on the node";
    }
  }
  std::vector<ClaimToAllocate> claims = ClaimsFor(a, node, special);
  if (claims.empty()) return {};
  const std::vector<ObjectPtr> slices = slices_->store().List();
  const NodeDevices devices = DevicesForNode(slices, view);
  for (const std::string& problem : devices.problems) {
    HAMI_LOG(kWarn, "event=dra_slice_unreadable node=%s error=\"%s\"", view.name.c_str(),
             problem.c_str());
  }
  AllocationOutcome out = AllocateClaims(claims, a.classes, devices, state, view, NewUuid);
  if (!out.ok) return out.reason;
  if (allocations != nullptr) *allocations = std::move(out.allocations);
  return {};
}

std::string DraScheduler::Filter(const Attempt& a, const json& node) {
  if (!a.active) return {};
  bool special = false;
  return Allocate(a, node, a.state, nullptr, &special);
}

std::string DraScheduler::Reserve(Attempt& a, const json& node) {
  if (!a.active) return {};
  std::lock_guard reserve(reserve_mu_);
  const AllocatedState state = InUse();
  std::vector<json> allocations;
  bool special = false;
  std::string why = Allocate(a, node, state, &allocations, &special);
  if (!why.empty()) return why;
  a.reserved = std::move(allocations);
  a.special_needed = special;
  a.special_requests.clear();
  if (special) {
    for (const ExtendedRequest& e : a.extended) {
      if (!NodeAllocates(node, e.resource)) a.special_requests.push_back(e);
    }
  }
  std::lock_guard lock(mu_);
  for (size_t i = 0; i < a.pending.size(); ++i) {
    std::string key = MetaOf(*a.pending[i], "uid");
    in_flight_[key] = a.reserved[i];
    a.in_flight_keys.push_back(std::move(key));
  }
  if (special) {
    std::string key = ExtendedKey(a.pod_uid);
    in_flight_[key] = a.reserved.back();
    a.in_flight_keys.push_back(std::move(key));
  }
  return {};
}

Result<json> DraScheduler::WriteClaim(ObjectPtr claim, const json* allocation, const Attempt& a) {
  json obj = *claim;
  const std::string ns = MetaOf(obj, "namespace");
  const std::string name = MetaOf(obj, "name");
  for (int tries = 0;; ++tries) {
    auto retry = [&](const Error& e) -> Result<bool> {
      if (e.code() != ErrorCode::kConflict || tries + 1 >= kWriteTries) return e;
      auto fresh = client_.Get(hami::kube::kResourceClaims, ns, name);
      if (!fresh.ok()) return std::move(fresh).error();
      obj = std::move(*fresh);
      return true;
    };
    const json* current = JsonAt(obj, {"status", "allocation"});
    if (allocation != nullptr && current != nullptr && *current != *allocation) {
      return Error(ErrorCode::kConflict,
                   "ResourceClaim " + ns + "/" + name + " got allocated elsewhere");
    }
    if (allocation != nullptr) {
      json& finalizers = obj["metadata"]["finalizers"];
      if (!finalizers.is_array()) finalizers = json::array();
      if (std::find(finalizers.begin(), finalizers.end(), kDraFinalizer) == finalizers.end()) {
        finalizers.push_back(kDraFinalizer);
        auto updated = client_.Update(hami::kube::kResourceClaims, obj);
        if (!updated.ok()) {
          HAMI_TRY(retry(updated.error()));
          continue;
        }
        obj = std::move(*updated);
      }
    }
    json& status = obj["status"];
    if (!status.is_object()) status = json::object();
    if (allocation != nullptr) status["allocation"] = *allocation;
    if (!ReservedFor(obj, a.pod_uid)) {
      if (!status["reservedFor"].is_array()) status["reservedFor"] = json::array();
      status["reservedFor"].push_back(
          {{"resource", "pods"}, {"name", a.pod_name}, {"uid", a.pod_uid}});
    }
    auto written = client_.Update(hami::kube::kResourceClaims, obj, "status");
    if (!written.ok()) {
      HAMI_TRY(retry(written.error()));
      continue;
    }
    return std::move(*written);
  }
}

Status DraScheduler::PreBind(Attempt& a, const json& pod, const std::string& node) {
  if (!a.active) return OkStatus();
  for (size_t i = 0; i < a.pending.size(); ++i) {
    HAMI_TRY(WriteClaim(a.pending[i], &a.reserved[i], a));
  }
  for (const ObjectPtr& claim : a.allocated) {
    if (!ReservedFor(*claim, a.pod_uid)) HAMI_TRY(WriteClaim(claim, nullptr, a));
  }
  json mappings = json::array();
  if (a.special_needed) {
    json requests = json::array();
    for (const ExtendedRequest& e : a.special_requests) {
      requests.push_back({{"name", e.request},
                          {"exactly",
                           {{"deviceClassName", e.device_class},
                            {"allocationMode", "ExactCount"},
                            {"count", e.count}}}});
      mappings.push_back({{"containerName", e.container},
                          {"resourceName", e.resource},
                          {"requestName", e.request}});
    }
    json claim = {{"apiVersion", "resource.k8s.io/v1"},
                  {"kind", "ResourceClaim"},
                  {"metadata",
                   {{"generateName", a.pod_name + "-extended-resources-"},
                    {"namespace", a.pod_namespace},
                    {"annotations", {{kExtendedResourceClaimAnnotation, "true"}}},
                    {"finalizers", json::array({kDraFinalizer})},
                    {"ownerReferences", json::array({{{"apiVersion", "v1"},
                                                      {"kind", "Pod"},
                                                      {"name", a.pod_name},
                                                      {"uid", a.pod_uid},
                                                      {"controller", true},
                                                      {"blockOwnerDeletion", true}}})}}},
                  {"spec", {{"devices", {{"requests", std::move(requests)}}}}}};
    auto created = client_.Create(hami::kube::kResourceClaims, a.pod_namespace, claim);
    if (!created.ok()) return std::move(created).error();
    a.special_claim_name = MetaOf(*created, "name");
    {
      std::lock_guard lock(mu_);
      const std::string old_key = ExtendedKey(a.pod_uid);
      const std::string new_key = MetaOf(*created, "uid");
      in_flight_[new_key] = a.reserved.back();
      in_flight_.erase(old_key);
      std::replace(a.in_flight_keys.begin(), a.in_flight_keys.end(), old_key, new_key);
    }
    HAMI_TRY(WriteClaim(std::make_shared<const json>(std::move(*created)), &a.reserved.back(), a));
    HAMI_LOG(kInfo, "event=dra_extended_claim_created pod=%s claim=%s node=%s", a.pod_key.c_str(),
             a.special_claim_name.c_str(), node.c_str());
  }
  if (!a.special_claim_name.empty() &&
      (a.special_needed || JsonAt(pod, {"status", "extendedResourceClaimStatus"}) == nullptr)) {
    if (!a.special_needed) {
      for (const ExtendedRequest& e :
           DraScheduler::ExtendedRequests(pod, classes_->store().List())) {
        mappings.push_back({{"containerName", e.container},
                            {"resourceName", e.resource},
                            {"requestName", e.request}});
      }
    }
    json patch = {{"status",
                   {{"extendedResourceClaimStatus",
                     {{"resourceClaimName", a.special_claim_name},
                      {"requestMappings", std::move(mappings)}}}}}};
    auto patched = client_.Patch(hami::kube::kPods, a.pod_namespace, a.pod_name,
                                 hami::kube::PatchType::kMerge, patch, "status");
    if (!patched.ok()) return std::move(patched).error();
  }
  return OkStatus();
}

void DraScheduler::Unreserve(Attempt& a) {
  {
    std::lock_guard lock(mu_);
    for (const std::string& key : a.in_flight_keys) in_flight_.erase(key);
  }
  a.in_flight_keys.clear();
  if (a.special_needed && !a.special_claim_name.empty()) {
    auto claim = client_.Get(hami::kube::kResourceClaims, a.pod_namespace, a.special_claim_name);
    if (claim.ok()) {
      (*claim)["metadata"].erase("finalizers");
      (void)client_.Update(hami::kube::kResourceClaims, *claim);
    }
    (void)client_.Delete(hami::kube::kResourceClaims, a.pod_namespace, a.special_claim_name);
    a.special_claim_name.clear();
  }
}

}  // namespace hami::sim::kube
