// The images as independent readers see them: Python's tarfile and gzip modules, GNU tar,
// gzip and sha256sum; the JSON documents parsed from the files tar extracted.
#include "sim/oci/image.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/syscall.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "sim/oci/tar.h"
#include "support/subprocess.h"

namespace hami::sim::oci {
namespace {

using nlohmann::json;

// Runs argv (an absolute program path) to its end; its standard output. Fails the test when
// it does not exit 0.
std::string RunOk(const std::vector<std::string>& argv) {
  testing::Subprocess p(argv, {});
  std::string out = p.ReadAll(60000);
  EXPECT_EQ(p.Wait(60000), 0) << argv[0] << " " << (argv.size() > 1 ? argv[1] : "");
  return out;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Lists a tarball with Python's tarfile: every member of the archive and, for each member
// that is itself a gzip'd tar (a layer), its members. Regular files' contents are included
// when they are text of at most 200 bytes.
constexpr char kTarfileLister[] = R"PY(
import gzip, io, json, sys, tarfile
def members(t):
    out = []
    for m in t.getmembers():
        e = {"name": m.name, "type": m.type.decode(), "mode": m.mode, "size": m.size,
             "linkname": m.linkname, "uid": m.uid, "gid": m.gid, "uname": m.uname,
             "mtime": m.mtime}
        if m.isfile() and m.size <= 200:
            try:
                e["text"] = t.extractfile(m).read().decode()
            except UnicodeDecodeError:
                pass
        out.append(e)
    return out
with tarfile.open(sys.argv[1], "r:") as outer:
    result = {"members": members(outer), "layers": {}}
    for m in outer.getmembers():
        if not m.isfile():
            continue
        data = outer.extractfile(m).read()
        if data[:2] == b"\x1f\x8b":
            with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data)), mode="r:") as layer:
                result["layers"][m.name] = members(layer)
print(json.dumps(result))
)PY";

json ListWithPython(const std::string& tarball) {
  return json::parse(RunOk({"/usr/bin/python3", "-c", kTarfileLister, tarball}));
}

class ImageLayoutTest : public ::testing::Test {
 protected:
  TempDir dir_{"hami-oci-test"};
};

TEST_F(ImageLayoutTest, BaseImageReadsBackWithPythonTarfileEntryByEntry) {
  ASSERT_TRUE(dir_.ok());
  const std::string path = dir_.File("base.tar");
  ASSERT_TRUE(WriteImageLayout(BaseImage(), path).ok());
  const ImageLayout built = *BuildImageLayout(BaseImage());
  const json listed = ListWithPython(path);

  const std::string cfg = "blobs/sha256/" + built.config_digest.substr(7);
  const std::string man = "blobs/sha256/" + built.manifest_digest.substr(7);
  const std::string lay = "blobs/sha256/" + built.layer_digest.substr(7);
  std::vector<std::string> names;
  for (const json& m : listed["members"]) {
    names.push_back(m["name"]);
    EXPECT_EQ(m["uid"], 0);
    EXPECT_EQ(m["gid"], 0);
    EXPECT_EQ(m["uname"], "root");
    EXPECT_EQ(m["mode"], m["type"] == "5" ? 0755 : 0644) << m["name"];
  }
  EXPECT_EQ(names, (std::vector<std::string>{"oci-layout", "index.json", "blobs", "blobs/sha256",
                                             cfg, man, lay}));
  EXPECT_EQ(listed["members"][0]["text"], R"({"imageLayoutVersion":"1.0.0"})");

  ASSERT_EQ(listed["layers"].size(), 1u) << "one gzip'd layer";
  const json& layer = listed["layers"][lay];
  struct Want {
    const char* name;
    const char* type;  // tarfile's type flag: 0 file, 2 symlink, 5 directory
    int mode;
    const char* link;
  };
  const std::vector<Want> want = {
      {"etc", "5", 0755, ""},
      {"etc/passwd", "0", 0644, ""},
      {"etc/group", "0", 0644, ""},
      {"root", "5", 0700, ""},
      {"tmp", "5", 01777, ""},
      {"usr", "5", 0755, ""},
      {"usr/bin", "5", 0755, ""},
      {"usr/sbin", "5", 0755, ""},
      {"usr/lib", "5", 0755, ""},
      {"usr/lib64", "5", 0755, ""},
      {"usr/libexec", "5", 0755, ""},
      {"usr/share", "5", 0755, ""},
      {"bin", "2", 0777, "usr/bin"},
      {"lib", "2", 0777, "usr/lib"},
      {"lib64", "2", 0777, "usr/lib64"},
      {"sbin", "2", 0777, "usr/sbin"},
  };
  ASSERT_EQ(layer.size(), want.size()) << layer.dump(1);
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE(want[i].name);
    EXPECT_EQ(layer[i]["name"], want[i].name);
    EXPECT_EQ(layer[i]["type"], want[i].type);
    EXPECT_EQ(layer[i]["mode"], want[i].mode);
    EXPECT_EQ(layer[i]["linkname"], want[i].link);
    EXPECT_EQ(layer[i]["mtime"], kTarMtime);
  }
  EXPECT_EQ(layer[1]["text"],
            "root:x:0:0:root:/root:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n");
  EXPECT_EQ(layer[2]["text"], "root:x:0:\nnogroup:x:65534:\n");
}

