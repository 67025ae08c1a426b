#include "scheduler/extender_api.h"

#include <strings.h>

#include <algorithm>
#include <limits>
#include <optional>
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

// Builds the document of a SAX parse, as json::parse does, and stops at the first value or key
// with more than kMaxDepth containers around it. (json::parse with a callback would check the
// depth too, but it scans an object's members each time one of them ends: quadratic in the
// members: about 3 ms of a 1,000-node ExtenderPreemptionArgs.)
class BoundedDocument {
 public:
  explicit BoundedDocument(json& root) : root_(root) {}

  bool null() { return Put(nullptr); }
  bool boolean(bool v) { return Put(v); }
  bool number_integer(json::number_integer_t v) { return Put(v); }
  bool number_unsigned(json::number_unsigned_t v) { return Put(v); }
  bool number_float(json::number_float_t v, const json::string_t&) { return Put(v); }
  bool string(json::string_t& v) { return Put(std::move(v)); }
  bool binary(json::binary_t& v) { return Put(json::binary(std::move(v))); }
  bool start_object(std::size_t) { return Open(json::object()); }
  bool start_array(std::size_t) { return Open(json::array()); }
  bool end_object() { return Close(); }
  bool end_array() { return Close(); }
  bool key(json::string_t& k) {
    if (Deep()) return false;
    member_ = &(*open_.back())[std::move(k)];  // a repeated key: the last value stands
    return true;
  }
  template <class Exception>
  bool parse_error(std::size_t, const std::string&, const Exception&) {
    invalid_ = true;
    return false;
  }

  bool too_deep() const { return too_deep_; }
  bool invalid() const { return invalid_; }

 private:
  bool Deep() {
    if (open_.size() > size_t(kMaxDepth)) too_deep_ = true;
    return too_deep_;
  }
  // Where the next value goes: the root, the array open last, or the member named last.
  json* Slot() {
    if (open_.empty()) return &root_;
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(nullptr);
      return &parent.back();
    }
    return member_;
  }
  bool Put(json v) {
    if (Deep()) return false;
    *Slot() = std::move(v);
    return true;
  }
  bool Open(json v) {
    if (Deep()) return false;
    json* slot = Slot();
    *slot = std::move(v);
    open_.push_back(slot);
    return true;
  }
  bool Close() {
    open_.pop_back();
    return true;
  }

  json& root_;
  std::vector<json*> open_;  // the containers being filled, outermost first
  json* member_ = nullptr;
  bool too_deep_ = false;
  bool invalid_ = false;
};

