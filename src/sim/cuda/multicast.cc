// Multicast objects (cuMulticast*): a team of devices on NVLink switches, memory each of them
// binds to a range of the object, and mappings of the object through which a write reaches
// every team device's memory. Offered where a device's profile has an NVLink switch
// (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED); elsewhere each call answers
// CUDA_ERROR_NOT_SUPPORTED, as the driver does on a PCIe machine.
//
// The object is a handle of the VMM numbering: cuMemMap, cuMemSetAccess, cuMemUnmap and
// cuMemRelease (memory.cc) take it as the driver documents. It owns no device memory. Its
// properties, team and bindings live in a memfd page (MulticastShared), so that a descriptor
// exported to another process (cuMemExportToShareableHandle) makes the same object there: a
// device added in one process is in the team of all, and a write through a mapping in one
// reaches memory another process bound (through /proc/<pid>/fd of the binder).
#include <fcntl.h>
#include <linux/futex.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <string>
#include <string_view>

#include "common/clock.h"
#include "sim/cuda/model.h"

namespace hami::sim {

// One process's binding, published for every process that holds the object.
struct SharedBinding {
  std::atomic<int32_t> pid;  // 0: free; -1: being written; > 0: the binder's
  int32_t device;            // physical
  int32_t fd;                // the bound memory's memfd, in the binder
  uint32_t pad;
  uint64_t mc_offset, size, mem_offset;
};

inline constexpr int kMaxSharedBindings = 256;
inline constexpr uint64_t kMulticastMagic = 0x31636d2d696d6168ull;  // "hami-mc1"

struct MulticastShared {
  uint64_t magic;
  uint32_t num_devices, handle_types;
  uint64_t size;
  std::atomic<uint32_t> team_count;        // the futex word waiters sleep on
  std::atomic<int32_t> team[kMaxDevices];  // physical index + 1; 0: not yet added
  SharedBinding bindings[kMaxSharedBindings];
};
static_assert(std::atomic<uint32_t>::is_always_lock_free &&
              std::atomic<int32_t>::is_always_lock_free);

namespace {

constexpr std::string_view kMemfdName = "hami-sim-multicast";
constexpr int64_t kTeamWaitNs = 60'000'000'000;  // how long a bind or map waits for the team

// A device of the simulated machine on an NVLink switch.
bool OnSwitch(int physical) { return D().spec(physical).profile->nvlink_switch; }

// Devices of the machine on NVLink switches: the most a team can hold.
unsigned SwitchDevices() {
  unsigned n = 0;
  for (size_t i = 0; i < D().devices.size(); ++i) n += OnSwitch(int(i)) ? 1u : 0u;
  return n;
}

// The checks every call shares: initialized, and a device on a switch to use.
CUresult RequireMulticast() {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  return SwitchDevices() == 0 ? CUDA_ERROR_NOT_SUPPORTED : CUDA_SUCCESS;
}

MulticastShared* MapShared(int fd) {
  void* p = mmap(nullptr, sizeof(MulticastShared), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  return p == MAP_FAILED ? nullptr : static_cast<MulticastShared*>(p);
}

// Whether the process that published a binding still runs.
bool Alive(int32_t pid) { return pid > 0 && (kill(pid, 0) == 0 || errno == EPERM); }

// A binding's slot freed (by the process that made it).
void Unpublish(MulticastShared* shared, int slot) {
  if (slot >= 0) shared->bindings[slot].pid.store(0, std::memory_order_release);
}

// This process's bindings of `mc` that satisfy `pred` are gone, here and in the table.
template <typename Pred>
void DropBindings(MulticastObject* mc, Pred pred) {
  std::erase_if(mc->bindings, [&](const MulticastBinding& b) {
    if (!pred(b)) return false;
    Unpublish(mc->shared, b.slot);
    return true;
  });
}

void CloseObject(MulticastObject* mc) {
  DropBindings(mc, [](const MulticastBinding&) { return true; });
  munmap(mc->shared, sizeof(MulticastShared));
  close(mc->fd);
}

// Binds [mem_offset, mem_offset + size) of `memory` at `mc_offset` of `mc`; the team is
// complete.
CUresult BindLocked(MulticastObject* mc, size_t mc_offset, CUmemGenericAllocationHandle memory,
                    size_t mem_offset, size_t size) {
  Driver& d = D();
  auto ph = d.physical_allocs.find(memory);
  if (ph == d.physical_allocs.end() || ph->second.released) return CUDA_ERROR_INVALID_VALUE;
  const size_t g = d.Granularity();
  if (size == 0 || size % g != 0 || mc_offset % g != 0 || mem_offset % g != 0 ||
      mem_offset > ph->second.size || size > ph->second.size - mem_offset || mc_offset > mc->size ||
      size > mc->size - mc_offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int device = ph->second.device;
  if (device == kHostPhysical || !InMulticastTeamLocked(*mc, device)) {
    return CUDA_ERROR_INVALID_DEVICE;
  }
  // An exportable object binds only exportable memory.
  if (mc->handle_types != 0 && ph->second.handle_types == 0) return CUDA_ERROR_INVALID_VALUE;
  for (const SharedBinding& b : mc->shared->bindings) {
    const int32_t pid = b.pid.load(std::memory_order_acquire);
    if (pid > 0 && b.device == device && mc_offset < b.mc_offset + b.size &&
        b.mc_offset < mc_offset + size && Alive(pid)) {
      return CUDA_ERROR_INVALID_VALUE;  // that range of this device is bound already
    }
  }
  for (int slot = 0; slot < kMaxSharedBindings; ++slot) {
    SharedBinding& b = mc->shared->bindings[slot];
    int32_t expected = b.pid.load(std::memory_order_acquire);
    if (expected > 0 && Alive(expected)) continue;
    if (expected == -1 || !b.pid.compare_exchange_strong(expected, -1)) continue;
    b.device = device;
    b.fd = ph->second.fd;
    b.mc_offset = mc_offset;
    b.size = size;
    b.mem_offset = mem_offset;
    b.pid.store(int32_t(getpid()), std::memory_order_release);
    mc->bindings.push_back(MulticastBinding{device, mc_offset, size, memory, mem_offset, slot});
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_OUT_OF_MEMORY;  // the resources a bind needs
}

// Writes [from, from + n) at `offset` of the memfd `fd` of process `pid`.
bool WriteBound(int32_t pid, int fd, off_t offset, const char* from, size_t n) {
  int target = fd;
  if (pid != int32_t(getpid())) {
    std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
    target = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (target < 0) return false;
  }
  size_t done = 0;
  while (done < n) {
    ssize_t w = pwrite(target, from + done, n - done, offset + off_t(done));
    if (w <= 0) break;
    done += size_t(w);
  }
  if (target != fd) close(target);
  return done == n;
}

}  // namespace

MulticastObject* FindMulticastLocked(CUmemGenericAllocationHandle handle) {
  auto it = D().multicasts.find(handle);
  return it == D().multicasts.end() || it->second.released ? nullptr : &it->second;
}

bool InMulticastTeamLocked(const MulticastObject& mc, int device) {
  for (unsigned i = 0; i < mc.num_devices; ++i) {
    if (mc.shared->team[i].load(std::memory_order_acquire) == device + 1) return true;
  }
  return false;
}

CUresult AwaitMulticastTeamLocked(ApiLock& api, CUmemGenericAllocationHandle handle) {
  const int64_t deadline = MonotonicNs() + kTeamWaitNs;
  for (;;) {
    MulticastObject* mc = FindMulticastLocked(handle);
    if (mc == nullptr) return CUDA_ERROR_INVALID_VALUE;
    const uint32_t count = mc->shared->team_count.load(std::memory_order_acquire);
    if (count >= mc->num_devices) return CUDA_SUCCESS;
    const int64_t left = deadline - MonotonicNs();
    if (!mc->shareable_out || left <= 0) return CUDA_ERROR_NOT_PERMITTED;
    // Sleep on the team's count with the driver unlocked; the object may be released
    // meanwhile, so the mapping is held by a descriptor of its own.
    int fd = fcntl(mc->fd, F_DUPFD_CLOEXEC, 0);
    MulticastShared* shared = fd < 0 ? nullptr : MapShared(fd);
    if (shared == nullptr) {
      if (fd >= 0) close(fd);
      return CUDA_ERROR_OUT_OF_MEMORY;
    }
    api.lock().unlock();
    timespec wait{time_t(left / 1'000'000'000), long(left % 1'000'000'000)};
    syscall(SYS_futex, &shared->team_count, FUTEX_WAIT, count, &wait, nullptr, 0);
    api.lock().lock();
    munmap(shared, sizeof(MulticastShared));
    close(fd);
  }
}

void MulticastUnmappedLocked(CUmemGenericAllocationHandle handle) {
  auto it = D().multicasts.find(handle);
  if (it == D().multicasts.end()) return;
  it->second.mappings -= 1;
  if (it->second.released && it->second.mappings == 0) {
    CloseObject(&it->second);
    D().multicasts.erase(it);
  }
}

CUresult ReleaseMulticastLocked(CUmemGenericAllocationHandle handle) {
  auto it = D().multicasts.find(handle);
  if (it == D().multicasts.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  if (it->second.mappings == 0) {
    CloseObject(&it->second);
    D().multicasts.erase(it);
  }
  return CUDA_SUCCESS;
}

void ForgetMulticastBindingsLocked(CUmemGenericAllocationHandle memory) {
  for (auto& [handle, mc] : D().multicasts) {
    DropBindings(&mc, [memory](const MulticastBinding& b) { return b.memory == memory; });
  }
}

CUresult ExportMulticastLocked(MulticastObject* mc, CUmemAllocationHandleType type, int* fd) {
  if (CUresult r = CheckHandleTypes(unsigned(type)); r != CUDA_SUCCESS) return r;
  // Only a type the object asked for at creation may be exported.
  if (type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR ||
      (mc->handle_types & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int out = fcntl(mc->fd, F_DUPFD_CLOEXEC, 0);
  if (out < 0) return CUDA_ERROR_OUT_OF_MEMORY;
  mc->shareable_out = true;
  *fd = out;
  return CUDA_SUCCESS;
}

CUresult ImportMulticastLocked(int fd, CUmemGenericAllocationHandle* handle) {
  char link[256];
  ssize_t n =
      fd < 0 ? -1
             : readlink(("/proc/self/fd/" + std::to_string(fd)).c_str(), link, sizeof(link) - 1);
  const std::string prefix = "/memfd:" + std::string(kMemfdName);
  if (n <= 0 || std::string_view(link, size_t(n)).substr(0, prefix.size()) != prefix) {
    return CUDA_ERROR_NOT_FOUND;
  }
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  struct stat st;
  if (fstat(fd, &st) != 0 || size_t(st.st_size) != sizeof(MulticastShared)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  MulticastShared* shared = own < 0 ? nullptr : MapShared(own);
  if (shared == nullptr) {
    if (own >= 0) close(own);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  if (shared->magic != kMulticastMagic || shared->num_devices == 0 ||
      shared->num_devices > unsigned(kMaxDevices)) {
    munmap(shared, sizeof(MulticastShared));
    close(own);
    return CUDA_ERROR_INVALID_VALUE;
  }
  MulticastObject mc;
  mc.num_devices = shared->num_devices;
  mc.size = shared->size;
  mc.handle_types = shared->handle_types;
  mc.fd = own;
  mc.shared = shared;
  mc.shareable_out = true;
  CUmemGenericAllocationHandle h = D().next_physical++;
  D().multicasts[h] = std::move(mc);
  *handle = h;
  return CUDA_SUCCESS;
}

CUresult MulticastWriteLocked(const VaMapping& m, uintptr_t dst, const void* src, size_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst < m.base || bytes > m.base + m.size - dst || (m.prot & PROT_WRITE) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A released object lives on, bindings and all, while a mapping of it is in place.
  auto it = D().multicasts.find(m.handle);
  if (it == D().multicasts.end()) return CUDA_ERROR_INVALID_VALUE;
  MulticastShared* shared = it->second.shared;
  const size_t first = m.offset + (dst - m.base);
  const size_t end = first + bytes;
  // The bindings of processes that run, read once.
  struct Live {
    int32_t pid, device, fd;
    size_t mc_offset, size, mem_offset;
  };
  std::vector<Live> live;
  for (const SharedBinding& b : shared->bindings) {
    const int32_t pid = b.pid.load(std::memory_order_acquire);
    if (pid <= 0 || !Alive(pid)) continue;
    live.push_back(Live{pid, b.device, b.fd, b.mc_offset, b.size, b.mem_offset});
  }
  // Every team device must have memory under the whole range; then each is written.
  for (unsigned i = 0; i < it->second.num_devices; ++i) {
    const int device = shared->team[i].load(std::memory_order_acquire) - 1;
    size_t covered = 0;
    for (const Live& b : live) {
      if (b.device != device) continue;
      size_t lo = std::max(first, b.mc_offset), hi = std::min(end, b.mc_offset + b.size);
      if (lo < hi) covered += hi - lo;
    }
    if (device < 0 || covered != bytes) return CUDA_ERROR_INVALID_VALUE;
  }
  for (const Live& b : live) {
    size_t lo = std::max(first, b.mc_offset), hi = std::min(end, b.mc_offset + b.size);
    if (lo >= hi) continue;
    if (!WriteBound(b.pid, b.fd, off_t(b.mem_offset + (lo - b.mc_offset)),
                    static_cast<const char*>(src) + (lo - first), hi - lo)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace hami::sim

using namespace hami::sim;  // NOLINT: the exported C API below

extern "C" {

CUresult CUDAAPI cuMulticastGetGranularity(size_t* granularity, const CUmulticastObjectProp* prop,
                                           CUmulticastGranularity_flags option) {
  if (granularity == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int which = EnumValue(option);
  if (which != CU_MULTICAST_GRANULARITY_MINIMUM && which != CU_MULTICAST_GRANULARITY_RECOMMENDED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  *granularity =
      which == CU_MULTICAST_GRANULARITY_MINIMUM ? D().Granularity() : kMulticastRecommendedBytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMulticastCreate(CUmemGenericAllocationHandle* mcHandle,
                                   const CUmulticastObjectProp* prop) {
  if (mcHandle == nullptr || prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  Driver& d = D();
  if (prop->flags != 0 || prop->numDevices == 0 || prop->numDevices > SwitchDevices() ||
      prop->size == 0 || prop->size % d.Granularity() != 0 || (prop->handleTypes >> 32) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (CUresult r = CheckHandleTypes(unsigned(prop->handleTypes)); r != CUDA_SUCCESS) return r;
  int fd = memfd_create(std::string(kMemfdName).c_str(), MFD_CLOEXEC);
  MulticastShared* shared = nullptr;
  if (fd >= 0 && ftruncate(fd, off_t(sizeof(MulticastShared))) == 0) shared = MapShared(fd);
  if (shared == nullptr) {
    if (fd >= 0) close(fd);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  shared->num_devices = prop->numDevices;
  shared->handle_types = unsigned(prop->handleTypes);
  shared->size = prop->size;
  shared->magic = kMulticastMagic;
  MulticastObject mc;
  mc.num_devices = prop->numDevices;
  mc.size = prop->size;
  mc.handle_types = unsigned(prop->handleTypes);
  mc.fd = fd;
  mc.shared = shared;
  CUmemGenericAllocationHandle h = d.next_physical++;
  d.multicasts[h] = std::move(mc);
  *mcHandle = h;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMulticastAddDevice(CUmemGenericAllocationHandle mcHandle, CUdevice dev) {
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  MulticastObject* mc = FindMulticastLocked(mcHandle);
  if (mc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical;
  if (CUresult r = PhysicalDevice(dev, &physical); r != CUDA_SUCCESS) return r;
  if (!OnSwitch(physical)) return CUDA_ERROR_NOT_SUPPORTED;
  // Each device once, in the first free place of the team (another process may be adding
  // one at the same time).
  for (unsigned i = 0; i < mc->num_devices; ++i) {
    int32_t member = mc->shared->team[i].load(std::memory_order_acquire);
    while (member == 0) {
      if (mc->shared->team[i].compare_exchange_weak(member, physical + 1)) {
        mc->shared->team_count.fetch_add(1, std::memory_order_acq_rel);
        syscall(SYS_futex, &mc->shared->team_count, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
        return CUDA_SUCCESS;
      }
    }
    if (member == physical + 1) return CUDA_ERROR_INVALID_VALUE;  // added already
  }
  return CUDA_ERROR_INVALID_VALUE;  // the team is full
}

CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                    size_t size, unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  // The driver binds once the whole team is added.
  if (CUresult r = AwaitMulticastTeamLocked(api, mcHandle); r != CUDA_SUCCESS) return r;
  return BindLocked(FindMulticastLocked(mcHandle), mcOffset, memHandle, memOffset, size);
}

CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                     CUdeviceptr memptr, size_t size, unsigned long long flags) {
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  if (CUresult r = AwaitMulticastTeamLocked(api, mcHandle); r != CUDA_SUCCESS) return r;
  MulticastObject* mc = FindMulticastLocked(mcHandle);
  // The memory is named by where cuMemMap put it: the range lies in one mapping of memory
  // (stream-ordered pool memory, which the driver also takes, is not modelled here).
  const VaMapping* m = FindMappingLocked(uintptr_t(memptr));
  if (m == nullptr) {
    Allocation* a = D().FindAllocation(uintptr_t(memptr), 1);
    if (a != nullptr && a->kind == AllocKind::kPool) {
      return NotModelled("cuMulticastBindAddr of stream-ordered pool memory");
    }
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (m->multicast || size > m->base + m->size - uintptr_t(memptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return BindLocked(mc, mcOffset, m->handle, m->offset + (uintptr_t(memptr) - m->base), size);
}

CUresult CUDAAPI cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev,
                                   size_t mcOffset, size_t size) {
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  MulticastObject* mc = FindMulticastLocked(mcHandle);
  if (mc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical;
  if (CUresult r = PhysicalDevice(dev, &physical); r != CUDA_SUCCESS) return r;
  if (!InMulticastTeamLocked(*mc, physical)) return CUDA_ERROR_INVALID_DEVICE;
  const size_t g = D().Granularity();
  if (size == 0 || size % g != 0 || mcOffset % g != 0 || mcOffset > mc->size ||
      size > mc->size - mcOffset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The range must hold whole bindings of the device that this process made (the driver
  // leaves other ranges undefined; the model refuses them).
  for (const MulticastBinding& b : mc->bindings) {
    if (b.device != physical) continue;
    bool overlaps = mcOffset < b.mc_offset + b.size && b.mc_offset < mcOffset + size;
    bool inside = b.mc_offset >= mcOffset && b.mc_offset + b.size <= mcOffset + size;
    if (overlaps && !inside) return CUDA_ERROR_INVALID_VALUE;
  }
  DropBindings(mc, [&](const MulticastBinding& b) {
    return b.device == physical && b.mc_offset >= mcOffset &&
           b.mc_offset + b.size <= mcOffset + size;
  });
  return CUDA_SUCCESS;
}

}  // extern "C"
