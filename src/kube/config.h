// Where the API server is and how to authenticate to it: a kubeconfig file or the in-cluster
// service account. Every error names the file and the field that was wrong:
//   kubeconfig /root/.kube/config: users[0].user.client-key-data: not base64: '%' at offset 12
//
// Kubeconfig fields read (others are ignored): clusters[].cluster.{server,
// certificate-authority-data, certificate-authority, insecure-skip-tls-verify};
// users[].user.{client-certificate-data, client-certificate, client-key-data, client-key, token,
// tokenFile}; contexts[].context.{cluster, user, namespace}; current-context. A user with
// `exec`, `auth-provider` or `username`/`password` is refused (kUnsupported): this client
// cannot run credential plugins, and connecting anonymously instead would fail later and
// obscurely. The *-data fields are strict base64 (kube/base64.h); CA, certificate and key must
// be PEM. Relative file names are relative to the kubeconfig's directory.
//
// Thread safety: pure functions of their inputs, the environment and the files they read.
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
  std::string bearer_token_file;  // a token file re-read when it changes (bound tokens rotate);
                                  // when readable, its token takes precedence over bearer_token
  bool insecure_skip_tls_verify = false;
  std::string default_namespace = "default";
  std::string source;  // where this came from, for messages: "kubeconfig /root/.kube/config
                       // (context kind-a)" or "in-cluster service account"
};

// Reads a kubeconfig: `path`, else $KUBECONFIG, else ~/.kube/config ($HOME, else the user's
// home directory from the password database). $KUBECONFIG is a ':'-separated list, of which
// this reads the FIRST EXISTING file only (kubectl merges them all; nothing here needs that).
// `context` empty means current-context. kNotFound when no file exists.
Result<Config> LoadKubeconfig(std::string_view path = {}, std::string_view context = {});

// Parses kubeconfig text. `file` names it in messages, and relative file names in it are
// resolved against its directory. For tests and fuzzing; LoadKubeconfig reads the file and
// calls this.
Result<Config> ParseKubeconfig(std::string_view yaml, std::string_view file,
                               std::string_view context = {});

// The in-cluster configuration: KUBERNETES_SERVICE_HOST/_PORT (an IPv6 host is put in
// brackets), and under `sa_dir` (default /var/run/secrets/kubernetes.io/serviceaccount) token
// (required; becomes bearer_token_file, and its current content bearer_token), ca.crt
// (required) and namespace (optional, else "default").
Result<Config> LoadInClusterConfig(
    std::string_view sa_dir = "/var/run/secrets/kubernetes.io/serviceaccount");

// client-go's order: an explicit kubeconfig path (a daemon's --kubeconfig), then $KUBECONFIG,
// then in-cluster when KUBERNETES_SERVICE_HOST is set, then ~/.kube/config.
Result<Config> LoadConfig(std::string_view kubeconfig_flag = {});

// Reads a bearer token file: its content without surrounding whitespace. An empty token, or one
// with control characters inside (it goes into an HTTP header), is an error naming the file.
Result<std::string> ReadTokenFile(const std::string& path);

}  // namespace hami::kube
