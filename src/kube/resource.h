// The Kubernetes resources hami-cpp reads and writes, as the API names them. One table shared
// by the API client (URL building) and the simulated API server (routing, discovery).
#pragma once

#include <span>
#include <string>
#include <string_view>

namespace hami::kube {

// One resource collection of the API: `/api/v1/namespaces/NS/pods` is {"", "v1", "pods"}.
struct Resource {
  std::string_view group;     // "" for the core group
  std::string_view version;   // "v1"
  std::string_view plural;    // "pods": the URL segment
  std::string_view singular;  // "pod"
  std::string_view kind;      // "Pod"
  bool namespaced;
  std::string_view short_name;  // "po"; empty when the API has none

  // "v1" or "coordination.k8s.io/v1": the apiVersion of the resource's objects.
  std::string ApiVersion() const;
  // "pods" or "leases.coordination.k8s.io": how the API names it in error messages.
  std::string QualifiedName() const;
};

inline constexpr Resource kPods{"", "v1", "pods", "pod", "Pod", true, "po"};
inline constexpr Resource kNodes{"", "v1", "nodes", "node", "Node", false, "no"};
inline constexpr Resource kNamespaces{"",          "v1",  "namespaces", "namespace",
                                      "Namespace", false, "ns"};
inline constexpr Resource kEvents{"", "v1", "events", "event", "Event", true, "ev"};
inline constexpr Resource kConfigMaps{"", "v1", "configmaps", "configmap", "ConfigMap", true, "cm"};
inline constexpr Resource kResourceQuotas{
    "", "v1", "resourcequotas", "resourcequota", "ResourceQuota", true, "quota"};
inline constexpr Resource kServiceAccounts{
    "", "v1", "serviceaccounts", "serviceaccount", "ServiceAccount", true, "sa"};
inline constexpr Resource kSecrets{"", "v1", "secrets", "secret", "Secret", true, ""};
inline constexpr Resource kServices{"", "v1", "services", "service", "Service", true, "svc"};
inline constexpr Resource kLeases{
    "coordination.k8s.io", "v1", "leases", "lease", "Lease", true, ""};
inline constexpr Resource kDeployments{"apps",       "v1", "deployments", "deployment",
                                       "Deployment", true, "deploy"};
inline constexpr Resource kDaemonSets{"apps",      "v1", "daemonsets", "daemonset",
                                      "DaemonSet", true, "ds"};
inline constexpr Resource kClusterRoles{
    "rbac.authorization.k8s.io", "v1", "clusterroles", "clusterrole", "ClusterRole", false, ""};
inline constexpr Resource kClusterRoleBindings{"rbac.authorization.k8s.io",
                                               "v1",
                                               "clusterrolebindings",
                                               "clusterrolebinding",
                                               "ClusterRoleBinding",
                                               false,
                                               ""};
inline constexpr Resource kRoles{
    "rbac.authorization.k8s.io", "v1", "roles", "role", "Role", true, ""};
inline constexpr Resource kRoleBindings{
    "rbac.authorization.k8s.io", "v1", "rolebindings", "rolebinding", "RoleBinding", true, ""};
inline constexpr Resource kMutatingWebhookConfigurations{"admissionregistration.k8s.io",
                                                         "v1",
                                                         "mutatingwebhookconfigurations",
                                                         "mutatingwebhookconfiguration",
                                                         "MutatingWebhookConfiguration",
                                                         false,
                                                         ""};
inline constexpr Resource kPriorityClasses{
    "scheduling.k8s.io", "v1", "priorityclasses", "priorityclass", "PriorityClass", false, "pc"};
// Dynamic Resource Allocation (resource.k8s.io/v1; research/dra.md section 2).
inline constexpr Resource kDeviceClasses{
    "resource.k8s.io", "v1", "deviceclasses", "deviceclass", "DeviceClass", false, ""};
inline constexpr Resource kResourceSlices{
    "resource.k8s.io", "v1", "resourceslices", "resourceslice", "ResourceSlice", false, ""};
inline constexpr Resource kResourceClaims{
    "resource.k8s.io", "v1", "resourceclaims", "resourceclaim", "ResourceClaim", true, ""};
inline constexpr Resource kResourceClaimTemplates{"resource.k8s.io",
                                                  "v1",
                                                  "resourceclaimtemplates",
                                                  "resourceclaimtemplate",
                                                  "ResourceClaimTemplate",
                                                  true,
                                                  ""};

// Every resource above, core group first, then each group's resources together.
std::span<const Resource> AllResources();

// The resource whose kind is `kind` ("Pod"), or nullptr.
const Resource* FindResourceByKind(std::string_view kind);

// The collection path: "/api/v1/pods" (all namespaces, or a cluster-scoped resource),
// "/api/v1/namespaces/NS/pods", "/apis/coordination.k8s.io/v1/namespaces/NS/leases".
// `ns` is ignored for cluster-scoped resources.
std::string CollectionPath(const Resource& r, std::string_view ns);
// The object path: CollectionPath + "/" + name, then "/" + subresource when not empty.
std::string ObjectPath(const Resource& r, std::string_view ns, std::string_view name,
                       std::string_view subresource = {});

}  // namespace hami::kube
