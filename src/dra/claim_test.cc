#include "dra/claim.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json Claim(json results) {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "ResourceClaim"},
          {"metadata", {{"namespace", "ml"}, {"name", "c"}, {"uid", "u-1"}}},
          {"status", {{"allocation", {{"devices", {{"results", std::move(results)}}}}}}}};
}

const ClaimRef kRef{"ml", "u-1", "c"};

TEST(ClaimAllocation, KeepsThisDriversResultsWithTheirConsumedCapacity) {
  json claim = Claim(json::array(
      {{{"request", "gpu/small"},
        {"driver", kDriverName},
        {"pool", "n1"},
        {"device", "hami-gpu-0"},
        {"shareID", "s-1"},
        {"consumedCapacity", {{"memory", "3000Mi"}, {"cores", "30"}}}},
       {{"request", "nic"}, {"driver", "other.example.com"}, {"pool", "n1"}, {"device", "x"}},
       {{"request", "whole"}, {"driver", kDriverName}, {"pool", "n1"}, {"device", "hami-gpu-1"}}}));
  auto r = ParseClaimAllocation(claim, kRef, kDriverName);
  ASSERT_TRUE(r.ok()) << r.error().message();
  ASSERT_EQ(r->size(), 2u);
  EXPECT_EQ((*r)[0].request, "gpu");  // the base request name
  EXPECT_EQ((*r)[0].device, "hami-gpu-0");
  EXPECT_EQ((*r)[0].share_id, "s-1");
  EXPECT_EQ((*r)[0].memory_bytes, uint64_t{3000} << 20);
  EXPECT_EQ((*r)[0].cores, 30);
  EXPECT_EQ((*r)[1].device, "hami-gpu-1");
  EXPECT_FALSE((*r)[1].memory_bytes.has_value());
  EXPECT_FALSE((*r)[1].cores.has_value());
}

TEST(ClaimAllocation, RefusesAClaimOfAnotherUid) {
  json claim = Claim(json::array());
  claim["metadata"]["uid"] = "u-2";
  auto r = ParseClaimAllocation(claim, kRef, kDriverName);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message(), HasSubstr("claim ml/c (uid u-1)"));
}

TEST(ClaimAllocation, RefusesAnUnallocatedClaim) {
  json claim = Claim(json::array());
  claim["status"].erase("allocation");
  auto r = ParseClaimAllocation(claim, kRef, kDriverName);
  ASSERT_FALSE(r.ok());
  EXPECT_THAT(r.error().message(), HasSubstr("status.allocation: missing"));
}

TEST(ClaimAllocation, RefusesBadQuantitiesNamingTheField) {
  for (const char* bad : {"-1", "1.5", "lots"}) {
    json claim = Claim(json::array({{{"request", "gpu"},
                                     {"driver", kDriverName},
                                     {"pool", "n1"},
                                     {"device", "hami-gpu-0"},
                                     {"consumedCapacity", {{"cores", bad}}}}}));
    auto r = ParseClaimAllocation(claim, kRef, kDriverName);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_THAT(r.error().message(), HasSubstr("results[0].consumedCapacity.cores")) << bad;
  }
}

TEST(StaticClaimSource, AnswersByNamespaceAndName) {
  StaticClaimSource source;
  source.Put(Claim(json::array()));
  EXPECT_TRUE(source.Get(kRef).ok());
  source.Remove("ml", "c");
  auto gone = source.Get(kRef);
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
}

}  // namespace
}  // namespace hami::dra
