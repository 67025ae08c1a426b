#include "sim/kubelet/runtime.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace hami::sim::runtime {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;
using ::testing::UnorderedElementsAreArray;

#define SKIP_UNLESS_ROOT() \
  if (geteuid() != 0) GTEST_SKIP() << "needs root: mount namespaces, overlayfs and pivot_root"

const Env kImageEnv = {{"PATH", "/usr/local/bin:/usr/bin:/bin"}, {"HOME", "/root"}};

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

void WriteText(const std::string& path, const std::string& text) {
  UniqueFd fd(open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  ASSERT_TRUE(fd.valid()) << path;
  ASSERT_EQ(write(fd.get(), text.data(), text.size()), ssize_t(text.size()));
}

std::string ReadText(const std::string& path) {
  auto text = ReadFileToString(path, 1 << 20);
  return text.ok() ? *text : "<unreadable " + path + ">";
}

// A file the container's output goes to, read back after it ends.
class Output {
 public:
  explicit Output(const TempDir& dir, const std::string& name = "out") : path_(dir.File(name)) {
    fd_.Reset(open(path_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  }
  int fd() const { return fd_.get(); }
  std::string Text() const { return ReadText(path_); }

 private:
  std::string path_;
  UniqueFd fd_;
};

// A container spec running `script` with /bin/sh, its output (both streams) to `out`.
ContainerSpec Shell(const std::string& script, const Output& out) {
  ContainerSpec spec;
  spec.command = {"/bin/sh", "-c", script};
  spec.image_env = kImageEnv;
  spec.stdout_fd = out.fd();
  spec.stderr_fd = out.fd();
  return spec;
}

TEST(SimRuntime, MountsAreAppliedAndReadOnlyIsHonoured) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(mkdir(dir.File("rw").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(dir.File("ro").c_str(), 0755), 0);
  WriteText(dir.File("ro/given"), "from the host\n");
  Output out(dir);
  ContainerSpec spec = Shell(
      "echo written > /data/rw/file && cat /data/ro/given && "
      "if touch /data/ro/new 2>/dev/null; then echo ro-writable; else echo ro-refused; fi; "
      "touch /data/ro/new",
      out);
  spec.response.mounts = {{"/data/rw", dir.File("rw"), false}, {"/data/ro", dir.File("ro"), true}};
  auto status = RunContainer(spec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 1);  // the last touch fails
  std::string text = out.Text();
  EXPECT_THAT(text, HasSubstr("from the host\nro-refused\n"));
  EXPECT_THAT(text, HasSubstr("Read-only file system"));
  EXPECT_EQ(ReadText(dir.File("rw/file")), "written\n");
  EXPECT_FALSE(Exists(dir.File("ro/new")));
}

TEST(SimRuntime, ANestedMountListedAfterItsParentIsVisible) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(mkdir(dir.File("locks").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(dir.File("broker").c_str(), 0755), 0);
  WriteText(dir.File("broker/marker"), "broker dir\n");
  Output out(dir);
  ContainerSpec spec = Shell(
      "cat /tmp/vgpulock/hostpid/marker; "
      "if touch /tmp/vgpulock/hostpid/x 2>/dev/null; then echo nested-writable; "
      "else echo nested-ro; fi; touch /tmp/vgpulock/parent-rw && echo parent-rw",
      out);
  spec.response.mounts = {{"/tmp/vgpulock", dir.File("locks"), false},
                          {"/tmp/vgpulock/hostpid", dir.File("broker"), true}};
  auto status = RunContainer(spec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 0) << out.Text();
  EXPECT_EQ(out.Text(), "broker dir\nnested-ro\nparent-rw\n");
  EXPECT_TRUE(Exists(dir.File("locks/parent-rw")));
}

TEST(SimRuntime, ANestedMountListedBeforeItsParentIsHiddenByIt) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(mkdir(dir.File("locks").c_str(), 0755), 0);
  ASSERT_EQ(mkdir(dir.File("broker").c_str(), 0755), 0);
  WriteText(dir.File("broker/marker"), "broker dir\n");
  Output out(dir);
  ContainerSpec spec =
      Shell("if [ -e /tmp/vgpulock/hostpid/marker ]; then echo seen; else echo hidden; fi", out);
  spec.response.mounts = {{"/tmp/vgpulock/hostpid", dir.File("broker"), true},
                          {"/tmp/vgpulock", dir.File("locks"), false}};
  auto status = RunContainer(spec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(out.Text(), "hidden\n");
}

TEST(SimRuntime, TheEnvironmentIsExactlyTheImagesPlusTheResponses) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  Output out(dir);
  ContainerSpec spec;
  spec.command = {"env"};  // found in the image's PATH inside the container
  spec.image_env = {{"PATH", "/usr/bin:/bin"}, {"SHARED", "image"}, {"IMAGE_ONLY", "1"}};
  spec.response.envs = {{"SHARED", "response"}, {"CUDA_DEVICE_MEMORY_LIMIT_0", "1024m"}};
  spec.stdout_fd = out.fd();
  ASSERT_EQ(setenv("HAMI_RT_TEST_CALLER_ONLY", "1", 1), 0);
  auto status = RunContainer(spec);
  unsetenv("HAMI_RT_TEST_CALLER_ONLY");
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 0);
  std::vector<std::string> lines;
  std::string text = out.Text();
  for (size_t start = 0, nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1) {
    std::string line = text.substr(start, nl - start);
    // A sanitizer build's options (ASAN_OPTIONS, ...) are the one thing passed from the
    // caller: they belong to whoever runs the stand-in (PlanCommand).
    const std::string name = line.substr(0, line.find('='));
    if (name == "ASAN_OPTIONS" || name == "UBSAN_OPTIONS" || name == "TSAN_OPTIONS" ||
        name == "LSAN_OPTIONS") {
      continue;
    }
    lines.push_back(line);
  }
  EXPECT_THAT(lines,
              UnorderedElementsAreArray({"PATH=/usr/bin:/bin", "SHARED=response", "IMAGE_ONLY=1",
                                         "CUDA_DEVICE_MEMORY_LIMIT_0=1024m"}));
}

TEST(SimRuntime, AMissingHostPathNamesItsMount) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  Output out(dir);
  ContainerSpec spec = Shell("true", out);
  spec.response.mounts = {{"/tmp/vgpulock", dir.path(), false},
                          {"/tmp/vgpulock/hostpid", dir.File("absent"), true}};
  auto status = RunContainer(spec);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(status.error().message(),
              HasSubstr("mount 1 (" + dir.File("absent") + " on /tmp/vgpulock/hostpid, ro)"));
  EXPECT_THAT(status.error().message(), HasSubstr("No such file or directory"));
}

