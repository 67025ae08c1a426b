#include "dra/checkpoint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <exception>
#include <nlohmann/json.hpp>
#include <utility>

#include "common/file.h"
#include "common/unique_fd.h"

namespace hami::dra {
namespace {

using nlohmann::json;

constexpr int kVersion = 1;

json Strings(const std::vector<std::string>& v) { return json(v); }

}  // namespace

std::string EncodeCheckpoint(const Checkpoint& checkpoint) {
  json claims = json::object();
  for (const auto& [uid, c] : checkpoint) {
    json devices = json::array();
    for (const PreparedDevice& d : c.devices) {
      devices.push_back({{"requestNames", Strings(d.request_names)},
                         {"pool", d.pool},
                         {"device", d.device},
                         {"shareID", d.share_id},
                         {"cdiDeviceIDs", Strings(d.cdi_device_ids)}});
    }
    claims[uid] = {{"namespace", c.ref.ns},
                   {"name", c.ref.name},
                   {"state", c.state == ClaimState::kPrepared ? "prepared" : "preparing"},
                   {"cdiSpec", c.cdi_spec_path},
                   {"containerDir", c.container_dir},
                   {"limitsFile", c.limits_path},
                   {"devices", std::move(devices)}};
  }
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
    for (const auto& [uid, c] : doc.at("claims").items()) {
      PreparedClaim pc;
      pc.ref = {c.at("namespace").get<std::string>(), uid, c.at("name").get<std::string>()};
      const std::string state = c.at("state").get<std::string>();
      if (state != "prepared" && state != "preparing") {
        return Error(ErrorCode::kCorrupt, where + ": claim " + uid + ": state '" + state + "'");
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
      out.emplace(uid, std::move(pc));
    }
    return out;
  } catch (const std::exception& e) {
    return Error(ErrorCode::kCorrupt, where + ": " + e.what());
  }
}

Result<Checkpoint> LoadCheckpoint(const std::string& path) {
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return Checkpoint{};
    return Error::FromErrno("checkpoint " + path);
  }
  auto text = ReadFileToString(path, 64 << 20);
  if (!text.ok()) return std::move(text).error().Context("checkpoint " + path);
  return DecodeCheckpoint(*text, "checkpoint " + path);
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

}  // namespace hami::dra
