// Resizing a running pod's GPU share: the request a user writes and the decision the control
// plane records, both pod annotations (docs/configuration.md, "Resizing a running pod").
//
//   hami.io/resize         written by the user (kubectl annotate):
//                          CONTAINER:gpumem=MiB,gpucores=PERCENT   (either key, or both)
//   hami.io/resize-status  written by hami-scheduler, then by the node's device plugin:
//                          {"request":"<the request it is about>","phase":"accepted",
//                           "reason":"...","previous":"<hami.io/vgpu-devices-allocated before>"}
//
// The phases: `refused` (the scheduler or the node said no; the running share is untouched),
// `accepted` (the scheduler stored the new share in hami.io/vgpu-devices-allocated in the same
// write, and kept the old one in `previous`, which still counts until the node answers), and
// `applied` (the node wrote the container's limits file and region). A request is handled once:
// the status names the request text it answers.
//
// Pure functions; thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "kube/annotations.h"

namespace hami::kube {

inline constexpr std::string_view kResizeAnnotation = "hami.io/resize";
inline constexpr std::string_view kResizeStatusAnnotation = "hami.io/resize-status";

struct ResizeRequest {
  std::string container;
  std::optional<int32_t> mem_mib;  // new gpumem per GPU of the container (MiB, >= 1)
  std::optional<int32_t> cores;    // new gpucores per GPU (percent, 0..100)
};

// Rejected, naming the annotation and what is wrong: no ':' or an empty container name, no
// key, an unknown or repeated key, a value that is not a plain decimal integer (no unit: gpumem
// is MiB as nvidia.com/gpumem is), gpumem 0 (which would be no limit) or past 2^31-1, gpucores
// past 100, spaces or control characters.
Result<ResizeRequest> DecodeResizeRequest(std::string_view value);
std::string EncodeResizeRequest(const ResizeRequest& request);

enum class ResizePhase { kAccepted, kApplied, kRefused };
std::string_view ResizePhaseName(ResizePhase phase);

struct ResizeStatus {
  std::string request;  // the hami.io/resize value this answers
  ResizePhase phase = ResizePhase::kRefused;
  std::string reason;    // refused: why; accepted, applied: what changed
  std::string previous;  // accepted: hami.io/vgpu-devices-allocated before the change
};

std::string EncodeResizeStatus(const ResizeStatus& status);
// Rejected, naming the annotation: not a JSON object, a missing or non-string member, an
// unknown phase.
Result<ResizeStatus> DecodeResizeStatus(std::string_view value);

// What a pod holds while a resize is accepted but not yet applied on the node: per container
// and device of `now`, the larger memory and cores of `now` and `previous` (the node may still
// refuse and restore `previous`). `now` when the two do not have the same containers and GPUs.
PodDevices LargerOfEach(const PodDevices& now, const PodDevices& previous);

}  // namespace hami::kube
