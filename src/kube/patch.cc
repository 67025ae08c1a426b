#include "kube/patch.h"

#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

namespace hami::kube {

namespace {

using nlohmann::json;

// "an object", "a string": how errors name a value's type.
std::string Kind(const json& j) {
  switch (j.type()) {
    case json::value_t::object:
      return "an object";
    case json::value_t::array:
      return "an array";
    case json::value_t::string:
      return "a string";
    case json::value_t::boolean:
      return "a boolean";
    case json::value_t::null:
      return "null";
    default:
      return j.is_number() ? "a number" : "binary data";
  }
}

// ---- RFC 7386 ----

void MergeInto(json& target, const json& patch) {
  if (!target.is_object()) target = json::object();
  for (auto it = patch.begin(); it != patch.end(); ++it) {
    if (it->is_null()) {
      target.erase(it.key());
    } else if (it->is_object()) {
      MergeInto(target[it.key()], *it);
    } else {
      target[it.key()] = *it;
    }
  }
}

// ---- RFC 6902 ----

std::string EscapeToken(std::string_view token) {
  std::string out;
  for (char c : token) {
    if (c == '~') {
      out += "~0";
    } else if (c == '/') {
      out += "~1";
    } else {
      out += c;
    }
  }
  return out;
}

class JsonPatcher {
 public:
  explicit JsonPatcher(json doc) : doc_(std::move(doc)) {}

  Status Apply(const json& patch) {
    if (!patch.is_array()) {
      return Error(
          ErrorCode::kInvalidArgument,
          std::string("JSON patch: the patch must be an array of operations, not ") + Kind(patch));
    }
    for (size_t i = 0; i < patch.size(); ++i) {
      index_ = i;
      op_name_ = "?";
      HAMI_TRY(ApplyOne(patch[i]));
    }
    return OkStatus();
  }

  json&& Take() && { return std::move(doc_); }

 private:
  Error Bad(const std::string& detail) const {
    return Error(ErrorCode::kInvalidArgument, "JSON patch operation " + std::to_string(index_) +
                                                  " (" + op_name_ + "): " + detail);
  }

  // A string member of the operation ("path", "from"); missing or not a string is an error.
  Result<std::string> StringMember(const json& op, const char* name) const {
    auto it = op.find(name);
    if (it == op.end()) return Bad(std::string("missing \"") + name + "\"");
    if (!it->is_string()) {
      return Bad(std::string("\"") + name + "\" must be a string, not " + Kind(*it));
    }
    return it->get<std::string>();
  }

  Result<std::vector<std::string>> Pointer(const std::string& text) const {
    std::vector<std::string> tokens;
    if (text.empty()) return tokens;
    if (text[0] != '/') return Bad("path \"" + text + "\" must be empty or begin with '/'");
    std::string token;
    for (size_t i = 1; i <= text.size(); ++i) {
      if (i == text.size() || text[i] == '/') {
        tokens.push_back(std::move(token));
        token.clear();
      } else if (text[i] == '~') {
        const char next = i + 1 < text.size() ? text[i + 1] : '\0';
        if (next != '0' && next != '1') {
          return Bad("path \"" + text + "\": '~' must be followed by 0 or 1");
        }
        token += next == '0' ? '~' : '/';
        ++i;
      } else {
        token += text[i];
      }
    }
    return tokens;
  }

