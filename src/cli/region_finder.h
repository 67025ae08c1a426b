// Which shared region `hami top` and `hami inspect` read when given none. They never pick one
// silently: on a shared host the default /tmp/cudevshr.cache may be anyone's.
//
//   1. The caller's own region, as libvgpu.so would resolve it in this shell:
//      CUDA_DEVICE_MEMORY_SHARED_CACHE from the limits file (/overrideEnv), else from the
//      environment (vgpu::ResolveConfig, the library's own resolution).
//   2. Without one, the command refuses, listing the regions this host shows and whose they
//      are: the default region, each `hami run`'s region (/tmp/hami-run-*/usage.cache, those
//      this user may see), and every region in the device plugin's container directories
//      (<hook>/vgpu/containers/<podUID>_<container>/*.cache), with the pod's namespace and
//      name from the directory's pod record (node/pod_record.h) when it has one, and a DRA
//      claim's directory (<claimUID>_claim) with the claim's namespace and name from its claim
//      record (node/claim_record.h).
//
// Thread safety: the functions only read the file system and the environment.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hami::cli {

struct CallerRegion {
  std::string path;
  std::string
      source;  // "CUDA_DEVICE_MEMORY_SHARED_CACHE in the environment" or "... in /overrideEnv"
};

// The region the caller's environment and limits file name; nullopt when neither names one.
// `*problem` (when not null) receives why a value that was given could not be used (it is
// malformed), else stays empty.
std::optional<CallerRegion> FindCallerRegion(std::string* problem);

struct VisibleRegion {
  std::string path;
  std::string owner;          // the file owner's user name, or its UID when it has no name
  std::string pod_uid;        // from the container directory's name; empty outside the plugin's
  std::string container;      //   layout
  std::string pod_namespace;  // from the pod record; empty without one
  std::string pod_name;
  // A DRA claim's directory (pod_uid is then the claim's UID): from its claim record.
  std::string claim_namespace;
  std::string claim_name;
};

// Every region file the host shows to this user, sorted by path (see above).
std::vector<VisibleRegion> ListVisibleRegions(const std::string& hook_path);

// The refusal of `command` ("hami top") when no region was given and the caller's
// environment names none: why, every visible region, one a line, and what to type.
std::string NoRegionGivenMessage(std::string_view command, const std::string& problem,
                                 const std::vector<VisibleRegion>& regions,
                                 const std::string& hook_path);

// One line describing a visible region: "/x/usage.cache  owner alice  pod team-a/train
// (container main, UID ...)", or for a claim's "... claim ml/shared-gpu (claim UID ...)".
std::string DescribeVisibleRegion(const VisibleRegion& region);

}  // namespace hami::cli
