// Built into libvgpu.so only with AddressSanitizer (the asan and fuzz presets).
//
// A container's processes load libvgpu.so from /etc/ld.so.preload, ahead of the sanitizer
// runtime a sanitized program links, and AddressSanitizer stops any process whose first
// library is not its runtime. A test harness passes ASAN_OPTIONS=verify_asan_link_order=0,
// but a process started with an empty environment (`env -i`, a login shell) has none, so
// the library carries that one default itself. ASAN_OPTIONS, when set, still overrides it.
#include "vgpu/export.h"

extern "C" HAMI_EXPORT const char* __asan_default_options();

extern "C" const char* __asan_default_options() { return "verify_asan_link_order=0"; }
