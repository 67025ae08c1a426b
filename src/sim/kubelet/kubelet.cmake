# ---- the simulated kubelet (kubelet.h): the Registration server on kubelet.sock and the
# device manager's DevicePlugin client (ListAndWatch, GetPreferredAllocation, Allocate) ----
# It uses the API's generated code (src/kubeletapi) and conversions of its own (convert.h),
# never the device plugin's, which it checks.
hami_cc_library(NAME hami_sim_kubelet
  SRCS kubelet.cc convert.cc dra.cc
  DEPS hami::kubelet_api_proto hami::dra_api_v1_proto hami::dra_api_v1beta1_proto
       hami::plugin_registration_proto hami::sim_grpc_code hami::log hami::common
       Threads::Threads)

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

# The DRA manager (dra.h): registration through the plugins-registry directory (inotify, type
# and version checks, deregistration), Prepare and Unprepare batched per driver with the claim
# cache, against fake DRA drivers of the test's own (v1 and v1beta1) over real Unix sockets;
# and against the real hami-dra-plugin's registration when the build has it (root).
hami_cc_test(NAME sim_kubelet_dra_test LABELS integration
  SRCS dra_test.cc
  DEPS hami::sim_kubelet hami_test_support nlohmann_json::nlohmann_json PkgConfig::HTTPLIB)
if(TARGET hami-dra-plugin)
  add_dependencies(sim_kubelet_dra_test hami-dra-plugin hami_sim_nvml hami_sim_cuda)
  hami_target_paths(sim_kubelet_dra_test PRIVATE
    HAMI_DRA_PLUGIN_BIN $<TARGET_FILE:hami-dra-plugin>
    HAMI_SIM_NVML_LIB $<TARGET_FILE:hami_sim_nvml>
    HAMI_SIM_CUDA_LIB $<TARGET_FILE:hami_sim_cuda>)
endif()
