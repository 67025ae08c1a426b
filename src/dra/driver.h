// The node side of the DRA driver: NodePrepareResources and NodeUnprepareResources in plain
// C++ (service.h converts the kubelet's messages).
//
// Prepare, per claim:
//   1. a claim the checkpoint holds as prepared gets the recorded answer again (the kubelet
//      calls again after its own restart and on retries), /tmp/vgpulock prepared again (and a
//      missing claim record written), while
//      its CDI spec, limits file and directory are there; when one is gone (a node reboot
//      empties /var/run/cdi) and for a claim recorded as preparing (the plugin died midway),
//      its files are removed and it is prepared from the start;
//   2. the claim is read from the ClaimSource, its UID checked, and the results of its
//      allocation for this driver taken (claim.h). Each must name this node's pool and one of
//      its GPUs, else the claim fails with a message naming the device; the other claims of the
//      call go on;
//   3. the share: one device per GPU of the claim (results on the same GPU add up), memory =
//      the result's consumedCapacity.memory, cores = consumedCapacity.cores (capped at 100);
//      a result without consumedCapacity (allocated without consumable capacity: the whole
//      device) takes the GPU's memory and 100 cores. plugin::BuildContainerShare turns it into
//      exactly what the device plugin's Allocate gives a container: the directory
//      <hook>/vgpu/containers/<claimUID>_claim (its region, usage.cache, is made by libvgpu),
//      the limits file <claimUID>_claim.limits beside it, /tmp/vgpulock prepared as seed 000
//      says, the broker mount when the broker is enabled;
//   4. the checkpoint records the claim as preparing with every path it is about to make; then
//      the lock directory, the claim record <claimUID>_claim.claim naming the claim
//      (node/claim_record.h; hami-monitor and `hami top` read it), the container directory,
//      the limits file, a check that the hook
//      files are files, and last the CDI spec (cdi.h) in the CDI directory (made 0755 when
//      missing). Any failure removes what was made and fails the claim: a container never gets
//      a CDI device without its limits file;
//   5. the checkpoint records the claim as prepared with its answer: one Device per result,
//      request name, pool, device, share ID, and the CDI device ID of the result.
// Durability: within one boot the checkpoint's changes are appended to its log (checkpoint.h)
// and the claim record and the CDI spec written whole and renamed into place, none fsync'd:
// that outlives the plugin's death, the one failure a boot can see without losing its
// containers. A crash of the node loses every container with it, and the kubelet prepares
// again, after its restart, every claim a pod still needs (research/dra.md §5.3). So the plugin
// records the boot it runs in (the kernel's boot ID in <checkpoint dir>/boot_id, fsync'd once
// per boot, before the first change), and a start in a later boot removes the files of every
// claim: those its checkpoint holds and those found by name (claim records in the containers
// directory, this driver's CDI specs), whatever the checkpoint's state, readable or not
// (event=reboot_cleanup). The limits file is written the same way (PublishOptions::sync
// false), where the device plugin fsyncs it: the kubelet does not call Allocate again after a
// reboot. Without a boot ID (or when the marker cannot be written) every change and every
// limits file is fsync'd and nothing is cleaned up at start.
// Unprepare, per claim: the checkpoint's record names what to remove (the CDI spec, the limits
// file, the container directory, then the claim record beside it); the claim object is never
// read. A claim the checkpoint does
// not hold succeeds (already unprepared, or never prepared here). A failure to remove keeps the
// record and fails the claim, so the kubelet's retry finishes the job.
//
// Thread safety: every public method may be called from any thread; calls run one at a time.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "broker/node_prep.h"
#include "common/result.h"
#include "config/device_config.h"
#include "dra/cdi.h"
#include "dra/checkpoint.h"
#include "dra/claim.h"
#include "inventory/inventory.h"
#include "limits/limits_file.h"
#include "node/paths.h"
#include "plugin/container_state.h"

