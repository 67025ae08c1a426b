#include "dra/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <utility>

#include "common/file.h"
#include "common/unique_fd.h"

namespace hami::dra {
namespace {

using nlohmann::json;

constexpr int kVersion = 1;

constexpr size_t kMaxCheckpointBytes = 64 << 20;

json Strings(const std::vector<std::string>& v) { return json(v); }

json ClaimJson(const PreparedClaim& c) {
  json devices = json::array();
  for (const PreparedDevice& d : c.devices) {
    devices.push_back({{"requestNames", Strings(d.request_names)},
                       {"pool", d.pool},
                       {"device", d.device},
                       {"shareID", d.share_id},
                       {"cdiDeviceIDs", Strings(d.cdi_device_ids)}});
  }
  return {{"namespace", c.ref.ns},
          {"name", c.ref.name},
          {"state", c.state == ClaimState::kPrepared ? "prepared" : "preparing"},
          {"cdiSpec", c.cdi_spec_path},
          {"containerDir", c.container_dir},
          {"limitsFile", c.limits_path},
          {"devices", std::move(devices)}};
}

// Throws (json's exceptions, or std::runtime_error) on anything ClaimJson does not write.
PreparedClaim ClaimFromJson(const std::string& uid, const json& c) {
  PreparedClaim pc;
  pc.ref = {c.at("namespace").get<std::string>(), uid, c.at("name").get<std::string>()};
  const std::string state = c.at("state").get<std::string>();
  if (state != "prepared" && state != "preparing") {
    throw std::runtime_error("claim " + uid + ": state '" + state + "'");
  }
  pc.state = state == "prepared" ? ClaimState::kPrepared : ClaimState::kPreparing;
  pc.cdi_spec_path = c.at("cdiSpec").get<std::string>();
  pc.container_dir = c.at("containerDir").get<std::string>();
  pc.limits_path = c.at("limitsFile").get<std::string>();
  for (const json& d : c.at("devices")) {
    PreparedDevice pd;
    pd.request_names = d.at("requestNames").get<std::vector<std::string>>();
    pd.pool = d.at("pool").get<std::string>();
    pd.device = d.at("device").get<std::string>();
    pd.share_id = d.at("shareID").get<std::string>();
    pd.cdi_device_ids = d.at("cdiDeviceIDs").get<std::vector<std::string>>();
    pc.devices.push_back(std::move(pd));
  }
  return pc;
}

// Reads `path` when it exists: nullopt when absent.
Result<std::optional<std::string>> ReadIfPresent(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return std::optional<std::string>();
    return Error::FromErrno("checkpoint " + path);
  }
  auto text = ReadFileToString(path, kMaxCheckpointBytes);
  if (!text.ok()) return std::move(text).error().Context("checkpoint " + path);
  return std::optional<std::string>(std::move(text).value());
}

}  // namespace

std::string EncodeCheckpoint(const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, c] : checkpoint) claims[uid] = ClaimJson(c);
  return json{{"version", kVersion}, {"claims", std::move(claims)}}.dump(1) + "\n";
}

Result<Checkpoint> DecodeCheckpoint(std::string_view text, std::string_view what) {
  const std::string where(what);
  try {
    const json doc = json::parse(text);
    if (!doc.is_object() || doc.value("version", 0) != kVersion) {
      return Error(ErrorCode::kCorrupt, where + ": not a version 1 checkpoint");
    }
    Checkpoint out;
    for (const auto& [uid, c] : doc.at("claims").items()) out.emplace(uid, ClaimFromJson(uid, c));
    return out;
  } catch (const std::exception& e) {
    return Error(ErrorCode::kCorrupt, where + ": " + e.what());
  }
}

std::string EncodeCheckpointChange(const Checkpoint& checkpoint, const std::string& uid) {
  json line = {{"uid", uid}};
  if (auto it = checkpoint.find(uid); it != checkpoint.end()) {
    line["claim"] = ClaimJson(it->second);
  } else {
    line["removed"] = true;
  }
  return line.dump() + "\n";
}

Status ReplayCheckpointLog(std::string_view text, std::string_view what, Checkpoint& checkpoint) {
  const std::string where(what);
  size_t at = 0;
  for (int line_no = 1; at < text.size(); ++line_no) {
    const size_t end = text.find('\n', at);
    // A last line without its newline is a write the plugin died in: it never happened.
    if (end == std::string_view::npos) break;
    const std::string_view line = text.substr(at, end - at);
    at = end + 1;
    try {
      const json change = json::parse(line);
      const std::string uid = change.at("uid").get<std::string>();
      if (uid.empty()) throw std::runtime_error("an empty uid");
      if (change.contains("claim")) {
        checkpoint[uid] = ClaimFromJson(uid, change.at("claim"));
      } else if (change.value("removed", false)) {
        checkpoint.erase(uid);
      } else {
        throw std::runtime_error("neither a claim nor a removal");
      }
    } catch (const std::exception& e) {
      return Error(ErrorCode::kCorrupt,
                   where + ": line " + std::to_string(line_no) + ": " + e.what());
    }
  }
  return OkStatus();
}

