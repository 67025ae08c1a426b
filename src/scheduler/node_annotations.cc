#include "scheduler/node_annotations.h"

#include <limits>
#include <nlohmann/json.hpp>

#include "common/quote.h"
#include "common/strings.h"

namespace hami::scheduler {
namespace {

Error Invalid(std::string msg) {
  return Error(ErrorCode::kInvalidArgument, std::string(kNodeScoreAnnotation) + ": " + msg);
}

}  // namespace

Result<PairScores> DecodePairScores(std::string_view value) {
  nlohmann::json j = nlohmann::json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Invalid("not JSON: " + QuoteInput(value));
  if (!j.is_array()) return Invalid("expected a JSON array");
  PairScores out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto& e = j[i];
    const std::string where = "element " + std::to_string(i);
    if (!e.is_object()) return Invalid(where + ": expected an object");
    auto uuid = e.find("uuid");
    if (uuid == e.end() || !uuid->is_string() || uuid->get_ref<const std::string&>().empty()) {
      return Invalid(where + ": \"uuid\" must be a non-empty string");
    }
    auto& row = out[uuid->get<std::string>()];
    auto score = e.find("score");
    if (score == e.end() || score->is_null()) continue;
    if (!score->is_object()) return Invalid(where + ": \"score\" must be an object");
    for (auto it = score->begin(); it != score->end(); ++it) {
      const auto& v = it.value();
      if (!v.is_number_integer() || v.get<int64_t>() < 0 ||
          v.get<int64_t>() > std::numeric_limits<int32_t>::max()) {
        return Invalid(where + ": score of " + QuoteInput(it.key()) +
                       ": expected an integer in [0, 2^31-1]");
      }
      row[it.key()] = static_cast<int32_t>(v.get<int64_t>());
    }
  }
  return out;
}

std::vector<std::string> DecodeCordonList(std::string_view value) {
  std::vector<std::string> out;
  for (std::string_view part : SplitString(value, ',', true)) {
    while (!part.empty() && (part.front() == ' ' || part.front() == '\t')) part.remove_prefix(1);
    while (!part.empty() && (part.back() == ' ' || part.back() == '\t')) part.remove_suffix(1);
    if (!part.empty()) out.emplace_back(part);
  }
  return out;
}

}  // namespace hami::scheduler