namespace hami::dra {

// The container name part of a claim's directory: <claimUID>_claim.
inline constexpr char kClaimContainerName[] = "claim";
// The file the checkpoint lives in, in the plugin's directory.
inline constexpr char kCheckpointFileName[] = "checkpoint.json";
// Beside it, the boot ID of the boot the plugin last ran in.
inline constexpr char kBootMarkerFileName[] = "boot_id";

// A GPU of this node as the driver publishes it.
struct Gpu {
  std::string name;  // the device name in the ResourceSlice: "hami-gpu-<index>"
  std::string uuid;
  uint64_t memory_bytes = 0;
  bool healthy = true;
};

// "hami-gpu-<index>".
std::string DeviceName(int index);
// One Gpu per inventory device with a UUID, in the inventory's order.
std::vector<Gpu> GpusFromInventory(const inventory::Inventory& inventory);

struct DriverOptions {
  std::string driver_name = kDriverName;
  std::string node_name;        // the pool; required
  std::string checkpoint_path;  // required
  std::string cdi_dir = kDefaultCdiDir;
  std::string hook_path = node::kDefaultHookPath;
  plugin::Broker broker = plugin::Broker::kDisabled;
  broker::NodePrepOptions lock_dir;  // the lock directory to prepare (tests: a temporary one)
  std::string broker_host_dir = node::kBrokerHostDir;
  plugin::LimitsFile limits_file = plugin::LimitsFile::kWrite;
  config::DeviceConfig device_config;  // scaling, log level, core policy
  limits::PublishOptions publish;      // tests inject failures
  // The current boot's ID (tests: a file of their own). Unreadable: every checkpoint save is
  // fsync'd and nothing is cleaned up at start.
  std::string boot_id_path = "/proc/sys/kernel/random/boot_id";
  // One structured line per event ("dra event=prepare claim=..."); nullptr: stderr.
  std::function<void(std::string_view line)> log;
};

struct PrepareAnswer {
  std::vector<PreparedDevice> devices;
  std::string error;  // non-empty: this claim failed

  friend bool operator==(const PrepareAnswer&, const PrepareAnswer&) = default;
};

class Driver {
 public:
  // Loads the checkpoint (a corrupt one is an error: claims to clean up would be forgotten)
  // and, in a later boot than the plugin's last, cleans up every claim's files (above).
  // The source must outlive the driver.
  static Result<std::unique_ptr<Driver>> Create(ClaimSource& source, std::vector<Gpu> gpus,
                                                DriverOptions options);
  Driver(const Driver&) = delete;
  Driver& operator=(const Driver&) = delete;

  // One answer per claim UID of `claims`.
  std::map<std::string, PrepareAnswer> Prepare(const std::vector<ClaimRef>& claims);
  // One error per claim UID of `claims`, empty on success.
  std::map<std::string, std::string> Unprepare(const std::vector<ClaimRef>& claims);

  void SetGpus(std::vector<Gpu> gpus);
  Checkpoint Prepared() const;
  const DriverOptions& options() const { return options_; }

 private:
  Driver(ClaimSource& source, std::vector<Gpu> gpus, DriverOptions options, Checkpoint checkpoint);
  Result<std::vector<PreparedDevice>> PrepareOne(const ClaimRef& ref);
  Status UnprepareOne(const std::string& uid);
  Status Save(const std::string& uid);  // uid's state in checkpoint_, as save_durability_ says
  Status CleanUpAfterReboot();
  void Log(const std::string& line) const;

  ClaimSource& source_;
  const DriverOptions options_;
  const std::string lock_host_dir_;
  Durability save_durability_ = Durability::kSynced;  // set once, by Create
  mutable std::mutex mu_;
  std::vector<Gpu> gpus_;                     // guarded by mu_
  Checkpoint checkpoint_;                     // guarded by mu_
  std::unique_ptr<CheckpointWriter> writer_;  // guarded by mu_
};

// Removes what a record names: the CDI spec, the limits file, the container directory and,
// once the directory is gone, its claim record (each may already be gone); for a record left
// preparing, also the temporary files a killed write left beside them. The first failure is
// returned after trying them all.
Status RemovePreparedFiles(const PreparedClaim& claim);

}  // namespace hami::dra
