#include "monitor/claims.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

namespace hami::monitor {
namespace {

using nlohmann::json;
using ::testing::ElementsAre;
using ::testing::IsEmpty;

const node::ClaimRecord kClaim{"ml", "shared-gpu", "c-uid"};

std::shared_ptr<const json> Pod(const std::string& name, const std::string& created, json spec,
                                json status = json::object()) {
  return std::make_shared<const json>(json{{"metadata",
                                            {{"namespace", "ml"},
                                             {"name", name},
                                             {"uid", name + "-uid"},
                                             {"creationTimestamp", created}}},
                                           {"spec", std::move(spec)},
                                           {"status", std::move(status)}});
}

json Container(const std::string& name, json claims = json::array()) {
  json c = {{"name", name}};
  if (!claims.empty()) c["resources"]["claims"] = std::move(claims);
  return c;
}

TEST(ClaimUsers, ContainersNamingThePodClaimOfTheClaimByNameInSpecOrder) {
  auto pod = Pod("trainer", "2026-01-01T00:00:00Z",
                 {{"resourceClaims",
                   {{{"name", "gpu"}, {"resourceClaimName", "shared-gpu"}},
                    {{"name", "other"}, {"resourceClaimName", "x"}}}},
                  {"initContainers", {Container("setup", {{{"name", "gpu"}}})}},
                  {"containers",
                   {Container("main", {{{"name", "gpu"}, {"request", "r"}}}),
                    Container("sidecar", {{{"name", "other"}}}), Container("plain")}}});
  EXPECT_THAT(ClaimUsers({pod}, kClaim), ElementsAre(ClaimUser{"trainer", "trainer-uid", "setup"},
                                                     ClaimUser{"trainer", "trainer-uid", "main"}));
}

TEST(ClaimUsers, AClaimMadeFromATemplateIsFoundThroughThePodsStatus) {
  auto pod =
      Pod("p", "2026-01-01T00:00:00Z",
          {{"resourceClaims", {{{"name", "gpu"}, {"resourceClaimTemplateName", "t"}}}},
           {"containers", {Container("main", {{{"name", "gpu"}}})}}},
          {{"resourceClaimStatuses", {{{"name", "gpu"}, {"resourceClaimName", "shared-gpu"}}}}});
  EXPECT_THAT(ClaimUsers({pod}, kClaim), ElementsAre(ClaimUser{"p", "p-uid", "main"}));
}

TEST(ClaimUsers, TheExtendedResourceClaimNamesItsContainersByItsMappings) {
  auto pod = Pod("p", "2026-01-01T00:00:00Z", {{"containers", {Container("a"), Container("b")}}},
                 {{"extendedResourceClaimStatus",
                   {{"resourceClaimName", "shared-gpu"},
                    {"requestMappings",
                     {{{"containerName", "b"},
                       {"resourceName", "nvidia.com/gpu"},
                       {"requestName", "container-1-request-0"}}}}}}});
  EXPECT_THAT(ClaimUsers({pod}, kClaim), ElementsAre(ClaimUser{"p", "p-uid", "b"}));
}

TEST(ClaimUsers, SharedByPodsTheOldestComesFirstAndEndedPodsAndOtherNamespacesDoNot) {
  json spec = {{"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", "shared-gpu"}}}},
               {"containers", {Container("main", {{{"name", "gpu"}}})}}};
  auto young = Pod("a-young", "2026-01-02T00:00:00Z", spec);
  auto old = Pod("z-old", "2026-01-01T00:00:00Z", spec);
  auto twin = Pod("b-twin", "2026-01-02T00:00:00Z", spec);
  auto done = Pod("done", "2025-01-01T00:00:00Z", spec, {{"phase", "Succeeded"}});
  auto elsewhere = std::make_shared<const json>([&] {
    json p = *old;
    p["metadata"]["namespace"] = "other";
    return p;
  }());
  EXPECT_THAT(ClaimUsers({young, done, twin, elsewhere, old}, kClaim),
              ElementsAre(ClaimUser{"z-old", "z-old-uid", "main"},
                          ClaimUser{"a-young", "a-young-uid", "main"},
                          ClaimUser{"b-twin", "b-twin-uid", "main"}));
}

TEST(ClaimUsers, APodReferencingTheClaimWithoutAContainerCountsOnce) {
  auto pod = Pod("p", "2026-01-01T00:00:00Z",
                 {{"resourceClaims", {{{"name", "gpu"}, {"resourceClaimName", "shared-gpu"}}}},
                  {"containers", {Container("main")}}});
  EXPECT_THAT(ClaimUsers({pod}, kClaim), ElementsAre(ClaimUser{"p", "p-uid", ""}));
}

TEST(ClaimUsers, MalformedObjectsAndUnrelatedPodsAreSkipped) {
  auto unrelated = Pod("u", "2026-01-01T00:00:00Z", {{"containers", {Container("main")}}});
  auto wrong_types = std::make_shared<const json>(
      json{{"metadata", {{"namespace", "ml"}, {"name", 7}}},
           {"spec", {{"resourceClaims", "not a list"}, {"containers", {{{"name", 1}}}}}},
           {"status", {{"resourceClaimStatuses", {1, 2}}}}});
  auto not_object = std::make_shared<const json>(json::array());
  EXPECT_THAT(ClaimUsers({unrelated, wrong_types, not_object, nullptr}, kClaim), IsEmpty());
}

}  // namespace
}  // namespace hami::monitor