Result<json> ParseBody(std::string_view body, std::string_view message) {
  json j;
  BoundedDocument doc(j);
  const bool ok = json::sax_parse(body, &doc);
  if (doc.too_deep()) {
    return Invalid(message, "", "nests deeper than " + std::to_string(kMaxDepth) + " levels");
  }
  if (!ok || doc.invalid()) return Invalid(message, "", "not valid JSON");
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

// The message's "Pod" member, parsed; `raw`, when given, gets the member itself.
Result<kube::Pod> PodMember(const json& j, std::string_view message, const json** raw) {
  const json* pod = Member(j, "Pod");
  if (pod == nullptr) return Invalid(message, "Pod", "missing");
  if (!pod->is_object()) return Invalid(message, "Pod", "expected an object");
  auto parsed = kube::ParsePod(*pod);
  if (!parsed.ok()) return Invalid(message, "Pod", parsed.error().message());
  if (raw != nullptr) *raw = pod;
  return std::move(parsed).value();
}

std::string MapField(std::string_view map, std::string_view key) {
  return std::string(map) + "[" + Dump(json(std::string(key))) + "]";
}

// `field` names the member; it is called only for an error.
template <class Field>
Result<int64_t> IntegerMember(const json& object, std::string_view name, const Field& field,
                              std::string_view message) {
  const json* v = Member(object, name);
  if (v == nullptr) return int64_t{0};
  if (v->is_number_unsigned()) {
    if (v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      return Invalid(message, field(), "out of range");
    }
    return int64_t(v->get<uint64_t>());
  }
  if (!v->is_number_integer()) return Invalid(message, field(), "expected an integer");
  return v->get<int64_t>();
}

// One member of NodeNameToVictims (`full`: Pods are Pod objects) or NodeNameToMetaVictims, the
// UIDs moved out of `v`. `field` names the member; it is called only for an error.
template <class Field>
Result<NodeVictims> ParseNodeVictims(json& v, const Field& field, bool full,
                                     std::string_view message) {
  if (!v.is_object()) return Invalid(message, field(), "expected an object");
  NodeVictims out;
  out.num_pdb_violations = HAMI_TRY(IntegerMember(
      v, "NumPDBViolations", [&] { return field() + ".NumPDBViolations"; }, message));
  const json* pods = Member(v, "Pods");
  if (pods == nullptr) return out;
  if (!pods->is_array()) return Invalid(message, field() + ".Pods", "expected an array");
  out.pods.reserve(pods->size());
  for (size_t i = 0; i < pods->size(); ++i) {
    const json& p = (*pods)[i];
    auto at = [&] { return field() + ".Pods[" + std::to_string(i) + "]"; };
    if (!p.is_object()) return Invalid(message, at(), "expected an object");
    VictimRef ref;
    if (full) {
      auto pod = kube::ParsePod(p);
      if (!pod.ok()) return Invalid(message, at(), pod.error().message());
      ref.uid = pod->metadata.uid;
      ref.ns = pod->metadata.ns;
      ref.name = pod->metadata.name;
      ref.priority = pod->priority;
      if (ref.uid.empty() && ref.name.empty()) {
        return Invalid(message, at(), "neither metadata.uid nor metadata.name is set");
      }
    } else {
      const json* uid = Member(p, "UID");
      if (uid == nullptr) return Invalid(message, at() + ".UID", "missing");
      if (!uid->is_string()) return Invalid(message, at() + ".UID", "expected a string");
      ref.uid = std::move(const_cast<json*>(uid)->get_ref<std::string&>());
      if (ref.uid.empty()) return Invalid(message, at() + ".UID", "must not be empty");
    }
    out.pods.push_back(std::move(ref));
  }
  return out;
}

// Reads ExtenderPreemptionArgs in the node-cache form as kube-scheduler writes it, without a
// document of the whole body (for 1,000 nodes, building one costs more than choosing the
// victims): the Pod's text is found and parsed alone, the victims are read straight into the
// answer. Only a subset of JSON is taken, one where the answer is plainly what the document
// path would give; Run answers nullopt at anything else, and the body goes to that path.
class MetaVictimsScan {
 public:
  explicit MetaVictimsScan(std::string_view text) : text_(text) {}

  std::optional<ExtenderPreemptionArgs> Run() {
    ExtenderPreemptionArgs args;
    std::string_view pod;
    bool seen_pod = false, seen_meta = false, seen_full = false;
    if (!Take('{')) return std::nullopt;
    do {
      std::string_view key;
      if (!String(key) || !Take(':')) return std::nullopt;
      if (key == "Pod" && !seen_pod) {
        seen_pod = true;
        if (!ObjectText(pod)) return std::nullopt;
      } else if (key == "NodeNameToMetaVictims" && !seen_meta) {
        seen_meta = true;
        if (!Null() && !Victims(args.victims)) return std::nullopt;
      } else if (key == "NodeNameToVictims" && !seen_full) {
        seen_full = true;
        if (!Null()) return std::nullopt;
      } else {
        return std::nullopt;  // another member, a name spelt otherwise, or one given twice
      }
    } while (Take(','));
    if (!Take('}') || !AtEnd() || !seen_pod) return std::nullopt;
    auto doc = ParseBody(pod, "Pod");
    if (!doc.ok()) return std::nullopt;
    auto parsed = kube::ParsePod(*doc);
    if (!parsed.ok()) return std::nullopt;
    args.pod = std::move(parsed).value();
    return args;
  }

 private:
  // NodeNameToMetaVictims: {node: {"Pods": [{"UID": uid}, ...] or null, "NumPDBViolations":
  // integer or null} or null}.
  bool Victims(std::map<std::string, NodeVictims>& out) {
    if (!Take('{')) return false;
    if (Take('}')) return true;
    std::vector<std::string_view> nulls;  // nodes given as null: left out, unless repeated
    do {
      std::string_view node;
      if (!String(node) || node.empty() || !Take(':')) return false;
      if (Null()) {
        nulls.push_back(node);
        continue;
      }
      NodeVictims v;
      if (!NodeEntry(v)) return false;
      if (!out.emplace(node, std::move(v)).second) return false;
    } while (Take(','));
    if (!Take('}')) return false;
    return std::none_of(nulls.begin(), nulls.end(),
                        [&](std::string_view n) { return out.count(std::string(n)) != 0; });
  }

  bool NodeEntry(NodeVictims& v) {
    if (!Take('{')) return false;
    if (Take('}')) return true;
    bool seen_pods = false, seen_pdb = false;
    do {
      std::string_view key;
      if (!String(key) || !Take(':')) return false;
      if (key == "Pods" && !seen_pods) {
        seen_pods = true;
        if (!Null() && !Pods(v.pods)) return false;
      } else if (key == "NumPDBViolations" && !seen_pdb) {
        seen_pdb = true;
        if (!Null() && !Integer(v.num_pdb_violations)) return false;
      } else {
        return false;
      }
    } while (Take(','));
    return Take('}');
  }

  // [{"UID": uid}, ...], each UID not empty.
  bool Pods(std::vector<VictimRef>& pods) {
    if (!Take('[')) return false;
    if (Take(']')) return true;
    do {
      std::string_view key, uid;
      if (!Take('{') || !String(key) || key != "UID" || !Take(':') || !String(uid) || uid.empty() ||
          !Take('}')) {
        return false;
      }
      pods.push_back({std::string(uid), {}, {}, {}});
    } while (Take(','));
    return Take(']');
  }

  void Space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return;
      ++pos_;
    }
  }
  bool Take(char c) {
    Space();
    if (pos_ >= text_.size() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool AtEnd() {
    Space();
    return pos_ == text_.size();
  }
  bool Null() {
    Space();
    if (text_.substr(pos_, 4) != "null") return false;
    pos_ += 4;
    return true;
  }
  // A string of printable ASCII without escapes (which reads as its own bytes).
  bool String(std::string_view& out) {
    if (!Take('"')) return false;
    const size_t begin = pos_;
    for (; pos_ < text_.size(); ++pos_) {
      const auto c = static_cast<unsigned char>(text_[pos_]);
      if (c == '"') {
        out = text_.substr(begin, pos_ - begin);
        ++pos_;
        return true;
      }
      if (c < 0x20 || c >= 0x7f || c == '\\') return false;
    }
    return false;
  }
  // -?(0|[1-9][0-9]*) of at most 18 digits, no fraction or exponent.
  bool Integer(int64_t& out) {
    Space();
    const bool negative = pos_ < text_.size() && text_[pos_] == '-';
    if (negative) ++pos_;
    const size_t begin = pos_;
    int64_t v = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      if (pos_ - begin == 18) return false;  // more digits than an int64_t surely holds
      v = v * 10 + (text_[pos_] - '0');
      ++pos_;
    }
    const size_t digits = pos_ - begin;
    if (digits == 0 || (digits > 1 && text_[begin] == '0')) return false;
    if (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '.' || c == 'e' || c == 'E') return false;
    }
    out = negative ? -v : v;
    return true;
  }
  // The text of an object, found by matching brackets outside strings; whether it is JSON is
  // for the parser of that text to say. Past 60 levels: not taken (the limit of the whole
  // body is the document path's to apply).
  bool ObjectText(std::string_view& out) {
    Space();
    if (pos_ >= text_.size() || text_[pos_] != '{') return false;
    const size_t begin = pos_;
    int depth = 0;
    for (; pos_ < text_.size(); ++pos_) {
      switch (text_[pos_]) {
        case '"':
          for (++pos_; pos_ < text_.size() && text_[pos_] != '"'; ++pos_) {
            if (text_[pos_] == '\\') ++pos_;
          }
          if (pos_ >= text_.size()) return false;
          break;
        case '{':
        case '[':
          if (++depth > 60) return false;
          break;
        case '}':
        case ']':
          if (--depth == 0) {
            ++pos_;
            out = text_.substr(begin, pos_ - begin);
            return true;
          }
          break;
        default:
          break;
      }
    }
    return false;
  }

  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