TEST(SimRuntime, BadSpecsAreRefusedNamingTheEntry) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  Output out(dir);
  ContainerSpec relative = Shell("true", out);
  relative.response.mounts = {{"tmp/x", dir.path(), false}};
  auto a = RunContainer(relative);
  ASSERT_FALSE(a.ok());
  EXPECT_THAT(a.error().message(), HasSubstr("mount 0"));
  EXPECT_THAT(a.error().message(), HasSubstr("'tmp/x' is not absolute"));

  ContainerSpec dotdot = Shell("true", out);
  dotdot.host_mounts = {{"/a/../etc", dir.path(), false}};
  auto b = RunContainer(dotdot);
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(b.error().message(), HasSubstr("host mount 0"));

  ContainerSpec empty = Shell("true", out);
  empty.command.clear();
  auto c = RunContainer(empty);
  ASSERT_FALSE(c.ok());
  EXPECT_THAT(c.error().message(), HasSubstr("no command"));

  ContainerSpec lib = Shell("true", out);
  lib.driver_libs = {dir.path()};
  auto d = RunContainer(lib);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.error().message(), HasSubstr("is not a regular file"));
}

TEST(SimRuntime, AProgramThatCannotBeExecutedIsReported) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  ContainerSpec spec;
  spec.command = {"/no/such/program"};
  auto status = RunContainer(spec);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(status.error().message(),
              HasSubstr("executing the command '/no/such/program': No such file or directory"));

  Output out(dir);
  ContainerSpec bad_dir = Shell("true", out);
  bad_dir.working_dir = "/no/such/dir";
  auto cd = RunContainer(bad_dir);
  ASSERT_FALSE(cd.ok());
  EXPECT_THAT(cd.error().message(), HasSubstr("changing to the working directory"));
}

