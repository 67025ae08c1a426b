// The shared region: the one file every process of a container maps, and through which
// the container's processes share their memory budget, their compute budget and their
// identities; the monitor and `hami inspect` read it from the host.
//
// This header is the whole ABI. Fixed-width fields, explicit padding, a static_assert on
// every offset and size. A file starts with a Header that describes it (magic, layout
// major/minor, sizes and offsets of each section, a fingerprint of the field layout) and
// every reader validates it before trusting a byte. Compatibility rule: a new minor version
// may give meaning to reserved bytes only (sizes and offsets stay); anything else is a new
// major version, which readers of another major refuse. The fingerprint covers the fields
// of the major version (kFields); fields a minor version adds get their own table, outside
// the fingerprint, so readers of an earlier minor keep accepting the file.
//
// Concurrency (see region.h for the protocols):
// - Membership is lock-free: a process claims a slot by taking the slot's OFD byte lock on
//   the file and then CAS-ing the slot's state; the lock is its liveness signal.
// - Admission on a device is serialized by that device's robust mutex; readers follow the
//   device's seqlock (writers hold the mutex, so there is one writer at a time).
// - Policy fields are atomics; `generation` counts changes.
#pragma once

#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace hami::region::layout {

inline constexpr char kMagic[8] = {'H', 'A', 'M', 'I', 'R', 'E', 'G', 'N'};
inline constexpr uint16_t kMajor = 2;
inline constexpr uint16_t kMinor = 5;  // 1: identity telemetry; 2: the compute limiter;
                                       // 3: policy conflicts; 4: the NVML cross-check;
                                       // 5: memory held outside the device budget
inline constexpr uint32_t kInitialized = 0x52454459;  // "REDY"
inline constexpr int kMaxDevices = 16;
inline constexpr int kMaxSlots = 1024;
inline constexpr int kUsageKinds = 8;
inline constexpr int kUuidBytes = 64;

// OFD lock offsets (past the end of the file).
inline constexpr off_t kInitLock = off_t(1) << 40;  // held while creating the file
inline constexpr off_t kSlotLockBase = kInitLock + 4096;
// Held by the process that runs the container's compute controller for a device (+ index).
inline constexpr off_t kLimiterLockBase = kInitLock + 1024;
// Held by the process that runs the container's NVML cross-check for a device (+ index).
inline constexpr off_t kCrossCheckLockBase = kInitLock + 2048;
// Minor 5: held while a process checks and takes part of the container's host budget.
inline constexpr off_t kHostLock = kInitLock + 3072;

// What a byte of device memory was charged for.
enum class UsageKind : uint32_t {
  kContext = 0,  // context creation
  kModule = 1,   // loaded code and its globals
  kData = 2,     // cuMemAlloc and friends
  kPool = 3,     // stream-ordered pools (reserved memory)
  kGraph = 4,    // graph memory nodes
  kVmm = 5,      // cuMemCreate
  kOther = 6,
  // 7: reserved
};

