// A libvgpu state of its own, for tests of the policy: configured from named variables as
// the library would resolve them (the environment is not read or written), calling the
// test's fake driver tables, starting no thread. Each test makes its own and drops it.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "limits/vocabulary.h"
#include "vgpu/config.h"
#include "vgpu/runtime.h"

namespace hami::vgpu::testing {

// The configuration a process whose environment held `variables` (and no limits file)
// resolves; a variable that does not resolve fails the caller's test through `problems`.
inline Resolution ResolveVariables(const std::map<limits::Key, std::string>& variables) {
  std::map<std::string, std::string> by_name;
  for (const auto& [key, value] : variables) by_name[limits::KeyName(key)] = value;
  return ResolveConfig(LimitsFile{}, [&by_name](const char* name) -> const char* {
    auto it = by_name.find(name);
    return it == by_name.end() ? nullptr : it->second.c_str();
  });
}

inline std::unique_ptr<Runtime> MakeState(const std::map<limits::Key, std::string>& variables,
                                          const CudaDriver* cuda,
                                          const NvmlDriver* nvml = &internal::kNoNvml) {
  return std::make_unique<Runtime>(ResolveVariables(variables).config, cuda, nvml);
}

}  // namespace hami::vgpu::testing
