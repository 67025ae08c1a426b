#include "sim/kube/dra_allocator.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "sim/kube/dra_test_devices.h"

namespace hami::sim::kube {
namespace {

using nlohmann::json;
using ObjectPtr = std::shared_ptr<const json>;

constexpr char kDriver[] = "hami-core-gpu.project-hami.io";

using ::hami::sim::kube::testing::DraGpu;

ObjectPtr Slice(const std::string& name, const std::string& node, json devices,
                int64_t generation = 1, int64_t count = 1, const std::string& pool = "") {
  return std::make_shared<const json>(json{{"metadata", {{"name", name}}},
                                           {"spec",
                                            {{"driver", kDriver},
                                             {"nodeName", node},
                                             {"pool",
                                              {{"name", pool.empty() ? node : pool},
                                               {"generation", generation},
                                               {"resourceSliceCount", count}}},
                                             {"devices", std::move(devices)}}}});
}

json Class(const std::string& name, const std::string& expression) {
  return {{"metadata", {{"name", name}}},
          {"spec", {{"selectors", json::array({{{"cel", {{"expression", expression}}}}})}}}};
}

json Exactly(json capacity = nullptr, int count = 1) {
  json body = {{"deviceClassName", "gpu"}, {"allocationMode", "ExactCount"}, {"count", count}};
  if (!capacity.is_null()) body["capacity"] = {{"requests", std::move(capacity)}};
  return body;
}

json Claim(const std::string& name, json requests) {
  return {{"metadata", {{"name", name}, {"namespace", "default"}}},
          {"spec", {{"devices", {{"requests", std::move(requests)}}}}}};
}

json OneRequest(const std::string& name, json capacity = nullptr) {
  return Claim(name, json::array({{{"name", "gpu"}, {"exactly", Exactly(std::move(capacity))}}}));
}

class Allocator : public ::testing::Test {
 protected:
  void SetUp() override {
    auto cls = ParseDeviceClass(Class("gpu", std::string("device.driver == \"") + kDriver + "\""));
    ASSERT_TRUE(cls.ok()) << cls.error().message();
    classes_.emplace("gpu", std::move(*cls));
    slices_ = {Slice("n1-gpus", "n1", json::array({DraGpu(0), DraGpu(1)}))};
  }

  AllocationOutcome Allocate(const std::vector<json>& claims) {
    std::vector<ClaimToAllocate> parsed;
    for (const json& c : claims) {
      auto p = ParseClaimSpec(c);
      EXPECT_TRUE(p.ok()) << p.error().message();
      if (p.ok()) parsed.push_back(std::move(*p));
    }
    NodeView node{"n1", {}};
    NodeDevices devices = DevicesForNode(slices_, node);
    return AllocateClaims(parsed, classes_, devices, state_, node,
                          [this] { return "share-" + std::to_string(++shares_); });
  }

  // Allocates one claim and counts it as allocated for the next.
  json AllocateOne(const json& claim) {
    AllocationOutcome out = Allocate({claim});
    EXPECT_TRUE(out.ok) << out.reason;
    if (!out.ok) return nullptr;
    state_.Add(out.allocations[0]);
    return out.allocations[0];
  }