std::string CheckpointLogPath(const std::string& path) { return path + ".log"; }

Result<Checkpoint> LoadCheckpoint(const std::string& path) {
  auto snapshot = ReadIfPresent(path);
  if (!snapshot.ok()) return std::move(snapshot).error();
  Checkpoint out;
  if (snapshot->has_value()) out = HAMI_TRY(DecodeCheckpoint(**snapshot, "checkpoint " + path));
  const std::string log_path = CheckpointLogPath(path);
  auto log = ReadIfPresent(log_path);
  if (!log.ok()) return std::move(log).error();
  if (log->has_value()) HAMI_TRY(ReplayCheckpointLog(**log, "checkpoint log " + log_path, out));
  return out;
}

Status SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                      Durability durability) {
  return WriteFileAtomically(path, EncodeCheckpoint(checkpoint), 0600, durability);
}

Status WriteFileAtomically(const std::string& path, std::string_view text, mode_t mode,
                           Durability durability) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) {
    return Error(ErrorCode::kInvalidArgument, "'" + path + "' is not an absolute path");
  }
  const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
  const std::string tmp =
      dir + "/." + path.substr(slash + 1) + ".tmp-" + std::to_string(::getpid());
  ::unlink(tmp.c_str());
  auto fd = OpenRegularFile(tmp, O_CREAT | O_EXCL | O_WRONLY, mode);
  if (!fd.ok()) return std::move(fd).error().Context("writing " + path);
  auto fail = [&](Error e) {
    ::unlink(tmp.c_str());
    return std::move(e).Context("writing " + path);
  };
  if (::fchmod(fd->get(), mode) != 0) return fail(Error::FromErrno("chmod " + tmp));
  if (Status s = WriteAll(fd->get(), text); !s.ok()) return fail(std::move(s).error());
  const bool synced = durability == Durability::kSynced;
  if (synced && ::fsync(fd->get()) != 0) return fail(Error::FromErrno("fsync " + tmp));
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail(Error::FromErrno("rename " + tmp));
  if (!synced) return OkStatus();
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    UniqueFd guard(dfd);
    ::fsync(dfd);
  }
  return OkStatus();
}

Result<std::unique_ptr<CheckpointWriter>> CheckpointWriter::Start(const std::string& path,
                                                                  const Checkpoint& checkpoint) {
  HAMI_TRY(SaveCheckpoint(path, checkpoint, Durability::kSynced));
  const std::string log_path = CheckpointLogPath(path);
  auto fd = OpenRegularFile(log_path, O_CREAT | O_WRONLY | O_APPEND, 0600);
  if (!fd.ok()) return std::move(fd).error().Context("checkpoint log " + log_path);
  std::unique_ptr<CheckpointWriter> w(new CheckpointWriter(path, std::move(fd).value()));
  HAMI_TRY(w->Truncate(Durability::kSynced));
  return w;
}

CheckpointWriter::CheckpointWriter(std::string path, UniqueFd log)
    : path_(std::move(path)), log_path_(CheckpointLogPath(path_)), log_(std::move(log)) {}

Status CheckpointWriter::Truncate(Durability durability) {
  if (::ftruncate(log_.get(), 0) != 0) return Error::FromErrno("emptying " + log_path_);
  if (durability == Durability::kSynced && ::fsync(log_.get()) != 0) {
    return Error::FromErrno("fsync " + log_path_);
  }
  log_bytes_ = 0;
  return OkStatus();
}

Status CheckpointWriter::Record(const Checkpoint& checkpoint, const std::string& uid,
                                Durability durability) {
  if (broken_) {
    // The snapshot holds everything; once written, the log's torn tail no longer matters.
    HAMI_TRY(SaveCheckpoint(path_, checkpoint, durability));
    HAMI_TRY(Truncate(durability));
    broken_ = false;
    return OkStatus();
  }
  if (log_bytes_ >= kCompactBytes) {
    // The snapshot first: a plugin that dies before the log is emptied replays changes the
    // snapshot already holds, which is harmless (each line is the claim's whole state).
    HAMI_TRY(SaveCheckpoint(path_, checkpoint, durability));
    HAMI_TRY(Truncate(durability));
    return OkStatus();
  }
  const std::string line = EncodeCheckpointChange(checkpoint, uid);
  if (Status s = WriteAll(log_.get(), line); !s.ok()) {
    // A part of the line may be in the file (a full disk, a size limit): cut it off, or the
    // next line would be glued to it and the log would not load. If even that fails, the
    // next change rewrites the snapshot and empties the log instead of appending.
    if (::ftruncate(log_.get(), off_t(log_bytes_)) != 0) broken_ = true;
    return std::move(s).error().Context("appending to " + log_path_);
  }
  log_bytes_ += line.size();
  if (durability == Durability::kSynced && ::fdatasync(log_.get()) != 0) {
    return Error::FromErrno("fdatasync " + log_path_);
  }
  return OkStatus();
}

}  // namespace hami::dra
