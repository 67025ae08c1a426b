#include "vgpu/hooks.h"

#include <algorithm>

#include "vgpu/runtime.h"

namespace hami::vgpu {

namespace {

// ---- compile-time checks of the CUDA list against the toolkit's table of every ABI ----

struct ApiRow {
  std::string_view base;  // the name cuGetProcAddress is asked for
  int version;            // the CUDA version that introduced this ABI
  int flavor;             // 1: the per-thread-default-stream variant
  std::string_view name;  // the exported name
};

constexpr ApiRow kApi[] = {
#define HAMI_CUDA_API(base, version, flavor, name) {#base, version, flavor, #name},
#include "cuda_api_table.inc"
#undef HAMI_CUDA_API
};

constexpr int ApiVersion(std::string_view name) {
  for (const ApiRow& r : kApi) {
    if (r.name == name) return r.version;
  }
  return -1;
}

#define HAMI_CUDA_HOOK(name, policy, version)                                            \
  static_assert(ApiVersion(#name) != -1, #name " is not a function the driver exports"); \
  static_assert(ApiVersion(#name) == (version),                                          \
                #name ": the version in cuda_hooks.def is not the one the toolkit gives");
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK

constexpr auto kHooks = [] {
  std::array<HookInfo, size_t(CudaHook::kCount) + size_t(NvmlHook::kCount)> a{};
  size_t i = 0;
#define HAMI_CUDA_HOOK(name, policy, version) \
  a[i] = {#name, Policy::policy, version, true, uint16_t(CudaHook::k_##name)}, ++i;
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
#define HAMI_NVML_HOOK(name, policy) \
  a[i] = {#name, Policy::policy, 0, false, uint16_t(NvmlHook::k_##name)}, ++i;
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
  return a;
}();

constexpr auto kSorted = [] {
  std::array<HookInfo, kHooks.size()> a = kHooks;
  std::sort(a.begin(), a.end(),
            [](const HookInfo& x, const HookInfo& y) { return x.name < y.name; });
  return a;
}();

constexpr bool Unique() {
  for (size_t i = 1; i < kSorted.size(); ++i) {
    if (kSorted[i - 1].name == kSorted[i].name) return false;
  }
  return true;
}
static_assert(Unique(), "a hook is listed twice");

// Wrapper addresses, in CudaHook / NvmlHook order. Taking each address makes a missing
// wrapper definition an undefined symbol, which the link (-z defs) refuses.
void* const kCudaWrappers[] = {
#define HAMI_CUDA_HOOK(name, policy, version) reinterpret_cast<void*>(&::name),
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
};

void* const kNvmlWrappers[] = {
#define HAMI_NVML_HOOK(name, policy) reinterpret_cast<void*>(&::name),
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
};

}  // namespace

const std::array<HookInfo, size_t(CudaHook::kCount) + size_t(NvmlHook::kCount)>& AllHooks() {
  return kHooks;
}

const HookInfo* HookForProc(std::string_view symbol, int cuda_version, bool per_thread) {
  if (cuda_version > CUDA_VERSION) return nullptr;  // newer ABIs than this build knows
  const ApiRow* best = nullptr;
  for (const ApiRow& r : kApi) {
    if (r.base != symbol || r.version > cuda_version) continue;
    // The per-thread variant when asked for and there is one; the default one otherwise.
    bool better = best == nullptr || (r.flavor == int(per_thread) && best->flavor != r.flavor) ||
                  (r.flavor == best->flavor && r.version > best->version);
    if (better) best = &r;
  }
  return best != nullptr ? FindHook(best->name) : nullptr;
}

namespace {

// Compares without libc (see dl.cc: this may run before anything else is ready).
int Compare(std::string_view a, std::string_view b) {
  size_t n = a.size() < b.size() ? a.size() : b.size();
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i])
      return static_cast<unsigned char>(a[i]) < static_cast<unsigned char>(b[i]) ? -1 : 1;
  }
  return a.size() == b.size() ? 0 : (a.size() < b.size() ? -1 : 1);
}

}  // namespace

const HookInfo* FindHook(std::string_view name) {
  size_t lo = 0, hi = kSorted.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = Compare(kSorted[mid].name, name);
    if (c == 0) return &kSorted[mid];
    if (c < 0) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return nullptr;
}

void* WrapperOf(const HookInfo& hook) {
  return hook.cuda ? kCudaWrappers[hook.index] : kNvmlWrappers[hook.index];
}

void* RealOf(const HookInfo& hook) {
  if (hook.cuda) {
    const CudaDriver* d = CudaIfLoaded();
    if (d == nullptr) return nullptr;
    void* const* table = reinterpret_cast<void* const*>(&d->cuda);
    return table[hook.index];
  }
  const NvmlDriver* n = NvmlIfLoaded();
  if (n == nullptr) return nullptr;
  void* const* table = reinterpret_cast<void* const*>(&n->nvml);
  return table[hook.index];
}

static_assert(sizeof(CudaReal) == sizeof(void*) * size_t(CudaHook::kCount));
static_assert(sizeof(NvmlReal) == sizeof(void*) * size_t(NvmlHook::kCount));

}  // namespace hami::vgpu
