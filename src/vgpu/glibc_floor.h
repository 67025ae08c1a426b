// The glibc functions libvgpu.so defines itself, so that it loads on a glibc older than the
// one it was built on (glibc_floor.cc says which, and why). Hidden: each binds the library's
// own references, never another object's.
#pragma once

#include <cstdint>

extern "C" {

// arc4random (GLIBC_2.36), referenced by the static C++ runtime; drawn from getrandom.
// noexcept, as glibc's <stdlib.h> declares it where it has it.
__attribute__((visibility("hidden"))) uint32_t arc4random(void) noexcept;

}  // extern "C"