enum class SlotState : uint32_t { kFree = 0, kClaiming = 1, kLive = 2 };
enum class SlotStatus : uint32_t { kRunning = 1, kSuspended = 2 };
// How the slot's host PID was learned (filled in by the identity code).
enum class IdentitySource : uint32_t {
  kUnknown = 0,        // not (yet) known
  kSameNamespace = 1,  // the process runs in the host's PID namespace
  kBroker = 2,         // the host-PID broker (SO_PEERCRED)
  kProcfs = 3,         // a trusted host procfs (NStgid)
  kNvmlProbe = 4,      // the NVML context probe
  kFailed = 5,         // every tier failed; retried later
};
inline constexpr int kIdentitySources = 8;
// Why an identity tier gave no host PID: finite classes, recorded per tier in the slot and
// counted in the header (minor 1).
enum class IdentityReason : uint8_t {
  kNone = 0,            // the tier answered, or was not reached
  kDisabled = 1,        // its gate is off, or it is not among the configured tiers
  kMissing = 2,         // broker: no socket or directory at the compiled path
  kUntrusted = 3,       // broker: unsafe directory, endpoint, mount or peer UID
  kUnavailable = 4,     // broker: connect refused, timed out, or the connection ended early
  kBadReply = 5,        // broker: a malformed or refused response
  kUnreadable = 6,      // procfs: the status file cannot be read, or the root is not a procfs
  kMalformed = 7,       // procfs: no valid NStgid field
  kInconsistent = 8,    // procfs: the innermost NStgid entry is not this process's PID
  kOtherNamespace = 9,  // namespace: not in the initial PID namespace
  kLockTimeout = 10,    // probe: the node-wide probe lock was not acquired in time
  kNoDriver = 11,       // probe: CUDA or NVML is not usable (yet)
  kNotFound = 12,       // probe: no new process appeared in NVML's list
  kAmbiguous = 13,      // probe: more than one new process appeared
  kDriverError = 14,    // probe: a CUDA or NVML call failed
  kBusy = 15,           // probe: no memory left under the limit to mark this process
};
inline constexpr int kIdentityReasons = 16;
// The tiers, in the order they are tried; the slot keeps one reason per tier.
enum class IdentityTier : uint8_t { kBroker = 0, kProcfs = 1, kNamespace = 2, kProbe = 3 };
inline constexpr int kIdentityTiers = 4;
enum class CorePolicy : uint32_t { kDefault = 0, kForce = 1, kDisable = 2 };
// How the container's compute limit on a device is being held.
enum class LimiterMode : uint32_t {
  kOff = 0,         // no limit in force (none set, 0/100, policy disable, switch off)
  kStarting = 1,    // limited on a first estimate; no measurement yet
  kClosedLoop = 2,  // limited on the container's own SM utilization (NVML, by host PID)
  kOpenLoop = 3,    // degraded: some process's host PID is unknown, so the whole device's
                    // utilization stands in for the container's (it can only limit more)
};
// Cost units of the limiter, per wave of a launch (a wave fills every SM once).
inline constexpr int64_t kMilliUnitsPerWave = 1000;

// Minor 2: the compute limiter's state for one device, shared by the container's processes.
struct LimiterDevice {
  std::atomic<int64_t> tokens;     // milli-units the container may launch now; < 0: owed
  std::atomic<int64_t> refill_ns;  // CLOCK_MONOTONIC of the latest refill
  std::atomic<uint64_t> rate;      // milli-units per second the container may launch
  std::atomic<uint64_t> admitted;  // milli-units launched, ever
  std::atomic<int64_t> waited_ns;  // time launches spent waiting for budget, ever
  std::atomic<uint32_t> mode;      // LimiterMode
  std::atomic<int32_t> controller_pid;
  std::atomic<int64_t> updated_ns;  // CLOCK_MONOTONIC of the controller's latest update
  std::atomic<uint32_t> measured;   // the container's SM utilization, percent x 100
  uint32_t pad;
};
static_assert(sizeof(LimiterDevice) == 64);

struct SectionRef {
  uint64_t offset;
  uint64_t size;
  uint32_t count;
  uint32_t stride;
};

// Minor 3: a process whose own resolved limit differed from the region's (it holds to the
// stricter memory limit): who, which field, both values. Written once: state 0 -> 1 (claimed
// by the writer) -> 2 (filled, release).
enum class ConflictField : uint32_t { kMemoryLimit = 1, kSmLimit = 2 };
struct PolicyConflict {
  std::atomic<uint32_t> state;
  int32_t pid;     // in the container's PID namespace
  uint32_t field;  // ConflictField
  int32_t device;
  uint64_t region_value;
  uint64_t process_value;
  int64_t realtime_ns;
  char comm[16];
  uint8_t pad[8];
};
inline constexpr int kMaxConflicts = 16;

