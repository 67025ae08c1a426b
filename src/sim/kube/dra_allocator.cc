#include "sim/kube/dra_allocator.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <random>

#include "common/quote.h"
#include "kube/objects.h"

namespace hami::sim::kube {

using hami::kube::Quantity;
using hami::kube::QuantityFormat;
using nlohmann::json;

namespace {

// Steps of the search before it gives up: backtracking is exponential in the worst case.
constexpr int64_t kMaxSearchSteps = 100000;

const json* Find(const json& parent, std::string_view key) {
  if (!parent.is_object()) return nullptr;
  auto it = parent.find(key);
  return it == parent.end() || it->is_null() ? nullptr : &*it;
}

std::string StringOf(const json& parent, std::string_view key) {
  const json* v = Find(parent, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

Error Bad(std::string what) { return Error(ErrorCode::kInvalidArgument, std::move(what)); }

Result<Quantity> QuantityAt(const json& parent, std::string_view key, const std::string& field) {
  const json* v = Find(parent, key);
  const std::string text = v == nullptr ? std::string() : QuantityText(*v);
  if (text.empty()) return Bad(field + ": not a quantity");
  auto q = hami::kube::ParseQuantity(text, "");
  if (!q.ok()) return Bad(field + ": " + q.error().message());
  return *q;
}

bool LabelRequirement(const json& r, const std::string* value) {
  const std::string op = StringOf(r, "operator");
  std::vector<std::string> values;
  if (const json* vs = Find(r, "values"); vs != nullptr && vs->is_array()) {
    for (const json& v : *vs) {
      if (v.is_string()) values.push_back(v.get<std::string>());
    }
  }
  const bool in =
      value != nullptr && std::find(values.begin(), values.end(), *value) != values.end();
  if (op == "In") return in;
  if (op == "NotIn") return !in;
  if (op == "Exists") return value != nullptr;
  if (op == "DoesNotExist") return value == nullptr;
  if ((op == "Gt" || op == "Lt") && value != nullptr && values.size() == 1) {
    char* end = nullptr;
    const long long have = std::strtoll(value->c_str(), &end, 10);
    if (end == value->c_str() || *end != '\0') return false;
    const long long want = std::strtoll(values[0].c_str(), &end, 10);
    if (end == values[0].c_str() || *end != '\0') return false;
    return op == "Gt" ? have > want : have < want;
  }
  return false;
}

// A milli-unit amount as the API would write it, in `format`.
std::string MilliText(int64_t milli, QuantityFormat format) {
  if (milli % 1000 == 0) return Quantity::FromInt(milli / 1000, format).ToString();
  return Quantity::FromMilli(milli, QuantityFormat::kDecimalSI).ToString();
}

}  // namespace

const json* JsonAt(const json& object, std::initializer_list<std::string_view> path) {
  const json* at = &object;
  for (std::string_view key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end() || it->is_null()) return nullptr;
    at = &*it;
  }
  return at;
}

std::string JsonStringAt(const json& object, std::initializer_list<std::string_view> path) {
  const json* v = JsonAt(object, path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

std::string MetaOf(const json& object, std::string_view field) {
  return std::string(hami::kube::MetadataString(object, field));
}

std::string QuantityText(const json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_integer()) return v.dump();
  return std::string();
}

bool NodeSelectorMatches(const json& selector, const NodeView& node) {
  const json* terms = Find(selector, "nodeSelectorTerms");
  if (terms == nullptr || !terms->is_array()) return false;
  for (const json& term : *terms) {
    const json* exprs = Find(term, "matchExpressions");
    const json* fields = Find(term, "matchFields");
    const size_t n = (exprs != nullptr && exprs->is_array() ? exprs->size() : 0) +
                     (fields != nullptr && fields->is_array() ? fields->size() : 0);
    if (n == 0) continue;
    bool all = true;
    if (exprs != nullptr && exprs->is_array()) {
      for (const json& r : *exprs) {
        auto it = node.labels.find(StringOf(r, "key"));
        all = all && LabelRequirement(r, it == node.labels.end() ? nullptr : &it->second);
      }
    }
    if (fields != nullptr && fields->is_array()) {
      for (const json& r : *fields) {
        const bool known = StringOf(r, "key") == "metadata.name";
        all = all && known && LabelRequirement(r, &node.name);
      }
    }
    if (all) return true;
  }
  return false;
}

std::string CapacityPolicy::Describe() const {
  std::string out;
  if (min.has_value()) {
    out = "validRange min " + min->ToString();
    if (max.has_value()) out += ", max " + max->ToString();
    if (step.has_value()) out += ", step " + step->ToString();
  } else if (!valid_values.empty()) {
    out = "validValues";
    for (size_t i = 0; i < valid_values.size(); ++i) {
      out += (i == 0 ? " " : ", ") + valid_values[i].ToString();
    }
  }
  if (default_value.has_value()) {
    out += (out.empty() ? "default " : ", default ") + default_value->ToString();
  }
  return out;
}

// ---- Slices -------------------------------------------------------------------------------------

namespace {

Result<CandidateDevice> ReadDevice(const std::string& driver, const std::string& pool,
                                   const json& device, const std::string& where) {
  CandidateDevice d;
  d.id = DeviceId{driver, pool, StringOf(device, "name")};
  if (d.id.device.empty()) return Bad(where + ".name: missing");
  d.cel = HAMI_TRY(CelDeviceFromSlice(driver, device, where));
  if (const json* caps = Find(device, "capacity"); caps != nullptr && caps->is_object()) {
    for (auto it = caps->begin(); it != caps->end(); ++it) {
      const std::string at = where + ".capacity[" + QuoteInput(it.key()) + "]";
      DeviceCapacity c;
      c.value = HAMI_TRY(QuantityAt(*it, "value", at + ".value"));
      if (const json* p = Find(*it, "requestPolicy")) {
        CapacityPolicy policy;
        if (Find(*p, "default") != nullptr) {
          policy.default_value = HAMI_TRY(QuantityAt(*p, "default", at + ".requestPolicy.default"));
        }
        if (const json* range = Find(*p, "validRange")) {
          const std::string rf = at + ".requestPolicy.validRange";
          policy.min = HAMI_TRY(QuantityAt(*range, "min", rf + ".min"));
          if (Find(*range, "max") != nullptr) {
            policy.max = HAMI_TRY(QuantityAt(*range, "max", rf + ".max"));
          }
          if (Find(*range, "step") != nullptr) {
            policy.step = HAMI_TRY(QuantityAt(*range, "step", rf + ".step"));
            if (policy.step->Value() <= 0) return Bad(rf + ".step: must be positive");
          }
        } else if (const json* values = Find(*p, "validValues")) {
          if (!values->is_array()) return Bad(at + ".requestPolicy.validValues: not a list");
          for (size_t i = 0; i < values->size(); ++i) {
            auto q = hami::kube::ParseQuantity(QuantityText((*values)[i]), "");
            if (!q.ok()) {
              return Bad(at + ".requestPolicy.validValues[" + std::to_string(i) +
                         "]: " + q.error().message());
            }
            policy.valid_values.push_back(*q);
          }
          std::sort(policy.valid_values.begin(), policy.valid_values.end());
        }
        c.policy = std::move(policy);
      }
      d.capacity[it.key()] = std::move(c);
    }
  }
  if (const json* taints = Find(device, "taints"); taints != nullptr && taints->is_array()) {
    for (const json& t : *taints) {
      d.taints.push_back({StringOf(t, "key"), StringOf(t, "value"), StringOf(t, "effect")});
    }
  }
  return d;
}

}  // namespace

NodeDevices DevicesForNode(std::span<const std::shared_ptr<const json>> slices,
                           const NodeView& node) {
  NodeDevices out;
  struct PoolSlices {
    int64_t generation = -1;
    int64_t expected = 0;
    std::vector<const json*> slices;  // of that generation
  };
  std::map<std::pair<std::string, std::string>, PoolSlices> pools;  // (driver, pool)
  for (const auto& slice : slices) {
    const json* spec = Find(*slice, "spec");
    const json* pool = spec != nullptr ? Find(*spec, "pool") : nullptr;
    const std::string driver = spec != nullptr ? StringOf(*spec, "driver") : "";
    if (pool == nullptr || driver.empty()) continue;  // the API server validates slices
    const json* g = Find(*pool, "generation");
    const json* n = Find(*pool, "resourceSliceCount");
    const int64_t generation = g != nullptr && g->is_number_integer() ? g->get<int64_t>() : 0;
    PoolSlices& p = pools[{driver, StringOf(*pool, "name")}];
    if (generation > p.generation) {
      p.generation = generation;
      p.slices.clear();
      p.expected = n != nullptr && n->is_number_integer() ? n->get<int64_t>() : 1;
    }
    if (generation == p.generation) p.slices.push_back(slice.get());
  }
  for (auto& [key, p] : pools) {
    const auto& [driver, pool_name] = key;
    auto name_of = [](const json* slice) {
      const json* meta = Find(*slice, "metadata");
      return meta != nullptr ? StringOf(*meta, "name") : std::string();
    };
    std::sort(p.slices.begin(), p.slices.end(),
              [&](const json* a, const json* b) { return name_of(a) < name_of(b); });
    std::vector<CandidateDevice> visible;
    for (const json* slice : p.slices) {
      const json& spec = *Find(*slice, "spec");
      const std::string slice_name = name_of(slice);
      const std::string node_name = StringOf(spec, "nodeName");
      const json* selector = Find(spec, "nodeSelector");
      const json* all = Find(spec, "allNodes");
      const json* per_device = Find(spec, "perDeviceNodeSelection");
      const bool whole_slice = (!node_name.empty() && node_name == node.name) ||
                               (all != nullptr && all->is_boolean() && all->get<bool>()) ||
                               (selector != nullptr && NodeSelectorMatches(*selector, node));
      const bool by_device =
          per_device != nullptr && per_device->is_boolean() && per_device->get<bool>();
      if (!whole_slice && !by_device) continue;
      const json* devices = Find(spec, "devices");
      if (devices == nullptr || !devices->is_array()) continue;
      for (size_t i = 0; i < devices->size(); ++i) {
        const json& device = (*devices)[i];
        bool node_local = !node_name.empty();
        json device_selector = selector != nullptr ? *selector : json();
        if (by_device) {
          const std::string dn = StringOf(device, "nodeName");
          const json* ds = Find(device, "nodeSelector");
          const json* da = Find(device, "allNodes");
          if (!dn.empty()) {
            if (dn != node.name) continue;
            node_local = true;
          } else if (ds != nullptr) {
            if (!NodeSelectorMatches(*ds, node)) continue;
            device_selector = *ds;
          } else if (!(da != nullptr && da->is_boolean() && da->get<bool>())) {
            continue;
          }
        }
        auto d =
            ReadDevice(driver, pool_name, device,
                       "ResourceSlice " + slice_name + ": spec.devices[" + std::to_string(i) + "]");
        if (!d.ok()) {
          out.problems.push_back(d.error().message());
          continue;
        }
        d->node_local = node_local;
        d->node_selector = node_local ? json() : device_selector;
        visible.push_back(std::move(*d));
      }
    }
    if (visible.empty()) continue;
    if (int64_t(p.slices.size()) < p.expected) {
      out.incomplete.push_back(driver + "/" + pool_name);
      continue;
    }
    for (CandidateDevice& d : visible) out.devices.push_back(std::move(d));
  }
  return out;
}

// ---- Classes and claims -------------------------------------------------------------------------

namespace {

Result<std::vector<CelProgram>> Selectors(const json& parent, const std::string& field) {
  std::vector<CelProgram> out;
  const json* list = Find(parent, "selectors");
  if (list == nullptr) return out;
  if (!list->is_array()) return Bad(field + ": not a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const std::string at = field + "[" + std::to_string(i) + "]";
    const json* cel = Find((*list)[i], "cel");
    const json* expr = cel != nullptr ? Find(*cel, "expression") : nullptr;
    if (expr == nullptr || !expr->is_string()) return Bad(at + ".cel.expression: missing");
    auto p = CelProgram::Compile(expr->get_ref<const std::string&>());
    if (!p.ok()) return Bad(at + ": " + p.error().message());
    out.push_back(std::move(*p));
  }
  return out;
}

Result<RequestBody> ReadBody(const json& body, std::string name, const std::string& field) {
  RequestBody r;
  r.name = std::move(name);
  r.device_class = StringOf(body, "deviceClassName");
  if (r.device_class.empty()) return Bad(field + ".deviceClassName: missing");
  r.selectors = HAMI_TRY(Selectors(body, field + ".selectors"));
  const std::string mode = StringOf(body, "allocationMode");
  if (mode == "All") {
    r.all = true;
  } else if (!mode.empty() && mode != "ExactCount") {
    return Bad(field + ".allocationMode: " + QuoteInput(mode) + " (ExactCount or All)");
  }
  if (const json* c = Find(body, "count")) {
    if (!c->is_number_integer() || c->get<int64_t>() < 1 || c->get<int64_t>() > 32) {
      return Bad(field + ".count: not an integer from 1 to 32");
    }
    r.count = c->get<int64_t>();
  }
  if (const json* a = Find(body, "adminAccess");
      a != nullptr && a->is_boolean() && a->get<bool>()) {
    return Bad(field + ".adminAccess: not supported by the kube-scheduler stand-in");
  }
  if (const json* ts = Find(body, "tolerations"); ts != nullptr && ts->is_array()) {
    for (const json& t : *ts) {
      Toleration x{StringOf(t, "key"), StringOf(t, "operator"), StringOf(t, "value"),
                   StringOf(t, "effect")};
      if (x.op.empty()) x.op = "Equal";
      r.tolerations.push_back(std::move(x));
    }
  }
  const json* cap = Find(body, "capacity");
  const json* reqs = cap != nullptr ? Find(*cap, "requests") : nullptr;
  if (reqs != nullptr) {
    if (!reqs->is_object()) return Bad(field + ".capacity.requests: not an object");
    for (auto it = reqs->begin(); it != reqs->end(); ++it) {
      r.capacity[it.key()] =
          HAMI_TRY(QuantityAt(*reqs, it.key(), field + ".capacity.requests." + it.key()));
    }
  }
  return r;
}

bool Tolerates(const std::vector<Toleration>& tolerations, const DeviceTaint& taint) {
  for (const Toleration& t : tolerations) {
    if (!t.effect.empty() && t.effect != taint.effect) continue;
    if (t.op == "Exists") {
      if (t.key.empty() || t.key == taint.key) return true;
    } else if (t.key == taint.key && t.value == taint.value) {
      return true;
    }
  }
  return false;
}

}  // namespace

Result<DeviceClassInfo> ParseDeviceClass(const json& object) {
  DeviceClassInfo c;
  c.name = StringOf(object.value("metadata", json::object()), "name");
  const std::string where = "DeviceClass " + c.name + ": ";
  const json* spec = Find(object, "spec");
  if (spec == nullptr) return c;
  auto selectors = Selectors(*spec, "spec.selectors");
  if (!selectors.ok()) return Bad(where + selectors.error().message());
  c.selectors = std::move(*selectors);
  if (const json* config = Find(*spec, "config"); config != nullptr && config->is_array()) {
    c.config = *config;
  }
  c.extended_resource_name = StringOf(*spec, "extendedResourceName");
  return c;
}

Result<ClaimToAllocate> ParseClaimSpec(const json& claim) {
  ClaimToAllocate c;
  const json meta = claim.value("metadata", json::object());
  c.key = StringOf(meta, "namespace") + "/" + StringOf(meta, "name");
  const std::string where = "ResourceClaim " + c.key + ": ";
  const json* spec = Find(claim, "spec");
  const json* devices = spec != nullptr ? Find(*spec, "devices") : nullptr;
  if (devices == nullptr) return c;
  if (const json* cons = Find(*devices, "constraints");
      cons != nullptr && cons->is_array() && !cons->empty()) {
    return Bad(where + "spec.devices.constraints: not supported by the kube-scheduler stand-in");
  }
  if (const json* config = Find(*devices, "config"); config != nullptr && config->is_array()) {
    c.config = *config;
  }
  const json* requests = Find(*devices, "requests");
  if (requests == nullptr) return c;
  if (!requests->is_array()) return Bad(where + "spec.devices.requests: not a list");
  for (size_t i = 0; i < requests->size(); ++i) {
    const json& r = (*requests)[i];
    const std::string field = "spec.devices.requests[" + std::to_string(i) + "]";
    ClaimRequest req;
    req.name = StringOf(r, "name");
    if (req.name.empty()) return Bad(where + field + ".name: missing");
    if (const json* exactly = Find(r, "exactly")) {
      auto body = ReadBody(*exactly, req.name, field + ".exactly");
      if (!body.ok()) return Bad(where + body.error().message());
      req.alternatives.push_back(std::move(*body));
    } else if (const json* first = Find(r, "firstAvailable");
               first != nullptr && first->is_array()) {
      for (size_t j = 0; j < first->size(); ++j) {
        const std::string sub = StringOf((*first)[j], "name");
        auto body = ReadBody((*first)[j], req.name + "/" + sub,
                             field + ".firstAvailable[" + std::to_string(j) + "]");
        if (!body.ok()) return Bad(where + body.error().message());
        req.alternatives.push_back(std::move(*body));
      }
    }
    if (req.alternatives.empty()) {
      return Bad(where + field + ": neither exactly nor firstAvailable");
    }
    c.requests.push_back(std::move(req));
  }
  return c;
}

void AllocatedState::Add(const json& allocation) {
  const json* devices = Find(allocation, "devices");
  const json* results = devices != nullptr ? Find(*devices, "results") : nullptr;
  if (results == nullptr || !results->is_array()) return;
  for (const json& r : *results) {
    if (const json* admin = Find(r, "adminAccess");
        admin != nullptr && admin->is_boolean() && admin->get<bool>()) {
      continue;
    }
    DeviceId id{StringOf(r, "driver"), StringOf(r, "pool"), StringOf(r, "device")};
    if (StringOf(r, "shareID").empty()) {
      exclusive.insert(std::move(id));
      continue;
    }
    auto& sum = consumed_milli[id];
    if (const json* consumed = Find(r, "consumedCapacity");
        consumed != nullptr && consumed->is_object()) {
      for (auto it = consumed->begin(); it != consumed->end(); ++it) {
        if (!it->is_string()) continue;
        auto q = hami::kube::ParseQuantity(it->get_ref<const std::string&>(), "");
        if (q.ok()) sum[it.key()] += q->MilliValue();
      }
    }
  }
}

std::string NewUuid() {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  uint64_t hi = rng(), lo = rng();
  hi = (hi & 0xffffffffffff0fffULL) | 0x0000000000004000ULL;  // version 4
  lo = (lo & 0x3fffffffffffffffULL) | 0x8000000000000000ULL;  // variant 10
  char buf[37];
  std::snprintf(buf, sizeof buf, "%08x-%04x-%04x-%04x-%012llx", unsigned(hi >> 32),
                unsigned((hi >> 16) & 0xffff), unsigned(hi & 0xffff), unsigned(lo >> 48),
                static_cast<unsigned long long>(lo & 0xffffffffffffULL));
  return buf;
}

// ---- The search ---------------------------------------------------------------------------------

namespace {

struct Chosen {
  size_t claim;
  std::string request;  // the result's request name
  const RequestBody* body;
  size_t device;  // index into NodeDevices::devices
  std::string share_id;
  std::map<std::string, int64_t> consumed_milli;  // for shared devices
  std::map<std::string, QuantityFormat> formats;
};

class Search {
 public:
  Search(std::span<const ClaimToAllocate> claims,
         const std::map<std::string, DeviceClassInfo, std::less<>>& classes,
         const NodeDevices& devices, const AllocatedState& state,
         const std::function<std::string()>& new_share_id)
      : claims_(claims),
        classes_(classes),
        devices_(devices.devices),
        incomplete_(devices.incomplete),
        state_(state),
        new_share_id_(new_share_id) {}

  bool Run() { return Request(0, 0); }

  const std::vector<Chosen>& chosen() const { return chosen_; }
  const std::optional<std::string>& fatal() const { return fatal_; }

  // Why the deepest dead end had no candidate: "claim ns/c, request gpu: <device>: <why>; ...".
  std::string Why() const {
    if (why_request_.empty()) return "no devices";
    std::map<std::string, std::vector<std::string>> by_reason;
    for (const auto& [device, reason] : why_) by_reason[reason].push_back(device);
    std::string out = why_request_ + ": ";
    bool first = true;
    for (const auto& [reason, devices] : by_reason) {
      if (!first) out += "; ";
      first = false;
      for (size_t i = 0; i < devices.size(); ++i) out += (i == 0 ? "" : ", ") + devices[i];
      out += ": " + reason;
    }
    if (by_reason.empty()) out += "no device on the node";
    return out;
  }

 private:
  bool Step() {
    if (++steps_ > kMaxSearchSteps) {
      fatal_ = "the search gave up after " + std::to_string(kMaxSearchSteps) + " steps";
      return false;
    }
    return true;
  }

  bool Request(size_t ci, size_t ri) {
    if (ci == claims_.size()) return true;
    const ClaimToAllocate& claim = claims_[ci];
    if (ri == claim.requests.size()) return Request(ci + 1, 0);
    const ClaimRequest& req = claim.requests[ri];
    for (const RequestBody& body : req.alternatives) {
      if (fatal_) return false;
      auto cls = classes_.find(body.device_class);
      if (cls == classes_.end()) {
        fatal_ = "claim " + claim.key + ", request " + body.name + ": device class " +
                 QuoteInput(body.device_class) + " does not exist";
        return false;
      }
      if (body.all) {
        if (AllMode(ci, ri, body, cls->second)) return true;
      } else if (Device(ci, ri, body, cls->second, 0, 0)) {
        return true;
      }
    }
    return false;
  }

  // Device k of an ExactCount request, from candidate `start` on.
  bool Device(size_t ci, size_t ri, const RequestBody& body, const DeviceClassInfo& cls, int64_t k,
              size_t start) {
    if (k == body.count) return Request(ci, ri + 1);
    std::map<std::string, std::string> rejected;
    bool any = false;
    for (size_t pos = start; pos < devices_.size(); ++pos) {
      if (!Step()) return false;
      std::string why;
      auto pick = Try(ci, body, cls, pos, &why);
      if (fatal_) return false;
      if (!pick.has_value()) {
        rejected[devices_[pos].id.device] = why;
        continue;
      }
      any = true;
      chosen_.push_back(std::move(*pick));
      if (Device(ci, ri, body, cls, k + 1, pos + 1)) return true;
      chosen_.pop_back();
      if (fatal_) return false;
    }
    if (!any) NoteDeadEnd(ci, body, std::move(rejected));
    return false;
  }

  bool AllMode(size_t ci, size_t ri, const RequestBody& body, const DeviceClassInfo& cls) {
    if (!incomplete_.empty()) {
      NoteDeadEnd(ci, body, {{incomplete_.front(), "pool is incomplete (allocationMode All)"}});
      return false;
    }
    const size_t mark = chosen_.size();
    std::map<std::string, std::string> rejected;
    for (size_t pos = 0; pos < devices_.size(); ++pos) {
      if (!Step()) return false;
      const CandidateDevice& d = devices_[pos];
      auto match = Matches(body, cls, d);
      if (fatal_) return false;
      if (!match.empty()) continue;  // not a device of this request
      std::string why;
      auto pick = Try(ci, body, cls, pos, &why);
      if (fatal_) return false;
      if (!pick.has_value()) {
        rejected[d.id.device] = why + " (allocationMode All needs every matching device)";
        continue;
      }
      chosen_.push_back(std::move(*pick));
    }
    if (rejected.empty() && chosen_.size() > mark && Request(ci, ri + 1)) return true;
    if (rejected.empty() && chosen_.size() == mark) {
      rejected["(none)"] = "no matching device (allocationMode All)";
    }
    chosen_.resize(mark);
    NoteDeadEnd(ci, body, std::move(rejected));
    return false;
  }

  void NoteDeadEnd(size_t ci, const RequestBody& body, std::map<std::string, std::string> why) {
    // The dead end furthest into the search says most about what is missing.
    if (chosen_.size() < why_depth_) return;
    why_depth_ = chosen_.size();
    why_request_ = "claim " + claims_[ci].key + ", request " + body.name;
    why_ = std::move(why);
  }

  // "" when `d` is a device of the class and the request's selectors; else why not.
  std::string Matches(const RequestBody& body, const DeviceClassInfo& cls,
                      const CandidateDevice& d) {
    for (const CelProgram& p : cls.selectors) {
      auto ok = p.Evaluate(d.cel);
      if (!ok.ok()) {
        fatal_ = "device class " + cls.name + ": " + ok.error().message();
        return "error";
      }
      if (!*ok) return "does not match device class " + cls.name;
    }
    for (const CelProgram& p : body.selectors) {
      auto ok = p.Evaluate(d.cel);
      if (!ok.ok()) {
        fatal_ = "request " + body.name + ": " + ok.error().message();
        return "error";
      }
      if (!*ok) return "does not match the request's selectors";
    }
    return {};
  }

  bool InUse(const DeviceId& id) const {
    if (state_.exclusive.contains(id)) return true;
    for (const Chosen& c : chosen_) {
      if (devices_[c.device].id == id && c.share_id.empty()) return true;
    }
    return false;
  }

  std::optional<Chosen> Try(size_t ci, const RequestBody& body, const DeviceClassInfo& cls,
                            size_t pos, std::string* why) {
    const CandidateDevice& d = devices_[pos];
    if (InUse(d.id)) {
      *why = "already allocated";
      return std::nullopt;
    }
    const bool shared = d.cel.allow_multiple_allocations;
    if (!shared) {
      for (const Chosen& c : chosen_) {
        if (devices_[c.device].id == d.id) {
          *why = "already allocated";
          return std::nullopt;
        }
      }
    }
    if (std::string m = Matches(body, cls, d); !m.empty()) {
      *why = m;
      return std::nullopt;
    }
    for (const DeviceTaint& t : d.taints) {
      if ((t.effect == "NoSchedule" || t.effect == "NoExecute") &&
          !Tolerates(body.tolerations, t)) {
        *why = "has the taint " + t.key + (t.value.empty() ? "" : "=" + t.value) + ":" + t.effect +
               ", not tolerated";
        return std::nullopt;
      }
    }
    for (const auto& [name, q] : body.capacity) {
      if (!d.capacity.contains(name)) {
        *why = "has no capacity " + QuoteInput(name);
        return std::nullopt;
      }
    }
    Chosen c;
    c.claim = ci;
    c.request = body.name;
    c.body = &body;
    c.device = pos;
    for (const auto& [name, cap] : d.capacity) {
      auto requested = body.capacity.find(name);
      if (!shared && requested == body.capacity.end()) continue;
      int64_t ask = 0;
      QuantityFormat format = cap.value.format();
      if (requested != body.capacity.end()) {
        ask = requested->second.MilliValue();
        format = requested->second.format();
      } else if (cap.policy.has_value() && cap.policy->default_value.has_value()) {
        ask = cap.policy->default_value->MilliValue();
        format = cap.policy->default_value->format();
      } else {
        ask = cap.value.MilliValue();
      }
      const std::string asked_text =
          requested != body.capacity.end() ? requested->second.ToString() : MilliText(ask, format);
      if (requested != body.capacity.end() && cap.policy.has_value()) {
        const CapacityPolicy& p = *cap.policy;
        bool violated = false;
        if (p.min.has_value()) {
          if (ask < p.min->MilliValue()) {
            ask = p.min->MilliValue();
            format = p.min->format();
          } else if (p.step.has_value()) {
            // In whole units, as the API's Value() rounds them.
            const int64_t units = (ask + 999) / 1000;
            const int64_t min = p.min->Value(), step = p.step->Value();
            const int64_t added = units - min;
            int64_t n = added / step + (added % step != 0 ? 1 : 0);
            ask = (min + step * n) * 1000;
            format = QuantityFormat::kBinarySI;
          }
          const bool is_default =
              p.default_value.has_value() && ask == p.default_value->MilliValue();
          if (!is_default) {
            if (p.max.has_value() && ask > p.max->MilliValue()) violated = true;
            if (p.step.has_value() &&
                ((ask + 999) / 1000 - p.min->Value()) % p.step->Value() != 0) {
              violated = true;
            }
          }
        } else if (!p.valid_values.empty()) {
          for (const Quantity& v : p.valid_values) {
            if (ask <= v.MilliValue()) {
              ask = v.MilliValue();
              format = v.format();
              break;
            }
          }
          const bool is_default =
              p.default_value.has_value() && ask == p.default_value->MilliValue();
          bool valid = false;
          for (const Quantity& v : p.valid_values) valid = valid || v.MilliValue() == ask;
          violated = !is_default && !valid;
        }
        if (violated) {
          *why = "capacity " + name + ": " + asked_text + " is outside its request policy (" +
                 p.Describe() + ")";
          return std::nullopt;
        }
      }
      int64_t used = 0;
      if (auto agg = state_.consumed_milli.find(d.id); agg != state_.consumed_milli.end()) {
        if (auto it = agg->second.find(name); it != agg->second.end()) used += it->second;
      }
      for (const Chosen& other : chosen_) {
        if (devices_[other.device].id != d.id) continue;
        if (auto it = other.consumed_milli.find(name); it != other.consumed_milli.end()) {
          used += it->second;
        }
      }
      const int64_t value = cap.value.MilliValue();
      if (used > value || ask > value - used) {
        *why = "capacity " + name + ": " + MilliText(ask, format) + " requested, " +
               MilliText(std::max<int64_t>(value - used, 0), cap.value.format()) + " of " +
               cap.value.ToString() + " free";
        return std::nullopt;
      }
      if (shared) {
        c.consumed_milli[name] = ask;
        c.formats[name] = format;
      }
    }
    if (shared) c.share_id = new_share_id_();
    return c;
  }

  std::span<const ClaimToAllocate> claims_;
  const std::map<std::string, DeviceClassInfo, std::less<>>& classes_;
  const std::vector<CandidateDevice>& devices_;
  const std::vector<std::string>& incomplete_;
  const AllocatedState& state_;
  const std::function<std::string()>& new_share_id_;
  std::vector<Chosen> chosen_;
  std::optional<std::string> fatal_;
  int64_t steps_ = 0;
  size_t why_depth_ = 0;
  std::string why_request_;
  std::map<std::string, std::string> why_;
};

}  // namespace

AllocationOutcome AllocateClaims(std::span<const ClaimToAllocate> claims,
                                 const std::map<std::string, DeviceClassInfo, std::less<>>& classes,
                                 const NodeDevices& devices, const AllocatedState& state,
                                 const NodeView& node,
                                 const std::function<std::string()>& new_share_id) {
  AllocationOutcome out;
  Search search(claims, classes, devices, state, new_share_id);
  const bool found = search.Run();
  if (search.fatal().has_value()) {
    out.error = true;
    out.reason = *search.fatal();
    return out;
  }
  if (!found) {
    out.reason = "cannot allocate all claims: " + search.Why();
    return out;
  }
  out.ok = true;
  for (size_t ci = 0; ci < claims.size(); ++ci) {
    json results = json::array();
    std::set<std::string> used_requests;  // base request names chosen, for the configs
    std::set<std::string> used_classes;
    bool node_local = false;
    json selector;
    for (const Chosen& c : search.chosen()) {
      if (c.claim != ci) continue;
      const CandidateDevice& d = devices.devices[c.device];
      json r = {{"request", c.request},
                {"driver", d.id.driver},
                {"pool", d.id.pool},
                {"device", d.id.device}};
      if (!c.body->tolerations.empty()) {
        json ts = json::array();
        for (const Toleration& t : c.body->tolerations) {
          json x = {{"operator", t.op}};
          if (!t.key.empty()) x["key"] = t.key;
          if (!t.value.empty()) x["value"] = t.value;
          if (!t.effect.empty()) x["effect"] = t.effect;
          ts.push_back(std::move(x));
        }
        r["tolerations"] = std::move(ts);
      }
      if (!c.share_id.empty()) {
        r["shareID"] = c.share_id;
        json consumed = json::object();
        for (const auto& [name, milli] : c.consumed_milli) {
          consumed[name] = MilliText(milli, c.formats.at(name));
        }
        r["consumedCapacity"] = std::move(consumed);
      }
      results.push_back(std::move(r));
      used_requests.insert(c.request.substr(0, c.request.find('/')));
      used_requests.insert(c.request);
      used_classes.insert(c.body->device_class);
      node_local = node_local || d.node_local;
      if (!d.node_local && d.node_selector.is_object()) {
        if (selector.is_null()) {
          selector = d.node_selector;
        } else if (selector != d.node_selector) {
          // Merged into one term, as a conjunction of both first terms.
          json& term = selector["nodeSelectorTerms"][0];
          const json& other = d.node_selector["nodeSelectorTerms"][0];
          for (const char* key : {"matchExpressions", "matchFields"}) {
            if (other.contains(key)) {
              for (const json& e : other[key]) term[key].push_back(e);
            }
          }
        }
      }
    }
    json config = json::array();
    for (const std::string& cls : used_classes) {
      for (const json& entry : classes.find(cls)->second.config) {
        json e = entry;
        e["source"] = "FromClass";
        e["requests"] = json::array();
        for (const Chosen& c : search.chosen()) {
          if (c.claim == ci && c.body->device_class == cls) e["requests"].push_back(c.request);
        }
        config.push_back(std::move(e));
      }
    }
    for (const json& entry : claims[ci].config) {
      json e = entry;
      bool applies = true;
      if (const json* reqs = Find(entry, "requests");
          reqs != nullptr && reqs->is_array() && !reqs->empty()) {
        applies = false;
        for (const json& r : *reqs) {
          applies = applies || (r.is_string() && used_requests.contains(r.get<std::string>()));
        }
      }
      if (!applies) continue;
      e["source"] = "FromClaim";
      config.push_back(std::move(e));
    }
    json allocation = {{"devices", {{"results", std::move(results)}}}};
    if (!config.empty()) allocation["devices"]["config"] = std::move(config);
    if (node_local) {
      allocation["nodeSelector"] = {
          {"nodeSelectorTerms",
           json::array(
               {{{"matchFields", json::array({{{"key", "metadata.name"},
                                               {"operator", "In"},
                                               {"values", json::array({node.name})}}})}}})}};
    } else if (!selector.is_null()) {
      allocation["nodeSelector"] = std::move(selector);
    }
    out.allocations.push_back(std::move(allocation));
  }
  return out;
}

}  // namespace hami::sim::kube
