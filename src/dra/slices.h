// The node's ResourceSlice (resource.k8s.io/v1), as a pure function of its GPUs: what the
// driver publishes so that the scheduler can allocate shares of them (research/dra.md §2.2, §7).
//
//   metadata.name  <node>-hami-core-gpu (one slice per node; the owner reference to the Node
//                  is set when its UID is known)
//   spec.driver    hami-core-gpu.project-hami.io; spec.nodeName and spec.pool.name: the node;
//                  pool.generation as given (the caller bumps it on every change),
//                  resourceSliceCount 1
//   devices[]      one per GPU, "hami-gpu-<index>", allowMultipleAllocations: true;
//     attributes   type "hami-gpu", uuid, index (int), productName, architecture (from the
//                  compute capability), cudaComputeCapability (version "<major>.<minor>.0"),
//                  driverVersion (version; NVML's "535.104.05" becomes "535.104.5"), numaNode
//                  (int, when known), healthy (bool), resource.kubernetes.io/pciBusID (when
//                  known, "0000:3b:00.0")
//     capacity     memory: the GPU's bytes; requestPolicy default = the whole GPU (rounded down
//                  to a MiB), validRange {min 1Mi, max the same, step 1Mi};
//                  cores: 100; requestPolicy default 0, validRange {min 0, max 100, step 1}
//     taints       an unhealthy GPU: {key hami-core-gpu.project-hami.io/unhealthy, value the
//                  reason cut to 63 characters of [A-Za-z0-9_.-], effect NoSchedule}
// The defaults are those of HAMi's device plugin: a request that names no memory gets the whole
// GPU's memory (gpumem-percentage 100), one that names no cores gets 0 cores, which libvgpu
// takes as no core limit and which keeps no other claim off the GPU (HAMi's defaultCores 0).
// HAMi's DRA driver defaults cores to 100, so that a claim asking only for memory takes all of
// a GPU's cores; docs/dra.md says so.
//
// Thread safety: pure.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/result.h"
#include "inventory/inventory.h"

namespace hami::dra {

inline constexpr char kDeviceType[] = "hami-gpu";
inline constexpr char kUnhealthyTaintKey[] = "hami-core-gpu.project-hami.io/unhealthy";
// Devices per slice when any device has a taint (128 without).
inline constexpr size_t kMaxDevicesPerSlice = 64;

struct SliceInput {
  std::string driver;     // kDriverName
  std::string node_name;  // required
  std::string node_uid;   // for the owner reference; empty: none
  int64_t generation = 1;
  inventory::Inventory inventory;
};

// "Hopper" for 9.0, ...; "" when unknown.
std::string ArchitectureName(int cc_major, int cc_minor);
// A semantic version of a dotted driver version ("535.104.05" -> "535.104.5", "550" ->
// "550.0.0"); "" when it has no such form.
std::string SemverOf(const std::string& version);

// Refuses more GPUs than kMaxDevicesPerSlice, a node without a name, a GPU without a UUID.
Result<nlohmann::json> BuildResourceSlice(const SliceInput& input);

}  // namespace hami::dra