struct Header {
  char magic[8];
  uint16_t major;
  uint16_t minor;
  uint32_t header_size;
  uint64_t total_size;
  uint64_t fingerprint;
  std::atomic<uint32_t> initialized;  // kInitialized, stored last with release ordering
  uint32_t max_devices;
  uint32_t max_slots;
  uint32_t usage_kinds;
  SectionRef policy;
  SectionRef devices;
  SectionRef slots;
  int64_t created_realtime_ns;
  int32_t creator_pid;
  uint32_t pad0;
  char creator_comm[16];
  std::atomic<uint32_t> claim_hint;  // where the next slot search starts
  uint32_t pad1;
  std::atomic<int64_t> last_sweep_ns;  // CLOCK_MONOTONIC of the last dead-slot sweep
  // Minor 1: how the container's processes learned their host PIDs.
  std::atomic<uint64_t> identity_by_source[kIdentitySources];  // resolutions, by IdentitySource
  std::atomic<uint64_t> identity_reasons[kIdentityReasons];    // tier failures, by reason
  // Minor 3: the first kMaxConflicts conflicts; the count goes on past them.
  std::atomic<uint32_t> conflict_count;
  uint32_t pad2;
  PolicyConflict conflicts[kMaxConflicts];
  // Minor 4: the NVML cross-check (DeviceAccount and Slot hold its findings).
  std::atomic<uint64_t> unaccounted_found;  // times a process was newly found over its books
  std::atomic<int32_t> crosscheck_pid;      // who ran the latest check (its own PID namespace)
  uint32_t pad3;
  uint8_t reserved[2688];
};

// The limits a device gets when its own could not be read (fail closed): the smallest memory
// limit the policy can hold (0 means unlimited), under which no allocation fits, and the
// smallest compute share.
inline constexpr uint64_t kZeroBudgetBytes = 1;
inline constexpr uint32_t kStrictestSmPercent = 1;

struct Policy {
  std::atomic<uint64_t> generation;  // bumped by every change after creation
  uint32_t device_count;
  std::atomic<int32_t> priority;                    // CUDA_TASK_PRIORITY: 0 high, 1 low
  std::atomic<uint32_t> core_policy;                // CorePolicy
  std::atomic<uint32_t> oversubscribe;              // CUDA_OVERSUBSCRIBE
  std::atomic<uint64_t> memory_limit[kMaxDevices];  // bytes; 0 = unlimited
  std::atomic<uint32_t> sm_limit[kMaxDevices];      // percent; 0 or 100 = unlimited
  char uuid[kMaxDevices][kUuidBytes];               // container ordinal -> device UUID
  int64_t stamped_realtime_ns;                      // when the creator stamped these limits
  int32_t stamped_by_pid;
  uint32_t pad0;
  char stamped_by_comm[16];
  // Limiter and monitor.
  std::atomic<uint32_t> utilization_switch;  // 1: the core limiter limits (policy default)
  std::atomic<uint32_t> recent_kernel;       // bumped by launches, decayed by the monitor
  std::atomic<int64_t> last_kernel_ns;       // CLOCK_MONOTONIC of the latest launch
  std::atomic<uint32_t> paused;              // 1: a node agent pauses this container's work
  uint32_t pad1;
  std::atomic<int64_t> changed_realtime_ns;  // the latest operator change
  std::atomic<int32_t> changed_by_pid;
  uint32_t pad2;
  LimiterDevice limiter[kMaxDevices];  // minor 2
  // Minor 5: oversubscription. The container's host budget for allocations its device budget
  // refuses (bytes, all devices together; 0: none), the most its processes held of it, and
  // how many such allocations it refused too. What each process holds is in its slot.
  std::atomic<uint64_t> host_limit;
  std::atomic<uint64_t> host_peak_bytes;
  std::atomic<uint64_t> host_rejected;
  uint8_t reserved[1736];
};

struct DeviceAccount {
  pthread_mutex_t mutex;             // robust; serializes admission on the device
  std::atomic<uint64_t> seq;         // odd while a writer updates (readers retry)
  std::atomic<uint64_t> used_bytes;  // sum of every slot's usage on the device
  std::atomic<uint64_t> peak_bytes;
  std::atomic<uint64_t> rejected;            // admissions refused
  std::atomic<uint64_t> monitor_used_bytes;  // the monitor's latest observation
  std::atomic<uint32_t> sm_util;             // percent, observed by the monitor
  uint32_t pad0;
  std::atomic<int64_t> monitor_ns;  // CLOCK_MONOTONIC of that observation
  // Minor 4: the latest NVML cross-check of the device (region/crosscheck.h).
  std::atomic<uint64_t> unaccounted_bytes;     // what NVML shows past the slots' books, summed
  std::atomic<int64_t> crosscheck_ns;          // CLOCK_MONOTONIC of that check; 0: never
  std::atomic<int32_t> unaccounted_host_pid;   // the process with the largest gap (host PID)
  std::atomic<uint32_t> crosscheck_unchecked;  // live processes with no host PID: not checked
  uint8_t reserved[8];
};

