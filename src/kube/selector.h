// Label and field selectors with the API server's grammar: parsed once, matched many times.
// Used by the simulated API server for list and watch, and by informers that filter locally.
//
// Thread safety: a parsed selector is immutable; Matches may run on many threads at once.
#pragma once

#include <map>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hami::kube {

// `k=v`, `k==v`, `k!=v`, `k in (a,b)`, `k notin (a)`, `k` (exists), `!k` (absent); comma is
// AND (commas inside parentheses belong to the set). Empty selects everything. Keys and
// values are checked against the label syntax; errors name the selector and the offending
// part.
//
// As in the API server: whitespace may surround every operator, parenthesis and comma; a key
// is a name of at most 63 characters ([A-Za-z0-9] at both ends, [-A-Za-z0-9_.] between) with
// an optional DNS-subdomain prefix ("hami.io/vgpu-node"); a value is empty or a name of that
// syntax. `k=` and `k in ()` stand for the empty value; `in`, `notin` cannot be keys; the
// set of `in`/`notin` is kept sorted and without duplicates. Matching: `=`/`in` need the label
// with one of the values; `!=`/`notin` hold when the label is absent or has none of them.
class LabelSelector {
 public:
  static Result<LabelSelector> Parse(std::string_view text);
  bool Matches(const std::map<std::string, std::string>& labels) const;
  // The labels of an object's metadata.labels (missing or not an object: no labels; a label
  // whose value is not a string counts as absent).
  bool Matches(const nlohmann::json& object) const;
  bool empty() const { return requirements_.empty(); }
  // The canonical text ("a=b,c in (x,y),!d"): Parse(String()) selects the same objects.
  std::string String() const;

  enum class Op { kEquals, kNotEquals, kIn, kNotIn, kExists, kDoesNotExist };
  struct Requirement {
    std::string key;
    Op op;
    std::vector<std::string> values;  // one for =/!=, sorted and unique for in/notin, else none
  };
  const std::vector<Requirement>& requirements() const { return requirements_; }

 private:
  std::vector<Requirement> requirements_;
};

// `field=value`, `field==value`, `field!=value`, comma-separated (AND); `\,` `\=` `\\` escape.
// An empty value is allowed (`spec.nodeName=` selects unbound pods).
//
// As in the API server, the value is taken literally (spaces included) after unescaping; any
// other backslash sequence, or an unescaped `=` in a value, is an error naming the selector.
// Surrounding whitespace of a field name is ignored; an empty field name is an error.
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
  // Looks each field up in the object by its dotted path (a missing field reads as ""; a
  // number or boolean reads as its JSON text; an object, array or null reads as "").
  bool Matches(const nlohmann::json& object) const;
  // The canonical text, values escaped ("spec.nodeName=,status.phase!=Running").
  std::string String() const;

 private:
  std::vector<Requirement> requirements_;
};

}  // namespace hami::kube