  // An array index token: "0" or digits without a leading zero, naming one of the `size`
  // elements, or (for add) the end.
  enum class End { kExcluded, kIncluded };
  Result<size_t> Index(const std::string& path, const std::string& token, size_t size,
                       End end) const {
    const bool digits =
        !token.empty() && token.size() <= 18 &&
        std::all_of(token.begin(), token.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
        (token == "0" || token[0] != '0');
    if (!digits) return Bad("path \"" + path + "\": \"" + token + "\" is not an array index");
    const size_t index = std::stoull(token);
    if (index > size || (index == size && end == End::kExcluded)) {
      return Bad("path \"" + path + "\": index " + token + " is out of range (the array has " +
                 std::to_string(size) + " elements)");
    }
    return index;
  }

  // The value the first `depth` tokens name; every step must exist.
  Result<json*> Resolve(const std::string& path, const std::vector<std::string>& tokens,
                        size_t depth) {
    json* node = &doc_;
    for (size_t i = 0; i < depth; ++i) {
      const std::string& t = tokens[i];
      if (node->is_object()) {
        auto it = node->find(t);
        if (it == node->end()) return Missing(path, tokens, i);
        node = &*it;
      } else if (node->is_array()) {
        if (t == "-") return Missing(path, tokens, i);
        const size_t index = HAMI_TRY(Index(path, t, node->size(), End::kExcluded));
        node = &(*node)[index];
      } else {
        return Bad("path \"" + path + "\": " + Prefix(tokens, i) + " is " + Kind(*node) +
                   ", not an object or array");
      }
    }
    return node;
  }

  static std::string Prefix(const std::vector<std::string>& tokens, size_t n) {
    if (n == 0) return "the document";
    std::string out;
    for (size_t i = 0; i < n; ++i) out += "/" + EscapeToken(tokens[i]);
    return out;
  }

  Error Missing(const std::string& path, const std::vector<std::string>& tokens, size_t i) const {
    return Bad("path \"" + path + "\" does not exist (no " + Prefix(tokens, i + 1) + ")");
  }

  Status Add(const std::string& path, const std::vector<std::string>& tokens, json value) {
    if (tokens.empty()) {
      doc_ = std::move(value);
      return OkStatus();
    }
    json* parent = HAMI_TRY(Resolve(path, tokens, tokens.size() - 1));
    const std::string& last = tokens.back();
    if (parent->is_object()) {
      (*parent)[last] = std::move(value);
    } else if (parent->is_array()) {
      if (last == "-") {
        parent->push_back(std::move(value));
      } else {
        const size_t index = HAMI_TRY(Index(path, last, parent->size(), End::kIncluded));
        parent->insert(parent->begin() + static_cast<std::ptrdiff_t>(index), std::move(value));
      }
    } else {
      return Bad("path \"" + path + "\": " + Prefix(tokens, tokens.size() - 1) + " is " +
                 Kind(*parent) + ", not an object or array");
    }
    return OkStatus();
  }

  Result<json> Remove(const std::string& path, const std::vector<std::string>& tokens) {
    if (tokens.empty()) return Bad("cannot remove the whole document");
    json* parent = HAMI_TRY(Resolve(path, tokens, tokens.size() - 1));
    const std::string& last = tokens.back();
    if (parent->is_object()) {
      auto it = parent->find(last);
      if (it == parent->end()) return Missing(path, tokens, tokens.size() - 1);
      json removed = std::move(*it);
      parent->erase(it);
      return removed;
    }
    if (parent->is_array()) {
      if (last == "-") return Missing(path, tokens, tokens.size() - 1);
      const size_t index = HAMI_TRY(Index(path, last, parent->size(), End::kExcluded));
      json removed = std::move((*parent)[index]);
      parent->erase(index);
      return removed;
    }
    return Bad("path \"" + path + "\": " + Prefix(tokens, tokens.size() - 1) + " is " +
               Kind(*parent) + ", not an object or array");
  }

  Status ApplyOne(const json& op) {
    if (!op.is_object()) {
      return Bad(std::string("an operation must be an object, not ") + Kind(op));
    }
    auto op_it = op.find("op");
    if (op_it == op.end()) return Bad("missing \"op\"");
    if (!op_it->is_string()) return Bad("\"op\" must be a string");
    op_name_ = op_it->get<std::string>();
    static constexpr std::array<std::string_view, 6> kOps = {"add",  "remove", "replace",
                                                             "move", "copy",   "test"};
    if (std::find(kOps.begin(), kOps.end(), op_name_) == kOps.end()) {
      return Bad("unknown op \"" + op_name_ + "\" (want add, remove, replace, move, copy or test)");
    }
    const std::string path = HAMI_TRY(StringMember(op, "path"));
    const std::vector<std::string> tokens = HAMI_TRY(Pointer(path));
    auto value_it = op.find("value");
    const bool needs_value = op_name_ == "add" || op_name_ == "replace" || op_name_ == "test";
    if (needs_value && value_it == op.end()) return Bad("missing \"value\"");

    if (op_name_ == "add") return Add(path, tokens, *value_it);
    if (op_name_ == "remove") {
      HAMI_TRY(Remove(path, tokens));
      return OkStatus();
    }
    if (op_name_ == "replace") {
      json* target = HAMI_TRY(Resolve(path, tokens, tokens.size()));
      *target = *value_it;
      return OkStatus();
    }
    if (op_name_ == "test") {
      json* target = HAMI_TRY(Resolve(path, tokens, tokens.size()));
      if (*target != *value_it) return Bad("testing value " + path + " failed");
      return OkStatus();
    }
    // copy or move
    const std::string from = HAMI_TRY(StringMember(op, "from"));
    const std::vector<std::string> from_tokens = HAMI_TRY(Pointer(from));
    if (op_name_ == "copy") {
      json* source = HAMI_TRY(Resolve(from, from_tokens, from_tokens.size()));
      return Add(path, tokens, *source);
    }
    if (tokens.size() > from_tokens.size() &&
        std::equal(from_tokens.begin(), from_tokens.end(), tokens.begin())) {
      return Bad("cannot move \"" + from + "\" into its own child \"" + path + "\"");
    }
    if (tokens == from_tokens) {
      HAMI_TRY(Resolve(from, from_tokens, from_tokens.size()));
      return OkStatus();
    }
    json moved = HAMI_TRY(Remove(from, from_tokens));
    return Add(path, tokens, std::move(moved));
  }

  json doc_;
  size_t index_ = 0;
  std::string op_name_;
};

// ---- Strategic merge patch ----

// The lists of the served objects that merge instead of being replaced, by field name.
struct ListRule {
  std::string_view field;
  std::string_view merge_key;  // empty: a list of scalars that merges as a set union
};

constexpr std::array kListRules{
    ListRule{"containers", "name"},
    ListRule{"initContainers", "name"},
    ListRule{"ephemeralContainers", "name"},
    ListRule{"env", "name"},
    ListRule{"volumes", "name"},
    ListRule{"imagePullSecrets", "name"},
    ListRule{"ports", "containerPort"},
    ListRule{"volumeMounts", "mountPath"},
    ListRule{"conditions", "type"},
    ListRule{"addresses", "type"},
    ListRule{"taints", "key"},
    ListRule{"ownerReferences", "uid"},
    ListRule{"finalizers", ""},
    ListRule{"webhooks", "name"},
    ListRule{"secrets", "name"},
};

// A Service's own ports (/spec/ports) merge by port; every other "ports" list is a container's.
constexpr ListRule kServicePortsRule{"ports", "port"};

// The rule of the list `field` at `list_path` (its location, "/spec/ports").
const ListRule* FindListRule(std::string_view field, std::string_view list_path) {
  if (field == "ports" && list_path == "/spec/ports") return &kServicePortsRule;
  for (const ListRule& r : kListRules) {
    if (r.field == field) return &r;
  }
  return nullptr;
}

constexpr std::string_view kPatchDirective = "$patch";
constexpr std::string_view kRetainKeys = "$retainKeys";
constexpr std::string_view kSetElementOrder = "$setElementOrder/";
constexpr std::string_view kDeleteFromPrimitiveList = "$deleteFromPrimitiveList/";

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.substr(0, prefix.size()) == prefix;
}

// Whether a list element is an object whose merge key `key` has the value `value`.
bool HasKey(const json& element, std::string_view key, const json& value) {
  if (!element.is_object()) return false;
  auto it = element.find(key);
  return it != element.end() && *it == value;
}

enum class Outcome { kKeep, kDelete };

class StrategicMerger {
 public:
  // Merges the object `patch` into the object `original`; kDelete: the patch says
  // `$patch: delete`, so the caller removes `original` from its parent.
  Result<Outcome> MergeMap(json& original, const json& patch, const std::string& where) {
    for (auto it = patch.begin(); it != patch.end(); ++it) {
      const std::string& k = it.key();
      if (StartsWith(k, "$") && k != kPatchDirective && k != kRetainKeys &&
          !StartsWith(k, kSetElementOrder) && !StartsWith(k, kDeleteFromPrimitiveList)) {
        return Bad(where, "unknown directive \"" + k + "\"");
      }
    }
    if (auto it = patch.find(kPatchDirective); it != patch.end()) {
      if (*it == "delete") return Outcome::kDelete;
      if (*it != "replace") {
        return Bad(where,
                   "$patch in an object must be \"replace\" or \"delete\", not " + it->dump());
      }
      json content = patch;
      content.erase(kPatchDirective);
      original = json::object();
      return MergeMap(original, content, where);
    }
    if (auto it = patch.find(kRetainKeys); it != patch.end()) {
      HAMI_TRY(RetainKeys(original, patch, *it, where));
    }
    for (auto it = patch.begin(); it != patch.end(); ++it) {
      if (StartsWith(it.key(), kDeleteFromPrimitiveList)) {
        HAMI_TRY(DeleteFromPrimitiveList(original, it.key(), *it, where));
      }
    }
    for (auto it = patch.begin(); it != patch.end(); ++it) {
      const std::string& k = it.key();
      if (StartsWith(k, "$")) continue;
      const bool present = original.contains(k);
      json& slot = original[k];
      const Outcome outcome =
          HAMI_TRY(MergeValue(slot, present, *it, k, where + "/" + EscapeToken(k)));
      if (outcome == Outcome::kDelete) original.erase(k);
    }
    for (auto it = patch.begin(); it != patch.end(); ++it) {
      if (StartsWith(it.key(), kSetElementOrder)) {
        HAMI_TRY(SetElementOrder(original, it.key(), *it, where));
      }
    }
    return Outcome::kKeep;
  }

