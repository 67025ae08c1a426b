// The libFuzzer entry point every fuzz target defines. hami_fuzz_target
// (cmake/HamiTargets.cmake) includes this header ahead of each of the target's sources, so
// each foo_fuzz.cc's definition has its declaration (-Wmissing-declarations) without every
// file repeating it.
#pragma once

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
#ifdef __cplusplus
}
#endif
