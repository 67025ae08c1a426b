// The dlsym and dlvsym routes.
//
// A program (or a library such as the CUDA runtime) that asks dlsym or dlvsym for a driver
// function must get our wrapper, or its later calls escape every limit. Everything else
// must behave exactly as glibc's dlsym: in particular RTLD_NEXT is relative to the *caller*,
// which glibc finds from its return address. So our dlsym decides first (a plain call) and
// then, for anything it does not substitute, *jumps* into glibc's dlsym with the caller's
// arguments and return address untouched: glibc sees the original caller, and no frame of
// ours stays on the stack — repeated RTLD_NEXT walks (LLVM OpenMP's tool lookup does this)
// cannot loop through us.
//
// The substitution rule, for a name on one of the hook lists:
// - dlsym(RTLD_DEFAULT): the wrapper (it is the global definition anyway, as libvgpu is
//   preloaded);
// - any other handle (RTLD_NEXT, a dlopen() handle of libcuda.so.1 / libnvidia-ml.so.1), and
//   every dlvsym: the wrapper when glibc's lookup would find the function at all, else what
//   glibc says (null).
// Names not listed (cuda*, cudnn*, cublas*, any cu*/nvml* we do not intercept) are never
// substituted.
#include "vgpu/dl.h"

#include <dlfcn.h>

#include <cstdint>
#include <string_view>

#include "vgpu/hooks.h"
#include "vgpu/libc_symbols.h"

extern "C" {

// Used by the assembly below: hidden, so the jumps and calls bind inside the library.
__attribute__((visibility("hidden"))) void* hami_real_dlsym = nullptr;
__attribute__((visibility("hidden"))) void* hami_real_dlvsym = nullptr;

namespace {

void* NoDlsym(void*, const char*) { return nullptr; }
void* NoDlvsym(void*, const char*, const char*) { return nullptr; }

bool MaybeHooked(const char* name) {
  return name != nullptr &&
         ((name[0] == 'c' && name[1] == 'u' && name[2] != 'd') ||
          (name[0] == 'n' && name[1] == 'v' && name[2] == 'm' && name[3] == 'l'));
}

size_t Length(const char* s) {
  size_t n = 0;
  while (s[n] != 0) ++n;
  return n;
}

void* Decide(void* handle, const char* name, const char* version) {
  if (hami_real_dlsym == nullptr) {
    hami::vgpu::DlsymFn s = hami::vgpu::RealDlsym();
    hami::vgpu::DlvsymFn v = hami::vgpu::RealDlvsym();
    hami_real_dlvsym =
        v != nullptr ? reinterpret_cast<void*>(v) : reinterpret_cast<void*>(&NoDlvsym);
    __atomic_store_n(&hami_real_dlsym,
                     s != nullptr ? reinterpret_cast<void*>(s) : reinterpret_cast<void*>(&NoDlsym),
                     __ATOMIC_RELEASE);
  }
  if (!MaybeHooked(name)) return nullptr;
  const hami::vgpu::HookInfo* hook = hami::vgpu::FindHook(std::string_view(name, Length(name)));
  if (hook == nullptr) return nullptr;
  if (handle == RTLD_DEFAULT && version == nullptr) return hami::vgpu::WrapperOf(*hook);
  // From here RTLD_NEXT means "after libvgpu": the driver, if anything. A versioned lookup
  // finds what glibc finds (nothing, when the library has no such version node).
  void* found =
      version == nullptr
          ? reinterpret_cast<hami::vgpu::DlsymFn>(hami_real_dlsym)(handle, name)
          : reinterpret_cast<hami::vgpu::DlvsymFn>(hami_real_dlvsym)(handle, name, version);
  return found != nullptr ? hami::vgpu::WrapperOf(*hook) : nullptr;
}

}  // namespace

void* hami_dlsym_decide(void* handle, const char* name) { return Decide(handle, name, nullptr); }

void* hami_dlvsym_decide(void* handle, const char* name, const char* version) {
  return Decide(handle, name, version);
}

}  // extern "C"

#if defined(__x86_64__)
// dlsym(handle, name): decide, then either return the wrapper or tail-jump to glibc.
// Stack: entry rsp = 8 mod 16; two pushes and 8 bytes keep the call 16-byte aligned.
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, @function
dlsym:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    subq $8, %rsp
    .cfi_adjust_cfa_offset 8
    call hami_dlsym_decide
    addq $8, %rsp
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 1f
    ret
1:
    jmp *hami_real_dlsym(%rip)
    .cfi_endproc
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, @function
dlvsym:
    .cfi_startproc
    pushq %rdi
    .cfi_adjust_cfa_offset 8
    pushq %rsi
    .cfi_adjust_cfa_offset 8
    pushq %rdx
    .cfi_adjust_cfa_offset 8
    call hami_dlvsym_decide
    popq %rdx
    .cfi_adjust_cfa_offset -8
    popq %rsi
    .cfi_adjust_cfa_offset -8
    popq %rdi
    .cfi_adjust_cfa_offset -8
    testq %rax, %rax
    jz 1f
    ret
1:
    jmp *hami_real_dlvsym(%rip)
    .cfi_endproc
    .size dlvsym, .-dlvsym
)");
#elif defined(__aarch64__)
__asm__(R"(
    .text
    .globl dlsym
    .type dlsym, %function
dlsym:
    stp x29, x30, [sp, #-32]!
    mov x29, sp
    stp x0, x1, [sp, #16]
    bl hami_dlsym_decide
    mov x9, x0
    ldp x0, x1, [sp, #16]
    ldp x29, x30, [sp], #32
    cbz x9, 1f
    mov x0, x9
    ret
1:
    adrp x9, hami_real_dlsym
    ldr x9, [x9, :lo12:hami_real_dlsym]
    br x9
    .size dlsym, .-dlsym

    .globl dlvsym
    .type dlvsym, %function
dlvsym:
    stp x29, x30, [sp, #-48]!
    mov x29, sp
    stp x0, x1, [sp, #16]
    str x2, [sp, #32]
    bl hami_dlvsym_decide
    mov x9, x0
    ldp x0, x1, [sp, #16]
    ldr x2, [sp, #32]
    ldp x29, x30, [sp], #48
    cbz x9, 1f
    mov x0, x9
    ret
1:
    adrp x9, hami_real_dlvsym
    ldr x9, [x9, :lo12:hami_real_dlvsym]
    br x9
    .size dlvsym, .-dlvsym
)");
#else
#error "libvgpu's dlsym route needs a tail-jump trampoline for this architecture"
#endif
