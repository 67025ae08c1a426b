// The simulated machine's shared state file: the one truth that every process using the
// simulated GPU maps (HAMI_SIM_STATE). It holds what a real driver keeps in the kernel:
// device memory in use, which processes hold contexts, each device's busy timeline, the
// Xid errors injected on each device (`hami sim xid`), which the simulated NVML delivers as
// events, and each device's per-process accounting records.
//
// Fixed-width fields, explicit padding, static_asserts on every offset: the file is an ABI
// between processes that may run different builds. The header carries a magic, a version,
// the sizes and a fingerprint of this layout; a file that does not match is refused.
//
// Locking: `slots_mutex` serializes claiming and reclaiming process slots; each device's
// `mutex` serializes its memory accounting and its timeline. Both are robust: see
// state.cc for what the next holder repairs. Order: slots_mutex, then a device mutex.
// A device's Xid log and accounting records are written under its device mutex;
// `event_epoch` in the header is bumped (and futex-woken) after every event, so waiters in any
// process sleep on that word. Liveness of a slot's owner is an OFD byte-range lock it holds on
// the file (kSlotLockBase + slot index): the kernel drops it when the owner dies, in any PID
// namespace.
#pragma once

#include <pthread.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "sim/profiles.h"

namespace hami::sim::state {

inline constexpr char kMagic[8] = {'H', 'A', 'M', 'I', 'S', 'I', 'M', '1'};
inline constexpr uint32_t kVersion = 3;               // 2: Xid logs, event epoch; 3: accounting
inline constexpr uint32_t kInitialized = 0x494e4954;  // "INIT"
inline constexpr int kMaxSlots = 512;
inline constexpr int kBusyRing = 8192;
inline constexpr int kXidRing = 64;          // Xid events kept per device
inline constexpr int kAccountingRing = 256;  // accounting records kept per device

// OFD lock offsets (beyond the end of the file; they lock nothing but themselves).
inline constexpr off_t kInitLock = off_t(1) << 40;  // held while creating/validating
inline constexpr off_t kUsersLock = kInitLock + 1;  // shared by every process that maps it
inline constexpr off_t kSlotLockBase = kInitLock + 64;

static_assert(std::atomic<uint32_t>::is_always_lock_free);
static_assert(std::atomic<int32_t>::is_always_lock_free);
static_assert(std::atomic<uint64_t>::is_always_lock_free);
static_assert(sizeof(pthread_mutex_t) == 40, "x86-64/aarch64 glibc layout assumed");

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_size;
  uint64_t total_size;
  uint64_t layout_fingerprint;
  uint64_t config_fingerprint;  // hash of the device table the file was made for
  std::atomic<uint32_t> initialized;
  uint32_t device_count;
  uint64_t host_pidns_inode;  // PIDs are reported as seen in this PID namespace
  int64_t created_realtime_ns;
  char profile_spec[128];
  char node[64];
  pthread_mutex_t slots_mutex;
  pthread_mutex_t ctx_create_mutex;  // HAMI_SIM_CTX_SERIALIZE
  // Bumped after every event recorded on any device; event waiters futex-wait on it.
  std::atomic<uint32_t> event_epoch;
  uint32_t pad0;
  uint8_t reserved[3752];
};

struct BusyRecord {
  int64_t start_ns;
  int64_t end_ns;
  int32_t slot;
  uint32_t generation;
};

struct Device {
  pthread_mutex_t mutex;
  uint64_t used_bytes;   // sum of every slot's used_bytes for this device
  int64_t next_free_ns;  // the device is busy until then (CLOCK_MONOTONIC)
  uint64_t busy_count;   // records ever written; ring index = count % kBusyRing
  uint64_t ecc_pad;
  BusyRecord ring[kBusyRing];
};

struct Slot {
  std::atomic<uint32_t> state;    // kSlotFree or kSlotLive
  int32_t ns_pid;                 // getpid() of the owner in its own namespace
  std::atomic<int32_t> host_pid;  // in the header's namespace; 0 until resolved
  uint32_t generation;            // bumped on every claim
  uint64_t pidns_inode;
  uint64_t start_time_ticks;  // /proc/<pid>/stat field 22
  char comm[32];
  uint64_t used_bytes[kMaxDevices];
  uint32_t contexts[kMaxDevices];
  uint64_t busy_ns[kMaxDevices];  // device time consumed, all time
};

struct XidRecord {
  uint64_t code;        // the Xid
  int64_t realtime_ns;  // when it was recorded (CLOCK_REALTIME)
};

// A device's Xid events: record i (counting from 0 since the file was made) is
// ring[i % kXidRing] while i >= count - kXidRing.
struct XidLog {
  uint64_t count;  // events ever recorded
  uint64_t pad0;
  XidRecord ring[kXidRing];
};

// What accounting recorded of one process on one device: made when the process first holds a
// context or memory there while accounting is on. While it runs (end_realtime_ns == 0) its
// slot, named by slot and generation, holds its device time; when the slot is reclaimed the
// record takes the final figures.
struct AccountingRecord {
  int32_t host_pid;  // the slot's host_pid when made, resolved again when it ends (0: unknown)
  int32_t ns_pid;
  int32_t slot;
  uint32_t generation;
  uint64_t max_used_bytes;  // the most the process held on the device
  uint64_t busy_ns;         // device time consumed, set when it ends
  int64_t start_realtime_ns;
  int64_t end_realtime_ns;  // 0 while running
};

