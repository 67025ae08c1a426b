// Fuzzes the kubeconfig reader with arbitrary bytes: it must never crash, every error must
// name the kubeconfig, and an accepted config must have a usable server URL.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/base64.h"
#include "kube/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  constexpr std::string_view kFile = "/nonexistent/hami-fuzz/kubeconfig";
  for (std::string_view context : {std::string_view(), std::string_view("fuzz")}) {
    auto c = hami::kube::ParseKubeconfig(text, kFile, context);
    if (c.ok()) {
      if (c->server.rfind("http://", 0) != 0 && c->server.rfind("https://", 0) != 0) std::abort();
      if (c->server.back() == '/') std::abort();
      if (c->client_cert_pem.empty() != c->client_key_pem.empty()) std::abort();
    } else if (c.error().message().rfind("kubeconfig " + std::string(kFile) + ": ", 0) != 0) {
      std::abort();
    }
  }
  auto decoded = hami::kube::DecodeBase64(text);
  if (decoded.ok()) {
    std::string again = hami::kube::EncodeBase64(*decoded);
    auto round = hami::kube::DecodeBase64(again);
    if (!round.ok() || *round != *decoded) std::abort();
  }
  return 0;
}