 private:
  static Error Bad(const std::string& where, const std::string& detail) {
    return Error(ErrorCode::kInvalidArgument,
                 "strategic merge patch at " +
                     (where.empty() ? std::string("the top level") : where) + ": " + detail);
  }

  // Merges `patch` into `slot`, the value of field `field` (absent when !present: then `slot`
  // is null). Nulls delete; objects merge; lists merge by the field's rule; scalars replace.
  Result<Outcome> MergeValue(json& slot, bool present, const json& patch, std::string_view field,
                             const std::string& where) {
    if (patch.is_null()) return Outcome::kDelete;
    if (patch.is_object()) {
      if (!present || !slot.is_object()) slot = json::object();
      return MergeMap(slot, patch, where);
    }
    if (patch.is_array()) {
      if (!present || !slot.is_array()) slot = json::array();
      HAMI_TRY(MergeList(slot, patch, FindListRule(field, where), where));
      return Outcome::kKeep;
    }
    slot = patch;
    return Outcome::kKeep;
  }

  // A value taken from the patch where nothing is merged into it (an element of a list that
  // is replaced): directives applied, nulls in its objects dropped, a null element kept.
  Result<json> Fresh(const json& patch, const std::string& where) {
    json out;
    if (HAMI_TRY(MergeValue(out, false, patch, {}, where)) == Outcome::kDelete) return json();
    return out;
  }