struct Slot {
  std::atomic<uint32_t> state;    // SlotState
  uint32_t generation;            // bumped on every claim
  int32_t pid;                    // in the container's PID namespace
  std::atomic<int32_t> host_pid;  // 0 until known
  uint64_t start_time_ticks;      // /proc/<pid>/stat field 22: PID + this never repeat;
                                  // 0 until recorded (libvgpu: at the first admission)
  uint64_t pidns_inode;
  std::atomic<uint32_t> status;    // SlotStatus
  std::atomic<uint32_t> identity;  // IdentitySource
  char comm[16];
  std::atomic<int64_t> registered_realtime_ns;
  std::atomic<int64_t> last_kernel_ns;
  std::atomic<uint64_t> launches;
  std::atomic<uint32_t> sm_util[kMaxDevices];  // percent, observed by the monitor
  // Minor 1: the latest identity attempt.
  std::atomic<uint8_t> identity_reason[kIdentityTiers];  // IdentityReason, by IdentityTier
  std::atomic<uint32_t> identity_attempts;
  std::atomic<int64_t> identity_ns;                       // how long the latest attempt took
  std::atomic<uint64_t> usage[kMaxDevices][kUsageKinds];  // bytes
  // Minor 2: the compute limiter as this process last saw it.
  std::atomic<uint32_t> sm_mode;  // LimiterMode of its latest limited launch
  uint32_t pad1;
  std::atomic<int64_t> sm_waited_ns;  // time its launches waited for budget
  // Minor 4: what the NVML cross-check found for this process (0 bytes: nothing).
  std::atomic<uint64_t> unaccounted_bytes;       // the largest gap, on unaccounted_device
  std::atomic<uint64_t> unaccounted_nvml_bytes;  // what NVML showed it holding there
  std::atomic<int32_t> unaccounted_device;       // region device of that gap
  std::atomic<uint32_t> unaccounted_devices;     // a bit per device with a gap
  std::atomic<int64_t> unaccounted_since_ns;     // CLOCK_MONOTONIC when the gap was first seen
  // Minor 4: the SM share this process was given itself, per device (percent; 0: none); the
  // container's controller holds the container to the strictest of these and the policy's.
  std::atomic<uint8_t> own_sm_limit[kMaxDevices];
  // Minor 5: memory this process holds outside the device budget, all devices together (one
  // store each, so a reader sums the slots): its allocations served from host memory, and
  // the memory of other processes it has mapped (IPC, VMM descriptors, pool pointers).
  std::atomic<uint64_t> host_bytes;
  std::atomic<uint64_t> imported_bytes;
  uint8_t reserved1[16];
};

struct File {
  Header header;
  Policy policy;
  DeviceAccount devices[kMaxDevices];
  Slot slots[kMaxSlots];
};

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(std::atomic<int64_t>::is_always_lock_free);
static_assert(sizeof(std::atomic<uint64_t>) == 8 && sizeof(std::atomic<uint32_t>) == 4);
static_assert(sizeof(pthread_mutex_t) == 40, "x86-64 / aarch64 glibc layout assumed");

static_assert(sizeof(SectionRef) == 24);
static_assert(offsetof(Header, major) == 8);
static_assert(offsetof(Header, minor) == 10);
static_assert(offsetof(Header, header_size) == 12);
static_assert(offsetof(Header, total_size) == 16);
static_assert(offsetof(Header, fingerprint) == 24);
static_assert(offsetof(Header, initialized) == 32);
static_assert(offsetof(Header, max_devices) == 36);
static_assert(offsetof(Header, max_slots) == 40);
static_assert(offsetof(Header, usage_kinds) == 44);
static_assert(offsetof(Header, policy) == 48);
static_assert(offsetof(Header, devices) == 72);
static_assert(offsetof(Header, slots) == 96);
static_assert(offsetof(Header, created_realtime_ns) == 120);
static_assert(offsetof(Header, creator_pid) == 128);
static_assert(offsetof(Header, creator_comm) == 136);
static_assert(offsetof(Header, claim_hint) == 152);
static_assert(offsetof(Header, last_sweep_ns) == 160);
static_assert(offsetof(Header, identity_by_source) == 168);
static_assert(offsetof(Header, identity_reasons) == 232);
static_assert(offsetof(Header, conflict_count) == 360);
static_assert(offsetof(Header, conflicts) == 368);
static_assert(sizeof(PolicyConflict) == 64);
static_assert(offsetof(Header, unaccounted_found) == 1392);
static_assert(offsetof(Header, crosscheck_pid) == 1400);
static_assert(sizeof(Header) == 4096);

