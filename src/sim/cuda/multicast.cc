// Multicast objects (cuMulticast*): a team of devices on NVLink switches, memory each of them
// binds to a range of the object, and mappings of the object through which a write reaches
// every team device's memory. Offered where a device's profile has an NVLink switch
// (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED); elsewhere each call answers
// CUDA_ERROR_NOT_SUPPORTED, as the driver does on a PCIe machine.
//
// The object is a handle of the VMM numbering: cuMemMap, cuMemSetAccess, cuMemUnmap and
// cuMemRelease (memory.cc) take it as the driver documents. It owns no device memory, and is
// kept in the process that created it (it cannot be exported).
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

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

bool InTeam(const MulticastObject& mc, int physical) {
  return std::find(mc.team.begin(), mc.team.end(), physical) != mc.team.end();
}

// Binds [mem_offset, mem_offset + size) of `memory` at `mc_offset` of `mc`.
CUresult BindLocked(MulticastObject* mc, size_t mc_offset, CUmemGenericAllocationHandle memory,
                    size_t mem_offset, size_t size, unsigned long long flags) {
  Driver& d = D();
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  auto ph = d.physical_allocs.find(memory);
  if (ph == d.physical_allocs.end() || ph->second.released) return CUDA_ERROR_INVALID_VALUE;
  const size_t g = d.Granularity();
  if (size == 0 || size % g != 0 || mc_offset % g != 0 || mem_offset % g != 0 ||
      mem_offset > ph->second.size || size > ph->second.size - mem_offset || mc_offset > mc->size ||
      size > mc->size - mc_offset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int device = ph->second.device;
  if (device == kHostPhysical || !InTeam(*mc, device)) return CUDA_ERROR_INVALID_DEVICE;
  // The driver waits here until the whole team is added; in the model nobody else can add
  // a device (the object stays in this process), so the wait would never end.
  if (CUresult r = MulticastMappableLocked(*mc); r != CUDA_SUCCESS) return r;
  // An exportable object binds only exportable memory.
  if (mc->handle_types != 0 && ph->second.handle_types == 0) return CUDA_ERROR_INVALID_VALUE;
  for (const MulticastBinding& b : mc->bindings) {
    if (b.device == device && mc_offset < b.mc_offset + b.size && b.mc_offset < mc_offset + size) {
      return CUDA_ERROR_INVALID_VALUE;  // that range of this device is bound already
    }
  }
  mc->bindings.push_back(MulticastBinding{device, mc_offset, size, memory, mem_offset});
  return CUDA_SUCCESS;
}

}  // namespace

MulticastObject* FindMulticastLocked(CUmemGenericAllocationHandle handle) {
  auto it = D().multicasts.find(handle);
  return it == D().multicasts.end() || it->second.released ? nullptr : &it->second;
}

CUresult MulticastMappableLocked(const MulticastObject& mc) {
  return mc.team.size() == mc.num_devices ? CUDA_SUCCESS : CUDA_ERROR_NOT_PERMITTED;
}

void MulticastUnmappedLocked(CUmemGenericAllocationHandle handle) {
  auto it = D().multicasts.find(handle);
  if (it == D().multicasts.end()) return;
  it->second.mappings -= 1;
  if (it->second.released && it->second.mappings == 0) D().multicasts.erase(it);
}

CUresult ReleaseMulticastLocked(CUmemGenericAllocationHandle handle) {
  auto it = D().multicasts.find(handle);
  if (it == D().multicasts.end() || it->second.released) return CUDA_ERROR_INVALID_VALUE;
  it->second.released = true;
  if (it->second.mappings == 0) D().multicasts.erase(it);
  return CUDA_SUCCESS;
}

void ForgetMulticastBindingsLocked(CUmemGenericAllocationHandle memory) {
  for (auto& [handle, mc] : D().multicasts) {
    std::erase_if(mc.bindings, [memory](const MulticastBinding& b) { return b.memory == memory; });
  }
}