  Status MergeList(json& original, const json& patch, const ListRule* rule,
                   const std::string& where) {
    const bool keyed = rule != nullptr && !rule->merge_key.empty();
    bool replace = rule == nullptr;
    for (size_t i = 0; i < patch.size(); ++i) {
      const json& e = patch[i];
      if (!e.is_object()) continue;
      auto d = e.find(kPatchDirective);
      if (d == e.end()) continue;
      if (*d == "replace") {
        replace = true;
      } else if (*d == "delete") {
        if (!keyed) {
          return Bad(where, "element " + std::to_string(i) +
                                ": $patch: delete needs a list that merges by a key (for a list "
                                "of values use $deleteFromPrimitiveList)");
        }
        if (!e.contains(rule->merge_key)) {
          return Bad(where, "element " + std::to_string(i) +
                                ": $patch: delete without the merge key \"" +
                                std::string(rule->merge_key) + "\"");
        }
      } else {
        return Bad(where, "element " + std::to_string(i) +
                              ": $patch in a list must be \"replace\" or \"delete\", not " +
                              d->dump());
      }
    }
    if (replace) original = json::array();
    for (size_t i = 0; i < patch.size(); ++i) {
      const json& e = patch[i];
      const std::string element_where = where + "/" + std::to_string(i);
      if (e.is_object()) {
        if (auto d = e.find(kPatchDirective); d != e.end()) {
          if (*d == "delete") {
            const json& key = *e.find(rule->merge_key);
            auto gone = std::remove_if(original.begin(), original.end(), [&](const json& o) {
              return HasKey(o, rule->merge_key, key);
            });
            original.erase(gone, original.end());
          }
          continue;
        }
      }
      if (rule == nullptr) {
        original.push_back(HAMI_TRY(Fresh(e, element_where)));
        continue;
      }
      if (!keyed) {
        if (e.is_structured()) {
          return Bad(where, "element " + std::to_string(i) + " is " + Kind(e) +
                                ", but this list holds values");
        }
        if (std::find(original.begin(), original.end(), e) == original.end()) original.push_back(e);
        continue;
      }
      if (!e.is_object()) {
        return Bad(where, "element " + std::to_string(i) + " is " + Kind(e) +
                              ", but this list merges objects by \"" +
                              std::string(rule->merge_key) + "\"");
      }
      auto key = e.find(rule->merge_key);
      if (key == e.end()) {
        return Bad(where, "element " + std::to_string(i) + " has no merge key \"" +
                              std::string(rule->merge_key) + "\"");
      }
      auto match = std::find_if(original.begin(), original.end(),
                                [&](const json& o) { return HasKey(o, rule->merge_key, *key); });
      if (match != original.end()) {
        HAMI_TRY(MergeMap(*match, e, element_where));
      } else {
        json added = json::object();
        HAMI_TRY(MergeMap(added, e, element_where));
        original.push_back(std::move(added));
      }
    }
    return OkStatus();
  }

