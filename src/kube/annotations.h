// HAMi's annotations (seed 004), in one place for the device plugin, the scheduler and the
// monitor: the names, and a codec for each value that has a format.
//
// Every Decode is strict about what it cannot understand and tolerant of the forms HAMi has
// written: malformed input is kInvalidArgument with a message that names the annotation and
// the offending part ("hami.io/vgpu-devices-allocated: container 0 device 1 'GPU-x,NVIDIA':
// expected 4 comma-separated fields (uuid,type,memMiB,cores), got 2"). Nothing crashes, and
// nothing malformed decodes to an empty result. Each Encode writes the one canonical form,
// which Decode reads back to an equal value (times truncated to the second); the fuzz targets
// beside this file check that for everything Decode accepts.
//
// Times are UTC. HAMi writes the handshake in the writer's local time without a zone and
// reads it back as UTC, so a HAMi writer outside UTC is off by its offset; we write UTC.
//
// Thread safety: every function is pure and re-entrant.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/time.h"

namespace hami::kube {

// Node annotations.
inline constexpr std::string_view kNodeRegisterAnnotation = "hami.io/node-nvidia-register";
inline constexpr std::string_view kNodeHandshakeAnnotation = "hami.io/node-handshake";
inline constexpr std::string_view kNodeLockAnnotation = "hami.io/mutex.lock";
// Pod annotations written by the scheduler and the device plugin.
inline constexpr std::string_view kDevicesToAllocateAnnotation = "hami.io/vgpu-devices-to-allocate";
inline constexpr std::string_view kDevicesAllocatedAnnotation = "hami.io/vgpu-devices-allocated";
inline constexpr std::string_view kBindPhaseAnnotation = "hami.io/bind-phase";
inline constexpr std::string_view kBindTimeAnnotation = "hami.io/bind-time";
inline constexpr std::string_view kVgpuNodeAnnotation = "hami.io/vgpu-node";
inline constexpr std::string_view kVgpuTimeAnnotation = "hami.io/vgpu-time";
inline constexpr std::string_view kLimitDeliveryAnnotation = "hami.io/limit-delivery";
// Pod annotations a user writes.
inline constexpr std::string_view kUseGpuTypeAnnotation = "nvidia.com/use-gputype";
inline constexpr std::string_view kNoUseGpuTypeAnnotation = "nvidia.com/nouse-gputype";
inline constexpr std::string_view kUseGpuUuidAnnotation = "nvidia.com/use-gpuuuid";
inline constexpr std::string_view kNoUseGpuUuidAnnotation = "nvidia.com/nouse-gpuuuid";
inline constexpr std::string_view kGpuSchedulerPolicyAnnotation = "hami.io/gpu-scheduler-policy";
inline constexpr std::string_view kNodeSchedulerPolicyAnnotation = "hami.io/node-scheduler-policy";
// Extended resources a container requests.
inline constexpr std::string_view kResourceGpu = "nvidia.com/gpu";        // count
inline constexpr std::string_view kResourceGpuMem = "nvidia.com/gpumem";  // MiB
inline constexpr std::string_view kResourceGpuMemPercentage = "nvidia.com/gpumem-percentage";
inline constexpr std::string_view kResourceGpuCores = "nvidia.com/gpucores";     // percent
inline constexpr std::string_view kResourceGpuPriority = "nvidia.com/priority";  // 0 high, 1 low

// ---- Node inventory: hami.io/node-nvidia-register --------------------------------------------
//
// Written (by Encode) as a JSON array, one object per device, members in the order id, index,
// count, devmem, devcore, type, numa, mode, health, each omitted when it holds its zero value:
//   [{"id":"GPU-0055...","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla
//   V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}, ...]
// Decode reads that JSON (members in any order, unknown members ignored, null as absent) and
// HAMi's legacy form, told apart by the first character ('[' or '{' is JSON):
//   {id},{count},{devmem},{devcore},{type},{numa},{health}:    one entry per device
// entries separated by ':' (a trailing ':' after the last is optional, as HAMi writes one);
// health is Go's ParseBool (1 t T TRUE true True, 0 f F FALSE false False). A legacy id or
// type cannot contain ',' or ':' — an entry with more than 7 fields is rejected (a ',' in the
// type is ambiguous), not guessed at. Rejected in both forms: an empty value (a node without
// devices is "[]"), a device without an id, a negative index, count, devmem or devcore, a
// number outside int32, a member of the wrong JSON type, a string with control characters
// or invalid UTF-8.
struct NodeDevice {
  std::string id;  // GPU UUID
  int32_t index = 0;
  int32_t count = 0;       // how many containers may share it (the split count)
  int32_t devmem_mib = 0;  // device memory offered, MiB
  int32_t devcore = 0;     // compute offered, percent of the device (100 = all of it)
  std::string type;        // "NVIDIA-Tesla V100-PCIE-32GB"
  int32_t numa = 0;        // NUMA node
  std::string mode;        // "hami-core", "mig", "mps"
  bool health = false;

