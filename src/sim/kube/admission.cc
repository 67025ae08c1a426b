#include "sim/kube/admission.h"

#include <algorithm>
#include <cstdio>

#include "kube/base64.h"
#include "kube/http.h"
#include "kube/patch.h"
#include "kube/selector.h"

namespace hami::sim::kube {

using hami::kube::Resource;
using nlohmann::json;

namespace {

constexpr std::string_view kReviewApiVersion = "admission.k8s.io/v1";
constexpr std::string_view kNamespaceNameLabel = "kubernetes.io/metadata.name";
constexpr int kDefaultTimeoutSeconds = 10;

const json* Field(const json& j, std::string_view key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

std::string Str(const json& j, std::string_view key) {
  const json* v = Field(j, key);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

// Whether the list of strings at j[key] holds `value` or "*".
bool ListHas(const json& j, std::string_view key, std::string_view value) {
  const json* list = Field(j, key);
  if (list == nullptr || !list->is_array()) return false;
  return std::any_of(list->begin(), list->end(), [&](const json& v) {
    return v.is_string() && (v == "*" || v.get_ref<const std::string&>() == value);
  });
}

// A rule's resources: "pods", "*" (every resource, no subresource), "pods/*", "*/*", "*/status".
bool ResourceMatches(const json& rule, std::string_view resource, std::string_view sub) {
  const json* list = Field(rule, "resources");
  if (list == nullptr || !list->is_array()) return false;
  for (const json& v : *list) {
    if (!v.is_string()) continue;
    const std::string& text = v.get_ref<const std::string&>();
    const size_t slash = text.find('/');
    const std::string_view res = std::string_view(text).substr(0, slash);
    const std::string_view want_sub =
        slash == std::string::npos ? std::string_view() : std::string_view(text).substr(slash + 1);
    if ((res == "*" || res == resource) && (want_sub == "*" || want_sub == sub)) return true;
  }
  return false;
}

bool RuleMatches(const json& rule, const AdmissionAttributes& a) {
  const Resource& r = *a.resource;
  if (!ListHas(rule, "operations", a.operation)) return false;
  if (!ListHas(rule, "apiGroups", r.group)) return false;
  if (!ListHas(rule, "apiVersions", r.version)) return false;
  if (!ResourceMatches(rule, r.plural, a.subresource)) return false;
  const std::string scope = Str(rule, "scope");
  if (scope == "Namespaced") return r.namespaced;
  if (scope == "Cluster") return !r.namespaced;
  return scope.empty() || scope == "*";
}

// A metav1.LabelSelector as a parsed selector; nullopt when malformed (matches nothing).
std::optional<hami::kube::LabelSelector> Selector(const json* selector) {
  std::string text;
  auto add = [&text](const std::string& part) {
    if (!text.empty()) text += ",";
    text += part;
  };
  if (selector != nullptr) {
    if (!selector->is_object()) return std::nullopt;
    if (const json* labels = Field(*selector, "matchLabels")) {
      if (!labels->is_object()) return std::nullopt;
      for (const auto& [k, v] : labels->items()) {
        if (!v.is_string()) return std::nullopt;
        add(k + "=" + v.get<std::string>());
      }
    }
    if (const json* exprs = Field(*selector, "matchExpressions")) {
      if (!exprs->is_array()) return std::nullopt;
      for (const json& e : *exprs) {
        const std::string key = Str(e, "key"), op = Str(e, "operator");
        std::string values;
        if (const json* vs = Field(e, "values"); vs != nullptr && vs->is_array()) {
          for (const json& v : *vs) {
            if (!v.is_string()) return std::nullopt;
            values += (values.empty() ? "" : ",") + v.get<std::string>();
          }
        }
        if (op == "In") {
          add(key + " in (" + values + ")");
        } else if (op == "NotIn") {
          add(key + " notin (" + values + ")");
        } else if (op == "Exists") {
          add(key);
        } else if (op == "DoesNotExist") {
          add("!" + key);
        } else {
          return std::nullopt;
        }
      }
    }
  }
  auto parsed = hami::kube::LabelSelector::Parse(text);
  if (!parsed.ok()) return std::nullopt;
  return std::move(*parsed);
}

bool SelectorMatches(const json* selector, const json& labels) {
  auto s = Selector(selector);
  if (!s) return false;
  return s->Matches(json{{"metadata", {{"labels", labels}}}});
}

json LabelsOf(const json& object) {
  const json* meta = Field(object, "metadata");
  const json* labels = meta != nullptr ? Field(*meta, "labels") : nullptr;
  return labels != nullptr && labels->is_object() ? *labels : json::object();
}

bool WebhookMatches(const json& hook, const AdmissionAttributes& a) {
  const json* rules = Field(hook, "rules");
  if (rules == nullptr || !rules->is_array()) return false;
  if (!std::any_of(rules->begin(), rules->end(),
                   [&](const json& rule) { return RuleMatches(rule, a); })) {
    return false;
  }
  if (a.resource->namespaced) {
    json ns_labels = a.namespace_labels.is_object() ? a.namespace_labels : json::object();
    ns_labels[std::string(kNamespaceNameLabel)] = a.ns;
    if (!SelectorMatches(Field(hook, "namespaceSelector"), ns_labels)) return false;
  } else if (a.resource->plural == "namespaces" && a.resource->group.empty()) {
    if (!SelectorMatches(Field(hook, "namespaceSelector"), LabelsOf(a.object))) return false;
  }
  return SelectorMatches(Field(hook, "objectSelector"), LabelsOf(a.object));
}

json GroupVersionKind(const Resource& r) {
  return {{"group", r.group}, {"version", r.version}, {"kind", r.kind}};
}

json GroupVersionResource(const Resource& r) {
  return {{"group", r.group}, {"version", r.version}, {"resource", r.plural}};
}

ApiStatus WebhookFailure(const std::string& hook, const std::string& why) {
  return InternalError("failed calling webhook \"" + hook + "\": " + why);
}

}  // namespace

std::vector<MatchedWebhook> MatchWebhooks(const std::vector<json>& configurations,
                                          const AdmissionAttributes& a,
                                          std::vector<std::string>* skipped) {
  std::vector<const json*> sorted;
  for (const json& c : configurations) sorted.push_back(&c);
  auto name_of = [](const json* c) {
    const json* meta = Field(*c, "metadata");
    return meta != nullptr ? Str(*meta, "name") : std::string();
  };
  std::stable_sort(sorted.begin(), sorted.end(),
                   [&](const json* x, const json* y) { return name_of(x) < name_of(y); });
  std::vector<MatchedWebhook> out;
  for (const json* c : sorted) {
    const json* hooks = Field(*c, "webhooks");
    if (hooks == nullptr || !hooks->is_array()) continue;
    for (const json& hook : *hooks) {
      if (!hook.is_object() || !WebhookMatches(hook, a)) continue;
      const json* cc = Field(hook, "clientConfig");
      if (cc == nullptr || Str(*cc, "url").empty()) {
        if (skipped != nullptr) skipped->push_back(name_of(c) + "/" + Str(hook, "name"));
        continue;
      }
      out.push_back({name_of(c), hook});
    }
  }
  return out;
}

json ReviewRequest(const AdmissionAttributes& a, std::string_view uid) {
  const Resource& r = *a.resource;
  json request = {{"uid", uid},
                  {"kind", GroupVersionKind(r)},
                  {"resource", GroupVersionResource(r)},
                  {"requestKind", GroupVersionKind(r)},
                  {"requestResource", GroupVersionResource(r)},
                  {"name", a.name},
                  {"namespace", a.ns},
                  {"operation", a.operation},
                  {"userInfo",
                   {{"username", a.username.empty() ? "system:anonymous" : a.username},
                    {"groups", json::array({"system:authenticated"})}}},
                  {"object", a.object},
                  {"oldObject", nullptr},
                  {"dryRun", a.dry_run}};
  if (!a.subresource.empty()) {
    request["subResource"] = a.subresource;
    request["requestSubResource"] = a.subresource;
  }
  if (a.operation == "CREATE") {
    request["options"] = {{"kind", "CreateOptions"}, {"apiVersion", "meta.k8s.io/v1"}};
  }
  return {{"apiVersion", kReviewApiVersion}, {"kind", "AdmissionReview"}, {"request", request}};
}

Result<ReviewVerdict> ParseReviewResponse(std::string_view body, std::string_view uid) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "AdmissionReview answer: " + why);
  };
  json review;
  try {
    review = json::parse(body);
  } catch (const json::exception& e) {
    return bad(std::string("not JSON: ") + e.what());
  }
  if (!review.is_object()) return bad("not a JSON object");
  if (Str(review, "apiVersion") != kReviewApiVersion || Str(review, "kind") != "AdmissionReview") {
    return bad("expected admission.k8s.io/v1 AdmissionReview, got apiVersion \"" +
               Str(review, "apiVersion") + "\" kind \"" + Str(review, "kind") + "\"");
  }
  const json* response = Field(review, "response");
  if (response == nullptr || !response->is_object()) return bad("response: missing");
  if (Str(*response, "uid") != uid) {
    return bad("expected response.uid=\"" + std::string(uid) + "\", got \"" +
               Str(*response, "uid") + "\"");
  }
  const json* allowed = Field(*response, "allowed");
  if (allowed == nullptr || !allowed->is_boolean()) {
    return bad("response.allowed: missing or not a boolean");
  }
  ReviewVerdict v;
  v.allowed = allowed->get<bool>();
  if (const json* status = Field(*response, "status"); status != nullptr && status->is_object()) {
    if (const json* code = Field(*status, "code"); code != nullptr && code->is_number_integer()) {
      v.code = code->get<int>();
    }
    v.reason = Str(*status, "reason");
    v.message = Str(*status, "message");
  }
  const std::string patch = Str(*response, "patch");
  const std::string patch_type = Str(*response, "patchType");
  if (patch.empty() && !patch_type.empty()) {
    return bad("response.patchType \"" + patch_type + "\" without response.patch");
  }
  if (!patch.empty()) {
    if (patch_type != "JSONPatch") {
      return bad("response.patch with patchType \"" + patch_type +
                 "\": only JSONPatch is "
                 "supported");
    }
    auto decoded = hami::kube::DecodeBase64(patch);
    if (!decoded.ok()) return bad("response.patch: " + decoded.error().message());
    try {
      v.patch = json::parse(*decoded);
    } catch (const json::exception& e) {
      return bad(std::string("response.patch: not JSON: ") + e.what());
    }
    if (!v.patch.is_array()) return bad("response.patch: a JSON patch must be a list");
  }
  return v;
}

