#include "vgpu/spill.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "common/strings.h"
#include "vgpu/accounting.h"
#include "vgpu/watch.h"

namespace hami::vgpu {

namespace {

// The host budget is charged in whole pages, as pinned memory is taken.
uint64_t HostPage() {
  static const uint64_t page = [] {
    const long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? uint64_t(p) : uint64_t(4096);
  }();
  return page;
}

// Says, once per episode, why an allocation past the device budget failed after all.
void SayRefused(Runtime& rt, int device, uint64_t bytes, const char* why) {
  if (rt.spills.refusal_said.exchange(true, std::memory_order_relaxed)) return;
  g_log.Log(LogLevel::kWarn,
            "device %d: an allocation of %llu bytes does not fit the device budget and is not "
            "served from host memory: %s; CUDA_ERROR_OUT_OF_MEMORY",
            device, static_cast<unsigned long long>(bytes), why);
}

}  // namespace

uint64_t HostBudgetOf(const std::optional<uint64_t>& host_limit,
                      std::span<const uint64_t> memory_limits) {
  if (host_limit) return *host_limit;
  uint64_t sum = 0;
  for (const uint64_t limit : memory_limits) {
    if (limit != region::layout::kZeroBudgetBytes) sum = SaturatingAdd(sum, limit);
  }
  return sum;
}

uint64_t HostBudget(const Config& config, int device_count) {
  if (!config.oversubscribe) return 0;
  const size_t n = size_t(std::clamp(device_count, 0, int(kMaxDevices)));
  return HostBudgetOf(config.host_limit, std::span(config.memory_limit).first(n));
}

CUresult SpillAllocation(Runtime& rt, CUdeviceptr* dptr, uint64_t bytes) {
  if (!rt.config.oversubscribe || dptr == nullptr || bytes == 0) return CUDA_ERROR_OUT_OF_MEMORY;
  int dev = -1;
  CUcontext ctx = nullptr;
  if (CurrentDevice(rt, &dev, &ctx) != CUDA_SUCCESS) return CUDA_ERROR_OUT_OF_MEMORY;
  region::Region* reg = ViewRegion(rt);
  const int index = RegionIndex(rt, dev);
  // Only a budget that was read and admits nothing more spills: a process or device refused,
  // held closed (a zero budget), or held back by the watcher is refused on the host too.
  if (reg == nullptr || BooksFor(rt, dev) != Books::kAccounted || WatcherRefuses(rt, index)) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint64_t limit = LimitOf(rt, dev);
  if (limit == 0 || limit == region::layout::kZeroBudgetBytes) return CUDA_ERROR_OUT_OF_MEMORY;
  if (reg->file().policy.oversubscribe.load(std::memory_order_relaxed) == 0) {
    char why[128];
    std::snprintf(why, sizeof(why), "the container's shared region was made without %s",
                  limits::KeyName(limits::Key::kOversubscribe));
    SayRefused(rt, dev, bytes, why);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const CudaDriver* d = rt.CudaIfLoaded();
  if (d == nullptr || d->aux.cuMemHostAlloc == nullptr ||
      d->aux.cuMemHostGetDevicePointer_v2 == nullptr || d->aux.cuMemFreeHost == nullptr) {
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  const uint64_t charge = RoundUp(bytes, HostPage());
  if (reg->ReserveHost(charge) != region::Admission::kOk) {
    const region::Region::HostUse use = reg->Host();
    char why[192];
    std::snprintf(why, sizeof(why), "the host budget (%s) holds %llu of %llu bytes",
                  limits::KeyName(limits::Key::kOversubscribeHostLimit),
                  static_cast<unsigned long long>(use.spilled_bytes),
                  static_cast<unsigned long long>(reg->HostLimitInForce()));
    SayRefused(rt, dev, bytes, why);
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* host = nullptr;
  CUdeviceptr mapped = 0;
  CUresult r = d->aux.cuMemHostAlloc(&host, size_t(bytes),
                                     CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP);
  if (r == CUDA_SUCCESS) {
    r = d->aux.cuMemHostGetDevicePointer_v2(&mapped, host, 0);
    if (r != CUDA_SUCCESS) d->aux.cuMemFreeHost(host);
  }
  if (r != CUDA_SUCCESS) {
    reg->ReleaseHost(charge);
    SayRefused(rt, dev, bytes, "the driver could not give pinned host memory");
    return CUDA_ERROR_OUT_OF_MEMORY;
  }
  rt.spills.Add(mapped, Spill{host, charge, ctx, dev});
  rt.spills.refusal_said.store(false, std::memory_order_relaxed);
  const bool first = !rt.spills.spilling_said.exchange(true, std::memory_order_relaxed);
  g_log.Log(first ? LogLevel::kInfo : LogLevel::kDebug,
            "device %d: an allocation of %llu bytes past the device budget is served from host "
            "memory (%s)",
            dev, static_cast<unsigned long long>(bytes),
            limits::KeyName(limits::Key::kOversubscribe));
  *dptr = mapped;
  return CUDA_SUCCESS;
}

bool FreeSpilled(Runtime& rt, CUdeviceptr dptr, CUresult* result) {
  std::optional<Spill> s = rt.spills.Take(dptr);
  if (!s) return false;
  const CudaDriver* d = rt.CudaIfLoaded();
  *result = d != nullptr && d->aux.cuMemFreeHost != nullptr ? d->aux.cuMemFreeHost(s->host)
                                                            : CUDA_ERROR_NOT_INITIALIZED;
  if (region::Region* reg = ViewRegion(rt)) reg->ReleaseHost(s->charge);
  return true;
}

bool FreeSpilledOnStream(Runtime& rt, CUdeviceptr dptr, CUstream stream, CUresult (*sync)(CUstream),
                         CUresult* result) {
  if (!rt.spills.Contains(dptr)) return false;
  *result = sync != nullptr ? sync(stream) : CUDA_ERROR_NOT_INITIALIZED;
  if (*result != CUDA_SUCCESS) return true;
  // Another thread may have freed it meanwhile: then this free finds nothing, as the driver's
  // second free of one pointer does.
  if (!FreeSpilled(rt, dptr, result)) *result = CUDA_ERROR_INVALID_VALUE;
  return true;
}

void SpillsEndedWithContext(Runtime& rt, CUcontext ctx) {
  if (rt.spills.empty()) return;
  region::Region* reg = ViewRegion(rt);
  for (const Spill& s : rt.spills.TakeContext(ctx)) {
    if (reg != nullptr) reg->ReleaseHost(s.charge);
  }
}

}  // namespace hami::vgpu
