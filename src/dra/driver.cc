#include "dra/driver.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>
#include <utility>

#include "common/file.h"
#include "node/claim_record.h"

namespace hami::dra {
namespace {

static_assert(std::string_view(kClaimContainerName) == node::kClaimContainerName);

std::string JoinDevices(const std::vector<PreparedDevice>& devices) {
  std::string out;
  for (const PreparedDevice& d : devices) out += (out.empty() ? "" : ",") + d.device;
  return out.empty() ? "-" : out;
}

// Makes a directory (the CDI directory, the containers directory) when it is missing.
Status EnsureDirectory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Error(ErrorCode::kIo, "creating " + dir + ": " + ec.message(), ec.value());
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return Error::FromErrno(dir);
  if (!S_ISDIR(st.st_mode)) return Error(ErrorCode::kInvalidArgument, dir + ": not a directory");
  return OkStatus();
}

// A path under something that is not a directory (ENOTDIR) cannot exist either.
Status RemoveFile(const std::string& path) {
  if (path.empty() || ::unlink(path.c_str()) == 0 || errno == ENOENT || errno == ENOTDIR) {
    return OkStatus();
  }
  return Error::FromErrno("removing " + path);
}

// Whether every file a prepared claim's containers need is still there.
bool FilesPresent(const PreparedClaim& claim) {
  struct stat st {};
  auto is = [&](const std::string& path, bool dir) {
    return path.empty() ||
           (lstat(path.c_str(), &st) == 0 && (dir ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)));
  };
  return is(claim.cdi_spec_path, false) && is(claim.limits_path, false) &&
         is(claim.container_dir, true);
}

// A boot ID from `path` (the kernel's, or the plugin's marker), or "" when it cannot be read.
std::string ReadBootId(const std::string& path) {
  auto text = ReadFileToString(path, 256);
  if (!text.ok()) return "";
  std::string id = *text;
  while (!id.empty() && (id.back() == '\n' || id.back() == ' ')) id.pop_back();
  return id;
}

}  // namespace

std::string DeviceName(int index) { return "hami-gpu-" + std::to_string(index); }

std::vector<Gpu> GpusFromInventory(const inventory::Inventory& inventory) {
  std::vector<Gpu> out;
  for (const inventory::Device& d : inventory.devices) {
    if (d.uuid.empty() || d.index < 0) continue;
    out.push_back({DeviceName(d.index), d.uuid, d.memory_bytes, d.healthy});
  }
  return out;
}

namespace {

// The temporary files a writer killed between creating and renaming them leaves beside
// `paths` (".<name>.tmp-<suffix>", as WriteFileAtomically and limits::PublishLimitsFile name
// them), one listing per directory.
void RemoveTemporaryFilesOf(const std::vector<std::string>& paths) {
  std::map<std::string, std::vector<std::string>> prefixes;  // directory -> ".<name>.tmp-"
  for (const std::string& path : paths) {
    if (path.empty()) continue;
    const std::filesystem::path p(path);
    prefixes[p.parent_path().string()].push_back("." + p.filename().string() + ".tmp-");
  }
  for (const auto& [dir, wanted] : prefixes) {
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      for (const std::string& prefix : wanted) {
        if (name.starts_with(prefix)) ::unlink(it->path().c_str());
      }
    }
  }
}

}  // namespace

Status RemovePreparedFiles(const PreparedClaim& claim) {
  if (claim.state == ClaimState::kPreparing) {
    // Left midway: a write may have been cut between its temporary file and the rename.
    RemoveTemporaryFilesOf(
        {claim.cdi_spec_path, claim.limits_path,
         claim.container_dir.empty() ? std::string() : node::ClaimRecordPath(claim.container_dir)});
  }
  Status first = RemoveFile(claim.cdi_spec_path);
  Status limits = RemoveFile(claim.limits_path);
  if (first.ok() && !limits.ok()) first = std::move(limits);
  if (!claim.container_dir.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(claim.container_dir, ec);
    if (ec && first.ok()) {
      first = Error(ErrorCode::kIo, "removing " + claim.container_dir + ": " + ec.message(),
                    ec.value());
    }
    // The claim record last: it marks the directory as a claim's while the directory is there.
    Status record = RemoveFile(node::ClaimRecordPath(claim.container_dir));
    if (first.ok() && !ec && !record.ok()) first = std::move(record);
  }
  return first;
}

