// Annotations the scheduler reads besides seed 004's (those are kube/annotations.h's):
//
//   hami.io/node-nvidia-score  (Node)  GPU pair scores for the topology-aware policy, written by
//       the device plugin: a JSON array of {"uuid": "GPU-a", "score": {"GPU-b": 100, ...}},
//       higher meaning better connected (NVLink counts more than PCIe). Members in any order,
//       unknown members ignored; a score is an integer in [0, 2^31-1].
//   hami.io/device-cordon      (Node)  GPUs taken out of new placements without touching the
//       pods already on them: a comma-separated list of device UUIDs or indices ("GPU-a,3").
//   nvidia.com/numa-bind       (Pod)   "true": each container's GPUs must share one NUMA node.
//
// Decoders reject what they cannot understand with a message naming the annotation and the
// part; the caller logs it and treats the annotation as absent, so a malformed value never
// takes a node's GPUs away.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "common/result.h"

namespace hami::scheduler {

inline constexpr std::string_view kNodeScoreAnnotation = "hami.io/node-nvidia-score";
inline constexpr std::string_view kDeviceCordonAnnotation = "hami.io/device-cordon";
inline constexpr std::string_view kNumaBindAnnotation = "nvidia.com/numa-bind";

// uuid -> (other uuid -> score).
using PairScores = std::unordered_map<std::string, std::unordered_map<std::string, int32_t>>;

Result<PairScores> DecodePairScores(std::string_view value);

// The entries of a cordon list, trimmed, empty entries dropped. Never fails: any text is a list
// of names (one that matches no device matches nothing).
std::vector<std::string> DecodeCordonList(std::string_view value);

}  // namespace hami::scheduler
