# The CUDA toolkit provides the driver API headers (cuda.h, cudaTypedefs.h) and the stub
# libcuda.so whose symbol table lists the driver's exports. Headers only: nothing links
# the stub libraries.
find_package(CUDAToolkit QUIET)
if(NOT CUDAToolkit_FOUND OR NOT EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cuda.h")
  foreach(_root $ENV{CUDAToolkit_ROOT} /usr/local/cuda)
    if(EXISTS "${_root}/include/cuda.h")
      set(CUDAToolkit_INCLUDE_DIRS "${_root}/include")
      set(CUDAToolkit_LIBRARY_ROOT "${_root}")
      break()
    endif()
  endforeach()
endif()
if(NOT EXISTS "${CUDAToolkit_INCLUDE_DIRS}/cuda.h")
  message(FATAL_ERROR
    "CUDA toolkit headers not found (looked for cuda.h via FindCUDAToolkit, "
    "$CUDAToolkit_ROOT and /usr/local/cuda). Install the CUDA toolkit or set "
    "CUDAToolkit_ROOT to its location.")
endif()
list(GET CUDAToolkit_INCLUDE_DIRS 0 HAMI_CUDA_INCLUDE_DIR)
if(NOT EXISTS "${HAMI_CUDA_INCLUDE_DIR}/cudaTypedefs.h")
  message(FATAL_ERROR "${HAMI_CUDA_INCLUDE_DIR}/cudaTypedefs.h is missing: the CUDA toolkit "
                      "installation is incomplete")
endif()
if(NOT CUDAToolkit_LIBRARY_ROOT)
  get_filename_component(CUDAToolkit_LIBRARY_ROOT "${HAMI_CUDA_INCLUDE_DIR}/.." ABSOLUTE)
endif()
find_file(HAMI_CUDA_STUB libcuda.so
  PATHS "${CUDAToolkit_LIBRARY_ROOT}/lib64/stubs" "${CUDAToolkit_LIBRARY_ROOT}/lib/stubs"
        "${CUDAToolkit_LIBRARY_ROOT}/targets/x86_64-linux/lib/stubs"
  NO_DEFAULT_PATH)
if(NOT HAMI_CUDA_STUB)
  message(FATAL_ERROR "the CUDA toolkit under ${CUDAToolkit_LIBRARY_ROOT} has no "
                      "lib64/stubs/libcuda.so (its symbol table lists the driver's exports)")
endif()
file(STRINGS "${HAMI_CUDA_INCLUDE_DIR}/cuda.h" _cuda_version_line
     REGEX "^#define CUDA_VERSION [0-9]+")
string(REGEX REPLACE "^#define CUDA_VERSION ([0-9]+).*" "\\1" HAMI_CUDA_VERSION
       "${_cuda_version_line}")
message(STATUS "CUDA headers: ${HAMI_CUDA_INCLUDE_DIR} (CUDA_VERSION ${HAMI_CUDA_VERSION})")

add_library(hami_cuda_headers INTERFACE)
target_include_directories(hami_cuda_headers SYSTEM INTERFACE "${HAMI_CUDA_INCLUDE_DIR}")
add_library(hami::cuda_headers ALIAS hami_cuda_headers)
