# hami_kube_client: configuration (kubeconfig, in-cluster) and the REST client (libcurl).
hami_cc_library(NAME hami_kube_client
  SRCS base64.cc config.cc rate_limiter.cc http.cc client.cc
  DEPS hami::kube_codec hami::kube_api hami::common nlohmann_json::nlohmann_json CURL::libcurl
       yaml-cpp Threads::Threads)

hami_cc_test(NAME kube_config_test LABELS unit
  SRCS config_test.cc
  DEPS hami::kube_client)

hami_cc_test(NAME kube_rate_limiter_test LABELS unit
  SRCS rate_limiter_test.cc
  DEPS hami::kube_client)

# Against fake HTTP(S) servers made in the test (OpenSSL makes a throwaway CA and
# certificates) and, where the simulation covers it, the simulated API server.
find_package(OpenSSL REQUIRED)
hami_cc_test(NAME kube_client_test LABELS integration
  SRCS client_test.cc
  DEPS hami::kube_client hami::sim_kube PkgConfig::HTTPLIB OpenSSL::SSL OpenSSL::Crypto)

hami_fuzz_target(NAME kubeconfig_fuzz SRCS kubeconfig_fuzz.cc DEPS hami::kube_client
  CORPUS ${CMAKE_CURRENT_SOURCE_DIR}/kubeconfig_corpus)
