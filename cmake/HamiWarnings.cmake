# The one warnings list. HAMI_WERROR=ON (CI, `make test` with HAMI_WERROR=1) turns them
# into errors.
option(HAMI_WERROR "Treat warnings as errors" OFF)

set(HAMI_WARNINGS
  -Wall -Wextra -Wshadow -Wformat=2 -Wcast-align -Wimplicit-fallthrough
  -Wmisleading-indentation -Wundef -Wvla
  $<$<COMPILE_LANGUAGE:CXX>:-Wnon-virtual-dtor -Woverloaded-virtual>)
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
