#include "scheduler/extender_api.h"

#include <strings.h>

#include <algorithm>
#include <limits>
#include <utility>

namespace hami::scheduler {
namespace {

using nlohmann::json;

constexpr int kMaxDepth = 64;

Error Invalid(std::string_view message, std::string_view field, std::string_view what) {
  std::string msg(message);
  msg += ": ";
  if (!field.empty()) {
    msg += field;
    msg += ": ";
  }
  msg += what;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

Result<json> ParseBody(std::string_view body, std::string_view message) {
  bool too_deep = false;
  json::parser_callback_t cb = [&too_deep](int depth, json::parse_event_t, json&) {
    if (depth > kMaxDepth) too_deep = true;
    return !too_deep;
  };
  json j = json::parse(body, cb, /*allow_exceptions=*/false);
  if (too_deep) {
    return Invalid(message, "", "nests deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  if (j.is_discarded()) return Invalid(message, "", "not valid JSON");
  if (!j.is_object()) return Invalid(message, "", "expected a JSON object");
  return j;
}

// The member named `name`, matched as Go's encoding/json does; nullptr when absent or null.
const json* Member(const json& object, std::string_view name) {
  auto it = object.find(name);
  if (it != object.end()) return it->is_null() ? nullptr : &*it;
  for (auto i = object.begin(); i != object.end(); ++i) {
    if (i.key().size() == name.size() &&
        strncasecmp(i.key().data(), name.data(), name.size()) == 0) {
      return i->is_null() ? nullptr : &*i;
    }
  }
  return nullptr;
}

Result<std::string> StringMember(const json& object, std::string_view name,
                                 std::string_view message, bool required) {
  const json* v = Member(object, name);
  if (v == nullptr) {
    if (required) return Invalid(message, name, "missing");
    return std::string();
  }
  if (!v->is_string()) return Invalid(message, name, "expected a string");
  if (required && v->get_ref<const std::string&>().empty()) {
    return Invalid(message, name, "must not be empty");
  }
  return v->get<std::string>();
}

Result<std::vector<std::string>> StringList(const json& v, std::string_view field,
                                            std::string_view message) {
  if (!v.is_array()) return Invalid(message, field, "expected an array of strings");
  std::vector<std::string> out;
  out.reserve(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_string()) {
      return Invalid(message, std::string(field) + "[" + std::to_string(i) + "]",
                     "expected a string");
    }
    out.push_back(v[i].get<std::string>());
  }
  return out;
}

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// Appends `s` as a JSON string, byte for byte as Dump(json(s)) writes it: directly when it is
// printable ASCII without a quote or backslash (node names always are), else through Dump.
void AppendString(std::string& out, std::string_view s) {
  const bool plain = std::all_of(s.begin(), s.end(), [](char ch) {
    const auto c = static_cast<unsigned char>(ch);
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\';
  });
  if (!plain) {
    out += Dump(json(std::string(s)));
    return;
  }
  out += '"';
  out += s;
  out += '"';
}

void AppendStringList(std::string& out, const std::vector<std::string>& list) {
  out += '[';
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += ',';
    AppendString(out, list[i]);
  }
  out += ']';
}

void AppendStringMap(std::string& out, const std::map<std::string, std::string>& map) {
  out += '{';
  bool first = true;
  for (const auto& [k, v] : map) {
    if (!first) out += ',';
    first = false;
    AppendString(out, k);
    out += ':';
    AppendString(out, v);
  }
  out += '}';
}

}  // namespace

Result<ExtenderArgs> ParseExtenderArgs(std::string_view body) {
  constexpr std::string_view kMsg = "ExtenderArgs";
  json j = HAMI_TRY(ParseBody(body, kMsg));
  ExtenderArgs args;
  const json* pod = Member(j, "Pod");
  if (pod == nullptr) return Invalid(kMsg, "Pod", "missing");
  if (!pod->is_object()) return Invalid(kMsg, "Pod", "expected an object");
  auto parsed = kube::ParsePod(*pod);
  if (!parsed.ok()) return Invalid(kMsg, "Pod", parsed.error().message());
  args.pod = std::move(parsed).value();
  if (const json* names = Member(j, "NodeNames")) {
    args.node_names = HAMI_TRY(StringList(*names, "NodeNames", kMsg));
  }
  if (const json* nodes = Member(j, "Nodes")) {
    if (!nodes->is_object()) return Invalid(kMsg, "Nodes", "expected a NodeList object");
    const json* items = Member(*nodes, "items");
    if (items != nullptr) {
      if (!items->is_array()) return Invalid(kMsg, "Nodes.items", "expected an array");
      for (size_t i = 0; i < items->size(); ++i) {
        const json& item = (*items)[i];
        std::string_view name = kube::MetadataString(item, "name");
        if (name.empty()) {
          return Invalid(kMsg, "Nodes.items[" + std::to_string(i) + "].metadata.name", "missing");
        }
        args.node_list_names.emplace_back(name);
      }
    }
    args.nodes = json();  // moved in below
  }
  if (!args.node_names && !args.nodes) {
    return Invalid(kMsg, "", "neither NodeNames nor Nodes is set");
  }
  // `j` is ours: its members move out instead of being copied.
  args.pod_object = std::move(const_cast<json&>(*pod));
  if (args.nodes) args.nodes = std::move(const_cast<json&>(*Member(j, "Nodes")));
  return args;
}

Result<ExtenderBindingArgs> ParseExtenderBindingArgs(std::string_view body) {
  constexpr std::string_view kMsg = "ExtenderBindingArgs";
  json j = HAMI_TRY(ParseBody(body, kMsg));
  ExtenderBindingArgs a;
  a.pod_name = HAMI_TRY(StringMember(j, "PodName", kMsg, true));
  a.pod_namespace = HAMI_TRY(StringMember(j, "PodNamespace", kMsg, true));
  a.pod_uid = HAMI_TRY(StringMember(j, "PodUID", kMsg, false));
  a.node = HAMI_TRY(StringMember(j, "Node", kMsg, true));
  return a;
}

std::string EncodeExtenderFilterResult(const ExtenderFilterResult& r) {
  // Written directly, members in the order a JSON object of them would sort them.
  std::string out = "{";
  out.reserve(64 + (r.node_names ? r.node_names->size() * 16 : 0) +
              (r.failed_nodes.size() + r.failed_and_unresolvable_nodes.size()) * 96);
  bool first = true;
  auto member = [&](std::string_view name) {
    if (!first) out += ',';
    first = false;
    out += '"';
    out += name;
    out += "\":";
  };
  if (!r.error.empty()) {
    member("Error");
    AppendString(out, r.error);
  }
  if (!r.failed_and_unresolvable_nodes.empty()) {
    member("FailedAndUnresolvableNodes");
    AppendStringMap(out, r.failed_and_unresolvable_nodes);
  }
  if (!r.failed_nodes.empty()) {
    member("FailedNodes");
    AppendStringMap(out, r.failed_nodes);
  }
  if (r.node_names) {
    member("NodeNames");
    AppendStringList(out, *r.node_names);
  }
  if (r.nodes) {
    member("Nodes");
    out += Dump(*r.nodes);
  }
  out += '}';
  return out;
}

std::string EncodeHostPriorityList(const std::vector<HostPriority>& list) {
  // Written directly: a thousand hosts as JSON objects would cost more than fitting them.
  std::string out = "[";
  out.reserve(list.size() * 40 + 2);
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += ',';
    out += "{\"Host\":";
    AppendString(out, list[i].host);
    out += ",\"Score\":";
    out += std::to_string(list[i].score);
    out += '}';
  }
  out += ']';
  return out;
}

std::string EncodeExtenderBindingResult(std::string_view error) {
  json j = json::object();
  if (!error.empty()) j["Error"] = error;
  return Dump(j);
}

}  // namespace hami::scheduler
