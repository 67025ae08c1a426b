#include "node/claim_record.h"

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/file.h"
#include "node/paths.h"

namespace hami::node {

using nlohmann::json;

std::string ClaimRecordPath(std::string_view container_dir) {
  return std::string(container_dir) + kClaimRecordSuffix;
}

std::string ClaimRecordText(const ClaimRecord& record) {
  json j = {{"name", record.name}, {"namespace", record.ns}, {"uid", record.uid}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<ClaimRecord> ParseClaimRecord(std::string_view text) {
  auto bad = [](const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "claim record: " + why);
  };
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad("not JSON");
  if (!j.is_object()) return bad("not a JSON object");
  ClaimRecord r;
  for (auto [key, field] : {std::pair<const char*, std::string*>{"namespace", &r.ns},
                            {"name", &r.name},
                            {"uid", &r.uid}}) {
    auto it = j.find(key);
    if (it == j.end()) return bad(std::string("no ") + key);
    if (!it->is_string()) return bad(std::string(key) + " is not a string");
    *field = it->get<std::string>();
    if (field->empty()) return bad(std::string(key) + " is empty");
  }
  if (Status s = ValidatePathComponent("uid", r.uid); !s.ok()) return bad(s.error().message());
  return r;
}

Result<ClaimRecord> ReadClaimRecord(const std::string& path) {
  auto text = ReadFileToString(path, kMaxClaimRecordBytes);
  if (!text.ok()) {
    if (text.error().sys_errno() == ENOENT) {
      return Error(ErrorCode::kNotFound, path + ": absent", ENOENT);
    }
    return std::move(text).error();
  }
  auto record = ParseClaimRecord(*text);
  if (!record.ok()) {
    return Error(ErrorCode::kInvalidArgument, path + ": " + record.error().message());
  }
  return record;
}

}  // namespace hami::node