static_assert(offsetof(Policy, device_count) == 8);
static_assert(offsetof(Policy, priority) == 12);
static_assert(offsetof(Policy, core_policy) == 16);
static_assert(offsetof(Policy, oversubscribe) == 20);
static_assert(offsetof(Policy, memory_limit) == 24);
static_assert(offsetof(Policy, sm_limit) == 152);
static_assert(offsetof(Policy, uuid) == 216);
static_assert(offsetof(Policy, stamped_realtime_ns) == 1240);
static_assert(offsetof(Policy, stamped_by_pid) == 1248);
static_assert(offsetof(Policy, stamped_by_comm) == 1256);
static_assert(offsetof(Policy, utilization_switch) == 1272);
static_assert(offsetof(Policy, recent_kernel) == 1276);
static_assert(offsetof(Policy, last_kernel_ns) == 1280);
static_assert(offsetof(Policy, paused) == 1288);
static_assert(offsetof(Policy, changed_realtime_ns) == 1296);
static_assert(offsetof(Policy, changed_by_pid) == 1304);
static_assert(offsetof(Policy, limiter) == 1312);
static_assert(offsetof(Policy, host_limit) == 2336);
static_assert(offsetof(Policy, host_peak_bytes) == 2344);
static_assert(offsetof(Policy, host_rejected) == 2352);
static_assert(sizeof(Policy) == 4096);

static_assert(offsetof(DeviceAccount, seq) == 40);
static_assert(offsetof(DeviceAccount, used_bytes) == 48);
static_assert(offsetof(DeviceAccount, peak_bytes) == 56);
static_assert(offsetof(DeviceAccount, rejected) == 64);
static_assert(offsetof(DeviceAccount, monitor_used_bytes) == 72);
static_assert(offsetof(DeviceAccount, sm_util) == 80);
static_assert(offsetof(DeviceAccount, monitor_ns) == 88);
static_assert(offsetof(DeviceAccount, unaccounted_bytes) == 96);
static_assert(offsetof(DeviceAccount, crosscheck_ns) == 104);
static_assert(offsetof(DeviceAccount, unaccounted_host_pid) == 112);
static_assert(offsetof(DeviceAccount, crosscheck_unchecked) == 116);
static_assert(sizeof(DeviceAccount) == 128);

static_assert(offsetof(Slot, generation) == 4);
static_assert(offsetof(Slot, pid) == 8);
static_assert(offsetof(Slot, host_pid) == 12);
static_assert(offsetof(Slot, start_time_ticks) == 16);
static_assert(offsetof(Slot, pidns_inode) == 24);
static_assert(offsetof(Slot, status) == 32);
static_assert(offsetof(Slot, identity) == 36);
static_assert(offsetof(Slot, comm) == 40);
static_assert(offsetof(Slot, registered_realtime_ns) == 56);
static_assert(offsetof(Slot, last_kernel_ns) == 64);
static_assert(offsetof(Slot, launches) == 72);
static_assert(offsetof(Slot, sm_util) == 80);
static_assert(offsetof(Slot, identity_reason) == 144);
static_assert(offsetof(Slot, identity_attempts) == 148);
static_assert(offsetof(Slot, identity_ns) == 152);
static_assert(offsetof(Slot, usage) == 160);
static_assert(offsetof(Slot, sm_mode) == 1184);
static_assert(offsetof(Slot, sm_waited_ns) == 1192);
static_assert(offsetof(Slot, unaccounted_bytes) == 1200);
static_assert(offsetof(Slot, unaccounted_nvml_bytes) == 1208);
static_assert(offsetof(Slot, unaccounted_device) == 1216);
static_assert(offsetof(Slot, unaccounted_devices) == 1220);
static_assert(offsetof(Slot, unaccounted_since_ns) == 1224);
static_assert(offsetof(Slot, own_sm_limit) == 1232);
static_assert(offsetof(Slot, host_bytes) == 1248);
static_assert(offsetof(Slot, imported_bytes) == 1256);
static_assert(sizeof(Slot) == 1280);

