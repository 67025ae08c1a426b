# ---- the host-PID broker embedded in the plugin (broker_host.h) ----
hami_cc_library(NAME hami_plugin_broker_host SRCS broker_host.cc
  DEPS hami_broker_server hami_node_paths hami_common)

# Real sockets, a forked client, and (as root) the refusals in a child PID namespace and for a
# non-root UID.
hami_cc_test(NAME plugin_broker_host_test LABELS integration
  SRCS broker_host_test.cc
  DEPS hami_plugin_broker_host hami_broker_client)

# ---- the daemon (appended below) ----
hami_cc_library(NAME hami_plugin_daemon SRCS daemon.cc
  DEPS hami_plugin_allocator hami_plugin_api hami_plugin_registrar hami_plugin_devices
       hami_plugin_health hami_plugin_register_loop hami_plugin_broker_host hami_plugin_config
       hami_inventory hami_kube_client hami_common)

hami_cc_binary(NAME hami-device-plugin SRCS main.cc DEPS hami_plugin_daemon CLI11::CLI11)