TEST(SimRuntime, NothingIsCreatedOnTheHost) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  WriteText(dir.File("limits"), "CUDA_DEVICE_MEMORY_LIMIT=1g\n");
  WriteText(dir.File("preload"), "/usr/local/vgpu/libvgpu.so\n");
  const std::string deep = "/hami-rt-test-" + std::to_string(getpid());
  const bool override_env_before = Exists("/overrideEnv");
  ASSERT_FALSE(Exists("/etc/ld.so.preload")) << "the host has an /etc/ld.so.preload";
  ASSERT_FALSE(Exists(deep));
  Output out(dir);
  ContainerSpec spec =
      Shell("cat /overrideEnv /etc/ld.so.preload && ls " + deep +
                "/a/b && echo x > /etc/hami-rt-written && echo y > /hami-rt-written-" +
                std::to_string(getpid()),
            out);
  spec.response.mounts = {{"/overrideEnv", dir.File("limits"), true},
                          {"/etc/ld.so.preload", dir.File("preload"), true},
                          {deep + "/a/b", dir.path(), false}};
  auto status = RunContainer(spec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 0) << out.Text();
  EXPECT_THAT(out.Text(), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT=1g\n/usr/local/vgpu/libvgpu.so\n"));
  EXPECT_FALSE(Exists("/etc/ld.so.preload"));
  EXPECT_FALSE(Exists(deep));
  EXPECT_FALSE(Exists("/etc/hami-rt-written"));
  EXPECT_FALSE(Exists("/hami-rt-written-" + std::to_string(getpid())));
  if (!override_env_before) {
    EXPECT_FALSE(Exists("/overrideEnv"));
  }
}

TEST(SimRuntime, TheContainerHasItsOwnTmpAndPidNamespace) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  Output out(dir);
  // This test's own process is not in the container's /proc.
  ContainerSpec spec = Shell(
      "echo $$; ls -A /tmp | wc -l; [ -e /proc/" + std::to_string(getpid()) + " ] || echo alone",
      out);
  auto status = RunContainer(spec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(out.Text(), "1\n0\nalone\n");
}

TEST(SimRuntime, WithTheHostPidNamespaceTheCommandKnowsItsHostPid) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  Output out(dir);
  int in[2];
  ASSERT_EQ(pipe2(in, O_CLOEXEC), 0);
  UniqueFd in_read(in[0]), in_write(in[1]);
  ContainerSpec spec = Shell("echo $$; read line", out);
  spec.pid_namespace = PidNamespace::kHost;
  spec.stdin_fd = in_read.get();
  auto c = StartContainer(spec);
  ASSERT_TRUE(c.ok()) << c.error().message();
  in_write.Reset();  // `read` ends at EOF
  auto status = (*c)->init().Wait();
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 1);  // read at EOF
  EXPECT_EQ(out.Text(), std::to_string((*c)->pid()) + "\n");
}

TEST(SimRuntime, ExitStatusAndSignalsComeBack) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  auto seven = RunContainer(Shell("exit 7", Output(dir)));
  ASSERT_TRUE(seven.ok()) << seven.error().message();
  EXPECT_EQ(*seven, 7);

  ContainerSpec spec;
  spec.command = {"sleep", "1000"};
  spec.image_env = kImageEnv;
  auto c = StartContainer(spec);
  ASSERT_TRUE(c.ok()) << c.error().message();
  ASSERT_TRUE((*c)->init().Kill(SIGKILL).ok());
  auto status = (*c)->init().Wait();
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 128 + SIGKILL);
  EXPECT_TRUE((*c)->init().Kill(SIGKILL).ok());  // ended: nothing to do
}

TEST(SimRuntime, ExecRunsASecondProcessInTheSameContainer) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  ASSERT_EQ(mkdir(dir.File("data").c_str(), 0755), 0);
  WriteText(dir.File("data/marker"), "mounted\n");
  ContainerSpec spec;
  spec.command = {"sleep", "1000"};
  spec.image_env = kImageEnv;
  spec.response.envs = {{"FROM_RESPONSE", "yes"}};
  spec.response.mounts = {{"/data", dir.File("data"), true}};
  auto c = StartContainer(spec);
  ASSERT_TRUE(c.ok()) << c.error().message();

  // The container's own /tmp: a file the first process cannot have, written by an exec.
  Output out(dir);
  ExecSpec exec;
  exec.command = {"/bin/sh", "-c",
                  "cat /data/marker; echo $FROM_RESPONSE; cat /proc/1/comm; echo t > /tmp/e"};
  exec.stdout_fd = out.fd();
  exec.stderr_fd = out.fd();
  auto status = (*c)->Exec(exec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 0) << out.Text();
  EXPECT_EQ(out.Text(), "mounted\nyes\nsleep\n");

  Output second(dir, "second");
  exec.command = {"cat", "/tmp/e"};
  exec.stdout_fd = second.fd();
  auto again = (*c)->Exec(exec);
  ASSERT_TRUE(again.ok()) << again.error().message();
  EXPECT_EQ(second.Text(), "t\n");
  EXPECT_FALSE(Exists("/tmp/e") && ReadText("/tmp/e") == "t\n");

  ASSERT_TRUE((*c)->init().Kill(SIGKILL).ok());
  ASSERT_TRUE((*c)->init().Wait().ok());
  auto late = (*c)->Exec(exec);
  ASSERT_FALSE(late.ok());
  EXPECT_THAT(late.error().message(), HasSubstr("has ended"));
}

