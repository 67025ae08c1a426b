// Fuzzes the webhook's Review with arbitrary bytes as the AdmissionReview, in device-plugin
// mode and in DRA mode: nothing crashes, a failure is kInvalidArgument naming the
// AdmissionReview (or the namespace lookup's error), and every answer is an admission.k8s.io/v1
// AdmissionReview echoing the request's uid whose JSON patch, when there is one, applies to the
// request's object; in DRA mode every template made sure of is named hami-<16 hex digits>. The
// same bytes as a hami.io/dra-request record decode (and round-trip) or fail naming it.
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kube/base64.h"
#include "kube/patch.h"
#include "scheduler/quota.h"
#include "scheduler/webhook.h"

namespace {

using nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool IsTemplateName(const json& name) {
  if (!name.is_string()) return false;
  const std::string& s = name.get_ref<const std::string&>();
  if (s.size() != 21 || s.rfind("hami-", 0) != 0) return false;
  for (size_t i = 5; i < s.size(); ++i) {
    if (!std::isxdigit(static_cast<unsigned char>(s[i])) || std::isupper(s[i])) return false;
  }
  return true;
}

hami::scheduler::webhook::WebhookContext MakeContext(hami::scheduler::webhook::WebhookMode mode) {
  hami::scheduler::webhook::WebhookContext c;
  c.mode = mode;
  c.ensure_claim_template = [](const json& t) -> hami::Status {
    Check(IsTemplateName(t["metadata"]["name"]) && t["metadata"]["namespace"].is_string());
    Check(hami::scheduler::webhook::ClaimTemplateServes(t, t));
    return hami::OkStatus();
  };
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
}

// One review in one mode, checked.
void ReviewAndCheck(std::string_view text, const hami::scheduler::webhook::WebhookContext& ctx) {
  auto out = hami::scheduler::webhook::Review(text, ctx);
  if (!out.ok()) {
    const bool review_error = out.error().code() == hami::ErrorCode::kInvalidArgument &&
                              out.error().message().rfind("AdmissionReview: ", 0) == 0;
    const bool lookup_error = out.error().code() == hami::ErrorCode::kUnavailable &&
                              out.error().message() == "webhook: namespace broken: lookup failed";
    Check(review_error || lookup_error);
    return;
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
    return;
  }
  if (response.contains("patch")) {
    Check(response["patchType"] == "JSONPatch");
    auto bytes = hami::kube::DecodeBase64(response["patch"].get<std::string>());
    Check(bytes.ok());
    const json patch = json::parse(*bytes, nullptr, false);
    Check(patch.is_array() && !patch.empty());
    Check(hami::kube::ApplyJsonPatch(request["object"], patch).ok());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const auto device_plugin =
      MakeContext(hami::scheduler::webhook::WebhookMode::kDevicePlugin);
  static const auto dra = MakeContext(hami::scheduler::webhook::WebhookMode::kDra);
  std::string_view text(reinterpret_cast<const char*>(data), size);
  ReviewAndCheck(text, device_plugin);
  ReviewAndCheck(text, dra);
  auto record = hami::scheduler::DecodeDraRequest(text);
  if (record.ok()) {
    auto again = hami::scheduler::DecodeDraRequest(hami::scheduler::EncodeDraRequest(*record));
    Check(again.ok() && *again == *record);
  } else {
    Check(record.error().code() == hami::ErrorCode::kInvalidArgument &&
          record.error().message().rfind("hami.io/dra-request: ", 0) == 0);
  }
  return 0;
}
