// What libvgpu.so exports, declared once.
//
// libvgpu.so and every library linked into it are compiled with -fvisibility=hidden
// (HIDDEN in cmake/HamiTargets.cmake): a definition is local to the library unless a
// declaration marked HAMI_EXPORT precedes it. The only such declarations are here, expanded
// from the same lists as everything else about a hook (hooks/cuda_hooks.def,
// hooks/nvml_hooks.def), plus dlsym and dlvsym (defined in assembly in dl.cc). The linker's
// version script, generated from the same lists, is the second fence. The linker silently
// drops a listed name whose definition is hidden, so the test vgpu_exports checks that
// `nm -D --defined-only libvgpu.so` gives exactly the script's names.
//
// Every file that defines a wrapper includes this header (through vgpu/hooks.h) before the
// definition, so the wrapper keeps default visibility.
#pragma once

#include <cuda.h>
#include <dlfcn.h>

#include "nvml/nvml.h"

#define HAMI_EXPORT __attribute__((visibility("default")))

extern "C" {

#define HAMI_CUDA_HOOK(name, policy, version) HAMI_EXPORT decltype(::name) name;
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK

#define HAMI_NVML_HOOK(name, policy) HAMI_EXPORT decltype(::name) name;
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK

HAMI_EXPORT decltype(::dlsym) dlsym;
HAMI_EXPORT decltype(::dlvsym) dlvsym;

}  // extern "C"
