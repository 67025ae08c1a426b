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
#include "sim/cuda/model.h"
#include "sim/manifest.h"

namespace hami::sim {

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

CUresult LoadModule(CUmodule* out, const void* image, size_t size_hint) {
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  Driver& d = D();
  auto* m = new CUmod_st{};
  m->ctx = ctx;
  const char* text = static_cast<const char*>(image);
  Manifest manifest;
  if (IsManifest(text)) {
    size_t n = size_hint != 0 ? size_hint : std::strlen(text);
    auto parsed = ParseManifest(std::string_view(text, n));
    if (!parsed.ok()) {
      g_log.Log(LogLevel::kError, "%s", parsed.error().message().c_str());
      delete m;
      return CUDA_ERROR_INVALID_IMAGE;
    }
    manifest = std::move(parsed).value();
    m->manifest = true;
    m->manifest_kernels = manifest.kernels;
  }
  // Code and constant banks of a loaded module occupy device memory: one granule.
  m->charge = d.Granularity();
  if (CUresult r = d.Charge(ctx->device, m->charge); r != CUDA_SUCCESS) {
    delete m;
    return r;
  }
  d.Register(m, HandleKind::kModule);
  for (auto& [name, bytes] : manifest.globals) {
    CUdeviceptr p;
    api.lock().unlock();
    CUresult r = cuMemAlloc_v2(&p, bytes);
    api.lock().lock();
    if (r != CUDA_SUCCESS) {
      DestroyModuleLocked(m);
      return r;
    }
    d.allocations[uintptr_t(p)].kind = AllocKind::kModuleGlobal;
    m->globals[name] = {p, bytes};
  }
  *out = m;
  return CUDA_SUCCESS;
}

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
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(f, HandleKind::kFunction)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (f->module->ctx != s->ctx) return CUDA_ERROR_INVALID_HANDLE;
  return LaunchLocked(api, f, grid, block, smem, s, cooperative);
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

CUresult LaunchLocked(ApiLock& api, CUfunc_st* func, const unsigned grid[3],
                      const unsigned block[3], unsigned shared_mem, CUstream_st* s,
                      bool cooperative) {
  Driver& d = D();
  const DeviceSpec& spec = d.spec(s->ctx->device);
  if (CUresult r = CheckDims(spec, grid, block, shared_mem, func->max_dynamic_smem);
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

void DestroyModuleLocked(CUmod_st* m) {
  Driver& d = D();
  for (auto& [name, f] : m->functions) {
    d.Unregister(f);
    delete f;
  }
  for (auto& [name, g] : m->globals) {
    auto it = d.allocations.find(uintptr_t(g.first));
    if (it != d.allocations.end()) {
      it->second.kind = AllocKind::kDevice;
      FreeLocked(uintptr_t(g.first), false);
    }
  }
  d.Uncharge(m->ctx->device, m->charge);
  d.Unregister(m);
  delete m;
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

CUresult CUDAAPI cuModuleLoadData(CUmodule* module, const void* image) {
  return LoadModule(module, image, 0);
}

CUresult CUDAAPI cuModuleLoadDataEx(CUmodule* module, const void* image, unsigned int numOptions,
                                    CUjit_option* options, void** optionValues) {
  if (numOptions > 0 && (options == nullptr || optionValues == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return LoadModule(module, image, 0);
}

CUresult CUDAAPI cuModuleLoadFatBinary(CUmodule* module, const void* fatCubin) {
  return LoadModule(module, fatCubin, 0);
}

CUresult CUDAAPI cuModuleLoad(CUmodule* module, const char* fname) {
  if (module == nullptr || fname == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto image = ReadFileToString(fname, 256u << 20);
  if (!image.ok()) {
    g_log.Log(LogLevel::kWarn, "cuModuleLoad: %s", image.error().message().c_str());
    return image.error().sys_errno() == ENOENT ? CUDA_ERROR_FILE_NOT_FOUND
                                               : CUDA_ERROR_INVALID_VALUE;
  }
  if (image->empty()) return CUDA_ERROR_INVALID_IMAGE;
  return LoadModule(module, image->c_str(), image->size());
}

CUresult CUDAAPI cuModuleUnload(CUmodule m) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  DestroyModuleLocked(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule m, const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->functions.find(name);
  if (it == m->functions.end()) {
    uint64_t wave_ns = 0;
    if (m->manifest) {
      auto k = m->manifest_kernels.find(name);
      if (k == m->manifest_kernels.end()) return CUDA_ERROR_NOT_FOUND;
      wave_ns = k->second;
    }
    auto* f = new CUfunc_st{m, name, wave_ns};
    D().Register(f, HandleKind::kFunction);
    it = m->functions.emplace(name, f).first;
  }
  *hfunc = it->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule m,
                                      const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->globals.find(name);
  if (it == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr != nullptr) *dptr = it->second.first;
  if (bytes != nullptr) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction f) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(f, HandleKind::kFunction)) return CUDA_ERROR_INVALID_HANDLE;
  const DeviceProfile& p = *D().spec(f->module->ctx->device).profile;
  switch (attrib) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK:
      *pi = 1024;
      break;
    case CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_CONST_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS:
      *pi = 32;
      break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION:
      *pi = p.cc_major * 10 + p.cc_minor;
      break;
    case CU_FUNC_ATTRIBUTE_CACHE_MODE_CA:
      *pi = 0;
      break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      *pi = f->max_dynamic_smem;
      break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      *pi = f->carveout;
      break;
    default:
      if (int(attrib) < 0 || int(attrib) >= int(CU_FUNC_ATTRIBUTE_MAX)) {
        return CUDA_ERROR_INVALID_VALUE;
      }
      *pi = 0;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetAttribute(CUfunction f, CUfunction_attribute attrib, int value) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(f, HandleKind::kFunction)) return CUDA_ERROR_INVALID_HANDLE;
  const DeviceProfile& p = *D().spec(f->module->ctx->device).profile;
  if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES) {
    if (value < 0 || value > p.shared_mem_per_block_optin) return CUDA_ERROR_INVALID_VALUE;
    f->max_dynamic_smem = value;
    return CUDA_SUCCESS;
  }
  if (attrib == CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT) {
    if (value < -1 || value > 100) return CUDA_ERROR_INVALID_VALUE;  // percent, or -1
    f->carveout = value;
    return CUDA_SUCCESS;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuFuncGetName(const char** name, CUfunction f) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(f, HandleKind::kFunction)) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction f, CUfunc_cache) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  return D().Live(f, HandleKind::kFunction) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_HANDLE;
}

CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction f,
                                                             int blockSize,
                                                             size_t dynamicSMemSize) {
  if (numBlocks == nullptr || blockSize <= 0 || blockSize > 1024) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(f, HandleKind::kFunction)) return CUDA_ERROR_INVALID_HANDLE;
  unsigned block[3] = {unsigned(blockSize), 1, 1};
  *numBlocks = int(ResidentBlocksPerSm(*D().spec(f->module->ctx->device).profile, block,
                                       unsigned(dynamicSMemSize)));
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