static_assert(offsetof(File, policy) == 4096);
static_assert(offsetof(File, devices) == 8192);
static_assert(offsetof(File, slots) == 8192 + kMaxDevices * 128);
static_assert(sizeof(File) == 10240 + kMaxSlots * 1280);

// One row of the field table: what the fingerprint covers and the golden test prints.
struct Field {
  const char* name;
  uint64_t offset;  // from the start of the file
  uint64_t size;
};

// clang-format off
#define HAMI_REGION_FIELDS(X)                                                          \
  X(header.magic, Header, magic, 0)                                                    \
  X(header.major, Header, major, 0)                                                    \
  X(header.minor, Header, minor, 0)                                                    \
  X(header.header_size, Header, header_size, 0)                                        \
  X(header.total_size, Header, total_size, 0)                                          \
  X(header.fingerprint, Header, fingerprint, 0)                                        \
  X(header.initialized, Header, initialized, 0)                                        \
  X(header.max_devices, Header, max_devices, 0)                                        \
  X(header.max_slots, Header, max_slots, 0)                                            \
  X(header.usage_kinds, Header, usage_kinds, 0)                                        \
  X(header.policy, Header, policy, 0)                                                  \
  X(header.devices, Header, devices, 0)                                                \
  X(header.slots, Header, slots, 0)                                                    \
  X(header.created_realtime_ns, Header, created_realtime_ns, 0)                        \
  X(header.creator_pid, Header, creator_pid, 0)                                        \
  X(header.creator_comm, Header, creator_comm, 0)                                      \
  X(header.claim_hint, Header, claim_hint, 0)                                          \
  X(header.last_sweep_ns, Header, last_sweep_ns, 0)                                    \
  X(policy.generation, Policy, generation, 4096)                                       \
  X(policy.device_count, Policy, device_count, 4096)                                   \
  X(policy.priority, Policy, priority, 4096)                                           \
  X(policy.core_policy, Policy, core_policy, 4096)                                     \
  X(policy.oversubscribe, Policy, oversubscribe, 4096)                                 \
  X(policy.memory_limit, Policy, memory_limit, 4096)                                   \
  X(policy.sm_limit, Policy, sm_limit, 4096)                                           \
  X(policy.uuid, Policy, uuid, 4096)                                                   \
  X(policy.stamped_realtime_ns, Policy, stamped_realtime_ns, 4096)                     \
  X(policy.stamped_by_pid, Policy, stamped_by_pid, 4096)                               \
  X(policy.stamped_by_comm, Policy, stamped_by_comm, 4096)                             \
  X(policy.utilization_switch, Policy, utilization_switch, 4096)                       \
  X(policy.recent_kernel, Policy, recent_kernel, 4096)                                 \
  X(policy.last_kernel_ns, Policy, last_kernel_ns, 4096)                               \
  X(policy.paused, Policy, paused, 4096)                                               \
  X(policy.changed_realtime_ns, Policy, changed_realtime_ns, 4096)                     \
  X(policy.changed_by_pid, Policy, changed_by_pid, 4096)                               \
  X(device[0].mutex, DeviceAccount, mutex, 8192)                                       \
  X(device[0].seq, DeviceAccount, seq, 8192)                                           \
  X(device[0].used_bytes, DeviceAccount, used_bytes, 8192)                             \
  X(device[0].peak_bytes, DeviceAccount, peak_bytes, 8192)                             \
  X(device[0].rejected, DeviceAccount, rejected, 8192)                                 \
  X(device[0].monitor_used_bytes, DeviceAccount, monitor_used_bytes, 8192)             \
  X(device[0].sm_util, DeviceAccount, sm_util, 8192)                                   \
  X(device[0].monitor_ns, DeviceAccount, monitor_ns, 8192)                             \
  X(slot[0].state, Slot, state, 10240)                                                 \
  X(slot[0].generation, Slot, generation, 10240)                                       \
  X(slot[0].pid, Slot, pid, 10240)                                                     \
  X(slot[0].host_pid, Slot, host_pid, 10240)                                           \
  X(slot[0].start_time_ticks, Slot, start_time_ticks, 10240)                           \
  X(slot[0].pidns_inode, Slot, pidns_inode, 10240)                                     \
  X(slot[0].status, Slot, status, 10240)                                               \
  X(slot[0].identity, Slot, identity, 10240)                                           \
  X(slot[0].comm, Slot, comm, 10240)                                                   \
  X(slot[0].registered_realtime_ns, Slot, registered_realtime_ns, 10240)               \
  X(slot[0].last_kernel_ns, Slot, last_kernel_ns, 10240)                               \
  X(slot[0].launches, Slot, launches, 10240)                                           \
  X(slot[0].sm_util, Slot, sm_util, 10240)                                             \
  X(slot[0].usage, Slot, usage, 10240)
