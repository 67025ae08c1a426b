#include "vgpu/libc_symbols.h"

#include <elf.h>
#include <link.h>

#include <atomic>
#include <cstdint>

namespace hami::vgpu {

namespace {

struct Query {
  const char* soname;
  const char* name;
  const char* version;
  void* result;
};

uint32_t GnuHash(const char* s) {
  uint32_t h = 5381;
  for (const auto* p = reinterpret_cast<const unsigned char*>(s); *p != 0; ++p) h = h * 33 + *p;
  return h;
}

// String helpers of our own: this runs before anything else may (inside a sanitizer's start-up,
// from another library's constructor), when even libc's string functions may be someone's
// not-yet-ready interceptors.
size_t Length(const char* s) {
  size_t n = 0;
  while (s[n] != 0) ++n;
  return n;
}

bool Same(const char* a, const char* b) {
  while (*a != 0 && *a == *b) ++a, ++b;
  return *a == *b;
}

bool EndsWith(const char* s, const char* suffix) {
  size_t n = Length(s), m = Length(suffix);
  return n >= m && Same(s + n - m, suffix) && (n == m || s[n - m - 1] == '/');
}

// Dynamic entries hold addresses; the loader relocates most of them in place, but not on
// every architecture: take whichever reading lies inside the object.
template <typename T>
const T* Ptr(ElfW(Addr) base, ElfW(Addr) value) {
  return reinterpret_cast<const T*>(value < base ? base + value : value);
}

void* Search(ElfW(Addr) base, const ElfW(Dyn) * dyn, const Query& q) {
  if (dyn == nullptr) return nullptr;
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu_hash = nullptr;
  const ElfW(Half)* versym = nullptr;
  const ElfW(Verdef)* verdef = nullptr;
  for (const ElfW(Dyn)* d = dyn; d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symtab = Ptr<ElfW(Sym)>(base, d->d_un.d_ptr);
        break;
      case DT_STRTAB:
        strtab = Ptr<char>(base, d->d_un.d_ptr);
        break;
      case DT_GNU_HASH:
        gnu_hash = Ptr<uint32_t>(base, d->d_un.d_ptr);
        break;
      case DT_VERSYM:
        versym = Ptr<ElfW(Half)>(base, d->d_un.d_ptr);
        break;
      case DT_VERDEF:
        verdef = Ptr<ElfW(Verdef)>(base, d->d_un.d_ptr);
        break;
      default:
        break;
    }
  }
  if (symtab == nullptr || strtab == nullptr || gnu_hash == nullptr) return nullptr;

  // The version index to accept: the named one, or the default (hidden bit clear).
  int want_index = -1;
  if (q.version != nullptr && verdef != nullptr) {
    for (const ElfW(Verdef)* v = verdef;;
         v = reinterpret_cast<const ElfW(Verdef)*>(reinterpret_cast<const char*>(v) + v->vd_next)) {
      const auto* aux =
          reinterpret_cast<const ElfW(Verdaux)*>(reinterpret_cast<const char*>(v) + v->vd_aux);
      if (Same(strtab + aux->vda_name, q.version)) want_index = v->vd_ndx;
      if (v->vd_next == 0) break;
    }
    if (want_index < 0) return nullptr;
  }

  const uint32_t nbuckets = gnu_hash[0], symoffset = gnu_hash[1], bloom_size = gnu_hash[2];
  const auto* bloom = reinterpret_cast<const ElfW(Addr)*>(gnu_hash + 4);
  const uint32_t* buckets = reinterpret_cast<const uint32_t*>(bloom + bloom_size);
  const uint32_t* chain = buckets + nbuckets;
  const uint32_t h = GnuHash(q.name);
  uint32_t i = buckets[h % nbuckets];
  if (i < symoffset) return nullptr;
  for (;; ++i) {
    const uint32_t ch = chain[i - symoffset];
    if ((ch | 1) == (h | 1) && Same(strtab + symtab[i].st_name, q.name) &&
        symtab[i].st_shndx != SHN_UNDEF && symtab[i].st_value != 0) {
      bool ok = true;
      if (versym != nullptr) {
        ElfW(Half) ndx = versym[i];
        ok = want_index >= 0 ? (ndx & 0x7fff) == want_index : (ndx & 0x8000) == 0;
      }
      if (ok) return reinterpret_cast<void*>(base + symtab[i].st_value);
    }
    if ((ch & 1) != 0) break;
  }
  return nullptr;
}

template <typename Fn>
Fn Cached(std::atomic<void*>& cache, const char* name) {
  void* p = cache.load(std::memory_order_acquire);
  if (p == nullptr) {
    // glibc 2.34 moved dlsym/dlvsym into libc (default version GLIBC_2.34); older ones
    // keep them in libdl.
    p = FindVersionedSymbol("libc.so.6", name, nullptr);
    if (p == nullptr) p = FindVersionedSymbol("libdl.so.2", name, nullptr);
    cache.store(p, std::memory_order_release);
  }
  return reinterpret_cast<Fn>(p);
}

std::atomic<void*> g_dlsym{nullptr};
std::atomic<void*> g_dlvsym{nullptr};

}  // namespace

void* FindVersionedSymbol(const char* soname, const char* name, const char* version) {
  Query q{soname, name, version, nullptr};
  // The loader's list of loaded objects, in load order: libc (loaded at start-up, never
  // unloaded) comes before anything a concurrent dlclose could remove.
  for (const link_map* m = _r_debug.r_map; m != nullptr; m = m->l_next) {
    if (m->l_name == nullptr || !EndsWith(m->l_name, soname)) continue;
    if (void* p = Search(m->l_addr, m->l_ld, q)) return p;
  }
  return nullptr;
}

DlsymFn RealDlsym() { return Cached<DlsymFn>(g_dlsym, "dlsym"); }
DlvsymFn RealDlvsym() { return Cached<DlvsymFn>(g_dlvsym, "dlvsym"); }

}  // namespace hami::vgpu
