// The oldest glibc libvgpu.so loads on. It is preloaded into every process of a workload
// container, whose image brings its own glibc: a symbol version the image's glibc lacks makes
// the loader refuse every process of the container, so each version above the floor the
// library would otherwise need is supplied here instead.
//
// arc4random (GLIBC_2.36): the static C++ runtime's std::random_device refers to it (through
// the old-string-ABI instantiations the runtime pulls in); libvgpu never makes a random
// device, but the reference alone would raise the floor from 2.35 to 2.36 and turn away
// Ubuntu 22.04 images. This definition is local to the library (hidden), so the linker binds
// the runtime's reference to it rather than to glibc's. It draws from getrandom (2.25).
//
// _dl_find_object (GLIBC_2.35): the static unwinder (libgcc_eh) finds the exception tables of
// the object that holds a code address with it; without this definition the floor would be
// 2.35 and turn away RHEL 9 / UBI 9 images (2.34). Answered here from dl_iterate_phdr (2.2.5),
// as the unwinder did before 2.35: slower (it takes the loader's lock), which only matters
// while unwinding, and libvgpu is built without exceptions.
//
// The floor that stays, GLIBC_2.34 (where libpthread and libdl merged into libc: pthread_create,
// dlopen and their kin carry that version), is checked by the vgpu_glibc_floor test and stated
// in docs/install.md.
#include "vgpu/glibc_floor.h"

#include <dlfcn.h>
#include <link.h>
#include <sys/random.h>

#include <cerrno>
#include <cstdint>

uint32_t arc4random(void) noexcept {
  uint32_t value = 0;
  for (;;) {
    const ssize_t n = getrandom(&value, sizeof(value), 0);
    if (n == static_cast<ssize_t>(sizeof(value))) return value;
    if (n < 0 && errno != EINTR) return value;  // never reached in libvgpu; no abort here
  }
}

namespace {

struct FindObject {
  uintptr_t address;
  dl_find_object* result;
  bool found;
};

int FindObjectIn(dl_phdr_info* info, size_t, void* data) {
  auto* find = static_cast<FindObject*>(data);
  uintptr_t start = UINTPTR_MAX, end = 0;
  bool inside = false;
  const ElfW(Phdr)* eh_frame = nullptr;
  const ElfW(Phdr)* dynamic = nullptr;
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      const uintptr_t lo = info->dlpi_addr + ph.p_vaddr, hi = lo + ph.p_memsz;
      if (lo < start) start = lo;
      if (hi > end) end = hi;
      if (find->address >= lo && find->address < hi) inside = true;
    } else if (ph.p_type == PT_GNU_EH_FRAME) {
      eh_frame = &ph;
    } else if (ph.p_type == PT_DYNAMIC) {
      dynamic = &ph;
    }
  }
  if (!inside) return 0;
  dl_find_object* r = find->result;
  *r = dl_find_object{};
  r->dlfo_map_start = reinterpret_cast<void*>(start);
  r->dlfo_map_end = reinterpret_cast<void*>(end);
  r->dlfo_eh_frame =
      eh_frame ? reinterpret_cast<void*>(info->dlpi_addr + eh_frame->p_vaddr) : nullptr;
#if DLFO_STRUCT_HAS_EH_DBASE
  // The base of DW_EH_PE_datarel encodings: the object's global offset table.
  if (dynamic != nullptr) {
    for (auto* d = reinterpret_cast<const ElfW(Dyn)*>(info->dlpi_addr + dynamic->p_vaddr);
         d->d_tag != DT_NULL; ++d) {
      if (d->d_tag == DT_PLTGOT) r->dlfo_eh_dbase = reinterpret_cast<void*>(d->d_un.d_ptr);
    }
  }
#else
  (void)dynamic;
#endif
  Dl_info dl;
  void* map = nullptr;
  if (dladdr1(reinterpret_cast<void*>(find->address), &dl, &map, RTLD_DL_LINKMAP) != 0) {
    r->dlfo_link_map = static_cast<link_map*>(map);
  }
  find->found = true;
  return 1;
}

}  // namespace

extern "C" int _dl_find_object(void* address, dl_find_object* result) noexcept {
  FindObject find{reinterpret_cast<uintptr_t>(address), result, false};
  dl_iterate_phdr(FindObjectIn, &find);
  return find.found ? 0 : -1;
}
