# ---- the simulated kubelet (kubelet.h): the Registration server on kubelet.sock and the
# device manager's DevicePlugin client (ListAndWatch, GetPreferredAllocation, Allocate) ----
hami_cc_library(NAME hami_sim_kubelet
  SRCS kubelet.cc
  DEPS hami::plugin_api hami::log hami::common Threads::Threads)

# Registration (version and name checks), the device lists, the device manager's choice and
# restarts, against the project's DevicePlugin service over real Unix sockets. Not CONCURRENT:
# gRPC (see plugin_api_test in src/plugin/api.cmake).
hami_cc_test(NAME sim_kubelet_test LABELS integration
  SRCS kubelet_test.cc
  DEPS hami::sim_kubelet)
