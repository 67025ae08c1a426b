#include "kube/resource.h"

#include <array>

namespace hami::kube {

namespace {

constexpr std::array kAll{kPods,
                          kNodes,
                          kNamespaces,
                          kEvents,
                          kConfigMaps,
                          kResourceQuotas,
                          kServiceAccounts,
                          kSecrets,
                          kServices,
                          kLeases,
                          kDeployments,
                          kDaemonSets,
                          kClusterRoles,
                          kClusterRoleBindings,
                          kRoles,
                          kRoleBindings,
                          kMutatingWebhookConfigurations,
                          kPriorityClasses,
                          kDeviceClasses,
                          kResourceSlices,
                          kResourceClaims,
                          kResourceClaimTemplates};

}  // namespace

std::string Resource::ApiVersion() const {
  if (group.empty()) return std::string(version);
  return std::string(group) + "/" + std::string(version);
}

std::string Resource::QualifiedName() const {
  if (group.empty()) return std::string(plural);
  return std::string(plural) + "." + std::string(group);
}

std::span<const Resource> AllResources() { return kAll; }

const Resource* FindResourceByKind(std::string_view kind) {
  for (const Resource& r : kAll) {
    if (r.kind == kind) return &r;
  }
  return nullptr;
}

std::string CollectionPath(const Resource& r, std::string_view ns) {
  std::string path = r.group.empty() ? "/api/" : "/apis/" + std::string(r.group) + "/";
  path += r.version;
  if (r.namespaced && !ns.empty()) {
    path += "/namespaces/";
    path += ns;
  }
  path += "/";
  path += r.plural;
  return path;
}

std::string ObjectPath(const Resource& r, std::string_view ns, std::string_view name,
                       std::string_view subresource) {
  std::string path = CollectionPath(r, ns);
  path += "/";
  path += name;
  if (!subresource.empty()) {
    path += "/";
    path += subresource;
  }
  return path;
}

}  // namespace hami::kube