Result<ExtenderArgs> ParseExtenderArgs(std::string_view body) {
  constexpr std::string_view kMsg = "ExtenderArgs";
  json j = HAMI_TRY(ParseBody(body, kMsg));
  ExtenderArgs args;
  const json* pod = nullptr;
  args.pod = HAMI_TRY(PodMember(j, kMsg, &pod));
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

std::optional<ExtenderPreemptionArgs> ScanExtenderPreemptionArgs(std::string_view body) {
  return MetaVictimsScan(body).Run();
}

Result<ExtenderPreemptionArgs> ParseExtenderPreemptionArgs(std::string_view body,
                                                           PreemptionArgsReading reading) {
  if (reading == PreemptionArgsReading::kScanFirst) {
    if (auto args = ScanExtenderPreemptionArgs(body)) return std::move(*args);
  }
  constexpr std::string_view kMsg = "ExtenderPreemptionArgs";
  json j = HAMI_TRY(ParseBody(body, kMsg));
  ExtenderPreemptionArgs args;
  args.pod = HAMI_TRY(PodMember(j, kMsg, nullptr));
  // kube-scheduler sets one map; the meta form wins when both are sent.
  const json* meta = Member(j, "NodeNameToMetaVictims");
  const json* full = meta == nullptr ? Member(j, "NodeNameToVictims") : nullptr;
  const json* map = meta != nullptr ? meta : full;
  if (map == nullptr) return args;
  const std::string_view name = meta != nullptr ? "NodeNameToMetaVictims" : "NodeNameToVictims";
  if (!map->is_object()) return Invalid(kMsg, name, "expected an object of node names");
  // `j` is ours: the victims' UIDs move out of it. Its members come in order, so each node
  // goes at the end of the map.
  for (auto it = const_cast<json*>(map)->begin(); it != map->end(); ++it) {
    auto field = [&] { return MapField(name, it.key()); };
    if (it.key().empty()) return Invalid(kMsg, field(), "empty node name");
    if (it->is_null()) continue;
    args.victims.emplace_hint(args.victims.end(), it.key(),
                              HAMI_TRY(ParseNodeVictims(*it, field, full != nullptr, kMsg)));
  }
  return args;
}

std::string EncodeExtenderPreemptionResult(const std::map<std::string, NodeVictims>& victims) {
  size_t size = 32;
  for (const auto& [node, v] : victims) {
    size += node.size() + 40;
    for (const VictimRef& p : v.pods) size += p.uid.size() + 10;
  }
  std::string out;
  out.reserve(size);
  out += "{\"NodeNameToMetaVictims\":{";
  bool first = true;
  for (const auto& [node, v] : victims) {
    if (!first) out += ',';
    first = false;
    AppendString(out, node);
    out += ":{\"NumPDBViolations\":";
    out += std::to_string(v.num_pdb_violations);
    out += ",\"Pods\":[";
    for (size_t i = 0; i < v.pods.size(); ++i) {
      if (i > 0) out += ',';
      out += "{\"UID\":";
      AppendString(out, v.pods[i].uid);
      out += '}';
    }
    out += "]}";
  }
  out += "}}";
  return out;
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