TEST(SimRuntime, AProcessWithAnEmptyEnvironmentFindsTheInjectedDriverLibraries) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  ContainerSpec spec;
  spec.command = {"sleep", "1000"};
  spec.image_env = kImageEnv;
  spec.driver_libs = {HAMI_SIM_CUDA_LIB, HAMI_SIM_NVML_LIB};
  // The probe, from the build tree: bound in, since a build under /tmp is hidden by the
  // container's own /tmp.
  spec.host_mounts = {{HAMI_BUILD_DIR, HAMI_BUILD_DIR, true}};
  auto c = StartContainer(spec);
  ASSERT_TRUE(c.ok()) << c.error().message();

  Output listing(dir, "listing");
  ExecSpec ls;
  ls.command = {
      "/usr/bin/env", "-i", "/bin/sh", "-c",
      std::string("ls ") + kDriverLibDir + "/libcuda.so.1 " + kDriverLibDir + "/libnvidia-ml.so.1"};
  ls.stdout_fd = listing.fd();
  ls.stderr_fd = listing.fd();
  auto ls_status = (*c)->Exec(ls);
  ASSERT_TRUE(ls_status.ok()) << ls_status.error().message();
  EXPECT_EQ(*ls_status, 0) << listing.Text();

  // The loader itself finds them, with no variable at all.
  Output out(dir);
  ExecSpec probe;
  probe.command = {HAMI_RUNTIME_PROBE};
  probe.env = Env{};
  probe.stdout_fd = out.fd();
  probe.stderr_fd = out.fd();
  auto status = (*c)->Exec(probe);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(*status, 0) << out.Text();
  // The loader's default directory, or the same one through the /lib -> usr/lib link.
  EXPECT_THAT(out.Text(), MatchesRegex("libcuda.so.1 (/usr)?/lib/x86_64-linux-gnu/libcuda.so.1\n"
                                       "libnvidia-ml.so.1 (/usr)?/lib/x86_64-linux-gnu/"
                                       "libnvidia-ml.so.1\n"));
  // Injected into the container only.
  EXPECT_FALSE(Exists(std::string(kDriverLibDir) + "/libcuda.so.1") &&
               ReadText(std::string(kDriverLibDir) + "/libcuda.so.1") ==
                   ReadText(HAMI_SIM_CUDA_LIB));
}

TEST(SimRuntime, TheSimulatedGpuStateIsBoundAtItsDefaultPath) {
  SKIP_UNLESS_ROOT();
  TempDir dir("hami-rt");
  ASSERT_TRUE(dir.ok());
  WriteText(dir.File("state"), "state bytes\n");
  ASSERT_EQ(mkdir(dir.File("state.hostpid").c_str(), 0755), 0);
  Output out(dir);
  ContainerSpec spec =
      Shell(std::string("cat ") + kSimStatePath + "; ls -d " + kSimStatePath + ".hostpid", out);
  spec.sim_state = dir.File("state");
  auto status = RunContainer(spec);
  ASSERT_TRUE(status.ok()) << status.error().message();
  EXPECT_EQ(out.Text(), std::string("state bytes\n") + kSimStatePath + ".hostpid\n");
}

TEST(SimRuntime, RefusesWithoutRoot) {
  if (geteuid() == 0) GTEST_SKIP() << "runs as a non-root user only";
  ContainerSpec spec;
  spec.command = {"true"};
  auto status = RunContainer(spec);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code(), ErrorCode::kPermission);
  EXPECT_THAT(status.error().message(), HasSubstr("needs root"));
}

}  // namespace
}  // namespace hami::sim::runtime
