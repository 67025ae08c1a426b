// The CDI spec of one prepared claim (Container Device Interface, research/dra.md §6), pure.
//
// One spec file per claim, <cdi dir>/k8s.hami-core-gpu.project-hami.io-claim_<claimUID>.json,
// kind k8s.hami-core-gpu.project-hami.io/claim:
//   - the spec's own containerEdits carry the claim's share as the device plugin's Allocate
//     would answer a container (plugin/container_state.h): its variables as env "K=V", sorted,
//     and its mounts as bind mounts in order (options ro or rw, nosuid, nodev, bind). A runtime
//     applies a spec's edits once however many of its devices a container gets;
//   - one device per allocated result, named <claimUID>-<device>[-<shareID>], whose edits set
//     HAMI_DRA_DEVICE_<i>=<GPU UUID> (i: the GPU's CUDA ordinal in the claim's share; two
//     results on one GPU are one device of the share).
// cdiVersion 0.5.0: the oldest that accepts a device name starting with a digit (a claim UID
// does), and nothing here needs a newer one.
//
// Thread safety: pure functions.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "plugin/types.h"

namespace hami::dra {

inline constexpr char kCdiVersion[] = "0.5.0";
inline constexpr char kCdiVendor[] = "k8s.hami-core-gpu.project-hami.io";
inline constexpr char kCdiClass[] = "claim";
inline constexpr char kDefaultCdiDir[] = "/var/run/cdi";
inline constexpr char kDeviceEnvPrefix[] = "HAMI_DRA_DEVICE_";

// "k8s.hami-core-gpu.project-hami.io-claim_<uid>.json" (a '/' in the UID becomes '_').
std::string CdiSpecFileName(std::string_view claim_uid);
// "<uid>-<device>" or "<uid>-<device>-<shareID>".
std::string CdiDeviceName(std::string_view claim_uid, std::string_view device,
                          std::string_view share_id);
// "k8s.hami-core-gpu.project-hami.io/claim=<name>".
std::string CdiDeviceId(std::string_view device_name);

struct CdiDevice {
  std::string name;  // CdiDeviceName
  std::string uuid;  // the GPU
  int ordinal = 0;   // its CUDA ordinal in the claim's share
};

// Whether `name` is a valid CDI device name: [A-Za-z0-9_.:-], starting and ending alphanumeric.
bool IsValidCdiDeviceName(std::string_view name);

// The spec, as JSON. `edits`: the claim's share (env and mounts). `devices`: one per result.
nlohmann::json CdiSpec(const plugin::ContainerResponse& edits,
                       const std::vector<CdiDevice>& devices);

}  // namespace hami::dra