  std::map<std::string, DeviceClassInfo, std::less<>> classes_;
  std::vector<ObjectPtr> slices_;
  AllocatedState state_;
  int shares_ = 0;
};

const json& Result0(const json& allocation) { return allocation["devices"]["results"][0]; }

TEST(QuantityText, TakesStringsAndTheIntegersClientsSendFromYaml) {
  EXPECT_EQ(QuantityText(json("3000Mi")), "3000Mi");
  EXPECT_EQ(QuantityText(json(30)), "30");
  EXPECT_EQ(QuantityText(json(1.5)), "");
  EXPECT_EQ(QuantityText(json::object()), "");
  EXPECT_EQ(QuantityText(json(nullptr)), "");
}

TEST_F(Allocator, TwoSharesOfOneGpuThenTheNextGpuWhenMemoryRunsOut) {
  const json share = {{"memory", "3000Mi"}, {"cores", "30"}};
  json a = AllocateOne(OneRequest("a", share));
  json b = AllocateOne(OneRequest("b", share));
  json c = AllocateOne(OneRequest("c", share));
  ASSERT_FALSE(a.is_null() || b.is_null() || c.is_null());
  EXPECT_EQ(Result0(a)["device"], "hami-gpu-0");
  EXPECT_EQ(Result0(b)["device"], "hami-gpu-0");
  EXPECT_NE(Result0(a)["shareID"], Result0(b)["shareID"]);
  EXPECT_EQ(Result0(a)["consumedCapacity"], (json{{"memory", "3000Mi"}, {"cores", "30"}}));
  EXPECT_EQ(Result0(a)["request"], "gpu");
  EXPECT_EQ(Result0(a)["driver"], kDriver);
  EXPECT_EQ(Result0(a)["pool"], "n1");
  // 3000 + 3000 + 3000 MiB > 8000 MiB: the third goes to the next GPU.
  EXPECT_EQ(Result0(c)["device"], "hami-gpu-1");
  EXPECT_EQ(a["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0],
            (json{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n1"}}}));

  // The same three allocated together in one call count against each other too.
  state_ = AllocatedState{};
  AllocationOutcome together =
      Allocate({OneRequest("a", share), OneRequest("b", share), OneRequest("c", share)});
  ASSERT_TRUE(together.ok) << together.reason;
  EXPECT_EQ(Result0(together.allocations[1])["device"], "hami-gpu-0");
  EXPECT_EQ(Result0(together.allocations[2])["device"], "hami-gpu-1");
}

TEST_F(Allocator, AnUnnamedCapacityConsumesItsDefaultAndAFullGpuRefusesMore) {
  json whole = AllocateOne(OneRequest("whole", json{{"cores", "100"}}));
  ASSERT_FALSE(whole.is_null());
  EXPECT_EQ(Result0(whole)["consumedCapacity"], (json{{"memory", "8000Mi"}, {"cores", "100"}}));
  json next = AllocateOne(OneRequest("next", json{{"memory", "1Gi"}}));
  ASSERT_FALSE(next.is_null());
  EXPECT_EQ(Result0(next)["device"], "hami-gpu-1");
  EXPECT_EQ(Result0(next)["consumedCapacity"], (json{{"memory", "1Gi"}, {"cores", "0"}}));

  AllocationOutcome full = Allocate({OneRequest("more", json{{"memory", "7500Mi"}})});
  ASSERT_FALSE(full.ok);
  EXPECT_FALSE(full.error);
  EXPECT_EQ(full.reason,
            "cannot allocate all claims: claim default/more, request gpu: hami-gpu-0: capacity "
            "memory: 7500Mi requested, 0 of 8000Mi free; hami-gpu-1: capacity memory: 7500Mi "
            "requested, 6976Mi of 8000Mi free");
}

TEST_F(Allocator, RefusesARequestOutsideThePolicyAndRoundsUpToTheStep) {
  AllocationOutcome above = Allocate({OneRequest("big", json{{"cores", "200"}})});
  ASSERT_FALSE(above.ok);
  EXPECT_EQ(above.reason,
            "cannot allocate all claims: claim default/big, request gpu: hami-gpu-0, hami-gpu-1: "
            "capacity cores: 200 is outside its request policy (validRange min 0, max 100, step "
            "1, default 0)");

  // Off the step: raised to the next step above min.
  json odd = AllocateOne(OneRequest("odd", json{{"memory", "1000.5Mi"}}));
  ASSERT_FALSE(odd.is_null());
  EXPECT_EQ(Result0(odd)["consumedCapacity"]["memory"], "1001Mi");

  // Below min: raised to min.
  slices_ = {Slice(
      "n1-gpus", "n1",
      json::array({{{"name", "g"},
                    {"allowMultipleAllocations", true},
                    {"capacity",
                     {{"memory",
                       {{"value", "16Gi"},
                        {"requestPolicy",
                         {{"default", "4Gi"}, {"validValues", {"2Gi", "4Gi", "8Gi"}}}}}}}}}}))};
  state_ = AllocatedState{};
  json rounded = AllocateOne(OneRequest("v", json{{"memory", "3Gi"}}));
  ASSERT_FALSE(rounded.is_null());
  EXPECT_EQ(Result0(rounded)["consumedCapacity"]["memory"], "4Gi");
  AllocationOutcome not_valid = Allocate({OneRequest("w", json{{"memory", "9Gi"}})});
  ASSERT_FALSE(not_valid.ok);
  EXPECT_NE(not_valid.reason.find("g: capacity memory: 9Gi is outside its request policy "
                                  "(validValues 2Gi, 4Gi, 8Gi, default 4Gi)"),
            std::string::npos)
      << not_valid.reason;
  AllocationOutcome unknown = Allocate({OneRequest("x", json{{"bandwidth", "1"}})});
  ASSERT_FALSE(unknown.ok);
  EXPECT_NE(unknown.reason.find("g: has no capacity 'bandwidth'"), std::string::npos);
}

TEST_F(Allocator, FirstAvailableTakesTheSecondSubrequestWhenTheFirstCannotFit) {
  json claim = Claim(
      "fa",
      json::array({{{"name", "gpu"},
                    {"firstAvailable",
                     json::array({{{"name", "big"},
                                   {"deviceClassName", "gpu"},
                                   {"allocationMode", "ExactCount"},
                                   {"count", 1},
                                   {"capacity", {{"requests", {{"memory", "9000Mi"}}}}}},
                                  {{"name", "small"},
                                   {"deviceClassName", "gpu"},
                                   {"allocationMode", "ExactCount"},
                                   {"count", 1},
                                   {"capacity", {{"requests", {{"memory", "4000Mi"}}}}}}})}}}));
  json a = AllocateOne(claim);
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(Result0(a)["request"], "gpu/small");
  EXPECT_EQ(Result0(a)["consumedCapacity"]["memory"], "4000Mi");
}

TEST_F(Allocator, CountTakesDistinctDevicesAndBacktracks) {
  // Two devices of one request are two distinct devices, although gpu-0 alone has room for
  // neither twice.
  json two = Claim(
      "two", json::array({{{"name", "gpu"}, {"exactly", Exactly(json{{"memory", "5000Mi"}}, 2)}}}));
  AllocationOutcome out = Allocate({two});
  ASSERT_TRUE(out.ok) << out.reason;
  const json& results = out.allocations[0]["devices"]["results"];
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0]["device"], "hami-gpu-0");
  EXPECT_EQ(results[1]["device"], "hami-gpu-1");

  json three = Claim("three", json::array({{{"name", "gpu"}, {"exactly", Exactly(nullptr, 3)}}}));
  AllocationOutcome none = Allocate({three});
  EXPECT_FALSE(none.ok);

  // Two claims where a greedy first choice fails: a (4000 MiB) takes gpu-0, b (6000 MiB, a
  // selector for gpu-0 only) then needs a to move to gpu-1.
  auto only0 =
      CelProgram::Compile(std::string("device.attributes[\"") + kDriver + "\"].index == 0");
  ASSERT_TRUE(only0.ok());
  json b = Claim(
      "b", json::array({{{"name", "gpu"}, {"exactly", Exactly(json{{"memory", "6000Mi"}})}}}));
  b["spec"]["devices"]["requests"][0]["exactly"]["selectors"] =
      json::array({{{"cel", {{"expression", only0->expression()}}}}});
  AllocationOutcome moved = Allocate({OneRequest("a", json{{"memory", "4000Mi"}}), b});
  ASSERT_TRUE(moved.ok) << moved.reason;
  EXPECT_EQ(Result0(moved.allocations[0])["device"], "hami-gpu-1");
  EXPECT_EQ(Result0(moved.allocations[1])["device"], "hami-gpu-0");
}

TEST_F(Allocator, AnExclusiveDeviceIsNotShared) {
  json exclusive = DraGpu(0);
  exclusive.erase("allowMultipleAllocations");
  exclusive["capacity"]["memory"].erase("requestPolicy");
  exclusive["capacity"]["cores"].erase("requestPolicy");
  slices_ = {Slice("n1-gpus", "n1", json::array({exclusive}))};
  json a = AllocateOne(OneRequest("a"));
  ASSERT_FALSE(a.is_null());
  EXPECT_FALSE(Result0(a).contains("shareID"));
  EXPECT_FALSE(Result0(a).contains("consumedCapacity"));
  AllocationOutcome b = Allocate({OneRequest("b")});
  ASSERT_FALSE(b.ok);
  EXPECT_EQ(b.reason,
            "cannot allocate all claims: claim default/b, request gpu: hami-gpu-0: already "
            "allocated");
  // Nor within one call.
  state_ = AllocatedState{};
  EXPECT_FALSE(Allocate({OneRequest("a"), OneRequest("b")}).ok);
}

TEST_F(Allocator, ATaintedDeviceIsSkippedUnlessTolerated) {
  json sick = DraGpu(0);
  sick["taints"] = json::array({{{"key", "hami-core-gpu.project-hami.io/unhealthy"},
                                 {"value", "xid-79"},
                                 {"effect", "NoSchedule"}}});
  slices_ = {Slice("n1-gpus", "n1", json::array({sick, DraGpu(1)}))};
  json a = AllocateOne(OneRequest("a", json{{"memory", "1Gi"}}));
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(Result0(a)["device"], "hami-gpu-1");

  json tolerant = OneRequest("t", json{{"memory", "1Gi"}});
  tolerant["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] =
      json::array({{{"key", "hami-core-gpu.project-hami.io/unhealthy"}, {"operator", "Exists"}}});
  json t = AllocateOne(tolerant);
  ASSERT_FALSE(t.is_null());
  EXPECT_EQ(Result0(t)["device"], "hami-gpu-0");

  slices_ = {Slice("n1-gpus", "n1", json::array({sick}))};
  AllocationOutcome none = Allocate({OneRequest("b")});
  ASSERT_FALSE(none.ok);
  EXPECT_NE(none.reason.find("hami-gpu-0: has the taint hami-core-gpu.project-hami.io/"
                             "unhealthy=xid-79:NoSchedule, not tolerated"),
            std::string::npos)
      << none.reason;
}

TEST_F(Allocator, UsesTheNewestCompletePoolOnly) {
  slices_ = {Slice("old", "n1", json::array({DraGpu(0), DraGpu(1)}), 1),
             Slice("new", "n1", json::array({DraGpu(5)}), 2)};
  json a = AllocateOne(OneRequest("a"));
  ASSERT_FALSE(a.is_null());
  EXPECT_EQ(Result0(a)["device"], "hami-gpu-5");

  // Generation 3 says two slices; one is visible: the pool is incomplete and skipped.
  slices_.push_back(Slice("newer", "n1", json::array({DraGpu(7)}), 3, 2));
  NodeDevices devices = DevicesForNode(slices_, NodeView{"n1", {}});
  EXPECT_TRUE(devices.devices.empty());
  EXPECT_EQ(devices.incomplete, std::vector<std::string>{std::string(kDriver) + "/n1"});
  // Another node's slices are not seen.
  EXPECT_TRUE(DevicesForNode(slices_, NodeView{"n2", {}}).incomplete.empty());
}

TEST_F(Allocator, AllModeTakesEveryMatchingDevice) {
  json all = Claim(
      "all", json::array({{{"name", "gpu"},
                           {"exactly", {{"deviceClassName", "gpu"}, {"allocationMode", "All"}}}}}));
  AllocationOutcome out = Allocate({all});
  ASSERT_TRUE(out.ok) << out.reason;
  EXPECT_EQ(out.allocations[0]["devices"]["results"].size(), 2u);
}

TEST_F(Allocator, ASelectorErrorAbortsWithTheExpression) {
  auto cls = ParseDeviceClass(Class("gpu", "device.attributes[\"x\"].model == \"a\""));
  ASSERT_TRUE(cls.ok());
  classes_.insert_or_assign("gpu", std::move(*cls));
  AllocationOutcome out = Allocate({OneRequest("a")});
  ASSERT_FALSE(out.ok);
  EXPECT_TRUE(out.error);
  EXPECT_EQ(out.reason,
            "device class gpu: CEL expression 'device.attributes[\"x\"].model == \"a\"': no such "
            "key: 'model'");

  auto bad = ParseDeviceClass(Class("odd", "device.driver.size() > 0"));
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().message(),
            "DeviceClass odd: spec.selectors[0]: CEL expression 'device.driver.size() > 0': "
            "column 15: unsupported function 'size'");
}

TEST_F(Allocator, ConfigsAndAMissingClass) {
  json cls = Class("gpu", "true");
  cls["spec"]["config"] =
      json::array({{{"opaque", {{"driver", kDriver}, {"parameters", {{"a", 1}}}}}}});
  auto parsed = ParseDeviceClass(cls);
  ASSERT_TRUE(parsed.ok());
  classes_.insert_or_assign("gpu", std::move(*parsed));
  json claim = OneRequest("a");
  claim["spec"]["devices"]["config"] = json::array(
      {{{"requests", {"gpu"}}, {"opaque", {{"driver", kDriver}, {"parameters", {{"b", 2}}}}}},
       {{"requests", {"other"}}, {"opaque", {{"driver", kDriver}, {"parameters", {}}}}}});
  json a = AllocateOne(claim);
  ASSERT_FALSE(a.is_null());
  const json& config = a["devices"]["config"];
  ASSERT_EQ(config.size(), 2u);
  EXPECT_EQ(config[0]["source"], "FromClass");
  EXPECT_EQ(config[0]["requests"], json::array({"gpu"}));
  EXPECT_EQ(config[1]["source"], "FromClaim");
  EXPECT_EQ(config[1]["opaque"]["parameters"]["b"], 2);

  json other = OneRequest("o");
  other["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = "nope";
  AllocationOutcome out = Allocate({other});
  ASSERT_FALSE(out.ok);
  EXPECT_EQ(out.reason, "claim default/o, request gpu: device class 'nope' does not exist");
}

TEST(DraAllocatorParse, RefusesWhatItDoesNotModel) {
  json c = OneRequest("c");
  c["spec"]["devices"]["constraints"] = json::array({{{"matchAttribute", "x/y"}}});
  auto r = ParseClaimSpec(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            "ResourceClaim default/c: spec.devices.constraints: not supported by the "
            "kube-scheduler stand-in");
  json admin = OneRequest("d");
  admin["spec"]["devices"]["requests"][0]["exactly"]["adminAccess"] = true;
  EXPECT_FALSE(ParseClaimSpec(admin).ok());
  json bad = OneRequest("e", json{{"memory", "many"}});
  auto q = ParseClaimSpec(bad);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message().find("spec.devices.requests[0].exactly.capacity.requests.memory"),
            std::string::npos);
}

TEST(DraAllocatorParse, NodeSelectorsMatchLabelsAndName) {
  NodeView n{"n1", {{"zone", "a"}, {"gpus", "4"}}};
  auto sel = [](json term) { return json{{"nodeSelectorTerms", json::array({std::move(term)})}}; };
  EXPECT_TRUE(NodeSelectorMatches(
      sel({{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n1"}}}}}}),
      n));
  EXPECT_FALSE(NodeSelectorMatches(
      sel({{"matchFields", {{{"key", "metadata.name"}, {"operator", "In"}, {"values", {"n2"}}}}}}),
      n));
  EXPECT_TRUE(
      NodeSelectorMatches(sel({{"matchExpressions",
                                {{{"key", "zone"}, {"operator", "In"}, {"values", {"a", "b"}}},
                                 {{"key", "gpus"}, {"operator", "Gt"}, {"values", {"2"}}},
                                 {{"key", "x"}, {"operator", "DoesNotExist"}}}}}),
                          n));
  EXPECT_FALSE(NodeSelectorMatches(
      sel({{"matchExpressions", {{{"key", "zone"}, {"operator", "NotIn"}, {"values", {"a"}}}}}}),
      n));
  EXPECT_FALSE(NodeSelectorMatches(sel(json::object()), n));  // an empty term matches nothing
}

TEST(DraAllocatorParse, NewUuidIsAVersion4Uuid) {
  std::set<std::string> seen;
  for (int i = 0; i < 100; ++i) {
    std::string u = NewUuid();
    ASSERT_EQ(u.size(), 36u);
    EXPECT_EQ(u[14], '4');
    EXPECT_TRUE(u[19] == '8' || u[19] == '9' || u[19] == 'a' || u[19] == 'b') << u;
    seen.insert(u);
  }
  EXPECT_EQ(seen.size(), 100u);
}

}  // namespace
}  // namespace hami::sim::kube
