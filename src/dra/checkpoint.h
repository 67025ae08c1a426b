// The driver's record of the claims it prepared, so that a repeated NodePrepareResources gets
// the same answer and NodeUnprepareResources removes exactly what prepare made, also after the
// plugin restarted and when the claim object is already gone (research/dra.md §5.3).
//
// A claim is recorded as kPreparing, with every path prepare is about to make, before the
// first file is made, and as kPrepared, with its answer, once all are made. So a plugin killed
// midway leaves a record that names what to remove; a kPreparing claim is prepared again from
// the start on the next NodePrepareResources, and removed by NodeUnprepareResources.
//
// On disk: a snapshot, JSON {"version":1,"claims":{"<uid>":{...}}} at `path`, written whole to
// a temporary file beside it and renamed over it (WriteFileAtomically), and a log of the
// changes since, <path>.log, one JSON line per change holding the claim's whole state:
//   {"uid":"<uid>","claim":{...as in the snapshot...}}
//   {"uid":"<uid>","removed":true}
// A change is one append (no file made, none renamed: a prepare records two); the log is
// folded into a new snapshot when it passes CheckpointWriter::kCompactBytes and at every start.
// Whether a write is fsync'd is the driver's choice (driver.h says when a rename or an append
// alone is enough).
//
// Thread safety: value types and functions of their arguments; a CheckpointWriter is used by
// one thread at a time (the driver's lock).
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "common/unique_fd.h"
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

// The snapshot at `path`, then <path>.log replayed over it. Absent files are empty; an
// unreadable or corrupt one is an error naming the file (and the log's line): the driver does
// not start, it would forget claims it must clean up. A last log line without its newline is
// a write the plugin died in and is dropped.
Result<Checkpoint> LoadCheckpoint(const std::string& path);

std::string CheckpointLogPath(const std::string& path);  // <path>.log
// One log line: the state of `uid` in `checkpoint` (its record, or its removal when absent).
std::string EncodeCheckpointChange(const Checkpoint& checkpoint, const std::string& uid);
// Applies the log's lines to `checkpoint` (see LoadCheckpoint).
Status ReplayCheckpointLog(std::string_view text, std::string_view what, Checkpoint& checkpoint);

// What a write must outlive: kSynced, a crash of the node (the file is fsync'd before the
// rename and its directory after it, a log line fdatasync'd); kRenamed, the death of the
// writing process (a whole file renamed into place, a line appended; the kernel writes them
// back in its own time).
enum class Durability { kSynced, kRenamed };

// Writes the snapshot alone (the log is the writer's).
Status SaveCheckpoint(const std::string& path, const Checkpoint& checkpoint,
                      Durability durability = Durability::kSynced);

// The writer of a running driver: one per checkpoint path.
class CheckpointWriter {
 public:
  // The log's size past which Record folds it into a new snapshot.
  static constexpr size_t kCompactBytes = 256 << 10;

  // Writes `checkpoint` (everything loaded) as the snapshot, fsync'd, and empties the log, so
  // that appends start on a clean line.
  static Result<std::unique_ptr<CheckpointWriter>> Start(const std::string& path,
                                                         const Checkpoint& checkpoint);
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Records the state of `uid` in `checkpoint` (the driver's whole map, after the change): one
  // appended line, fdatasync'd when kSynced; or, once the log is past kCompactBytes, a new
  // snapshot of `checkpoint` and an empty log. A failure leaves the change unrecorded.
  Status Record(const Checkpoint& checkpoint, const std::string& uid, Durability durability);

 private:
  CheckpointWriter(std::string path, UniqueFd log);
  Status Truncate(Durability durability);

  const std::string path_;
  const std::string log_path_;
  UniqueFd log_;
  size_t log_bytes_ = 0;
  bool broken_ = false;  // a failed append left a part of a line that could not be cut off
};

// Writes `text` at `path` whole or not at all: a temporary file ".<name>.tmp-<pid>" in the same
// directory (mode `mode`), renamed over `path`, with the fsyncs `durability` asks for.
Status WriteFileAtomically(const std::string& path, std::string_view text, mode_t mode,
                           Durability durability = Durability::kSynced);

}  // namespace hami::dra
