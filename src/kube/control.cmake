# hami_kube_control: informers, leader election and the event recorder, over the REST client.
hami_cc_library(NAME hami_kube_control
  SRCS informer.cc leader_election.cc event_recorder.cc
  DEPS hami::kube_client hami::kube_codec hami::kube_api hami::log hami::common
       nlohmann_json::nlohmann_json Threads::Threads)

# A leader-election candidate run as a separate process by leader_election_test.cc.
hami_cc_binary(NAME leader_election_worker
  SRCS leader_election_worker.cc
  DEPS hami::kube_control)
set_target_properties(leader_election_worker PROPERTIES
  RUNTIME_OUTPUT_DIRECTORY ${HAMI_TEST_BIN_DIR})

# Against the simulated API server over real HTTP, with its fault injection.
hami_cc_test(NAME kube_control_test LABELS integration
  SRCS informer_test.cc leader_election_test.cc event_recorder_test.cc
  DEPS hami::kube_control hami::sim_kube hami_test_support)
add_dependencies(kube_control_test leader_election_worker)

# The node lock of seed 004 (hami.io/mutex.lock): taken by the scheduler at bind, released by
# the device plugin after Allocate.
hami_cc_library(NAME hami_kube_node_lock SRCS node_lock.cc
  DEPS hami::kube_client hami::kube_codec hami::common nlohmann_json::nlohmann_json)
