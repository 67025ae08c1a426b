// Modules, libraries and kernels: loading images, lazy and eager loading, functions and
// globals.
//
// A module (cuModuleLoad*) belongs to one context. A library (cuLibraryLoad*) belongs to
// none: it is instantiated as one module per context that uses it — in every context at
// once when loading is eager (CUDA_MODULE_LOADING=EAGER), at the first use of one of its
// kernels, its module or a global in a context when it is lazy (the default, as in CUDA
// 12.2 and later). Every instance costs one allocation granule of device memory, as a
// module does, plus its globals. A CUkernel is valid in every context; where a CUfunction
// is expected, it names its instance in the current context.
//
// What an image holds is read from it (sim/cuda/image.h): a manifest or a readable cubin
// has only the kernels and globals it declares; any other image lets every name resolve
// (globals of unknown size get kUnknownGlobalBytes).
#include <cstdlib>
#include <cstring>

#include "common/file.h"
#include "sim/cuda/model.h"
#include "sim/manifest.h"

namespace hami::sim {

namespace {

// The size of a global an image does not describe (a cuBLAS constant table fits).
constexpr uint64_t kUnknownGlobalBytes = 64 << 10;

std::shared_ptr<const ImageInfo> FromManifest(const Manifest& m) {
  auto info = std::make_shared<ImageInfo>();
  info->format = ImageFormat::kManifest;
  info->complete = true;
  for (const auto& [name, wave_ns] : m.kernels) info->kernels[name].wave_ns = wave_ns;
  for (const auto& [name, bytes] : m.globals) info->globals[name].bytes = bytes;
  return info;
}

// What `image` holds: a manifest (a malformed one is CUDA_ERROR_INVALID_IMAGE), or whatever
// ReadImage sees in it. An image of a known format that does not read is loaded as one the
// model cannot see into, with a warning naming the problem.
CUresult DescribeImage(const void* image, size_t size_hint, std::shared_ptr<const ImageInfo>* out) {
  const char* text = static_cast<const char*>(image);
  if (IsManifest(text)) {
    size_t n = size_hint != 0 ? size_hint : std::strlen(text);
    auto parsed = ParseManifest(std::string_view(text, n));
    if (!parsed.ok()) {
      g_log.Log(LogLevel::kError, "%s", parsed.error().message().c_str());
      return CUDA_ERROR_INVALID_IMAGE;
    }
    *out = FromManifest(*parsed);
    return CUDA_SUCCESS;
  }
  const void* unwrapped = UnwrapImage(image);
  if (unwrapped == nullptr) return CUDA_ERROR_INVALID_IMAGE;
  size_t n = unwrapped == image && size_hint != 0 ? size_hint : ImageExtent(unwrapped);
  auto info = ReadImage(std::span<const uint8_t>(static_cast<const uint8_t*>(unwrapped), n));
  if (!info.ok()) {
    g_log.Log(LogLevel::kWarn,
              "loading an image the model cannot read (%s): any kernel name resolves",
              info.error().message().c_str());
    *out = std::make_shared<ImageInfo>();
    return CUDA_SUCCESS;
  }
  *out = std::make_shared<ImageInfo>(std::move(info).value());
  return CUDA_SUCCESS;
}

CUresult AddGlobalLocked(CUmod_st* m, const std::string& name, const ImageGlobal& g) {
  CUdeviceptr p;
  if (CUresult r = AllocModuleGlobalLocked(m->ctx, std::max<uint64_t>(g.bytes, 1), &p);
      r != CUDA_SUCCESS) {
    return r;
  }
  std::memset(reinterpret_cast<void*>(p), 0, size_t(std::max<uint64_t>(g.bytes, 1)));
  if (!g.init.empty()) {
    std::memcpy(reinterpret_cast<void*>(p), g.init.data(),
                std::min<size_t>(g.init.size(), size_t(g.bytes)));
  }
  m->globals[name] = {p, size_t(g.bytes)};
  return CUDA_SUCCESS;
}

CUresult LoadModule(CUmodule* out, const void* image, size_t size_hint) {
  if (out == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  std::shared_ptr<const ImageInfo> info;
  if (CUresult r = DescribeImage(image, size_hint, &info); r != CUDA_SUCCESS) return r;
  CUmod_st* m;
  if (CUresult r = InstantiateModuleLocked(ctx, std::move(info), nullptr, &m); r != CUDA_SUCCESS) {
    return r;
  }
  *out = m;
  return CUDA_SUCCESS;
}

// The loading mode cuInit chose (before it: what CUDA_MODULE_LOADING says now).
CUmoduleLoadingMode LoadingMode() {
  return D().initialized ? D().loading_mode : LoadingModeFromEnvironment();
}

void DestroyLibraryLocked(CUlib_st* lib) {
  Driver& d = D();
  while (!lib->modules.empty()) DestroyModuleLocked(lib->modules.begin()->second);
  for (auto& [name, k] : lib->kernels) {
    d.Unregister(k);
    delete k;
  }
  d.Unregister(lib);
  delete lib;
}

CUresult LoadLibrary(CUlibrary* out, const void* code, size_t size_hint, unsigned num_jit,
                     const CUjit_option* jit, void** jit_values, unsigned num_lib,
                     const CUlibraryOption* lib_options, void** lib_values) {
  if (out == nullptr || code == nullptr ||
      (num_jit > 0 && (jit == nullptr || jit_values == nullptr)) ||
      (num_lib > 0 && (lib_options == nullptr || lib_values == nullptr))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (unsigned i = 0; i < num_lib; ++i) {
    if (int(lib_options[i]) < 0 || lib_options[i] >= CU_LIBRARY_NUM_OPTIONS) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  Driver& d = D();
  std::shared_ptr<const ImageInfo> info;
  if (CUresult r = DescribeImage(code, size_hint, &info); r != CUDA_SUCCESS) return r;
  auto* lib = new CUlib_st{};
  lib->id = d.next_id++;
  lib->eager = LoadingMode() == CU_MODULE_EAGER_LOADING;
  lib->image = std::move(info);
  d.Register(lib, HandleKind::kLibrary);
  if (lib->eager) {
    std::vector<CUctx_st*> contexts;
    for (auto& [h, kind] : d.handles) {
      if (kind == HandleKind::kContext)
        contexts.push_back(static_cast<CUctx_st*>(const_cast<void*>(h)));
    }
    for (CUctx_st* ctx : contexts) {
      CUmod_st* m;
      if (CUresult r = LibraryModuleLocked(lib, ctx, &m); r != CUDA_SUCCESS) {
        DestroyLibraryLocked(lib);
        return r;
      }
    }
  }
  *out = lib;
  return CUDA_SUCCESS;
}

CUresult KernelLocked(CUkernel k, CUkern_st** out) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(k, HandleKind::kKernel)) return CUDA_ERROR_INVALID_HANDLE;
  *out = k;
  return CUDA_SUCCESS;
}

CUresult ParamInfo(const ImageInfo& image, const std::string& name, size_t index, size_t* offset,
                   size_t* size) {
  if (offset == nullptr && size == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const ImageKernel* k = DescribedKernel(image, name);
  if (k == nullptr || !k->params_known) return CUDA_ERROR_NOT_SUPPORTED;
  if (index >= k->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = k->params[index].offset;
  if (size != nullptr) *size = k->params[index].size;
  return CUDA_SUCCESS;
}

}  // namespace

CUmoduleLoadingMode LoadingModeFromEnvironment() {
  const char* v = std::getenv("CUDA_MODULE_LOADING");
  if (v == nullptr || *v == '\0' || std::strcmp(v, "LAZY") == 0) return CU_MODULE_LAZY_LOADING;
  if (std::strcmp(v, "EAGER") == 0) return CU_MODULE_EAGER_LOADING;
  g_log.Log(LogLevel::kWarn, "CUDA_MODULE_LOADING='%s' is neither EAGER nor LAZY: loading lazily",
            v);
  return CU_MODULE_LAZY_LOADING;
}

const ImageKernel* DescribedKernel(const ImageInfo& image, const std::string& name) {
  auto it = image.kernels.find(name);
  return it == image.kernels.end() ? nullptr : &it->second;
}

CUresult InstantiateModuleLocked(CUctx_st* ctx, std::shared_ptr<const ImageInfo> image,
                                 CUlib_st* library, CUmod_st** out) {
  Driver& d = D();
  auto* m = new CUmod_st{};
  m->ctx = ctx;
  m->image = std::move(image);
  m->library = library;
  // Code and constant banks of a loaded module occupy device memory: one granule.
  m->charge = d.Granularity();
  if (CUresult r = d.Charge(ctx->device, m->charge); r != CUDA_SUCCESS) {
    delete m;
    return r;
  }
  d.Register(m, HandleKind::kModule);
  if (library != nullptr) library->modules[ctx->id] = m;
  if (m->image->complete) {
    for (const auto& [name, g] : m->image->globals) {
      if (CUresult r = AddGlobalLocked(m, name, g); r != CUDA_SUCCESS) {
        DestroyModuleLocked(m);
        return r;
      }
    }
  }
  *out = m;
  return CUDA_SUCCESS;
}

void DestroyModuleLocked(CUmod_st* m) {
  Driver& d = D();
  for (auto& [name, f] : m->functions) {
    d.Unregister(f);
    delete f;
  }
  for (auto& [name, g] : m->globals) FreeModuleGlobalLocked(g.first);
  if (m->library != nullptr) m->library->modules.erase(m->ctx->id);
  d.Uncharge(m->ctx->device, m->charge);
  d.Unregister(m);
  delete m;
}

CUresult ModuleFunctionLocked(CUmod_st* m, const std::string& name, CUfunc_st** out) {
  auto it = m->functions.find(name);
  if (it == m->functions.end()) {
    const ImageKernel* k = DescribedKernel(*m->image, name);
    if (k == nullptr && m->image->complete) return CUDA_ERROR_NOT_FOUND;
    auto* f = new CUfunc_st{};
    f->module = m;
    f->name = name;
    f->wave_ns = k != nullptr ? k->wave_ns : 0;
    D().Register(f, HandleKind::kFunction);
    it = m->functions.emplace(name, f).first;
  }
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult ModuleGlobalLocked(CUmod_st* m, const std::string& name, CUdeviceptr* dptr,
                            size_t* bytes) {
  auto it = m->globals.find(name);
  if (it == m->globals.end()) {
    if (m->image->complete) return CUDA_ERROR_NOT_FOUND;
    ImageGlobal unknown;
    unknown.bytes = kUnknownGlobalBytes;
    if (CUresult r = AddGlobalLocked(m, name, unknown); r != CUDA_SUCCESS) return r;
    it = m->globals.find(name);
  }
  if (dptr != nullptr) *dptr = it->second.first;
  if (bytes != nullptr) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult LibraryModuleLocked(CUlib_st* lib, CUctx_st* ctx, CUmod_st** out) {
  auto it = lib->modules.find(ctx->id);
  if (it != lib->modules.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  return InstantiateModuleLocked(ctx, lib->image, lib, out);
}

CUresult KernelFunctionLocked(CUkern_st* k, CUctx_st* ctx, CUfunc_st** out) {
  CUmod_st* m;
  if (CUresult r = LibraryModuleLocked(k->library, ctx, &m); r != CUDA_SUCCESS) return r;
  bool fresh = m->functions.find(k->name) == m->functions.end();
  if (CUresult r = ModuleFunctionLocked(m, k->name, out); r != CUDA_SUCCESS) return r;
  if (fresh) {
    (*out)->kernel = k;
    (*out)->settings = k->settings[ctx->device];
  }
  return CUDA_SUCCESS;
}

CUresult FunctionForCallLocked(CUfunction f, CUfunc_st** out) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (D().Live(f, HandleKind::kFunction)) {
    *out = f;
    return CUDA_SUCCESS;
  }
  auto* k = reinterpret_cast<CUkern_st*>(f);
  if (!D().Live(k, HandleKind::kKernel)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  return KernelFunctionLocked(k, ctx, out);
}

void InstantiateEagerLibrariesLocked(CUctx_st* ctx) {
  std::vector<CUlib_st*> eager;
  for (auto& [h, kind] : D().handles) {
    if (kind == HandleKind::kLibrary && static_cast<const CUlib_st*>(h)->eager) {
      eager.push_back(static_cast<CUlib_st*>(const_cast<void*>(h)));
    }
  }
  for (CUlib_st* lib : eager) {
    CUmod_st* m;
    // A library that does not fit now is instantiated at its first use (and fails there).
    if (LibraryModuleLocked(lib, ctx, &m) != CUDA_SUCCESS) {
      g_log.Log(LogLevel::kInfo, "eager loading of library %p into context %p failed",
                static_cast<void*>(lib), static_cast<void*>(ctx));
    }
  }
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

// ---- modules ----

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
  // A library's instance goes with its library (cuLibraryUnload).
  if (!D().Live(m, HandleKind::kModule) || m->library != nullptr) return CUDA_ERROR_INVALID_HANDLE;
  DestroyModuleLocked(m);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetFunction(CUfunction* hfunc, CUmodule m, const char* name) {
  if (hfunc == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  return ModuleFunctionLocked(m, name, hfunc);
}

CUresult CUDAAPI cuModuleGetFunctionCount(unsigned int* count, CUmodule m) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  if (!m->image->complete) return CUDA_ERROR_NOT_SUPPORTED;  // the model cannot list them
  *count = unsigned(m->image->kernels.size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleEnumerateFunctions(CUfunction* functions, unsigned int n, CUmodule m) {
  if (functions == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  if (!m->image->complete) return CUDA_ERROR_NOT_SUPPORTED;
  unsigned i = 0;
  for (const auto& [name, k] : m->image->kernels) {
    if (i == n) break;
    if (CUresult r = ModuleFunctionLocked(m, name, &functions[i++]); r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuModuleGetGlobal_v2(CUdeviceptr* dptr, size_t* bytes, CUmodule m,
                                      const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(m, HandleKind::kModule)) return CUDA_ERROR_INVALID_HANDLE;
  return ModuleGlobalLocked(m, name, dptr, bytes);
}

CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = LoadingMode();
  return CUDA_SUCCESS;
}

// ---- libraries ----

CUresult CUDAAPI cuLibraryLoadData(CUlibrary* library, const void* code, CUjit_option* jitOptions,
                                   void** jitOptionsValues, unsigned int numJitOptions,
                                   CUlibraryOption* libraryOptions, void** libraryOptionValues,
                                   unsigned int numLibraryOptions) {
  return LoadLibrary(library, code, 0, numJitOptions, jitOptions, jitOptionsValues,
                     numLibraryOptions, libraryOptions, libraryOptionValues);
}

CUresult CUDAAPI cuLibraryLoadFromFile(CUlibrary* library, const char* fileName,
                                       CUjit_option* jitOptions, void** jitOptionsValues,
                                       unsigned int numJitOptions, CUlibraryOption* libraryOptions,
                                       void** libraryOptionValues, unsigned int numLibraryOptions) {
  if (library == nullptr || fileName == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto image = ReadFileToString(fileName, 256u << 20);
  if (!image.ok()) {
    g_log.Log(LogLevel::kWarn, "cuLibraryLoadFromFile: %s", image.error().message().c_str());
    return image.error().sys_errno() == ENOENT ? CUDA_ERROR_FILE_NOT_FOUND
                                               : CUDA_ERROR_INVALID_VALUE;
  }
  if (image->empty()) return CUDA_ERROR_INVALID_IMAGE;
  return LoadLibrary(library, image->c_str(), image->size(), numJitOptions, jitOptions,
                     jitOptionsValues, numLibraryOptions, libraryOptions, libraryOptionValues);
}

CUresult CUDAAPI cuLibraryUnload(CUlibrary library) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(library, HandleKind::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
  DestroyLibraryLocked(library);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetKernel(CUkernel* pKernel, CUlibrary library, const char* name) {
  if (pKernel == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(library, HandleKind::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
  auto it = library->kernels.find(name);
  if (it == library->kernels.end()) {
    if (library->image->complete && DescribedKernel(*library->image, name) == nullptr) {
      return CUDA_ERROR_NOT_FOUND;
    }
    auto* k = new CUkern_st{};
    k->library = library;
    k->name = name;
    D().Register(k, HandleKind::kKernel);
    it = library->kernels.emplace(name, k).first;
  }
  *pKernel = it->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetKernelCount(unsigned int* count, CUlibrary lib) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(lib, HandleKind::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
  if (!lib->image->complete) return CUDA_ERROR_NOT_SUPPORTED;  // the model cannot list them
  *count = unsigned(lib->image->kernels.size());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryEnumerateKernels(CUkernel* kernels, unsigned int n, CUlibrary lib) {
  if (kernels == nullptr) return CUDA_ERROR_INVALID_VALUE;
  std::vector<std::string> names;
  {
    ApiLock api;
    if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
    if (!D().Live(lib, HandleKind::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
    if (!lib->image->complete) return CUDA_ERROR_NOT_SUPPORTED;
    for (const auto& [name, k] : lib->image->kernels) names.push_back(name);
  }
  for (unsigned i = 0; i < n && i < names.size(); ++i) {
    if (CUresult r = cuLibraryGetKernel(&kernels[i], lib, names[i].c_str()); r != CUDA_SUCCESS) {
      return r;
    }
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLibraryGetModule(CUmodule* pMod, CUlibrary library) {
  if (pMod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(library, HandleKind::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  return LibraryModuleLocked(library, ctx, pMod);
}

static CUresult LibraryGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                              const char* name) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(library, HandleKind::kLibrary)) return CUDA_ERROR_INVALID_HANDLE;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  CUmod_st* m;
  if (CUresult r = LibraryModuleLocked(library, ctx, &m); r != CUDA_SUCCESS) return r;
  return ModuleGlobalLocked(m, name, dptr, bytes);
}

CUresult CUDAAPI cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                    const char* name) {
  return LibraryGlobal(dptr, bytes, library, name);
}

// Managed variables live in the instance's memory like other globals (the model charges
// managed memory to the device).
CUresult CUDAAPI cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary library,
                                     const char* name) {
  return LibraryGlobal(dptr, bytes, library, name);
}

// ---- kernels ----

CUresult CUDAAPI cuKernelGetFunction(CUfunction* pFunc, CUkernel kernel) {
  if (pFunc == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  return KernelFunctionLocked(k, ctx, pFunc);
}

CUresult CUDAAPI cuKernelGetLibrary(CUlibrary* pLib, CUkernel kernel) {
  if (pLib == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  *pLib = k->library;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetName(const char** name, CUkernel kernel) {
  if (name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  *name = k->name.c_str();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelGetParamInfo(CUkernel kernel, size_t paramIndex, size_t* paramOffset,
                                      size_t* paramSize) {
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  return ParamInfo(*k->library->image, k->name, paramIndex, paramOffset, paramSize);
}

CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel,
                                      CUdevice dev) {
  if (pi == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  const ImageKernel* described = DescribedKernel(*k->library->image, k->name);
  return FunctionAttribute(*D().spec(p).profile, described, k->settings[p], attrib, pi);
}

CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel,
                                      CUdevice dev) {
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  int p;
  if (CUresult r = PhysicalDevice(dev, &p); r != CUDA_SUCCESS) return r;
  if (CUresult r = SetFunctionAttribute(*D().spec(p).profile, attrib, val, &k->settings[p]);
      r != CUDA_SUCCESS) {
    return r;
  }
  // Instances already made on the device follow.
  for (auto& [ctx_id, m] : k->library->modules) {
    if (m->ctx->device != p) continue;
    auto f = m->functions.find(k->name);
    if (f != m->functions.end()) f->second->settings = k->settings[p];
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  if (EnumValue(config) < 0 || EnumValue(config) > 3) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUkern_st* k;
  if (CUresult r = KernelLocked(kernel, &k); r != CUDA_SUCCESS) return r;
  int p;
  return PhysicalDevice(dev, &p);
}

// ---- functions of modules ----

CUresult CUDAAPI cuFuncGetParamInfo(CUfunction func, size_t paramIndex, size_t* paramOffset,
                                    size_t* paramSize) {
  ApiLock api;
  CUfunc_st* f;
  if (CUresult r = FunctionForCallLocked(func, &f); r != CUDA_SUCCESS) return r;
  return ParamInfo(*f->module->image, f->name, paramIndex, paramOffset, paramSize);
}

CUresult CUDAAPI cuFuncGetModule(CUmodule* hmod, CUfunction func) {
  if (hmod == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* f;
  if (CUresult r = FunctionForCallLocked(func, &f); r != CUDA_SUCCESS) return r;
  *hmod = f->module;
  return CUDA_SUCCESS;
}

// Functions are loaded when they are made (the model has no code to load later).
CUresult CUDAAPI cuFuncIsLoaded(CUfunctionLoadingState* state, CUfunction func) {
  if (state == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUfunc_st* f;
  if (CUresult r = FunctionForCallLocked(func, &f); r != CUDA_SUCCESS) return r;
  *state = CU_FUNCTION_LOADING_STATE_LOADED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuFuncLoad(CUfunction func) {
  ApiLock api;
  CUfunc_st* f;
  return FunctionForCallLocked(func, &f);
}

}  // extern "C"
