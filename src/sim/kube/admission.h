// Mutating admission as kube-apiserver runs it, for the simulated API server's pod CREATE: the
// MutatingWebhookConfigurations' webhooks that match the request are called in turn with an
// AdmissionReview (admission.k8s.io/v1) and their JSON patches applied to the object; a
// webhook that denies the request, or fails under failurePolicy Fail, refuses the create.
//
// Matching (kube-apiserver's rules): a webhook's rules (operations, apiGroups, apiVersions,
// resources with "*" and "res/sub" forms, scope), namespaceSelector (against the namespace's
// labels, which always carry kubernetes.io/metadata.name) and objectSelector (against the
// object's labels), each a label selector with matchLabels and matchExpressions (In, NotIn,
// Exists, DoesNotExist). Configurations are taken in name order, their webhooks in list order,
// each webhook seeing the previous ones' patches. A webhook whose clientConfig names a service
// instead of a url is skipped (the simulation has no service network) and reported.
//
// The call: POST of the review to clientConfig.url (with ?timeout=Ns appended, as the API
// server does), over HTTPS verified with caBundle (base64 PEM; absent: the system's trust
// store), or plain HTTP when the url says http:// (kube-apiserver accepts only https; the
// simulation allows http for tests), within timeoutSeconds (default 10). A failed call, a
// status other than 200, or an answer that is not a valid AdmissionReview for this request
// (wrong apiVersion or kind, another uid, a patch without patchType JSONPatch) is a webhook
// failure: skipped under failurePolicy Ignore, 500 InternalError "failed calling webhook" under
// Fail (the default). A denial (allowed false) refuses with the answer's status code (at least
// 400; 403 when none), its reason, and the message "admission webhook \"NAME\" denied the
// request: MESSAGE". A patch that cannot be applied is 500 InternalError.
//
// Thread safety: Admitter may be used from any thread; the other functions are pure.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "kube/resource.h"
#include "sim/kube/api_status.h"

namespace hami::kube::internal {
class HttpTransport;
}

namespace hami::sim::kube {

// What admission sees of one request.
struct AdmissionAttributes {
  const hami::kube::Resource* resource = nullptr;
  std::string subresource;  // "" for the resource itself
  std::string operation;    // "CREATE", "UPDATE", "DELETE", "CONNECT"
  std::string ns;           // "" for a cluster-scoped resource
  std::string name;         // may be "" on CREATE with generateName
  nlohmann::json object;    // the object, with kind and apiVersion
  nlohmann::json namespace_labels = nlohmann::json::object();  // the namespace's labels
  std::string username;                                        // userInfo.username
  bool dry_run = false;
};

// One webhook of a configuration, as stored (defaults applied).
struct MatchedWebhook {
  std::string configuration;
  nlohmann::json webhook;
};

// The webhooks of `configurations` (stored MutatingWebhookConfigurations) that match `a`, in
// calling order. Webhooks without a clientConfig.url are left out and appended to `skipped`
// (when not null) as "configuration/webhook". Reads the objects defensively: a webhook whose
// fields are malformed does not match.
std::vector<MatchedWebhook> MatchWebhooks(const std::vector<nlohmann::json>& configurations,
                                          const AdmissionAttributes& a,
                                          std::vector<std::string>* skipped);

// The AdmissionReview request for `a` with `uid`: kind, resource, requestKind,
// requestResource, subResource, name, namespace, operation, userInfo, object, oldObject null,
// dryRun, options (CreateOptions for CREATE).
nlohmann::json ReviewRequest(const AdmissionAttributes& a, std::string_view uid);

// A webhook's decoded answer.
struct ReviewVerdict {
  bool allowed = false;
  nlohmann::json patch;  // a JSON patch (array), or null when none
  int code = 0;          // response.status.code (0: none)
  std::string reason;    // response.status.reason
  std::string message;   // response.status.message
};

// Decodes the answer body to a review of `uid`. kInvalidArgument naming what is wrong: not
// JSON, apiVersion or kind other than admission.k8s.io/v1 AdmissionReview, no response, a
// response.uid other than `uid`, allowed missing or not a boolean, a patch that is not base64
// of a JSON array, a patch without patchType "JSONPatch" (or a patchType without a patch).
Result<ReviewVerdict> ParseReviewResponse(std::string_view body, std::string_view uid);

class Admitter {
 public:
  Admitter();
  ~Admitter();
  Admitter(const Admitter&) = delete;
  Admitter& operator=(const Admitter&) = delete;

  // Runs the webhooks of `configurations` that match `a` on `a.object` and answers the object
  // as they leave it (with kind and apiVersion), or the Status refusing the request. Each
  // skipped or ignored webhook is passed to `note` as one line (may be empty).
  ApiResult<nlohmann::json> Admit(const std::vector<nlohmann::json>& configurations,
                                  AdmissionAttributes a,
                                  const std::function<void(const std::string&)>& note);

 private:
  hami::kube::internal::HttpTransport& TransportFor(const std::string& ca_pem);

  std::mutex mu_;
  std::map<std::string, std::unique_ptr<hami::kube::internal::HttpTransport>> transports_;
  uint64_t next_uid_ = 0;
};

}  // namespace hami::sim::kube