// clang-format on

// Fields minor versions gave to reserved bytes: outside the fingerprint (a file of an earlier
// minor has zeros there).
// clang-format off
#define HAMI_REGION_FIELDS_MINOR(X)                                                    \
  X(header.identity_by_source, Header, identity_by_source, 0)                          \
  X(header.identity_reasons, Header, identity_reasons, 0)                              \
  X(slot[0].identity_reason, Slot, identity_reason, 10240)                             \
  X(slot[0].identity_attempts, Slot, identity_attempts, 10240)                         \
  X(slot[0].identity_ns, Slot, identity_ns, 10240)                                     \
  X(policy.limiter, Policy, limiter, 4096)                                             \
  X(slot[0].sm_mode, Slot, sm_mode, 10240)                                             \
  X(slot[0].sm_waited_ns, Slot, sm_waited_ns, 10240)                                   \
  X(header.conflict_count, Header, conflict_count, 0)                                  \
  X(header.conflicts, Header, conflicts, 0)                                            \
  X(header.unaccounted_found, Header, unaccounted_found, 0)                            \
  X(header.crosscheck_pid, Header, crosscheck_pid, 0)                                  \
  X(device[0].unaccounted_bytes, DeviceAccount, unaccounted_bytes, 8192)               \
  X(device[0].crosscheck_ns, DeviceAccount, crosscheck_ns, 8192)                       \
  X(device[0].unaccounted_host_pid, DeviceAccount, unaccounted_host_pid, 8192)         \
  X(device[0].crosscheck_unchecked, DeviceAccount, crosscheck_unchecked, 8192)         \
  X(slot[0].unaccounted_bytes, Slot, unaccounted_bytes, 10240)                         \
  X(slot[0].unaccounted_nvml_bytes, Slot, unaccounted_nvml_bytes, 10240)               \
  X(slot[0].unaccounted_device, Slot, unaccounted_device, 10240)                       \
  X(slot[0].unaccounted_devices, Slot, unaccounted_devices, 10240)                     \
  X(slot[0].unaccounted_since_ns, Slot, unaccounted_since_ns, 10240)                   \
  X(slot[0].own_sm_limit, Slot, own_sm_limit, 10240)                                   \
  X(policy.host_limit, Policy, host_limit, 4096)                                       \
  X(policy.host_peak_bytes, Policy, host_peak_bytes, 4096)                             \
  X(policy.host_rejected, Policy, host_rejected, 4096)                                 \
  X(slot[0].host_bytes, Slot, host_bytes, 10240)                                       \
  X(slot[0].imported_bytes, Slot, imported_bytes, 10240)
// clang-format on

#define HAMI_REGION_FIELD_ROW(label, type, member, base) \
  Field{#label, (base) + offsetof(type, member), sizeof(type::member)},
inline constexpr Field kFields[] = {HAMI_REGION_FIELDS(HAMI_REGION_FIELD_ROW)};
inline constexpr Field kMinorFields[] = {HAMI_REGION_FIELDS_MINOR(HAMI_REGION_FIELD_ROW)};
#undef HAMI_REGION_FIELD_ROW

// A hash of every field's offset and size, the counts and the major version: two builds
// agree on it exactly when they agree on the layout.
constexpr uint64_t Fingerprint() {
  uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&h](uint64_t v) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((v >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  };
  for (const Field& f : kFields) {
    mix(f.offset);
    mix(f.size);
  }
  mix(sizeof(File));
  mix(kMaxDevices);
  mix(kMaxSlots);
  mix(kUsageKinds);
  mix(kMajor);
  return h;
}

inline constexpr uint64_t kFingerprint = Fingerprint();

}  // namespace hami::region::layout
