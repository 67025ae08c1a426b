# ---- the host-PID broker embedded in the plugin (broker_host.h) ----
hami_cc_library(NAME hami_plugin_broker_host SRCS broker_host.cc
  DEPS hami_broker_server hami_node_paths hami_common)

# Real sockets, a forked client, and (as root) the refusals in a child PID namespace and for a
# non-root UID.
hami_cc_test(NAME plugin_broker_host_test LABELS integration
  SRCS broker_host_test.cc
  DEPS hami_plugin_broker_host hami_broker_client)

# ---- the daemon (appended below) ----
