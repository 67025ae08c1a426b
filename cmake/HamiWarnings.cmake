# The one warnings list. HAMI_WERROR=ON (CI, `make test` with HAMI_WERROR=1) turns them
# into errors.
option(HAMI_WERROR "Treat warnings as errors" OFF)

set(HAMI_WARNINGS
  -Wall -Wextra -Wshadow -Wformat=2 -Wcast-align -Wcast-qual -Wimplicit-fallthrough
  -Wmisleading-indentation -Wundef -Wvla
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual>
  # Implicit narrowing and sign changes, C casts and external functions without a prior
  # declaration (docs/build.md, Warnings): C++ only; the C sources (the demos, two of
  # tests/vgpu's stand-ins) are not held to them.
  $<$<COMPILE_LANGUAGE:CXX>:-Wconversion -Wsign-conversion -Wold-style-cast
                           -Wmissing-declarations>)
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  list(APPEND HAMI_WARNINGS -Wduplicated-cond -Wlogical-op)
endif()
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  # GUARDED_BY / REQUIRES (common/thread_annotations.h) are checked, not only read.
  list(APPEND HAMI_WARNINGS -Wthread-safety)
endif()
if(HAMI_WERROR)
  list(APPEND HAMI_WARNINGS -Werror)
endif()