// A device's accounting: record i (counting from 0 since accounting was last turned on) is
// ring[i % kAccountingRing] while i >= count - kAccountingRing.
struct AccountingLog {
  uint32_t enabled;  // accounting mode: 1 (as the file is made) or 0
  uint32_t pad0;
  uint64_t count;  // records made since the mode was last turned on
  AccountingRecord ring[kAccountingRing];
};

inline constexpr uint32_t kSlotFree = 0;
inline constexpr uint32_t kSlotLive = 1;

struct File {
  Header header;
  Device devices[kMaxDevices];
  Slot slots[kMaxSlots];
  XidLog xids[kMaxDevices];
  AccountingLog accounting[kMaxDevices];
};

// Layout checks: any change here must bump kVersion.
static_assert(sizeof(Header) == 4096);
static_assert(offsetof(Header, version) == 8);
static_assert(offsetof(Header, header_size) == 12);
static_assert(offsetof(Header, total_size) == 16);
static_assert(offsetof(Header, layout_fingerprint) == 24);
static_assert(offsetof(Header, config_fingerprint) == 32);
static_assert(offsetof(Header, initialized) == 40);
static_assert(offsetof(Header, device_count) == 44);
static_assert(offsetof(Header, host_pidns_inode) == 48);
static_assert(offsetof(Header, created_realtime_ns) == 56);
static_assert(offsetof(Header, profile_spec) == 64);
static_assert(offsetof(Header, node) == 192);
static_assert(offsetof(Header, slots_mutex) == 256);
static_assert(offsetof(Header, ctx_create_mutex) == 296);
static_assert(offsetof(Header, event_epoch) == 336);
static_assert(offsetof(Header, reserved) == 344);
static_assert(sizeof(BusyRecord) == 24);
static_assert(offsetof(Device, used_bytes) == 40);
static_assert(offsetof(Device, next_free_ns) == 48);
static_assert(offsetof(Device, busy_count) == 56);
static_assert(offsetof(Device, ring) == 72);
static_assert(sizeof(Device) == 72 + 24 * kBusyRing);
static_assert(offsetof(Slot, ns_pid) == 4);
static_assert(offsetof(Slot, host_pid) == 8);
static_assert(offsetof(Slot, generation) == 12);
static_assert(offsetof(Slot, pidns_inode) == 16);
static_assert(offsetof(Slot, start_time_ticks) == 24);
static_assert(offsetof(Slot, comm) == 32);
static_assert(offsetof(Slot, used_bytes) == 64);
static_assert(offsetof(Slot, contexts) == 64 + 8 * kMaxDevices);
static_assert(offsetof(Slot, busy_ns) == 64 + 12 * kMaxDevices);
static_assert(sizeof(Slot) == 64 + 20 * kMaxDevices);
static_assert(offsetof(File, devices) == 4096);
static_assert(offsetof(File, slots) == 4096 + kMaxDevices * sizeof(Device));
static_assert(sizeof(XidRecord) == 16);
static_assert(offsetof(XidLog, ring) == 16);
static_assert(sizeof(XidLog) == 16 + 16 * kXidRing);
static_assert(offsetof(File, xids) == offsetof(File, slots) + kMaxSlots * sizeof(Slot));
static_assert(sizeof(AccountingRecord) == 48);
static_assert(offsetof(AccountingRecord, max_used_bytes) == 16);
static_assert(offsetof(AccountingRecord, start_realtime_ns) == 32);
static_assert(offsetof(AccountingLog, count) == 8);
static_assert(offsetof(AccountingLog, ring) == 16);
static_assert(sizeof(AccountingLog) == 16 + 48 * kAccountingRing);
static_assert(offsetof(File, accounting) == offsetof(File, xids) + kMaxDevices * sizeof(XidLog));

// A hash of the layout (sizes and offsets), stored in the header and checked by readers.
constexpr uint64_t LayoutFingerprint() {
  const uint64_t parts[] = {sizeof(Header),
                            offsetof(Header, initialized),
                            offsetof(Header, slots_mutex),
                            offsetof(Header, event_epoch),
                            sizeof(Device),
                            offsetof(Device, ring),
                            sizeof(BusyRecord),
                            sizeof(Slot),
                            offsetof(Slot, used_bytes),
                            offsetof(Slot, contexts),
                            offsetof(Slot, busy_ns),
                            sizeof(XidLog),
                            offsetof(File, xids),
                            sizeof(AccountingRecord),
                            sizeof(AccountingLog),
                            offsetof(File, accounting),
                            sizeof(File),
                            uint64_t(kMaxDevices),
                            uint64_t(kMaxSlots),
                            uint64_t(kBusyRing),
                            uint64_t(kXidRing),
                            uint64_t(kAccountingRing),
                            uint64_t(kVersion)};
  uint64_t h = 0xcbf29ce484222325ull;
  for (uint64_t p : parts) {
    for (int i = 0; i < 8; ++i) h = (h ^ ((p >> (8 * i)) & 0xff)) * 0x100000001b3ull;
  }
  return h;
}

}  // namespace hami::sim::state
