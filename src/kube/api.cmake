# hami_kube_api: the resource table, API timestamps, patches and selectors (pure functions).
hami_cc_library(NAME hami_kube_api
  SRCS resource.cc
  DEPS hami_common nlohmann_json::nlohmann_json)
