# The plugin's configuration (device-config.yaml + config.json, limit delivery), the pure
# Allocate / GetPreferredAllocation functions, and the allocator that does their I/O (pod
# lookup and patch, node lock, /tmp/vgpulock, container directory, limits file).
hami_cc_library(NAME hami_plugin_config SRCS config.cc
  DEPS hami::device_config hami::kube_codec hami::common nlohmann_json::nlohmann_json)

# One container's share (env, mounts, directory, limits file), shared with the DRA driver's
# prepared claims: a core library, since two components run it (container_state.h).
hami_cc_library(NAME hami_plugin_container_state LAYER core SRCS container_state.cc
  DEPS hami::device_config hami::limits hami::node_paths hami::common)

hami_cc_library(NAME hami_plugin_allocate SRCS allocate.cc
  DEPS hami::plugin_container_state hami::plugin_config hami::kube_codec hami::limits hami::node_paths hami::common
       nlohmann_json::nlohmann_json)

hami_cc_library(NAME hami_plugin_allocator SRCS allocator.cc
  DEPS hami::plugin_allocate hami::kube_node_lock hami::kube_client hami::kube_codec
       hami::broker_node_prep hami::limits hami::node_paths hami::node_pod_record hami::common
       nlohmann_json::nlohmann_json Threads::Threads)

# Test support: the kubelet's side of the bind flow for many nodes, against each node's real
# Allocator (for the scheduler's tests and benchmark).
hami_cc_library(NAME hami_plugin_kubelet_driver LAYER support SRCS kubelet_driver.cc
  DEPS hami::plugin_allocator hami::kube_control hami::kube_client hami::kube_codec
       hami::node_paths hami::common nlohmann_json::nlohmann_json Threads::Threads)

hami_cc_test(NAME plugin_config_test LABELS unit
  SRCS config_test.cc
  DEPS hami::plugin_config)

hami_cc_test(NAME plugin_allocate_test LABELS unit
  SRCS allocate_test.cc
  DEPS hami::plugin_allocate)
# The golden files; HAMI_UPDATE_GOLDEN=1 in the environment rewrites them.
hami_target_paths(plugin_allocate_test PRIVATE
  HAMI_PLUGIN_TESTDATA ${CMAKE_CURRENT_SOURCE_DIR}/testdata)

hami_cc_test(NAME plugin_allocator_test LABELS integration TIMEOUT 120
  SRCS allocator_test.cc
  DEPS hami::plugin_allocator hami::sim_kube)

hami_cc_test(NAME plugin_kubelet_driver_test LABELS integration TIMEOUT 120
  SRCS kubelet_driver_test.cc
  DEPS hami::plugin_kubelet_driver hami::sim_kube hami_test_support)

# config.json under arbitrary bytes; the corpus is replayed by the plain test run.
hami_fuzz_target(NAME plugin_config_fuzz SRCS config_fuzz.cc DEPS hami::plugin_config
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/config_corpus)

# The node's half of resizing a running pod: the container's region and limits file follow an
# accepted share (resize.h).
hami_cc_library(NAME hami_plugin_resize SRCS resize.cc
  DEPS hami::plugin_allocate hami::kube_client hami::kube_codec hami::limits hami::node_paths hami::region hami::log
       hami::common nlohmann_json::nlohmann_json Threads::Threads)

hami_cc_test(NAME plugin_resize_test LABELS integration TIMEOUT 120
  SRCS resize_test.cc
  DEPS hami::plugin_resize hami::sim_kube)
