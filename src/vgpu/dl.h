// The functions dl.cc's assembly trampolines (its dlsym and dlvsym) call: each decides
// whether a lookup gets a hook's wrapper. Hidden, so the calls bind inside libvgpu.so.
//
// They return the wrapper to hand back, or null, for which the trampoline tail-jumps into
// glibc's own dlsym or dlvsym with the caller's arguments and return address untouched.
// Thread-safe and allocation-free; the first call finds glibc's functions.
#pragma once

extern "C" {

__attribute__((visibility("hidden"))) void* hami_dlsym_decide(void* handle, const char* name);
__attribute__((visibility("hidden"))) void* hami_dlvsym_decide(void* handle, const char* name,
                                                               const char* version);

}  // extern "C"
