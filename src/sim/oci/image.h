// Container images without a registry: OCI image-layout tarballs (image-spec v1.0, "Image
// Layout") written by the project, which `ctr image import` loads into containerd.
//
// One tarball holds one image of one layer:
//   oci-layout           {"imageLayoutVersion":"1.0.0"}
//   index.json           one manifest descriptor, annotated with the image's name twice:
//                        io.containerd.image.name (the whole reference, which containerd
//                        names the image by) and org.opencontainers.image.ref.name (the tag)
//   blobs/sha256/<hex>   the config, the manifest and the gzip'd layer, each named by the
//                        SHA-256 of its bytes
// The config's rootfs.diff_ids holds the digest of the uncompressed layer. Everything is
// reproducible: the same definition gives the same bytes (tar entries are dated kTarMtime,
// gzip carries no time, JSON keys keep one order).
//
// Image names are full references with a registry host and a tag
// ("hami.local/sim/pause:1"): containerd's CRI plugin normalizes a short name ("pause:1") to
// docker.io/library/pause:1, which would never match what was imported.
//
// Thread safety: pure functions over their arguments.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "common/result.h"

namespace hami::sim::oci {

inline constexpr char kPauseImage[] = "hami.local/sim/pause:1";
inline constexpr char kBaseImage[] = "hami.local/sim/base:1";

struct LayerEntry {
  enum class Kind { kDirectory, kFile, kSymlink };
  Kind kind = Kind::kDirectory;
  std::string path;  // relative: "usr/bin"
  mode_t mode = 0755;
  std::string data;  // a file's content, a symbolic link's target
};

struct ImageDefinition {
  std::string name;  // "registry.host/path:tag" (see above)
  std::vector<std::string> entrypoint;
  std::vector<std::string> cmd;
  std::vector<std::string> env;  // "KEY=VALUE"
  std::string working_dir = "/";
  std::vector<LayerEntry> layer;  // in order; parents before what they hold
};

// A built image: the tarball and the digests that name its parts ("sha256:<hex>").
struct ImageLayout {
  std::string tarball;
  std::string manifest_digest;
  std::string config_digest;
  std::string layer_digest;  // of the gzip'd layer, as stored
  std::string diff_id;       // of the uncompressed layer tar
};

// The pieces of a reference "host/path:tag". kInvalidArgument, naming the reference, when it
// has no host with a '.' (or "localhost"), no path, no tag, upper-case letters or characters
// outside [a-z0-9._/:-].
struct ImageReference {
  std::string repository;  // "hami.local/sim/pause"
  std::string tag;         // "1"
};
Result<ImageReference> ParseImageReference(const std::string& name);

// The architecture name OCI uses for this build's target ("amd64", "arm64").
const char* OciArchitecture();

// Builds the tarball. Errors name the image and the entry at fault (a bad path, a reference
// that does not parse, text that is not UTF-8).
Result<ImageLayout> BuildImageLayout(const ImageDefinition& image);

// Builds the tarball and writes it to `path` (through a temporary file and a rename).
Status WriteImageLayout(const ImageDefinition& image, const std::string& path);

// The sandbox ("pause") image: the static program at `pause_program` as /pause, its
// entrypoint. kNotFound / kIo naming the program when it cannot be read.
Result<ImageDefinition> PauseImage(const std::string& pause_program,
                                   const std::string& name = kPauseImage);

// The base image for pods whose containers bind the host's /usr read-only: a usr-merged root
// (bin, lib, lib64 and sbin are links into usr/), empty usr/{bin,sbin,lib,lib64,libexec,share}
// as mount points, /etc/passwd and /etc/group (root and nobody), /root, /tmp (01777). PATH is
// set; the default command is /bin/sh.
ImageDefinition BaseImage(const std::string& name = kBaseImage);

}  // namespace hami::sim::oci
