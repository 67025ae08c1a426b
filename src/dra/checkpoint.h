// The driver's record of the claims it prepared, so that a repeated NodePrepareResources gets
// the same answer and NodeUnprepareResources removes exactly what prepare made, also after the
// plugin restarted and when the claim object is already gone (research/dra.md §5.3).
//
// A claim is recorded as kPreparing, with every path prepare is about to make, before the
// first file is made, and as kPrepared, with its answer, once all are made. So a plugin killed
// midway leaves a record that names what to remove; a kPreparing claim is prepared again from
// the start on the next NodePrepareResources, and removed by NodeUnprepareResources.
//
// The file: JSON {"version":1,"claims":{"<uid>":{...}}}, written whole to a temporary file
// beside it and renamed over it (WriteFileAtomically), fsync'd with its directory or not as
// the driver asks (driver.h says when a rename alone is enough).
//
// Thread safety: value types and functions of their arguments; the caller serializes writers.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "dra/claim.h"

namespace hami::dra {

// One device of a prepare answer (the kubelet's Device message).
struct PreparedDevice {
  std::vector<std::string> request_names;
  std::string pool;
  std::string device;
  std::string share_id;  // empty: none
  std::vector<std::string> cdi_device_ids;

  friend bool operator==(const PreparedDevice&, const PreparedDevice&) = default;
};

enum class ClaimState { kPreparing, kPrepared };

struct PreparedClaim {
  ClaimRef ref;
  ClaimState state = ClaimState::kPreparing;
  std::string cdi_spec_path;
  std::string container_dir;
  std::string limits_path;  // empty: none
  std::vector<PreparedDevice> devices;

  friend bool operator==(const PreparedClaim&, const PreparedClaim&) = default;
};

using Checkpoint = std::map<std::string, PreparedClaim>;  // by claim UID

std::string EncodeCheckpoint(const Checkpoint& checkpoint);
// Refuses (kCorrupt, naming `what` and the field) anything but what EncodeCheckpoint writes.
Result<Checkpoint> DecodeCheckpoint(std::string_view text, std::string_view what);

// An absent file is an empty checkpoint; an unreadable or corrupt one is an error (the driver
// does not start: it would forget claims it must clean up).
Result<Checkpoint> LoadCheckpoint(const std::string& path);

// What a write must outlive: kSynced, a crash of the node (the file is fsync'd before the
// rename and its directory after it); kRenamed, the death of the writing process (the whole
// file is renamed into place and the kernel writes it back in its own time).
enum class Durability { kSynced, kRenamed };

Status SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                      Durability durability = Durability::kSynced);

// Writes `text` at `path` whole or not at all: a temporary file ".<name>.tmp-<pid>" in the same
// directory (mode `mode`), renamed over `path`, with the fsyncs `durability` asks for.
Status WriteFileAtomically(const std::string& path, std::string_view text, mode_t mode,
                           Durability durability = Durability::kSynced);

}  // namespace hami::dra
