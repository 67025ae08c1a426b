// Batched memory operations of CUDA 12.8 and 13: cuMemcpyBatchAsync (v1 with its failure
// index, v2 without), cuMemPrefetchBatchAsync, cuMemDiscardBatchAsync and
// cuMemDiscardAndPrefetchBatchAsync, each with its per-thread-stream variant.
//
// A batch is checked whole first (counts, the attribute or location index arrays, flags, the
// stream: not the legacy NULL stream) and refused with CUDA_ERROR_INVALID_VALUE, nothing done,
// when any of that is wrong. Its operations then go through the single-operation calls the
// model already has (cuMemcpyAsync, cuMemPrefetchAsync_v2) in order; a copy that fails stops
// the batch, and v1 reports its index. Discarding is allowed on managed memory only and
// changes nothing here: what a discarded range holds is undefined, so keeping it is one
// answer.
#include <cstdint>

#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

// A batch's per-operation index array (attrsIdxs, prefetchLocIdxs): starts at 0, strictly
// increasing, every entry a valid operation index.
bool IndexesValid(const size_t* idxs, size_t n, size_t count) {
  if (n == 0 || idxs == nullptr || idxs[0] != 0) return false;
  for (size_t i = 0; i < n; ++i) {
    if (idxs[i] >= count || (i > 0 && idxs[i] <= idxs[i - 1])) return false;
  }
  return true;
}

bool StreamAllowed(CUstream s) { return s != nullptr && s != CU_STREAM_LEGACY; }

CUresult CopyBatch(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes, size_t count,
                   CUmemcpyAttributes* attrs, size_t* attrs_idxs, size_t num_attrs,
                   size_t* fail_idx, CUstream stream, bool ptsz) {
  if (fail_idx != nullptr) *fail_idx = SIZE_MAX;
  if (count == 0 || dsts == nullptr || srcs == nullptr || sizes == nullptr || attrs == nullptr ||
      !IndexesValid(attrs_idxs, num_attrs, count) || !StreamAllowed(stream)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < num_attrs; ++i) {
    const CUmemcpyAttributes& a = attrs[i];
    if (a.srcAccessOrder == CU_MEMCPY_SRC_ACCESS_ORDER_INVALID ||
        a.srcAccessOrder > CU_MEMCPY_SRC_ACCESS_ORDER_ANY ||
        (a.flags & ~unsigned(CU_MEMCPY_FLAG_PREFER_OVERLAP_WITH_COMPUTE)) != 0) {
      if (fail_idx != nullptr) *fail_idx = attrs_idxs[i];
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0) {
      if (fail_idx != nullptr) *fail_idx = i;
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  for (size_t i = 0; i < count; ++i) {
    CUresult r = ptsz ? cuMemcpyAsync_ptsz(dsts[i], srcs[i], sizes[i], stream)
                      : cuMemcpyAsync(dsts[i], srcs[i], sizes[i], stream);
    if (r != CUDA_SUCCESS) {
      if (fail_idx != nullptr) *fail_idx = i;
      return r;
    }
  }
  return CUDA_SUCCESS;
}

bool IsManaged(CUdeviceptr p) {
  unsigned managed = 0;
  return cuPointerGetAttribute(&managed, CU_POINTER_ATTRIBUTE_IS_MANAGED, p) == CUDA_SUCCESS &&
         managed != 0;
}

// Prefetches (`prefetch`) and discards (`discard`) of a batch of ranges.
CUresult RangeBatch(CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* locs,
                    size_t* loc_idxs, size_t num_locs, unsigned long long flags, CUstream stream,
                    bool discard, bool prefetch, bool ptsz) {
  if (count == 0 || dptrs == nullptr || sizes == nullptr || flags != 0 || !StreamAllowed(stream)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (prefetch && (locs == nullptr || !IndexesValid(loc_idxs, num_locs, count))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < count; ++i) {
    if (sizes[i] == 0 || (discard && !IsManaged(dptrs[i]))) return CUDA_ERROR_INVALID_VALUE;
  }
  if (!prefetch) return CUDA_SUCCESS;
  size_t loc = 0;
  for (size_t i = 0; i < count; ++i) {
    while (loc + 1 < num_locs && loc_idxs[loc + 1] <= i) ++loc;
    CUresult r = ptsz ? cuMemPrefetchAsync_v2_ptsz(dptrs[i], sizes[i], locs[loc], 0, stream)
                      : cuMemPrefetchAsync_v2(dptrs[i], sizes[i], locs[loc], 0, stream);
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

}  // namespace

}  // namespace hami::sim

using namespace hami::sim;  // NOLINT: the exported C API below

extern "C" {

CUresult CUDAAPI cuMemcpyBatchAsync(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                    size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                    size_t numAttrs, size_t* failIdx, CUstream hStream) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, false);
}
CUresult CUDAAPI cuMemcpyBatchAsync_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                         size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                         size_t numAttrs, size_t* failIdx, CUstream hStream) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, failIdx, hStream, true);
}
CUresult CUDAAPI cuMemcpyBatchAsync_v2(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                       size_t count, CUmemcpyAttributes* attrs, size_t* attrsIdxs,
                                       size_t numAttrs, CUstream hStream) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream, false);
}
CUresult CUDAAPI cuMemcpyBatchAsync_v2_ptsz(CUdeviceptr* dsts, CUdeviceptr* srcs, size_t* sizes,
                                            size_t count, CUmemcpyAttributes* attrs,
                                            size_t* attrsIdxs, size_t numAttrs, CUstream hStream) {
  return CopyBatch(dsts, srcs, sizes, count, attrs, attrsIdxs, numAttrs, nullptr, hStream, true);
}

CUresult CUDAAPI cuMemPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                         CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                         size_t numPrefetchLocs, unsigned long long flags,
                                         CUstream hStream) {
  return RangeBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                    hStream, false, true, false);
}
CUresult CUDAAPI cuMemPrefetchBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                              CUmemLocation* prefetchLocs, size_t* prefetchLocIdxs,
                                              size_t numPrefetchLocs, unsigned long long flags,
                                              CUstream hStream) {
  return RangeBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                    hStream, false, true, true);
}
CUresult CUDAAPI cuMemDiscardBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                        unsigned long long flags, CUstream hStream) {
  return RangeBatch(dptrs, sizes, count, nullptr, nullptr, 0, flags, hStream, true, false, false);
}
CUresult CUDAAPI cuMemDiscardBatchAsync_ptsz(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                             unsigned long long flags, CUstream hStream) {
  return RangeBatch(dptrs, sizes, count, nullptr, nullptr, 0, flags, hStream, true, false, true);
}
CUresult CUDAAPI cuMemDiscardAndPrefetchBatchAsync(CUdeviceptr* dptrs, size_t* sizes, size_t count,
                                                   CUmemLocation* prefetchLocs,
                                                   size_t* prefetchLocIdxs, size_t numPrefetchLocs,
                                                   unsigned long long flags, CUstream hStream) {
  return RangeBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                    hStream, true, true, false);
}
CUresult CUDAAPI cuMemDiscardAndPrefetchBatchAsync_ptsz(
    CUdeviceptr* dptrs, size_t* sizes, size_t count, CUmemLocation* prefetchLocs,
    size_t* prefetchLocIdxs, size_t numPrefetchLocs, unsigned long long flags, CUstream hStream) {
  return RangeBatch(dptrs, sizes, count, prefetchLocs, prefetchLocIdxs, numPrefetchLocs, flags,
                    hStream, true, true, true);
}

}  // extern "C"
