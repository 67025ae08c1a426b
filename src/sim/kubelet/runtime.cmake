# ---- the simulated container runtime (runtime.h): applies an Allocate response with real
# mounts in a private mount namespace over an overlay of the host's root ----
hami_cc_library(NAME hami_sim_runtime
  SRCS runtime.cc
  DEPS hami::common)

# A program for the runtime's tests: loads the driver's libraries by their sonames, as a CUDA
# program does, and says where the loader found them.
hami_cc_binary(NAME hami_sim_runtime_probe SRCS runtime_main.cc DEPS ${CMAKE_DL_LIBS}
  OUTPUT_DIRECTORY ${HAMI_TEST_BIN_DIR})

# Real namespaces and mounts (root; skipped otherwise). RUN_SERIAL: it checks that paths
# such as /overrideEnv do not appear on the host, which `hami run --limits-file-mount` tests
# create for a moment.
hami_cc_test(NAME sim_runtime_test LABELS integration RUN_SERIAL
  SRCS runtime_test.cc
  DEPS hami::sim_runtime)
hami_target_paths(sim_runtime_test PRIVATE
  HAMI_RUNTIME_PROBE $<TARGET_FILE:hami_sim_runtime_probe>
  HAMI_BUILD_DIR ${CMAKE_BINARY_DIR}
  HAMI_SIM_CUDA_LIB $<TARGET_FILE:hami_sim_cuda>
  HAMI_SIM_NVML_LIB $<TARGET_FILE:hami_sim_nvml>)
add_dependencies(sim_runtime_test hami_sim_runtime_probe hami_sim_cuda hami_sim_nvml)
