#include "dra/claim.h"

#include <limits>
#include <utility>

#include "common/quote.h"
#include "kube/quantity.h"

namespace hami::dra {
namespace {

using nlohmann::json;

const json* Field(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(name);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string StringField(const json& object, std::string_view name) {
  const json* v = Field(object, name);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

}  // namespace

std::string Describe(const ClaimRef& ref) {
  return "claim " + ref.ns + "/" + ref.name + " (uid " + ref.uid + ")";
}

Result<std::vector<AllocatedDevice>> ParseClaimAllocation(const json& claim, const ClaimRef& ref,
                                                          std::string_view driver) {
  const std::string who = Describe(ref);
  auto fail = [&](const std::string& what) {
    return Error(ErrorCode::kInvalidArgument, who + ": " + what);
  };
  if (!claim.is_object()) return fail("not a JSON object");
  const json* meta = Field(claim, "metadata");
  const std::string uid = meta != nullptr ? StringField(*meta, "uid") : "";
  if (uid != ref.uid) {
    return Error(ErrorCode::kNotFound, who + ": the API server's claim of that name has uid " +
                                           QuoteInput(uid) + ": the kubelet's claim is gone");
  }
  const json* status = Field(claim, "status");
  const json* allocation = status != nullptr ? Field(*status, "allocation") : nullptr;
  if (allocation == nullptr) return fail("status.allocation: missing (the claim is not allocated)");
  const json* devices = Field(*allocation, "devices");
  const json* results = devices != nullptr ? Field(*devices, "results") : nullptr;
  std::vector<AllocatedDevice> out;
  if (results == nullptr) return out;
  if (!results->is_array()) return fail("status.allocation.devices.results: not an array");
  for (size_t i = 0; i < results->size(); ++i) {
    const json& r = (*results)[i];
    const std::string at = "status.allocation.devices.results[" + std::to_string(i) + "]";
    if (!r.is_object()) return fail(at + ": not an object");
    if (StringField(r, "driver") != driver) continue;
    AllocatedDevice d;
    d.request = StringField(r, "request");
    if (auto slash = d.request.find('/'); slash != std::string::npos) d.request.resize(slash);
    d.pool = StringField(r, "pool");
    d.device = StringField(r, "device");
    d.share_id = StringField(r, "shareID");
    if (d.request.empty() || d.pool.empty() || d.device.empty()) {
      return fail(at + ": request, pool and device must be set");
    }
    if (const json* consumed = Field(r, "consumedCapacity")) {
      if (!consumed->is_object()) return fail(at + ".consumedCapacity: not an object");
      for (const auto& [name, value] : consumed->items()) {
        if (name != "memory" && name != "cores") continue;
        const std::string what = at + ".consumedCapacity." + name;
        if (!value.is_string()) return fail(what + ": not a quantity string");
        auto q = kube::ParseQuantity(value.get<std::string>(), what);
        if (!q.ok()) return std::move(q).error().Context(who);
        if (q->Sign() < 0) return fail(what + ": negative");
        if (q->MilliValue() % 1000 != 0) return fail(what + ": not a whole number");
        if (name == "memory") {
          d.memory_bytes = static_cast<uint64_t>(q->Value());
        } else {
          d.cores = q->Value();
        }
      }
    }
    out.push_back(std::move(d));
  }
  return out;
}

Result<json> ApiClaimSource::Get(const ClaimRef& ref) {
  auto claim = client_.Get(kResourceClaims, ref.ns, ref.name);
  if (!claim.ok()) return std::move(claim).error().Context("reading " + Describe(ref));
  return claim;
}

void StaticClaimSource::Put(json claim) {
  std::string key =
      claim["metadata"].value("namespace", "") + "/" + claim["metadata"].value("name", "");
  std::lock_guard lock(mu_);
  claims_[key] = std::move(claim);
}

void StaticClaimSource::Remove(std::string_view ns, std::string_view name) {
  std::lock_guard lock(mu_);
  claims_.erase(std::string(ns) + "/" + std::string(name));
}

Result<json> StaticClaimSource::Get(const ClaimRef& ref) {
  std::lock_guard lock(mu_);
  auto it = claims_.find(ref.ns + "/" + ref.name);
  if (it == claims_.end()) {
    return Error(ErrorCode::kNotFound, "reading " + Describe(ref) + ": not found");
  }
  return it->second;
}

}  // namespace hami::dra
