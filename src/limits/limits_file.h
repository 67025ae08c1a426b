// The limits file (seed 003): the variables libvgpu.so reads, delivered on the file system so
// that processes started without the container's environment (SSH, su -, cron) still get
// them. The device plugin and `hami run` write it; libvgpu.so and `hami env` read it. This is
// the only reader and the only writer.
//
// Format 1, as written:
//   CUDA_DEVICE_MEMORY_LIMIT_0=3000m
//   CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache
//   CUDA_DEVICE_SM_LIMIT=50
//   HAMI_LIMITS_FORMAT=1
// one KEY=VALUE per line, sorted by key, no comments, no blank lines, ending in '\n'. A key
// is [A-Z0-9_]+; the value is everything after the first '=', taken literally.
//
// The reader is tolerant, as the seed asks: a line that is not KEY=VALUE is reported with its
// number and skipped, and the rest applies; empty lines are skipped; a '\r' before '\n' is
// dropped; a later line for a key replaces an earlier one (that is for the consumer: entries
// keep file order). The writer is strict: it refuses anything the reader would not give back
// unchanged, so that write-then-read is the identity.
//
// Built without exceptions (libvgpu.so links it); thread-safe (no shared state).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/result.h"

namespace hami::limits {

// The format line every written file carries.
inline constexpr char kFormatKey[] = "HAMI_LIMITS_FORMAT";
inline constexpr char kFormat[] = "1";
// Larger files are refused by the reader and never written.
inline constexpr size_t kMaxFileBytes = 64 * 1024;
// The mode of a published file: root writes it, the container's users read it.
inline constexpr mode_t kFileMode = 0644;

using Entry = std::pair<std::string, std::string>;  // key, value

// A limits file as read.
struct LimitsFile {
  bool present = false;  // false: absent, empty or unreadable (see problems)
  // The file is there but could not be read whole (not a regular file, a symlink, no
  // permission, larger than kMaxFileBytes): whatever it says is unknown.
  bool unreadable = false;
  std::string path;
  std::vector<Entry> entries;         // in file order
  std::vector<std::string> problems;  // "/overrideEnv line 3 'x': not KEY=VALUE; skipped"
  // Each skipped line's leading name (its [A-Z0-9_] prefix, when it has one) and the line as
  // shown in its problem: a consumer that must not lose a limit learns which variable a
  // skipped line was meant to set.
  std::vector<Entry> skipped;
};

// Whether `key` may be a key: non-empty, [A-Z0-9_] only.
bool IsValidKey(std::string_view key);

// Parses `text`, read from `path` (which the problems name). Never fails: each non-empty
// line becomes an entry or a problem naming its number (at most 80 characters of the line
// are shown, up to a NUL byte).
LimitsFile ParseLimitsFile(std::string_view text, std::string_view path);

// How long a reader waits for a rewrite in place (UpdateLimitsFileInPlace) to finish, and a
// rewrite for readers to let go, before giving up.
inline constexpr int64_t kLockWaitNs = 2'000'000'000;

// Reads and parses `path`, opened without following a symlink, under a shared OFD lock on the
// file, so that a rewrite in place (UpdateLimitsFileInPlace) is seen whole or not at all. An
// absent or empty file is `present == false` with no problem; any other failure to read it
// (not a regular file, a symlink, unreadable, larger than kMaxFileBytes, a rewrite that held
// the file for kLockWaitNs) is `present == false`, `unreadable`, with one problem naming the
// path.
LimitsFile ReadLimitsFile(const std::string& path);

// The text of a file holding `entries` (in any order) and the format line: sorted by key.
// Refused (kInvalidArgument, naming the key or value): an invalid key, a key given twice,
// kFormatKey (the writer adds it), a value holding '\n', '\r' or NUL, and a text larger than
// kMaxFileBytes.
Result<std::string> LimitsText(std::span<const Entry> entries);

// The steps of PublishLimitsFile, in order, for failure injection in tests.
enum class PublishStep {
  kOpenDirectory,  // opening the file's directory
  kCreateTemp,     // creating the temporary file beside the final one
  kWrite,          // writing the text
  kSync,           // fsync of the temporary file
  kChmod,          // fchmod to kFileMode
  kRename,         // rename over the final name
  kSyncDirectory,  // fsync of the directory
};
const char* PublishStepName(PublishStep step);

struct PublishOptions {
  // Tests only: called before each step; a non-zero return is taken as that step's errno.
  std::function<int(PublishStep)> inject;
  // false: no fsync of the file or the directory (kSync and kSyncDirectory are skipped). The
  // file then outlives its writer's death but not necessarily a crash of the node: for a
  // writer that makes every such file again after a reboot (the DRA driver, driver.h).
  bool sync = true;
};

// Writes the file of `entries` at `path` atomically: LimitsText, then a temporary file in
// the same directory, written whole, fsync'd, fchmod'ed to kFileMode, renamed over `path`,
// then the directory fsync'd. A reader sees the old file or the new one, never a part (a
// truncated CUDA_DEVICE_MEMORY_LIMIT_0=30 would read as 30 bytes). On failure the temporary
// file is removed, `path` is left as it was (unless only the final directory sync failed:
// then the new file is in place but may not survive a crash), and the error names `path`,
// the step and the system's reason: "publishing limits file /x/p_c.limits: write
// /x/.p_c.limits.tmp-Ab12Cd: No space left on device". A symlink at `path` is replaced, not
// followed. The caller owns the directory; nothing else in it is touched.
Status PublishLimitsFile(const std::string& path, std::span<const Entry> entries,
                         const PublishOptions& options = {});

// Rewrites the existing file at `path` with `entries` in place, under an exclusive OFD lock on
// the file (ReadLimitsFile takes a shared one): for a file a running container already has
// bound into it. A bind mount holds the inode it was given, so a file renamed over `path` (as
// PublishLimitsFile does) is never seen through the mount; the same inode must change, and the
// lock is what makes the change whole for every reader. The text is written from offset 0, the
// file cut to its length and fsync'd, then the lock let go. Refused without a change, naming
// `path` and the step: a symlink or non-regular file, a file owned by another user than the
// caller (a tenant's file is not the node's), a lock readers held for kLockWaitNs, entries
// LimitsText refuses. A write that fails midway leaves a file a reader would not trust only
// while the lock is held; the error says to rewrite it.
Status UpdateLimitsFileInPlace(const std::string& path, std::span<const Entry> entries);

}  // namespace hami::limits
