// Where the API server is and how to authenticate to it: a kubeconfig file or the in-cluster
// service account. Every error names the file and the field that was wrong.
#pragma once

#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::kube {

struct Config {
  std::string server;  // "https://10.0.0.1:6443" or "http://127.0.0.1:8080", no trailing "/"
  std::string ca_pem;  // trusted CA certificates (PEM); empty: the system's store
  std::string client_cert_pem;  // client certificate (PEM), with client_key_pem
  std::string client_key_pem;
  std::string bearer_token;       // a fixed token (kubeconfig `token`)
  std::string bearer_token_file;  // a token file re-read when it changes (bound tokens rotate)
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  std::string source;  // where this came from, for messages: "kubeconfig /root/.kube/config
                       // (context kind-a)" or "in-cluster service account"
};

// Reads a kubeconfig: `path`, else $KUBECONFIG (the first existing file of a ':' list), else
// ~/.kube/config. `context` empty means current-context. CA, client certificate and key come
// from the *-data fields (base64) or from files relative to the kubeconfig's directory.
Result<Config> LoadKubeconfig(std::string_view path = {}, std::string_view context = {});

// The in-cluster configuration: KUBERNETES_SERVICE_HOST/_PORT, and under `sa_dir`
// (default /var/run/secrets/kubernetes.io/serviceaccount) token, ca.crt and namespace.
Result<Config> LoadInClusterConfig(
    std::string_view sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// client-go's order: an explicit kubeconfig path (a daemon's --kubeconfig), then $KUBECONFIG,
// then in-cluster when KUBERNETES_SERVICE_HOST is set, then ~/.kube/config.
Result<Config> LoadConfig(std::string_view kubeconfig_flag = {});

}  // namespace hami::kube
