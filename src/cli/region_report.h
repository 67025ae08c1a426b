// Reading shared regions for people and scripts. `hami inspect`, `hami top` and
// `hami region set` open regions the same way; inspect and top describe one with a single
// JSON document (DescribeRegion) from which their text views are printed, so the two forms
// can never disagree.
#pragma once

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "common/result.h"
#include "region/region.h"

namespace hami::cli {

// How a command wants the region opened.
enum class RegionAccess {
  kReadWrite,              // refuse when the file cannot be opened for writing
  kReadOnly,               // never write
  kReadWriteElseReadOnly,  // write access when the file allows it, else read-only
};

struct OpenedRegion {
  std::unique_ptr<region::Region> region;
  region::Access access;
};

// Opens the existing region at `path` (never creates one) and checks what the library
// trusts without checking: the policy's device count. Refuses, before opening it, a path
// that is not a regular file or a symbolic link (a FIFO would block the open). Every error
// names the file.
Result<OpenedRegion> OpenExistingRegion(const std::string& path, RegionAccess access);

// Everything a region says about itself, in stable snake_case fields: file, access,
// layout, creator, policy, devices (limits, usage, usage by kind, observed SM
// utilization), slots (every non-free one) and inconsistencies (Region::Check).
nlohmann::json DescribeRegion(const OpenedRegion& opened);

// "read-write" or "read-only".
const char* AccessName(region::Access access);
// "free", "claiming", "live", or "invalid".
// "running", "suspended", or "invalid".
// "slot_sum_mismatch", "dead_owner", "over_limit", "wedged_lock", "policy_conflict".

// A memory limit: "unlimited" for 0, else FormatBytes.
std::string FormatLimit(uint64_t limit_bytes);
// An SM limit: "unlimited" for 0 and 100, else "30%".
std::string FormatSmLimit(uint32_t percent);
// CLOCK_REALTIME nanoseconds as UTC "2024-05-01T12:00:00Z"; "-" for 0.
std::string FormatRealtime(int64_t realtime_ns);
// `text` with every byte that is not printable ASCII replaced by '?': names read from a
// shared file must not drive the terminal.
std::string Printable(const std::string& text);
// The JSON text of `j`, indented, with invalid UTF-8 replaced rather than thrown on.
std::string DumpJson(const nlohmann::json& j, int indent = 2);

}  // namespace hami::cli
