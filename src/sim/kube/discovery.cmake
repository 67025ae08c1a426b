# hami_sim_kube_discovery: what the simulated API server answers to discovery (/version, /api,
# /apis, group versions, /openapi/v3) and to Table requests. Pure functions; the server links it.
hami_cc_library(NAME hami_sim_kube_discovery
  SRCS ${CMAKE_CURRENT_LIST_DIR}/discovery.cc
  DEPS hami::kube_api nlohmann_json::nlohmann_json)

hami_cc_test(NAME sim_kube_discovery_test LABELS unit
  SRCS ${CMAKE_CURRENT_LIST_DIR}/discovery_test.cc
  DEPS hami::sim_kube_discovery)
