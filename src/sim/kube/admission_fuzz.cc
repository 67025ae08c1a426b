// Fuzzes what the simulated API server reads from an admission webhook and a webhook
// configuration: the AdmissionReview answer (ParseReviewResponse) and, with the first byte odd,
// the input as a MutatingWebhookConfiguration matched against a pod create (MatchWebhooks).
// Nothing crashes or throws; an accepted answer's patch is a list.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kube/resource.h"
#include "sim/kube/admission.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t pick = data[0];
  const std::string_view input(reinterpret_cast<const char*>(data + 1), size - 1);
  if (pick % 2 == 0) {
    auto v = hami::sim::kube::ParseReviewResponse(input, "u");
    if (v.ok()) Check(v->patch.is_null() || v->patch.is_array());
    return 0;
  }
  nlohmann::json config = nlohmann::json::parse(input, nullptr, false);
  if (config.is_discarded()) return 0;
  hami::sim::kube::AdmissionAttributes a;
  a.resource = &hami::kube::kPods;
  a.operation = "CREATE";
  a.ns = "default";
  a.name = "p";
  a.object = {{"kind", "Pod"},
              {"apiVersion", "v1"},
              {"metadata", {{"name", "p"}, {"labels", {{"app", "x"}}}}}};
  a.namespace_labels = {{"team", "ml"}};
  std::vector<std::string> skipped;
  auto hooks = hami::sim::kube::MatchWebhooks({config}, a, &skipped);
  for (const auto& h : hooks) Check(h.webhook.is_object());
  return 0;
}
