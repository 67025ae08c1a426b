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

}  // namespace
}  // namespace hami::scheduler