TEST_F(ImageLayoutTest, GnuTarExtractsItAndEveryBlobIsNamedBySha256sumOfItsBytes) {
  ASSERT_TRUE(dir_.ok());
  const std::string path = dir_.File("base.tar");
  ASSERT_TRUE(WriteImageLayout(BaseImage(), path).ok());
  EXPECT_EQ(
      RunOk({"/usr/bin/tar", "-tf", path}),
      "oci-layout\nindex.json\nblobs/\nblobs/sha256/\n" + [&] {
        const ImageLayout b = *BuildImageLayout(BaseImage());
        std::string s;
        for (const std::string* d : {&b.config_digest, &b.manifest_digest, &b.layer_digest}) {
          s += "blobs/sha256/" + d->substr(7) + "\n";
        }
        return s;
      }());
  const std::string x = dir_.File("x");
  RunOk({"/usr/bin/mkdir", x});
  RunOk({"/usr/bin/tar", "-xf", path, "-C", x});

  // sha256sum prints "<hex>  <file>"; each file is named by its own digest.
  std::istringstream sums(RunOk({"/bin/sh", "-c", "cd " + x + " && sha256sum blobs/sha256/*"}));
  int blobs = 0;
  for (std::string line; std::getline(sums, line); ++blobs) {
    const std::string hex = line.substr(0, 64);
    EXPECT_EQ(line.substr(64), "  blobs/sha256/" + hex);
  }
  EXPECT_EQ(blobs, 3);

  // index.json -> manifest -> config and layer, field by field.
  const json index = json::parse(ReadFile(x + "/index.json"));
  EXPECT_EQ(index["schemaVersion"], 2);
  EXPECT_EQ(index["mediaType"], "application/vnd.oci.image.index.v1+json");
  ASSERT_EQ(index["manifests"].size(), 1u);
  const json& entry = index["manifests"][0];
  EXPECT_EQ(entry["mediaType"], "application/vnd.oci.image.manifest.v1+json");
  EXPECT_EQ(entry["annotations"]["io.containerd.image.name"], "hami.local/sim/base:1");
  EXPECT_EQ(entry["annotations"]["org.opencontainers.image.ref.name"], "1");
  EXPECT_EQ(entry["platform"]["os"], "linux");
  EXPECT_EQ(entry["platform"]["architecture"], OciArchitecture());
  auto blob = [&](const json& descriptor) {
    const std::string digest = descriptor["digest"];
    EXPECT_EQ(digest.substr(0, 7), "sha256:");
    const std::string file = x + "/blobs/sha256/" + digest.substr(7);
    const std::string bytes = ReadFile(file);
    EXPECT_EQ(descriptor["size"], bytes.size()) << digest;
    return file;
  };
  const json manifest = json::parse(ReadFile(blob(entry)));
  EXPECT_EQ(manifest["schemaVersion"], 2);
  EXPECT_EQ(manifest["mediaType"], "application/vnd.oci.image.manifest.v1+json");
  EXPECT_EQ(manifest["config"]["mediaType"], "application/vnd.oci.image.config.v1+json");
  ASSERT_EQ(manifest["layers"].size(), 1u);
  EXPECT_EQ(manifest["layers"][0]["mediaType"], "application/vnd.oci.image.layer.v1.tar+gzip");
  const json config = json::parse(ReadFile(blob(manifest["config"])));
  const std::string layer_file = blob(manifest["layers"][0]);
  EXPECT_EQ(config["os"], "linux");
  EXPECT_EQ(config["architecture"], OciArchitecture());
  EXPECT_EQ(config["rootfs"]["type"], "layers");
  ASSERT_EQ(config["rootfs"]["diff_ids"].size(), 1u);
  // diff_ids: the digest of the uncompressed layer, as gzip -dc | sha256sum sees it.
  const std::string diff = RunOk({"/bin/sh", "-c", "gzip -dc " + layer_file + " | sha256sum"});
  EXPECT_EQ(config["rootfs"]["diff_ids"][0], "sha256:" + diff.substr(0, 64));
  EXPECT_EQ(config["config"]["Cmd"], json::array({"/bin/sh"}));
  EXPECT_EQ(config["config"]["Env"],
            json::array({"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}));
  EXPECT_EQ(config["config"]["WorkingDir"], "/");
  EXPECT_FALSE(config["config"].contains("Entrypoint"));
}

TEST_F(ImageLayoutTest, SameDefinitionGivesTheSameBytes) {
  const ImageLayout a = *BuildImageLayout(BaseImage());
  const ImageLayout b = *BuildImageLayout(BaseImage());
  EXPECT_EQ(a.tarball, b.tarball);
  EXPECT_EQ(a.manifest_digest, b.manifest_digest);
}

TEST_F(ImageLayoutTest, PauseImageHoldsTheStaticProgramAsItsEntrypoint) {
  ASSERT_TRUE(dir_.ok());
  const std::string path = dir_.File("pause.tar");
  Result<ImageDefinition> pause = PauseImage(HAMI_SIM_PAUSE);
  ASSERT_TRUE(pause.ok()) << pause.error().message();
  ASSERT_TRUE(WriteImageLayout(*pause, path).ok());
  const json listed = ListWithPython(path);
  ASSERT_EQ(listed["layers"].size(), 1u);
  const json& layer = listed["layers"].begin().value();
  ASSERT_EQ(layer.size(), 1u);
  EXPECT_EQ(layer[0]["name"], "pause");
  EXPECT_EQ(layer[0]["type"], "0");
  EXPECT_EQ(layer[0]["mode"], 0755);
  EXPECT_EQ(layer[0]["size"], ReadFile(HAMI_SIM_PAUSE).size());

  const ImageLayout built = *BuildImageLayout(*pause);
  const std::string x = dir_.File("x");
  RunOk({"/usr/bin/mkdir", x});
  RunOk({"/usr/bin/tar", "-xf", path, "-C", x});
  const json config = json::parse(ReadFile(x + "/blobs/sha256/" + built.config_digest.substr(7)));
  EXPECT_EQ(config["config"]["Entrypoint"], json::array({"/pause"}));
  const json index = json::parse(ReadFile(x + "/index.json"));
  EXPECT_EQ(index["manifests"][0]["annotations"]["io.containerd.image.name"],
            "hami.local/sim/pause:1");
}

TEST(PauseProgram, IsStaticAndExitsZeroOnSigtermAndSigint) {
  // No program interpreter: the image holds no loader.
  const std::string headers = RunOk({"/usr/bin/readelf", "-l", HAMI_SIM_PAUSE});
  EXPECT_EQ(headers.find("INTERP"), std::string::npos) << headers;
  for (int sig : {SIGTERM, SIGINT}) {
    testing::Subprocess p({HAMI_SIM_PAUSE}, {});
    // A signal that arrives before pause has blocked it ends the process by its default
    // action (not exit 0), and nothing announces that moment: poll /proc until the program
    // waits in rt_sigtimedwait (sigwaitinfo), its mask in place.
    ASSERT_TRUE(testing::PollUntil(
        [&] {
          std::optional<testing::BlockedThread> t = testing::ReadBlockedThread(p.pid(), p.pid());
          return t && t->syscall == SYS_rt_sigtimedwait;
        },
        10000));
    p.Kill(sig);
    EXPECT_EQ(p.Wait(10000), 0) << "signal " << sig;
  }
  testing::Subprocess args({HAMI_SIM_PAUSE, "extra"}, {});
  EXPECT_EQ(args.Wait(10000), 2);
}

TEST(ImageReference, RefusesNamesContainerdWouldNotKeepAsWritten) {
  for (const char* name : {"pause:1", "Hami.local/x:1", "hami.local/x", "hami.local/x:",
                           "hami.local/:1", "hami.local//x:1", "hami.local/x y:1", "/x:1"}) {
    Result<ImageReference> r = ParseImageReference(name);
    ASSERT_FALSE(r.ok()) << name;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find(std::string("'") + name + "'"), std::string::npos)
        << r.error().message();
  }
  const ImageReference ok = *ParseImageReference("localhost/a/b-c_d.e:v1.2");
  EXPECT_EQ(ok.repository, "localhost/a/b-c_d.e");
  EXPECT_EQ(ok.tag, "v1.2");
  ImageDefinition bad = BaseImage("pause:1");
  Result<ImageLayout> built = BuildImageLayout(bad);
  ASSERT_FALSE(built.ok());
  EXPECT_NE(built.error().message().find("'pause:1'"), std::string::npos);
}

TEST(PauseImage, NamesAProgramItCannotRead) {
  Result<ImageDefinition> r = PauseImage("/nonexistent/pause");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message().find("/nonexistent/pause"), std::string::npos)
      << r.error().message();
}

}  // namespace
}  // namespace hami::sim::oci
