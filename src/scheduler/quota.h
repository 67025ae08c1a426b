// Namespace GPU quotas, as HAMi extends ResourceQuota: `limits.<memory resource>` (MiB of GPU
// memory, summed over every GPU a namespace's pods hold) and `limits.<core resource>` (percent
// of a GPU's compute, summed likewise), with the device config's resource names:
//
//   apiVersion: v1
//   kind: ResourceQuota
//   metadata: {name: gpu-quota, namespace: team-a}
//   spec:
//     hard:
//       limits.nvidia.com/gpumem: "32000"
//       limits.nvidia.com/gpucores: "200"
//
// HAMi's documentation also spells the prefix `limit.`; both are read. Several ResourceQuotas
// in one namespace all apply: the smallest limit wins. Kubernetes itself does not count these
// resources; the scheduler does, from the pods' hami.io/vgpu-devices-allocated, and refuses a
// placement that would pass a limit; the webhook refuses a pod whose fixed request alone
// already would.
//
// Pods the webhook rewrote for DRA (label hami.io/dra: "true") hold no hami.io/vgpu-devices-*:
// their devices are allocated through ResourceClaims. The webhook records what such a pod
// asked for in the annotation hami.io/dra-request, and from its creation until it ends the pod
// takes RequestAmounts of that record (DraRequestAmounts). The record, compact JSON:
//
//   {"containers":[{"cores":30,"count":1,"memory":3000,"name":"main"}],"initContainers":[]}
//
// one entry per container whose GPUs come from the webhook's claim: count (1..1024 GPUs),
// memory (MiB per GPU, 0..2^31-1; 0: the device's default, the whole memory, not known before a
// device is chosen) and cores (percent per GPU, 0..100). A missing list is empty; any other
// key, type or value is refused with an error naming the annotation and the field.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "config/device_config.h"
#include "kube/annotations.h"
#include "kube/objects.h"
#include "scheduler/request.h"

namespace hami::scheduler {

// GPU memory and cores, summed over devices.
struct QuotaAmounts {
  int64_t memory_mib = 0;
  int64_t cores = 0;

  QuotaAmounts& operator+=(const QuotaAmounts& o) {
    memory_mib += o.memory_mib;
    cores += o.cores;
    return *this;
  }
  QuotaAmounts& operator-=(const QuotaAmounts& o) {
    memory_mib -= o.memory_mib;
    cores -= o.cores;
    return *this;
  }
  friend bool operator==(const QuotaAmounts&, const QuotaAmounts&) = default;
};

struct NamespaceQuota {
  std::optional<int64_t> memory_mib;  // absent: no limit
  std::optional<int64_t> cores;
  std::string memory_source;  // the ResourceQuota whose memory limit applies, for messages
  std::string cores_source;

  bool limited() const { return memory_mib.has_value() || cores.has_value(); }
};

// The limits of a namespace from its ResourceQuotas' spec.hard. A negative limit counts as 0.
// The quantities were parsed already (kube::ParseResourceQuota); a fraction rounds up.
NamespaceQuota QuotaFromResourceQuotas(const std::vector<kube::ResourceQuota>& quotas,
                                       const config::DeviceConfig& config);

// What a decided allocation (hami.io/vgpu-devices-allocated) takes from its namespace's quota:
// per device, the larger of an init container's share and the sum of the containers' shares
// (init containers run before the containers, one at a time), summed over devices.
// `init_containers` says how many leading entries of `devices` are init containers.
QuotaAmounts AllocationAmounts(const kube::PodDevices& devices, size_t init_containers);

// What a request takes before any device is chosen: its fixed memory (count x MiB) and cores,
// with the init-container peak as above. A percentage of memory counts 0 here (it depends on
// the device); AllocationAmounts counts it once the devices are known.
QuotaAmounts RequestAmounts(const PodRequest& request);

// The label and the annotation of a pod the webhook rewrote for DRA.
inline constexpr std::string_view kDraLabel = "hami.io/dra";
inline constexpr std::string_view kDraRequestAnnotation = "hami.io/dra-request";

// The record of `request` (its containers that request GPUs; the others are left out), as the
// annotation holds it.
std::string EncodeDraRequest(const PodRequest& request);
// The record read back; kInvalidArgument naming the annotation and the field otherwise
// ("hami.io/dra-request: containers[0].cores: 150 is out of range 0..100").
Result<PodRequest> DecodeDraRequest(std::string_view text);
// What a pod takes from its namespace's quota by its DRA record: nullopt when it is not
// labelled hami.io/dra "true", carries no record, or has ended; an error when the record does
// not decode.
Result<std::optional<QuotaAmounts>> DraRequestAmounts(const kube::Pod& pod);

// Whether `request` fits the namespace's quota given what its pods use already. nullopt when
// it fits; else the reason, naming the namespace, the limit and its ResourceQuota:
//   namespace team-a: limits.nvidia.com/gpumem of ResourceQuota gpu-quota is 32000 MiB, 30000
//   are used and the pod needs 4000
std::optional<std::string> QuotaExceeded(std::string_view ns, const NamespaceQuota& quota,
                                         const QuotaAmounts& used, const QuotaAmounts& request,
                                         const config::DeviceConfig& config);

}  // namespace hami::scheduler
