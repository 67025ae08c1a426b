// Fuzzes what the simulated API server reads from a request besides bodies of objects (those
// are store_fuzz's): the Accept header and path of discovery, the Table decision, and the
// /sim/faults body. The first byte picks the parser, the rest is its input. Nothing crashes or
// throws; every discovery answer is JSON with a Content-Type; accepted faults survive a round
// trip through their JSON.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "sim/kube/discovery.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

constexpr std::string_view kPaths[] = {"/version",
                                       "/api",
                                       "/apis",
                                       "/api/v1",
                                       "/openapi/v3",
                                       "/openapi/v3/api/v1",
                                       "/apis/coordination.k8s.io/v1",
                                       "/apis/apps/v1",
                                       "/apis/rbac.authorization.k8s.io/v1",
                                       "/openapi/v3/apis/admissionregistration.k8s.io/v1"};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (pick % 3) {
    case 0: {  // Accept negotiation over each discovery path, then an arbitrary path
      for (std::string_view path : kPaths) {
        auto r = hami::sim::kube::RenderDiscovery(path, input, "127.0.0.1:1");
        Check(r.has_value() && !r->content_type.empty());
        Check(!nlohmann::json::parse(r->body, nullptr, false).is_discarded());
      }
      auto any = hami::sim::kube::RenderDiscovery(input, "application/json", "127.0.0.1:1");
      if (any) Check(!nlohmann::json::parse(any->body, nullptr, false).is_discarded());
      break;
    }
    case 1: {  // a Table of a pod for any Accept that asks for one
      if (!hami::sim::kube::WantsTable(input)) break;
      const nlohmann::json pod = {{"metadata", {{"name", "p"}, {"namespace", "default"}}}};
      nlohmann::json t = hami::sim::kube::RenderTable(hami::kube::kPods, {&pod}, "1", true,
                                                      std::chrono::system_clock::now());
      Check(t.value("kind", "") == "Table");
      break;
    }
    default: {  // a /sim/faults body
      const nlohmann::json j = nlohmann::json::parse(input, nullptr, false);
      if (j.is_discarded()) break;
      auto f = hami::sim::kube::FaultsFromJson(j);
      if (!f.ok()) {
        Check(!f.error().message().empty());
        break;
      }
      auto again = hami::sim::kube::FaultsFromJson(hami::sim::kube::FaultsToJson(*f));
      Check(again.ok() &&
            hami::sim::kube::FaultsToJson(*again) == hami::sim::kube::FaultsToJson(*f));
      break;
    }
  }
  return 0;
}
