# ---- the simulated kubelet (kubelet.h): the Registration server on kubelet.sock and the
# device manager's DevicePlugin client (ListAndWatch, GetPreferredAllocation, Allocate) ----
# It uses the API's generated code (src/kubeletapi) and conversions of its own (convert.h),
# never the device plugin's, which it checks.
hami_cc_library(NAME hami_sim_kubelet
  SRCS kubelet.cc convert.cc
  DEPS hami::kubelet_api_proto hami::sim_grpc_code hami::log hami::common Threads::Threads)

# Its reading of each message, field by field.
hami_cc_test(NAME sim_kubelet_convert_test LABELS unit
  SRCS convert_test.cc
  DEPS hami::sim_kubelet hami_test_support)

# Registration (version and name checks), the device lists, the device manager's choice and
# restarts, against a fake device plugin of the test's own over real Unix sockets. Not
# CONCURRENT: gRPC (see plugin_api_test in src/plugin/api.cmake).
hami_cc_test(NAME sim_kubelet_test LABELS integration
  SRCS kubelet_test.cc
  DEPS hami::sim_kubelet)