  friend bool operator==(const NodeDevice&, const NodeDevice&) = default;
};

// Never fails; a device Decode would reject (an empty id, a negative count) is written as
// it is, and a byte that is not UTF-8 as U+FFFD, so the JSON stays valid.
std::string EncodeNodeInventory(const std::vector<NodeDevice>& devices);
Result<std::vector<NodeDevice>> DecodeNodeInventory(std::string_view value);

// ---- Handshake: hami.io/node-handshake -------------------------------------------------------
//
// `<State>_YYYY-MM-DD HH:MM:SS`, e.g. "Requesting_2024-01-23 04:30:04". Decode also reads
// HAMi's older forms: a ' ' instead of '_' after the state, '.' as the date separator
// ("Requesting_2024.01.23 04:30:04"), and Go's time.String() after "Reported "
// ("Reported 2024-01-23 04:30:04.123456789 +0800 CST m=+12.5": the fraction is read, a
// numeric offset is applied, the zone name and monotonic reading are ignored). Rejected: an
// unknown state, a missing or impossible date or time (month 13, Feb 30, 24:00:00), anything
// else after the time.
enum class HandshakeState { kRequesting, kReported, kDeleted };

struct Handshake {
  HandshakeState state = HandshakeState::kRequesting;
  WallTime time;

  friend bool operator==(const Handshake&, const Handshake&) = default;
};

std::string_view HandshakeStateName(HandshakeState state);  // "Requesting", "Reported", "Deleted"
// The canonical form; the time is truncated to the second.
std::string EncodeHandshake(HandshakeState state, WallTime time);
Result<Handshake> DecodeHandshake(std::string_view value);

// ---- Pod device lists: hami.io/vgpu-devices-to-allocate / hami.io/vgpu-devices-allocated ----
//
// Per container (init containers first, then containers, in pod order), each device as
// `UUID,Type,memMiB,cores:` and the container ended by ';'; a container without devices is
// just ';'. "GPU-0fc3...,NVIDIA,3000,0:;" is one container with one device, ";" one container
// with none, "" no containers at all.
// Decode tolerates what a hand-written value may lack: the ':' after a container's last
// device and the ';' after the last container. Rejected, naming the container and device
// position: an empty device entry ("::"), a device without exactly 4 fields, an empty uuid or
// type, a memory or core count that is not a decimal integer in [0, 2^31-1], a control
// character. `annotation` is the key the value came from (each backend has its own), for
// messages.
struct ContainerDevice {
  std::string uuid;
  std::string type;  // "NVIDIA"
  int32_t mem_mib = 0;
  int32_t cores = 0;  // percent

  friend bool operator==(const ContainerDevice&, const ContainerDevice&) = default;
};
using ContainerDevices = std::vector<ContainerDevice>;
using PodDevices = std::vector<ContainerDevices>;  // one entry per container

// Fails when a uuid or type is empty or holds ',', ':', ';' or a control character, or a
// count is negative: the value could not be read back.
Result<std::string> EncodePodDevices(const PodDevices& pod, std::string_view annotation);
Result<PodDevices> DecodePodDevices(std::string_view value, std::string_view annotation);

// ---- Node lock: hami.io/mutex.lock ------------------------------------------------------------
//
// `<RFC 3339 time>,<namespace>,<pod>`, e.g. "2024-05-20T10:02:05Z,default,gpu-pod" (the time
// the lock was taken, and the pod that holds it). Decode reads any RFC 3339 offset (HAMi
// writes local time: "2024-05-20T18:02:05+08:00") and HAMi's older bare-time form, whose
// holder is unknown (empty namespace and pod). Rejected: a time that does not parse, two
// fields, more than three, an empty namespace or pod, whitespace or control characters in
// them.
struct NodeLock {
  WallTime time;
  std::string ns;  // empty: the holder is unknown (older form)
  std::string pod;

  friend bool operator==(const NodeLock&, const NodeLock&) = default;
};

// Fails when ns or pod is empty (unless both are, which writes the bare time), or holds ','
// or whitespace. The time is truncated to the second.
Result<std::string> EncodeNodeLock(const NodeLock& lock);
Result<NodeLock> DecodeNodeLock(std::string_view value);

// ---- Bind phase, bind time, vgpu time --------------------------------------------------------
//
// hami.io/bind-phase is exactly "allocating", "success" or "failed". hami.io/bind-time and
// hami.io/vgpu-time are Unix seconds in decimal ("1716199325"): digits only, no sign, within
// what WallTime holds (up to the year 2262).
enum class BindPhase { kAllocating, kSuccess, kFailed };

std::string_view EncodeBindPhase(BindPhase phase);
Result<BindPhase> DecodeBindPhase(std::string_view value);

// The time truncated to the second; times before 1970 are written as 0.
std::string EncodeUnixSeconds(WallTime time);
// `annotation` (kBindTimeAnnotation, kVgpuTimeAnnotation) names the value in messages.
Result<WallTime> DecodeUnixSeconds(std::string_view value, std::string_view annotation);

}  // namespace hami::kube
