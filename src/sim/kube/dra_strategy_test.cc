// The registry's rules for resource.k8s.io/v1 through the strategy's entry points: defaults,
// the 422 of each rejected field, what an update may change, and a claim's status.
#include "sim/kube/dra_strategy.h"

#include <gtest/gtest.h>

#include <string>

#include "kube/resource.h"
#include "sim/kube/strategy.h"

namespace hami::sim::kube {
namespace {

using nlohmann::json;

json Slice() {
  return {{"metadata", {{"name", "n1-gpu"}}},
          {"spec",
           {{"driver", "hami-core-gpu.project-hami.io"},
            {"nodeName", "n1"},
            {"pool", {{"name", "n1"}, {"generation", 1}, {"resourceSliceCount", 1}}},
            {"devices",
             {{{"name", "hami-gpu-0"},
               {"allowMultipleAllocations", true},
               {"attributes", {{"uuid", {{"string", "GPU-1"}}}, {"index", {{"int", 0}}}}},
               {"capacity", {{"memory", {{"value", "80Gi"}}}, {"cores", {{"value", "100"}}}}}}}}}}};
}

json Claim() {
  return {{"metadata", {{"name", "c"}, {"namespace", "ml"}}},
          {"spec",
           {{"devices",
             {{"requests",
               {{{"name", "gpu"},
                 {"exactly",
                  {{"deviceClassName", "hami-core-gpu.project-hami.io"},
                   {"capacity", {{"requests", {{"memory", "3000Mi"}, {"cores", "30"}}}}}}}}}}}}}}};
}

// The field and message of a 422, or "" when the object was accepted.
std::string Refusal(const hami::kube::Resource& r, const json& object) {
  auto created = PrepareForCreate(r, object);
  if (created.ok()) return "";
  EXPECT_EQ(created.status().code, 422) << created.status().message;
  return created.status().cause_field + ": " + created.status().cause_message;
}

TEST(DraStrategy, ClaimRequestsGetExactCountAndCountOneAndAnEmptyStatus) {
  json claim = Claim();
  claim["status"] = {{"allocation", {{"devices", json::object()}}}};
  auto created = PrepareForCreate(hami::kube::kResourceClaims, claim);
  ASSERT_TRUE(created.ok()) << created.status().message;
  const json& exactly = (*created)["spec"]["devices"]["requests"][0]["exactly"];
  EXPECT_EQ(exactly["allocationMode"], "ExactCount");
  EXPECT_EQ(exactly["count"], 1);
  EXPECT_EQ((*created)["status"], json::object());  // status only through /status

  json all = Claim();
  all["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "All";
  created = PrepareForCreate(hami::kube::kResourceClaims, all);
  ASSERT_TRUE(created.ok());
  EXPECT_FALSE((*created)["spec"]["devices"]["requests"][0]["exactly"].contains("count"));

  json tmpl = {{"metadata", {{"name", "t"}}},
               {"spec", {{"spec", Claim()["spec"]}, {"metadata", {{"labels", {{"a", "b"}}}}}}}};
  created = PrepareForCreate(hami::kube::kResourceClaimTemplates, tmpl);
  ASSERT_TRUE(created.ok()) << created.status().message;
  EXPECT_EQ((*created)["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"], 1);
}

TEST(DraStrategy, ClaimSpecRefusalsNameTheField) {
  const auto& r = hami::kube::kResourceClaims;
  EXPECT_EQ(Refusal(r, {{"metadata", {{"name", "c"}}}}), "spec: Required value");
  json c = Claim();
  c["spec"]["devices"]["requests"][0].erase("exactly");
  EXPECT_EQ(Refusal(r, c),
            "spec.devices.requests[0]: Required value: exactly one of `exactly` or "
            "`firstAvailable` is required");
  c = Claim();
  c["spec"]["devices"]["requests"][0]["exactly"].erase("deviceClassName");
  EXPECT_EQ(Refusal(r, c), "spec.devices.requests[0].exactly.deviceClassName: Required value");
  c = Claim();
  c["spec"]["devices"]["requests"][0]["exactly"]["count"] = 0;
  EXPECT_EQ(Refusal(r, c),
            "spec.devices.requests[0].exactly.count: Invalid value: 0: must be greater than zero");
  c = Claim();
  c["spec"]["devices"]["requests"][0]["exactly"]["allocationMode"] = "Some";
  EXPECT_EQ(Refusal(r, c),
            "spec.devices.requests[0].exactly.allocationMode: Unsupported value: \"Some\": "
            "supported values: \"All\", \"ExactCount\"");
  c = Claim();
  c["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "lots";
  EXPECT_TRUE(Refusal(r, c).starts_with(
      "spec.devices.requests[0].exactly.capacity.requests[memory]: Invalid value: \"lots\""));
  c = Claim();
  c["spec"]["devices"]["requests"].push_back(c["spec"]["devices"]["requests"][0]);
  EXPECT_EQ(Refusal(r, c), "spec.devices.requests[1].name: Duplicate value: \"gpu\"");
  c = Claim();
  c["spec"]["devices"]["requests"][0]["name"] = "GPU_0";
  EXPECT_TRUE(
      Refusal(r, c).starts_with("spec.devices.requests[0].name: Invalid value: \"GPU_0\": "
                                "a lowercase RFC 1123 label"));
  c = Claim();
  c["spec"]["devices"]["requests"][0]["exactly"]["selectors"] = {{{"cel", json::object()}}};
  EXPECT_EQ(Refusal(r, c),
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: Required value");
  c = Claim();
  json& req = c["spec"]["devices"]["requests"][0];
  req["firstAvailable"] = {{{"name", "big"}, {"deviceClassName", "gpu"}, {"count", 2}},
                           {{"name", "small"}, {"deviceClassName", "gpu"}}};
  EXPECT_EQ(Refusal(r, c),
            "spec.devices.requests[0]: Invalid value: exactly one of `exactly` or "
            "`firstAvailable` is required, but multiple fields are set");
  req.erase("exactly");
  EXPECT_EQ(Refusal(r, c), "");
  req["firstAvailable"][1].erase("name");
  EXPECT_EQ(Refusal(r, c), "spec.devices.requests[0].firstAvailable[1].name: Required value");

  json t = {{"metadata", {{"name", "t"}}}, {"spec", {{"spec", {{"devices", {{"requests", 3}}}}}}}};
  EXPECT_EQ(Refusal(hami::kube::kResourceClaimTemplates, t),
            "spec.spec.devices.requests: Invalid value: 3: must be a list");
}

TEST(DraStrategy, SliceRefusalsNameTheField) {
  const auto& r = hami::kube::kResourceSlices;
  EXPECT_EQ(Refusal(r, Slice()), "");
  json s = Slice();
  s["spec"].erase("driver");
  EXPECT_EQ(Refusal(r, s), "spec.driver: Required value");
  s = Slice();
  s["spec"]["driver"] = "Not_A_Domain";
  EXPECT_TRUE(Refusal(r, s).starts_with("spec.driver: Invalid value: \"Not_A_Domain\""));
  s["spec"]["driver"] = std::string(64, 'a');
  EXPECT_EQ(Refusal(r, s), "spec.driver: Too long: may not be more than 63 bytes");
  s = Slice();
  s["spec"]["pool"].erase("name");
  EXPECT_EQ(Refusal(r, s), "spec.pool.name: Required value");
  s = Slice();
  s["spec"]["pool"]["generation"] = -1;
  EXPECT_EQ(Refusal(r, s),
            "spec.pool.generation: Invalid value: -1: must be greater than or equal to 0");
  s = Slice();
  s["spec"]["pool"].erase("resourceSliceCount");
  EXPECT_EQ(Refusal(r, s),
            "spec.pool.resourceSliceCount: Invalid value: 0: must be greater than zero");
  s = Slice();
  s["spec"].erase("nodeName");
  EXPECT_EQ(Refusal(r, s),
            "spec: Required value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            "`perDeviceNodeSelection` is required");
  s["spec"]["allNodes"] = false;
  EXPECT_TRUE(Refusal(r, s).starts_with("spec: Required value"));
  s["spec"]["allNodes"] = true;
  EXPECT_EQ(Refusal(r, s), "");
  s["spec"]["nodeName"] = "n1";
  EXPECT_EQ(Refusal(r, s),
            "spec: Invalid value: exactly one of `nodeName`, `nodeSelector`, `allNodes`, "
            "`perDeviceNodeSelection` is required, but multiple fields are set");
  s = Slice();
  s["spec"]["sharedCounters"] = {{{"name", "c"}, {"counters", json::object()}}};
  EXPECT_EQ(Refusal(r, s),
            "spec: Invalid value: only one of `devices` or `sharedCounters` may be set");
  s = Slice();
  s["spec"]["devices"].push_back(s["spec"]["devices"][0]);
  EXPECT_EQ(Refusal(r, s), "spec.devices[1].name: Duplicate value: \"hami-gpu-0\"");
  s = Slice();
  s["spec"]["devices"][0]["attributes"]["uuid"] = {{"string", "a"}, {"int", 1}};
  EXPECT_EQ(Refusal(r, s),
            "spec.devices[0].attributes[uuid]: Invalid value: {\"int\":1,\"string\":\"a\"}: "
            "exactly one value must be specified (int, bool, string, version)");
  s = Slice();
  s["spec"]["devices"][0]["capacity"]["memory"] = json::object();
  EXPECT_EQ(Refusal(r, s), "spec.devices[0].capacity[memory].value: Required value");
  s = Slice();
  json& memory = s["spec"]["devices"][0]["capacity"]["memory"];
  memory["requestPolicy"] = {{"default", "80Gi"},
                             {"validRange", {{"min", "1Mi"}, {"max", "80Gi"}, {"step", "1Mi"}}}};
  EXPECT_EQ(Refusal(r, s), "");
  memory["requestPolicy"].erase("default");
  EXPECT_EQ(Refusal(r, s),
            "spec.devices[0].capacity[memory].requestPolicy.default: Required value: a default is "
            "required with valid values");
  memory["requestPolicy"] = {{"default", "1Gi"}, {"validRange", {{"max", "80Gi"}}}};
  EXPECT_EQ(Refusal(r, s),
            "spec.devices[0].capacity[memory].requestPolicy.validRange.min: "
            "Required value");
  memory["requestPolicy"] = {
      {"default", "1Gi"}, {"validValues", {"1Gi"}}, {"validRange", {{"min", "1Mi"}}}};
  EXPECT_EQ(Refusal(r, s),
            "spec.devices[0].capacity[memory].requestPolicy: Invalid value: only one of "
            "`validValues` or `validRange` may be set");
  memory["requestPolicy"] = {{"default", "1Gi"}};
  s["spec"]["devices"][0]["allowMultipleAllocations"] = false;
  EXPECT_EQ(Refusal(r, s),
            "spec.devices[0].capacity[memory].requestPolicy: Forbidden: allowed only when "
            "allowMultipleAllocations is true");
  s = Slice();
  s["spec"]["devices"][0]["taints"] = {{{"key", "k"}, {"effect", "Sometimes"}}};
  EXPECT_EQ(Refusal(r, s),
            "spec.devices[0].taints[0].effect: Unsupported value: \"Sometimes\": supported "
            "values: \"NoExecute\", \"NoSchedule\", \"None\"");
  s["spec"]["devices"][0]["taints"] = {{{"effect", "NoSchedule"}}};
  EXPECT_EQ(Refusal(r, s), "spec.devices[0].taints[0].key: Required value");
  s = Slice();
  json many = json::array();
  for (int i = 0; i < 65; ++i) {
    json d = s["spec"]["devices"][0];
    d["name"] = "gpu-" + std::to_string(i);
    if (i == 0) d["taints"] = {{{"key", "k"}, {"effect", "NoSchedule"}}};
    many.push_back(d);
  }
  s["spec"]["devices"] = many;
  EXPECT_EQ(Refusal(r, s),
            "spec.devices: Too many: 65: must have at most 64 items when devices have taints");
  s["spec"]["devices"][0].erase("taints");
  EXPECT_EQ(Refusal(r, s), "");
}

TEST(DraStrategy, DeviceClassRefusalsAndGeneration) {
  const auto& r = hami::kube::kDeviceClasses;
  json cls = {{"metadata", {{"name", "hami-core-gpu.project-hami.io"}}},
              {"spec",
               {{"selectors", {{{"cel", {{"expression", "device.driver == 'x'"}}}}}},
                {"extendedResourceName", "nvidia.com/gpu"}}}};
  auto created = PrepareForCreate(r, cls);
  ASSERT_TRUE(created.ok()) << created.status().message;
  EXPECT_EQ((*created)["metadata"]["generation"], 1);
  json changed = *created;
  changed["spec"]["selectors"][0]["cel"]["expression"] = "true";
  auto updated = PrepareForUpdate(r, Subresource::kNone, *created, changed);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ((*updated)["metadata"]["generation"], 2);

  cls["spec"]["config"] = {{{"opaque", {{"parameters", json::object()}}}}};
  EXPECT_EQ(Refusal(r, cls), "spec.config[0].opaque.driver: Required value");
  cls["spec"]["config"] = {json::object()};
  EXPECT_EQ(Refusal(r, cls), "spec.config[0].opaque: Required value");
}

TEST(DraStrategy, ImmutableSliceIdentityAndClaimSpec) {
  auto slice = PrepareForCreate(hami::kube::kResourceSlices, Slice());
  ASSERT_TRUE(slice.ok());
  EXPECT_EQ((*slice)["metadata"]["generation"], 1);
  json next = *slice;
  next["spec"]["pool"]["generation"] = 2;
  next["spec"]["devices"][0]["taints"] = {{{"key", "k"}, {"effect", "NoSchedule"}}};
  auto updated = PrepareForUpdate(hami::kube::kResourceSlices, Subresource::kNone, *slice, next);
  ASSERT_TRUE(updated.ok()) << updated.status().message;
  EXPECT_EQ((*updated)["metadata"]["generation"], 2);
  next["spec"]["nodeName"] = "n2";
  updated = PrepareForUpdate(hami::kube::kResourceSlices, Subresource::kNone, *slice, next);
  ASSERT_FALSE(updated.ok());
  EXPECT_EQ(updated.status().cause_field, "spec.nodeName");
  EXPECT_EQ(updated.status().cause_message, "Invalid value: \"n2\": field is immutable");
  next = *slice;
  next["spec"]["driver"] = "other.example.com";
  updated = PrepareForUpdate(hami::kube::kResourceSlices, Subresource::kNone, *slice, next);
  ASSERT_FALSE(updated.ok());
  EXPECT_EQ(updated.status().cause_field, "spec.driver");

  auto claim = PrepareForCreate(hami::kube::kResourceClaims, Claim());
  ASSERT_TRUE(claim.ok());
  next = *claim;
  next["spec"]["devices"]["requests"][0]["exactly"]["count"] = 2;
  updated = PrepareForUpdate(hami::kube::kResourceClaims, Subresource::kNone, *claim, next);
  ASSERT_FALSE(updated.ok());
  EXPECT_EQ(updated.status().cause_field, "spec");
  EXPECT_TRUE(updated.status().cause_message.ends_with("field is immutable"));
  // Labels may change; the status of the main resource is kept.
  next = *claim;
  next["metadata"]["labels"] = {{"a", "b"}};
  next["status"] = {{"reservedFor", json::array()}};
  updated = PrepareForUpdate(hami::kube::kResourceClaims, Subresource::kNone, *claim, next);
  ASSERT_TRUE(updated.ok());
  EXPECT_EQ((*updated)["status"], json::object());
  EXPECT_EQ((*updated)["metadata"]["labels"]["a"], "b");
}

TEST(DraStrategy, ClaimStatusThroughTheSubresource) {
  auto claim = PrepareForCreate(hami::kube::kResourceClaims, Claim());
  ASSERT_TRUE(claim.ok());
  const json result = {{"request", "gpu"},
                       {"driver", "hami-core-gpu.project-hami.io"},
                       {"pool", "n1"},
                       {"device", "hami-gpu-0"},
                       {"shareID", "0b6f8c2e-6d1a-4f0e-9a55-3c2d1e7f9a10"},
                       {"consumedCapacity", {{"memory", "3000Mi"}, {"cores", "30"}}}};
  json next = *claim;
  next["status"] = {{"allocation", {{"devices", {{"results", {result}}}}}},
                    {"reservedFor", {{{"resource", "pods"}, {"name", "p"}, {"uid", "u1"}}}}};
  next["spec"] = json::object();  // /status keeps the spec
  auto allocated =
      PrepareForUpdate(hami::kube::kResourceClaims, Subresource::kStatus, *claim, next);
  ASSERT_TRUE(allocated.ok()) << allocated.status().message;
  EXPECT_EQ((*allocated)["spec"], (*claim)["spec"]);
  EXPECT_EQ((*allocated)["status"]["allocation"]["devices"]["results"][0], result);

  auto refusal = [&](const json& from, const json& status) {
    json n = from;
    n["status"] = status;
    auto u = PrepareForUpdate(hami::kube::kResourceClaims, Subresource::kStatus, from, n);
    return u.ok() ? std::string() : u.status().cause_field + ": " + u.status().cause_message;
  };
  json bad = result;
  bad.erase("pool");
  EXPECT_EQ(refusal(*claim, {{"allocation", {{"devices", {{"results", {bad}}}}}}}),
            "status.allocation.devices.results[0].pool: Required value");
  EXPECT_EQ(
      refusal(*claim, {{"reservedFor", {{{"resource", "pods"}, {"name", "p"}, {"uid", "u"}}}}}),
      "status.reservedFor: Forbidden: may not be specified when `allocated` is not set");
  json other = result;
  other["device"] = "hami-gpu-1";
  EXPECT_TRUE(refusal(*allocated, {{"allocation", {{"devices", {{"results", {other}}}}}}})
                  .ends_with("field is immutable"));
  json two = (*allocated)["status"];
  two["reservedFor"].push_back(two["reservedFor"][0]);
  EXPECT_EQ(refusal(*allocated, two), "status.reservedFor[1].uid: Duplicate value: \"u1\"");
  // Deallocation: the allocation removed with the reservations.
  EXPECT_EQ(refusal(*allocated, json::object()), "");
}

}  // namespace
}  // namespace hami::sim::kube
