// The mutating admission webhook of hami-scheduler (POST /webhook): it reads an AdmissionReview
// (admission.k8s.io/v1) for a pod being created and answers an AdmissionReview whose response
// echoes the request's uid and either allows the pod — with a JSON patch (RFC 6902, base64 in
// `patch`, patchType "JSONPatch") when it changes something — or denies it with
// status.message saying why (code 403, reason Forbidden; 400 BadRequest for a pod whose HAMi
// resources cannot be read). docs/webhook.md lists every message.
//
// What it does, in this order (resource names from the config::DeviceConfig):
//   1. anything but a CREATE of a pod (resource pods, no subresource) is allowed unchanged;
//   2. a pod labelled hami.io/webhook=ignore, or one in a namespace so labelled, is allowed
//      unchanged;
//   3. a pod whose spec.schedulerName is another scheduler (not empty, not default-scheduler,
//      not WebhookContext::scheduler_name) is allowed unchanged;
//   4. with overwriteEnv, every container (and init container) that names no HAMi resource gets
//      env NVIDIA_VISIBLE_DEVICES=none (an existing value is replaced), so that a node whose
//      default runtime is NVIDIA's hands it no GPU; a pod with no HAMi resource at all stops
//      here (allowed with that patch);
//   then, per container and init container:
//      - memory (gpumem or gpumem-percentage) or cores without a count gains the count,
//        defaultGPUNum (1 by default), in resources.limits, and in resources.requests when the
//        container has requests;
//      - a count of at least one with neither memory, percentage nor cores, while
//        defaultMemory is 0 (the container would get the whole GPU's memory), gains cores 100 the
//        same way: the GPU is exclusive;
//      - a priority (limits, else requests) sets the container's env CUDA_TASK_PRIORITY to its
//        value (an existing CUDA_TASK_PRIORITY is replaced);
//   5. a pod that then requests GPUs (scheduler/request.h, read from the patched pod, so a bad
//      value is denied naming the container and resource) gets spec.schedulerName =
//      scheduler_name, and is denied when a container requesting GPUs is privileged
//      (securityContext.privileged), when spec.nodeName is already set, or when its fixed
//      request (scheduler/quota.h's RequestAmounts) would pass its namespace's quota; with
//      runtimeClassName set, such a pod without a spec.runtimeClassName of its own gets it.
// JSON-patch paths escape '~' as ~0 and '/' as ~1 (RFC 6901): resource names contain '/'.
//
// DRA mode (WebhookContext::mode kDra; docs/webhook.md, "DRA mode"): steps 1 to 4 as above, but
// nothing is added to a container's resources (neither the implied count nor cores 100); the
// pod is read as in step 5, then:
//   - a container whose resources name memory, percentage or cores is rewritten: those, the
//     count and the priority are removed from its limits and requests, and it gets
//     resources.claims [{name: "hami-<container>"}] ("hami-gpu-<i>", i counting init
//     containers then containers, when that is longer than 63 characters); the pod gets
//     spec.resourceClaims
//     [{name: "hami-<container>", resourceClaimTemplateName: "hami-<16 hex digits>"}], the
//     label hami.io/dra "true" and the annotation hami.io/dra-request (scheduler/quota.h);
//     the template (ClaimTemplate below) is made sure of through ctx.ensure_claim_template,
//     except on a dry run;
//   - a container that names only the count is left to the DeviceClass's extended resource
//     (KEP-5004); a priority of any container is removed from its resources once in its env;
//   - denied: a percentage other than 100 (a device's memory is unknown before one is chosen),
//     a container whose memory is not fixed in a namespace with a memory quota, a pod claim
//     name already taken, a use-/nouse- annotation value that cannot be put in a CEL string,
//     the quota, privileged and nodeName checks of step 5, and a template that cannot be made
//     sure of (code 500, naming the template); spec.schedulerName is left as it is (the
//     scheduler's DRA allocation places the pod), runtimeClassName is set as in step 5.
//
// Errors (the Result's, for the HTTP layer to answer 400 or 500; the API server then applies
// the webhook's failurePolicy): a body that is not JSON or nested deeper than 512 levels, a
// missing or mistyped field of the review (apiVersion admission.k8s.io/v1, kind AdmissionReview,
// request.uid, request.kind, request.resource, request.operation, request.object for a pod
// CREATE, request.dryRun when present) — kInvalidArgument naming the field ("AdmissionReview:
// request.uid: missing"); a namespace lookup that fails other than kNotFound — its code, naming the
// namespace.
//
// Thread safety: Review is pure apart from calling ctx.lookup_namespace and
// ctx.ensure_claim_template, which must be safe to call from the threads that call Review.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "config/device_config.h"
#include "kube/objects.h"
#include "scheduler/quota.h"

