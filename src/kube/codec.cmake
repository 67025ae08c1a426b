# hami_kube_codec: resource quantities, typed views of API objects, HAMi's annotation codecs
# (pure functions, no network).
hami_cc_library(NAME hami_kube_codec
  SRCS quantity.cc objects.cc annotations.cc resize.cc
  DEPS hami::kube_api hami::common nlohmann_json::nlohmann_json)

hami_cc_test(NAME kube_codec_test LABELS unit
  SRCS quantity_test.cc objects_test.cc annotations_test.cc resize_test.cc
  DEPS hami::kube_codec)

# Round-trip fuzz targets, one per codec; each corpus is replayed by the plain test run.
foreach(_fuzz quantity objects node_inventory handshake pod_devices node_lock bind resize)
  hami_fuzz_target(NAME ${_fuzz}_fuzz SRCS ${_fuzz}_fuzz.cc DEPS hami::kube_codec
    CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/${_fuzz}_corpus)
endforeach()
