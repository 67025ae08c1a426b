// Modules, functions and kernel launches, and the execution model.
//
// Execution model: a device runs one kernel at a time, from any process, in the order the
// launches reached it (the shared state keeps each device's timeline). A launch of grid G
// and block B occupies the device for
//     launch_ns + waves * wave_ns,   waves = ceil(blocks(G) / (SMs * resident_blocks(B)))
// where resident_blocks is how many blocks of B fit on one SM (threads, shared memory and
// the per-SM block limit). wave_ns is HAMI_SIM_WAVE_NS unless the module manifest gives the
// kernel its own. The launch call returns at once; the work completes in the future and
// synchronization waits for it. A stream accepts HAMI_SIM_QUEUE_DEPTH pending launches; the
// next launch call blocks until the oldest completes, as a full command queue does.
#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "common/file.h"
#include "common/strings.h"
#include "sim/cuda/model.h"
#include "sim/manifest.h"

namespace hami::sim {

namespace {

CUresult CheckDims(const DeviceSpec& spec, const unsigned grid[3], const unsigned block[3],
                   unsigned shared_mem, int max_dynamic_smem) {
  for (int i = 0; i < 3; ++i) {
    if (grid[i] == 0 || block[i] == 0) return CUDA_ERROR_INVALID_VALUE;
  }
  if (block[0] > 1024 || block[1] > 1024 || block[2] > 64 ||
      uint64_t(block[0]) * block[1] * block[2] > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (grid[0] > 2147483647u || grid[1] > 65535 || grid[2] > 65535) return CUDA_ERROR_INVALID_VALUE;
  if (shared_mem > unsigned(std::min(max_dynamic_smem, spec.profile->shared_mem_per_block_optin))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

uint64_t ResidentBlocksPerSm(const DeviceProfile& p, const unsigned block[3], unsigned smem) {
  uint64_t threads = RoundUp(uint64_t(block[0]) * block[1] * block[2], 32);
  uint64_t by_threads = uint64_t(p.max_threads_per_sm) / threads;
  uint64_t by_smem = smem == 0 ? UINT64_MAX : uint64_t(p.shared_mem_per_sm) / (smem + 1024);
  return std::max<uint64_t>(1, std::min({by_threads, by_smem, uint64_t(p.max_blocks_per_sm)}));
}

CUresult RecordKernelNode(CUstream_st* s, CUfunc_st* f, const unsigned grid[3],
                          const unsigned block[3], unsigned smem) {
  CUgraphNode_st* n = AppendCaptureNode(s, NodeKind::kKernel);
  n->func = f;
  std::copy(grid, grid + 3, n->grid);
  std::copy(block, block + 3, n->block);
  n->shared_mem = smem;
  return CUDA_SUCCESS;
}

CUresult Launch(CUfunction f, const unsigned grid[3], const unsigned block[3], unsigned smem,
                CUstream stream, void** params, void** extra, bool ptsz, bool cooperative) {
  if (params != nullptr && extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (func->module->ctx != s->ctx) return CUDA_ERROR_INVALID_HANDLE;
  return LaunchLocked(api, func, grid, block, smem, s, cooperative);
}

CUresult HostFunc(CUstream stream, CUhostFn fn, void* data, bool ptsz) {
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != nullptr) {
    CUgraphNode_st* n = AppendCaptureNode(s, NodeKind::kHost);
    n->host_fn = fn;
    n->host_data = data;
    return CUDA_SUCCESS;
  }
  // The function runs when the stream reaches it; the model runs it then, on the caller's
  // thread, so later work of the stream is ordered after it.
  WaitUnlocked(api, StreamTail(s));
  api.lock().unlock();
  fn(data);
  api.lock().lock();
  return CUDA_SUCCESS;
}

}  // namespace

int64_t KernelDurationNs(const DeviceSpec& spec, const SimOptions& options, uint64_t wave_ns,
                         const unsigned grid[3], const unsigned block[3], unsigned shared_mem) {
  // The longest kernel the model runs (about 13 days): the largest legal grids would
  // otherwise overflow the device timeline.
  constexpr uint64_t kMaxKernelNs = uint64_t(1) << 50;
  const DeviceProfile& p = *spec.profile;
  uint64_t blocks = uint64_t(grid[0]) * grid[1] * grid[2];
  uint64_t resident = uint64_t(p.sm_count) * ResidentBlocksPerSm(p, block, shared_mem);
  uint64_t waves = (blocks + resident - 1) / resident;
  uint64_t per_wave = wave_ns != 0 ? wave_ns : options.wave_ns;
  if (waves > (kMaxKernelNs - options.launch_ns) / per_wave) return int64_t(kMaxKernelNs);
  return int64_t(options.launch_ns + waves * per_wave);
}

CUresult FunctionAttribute(const DeviceProfile& p, const ImageKernel* described,
                           const FunctionSettings& settings, CUfunction_attribute attrib,
                           int* out) {
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *out = 1024;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *out = described != nullptr && described->num_regs > 0 ? described->num_regs : 32;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *out = p.cc_major * 10 + p.cc_minor;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *out = settings.max_dynamic_smem;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *out = settings.carveout;
      return CUDA_SUCCESS;
    default: {
      if (EnumValue(attrib) < 0 || EnumValue(attrib) >= int(CU_FUNC_ATTRIBUTE_MAX)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      // Shared, constant and local sizes, cache mode, cluster attributes: 0 unless set.
      auto it = settings.other.find(int(attrib));
      *out = it != settings.other.end() ? it->second : 0;
      return CUDA_SUCCESS;
    }
  }
}

CUresult SetFunctionAttribute(const DeviceProfile& p, CUfunction_attribute attrib, int value,
                              FunctionSettings* settings) {
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      if (value < 0 || value > p.shared_mem_per_block_optin) return CUDA_ERROR_INVALID_VALUE;
      settings->max_dynamic_smem = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;  // percent, or -1
      settings->carveout = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      if (value < 0 || value > 16) return CUDA_ERROR_INVALID_VALUE;
      settings->other[int(attrib)] = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
      if (value != 0 && value != 1) return CUDA_ERROR_INVALID_VALUE;
      settings->other[int(attrib)] = value;
      return CUDA_SUCCESS;
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      if (value < 0 || value > 2) return CUDA_ERROR_INVALID_VALUE;
      settings->other[int(attrib)] = value;
      return CUDA_SUCCESS;
    default:
      return CUDA_ERROR_INVALID_VALUE;
  }
}

CUresult LaunchLocked(ApiLock& api, CUfunc_st* func, const unsigned grid[3],
                      const unsigned block[3], unsigned shared_mem, CUstream_st* s,
                      bool cooperative) {
  Driver& d = D();
  const DeviceSpec& spec = d.spec(s->ctx->device);
  if (CUresult r = CheckDims(spec, grid, block, shared_mem, func->settings.max_dynamic_smem);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (cooperative) {
    uint64_t blocks = uint64_t(grid[0]) * grid[1] * grid[2];
    uint64_t resident =
        uint64_t(spec.profile->sm_count) * ResidentBlocksPerSm(*spec.profile, block, shared_mem);
    if (blocks > resident) return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  if (s->capture != nullptr) return RecordKernelNode(s, func, grid, block, shared_mem);
  // A full queue blocks the caller until the oldest launch completes.
  for (;;) {
    int64_t now = MonotonicNs();
    while (!s->pending.empty() && s->pending.front() <= now) s->pending.pop_front();
    if (s->pending.size() < d.options.queue_depth) break;
    uint64_t stream_id = s->id;
    CUstream_st* stream = s;
    WaitUnlocked(api, s->pending.front());
    if (!d.Live(stream, HandleKind::kStream) || stream->id != stream_id ||
        !d.Live(func, HandleKind::kFunction)) {
      return CUDA_ERROR_INVALID_HANDLE;
    }
  }
  int64_t duration = KernelDurationNs(spec, d.options, func->wave_ns, grid, block, shared_mem);
  int64_t earliest = std::max(MonotonicNs(), StreamTail(s));
  if (CUresult r = d.EnsureSlot(); r != CUDA_SUCCESS) return r;
  int64_t end = d.state->ReserveBusy(d.slot, s->ctx->device, earliest, duration);
  s->tail_ns = end;
  s->pending.push_back(end);
  return CUDA_SUCCESS;
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction f) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  const DeviceProfile& p = *D().spec(func->module->ctx->device).profile;
  return FunctionAttribute(p, DescribedKernel(*func->module->image, func->name), func->settings,
                           attrib, pi);
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute attrib, int value) {
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  const DeviceProfile& p = *D().spec(func->module->ctx->device).profile;
  return SetFunctionAttribute(p, attrib, value, &func->settings);
}

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction f) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  *name = func->name.c_str();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction f, CUfunc_cache config) {
  if (EnumValue(config) < 0 || EnumValue(config) > 3) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* func;
  return FunctionForCallLocked(f, &func);
}

CUresult CUDAAPI cuFuncSetSharedMemConfig(CUfunction f, CUsharedconfig config) {
  if (EnumValue(config) < 0 || EnumValue(config) > 2) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* func;
  return FunctionForCallLocked(f, &func);
}

// ---- occupancy ----

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction f,
                                                                      int blockSize,
                                                                      size_t dynamicSMemSize,
                                                                      unsigned int flags) {
  if (numBlocks == nullptr || blockSize <= 0 || blockSize > 1024 ||
      (flags & ~unsigned(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  const DeviceProfile& p = *D().spec(func->module->ctx->device).profile;
  if (dynamicSMemSize > size_t(p.shared_mem_per_block_optin)) {
    *numBlocks = 0;
    return CUDA_SUCCESS;
  }
  unsigned block[3] = {unsigned(blockSize), 1, 1};
  *numBlocks = int(ResidentBlocksPerSm(p, block, unsigned(dynamicSMemSize)));
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction f,
                                                             int blockSize,
                                                             size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, f, blockSize,
                                                              dynamicSMemSize, 0);
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSizeWithFlags(
    int* minGridSize, int* blockSize, CUfunction f, CUoccupancyB2DSize blockSizeToDynamicSMemSize,
    size_t dynamicSMemSize, int blockSizeLimit, unsigned int flags) {
  if (minGridSize == nullptr || blockSize == nullptr || blockSizeLimit < 0 ||
      (flags & ~unsigned(CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const DeviceProfile* p;
  {
    ApiLock api;
    CUfunc_st* func;
    if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
    p = D().spec(func->module->ctx->device).profile;
  }
  int limit = blockSizeLimit == 0 ? 1024 : std::min(blockSizeLimit, 1024);
  // The block size with the most resident threads per SM (the largest on a tie). The
  // callback runs with the driver unlocked.
  int best = 0, best_blocks = 0;
  uint64_t best_threads = 0;
  for (int b = 32; b <= limit; b += 32) {
    size_t smem =
        blockSizeToDynamicSMemSize != nullptr ? blockSizeToDynamicSMemSize(b) : dynamicSMemSize;
    if (smem > size_t(p->shared_mem_per_block_optin)) continue;
    unsigned block[3] = {unsigned(b), 1, 1};
    uint64_t blocks = ResidentBlocksPerSm(*p, block, unsigned(smem));
    if (blocks * uint64_t(b) >= best_threads) {
      best_threads = blocks * uint64_t(b);
      best = b;
      best_blocks = int(blocks);
    }
  }
  *blockSize = best;
  *minGridSize = best_blocks * p->sm_count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialBlockSize(int* minGridSize, int* blockSize, CUfunction f,
                                                  CUoccupancyB2DSize blockSizeToDynamicSMemSize,
                                                  size_t dynamicSMemSize, int blockSizeLimit) {
  return cuOccupancyMaxPotentialBlockSizeWithFlags(
      minGridSize, blockSize, f, blockSizeToDynamicSMemSize, dynamicSMemSize, blockSizeLimit, 0);
}

// The dynamic shared memory each of `numBlocks` blocks may use with all of them resident.
CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction f,
                                                         int numBlocks, int blockSize) {
  if (dynamicSmemSize == nullptr || numBlocks <= 0 || blockSize <= 0 || blockSize > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  const DeviceProfile& p = *D().spec(func->module->ctx->device).profile;
  unsigned block[3] = {unsigned(blockSize), 1, 1};
  if (ResidentBlocksPerSm(p, block, 0) < uint64_t(numBlocks)) {
    *dynamicSmemSize = 0;
    return CUDA_SUCCESS;
  }
  size_t per_block = size_t(p.shared_mem_per_sm) / size_t(numBlocks);
  per_block = per_block > 1024 ? per_block - 1024 : 0;  // the reservation of each block
  *dynamicSmemSize = std::min(per_block, size_t(p.shared_mem_per_block_optin));
  return CUDA_SUCCESS;
}

// Clusters: up to 8 blocks (16 with CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) on
// devices of compute capability 9.0 and later.
static int MaxClusterSize(const DeviceProfile& p, const FunctionSettings& s) {
  if (p.cc_major < 9) return 1;
  auto it = s.other.find(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
  return it != s.other.end() && it->second != 0 ? 16 : 8;
}

static CUresult ClusterQuery(const CUlaunchConfig* config, CUfunction f, const DeviceProfile** p,
                             FunctionSettings* settings, unsigned* cluster_blocks,
                             unsigned block[3]) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) return r;
  *p = D().spec(func->module->ctx->device).profile;
  *settings = func->settings;
  *cluster_blocks = 1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) {
      const auto& c = config->attrs[i].value.clusterDim;
      *cluster_blocks = std::max(1u, c.x) * std::max(1u, c.y) * std::max(1u, c.z);
    }
  }
  block[0] = config->blockDimX;
  block[1] = config->blockDimY;
  block[2] = config->blockDimZ;
  if (block[0] == 0 || block[1] == 0 || block[2] == 0 ||
      uint64_t(block[0]) * block[1] * block[2] > 1024) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxPotentialClusterSize(int* clusterSize, CUfunction f,
                                                    const CUlaunchConfig* config) {
  if (clusterSize == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceProfile* p;
  FunctionSettings settings;
  unsigned cluster, block[3];
  if (CUresult r = ClusterQuery(config, f, &p, &settings, &cluster, block); r != CUDA_SUCCESS) {
    return r;
  }
  *clusterSize = MaxClusterSize(*p, settings);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* numClusters, CUfunction f,
                                              const CUlaunchConfig* config) {
  if (numClusters == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const DeviceProfile* p;
  FunctionSettings settings;
  unsigned cluster, block[3];
  if (CUresult r = ClusterQuery(config, f, &p, &settings, &cluster, block); r != CUDA_SUCCESS) {
    return r;
  }
  if (cluster > unsigned(MaxClusterSize(*p, settings))) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  uint64_t resident =
      uint64_t(p->sm_count) * ResidentBlocksPerSm(*p, block, config->sharedMemBytes);
  *numClusters = int(resident / cluster);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchKernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                                unsigned int bx, unsigned int by, unsigned int bz,
                                unsigned int smem, CUstream s, void** params, void** extra) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, smem, s, params, extra, false, false);
}

CUresult CUDAAPI cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                     unsigned int gz, unsigned int bx, unsigned int by,
                                     unsigned int bz, unsigned int smem, CUstream s, void** params,
                                     void** extra) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, smem, s, params, extra, true, false);
}

static CUresult LaunchEx(const CUlaunchConfig* config, CUfunction f, void** params, void** extra,
                         bool ptsz) {
  if (config == nullptr || (config->numAttrs > 0 && config->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  bool cooperative = false;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    if (config->attrs[i].id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE &&
        config->attrs[i].value.cooperative != 0) {
      cooperative = true;
    }
  }
  const unsigned grid[3] = {config->gridDimX, config->gridDimY, config->gridDimZ};
  const unsigned block[3] = {config->blockDimX, config->blockDimY, config->blockDimZ};
  return Launch(f, grid, block, config->sharedMemBytes, config->hStream, params, extra, ptsz,
                cooperative);
}

CUresult CUDAAPI cuLaunchKernelEx(const CUlaunchConfig* config, CUfunction f, void** params,
                                  void** extra) {
  return LaunchEx(config, f, params, extra, false);
}
CUresult CUDAAPI cuLaunchKernelEx_ptsz(const CUlaunchConfig* config, CUfunction f, void** params,
                                       void** extra) {
  return LaunchEx(config, f, params, extra, true);
}

CUresult CUDAAPI cuLaunchCooperativeKernel(CUfunction f, unsigned int gx, unsigned int gy,
                                           unsigned int gz, unsigned int bx, unsigned int by,
                                           unsigned int bz, unsigned int smem, CUstream s,
                                           void** params) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, smem, s, params, nullptr, false, true);
}

CUresult CUDAAPI cuLaunchCooperativeKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy,
                                                unsigned int gz, unsigned int bx, unsigned int by,
                                                unsigned int bz, unsigned int smem, CUstream s,
                                                void** params) {
  const unsigned grid[3] = {gx, gy, gz}, block[3] = {bx, by, bz};
  return Launch(f, grid, block, smem, s, params, nullptr, true, true);
}

CUresult CUDAAPI cuLaunchCooperativeKernelMultiDevice(CUDA_LAUNCH_PARAMS* list,
                                                      unsigned int numDevices, unsigned int) {
  if (list == nullptr || numDevices == 0) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < numDevices; ++i) {
    const CUDA_LAUNCH_PARAMS& p = list[i];
    const unsigned grid[3] = {p.gridDimX, p.gridDimY, p.gridDimZ};
    const unsigned block[3] = {p.blockDimX, p.blockDimY, p.blockDimZ};
    if (CUresult r = Launch(p.function, grid, block, p.sharedMemBytes, p.hStream, p.kernelParams,
                            nullptr, false, true);
        r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  return HostFunc(s, fn, data, false);
}
CUresult CUDAAPI cuLaunchHostFunc_ptsz(CUstream s, CUhostFn fn, void* data) {
  return HostFunc(s, fn, data, true);
}

}  // extern "C"