Admitter::Admitter() = default;
Admitter::~Admitter() = default;

hami::kube::internal::HttpTransport& Admitter::TransportFor(const std::string& ca_pem) {
  std::lock_guard lock(mu_);
  auto& slot = transports_[ca_pem];
  if (!slot) {
    hami::kube::internal::TlsOptions tls;
    tls.ca_pem = ca_pem;
    slot = std::make_unique<hami::kube::internal::HttpTransport>(
        std::move(tls), "kube-apiserver-admission", std::chrono::seconds(kDefaultTimeoutSeconds));
  }
  return *slot;
}

ApiResult<json> Admitter::Admit(const std::vector<json>& configurations, AdmissionAttributes a,
                                const std::function<void(const std::string&)>& note) {
  std::vector<std::string> skipped;
  std::vector<MatchedWebhook> hooks = MatchWebhooks(configurations, a, &skipped);
  for (const std::string& s : skipped) {
    if (note) note("webhook=" + s + " skipped: its clientConfig names a service, not a url");
  }
  for (const MatchedWebhook& m : hooks) {
    const std::string name = Str(m.webhook, "name");
    const bool ignore = Str(m.webhook, "failurePolicy") == "Ignore";
    int timeout_seconds = kDefaultTimeoutSeconds;
    if (const json* t = Field(m.webhook, "timeoutSeconds");
        t != nullptr && t->is_number_integer()) {
      timeout_seconds = std::clamp(t->get<int>(), 1, 30);
    }
    const json& cc = *Field(m.webhook, "clientConfig");
    std::string url = Str(cc, "url");
    url += (url.find('?') == std::string::npos ? "?" : "&") +
           ("timeout=" + std::to_string(timeout_seconds) + "s");
    auto fail = [&](const std::string& why) -> std::optional<ApiStatus> {
      if (ignore) {
        if (note) note("webhook=" + name + " ignored (failurePolicy Ignore): " + why);
        return std::nullopt;
      }
      return WebhookFailure(name, why);
    };
    std::string ca_pem;
    if (const std::string bundle = Str(cc, "caBundle"); !bundle.empty()) {
      auto decoded = hami::kube::DecodeBase64(bundle);
      if (!decoded.ok()) {
        if (auto s = fail("clientConfig.caBundle: " + decoded.error().message())) return *s;
        continue;
      }
      ca_pem = std::move(*decoded);
    }
    std::string uid;
    {
      std::lock_guard lock(mu_);
      char buf[64];
      std::snprintf(buf, sizeof(buf), "5a1e0000-0000-4000-8000-%012llx",
                    static_cast<unsigned long long>(++next_uid_));
      uid = buf;
    }
    const std::string body = ReviewRequest(a, uid).dump();
    hami::kube::internal::HttpRequest req;
    req.method = "POST";
    req.url = url;
    req.headers = {"Content-Type: application/json", "Accept: application/json"};
    req.body = body;
    req.timeout = std::chrono::seconds(timeout_seconds);
    hami::kube::internal::HttpResponse res = TransportFor(ca_pem).Perform(req);
    std::optional<ApiStatus> failure;
    if (res.outcome != hami::kube::internal::TransportOutcome::kOk) {
      failure = fail("failed to call webhook: Post \"" + url + "\": " + res.transport_error);
    } else if (res.status != 200) {
      failure = fail("failed to call webhook: the server responded with the status code " +
                     std::to_string(res.status) + ": " + res.body.substr(0, 512));
    } else {
      auto verdict = ParseReviewResponse(res.body, uid);
      if (!verdict.ok()) {
        failure = fail("received invalid webhook response: " + verdict.error().message());
      } else if (!verdict->allowed) {
        ApiStatus s;
        s.code = verdict->code == 0 ? 403 : std::max(verdict->code, 400);
        s.reason = verdict->reason;
        const std::string denied = "admission webhook \"" + name + "\" denied the request";
        if (!verdict->message.empty()) {
          s.message = denied + ": " + verdict->message;
        } else if (!verdict->reason.empty()) {
          s.message = denied + ": " + verdict->reason;
        } else {
          s.message = denied + " without explanation";
        }
        return s;
      } else if (!verdict->patch.is_null()) {
        auto patched = hami::kube::ApplyJsonPatch(a.object, verdict->patch);
        if (!patched.ok()) {
          return InternalError(
              "admission webhook \"" + name +
              "\" answered a patch that cannot be applied: " + patched.error().message());
        }
        a.object = std::move(*patched);
      }
    }
    if (failure) return *failure;
  }
  return std::move(a.object);
}

}  // namespace hami::sim::kube
