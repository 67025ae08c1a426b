#include "inventory/nvml_library.h"

#include <dlfcn.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>

#include <utility>

namespace hami::inventory {

Result<NvmlLibrary> NvmlLibrary::Open(const std::string& library, Unload unload) {
  const int flags = RTLD_NOW | RTLD_LOCAL | (unload == Unload::kNever ? RTLD_NODELETE : 0);
  void* handle = dlopen(library.c_str(), flags);
  if (handle == nullptr) {
    const char* e = dlerror();
    return Error(ErrorCode::kNotFound, e != nullptr ? e : "dlopen failed");
  }
  return NvmlLibrary(handle);
}

NvmlLibrary::NvmlLibrary(void* handle) : handle_(handle) {
#define HAMI_NVML_RESOLVE(name) \
  fn_.name = reinterpret_cast<decltype(&::name)>(dlsym(handle, #name));
  HAMI_NVML_FUNCTIONS(HAMI_NVML_RESOLVE)
#undef HAMI_NVML_RESOLVE
}

NvmlLibrary::NvmlLibrary(NvmlLibrary&& other) noexcept
    : handle_(std::exchange(other.handle_, nullptr)), fn_(std::exchange(other.fn_, {})) {}

NvmlLibrary& NvmlLibrary::operator=(NvmlLibrary&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) dlclose(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
    fn_ = std::exchange(other.fn_, {});
  }
  return *this;
}

NvmlLibrary::~NvmlLibrary() {
  if (handle_ != nullptr) dlclose(handle_);
}

bool NvmlLibrary::Has(std::string_view name) const {
#define HAMI_NVML_HAS(fn) \
  if (name == #fn) return fn_.fn != nullptr;
  HAMI_NVML_FUNCTIONS(HAMI_NVML_HAS)
#undef HAMI_NVML_HAS
  return false;
}

std::string NvmlLibrary::FirstMissing(std::initializer_list<std::string_view> required) const {
  for (std::string_view name : required) {
    if (!Has(name)) return std::string(name);
  }
  return "";
}

std::string NvmlLibrary::Why(nvmlReturn_t r) const {
  const char* s = fn_.nvmlErrorString != nullptr ? fn_.nvmlErrorString(r) : nullptr;
  return s != nullptr ? s : "NVML error " + std::to_string(int(r));
}

std::string NvmlLibrary::Path() const {
  link_map* map = nullptr;
  if (handle_ == nullptr || dlinfo(handle_, RTLD_DI_LINKMAP, &map) != 0 || map == nullptr ||
      map->l_name == nullptr) {
    return "";
  }
  char resolved[PATH_MAX];
  return realpath(map->l_name, resolved) != nullptr ? resolved : map->l_name;
}

}  // namespace hami::inventory