Result<std::unique_ptr<Driver>> Driver::Create(ClaimSource& source, std::vector<Gpu> gpus,
                                               DriverOptions options) {
  if (options.node_name.empty()) {
    return Error(ErrorCode::kInvalidArgument, "DRA driver: no node name");
  }
  if (options.checkpoint_path.empty() || options.checkpoint_path[0] != '/') {
    return Error(ErrorCode::kInvalidArgument, "DRA driver: the checkpoint path '" +
                                                  options.checkpoint_path +
                                                  "' is not an absolute path");
  }
  if (options.cdi_dir.empty() || options.cdi_dir[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 "DRA driver: the CDI directory '" + options.cdi_dir + "' is not an absolute path");
  }
  auto checkpoint = LoadCheckpoint(options.checkpoint_path);
  const std::string boot = ReadBootId(options.boot_id_path);
  const std::string marker_path =
      std::filesystem::path(options.checkpoint_path).parent_path().string() + "/" +
      kBootMarkerFileName;
  const std::string marker = boot.empty() ? "" : ReadBootId(marker_path);
  const bool rebooted = !marker.empty() && marker != boot;
  if (!checkpoint.ok() && !rebooted) return std::move(checkpoint).error();
  Checkpoint claims = checkpoint.ok() ? std::move(checkpoint).value() : Checkpoint{};
  std::unique_ptr<Driver> driver(
      new Driver(source, std::move(gpus), std::move(options), std::move(claims)));
  if (rebooted) {
    if (!checkpoint.ok()) {
      driver->Log("dra event=checkpoint_unreadable_after_reboot error=\"" +
                  checkpoint.error().message() +
                  "\" effect=\"the claims' files are found by name\"");
    }
    HAMI_TRY(driver->CleanUpAfterReboot());
  }
  // What was loaded becomes the snapshot, and the log starts empty.
  driver->writer_ =
      HAMI_TRY(CheckpointWriter::Start(driver->options_.checkpoint_path, driver->checkpoint_));
  if (boot.empty()) {
    driver->Log("dra event=boot_id_unknown path=" + driver->options_.boot_id_path +
                " effect=\"every checkpoint save is fsync'd; nothing is cleaned up at start\"");
    return driver;
  }
  if (marker != boot) {
    if (Status s = WriteFileAtomically(marker_path, boot + "\n", 0644, Durability::kSynced);
        !s.ok()) {
      driver->Log("dra event=boot_marker_failed error=\"" + s.error().message() +
                  "\" effect=\"every checkpoint save is fsync'd\"");
      return driver;
    }
  }
  driver->save_durability_ = Durability::kRenamed;
  return driver;
}

Driver::Driver(ClaimSource& source, std::vector<Gpu> gpus, DriverOptions options,
               Checkpoint checkpoint)
    : source_(source),
      options_(std::move(options)),
      lock_host_dir_(options_.lock_dir.parent + "/" + options_.lock_dir.name),
      gpus_(std::move(gpus)),
      checkpoint_(std::move(checkpoint)) {}

Status Driver::Save(const std::string& uid) {
  return writer_->Record(checkpoint_, uid, save_durability_);
}