CUresult MulticastWriteLocked(const VaMapping& m, uintptr_t dst, const void* src, size_t bytes) {
  if (bytes == 0) return CUDA_SUCCESS;
  if (dst < m.base || bytes > m.base + m.size - dst || (m.prot & PROT_WRITE) == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // A released object lives on, bindings and all, while a mapping of it is in place.
  auto it = D().multicasts.find(m.handle);
  if (it == D().multicasts.end()) return CUDA_ERROR_INVALID_VALUE;
  const MulticastObject* mc = &it->second;
  const size_t first = m.offset + (dst - m.base);
  const size_t end = first + bytes;
  // Every team device must have memory under the whole range; then each is written.
  for (int device : mc->team) {
    size_t covered = 0;
    for (const MulticastBinding& b : mc->bindings) {
      if (b.device != device) continue;
      size_t lo = std::max(first, b.mc_offset), hi = std::min(end, b.mc_offset + b.size);
      if (lo < hi) covered += hi - lo;
    }
    if (covered != bytes) return CUDA_ERROR_INVALID_VALUE;
  }
  for (const MulticastBinding& b : mc->bindings) {
    size_t lo = std::max(first, b.mc_offset), hi = std::min(end, b.mc_offset + b.size);
    if (lo >= hi) continue;
    auto ph = D().physical_allocs.find(b.memory);
    if (ph == D().physical_allocs.end()) return CUDA_ERROR_INVALID_VALUE;
    const auto* from = static_cast<const char*>(src) + (lo - first);
    off_t at = off_t(b.mem_offset + (lo - b.mc_offset));
    for (size_t done = 0; done < hi - lo;) {
      ssize_t n = pwrite(ph->second.fd, from + done, hi - lo - done, at + off_t(done));
      if (n <= 0) return CUDA_ERROR_UNKNOWN;
      done += size_t(n);
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
  MulticastObject mc;
  mc.num_devices = prop->numDevices;
  mc.size = prop->size;
  mc.handle_types = unsigned(prop->handleTypes);
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
  if (InTeam(*mc, physical) || mc->team.size() == mc->num_devices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  mc->team.push_back(physical);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMulticastBindMem(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                    CUmemGenericAllocationHandle memHandle, size_t memOffset,
                                    size_t size, unsigned long long flags) {
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  MulticastObject* mc = FindMulticastLocked(mcHandle);
  if (mc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return BindLocked(mc, mcOffset, memHandle, memOffset, size, flags);
}

CUresult CUDAAPI cuMulticastBindAddr(CUmemGenericAllocationHandle mcHandle, size_t mcOffset,
                                     CUdeviceptr memptr, size_t size, unsigned long long flags) {
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  MulticastObject* mc = FindMulticastLocked(mcHandle);
  if (mc == nullptr) return CUDA_ERROR_INVALID_VALUE;
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
  return BindLocked(mc, mcOffset, m->handle, m->offset + (uintptr_t(memptr) - m->base), size,
                    flags);
}

CUresult CUDAAPI cuMulticastUnbind(CUmemGenericAllocationHandle mcHandle, CUdevice dev,
                                   size_t mcOffset, size_t size) {
  ApiLock api;
  if (CUresult r = RequireMulticast(); r != CUDA_SUCCESS) return r;
  MulticastObject* mc = FindMulticastLocked(mcHandle);
  if (mc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  int physical;
  if (CUresult r = PhysicalDevice(dev, &physical); r != CUDA_SUCCESS) return r;
  if (!InTeam(*mc, physical)) return CUDA_ERROR_INVALID_DEVICE;
  const size_t g = D().Granularity();
  if (size == 0 || size % g != 0 || mcOffset % g != 0 || mcOffset > mc->size ||
      size > mc->size - mcOffset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // The range must hold whole bindings of the device (the driver leaves other ranges
  // undefined; the model refuses them).
  for (const MulticastBinding& b : mc->bindings) {
    if (b.device != physical) continue;
    bool overlaps = mcOffset < b.mc_offset + b.size && b.mc_offset < mcOffset + size;
    bool inside = b.mc_offset >= mcOffset && b.mc_offset + b.size <= mcOffset + size;
    if (overlaps && !inside) return CUDA_ERROR_INVALID_VALUE;
  }
  std::erase_if(mc->bindings, [&](const MulticastBinding& b) {
    return b.device == physical && b.mc_offset >= mcOffset &&
           b.mc_offset + b.size <= mcOffset + size;
  });
  return CUDA_SUCCESS;
}

}  // extern "C"
