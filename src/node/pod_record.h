// The pod record: a small file the device plugin writes into each container directory at
// Allocate, <hook>/vgpu/containers/<podUID>_<container>/pod.json, so that tools on the host
// (`hami top`, `hami inspect`) can name the pod a region belongs to; the directory's name
// carries only the pod's UID.
//
//   {"container":"main","name":"train","namespace":"default","uid":"<pod UID>"}
//
// The directory is mounted read-write into the container, so its processes can rewrite the
// record: it is a label for people, never an identity anything trusts. The UID in the
// directory's name is what the plugin vouches for.
//
// Thread safety: pure functions; ReadPodRecord only reads.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

#include "common/result.h"

namespace hami::node {

inline constexpr char kPodRecordFileName[] = "pod.json";
// Larger records are refused by the reader.
inline constexpr size_t kMaxPodRecordBytes = 4096;

struct PodRecord {
  std::string ns;  // metadata.namespace
  std::string name;
  std::string uid;
  std::string container;
  friend bool operator==(const PodRecord&, const PodRecord&) = default;
};

// The record's text: compact JSON, keys sorted, ending in '\n'.
std::string PodRecordText(const PodRecord& record);

// Parses a record. kInvalidArgument naming what is wrong: not JSON, not an object, a field
// that is not a string; absent fields stay empty.
Result<PodRecord> ParsePodRecord(std::string_view text);

// Reads <dir>/pod.json, opened without following a symlink, at most kMaxPodRecordBytes.
// kNotFound when absent; other errors name the file.
Result<PodRecord> ReadPodRecord(const std::string& dir);

}  // namespace hami::node
