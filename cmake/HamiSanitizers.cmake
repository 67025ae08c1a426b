# HAMI_SANITIZE: "" (none), "address;undefined", "undefined", "thread", or "fuzzer"
# (clang: libFuzzer plus ASan/UBSan). Set by the presets asan, ubsan, tsan, fuzz.
set(HAMI_SANITIZE "" CACHE STRING "Sanitizers to build with")

set(HAMI_SANITIZER_FLAGS "")
if(HAMI_SANITIZE STREQUAL "fuzzer")
  if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    message(FATAL_ERROR "the fuzz preset needs clang (CMAKE_CXX_COMPILER=clang++)")
  endif()
  set(HAMI_SANITIZER_FLAGS -fsanitize=fuzzer-no-link,address,undefined)
elseif(HAMI_SANITIZE)
  list(JOIN HAMI_SANITIZE "," _hami_san)
  set(HAMI_SANITIZER_FLAGS -fsanitize=${_hami_san})
endif()
if(HAMI_SANITIZER_FLAGS)
  add_compile_options(${HAMI_SANITIZER_FLAGS} -fno-omit-frame-pointer
                      -fno-sanitize-recover=undefined)
  string(REPLACE "fuzzer-no-link," "" _hami_link_san "${HAMI_SANITIZER_FLAGS}")
  add_link_options(${_hami_link_san})

endif()

# GCC notes (-Wtsan) that ThreadSanitizer does not model std::atomic_thread_fence. The
# region's seqlock puts fences between relaxed atomic accesses only, which TSan does see, so
# the note must not fail a HAMI_WERROR build.
if(HAMI_SANITIZE STREQUAL "thread" AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  add_compile_options(-Wno-tsan)
endif()
