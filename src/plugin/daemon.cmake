# ---- the host-PID broker embedded in the plugin (broker_host.h) ----
hami_cc_library(NAME hami_plugin_broker_host SRCS broker_host.cc
  DEPS hami::broker_server hami::node_paths hami::limits hami::common)

# Real sockets, a forked client, and (as root) the refusals in a child PID namespace and for a
# non-root UID.
hami_cc_test(NAME plugin_broker_host_test LABELS integration
  SRCS broker_host_test.cc
  DEPS hami::plugin_broker_host hami::broker_client hami_test_support)

# ---- the daemon (appended below) ----
hami_cc_library(NAME hami_plugin_daemon SRCS daemon.cc
  DEPS hami::plugin_allocator hami::plugin_resize hami::plugin_api hami::plugin_registrar hami::plugin_devices
       hami::inventory_health hami::plugin_register_loop hami::plugin_broker_host hami::plugin_config
       hami::inventory hami::kube_client hami::log hami::common)

hami_cc_binary(NAME hami-device-plugin SRCS main.cc DEPS hami::plugin_daemon hami::log_flags CLI11::CLI11)
