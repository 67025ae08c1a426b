# The kubelet device-plugin API v1beta1 on the plugin's side: the protobuf messages come from
# the vendor contract's own home (src/kubeletapi, hami_kubelet_api_proto); here are the
# conversions, the DevicePlugin service and the Unix-socket server (hami_plugin_api), and the
# kubelet registration and re-registration (hami_plugin_registrar).

hami_cc_library(NAME hami_plugin_api
  SRCS api.cc
  DEPS hami::kubelet_api_proto hami::unix_grpc_server hami::common Threads::Threads)

# The service over a real Unix socket with a grpc++ client, and the conversions.
# Not CONCURRENT (the ThreadSanitizer subset): gRPC synchronizes inside Debian's libgrpc,
# which is not instrumented, so TSan reports every object passed between its threads and ours.
hami_cc_test(NAME plugin_api_test LABELS unit
  SRCS api_test.cc
  DEPS hami::plugin_api hami_test_support)

hami_cc_library(NAME hami_plugin_registrar
  SRCS registrar.cc
  DEPS hami::plugin_api hami::log hami::common Threads::Threads)

# Registration with the simulated kubelet: first registration, kubelet restart, the plugin's
# socket removed, the kubelet absent at first. Not CONCURRENT: gRPC (see plugin_api_test).
hami_cc_test(NAME plugin_registrar_test LABELS integration
  SRCS registrar_test.cc
  DEPS hami::plugin_registrar hami::sim_kubelet)
# An independent gRPC implementation (Debian's python3-grpcio, stubs generated from api.proto
# by grpc_tools at test time) plays the kubelet against the plugin's server.
hami_cc_test(NAME plugin_api_grpcio_test LABELS integration
  SRCS api_grpcio_test.cc
  DEPS hami::plugin_api hami_test_support)
hami_target_paths(plugin_api_grpcio_test PRIVATE
  HAMI_PLUGIN_SOURCE_DIR ${CMAKE_CURRENT_SOURCE_DIR}
  HAMI_KUBELET_API_PROTO_DIR ${HAMI_KUBELET_API_PROTO_DIR})
