#include "node/pod_record.h"

#include <cerrno>
#include <nlohmann/json.hpp>

#include "common/file.h"

namespace hami::node {

using nlohmann::json;

std::string PodRecordText(const PodRecord& record) {
  json j = {{"container", record.container},
            {"name", record.name},
            {"namespace", record.ns},
            {"uid", record.uid}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
}

Result<PodRecord> ParsePodRecord(std::string_view text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return Error(ErrorCode::kInvalidArgument, "pod record: not JSON");
  if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "pod record: not a JSON object");
  PodRecord r;
  for (auto [key, field] : {std::pair<const char*, std::string*>{"namespace", &r.ns},
                            {"name", &r.name},
                            {"uid", &r.uid},
                            {"container", &r.container}}) {
    auto it = j.find(key);
    if (it == j.end()) continue;
    if (!it->is_string()) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string("pod record: ") + key + " is not a string");
    }
    *field = it->get<std::string>();
  }
  return r;
}

Result<PodRecord> ReadPodRecord(const std::string& dir) {
  const std::string path = dir + "/" + kPodRecordFileName;
  auto text = ReadFileToString(path, kMaxPodRecordBytes);
  if (!text.ok()) {
    if (text.error().sys_errno() == ENOENT) {
      return Error(ErrorCode::kNotFound, path + ": absent", ENOENT);
    }
    return std::move(text).error();
  }
  auto record = ParsePodRecord(*text);
  if (!record.ok())
    return Error(ErrorCode::kInvalidArgument, path + ": " + record.error().message());
  return record;
}

}  // namespace hami::node
