// Virtual memory management (cuMemCreate and the calls that map what it made).
//
// What is charged: a physical allocation on a device, its size, admitted before the driver
// allocates and refused with CUDA_ERROR_OUT_OF_MEMORY past the limit (the driver is not
// asked). It stays charged while any handle to it is unreleased (cuMemCreate's and each
// cuMemRetainAllocationHandle's) or any mapping of it is in place (cuMemMap), and is given
// back when the last of those goes. Host allocations are not charged. A NULL handle or
// property, or a size of 0, goes to the driver, which answers.
#pragma once

#include <cuda.h>

#include "vgpu/accounting.h"

namespace hami::vgpu {

// The CUDA ordinal a physical allocation of `prop` is charged to; -1: not charged (a NULL
// property or a host allocation).
int PhysicalDevice(const CUmemAllocationProp* prop);

template <typename Call>
CUresult CreatePhysical(Runtime& rt, CUmemGenericAllocationHandle* handle, size_t size,
                        const CUmemAllocationProp* prop, Call call) {
  const int device = PhysicalDevice(prop);
  if (handle == nullptr || size == 0 || device < 0) return call();
  if (!Admit(rt, device, size, UsageKind::kVmm)) return CUDA_ERROR_OUT_OF_MEMORY;
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r != CUDA_SUCCESS) {
    Return(rt, device, size, UsageKind::kVmm);
    return r;
  }
  rt.ledger.AddPhysical(*handle, device, size);
  return r;
}

template <typename Call>
CUresult ReleasePhysical(Runtime& rt, CUmemGenericAllocationHandle handle, Call call) {
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r == CUDA_SUCCESS) Apply(rt, rt.ledger.ReleasePhysical(handle));
  return r;
}

// Another handle to the same memory: it must be released too.
template <typename Call>
CUresult RetainPhysical(Runtime& rt, CUmemGenericAllocationHandle* handle, Call call) {
  CUresult r = call();
  if (r == CUDA_SUCCESS && handle != nullptr) rt.ledger.RetainPhysical(*handle);
  return r;
}

template <typename Call>
CUresult MapPhysical(Runtime& rt, CUdeviceptr ptr, size_t size, CUmemGenericAllocationHandle handle,
                     Call call) {
  CUresult r = call();
  if (r == CUDA_SUCCESS) rt.ledger.Map(ptr, size, handle);
  return r;
}

// Every mapping that starts inside [ptr, ptr + size) is gone.
template <typename Call>
CUresult UnmapPhysical(Runtime& rt, CUdeviceptr ptr, size_t size, Call call) {
  CUresult r;
  {
    Allocating allocating(rt);
    r = call();
  }
  if (r == CUDA_SUCCESS) Apply(rt, rt.ledger.Unmap(ptr, size));
  return r;
}

}  // namespace hami::vgpu
