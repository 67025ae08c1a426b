// Label and field selectors with the API server's grammar: parsed once, matched many times.
// Used by the simulated API server for list and watch, and by informers that filter locally.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::kube {

// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k` (exists), `!k` (absent); comma is
// AND (commas inside parentheses belong to the set). Empty selects everything. Keys and
// values are checked against the label syntax; errors name the selector and the offending
// part.
class LabelSelector {
 public:
  static Result<LabelSelector> Parse(std::string_view text);
  bool Matches(const std::map<std::string, std::string>& labels) const;
  // The labels of an object's metadata.labels (missing or not an object: no labels).
  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return requirements_.empty(); }

  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;
  };
  const std::vector<Requirement>& requirements() const { return requirements_; }

 private:
  std::vector<Requirement> requirements_;
};

// `field=value`, `field==value`, `field!=value`, comma-separated (AND); `\,` `\=` `\\` escape.
// An empty value is allowed (`spec.nodeName=` selects unbound pods).
class FieldSelector {
 public:
  static Result<FieldSelector> Parse(std::string_view text);
  struct Requirement {
    std::string field;  // "spec.nodeName"
    bool equals;        // false for !=
    std::string value;
  };
  const std::vector<Requirement>& requirements() const { return requirements_; }
  bool empty() const { return requirements_.empty(); }
  // Every requirement's field must be in `supported`; otherwise kInvalidArgument with
  // "field label not supported: X" (the API server's words).
  Status CheckSupported(const std::vector<std::string_view>& supported) const;
  // Looks each field up in the object by its dotted path (a missing field reads as "").
  bool Matches(const nlohmann::json& object) const;

 private:
  std::vector<Requirement> requirements_;
};

}  // namespace hami::kube
