#include "kube/resource.h"

#include <gtest/gtest.h>

#include <set>
#include <string>

namespace hami::kube {
namespace {

TEST(Resource, ApiVersionAndQualifiedNameIncludeTheGroupOnlyOutsideTheCoreGroup) {
  EXPECT_EQ(kPods.ApiVersion(), "v1");
  EXPECT_EQ(kPods.QualifiedName(), "pods");
  EXPECT_EQ(kLeases.ApiVersion(), "coordination.k8s.io/v1");
  EXPECT_EQ(kLeases.QualifiedName(), "leases.coordination.k8s.io");
}

TEST(Resource, CollectionPathsFollowTheApiLayout) {
  EXPECT_EQ(CollectionPath(kPods, ""), "/api/v1/pods");
  EXPECT_EQ(CollectionPath(kPods, "default"), "/api/v1/namespaces/default/pods");
  EXPECT_EQ(CollectionPath(kNodes, "ignored"), "/api/v1/nodes");
  EXPECT_EQ(CollectionPath(kDaemonSets, "kube-system"),
            "/apis/apps/v1/namespaces/kube-system/daemonsets");
  EXPECT_EQ(CollectionPath(kClusterRoles, "ignored"),
            "/apis/rbac.authorization.k8s.io/v1/clusterroles");
  EXPECT_EQ(CollectionPath(kLeases, "kube-system"),
            "/apis/coordination.k8s.io/v1/namespaces/kube-system/leases");
}

TEST(Resource, ObjectPathsAppendNameAndSubresource) {
  EXPECT_EQ(ObjectPath(kPods, "ns", "p1"), "/api/v1/namespaces/ns/pods/p1");
  EXPECT_EQ(ObjectPath(kPods, "ns", "p1", "binding"), "/api/v1/namespaces/ns/pods/p1/binding");
  EXPECT_EQ(ObjectPath(kNodes, "", "n1", "status"), "/api/v1/nodes/n1/status");
}

TEST(Resource, TableIsFoundByKindAndHasUniqueNames) {
  std::set<std::string> kinds, plurals;
  for (const Resource& r : AllResources()) {
    EXPECT_EQ(FindResourceByKind(r.kind), &r);
    EXPECT_TRUE(kinds.insert(std::string(r.kind)).second) << r.kind;
    EXPECT_TRUE(plurals.insert(r.QualifiedName()).second) << r.plural;
  }
  EXPECT_EQ(AllResources().front().group, "");
  ASSERT_NE(FindResourceByKind("Deployment"), nullptr);
  EXPECT_EQ(FindResourceByKind("Deployment")->plural, kDeployments.plural);
  EXPECT_EQ(FindResourceByKind("StatefulSet"), nullptr);
  EXPECT_EQ(FindResourceByKind("pod"), nullptr);
}

}  // namespace
}  // namespace hami::kube
