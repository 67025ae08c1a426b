#include "sim/oci/image.h"

#include <fcntl.h>
#include <stdio.h>

#include <nlohmann/json.hpp>

#include "common/file.h"
#include "sim/oci/blob.h"
#include "sim/oci/tar.h"

namespace hami::sim::oci {

namespace {

using Json = nlohmann::ordered_json;

constexpr char kManifestType[] = "application/vnd.oci.image.manifest.v1+json";
constexpr char kIndexType[] = "application/vnd.oci.image.index.v1+json";
constexpr char kConfigType[] = "application/vnd.oci.image.config.v1+json";
constexpr char kLayerType[] = "application/vnd.oci.image.layer.v1.tar+gzip";

// JSON text; the library throws on text that is not UTF-8, which becomes an error here.
Result<std::string> Dump(const Json& j, const std::string& what) {
  try {
    return j.dump();
  } catch (const nlohmann::json::exception& e) {
    return Error(ErrorCode::kInvalidArgument, what + ": " + e.what());
  }
}

Json Descriptor(const char* media_type, const std::string& digest, size_t size) {
  return Json{{"mediaType", media_type}, {"digest", digest}, {"size", size}};
}

Status AddLayerEntry(TarWriter& tar, const LayerEntry& e) {
  switch (e.kind) {
    case LayerEntry::Kind::kDirectory:
      return tar.AddDirectory(e.path, e.mode);
    case LayerEntry::Kind::kFile:
      return tar.AddFile(e.path, e.mode, e.data);
    case LayerEntry::Kind::kSymlink:
      return tar.AddSymlink(e.path, e.data);
  }
  return Error(ErrorCode::kInternal, "unknown layer entry kind");
}

bool IsRefChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-' ||
         c == '/' || c == ':';
}

}  // namespace

Result<ImageReference> ParseImageReference(const std::string& name) {
  auto bad = [&](const char* why) {
    return Error(ErrorCode::kInvalidArgument,
                 "image reference '" + name + "': " + why +
                     " (expected host/path:tag, e.g. hami.local/sim/base:1)");
  };
  for (char c : name) {
    if (!IsRefChar(c)) return bad("a character outside [a-z0-9._/:-]");
  }
  const size_t slash = name.find('/');
  if (slash == std::string::npos || slash == 0) return bad("no registry host");
  const std::string host = name.substr(0, slash);
  if (host.find('.') == std::string::npos && host != "localhost") {
    return bad(
        "the first component is not a host (no '.'), so containerd would read it as "
        "a docker.io path");
  }
  const size_t colon = name.rfind(':');
  if (colon == std::string::npos || colon < slash) return bad("no tag");
  ImageReference ref{name.substr(0, colon), name.substr(colon + 1)};
  if (ref.tag.empty() || ref.repository.size() <= slash + 1) return bad("empty path or tag");
  if (ref.repository.find("//") != std::string::npos || ref.repository.back() == '/') {
    return bad("an empty path component");
  }
  return ref;
}

const char* OciArchitecture() {
#if defined(__x86_64__)
  return "amd64";
#elif defined(__aarch64__)
  return "arm64";
#else
#error "OciArchitecture: add this target's OCI architecture name"
#endif
}

