# The plugin's devices: the replicas and the register annotation (pure), the NVML health
# watcher, and the registration loop that keeps hami.io/node-nvidia-register current.
hami_cc_library(NAME hami_plugin_devices
  SRCS devices.cc
  DEPS hami_inventory hami_kube_codec hami_common)
hami_cc_test(NAME plugin_devices_test LABELS unit
  SRCS devices_test.cc
  DEPS hami_plugin_devices)