Status Driver::CleanUpAfterReboot() {
  // Every claim of the checkpoint, and every claim directory and CDI spec of this driver found
  // by name (a prepare whose record never reached the disk).
  std::map<std::string, PreparedClaim> all = checkpoint_;
  const std::string containers = options_.hook_path + "/" + node::kContainersSubdir;
  const std::string record_suffix =
      std::string("_") + kClaimContainerName + node::kClaimRecordSuffix;  // "_claim.claim"
  const std::string spec_empty = CdiSpecFileName("");                     // "<prefix>.json"
  const std::string spec_prefix = spec_empty.substr(0, spec_empty.size() - 5);
  auto found = [&](const std::string& uid) {
    if (all.contains(uid) || !node::ValidatePathComponent("claim UID", uid).ok()) return;
    PreparedClaim c;
    c.container_dir = containers + "/" + uid + "_" + kClaimContainerName;
    c.limits_path = c.container_dir + node::kLimitsFileSuffix;
    c.cdi_spec_path = options_.cdi_dir + "/" + CdiSpecFileName(uid);
    all.emplace(uid, std::move(c));
  };
  for (const auto& [dir, prefix, suffix] :
       {std::tuple{containers, std::string(), record_suffix},
        std::tuple{options_.cdi_dir, spec_prefix, std::string(".json")}}) {
    std::error_code ec;
    for (auto it = std::filesystem::directory_iterator(dir, ec);
         !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (name.size() > prefix.size() + suffix.size() && name.starts_with(prefix) &&
          name.ends_with(suffix)) {
        found(name.substr(prefix.size(), name.size() - prefix.size() - suffix.size()));
      }
    }
    if (ec && ec != std::errc::no_such_file_or_directory) {
      return Error(ErrorCode::kIo,
                   "DRA driver: cleaning up after a reboot: listing " + dir + ": " + ec.message(),
                   ec.value());
    }
  }
  int removed = 0;
  for (const auto& [uid, claim] : all) {
    if (Status s = RemovePreparedFiles(claim); !s.ok()) {
      return std::move(s).error().Context("DRA driver: cleaning up claim " + uid +
                                          " after a reboot");
    }
    ++removed;
  }
  checkpoint_.clear();  // saved by the writer's start
  Log("dra event=reboot_cleanup claims=" + std::to_string(removed) +
      " reason=\"no container of an earlier boot runs; the kubelet prepares again what it needs\"");
  return OkStatus();
}

void Driver::Log(const std::string& line) const {
  if (options_.log) {
    options_.log(line);
  } else {
    std::fprintf(stderr, "%s\n", line.c_str());
  }
}

void Driver::SetGpus(std::vector<Gpu> gpus) {
  std::lock_guard lock(mu_);
  gpus_ = std::move(gpus);
}

Checkpoint Driver::Prepared() const {
  std::lock_guard lock(mu_);
  return checkpoint_;
}

std::map<std::string, PrepareAnswer> Driver::Prepare(const std::vector<ClaimRef>& claims) {
  std::lock_guard lock(mu_);
  std::map<std::string, PrepareAnswer> out;
  for (const ClaimRef& ref : claims) {
    auto devices = PrepareOne(ref);
    PrepareAnswer& answer = out[ref.uid];
    if (devices.ok()) {
      answer.devices = std::move(devices).value();
      answer.error.clear();
      Log("dra event=prepare claim=" + ref.ns + "/" + ref.name + " uid=" + ref.uid +
          " devices=" + JoinDevices(answer.devices));
    } else {
      answer.devices.clear();
      answer.error = devices.error().message();
      Log("dra event=prepare_failed claim=" + ref.ns + "/" + ref.name + " uid=" + ref.uid +
          " error=\"" + answer.error + "\"");
    }
  }
  return out;
}

