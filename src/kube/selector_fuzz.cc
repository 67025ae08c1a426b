// Fuzzes the label and field selector parsers: parsing never crashes and fails only with
// kInvalidArgument naming the selector; a parsed selector's canonical text parses back to the
// same selector; matching agrees with a plain reading of the requirements, on label maps and
// objects built from the selector's own keys and values.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "kube/selector.h"

namespace {

using hami::kube::FieldSelector;
using hami::kube::LabelSelector;
using Labels = std::map<std::string, std::string>;

void Check(bool ok) {
  if (!ok) std::abort();
}

bool ReferenceMatch(const LabelSelector& s, const Labels& labels) {
  using Op = LabelSelector::Op;
  for (const auto& r : s.requirements()) {
    auto it = labels.find(r.key);
    bool in = false;
    for (const std::string& v : r.values) in = in || (it != labels.end() && it->second == v);
    bool ok = false;
    switch (r.op) {
      case Op::kEquals:
      case Op::kIn:
        ok = in;
        break;
      case Op::kNotEquals:
      case Op::kNotIn:
        ok = !in;
        break;
      case Op::kExists:
        ok = it != labels.end();
        break;
      case Op::kDoesNotExist:
        ok = it == labels.end();
        break;
    }
    if (!ok) return false;
  }
  return true;
}

void FuzzLabels(std::string_view text) {
  auto s = LabelSelector::Parse(text);
  if (!s.ok()) {
    Check(s.error().code() == hami::ErrorCode::kInvalidArgument);
    Check(s.error().message().find("invalid label selector") == 0);
    return;
  }
  auto again = LabelSelector::Parse(s->String());
  Check(again.ok() && again->String() == s->String());
  Check(again->requirements().size() == s->requirements().size());
  const auto& reqs = s->requirements();
  for (size_t variant = 0; variant < 6; ++variant) {
    Labels labels;
    for (size_t j = 0; j < reqs.size(); ++j) {
      const size_t pick = (variant + j) % 3;
      if (pick == 0) continue;
      const auto& values = reqs[j].values;
      labels[reqs[j].key] =
          pick == 1 && !values.empty() ? values[(variant + j) % values.size()] : "other";
    }
    const bool expected = ReferenceMatch(*s, labels);
    Check(s->Matches(labels) == expected);
    Check(again->Matches(labels) == expected);
    Check(s->Matches(nlohmann::json{{"metadata", {{"labels", labels}}}}) == expected);
  }
}

void FuzzFields(std::string_view text) {
  auto s = FieldSelector::Parse(text);
  if (!s.ok()) {
    Check(s.error().code() == hami::ErrorCode::kInvalidArgument);
    Check(s.error().message().find("invalid field selector") == 0);
    return;
  }
  auto again = FieldSelector::Parse(s->String());
  Check(again.ok() && again->String() == s->String());
  const auto& reqs = s->requirements();
  for (size_t variant = 0; variant < 4; ++variant) {
    // Sets some requirements' fields (each at its dotted path) and remembers what each reads.
    nlohmann::json object = nlohmann::json::object();
    std::map<std::string, std::string> reads;
    for (size_t j = 0; j < reqs.size(); ++j) {
      if ((variant + j) % 2 == 0) continue;
      nlohmann::json* node = &object;
      std::string_view rest = reqs[j].field;
      bool placed = true;
      while (true) {
        const size_t dot = rest.find('.');
        std::string key(rest.substr(0, dot));
        if (!node->is_object()) {
          placed = false;
          break;
        }
        if (dot == std::string_view::npos) {
          if (node->contains(key)) {
            placed = false;
          } else {
            (*node)[key] = variant < 2 ? reqs[j].value : "other";
          }
          break;
        }
        node = &(*node)[key];
        if (node->is_null()) *node = nlohmann::json::object();
        rest.remove_prefix(dot + 1);
      }
      if (placed) reads[reqs[j].field] = variant < 2 ? reqs[j].value : "other";
    }
    bool expected = true;
    for (const auto& r : reqs) {
      auto it = reads.find(r.field);
      const std::string value = it == reads.end() ? "" : it->second;
      expected = expected && ((value == r.value) == r.equals);
    }
    Check(s->Matches(object) == expected);
    Check(again->Matches(object) == expected);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  FuzzLabels(text);
  FuzzFields(text);
  return 0;
}
