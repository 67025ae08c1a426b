# The plugin's devices: the replicas and the register annotation (pure), the NVML health
# watcher, and the registration loop that keeps hami.io/node-nvidia-register current.
hami_cc_library(NAME hami_plugin_devices
  SRCS devices.cc
  DEPS hami::inventory hami::kube_codec hami::common)
hami_cc_test(NAME plugin_devices_test LABELS unit
  SRCS devices_test.cc
  DEPS hami::plugin_devices)

hami_cc_library(NAME hami_plugin_health
  SRCS health.cc
  DEPS hami::plugin_devices hami::nvml_headers hami::log hami::common ${CMAKE_DL_LIBS})
# Against the simulated NVML (by path; Xids from `hami sim xid` or the state) and the
# inventory's fake NVML (no event API).
hami_cc_test(NAME plugin_health_test LABELS sim
  SRCS health_test.cc
  DEPS hami::plugin_health hami::sim_core hami_test_support)
target_compile_definitions(plugin_health_test PRIVATE
  HAMI_SIM_LIB_DIR="${HAMI_SIM_LIB_DIR}"
  HAMI_FAKE_NVML="$<TARGET_FILE:hami_inventory_fake_nvml>")
add_dependencies(plugin_health_test hami_sim_nvml hami_inventory_fake_nvml hami-sim)

hami_cc_library(NAME hami_plugin_register_loop
  SRCS register_loop.cc
  DEPS hami::kube_client hami::kube_codec hami::log hami::common)
# Against the simulated API server.
hami_cc_test(NAME plugin_register_loop_test LABELS integration
  SRCS register_loop_test.cc
  DEPS hami::plugin_register_loop hami::sim_kube)
