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

# The patch functions against outside implementations: python3-jsonpatch for RFC 6902, the
# RFC's own algorithm for RFC 7386 (src/kube/patch_oracle_test.py), over one corpus.
hami_cc_binary(NAME patch_oracle_apply SRCS patch_oracle_apply.cc DEPS hami::kube_api
  OUTPUT_DIRECTORY ${HAMI_TEST_BIN_DIR})
add_test(NAME kube_patch_oracle
  COMMAND /usr/bin/python3 ${CMAKE_CURRENT_SOURCE_DIR}/patch_oracle_test.py
          $<TARGET_FILE:patch_oracle_apply> ${CMAKE_CURRENT_SOURCE_DIR}/patch_oracle_corpus.json)
set_tests_properties(kube_patch_oracle PROPERTIES LABELS unit)
