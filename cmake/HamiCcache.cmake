# A compiler cache when one is installed (scripts/setup.sh installs ccache): a tree built
# before, in this checkout or in another clone of the same sources, compiles only what
# changed. HAMI_CCACHE=OFF turns it off; a launcher chosen on the command line
# (-DCMAKE_CXX_COMPILER_LAUNCHER=...) is kept.
#
# base_dir makes the paths under the source tree relative in what ccache hashes, and
# hash_dir=false leaves the working directory out, so a fresh clone at another path reuses
# the objects of the first. The one cost: debug information names the directory of the
# build that filled the cache. A definition that carries an absolute path (-DFOO="/x/y")
# is hashed as written, so no target has one: the paths a test needs reach it through
# hami_target_paths (HamiPaths.cmake), one small generated file per target.
option(HAMI_CCACHE "Compile through ccache when it is installed" ON)
if(HAMI_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  find_program(HAMI_CCACHE_PROGRAM ccache)
  if(HAMI_CCACHE_PROGRAM)
    # A two-line shell script, not `cmake -E env`: it starts in a millisecond, which a
    # cold build pays once per translation unit.
    set(_hami_launcher ${CMAKE_BINARY_DIR}/ccache-launcher)
    file(CONFIGURE OUTPUT ${_hami_launcher} CONTENT
         "#!/bin/sh\nCCACHE_BASEDIR='${CMAKE_SOURCE_DIR}' CCACHE_NOHASHDIR=1 exec '${HAMI_CCACHE_PROGRAM}' \"$@\"\n")
    file(CHMOD ${_hami_launcher} PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE
         GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
    set(CMAKE_C_COMPILER_LAUNCHER ${_hami_launcher})
    set(CMAKE_CXX_COMPILER_LAUNCHER ${_hami_launcher})
    message(STATUS "Compiler cache: ${HAMI_CCACHE_PROGRAM} (base_dir ${CMAKE_SOURCE_DIR})")
  else()
    message(STATUS "Compiler cache: none (install ccache to reuse objects between builds)")
  endif()
endif()
