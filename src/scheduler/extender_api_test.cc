#include "scheduler/extender_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace hami::scheduler {
namespace {

using nlohmann::json;

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Names as nodes have them, and strings that need escaping or replacing.
const std::vector<std::string> kStrings = {
    "node-1", "",     "a\"b",    "back\\slash", "tab\there",
    "nl\n",   "\x01", "del\x7f", "ünïcode",     std::string("bad\xff utf8"),
    "a/b"};

TEST(ExtenderApi, FilterResultIsTheJsonObjectOfItsMembers) {
  ExtenderFilterResult r;
  EXPECT_EQ(EncodeExtenderFilterResult(r), "{}");
  r.node_names = std::vector<std::string>{};
  EXPECT_EQ(EncodeExtenderFilterResult(r), R"({"NodeNames":[]})");
  r.node_names = kStrings;
  for (const std::string& s : kStrings) {
    r.failed_nodes[s] = "reason " + s;
    r.failed_and_unresolvable_nodes[s + "x"] = s;
  }
  r.nodes = json{{"kind", "NodeList"}, {"items", json::array({{{"metadata", {{"name", "n"}}}}})}};
  r.error = "an \"error\"\n";
  json j = json::object();
  j["Nodes"] = *r.nodes;
  j["NodeNames"] = *r.node_names;
  j["FailedNodes"] = r.failed_nodes;
  j["FailedAndUnresolvableNodes"] = r.failed_and_unresolvable_nodes;
  j["Error"] = r.error;
  EXPECT_EQ(EncodeExtenderFilterResult(r), Dump(j));
}

TEST(ExtenderApi, HostPriorityListIsTheJsonArrayOfItsEntries) {
  EXPECT_EQ(EncodeHostPriorityList({}), "[]");
  std::vector<HostPriority> list;
  json j = json::array();
  int64_t score = 0;
  for (const std::string& s : kStrings) {
    list.push_back({s, score});
    j.push_back({{"Host", s}, {"Score", score}});
    score = score == 0 ? 10 : score - 3;
  }
  EXPECT_EQ(EncodeHostPriorityList(list), Dump(j));
}

// A body may nest 64 levels below its top-level object: a value (or key) with 64 containers
// around it passes, one with 65 fails, whatever the containers are.
TEST(ExtenderApi, BodiesNestedPast64LevelsAreRejected) {
  constexpr std::string_view kTooDeep = "ExtenderArgs: nests deeper than 64 levels";
  auto arrays = [](int k, std::string_view inner) {
    return R"({"NodeNames":[],"x":)" + std::string(size_t(k), '[') + std::string(inner) +
           std::string(size_t(k), ']') + "}";
  };
  auto objects = [](int k, std::string_view inner) {
    std::string s = R"({"NodeNames":[],"x":)";
    for (int i = 0; i < k; ++i) s += R"({"a":)";
    s += inner;
    s += std::string(size_t(k), '}') + "}";
    return s;
  };
  struct Case {
    std::string body;
    bool too_deep;
  };
  const Case cases[] = {
      {arrays(63, "1"), false},         {arrays(64, "1"), true},           {arrays(64, ""), false},
      {arrays(65, ""), true},           {objects(63, "1"), false},         {objects(64, "1"), true},
      {objects(63, "{}"), false},       {objects(64, "{}"), true},         {arrays(200, "1"), true},
      {arrays(63, R"({"k":1})"), true}, {arrays(62, R"({"k":1})"), false},
  };
  for (const Case& c : cases) {
    auto r = ParseExtenderArgs(c.body);
    ASSERT_FALSE(r.ok()) << c.body;  // no Pod
    EXPECT_EQ(r.error().message() == kTooDeep, c.too_deep) << c.body << ": " << r.error().message();
  }
  // Past the limit and broken later: the depth is what is reported.
  auto r = ParseExtenderArgs(arrays(70, "1") + "]]]");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), kTooDeep);
  r = ParseExtenderArgs(R"({"NodeNames":[],"x":)" + std::string(64, '[') + "1,");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), kTooDeep);
  // Broken before it: not valid JSON.
  r = ParseExtenderArgs(R"({"NodeNames":[] "x":)" + std::string(70, '['));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(), "ExtenderArgs: not valid JSON");
}

}  // namespace
}  // namespace hami::scheduler
