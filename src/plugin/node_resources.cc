#include "plugin/node_resources.h"

#include "kube/quantity.h"

namespace hami::plugin {

namespace {

using nlohmann::json;

// Whether `have` (a quantity as the Node carries it) is `want`; an unreadable one is not.
bool SameQuantity(const json& have, int64_t want) {
  if (!have.is_string()) return false;
  auto q = kube::ParseQuantity(have.get_ref<const std::string&>(), "");
  return q.ok() && *q == kube::Quantity::FromInt(want);
}

}  // namespace

NodeResourceAmounts AmountsOf(const std::vector<kube::NodeDevice>& devices) {
  NodeResourceAmounts a;
  for (const kube::NodeDevice& d : devices) {
    if (!d.health) continue;
    a.memory_mib += d.devmem_mib;
    a.cores += d.devcore;
  }
  return a;
}

std::optional<json> NodeResourcesPatch(const json& node,
                                       const std::vector<kube::NodeDevice>& devices,
                                       const NodeResourceNames& names, Advertise advertise) {
  const NodeResourceAmounts amounts = AmountsOf(devices);
  const std::pair<const std::string*, int64_t> wanted[] = {{&names.memory, amounts.memory_mib},
                                                           {&names.cores, amounts.cores}};
  json values = json::object();
  for (const auto& [name, amount] : wanted) {
    values[*name] = advertise == Advertise::kOn ? json(std::to_string(amount)) : json();
  }
  const json empty = json::object();
  const json* status = &empty;
  if (auto it = node.find("status"); it != node.end() && it->is_object()) status = &*it;
  bool differs = false;
  for (const char* field : {"capacity", "allocatable"}) {
    const json* have = &empty;
    if (auto it = status->find(field); it != status->end() && it->is_object()) have = &*it;
    for (const auto& [name, amount] : wanted) {
      auto it = have->find(*name);
      const bool present = it != have->end();
      differs = differs ||
                (advertise == Advertise::kOn ? !present || !SameQuantity(*it, amount) : present);
    }
  }
  if (!differs) return std::nullopt;
  return json{{"status", {{"capacity", values}, {"allocatable", values}}}};
}

}  // namespace hami::plugin