  Status RetainKeys(json& original, const json& patch, const json& keys, const std::string& where) {
    if (!keys.is_array() ||
        !std::all_of(keys.begin(), keys.end(), [](const json& k) { return k.is_string(); })) {
      return Bad(where, "$retainKeys must be a list of field names");
    }
    auto listed = [&](const std::string& k) {
      return std::find(keys.begin(), keys.end(), k) != keys.end();
    };
    for (auto it = patch.begin(); it != patch.end(); ++it) {
      if (it->is_null() || StartsWith(it.key(), "$")) continue;
      if (!listed(it.key())) {
        return Bad(where, "$retainKeys does not list the patched field \"" + it.key() + "\"");
      }
    }
    for (auto it = original.begin(); it != original.end();) {
      if (listed(it.key())) {
        ++it;
      } else {
        it = original.erase(it);
      }
    }
    return OkStatus();
  }

  Status DeleteFromPrimitiveList(json& original, const std::string& directive, const json& values,
                                 const std::string& where) {
    if (!values.is_array()) return Bad(where, directive + " must be a list");
    auto list = original.find(directive.substr(kDeleteFromPrimitiveList.size()));
    if (list == original.end()) return OkStatus();
    if (!list->is_array()) {
      return Bad(where, directive + ": the field is " + Kind(*list) + ", not a list");
    }
    auto gone = std::remove_if(list->begin(), list->end(), [&](const json& v) {
      return std::find(values.begin(), values.end(), v) != values.end();
    });
    list->erase(gone, list->end());
    return OkStatus();
  }

  // Puts the elements that the order names into its order, in the places such elements hold;
  // the others stay where they are.
  Status SetElementOrder(json& original, const std::string& directive, const json& order,
                         const std::string& where) {
    if (!order.is_array()) return Bad(where, directive + " must be a list");
    const std::string field = directive.substr(kSetElementOrder.size());
    const ListRule* rule = FindListRule(field, where + "/" + EscapeToken(field));
    if (rule == nullptr) return OkStatus();
    const std::string key(rule->merge_key);
    std::vector<const json*> ids;
    for (size_t i = 0; i < order.size(); ++i) {
      if (key.empty()) {
        ids.push_back(&order[i]);
      } else if (order[i].is_object() && order[i].contains(key)) {
        ids.push_back(&order[i][key]);
      } else {
        return Bad(where, directive + ": element " + std::to_string(i) +
                              " is not an object with the merge key \"" + key + "\"");
      }
    }
    auto list = original.find(directive.substr(kSetElementOrder.size()));
    if (list == original.end() || !list->is_array()) return OkStatus();
    std::vector<std::pair<size_t, size_t>> ranked;  // (rank in the order, position)
    for (size_t pos = 0; pos < list->size(); ++pos) {
      const json& e = (*list)[pos];
      const json* id = key.empty() ? &e : nullptr;
      if (!key.empty() && e.is_object()) {
        auto k = e.find(key);
        if (k != e.end()) id = &*k;
      }
      if (id == nullptr) continue;
      auto rank = std::find_if(ids.begin(), ids.end(), [&](const json* o) { return *o == *id; });
      if (rank != ids.end()) ranked.emplace_back(static_cast<size_t>(rank - ids.begin()), pos);
    }
    std::vector<size_t> positions;
    for (const auto& r : ranked) positions.push_back(r.second);
    std::stable_sort(ranked.begin(), ranked.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<json> moved;
    for (const auto& r : ranked) moved.push_back(std::move((*list)[r.second]));
    for (size_t i = 0; i < positions.size(); ++i) (*list)[positions[i]] = std::move(moved[i]);
    return OkStatus();
  }
};

}  // namespace

json ApplyMergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) return patch;
  json out = target;
  MergeInto(out, patch);
  return out;
}

Result<json> ApplyJsonPatch(const json& target, const json& patch) {
  JsonPatcher patcher(target);
  HAMI_TRY(patcher.Apply(patch));
  return std::move(patcher).Take();
}

Result<json> ApplyStrategicMergePatch(const json& target, const json& patch) {
  if (!patch.is_object()) {
    return Error(
        ErrorCode::kInvalidArgument,
        std::string("strategic merge patch: the patch must be an object, not ") + Kind(patch));
  }
  json out = target.is_object() ? target : json::object();
  if (HAMI_TRY(StrategicMerger().MergeMap(out, patch, "")) == Outcome::kDelete) {
    return Error(ErrorCode::kInvalidArgument,
                 "strategic merge patch at the top level: $patch: delete would delete the whole "
                 "object (use DELETE)");
  }
  return out;
}

}  // namespace hami::kube
