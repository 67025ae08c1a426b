# hami_kube_control: informers, leader election and the event recorder, over the REST client.
hami_cc_library(NAME hami_kube_control
  SRCS informer.cc
  DEPS hami_kube_client hami_kube_api hami_common nlohmann_json::nlohmann_json Threads::Threads)

# Against the simulated API server over real HTTP, with its fault injection.
hami_cc_test(NAME kube_control_test LABELS integration
  SRCS informer_test.cc
  DEPS hami_kube_control hami_sim_kube hami_test_support)
