// The container directories the device plugin makes under the hook path, as the monitor sees
// them: <hook>/vgpu/containers/<podUID>_<container>/ holding the container's region files
// (usage.cache, or HAMi-core's randomly named *.cache), with the limits file
// <podUID>_<container>.limits beside the directory (node/paths.h). The DRA driver makes the same
// for a prepared ResourceClaim, <claimUID>_claim, and writes the claim record
// <claimUID>_claim.claim beside it (node/claim_record.h): such a directory is a claim's.
//
// Thread safety: the functions keep no state; they may run concurrently.
#pragma once

#include <compare>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"
#include "node/claim_record.h"

namespace hami::monitor {

// Which container a directory belongs to.
struct ContainerKey {
  std::string pod_uid;
  std::string container;
  auto operator<=>(const ContainerKey&) const = default;
};

// "<podUID>_<container>" -> key, split at the first '_' (a pod UID has none). Each part is
// checked by node::ValidatePathComponent; otherwise kInvalidArgument naming the name and what
// is wrong: "container directory 'abc': no '_' between pod UID and container name".
Result<ContainerKey> ParseContainerDirName(std::string_view name);

struct ContainerDir {
  ContainerKey key;
  std::string dir;                        // <hook>/vgpu/containers/<uid>_<container>
  std::string limits_file;                // <dir>.limits (may not exist)
  std::vector<std::string> region_files;  // usage.cache first, then other *.cache, sorted
  // A DRA claim's directory: named <uid>_claim, with something at <dir>.claim.
  bool is_claim = false;
  // Its claim record, when it reads and names the directory's UID (else the problem is in
  // `skipped` and the directory stays a claim's, without a name).
  std::optional<node::ClaimRecord> claim;
};

// Whether `key` names a claim's directory (container "claim") whose claim record exists at
// <dir>.claim (in any form: a bad record still marks the directory as the DRA driver's).
bool IsClaimDir(const ContainerKey& key, const std::string& dir);

// Every container directory under <hook_path>/vgpu/containers, sorted by key. A missing
// containers directory is an empty list; one that cannot be read (or is not a directory) is an
// error naming it. Names starting with '.' are ignored silently, and so are regular files
// named *.limits and *.claim (the limits files and claim records beside the directories). Other
// entries that are not directories (symlinks included: never followed), or whose names do not
// parse, are skipped and appended to `skipped` (when not null) as errors naming the path.
// region_files lists the regular files (not symlinks) named *.cache in each directory, by absolute
// path.
Result<std::vector<ContainerDir>> ListContainerDirs(const std::string& hook_path,
                                                    std::vector<Error>* skipped);

}  // namespace hami::monitor