Result<ImageLayout> BuildImageLayout(const ImageDefinition& image) {
  const std::string what = "image " + image.name;
  const ImageReference ref = HAMI_TRY(ParseImageReference(image.name));

  TarWriter layer_tar;
  for (const LayerEntry& e : image.layer) {
    if (Status s = AddLayerEntry(layer_tar, e); !s.ok()) {
      return std::move(s).error().Context(what + ": layer");
    }
  }
  const std::string layer = layer_tar.Finish();
  ImageLayout out;
  out.diff_id = HAMI_TRY(Sha256Digest(layer));
  const std::string layer_gz = HAMI_TRY(Gzip(layer));
  out.layer_digest = HAMI_TRY(Sha256Digest(layer_gz));

  Json run_config = Json::object();
  if (!image.env.empty()) run_config["Env"] = image.env;
  if (!image.entrypoint.empty()) run_config["Entrypoint"] = image.entrypoint;
  if (!image.cmd.empty()) run_config["Cmd"] = image.cmd;
  run_config["WorkingDir"] = image.working_dir;
  const Json config = {
      {"architecture", OciArchitecture()},
      {"os", "linux"},
      {"config", run_config},
      {"rootfs", {{"type", "layers"}, {"diff_ids", Json::array({out.diff_id})}}},
  };
  const std::string config_text = HAMI_TRY(Dump(config, what + ": config"));
  out.config_digest = HAMI_TRY(Sha256Digest(config_text));

  const Json manifest = {
      {"schemaVersion", 2},
      {"mediaType", kManifestType},
      {"config", Descriptor(kConfigType, out.config_digest, config_text.size())},
      {"layers", Json::array({Descriptor(kLayerType, out.layer_digest, layer_gz.size())})},
  };
  const std::string manifest_text = HAMI_TRY(Dump(manifest, what + ": manifest"));
  out.manifest_digest = HAMI_TRY(Sha256Digest(manifest_text));

  Json entry = Descriptor(kManifestType, out.manifest_digest, manifest_text.size());
  entry["platform"] = {{"architecture", OciArchitecture()}, {"os", "linux"}};
  entry["annotations"] = {{"io.containerd.image.name", image.name},
                          {"org.opencontainers.image.ref.name", ref.tag}};
  const Json index = {
      {"schemaVersion", 2},
      {"mediaType", kIndexType},
      {"manifests", Json::array({entry})},
  };
  const std::string index_text = HAMI_TRY(Dump(index, what + ": index"));

  // "sha256:<hex>" -> "blobs/sha256/<hex>"
  auto blob_path = [](const std::string& digest) { return "blobs/sha256/" + digest.substr(7); };
  TarWriter outer;
  HAMI_TRY(outer.AddFile("oci-layout", 0644, R"({"imageLayoutVersion":"1.0.0"})"));
  HAMI_TRY(outer.AddFile("index.json", 0644, index_text));
  HAMI_TRY(outer.AddDirectory("blobs", 0755));
  HAMI_TRY(outer.AddDirectory("blobs/sha256", 0755));
  HAMI_TRY(outer.AddFile(blob_path(out.config_digest), 0644, config_text));
  HAMI_TRY(outer.AddFile(blob_path(out.manifest_digest), 0644, manifest_text));
  HAMI_TRY(outer.AddFile(blob_path(out.layer_digest), 0644, layer_gz));
  out.tarball = outer.Finish();
  return out;
}

Status WriteImageLayout(const ImageDefinition& image, const std::string& path) {
  const ImageLayout layout = HAMI_TRY(BuildImageLayout(image));
  const std::string tmp = path + ".tmp";
  UniqueFd fd = HAMI_TRY(OpenRegularFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  if (Status s = WriteAll(fd.get(), layout.tarball); !s.ok()) {
    ::unlink(tmp.c_str());
    return std::move(s).error().Context("writing image " + image.name + " to " + tmp);
  }
  fd.Reset();
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return Error(ErrorCode::kIo, "renaming " + tmp + " to " + path + ": " + strerror(err), err);
  }
  return OkStatus();
}

Result<ImageDefinition> PauseImage(const std::string& pause_program, const std::string& name) {
  std::string program = HAMI_TRY(ReadFileToString(pause_program, size_t{64} << 20));
  ImageDefinition image;
  image.name = name;
  image.entrypoint = {"/pause"};
  image.layer.push_back({LayerEntry::Kind::kFile, "pause", 0755, std::move(program)});
  return image;
}

ImageDefinition BaseImage(const std::string& name) {
  using K = LayerEntry::Kind;
  ImageDefinition image;
  image.name = name;
  image.cmd = {"/bin/sh"};
  image.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
  image.layer = {
      {K::kDirectory, "etc", 0755, ""},
      {K::kFile, "etc/passwd", 0644,
       "root:x:0:0:root:/root:/bin/sh\n"
       "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
      {K::kFile, "etc/group", 0644, "root:x:0:\nnogroup:x:65534:\n"},
      {K::kDirectory, "root", 0700, ""},
      {K::kDirectory, "tmp", 01777, ""},
      {K::kDirectory, "usr", 0755, ""},
      {K::kDirectory, "usr/bin", 0755, ""},
      {K::kDirectory, "usr/sbin", 0755, ""},
      {K::kDirectory, "usr/lib", 0755, ""},
      {K::kDirectory, "usr/lib64", 0755, ""},
      {K::kDirectory, "usr/libexec", 0755, ""},
      {K::kDirectory, "usr/share", 0755, ""},
      {K::kSymlink, "bin", 0777, "usr/bin"},
      {K::kSymlink, "lib", 0777, "usr/lib"},
      {K::kSymlink, "lib64", 0777, "usr/lib64"},
      {K::kSymlink, "sbin", 0777, "usr/sbin"},
  };
  return image;
}

}  // namespace hami::sim::oci