namespace hami::scheduler::webhook {

// The label that makes the webhook skip a pod, or every pod of a namespace.
inline constexpr std::string_view kWebhookLabel = "hami.io/webhook";
inline constexpr std::string_view kWebhookIgnore = "ignore";
// The variable overwriteEnv sets to "none" in containers that ask for no GPU.
inline constexpr std::string_view kVisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES";

// What the webhook needs to know about a namespace.
struct NamespaceView {
  kube::StringMap labels;
  NamespaceQuota quota;  // QuotaFromResourceQuotas of its ResourceQuotas
  QuotaAmounts used;     // what its pods hold now (AllocationAmounts summed)
};

// Which front door serves the cluster's GPUs: HAMi's device plugin (the pod keeps its resources
// and goes to the scheduler extender) or the DRA driver (the pod's shares become claims).
enum class WebhookMode { kDevicePlugin, kDra };

// "device-plugin" or "dra"; kInvalidArgument naming `what` (the flag) otherwise.
Result<WebhookMode> ParseWebhookMode(std::string_view text, std::string_view what);
std::string_view WebhookModeName(WebhookMode mode);

// The DRA driver's name, which is also its DeviceClass's name and its attributes' domain.
inline constexpr std::string_view kDraDriver = "hami-core-gpu.project-hami.io";
// The one request of a claim the webhook writes.
inline constexpr std::string_view kDraRequestName = "gpu";

// The ResourceClaimTemplate (resource.k8s.io/v1) that serves one container's share: in
// namespace `ns`, one request kDraRequestName `exactly {deviceClassName kDraDriver,
// allocationMode ExactCount, count, selectors (CEL, when given), capacity.requests {memory
// (<mem_mib>Mi in canonical form, left out when mem_mib is 0: the device's default), cores}}`,
// label hami.io/dra "true", named "hami-" + 16 hex digits of a 64-bit FNV-1a hash of its spec,
// so that pods asking for the same shape share it.
nlohmann::json ClaimTemplate(std::string_view ns, int32_t count, int32_t mem_mib, int32_t cores,
                             const std::vector<std::string>& selectors);

// Whether a stored template `stored` serves what `wanted` (a ClaimTemplate) asks: every field
// of wanted.spec is in stored.spec with the same value (quantities compared by value), so that
// fields the API server defaults do not matter.
bool ClaimTemplateServes(const nlohmann::json& stored, const nlohmann::json& wanted);

struct WebhookContext {
  config::DeviceConfig device_config;
  std::string scheduler_name = "hami-scheduler";
  WebhookMode mode = WebhookMode::kDevicePlugin;
  // The namespace's labels, quota and usage. kNotFound counts as a namespace without labels or
  // quota; another error fails the review. Empty: no namespace is ever labelled or limited.
  std::function<Result<NamespaceView>(std::string_view ns)> lookup_namespace;
  // DRA mode: makes sure the ResourceClaimTemplate `claim_template` (a ClaimTemplate, namespace
  // and name set) exists and serves what it asks (ClaimTemplateServes), creating it when it is
  // absent; idempotent. An error denies the pod. Empty in DRA mode: every rewrite is denied.
  std::function<Status(const nlohmann::json& claim_template)> ensure_claim_template;
};

// The AdmissionReview answer (compact JSON) to `admission_review_json`.
Result<std::string> Review(std::string_view admission_review_json, const WebhookContext& ctx);

// One reference token of a JSON pointer (RFC 6901): '~' -> "~0", '/' -> "~1".
std::string EscapeJsonPointerToken(std::string_view token);

}  // namespace hami::scheduler::webhook
