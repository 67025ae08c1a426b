#include "dra/slices.h"

#include <cctype>
#include <utility>

#include "dra/driver.h"
#include "kube/quantity.h"

namespace hami::dra {
namespace {

using nlohmann::json;

constexpr uint64_t kMiB = 1 << 20;

std::string BinaryQuantity(uint64_t bytes) {
  return kube::Quantity::FromInt(static_cast<int64_t>(bytes), kube::QuantityFormat::kBinarySI)
      .ToString();
}

// NVML's "00000000:3B:00.0" as the API's DBDF, "0000:3b:00.0"; "" when it is not one.
std::string PciBusId(const std::string& nvml) {
  const size_t colon = nvml.find(':');
  if (colon == std::string::npos || colon < 4) return "";
  std::string out = nvml.substr(colon - 4);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (out.size() != 12 || out[4] != ':' || out[7] != ':' || out[10] != '.') return "";
  return out;
}

std::string TaintValue(const std::string& reason) {
  std::string out;
  for (char c : reason) {
    if (out.size() >= 63) break;
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.') {
      out += c;
    } else if (!out.empty() && out.back() != '_') {
      out += '_';
    }
  }
  while (!out.empty() && !std::isalnum(static_cast<unsigned char>(out.back()))) out.pop_back();
  return out;
}

}  // namespace

std::string ArchitectureName(int major, int minor) {
  switch (major) {
    case 6:
      return "Pascal";
    case 7:
      return minor >= 5 ? "Turing" : "Volta";
    case 8:
      return minor == 9 ? "Ada Lovelace" : "Ampere";
    case 9:
      return "Hopper";
    case 10:
    case 12:
      return "Blackwell";
    default:
      return "";
  }
}

std::string SemverOf(const std::string& version) {
  std::vector<std::string> parts(1);
  for (char c : version) {
    if (c == '.') {
      parts.emplace_back();
    } else if (c >= '0' && c <= '9') {
      parts.back() += c;
    } else {
      return "";
    }
  }
  if (parts.size() > 3) return "";
  while (parts.size() < 3) parts.push_back("0");
  std::string out;
  for (std::string& p : parts) {
    if (p.empty() || p.size() > 9) return "";
    const size_t nz = p.find_first_not_of('0');
    p = nz == std::string::npos ? "0" : p.substr(nz);
    out += (out.empty() ? "" : ".") + p;
  }
  return out;
}

Result<json> BuildResourceSlice(const SliceInput& in) {
  if (in.node_name.empty()) return Error(ErrorCode::kInvalidArgument, "ResourceSlice: no node");
  if (in.inventory.devices.size() > kMaxDevicesPerSlice) {
    return Error(ErrorCode::kUnsupported,
                 "ResourceSlice: " + std::to_string(in.inventory.devices.size()) +
                     " GPUs, more than one slice holds (" + std::to_string(kMaxDevicesPerSlice) +
                     ")");
  }
  const std::string driver_version = SemverOf(in.inventory.driver_version);
  json devices = json::array();
  for (const inventory::Device& d : in.inventory.devices) {
    if (d.uuid.empty() || d.index < 0) {
      return Error(ErrorCode::kInvalidArgument,
                   "ResourceSlice: GPU " + std::to_string(d.index) + " has no UUID");
    }
    json attributes = {{"type", {{"string", kDeviceType}}},
                       {"uuid", {{"string", d.uuid}}},
                       {"index", {{"int", d.index}}},
                       {"productName", {{"string", d.name.substr(0, 64)}}},
                       {"healthy", {{"bool", d.healthy}}}};
    if (d.cc_major > 0) {
      attributes["cudaComputeCapability"] = {
          {"version", std::to_string(d.cc_major) + "." + std::to_string(d.cc_minor) + ".0"}};
      if (std::string arch = ArchitectureName(d.cc_major, d.cc_minor); !arch.empty()) {
        attributes["architecture"] = {{"string", arch}};
      }
    }
    if (!driver_version.empty()) attributes["driverVersion"] = {{"version", driver_version}};
    if (d.numa_node >= 0) attributes["numaNode"] = {{"int", d.numa_node}};
    if (std::string bus = PciBusId(d.pci_bus_id); !bus.empty()) {
      attributes["resource.kubernetes.io/pciBusID"] = {{"string", bus}};
    }
    const uint64_t whole_mib = d.memory_bytes / kMiB * kMiB;
    if (whole_mib < kMiB) {
      return Error(ErrorCode::kInvalidArgument,
                   "ResourceSlice: GPU " + d.uuid + " reports less than 1 MiB of memory");
    }
    json capacity = {
        {"memory",
         {{"value", BinaryQuantity(d.memory_bytes)},
          {"requestPolicy",
           {{"default", BinaryQuantity(whole_mib)},
            {"validRange",
             {{"min", "1Mi"}, {"max", BinaryQuantity(whole_mib)}, {"step", "1Mi"}}}}}}},
        {"cores",
         {{"value", "100"},
          {"requestPolicy",
           {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}}}};
    json device = {{"name", DeviceName(d.index)},
                   {"allowMultipleAllocations", true},
                   {"attributes", std::move(attributes)},
                   {"capacity", std::move(capacity)}};
    if (!d.healthy) {
      json taint = {{"key", kUnhealthyTaintKey}, {"effect", "NoSchedule"}};
      if (std::string v = TaintValue(d.health_reason); !v.empty()) taint["value"] = v;
      device["taints"] = json::array({std::move(taint)});
    }
    devices.push_back(std::move(device));
  }
  json meta = {{"name", in.node_name + "-hami-core-gpu"}};
  if (!in.node_uid.empty()) {
    meta["ownerReferences"] = json::array(
        {{{"apiVersion", "v1"}, {"kind", "Node"}, {"name", in.node_name}, {"uid", in.node_uid}}});
  }
  return json{
      {"apiVersion", "resource.k8s.io/v1"},
      {"kind", "ResourceSlice"},
      {"metadata", std::move(meta)},
      {"spec",
       {{"driver", in.driver},
        {"nodeName", in.node_name},
        {"pool",
         {{"name", in.node_name}, {"generation", in.generation}, {"resourceSliceCount", 1}}},
        {"devices", std::move(devices)}}}};
}

}  // namespace hami::dra
