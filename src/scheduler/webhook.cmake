# The mutating admission webhook (POST /webhook): a pure function from an AdmissionReview to its
# answer, part of hami_scheduler; its tests join scheduler_test. The JSON patch is base64 in
# the answer (kube/base64.h of hami_kube_client).
target_sources(hami_scheduler PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/webhook.cc)
target_link_libraries(hami_scheduler PUBLIC hami::kube_client hami::kube_api hami::limits)
target_sources(scheduler_test PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/webhook_test.cc)

# Review under arbitrary bytes; the corpus (AdmissionReviews) is replayed by the test run.
hami_fuzz_target(NAME webhook_fuzz SRCS webhook_fuzz.cc DEPS hami::scheduler
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/webhook_corpus)
