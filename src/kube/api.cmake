# hami_kube_api: the resource table, API timestamps, patches and selectors (pure functions).
hami_cc_library(NAME hami_kube_api
  SRCS resource.cc time.cc selector.cc patch.cc
  DEPS hami::common nlohmann_json::nlohmann_json)

hami_cc_test(NAME kube_api_test LABELS unit
  SRCS resource_test.cc time_test.cc selector_test.cc patch_test.cc
  DEPS hami::kube_api)

hami_fuzz_target(NAME selector_fuzz SRCS selector_fuzz.cc DEPS hami::kube_api
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/selector_corpus)
hami_fuzz_target(NAME patch_fuzz SRCS patch_fuzz.cc DEPS hami::kube_api
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/patch_corpus)
