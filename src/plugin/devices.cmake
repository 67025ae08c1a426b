# The plugin's devices: the replicas and the register annotation (pure), and the registration
# loop that keeps hami.io/node-nvidia-register current. The GPUs' health is the inventory's
# (src/inventory/health.h).
hami_cc_library(NAME hami_plugin_devices
  SRCS devices.cc
  DEPS hami::inventory hami::kube_codec hami::common)
hami_cc_test(NAME plugin_devices_test LABELS unit
  SRCS devices_test.cc
  DEPS hami::plugin_devices)

# The Node's status resources (advertiseMemoryAndCores): a pure patch decision.
hami_cc_library(NAME hami_plugin_node_resources
  SRCS node_resources.cc
  DEPS hami::kube_codec hami::common)
hami_cc_test(NAME plugin_node_resources_test LABELS unit
  SRCS node_resources_test.cc
  DEPS hami::plugin_node_resources)

hami_cc_library(NAME hami_plugin_register_loop
  SRCS register_loop.cc
  DEPS hami::plugin_node_resources hami::kube_client hami::kube_codec hami::log hami::common)
# Against the simulated API server.
hami_cc_test(NAME plugin_register_loop_test LABELS integration
  SRCS register_loop_test.cc
  DEPS hami::plugin_register_loop hami::sim_kube)