Result<std::vector<PreparedDevice>> Driver::PrepareOne(const ClaimRef& ref) {
  const std::string who = Describe(ref);
  if (ref.uid.empty()) return Error(ErrorCode::kInvalidArgument, who + ": no uid");
  if (auto it = checkpoint_.find(ref.uid); it != checkpoint_.end()) {
    if (it->second.state == ClaimState::kPrepared) {
      if (FilesPresent(it->second)) {
        if (Status s = broker::PrepareLockDirectory(options_.lock_dir); !s.ok()) {
          return std::move(s).error().Context(who + ": preparing " + lock_host_dir_);
        }
        // Prepared by a driver that wrote no claim record, or the record removed or changed
        // since: it gets one now.
        const PreparedClaim& done = it->second;
        const std::string record_path = node::ClaimRecordPath(done.container_dir);
        const node::ClaimRecord want{ref.ns, ref.name, ref.uid};
        if (auto have = node::ReadClaimRecord(record_path);
            !done.container_dir.empty() && (!have.ok() || *have != want)) {
          if (Status s = WriteFileAtomically(record_path, node::ClaimRecordText(want), 0644,
                                             save_durability_);
              !s.ok()) {
            Log("dra event=prepare_warning " + who + ": " + s.error().message());
          }
        }
        return it->second.devices;
      }
      // Its files are gone: prepared again, from the claim.
      Log("dra event=prepare_again claim=" + ref.ns + "/" + ref.name + " uid=" + ref.uid +
          " reason=\"files missing\"");
    }
    // Left midway by a plugin that died, or its files lost: start again from nothing.
    if (Status s = RemovePreparedFiles(it->second); !s.ok())
      return std::move(s).error().Context(who);
    checkpoint_.erase(it);
    if (Status s = Save(ref.uid); !s.ok()) return std::move(s).error().Context(who);
  }

  nlohmann::json claim = HAMI_TRY(source_.Get(ref));
  std::vector<AllocatedDevice> results =
      HAMI_TRY(ParseClaimAllocation(claim, ref, options_.driver_name));

  PreparedClaim record;
  record.ref = ref;
  std::vector<plugin::ShareDevice> shares;
  std::vector<CdiDevice> cdi_devices;
  for (const AllocatedDevice& r : results) {
    const std::string at =
        who + ": device " + r.device + " of pool " + r.pool + " (request " + r.request + ")";
    if (r.pool != options_.node_name) {
      return Error(ErrorCode::kNotFound,
                   at + ": not this node's pool (node " + options_.node_name + ")");
    }
    auto gpu =
        std::find_if(gpus_.begin(), gpus_.end(), [&](const Gpu& g) { return g.name == r.device; });
    if (gpu == gpus_.end()) {
      return Error(ErrorCode::kNotFound, at + ": node " + options_.node_name +
                                             " has no such device (gone since allocation?)");
    }
    if (!gpu->healthy) Log("dra event=prepare_warning " + at + ": the GPU is unhealthy");
    const uint64_t memory = r.memory_bytes.value_or(gpu->memory_bytes);
    const int64_t cores = r.cores.value_or(100);
    auto share = std::find_if(shares.begin(), shares.end(),
                              [&](const plugin::ShareDevice& s) { return s.uuid == gpu->uuid; });
    if (share == shares.end()) {
      shares.push_back({gpu->uuid, 0, 0});
      share = shares.end() - 1;
    }
    share->memory_bytes += memory;
    share->cores = static_cast<uint32_t>(std::min<int64_t>(100, share->cores + cores));
    const std::string cdi_name = CdiDeviceName(ref.uid, r.device, r.share_id);
    if (!IsValidCdiDeviceName(cdi_name)) {
      return Error(ErrorCode::kInvalidArgument,
                   at + ": '" + cdi_name + "' cannot be a CDI device name");
    }
    cdi_devices.push_back({cdi_name, gpu->uuid, static_cast<int>(share - shares.begin())});
    record.devices.push_back({{r.request}, r.pool, r.device, r.share_id, {CdiDeviceId(cdi_name)}});
  }
  if (results.empty()) {
    // Nothing of this driver's in the claim: nothing to make.
    record.state = ClaimState::kPrepared;
    checkpoint_[ref.uid] = record;
    HAMI_TRY(Save(ref.uid));
    return record.devices;
  }

  plugin::ContainerShareInput in;
  in.devices = shares;
  in.device_config = &options_.device_config;
  in.ref = node::ContainerRef{ref.uid, kClaimContainerName};
  in.hook_path = options_.hook_path;
  in.broker = options_.broker;
  in.lock_host_dir = lock_host_dir_;
  in.broker_host_dir = options_.broker_host_dir;
  in.limits_file = options_.limits_file;
  in.preload = plugin::Preload::kMount;
  auto built = plugin::BuildContainerShare(in);
  if (!built.ok()) return std::move(built).error().Context(who);
  const plugin::ContainerShare& share = *built;

  record.state = ClaimState::kPreparing;
  record.cdi_spec_path = options_.cdi_dir + "/" + CdiSpecFileName(ref.uid);
  record.container_dir = share.container_dir;
  record.limits_path = share.limits_path;
  checkpoint_[ref.uid] = record;
  if (Status s = Save(ref.uid); !s.ok()) {
    checkpoint_.erase(ref.uid);
    return std::move(s).error().Context(who);
  }

  auto make = [&]() -> Status {
    if (Status s = broker::PrepareLockDirectory(options_.lock_dir); !s.ok()) {
      return std::move(s).error().Context("preparing " + lock_host_dir_);
    }
    // The claim record first: the directory is never there without it (node/claim_record.h).
    HAMI_TRY(EnsureDirectory(std::filesystem::path(share.container_dir).parent_path().string()));
    HAMI_TRY(WriteFileAtomically(node::ClaimRecordPath(share.container_dir),
                                 node::ClaimRecordText({ref.ns, ref.name, ref.uid}), 0644,
                                 save_durability_));
    HAMI_TRY(plugin::RecreateContainerDirectory(share.container_dir));
    if (!share.limits_path.empty()) {
      limits::PublishOptions publish = options_.publish;
      publish.sync = save_durability_ == Durability::kSynced;  // see "Durability" in driver.h
      HAMI_TRY(limits::PublishLimitsFile(share.limits_path, share.limits, publish));
    }
    HAMI_TRY(plugin::CheckHookFiles(share.response, "the claim's containers", "hami-dra-plugin"));
    HAMI_TRY(EnsureDirectory(options_.cdi_dir));
    const std::string spec = CdiSpec(share.response, cdi_devices).dump(2) + "\n";
    HAMI_TRY(WriteFileAtomically(record.cdi_spec_path, spec, 0644, save_durability_));
    record.state = ClaimState::kPrepared;
    checkpoint_[ref.uid] = record;
    return Save(ref.uid);
  };
  if (Status s = make(); !s.ok()) {
    if (Status removed = RemovePreparedFiles(record); !removed.ok()) {
      // The record stays (as preparing): the next prepare or unprepare removes the rest.
      Log("dra event=rollback_failed claim=" + ref.ns + "/" + ref.name + " uid=" + ref.uid +
          " error=\"" + removed.error().message() + "\"");
      checkpoint_[ref.uid].state = ClaimState::kPreparing;
    } else {
      checkpoint_.erase(ref.uid);
    }
    (void)Save(ref.uid);
    return std::move(s).error().Context(who);
  }
  return record.devices;
}

std::map<std::string, std::string> Driver::Unprepare(const std::vector<ClaimRef>& claims) {
  std::lock_guard lock(mu_);
  std::map<std::string, std::string> out;
  for (const ClaimRef& ref : claims) {
    Status s = UnprepareOne(ref.uid);
    out[ref.uid] = s.ok() ? "" : std::string(Describe(ref) + ": " + s.error().message());
    Log("dra event=" + std::string(s.ok() ? "unprepare" : "unprepare_failed") + " claim=" + ref.ns +
        "/" + ref.name + " uid=" + ref.uid + (s.ok() ? "" : " error=\"" + out[ref.uid] + "\""));
  }
  return out;
}

Status Driver::UnprepareOne(const std::string& uid) {
  auto it = checkpoint_.find(uid);
  if (it == checkpoint_.end()) return OkStatus();
  HAMI_TRY(RemovePreparedFiles(it->second));
  PreparedClaim removed = std::move(it->second);
  checkpoint_.erase(it);
  if (Status s = Save(uid); !s.ok()) {
    checkpoint_.emplace(uid, std::move(removed));
    return s;
  }
  return OkStatus();
}

}  // namespace hami::dra
