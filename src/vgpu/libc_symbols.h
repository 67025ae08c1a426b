// The real dlsym and dlvsym, found without asking the dynamic linker.
//
// libvgpu.so exports dlsym and dlvsym itself, so looking the real ones up by name (through
// dlsym, dlvsym or a versioned reference) can lead back to ourselves. Instead this reads the
// dynamic symbol table of the loaded libc, found in the loader's list of objects (_r_debug),
// with no function call at all: no recursion is possible, whoever calls and whenever
// (library constructors, a sanitizer runtime installing its interceptors).
//
// Allocation-free, thread-safe. Results are computed once and cached.
#pragma once

namespace hami::vgpu {

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);

// libc's dlsym/dlvsym (the newest default version), or null if libc cannot be read.
DlsymFn RealDlsym();
DlvsymFn RealDlvsym();

// Looks `name` up in the loaded object whose file name ends in `soname` (e.g. "libc.so.6"),
// with symbol version `version` (null: the default version). Null when absent.
void* FindVersionedSymbol(const char* soname, const char* name, const char* version);

}  // namespace hami::vgpu
