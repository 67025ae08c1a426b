// The claim record: a small file the DRA driver (hami-dra-plugin) writes beside the container
// directory it makes for a prepared ResourceClaim, naming the claim:
//
//   <hook>/vgpu/containers/<claimUID>_claim         the claim's directory (its region)
//   <hook>/vgpu/containers/<claimUID>_claim.limits  its limits file
//   <hook>/vgpu/containers/<claimUID>_claim.claim   this record:
//       {"name":"trainer-gpu","namespace":"ml","uid":"<claim UID>"}
//
// It is what tells a claim's directory from a device-plugin container's (a pod may have a
// container named "claim"): hami-monitor labels the region's series with the claim and the pods
// that use it, and never removes the directory (the driver does, at NodeUnprepareResources);
// `hami top` and `hami inspect` name the claim. The driver writes it before the directory and
// removes it after, so a claim's directory is never without it. Like the limits file it sits
// beside the directory, out of the containers' reach.
//
// Thread safety: pure functions; ReadClaimRecord only reads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::node {

// The container-name part of a claim's directory: <claimUID>_claim.
inline constexpr char kClaimContainerName[] = "claim";
inline constexpr char kClaimRecordSuffix[] = ".claim";
// Larger records are refused by the reader.
inline constexpr size_t kMaxClaimRecordBytes = 4096;

struct ClaimRecord {
  std::string ns;  // metadata.namespace
  std::string name;
  std::string uid;
  friend bool operator==(const ClaimRecord&, const ClaimRecord&) = default;
};

// <container_dir>.claim: the record of the claim whose directory that is.
std::string ClaimRecordPath(std::string_view container_dir);

// The record's text: compact JSON, keys sorted, ending in '\n'.
std::string ClaimRecordText(const ClaimRecord& record);

// Parses a record. kInvalidArgument naming what is wrong: not JSON, not an object, a field
// absent or not a string, an empty field, a uid that cannot be part of a path
// (ValidatePathComponent).
Result<ClaimRecord> ParseClaimRecord(std::string_view text);

// Reads the record at `path`, opened without following a symlink, at most
// kMaxClaimRecordBytes. kNotFound when absent; other errors name the file.
Result<ClaimRecord> ReadClaimRecord(const std::string& path);

}  // namespace hami::node
