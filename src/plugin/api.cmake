# The kubelet device-plugin API v1beta1: the project's own api.proto, compiled by protoc and
# grpc_cpp_plugin into the build tree (hami_plugin_proto); the conversions, the DevicePlugin
# service and the Unix-socket server (hami_plugin_api); the kubelet registration and
# re-registration (hami_plugin_registrar).

set(HAMI_PLUGIN_PROTO ${CMAKE_CURRENT_SOURCE_DIR}/proto/api.proto)
set(HAMI_PLUGIN_GEN_DIR ${CMAKE_BINARY_DIR}/gen)
set(_hami_plugin_gen ${HAMI_PLUGIN_GEN_DIR}/plugin/proto)
add_custom_command(
  OUTPUT ${_hami_plugin_gen}/api.pb.cc ${_hami_plugin_gen}/api.pb.h
         ${_hami_plugin_gen}/api.grpc.pb.cc ${_hami_plugin_gen}/api.grpc.pb.h
  COMMAND ${CMAKE_COMMAND} -E make_directory ${_hami_plugin_gen}
  COMMAND ${HAMI_PROTOC} -I ${CMAKE_SOURCE_DIR}/src
          --cpp_out=${HAMI_PLUGIN_GEN_DIR} --grpc_out=${HAMI_PLUGIN_GEN_DIR}
          --plugin=protoc-gen-grpc=${HAMI_GRPC_CPP_PLUGIN}
          ${HAMI_PLUGIN_PROTO}
  DEPENDS ${HAMI_PLUGIN_PROTO} ${HAMI_PROTOC} ${HAMI_GRPC_CPP_PLUGIN}
  COMMENT "protoc: plugin/proto/api.proto (kubelet device-plugin API v1beta1)"
  VERBATIM)

# Generated code: not built with the project's warnings; its headers are included as system
# headers so that they add none to the code that uses them.
hami_cc_library(NAME hami_plugin_proto NO_WARNINGS
  SRCS ${_hami_plugin_gen}/api.pb.cc ${_hami_plugin_gen}/api.grpc.pb.cc
  DEPS gRPC::grpc++ protobuf::libprotobuf)
target_include_directories(hami_plugin_proto SYSTEM PUBLIC ${HAMI_PLUGIN_GEN_DIR})

hami_cc_library(NAME hami_plugin_api
  SRCS api.cc
  DEPS hami::plugin_proto hami::common Threads::Threads)

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
target_compile_definitions(plugin_api_grpcio_test PRIVATE
  HAMI_PLUGIN_SOURCE_DIR="${CMAKE_CURRENT_SOURCE_DIR}")
