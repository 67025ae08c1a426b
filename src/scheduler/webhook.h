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
// Errors (the Result's, for the HTTP layer to answer 400 or 500; the API server then applies
// the webhook's failurePolicy): a body that is not JSON or nested deeper than 512 levels, a
// missing or mistyped field of the review (apiVersion admission.k8s.io/v1, kind AdmissionReview,
// request.uid, request.kind, request.resource, request.operation, request.object for a pod
// CREATE) — kInvalidArgument naming the field ("AdmissionReview: request.uid: missing"); a
// namespace lookup that fails other than kNotFound — its code, naming the namespace.
//
// Thread safety: Review is pure apart from calling ctx.lookup_namespace, which must be safe to
// call from the threads that call Review.
#pragma once

#include <functional>
#include <string>
#include <string_view>

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

struct WebhookContext {
  config::DeviceConfig device_config;
  std::string scheduler_name = "hami-scheduler";
  // The namespace's labels, quota and usage. kNotFound counts as a namespace without labels or
  // quota; another error fails the review. Empty: no namespace is ever labelled or limited.
  std::function<Result<NamespaceView>(std::string_view ns)> lookup_namespace;
};

// The AdmissionReview answer (compact JSON) to `admission_review_json`.
Result<std::string> Review(std::string_view admission_review_json, const WebhookContext& ctx);

// One reference token of a JSON pointer (RFC 6901): '~' -> "~0", '/' -> "~1".
std::string EscapeJsonPointerToken(std::string_view token);

}  // namespace hami::scheduler::webhook
