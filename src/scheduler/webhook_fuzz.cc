// Fuzzes the webhook's Review with arbitrary bytes as the AdmissionReview: nothing crashes, a
// failure is kInvalidArgument naming the AdmissionReview (or the namespace lookup's error), and
// every answer is an admission.k8s.io/v1 AdmissionReview echoing the request's uid whose JSON
// patch, when there is one, applies to the request's object.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kube/base64.h"
#include "kube/patch.h"
#include "scheduler/webhook.h"

namespace {

using nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

const hami::scheduler::webhook::WebhookContext& Context() {
  static const hami::scheduler::webhook::WebhookContext ctx = [] {
    hami::scheduler::webhook::WebhookContext c;
    c.lookup_namespace =
        [](std::string_view ns) -> hami::Result<hami::scheduler::webhook::NamespaceView> {
      hami::scheduler::webhook::NamespaceView v;
      if (ns == "ignored") v.labels = {{"hami.io/webhook", "ignore"}};
      if (ns == "missing") return hami::Error(hami::ErrorCode::kNotFound, "no such namespace");
      if (ns == "broken") return hami::Error(hami::ErrorCode::kUnavailable, "lookup failed");
      v.quota.memory_mib = 8000;
      v.quota.memory_source = "gpu-quota";
      v.used.memory_mib = 1000;
      return v;
    };
    return c;
  }();
  return ctx;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  auto out = hami::scheduler::webhook::Review(text, Context());
  if (!out.ok()) {
    const bool review_error = out.error().code() == hami::ErrorCode::kInvalidArgument &&
                              out.error().message().rfind("AdmissionReview: ", 0) == 0;
    const bool lookup_error = out.error().code() == hami::ErrorCode::kUnavailable &&
                              out.error().message() == "webhook: namespace broken: lookup failed";
    Check(review_error || lookup_error);
    return 0;
  }
  const json answer = json::parse(*out, nullptr, /*allow_exceptions=*/false);
  Check(answer.is_object() && answer["apiVersion"] == "admission.k8s.io/v1" &&
        answer["kind"] == "AdmissionReview");
  const json& response = answer["response"];
  const json request = json::parse(text)["request"];
  Check(response["uid"] == request["uid"]);
  Check(response["allowed"].is_boolean());
  if (!response["allowed"].get<bool>()) {
    Check(!response.contains("patch"));
    Check(response["status"]["message"].is_string() &&
          !response["status"]["message"].get<std::string>().empty());
    return 0;
  }
  if (response.contains("patch")) {
    Check(response["patchType"] == "JSONPatch");
    auto bytes = hami::kube::DecodeBase64(response["patch"].get<std::string>());
    Check(bytes.ok());
    const json patch = json::parse(*bytes, nullptr, false);
    Check(patch.is_array() && !patch.empty());
    Check(hami::kube::ApplyJsonPatch(request["object"], patch).ok());
  }
  return 0;
}
