// A real containerd and runc driven through CRI as the kubelet drives them: a host-network pod
// whose container has its own PID namespace, the host's /usr read-only, a read-only file, a
// read-only directory nested in a writable one, variables, a CRI-format log and a cgroup under
// the node's relative parent; then nothing is left on the host.
#include "sim/cri/containerd.h"

#include <errno.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/temp_dir.h"
#include "sim/cri/host.h"
#include "sim/oci/image.h"
#include "support/subprocess.h"

namespace hami::sim::cri {
namespace {

namespace fs = std::filesystem;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

// Every path under /run/containerd (and itself), to compare before and after.
std::set<std::string> RunContainerdEntries() {
  std::set<std::string> out;
  std::error_code ec;
  if (!fs::exists("/run/containerd", ec)) return out;
  out.insert("/run/containerd");
  for (auto it = fs::recursive_directory_iterator("/run/containerd", ec);
       !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    out.insert(it->path().string());
  }
  return out;
}

// What is under /run/containerd now and was not in `before`, leaving out what another
// containerd of the machine (a test running beside this one) serves there: a socket some
// process has bound, and the directories that hold one.
std::vector<std::string> NewRunContainerdEntries(const std::set<std::string>& before) {
  std::string unix_sockets;
  std::ifstream net("/proc/net/unix");
  for (std::string line; std::getline(net, line);) {
    const size_t path = line.find(" /run/containerd/");
    if (path != std::string::npos) unix_sockets += line.substr(path + 1) + "\n";
  }
  std::vector<std::string> out;
  for (const std::string& e : RunContainerdEntries()) {
    if (before.contains(e)) continue;
    if (unix_sockets.find(e + (fs::is_directory(e) ? "/" : "\n")) != std::string::npos) continue;
    out.push_back(e);
  }
  return out;
}

double Ms(int64_t from_ns, int64_t to_ns) { return double(to_ns - from_ns) / 1e6; }

// One line of a CRI-format container log: "<RFC 3339 time> <stdout|stderr> <F|P> <text>".
struct LogLine {
  std::string time, stream, tag, text;
};
std::vector<LogLine> ReadCriLog(const std::string& path) {
  std::vector<LogLine> out;
  std::istringstream in(ReadFile(path));
  for (std::string line; std::getline(in, line);) {
    LogLine l;
    size_t a = line.find(' ');
    size_t b = a == std::string::npos ? a : line.find(' ', a + 1);
    size_t c = b == std::string::npos ? b : line.find(' ', b + 1);
    if (c == std::string::npos) {
      ADD_FAILURE() << "not a CRI log line: '" << line << "'";
      continue;
    }
    l.time = line.substr(0, a);
    l.stream = line.substr(a + 1, b - a - 1);
    l.tag = line.substr(b + 1, c - b - 1);
    l.text = line.substr(c + 1);
    out.push_back(l);
  }
  return out;
}

class ContainerdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) {
      GTEST_SKIP() << "needs root: containerd mounts filesystems and makes namespaces and cgroups";
    }
    ASSERT_TRUE(tmp_.ok());
    run_before_ = RunContainerdEntries();
    var_lib_existed_ = Exists("/var/lib/containerd");
    const std::string pause_tar = tmp_.File("pause.tar"), base_tar = tmp_.File("base.tar");
    Result<oci::ImageDefinition> pause = oci::PauseImage(HAMI_SIM_PAUSE);
    ASSERT_TRUE(pause.ok()) << pause.error().message();
    ASSERT_TRUE(oci::WriteImageLayout(*pause, pause_tar).ok());
    ASSERT_TRUE(oci::WriteImageLayout(oci::BaseImage(), base_tar).ok());

    ContainerdOptions options;
    options.dir = tmp_.File("node");
    options.cgroup_parent = cgroup_top_ + "/node-a";
    const int64_t t0 = MonotonicNs();
    Result<std::unique_ptr<Containerd>> started = Containerd::Start(options);
    ASSERT_TRUE(started.ok()) << started.error().message();
    node_ = std::move(started).value();
    const int64_t t1 = MonotonicNs();
    Status imported = node_->ImportImage(pause_tar, oci::kPauseImage);
    ASSERT_TRUE(imported.ok()) << imported.error().message();
    if (import_base_) {
      imported = node_->ImportImage(base_tar, oci::kBaseImage);
      ASSERT_TRUE(imported.ok()) << imported.error().message();
    }
    const int64_t t2 = MonotonicNs();
    std::printf(
        "timing: containerd start %.0f ms (exec to first CRI Version %lld ms), "
        "image imports %.0f ms\n",
        Ms(t0, t1), static_cast<long long>(node_->start_ms()), Ms(t1, t2));
    RecordProperty("containerd_start_ms", std::to_string(node_->start_ms()));
  }

  void TearDown() override {
    if (node_) {
      Status s = node_->Stop();
      EXPECT_TRUE(s.ok()) << s.error().message();
    }
  }

  // The sandbox config of a host-network pod, as the kubelet builds it, with its cgroup under
  // the node's parent and its log directory laid out as the kubelet lays it out.
  v1::PodSandboxConfig SandboxConfig(const std::string& name, const std::string& uid) {
    v1::PodSandboxConfig c;
    c.mutable_metadata()->set_name(name);
    c.mutable_metadata()->set_uid(uid);
    c.mutable_metadata()->set_namespace_("default");
    c.set_log_directory(tmp_.File("pods/default_" + name + "_" + uid));
    (*c.mutable_labels())["io.kubernetes.pod.name"] = name;
    c.mutable_linux()->set_cgroup_parent(node_->PodCgroupParent(uid));
    c.mutable_linux()->mutable_security_context()->mutable_namespace_options()->set_network(
        v1::NODE);
    return c;
  }

  // A container of the base image running `script` with /bin/sh, its own PID namespace and
  // the host's /usr read-only; its log at <log dir>/<name>/0.log.
  v1::ContainerConfig ShellContainer(const v1::PodSandboxConfig& sandbox, const std::string& name,
                                     const std::string& script) {
    v1::ContainerConfig c;
    c.mutable_metadata()->set_name(name);
    c.mutable_image()->set_image(oci::kBaseImage);
    c.add_command("/bin/sh");
    c.add_args("-c");
    c.add_args(script);
    c.set_log_path(name + "/0.log");
    // The kubelet makes the container's log directory before CreateContainer.
    fs::create_directories(sandbox.log_directory() + "/" + name);
    v1::Mount* usr = c.add_mounts();
    usr->set_container_path("/usr");
    usr->set_host_path("/usr");
    usr->set_readonly(true);
    v1::NamespaceOption* ns =
        c.mutable_linux()->mutable_security_context()->mutable_namespace_options();
    ns->set_network(v1::NODE);
    ns->set_pid(v1::CONTAINER);
    ns->set_ipc(v1::POD);
    return c;
  }

  // Polls ContainerStatus until the container has exited (no event reaches a CRI client).
  Result<v1::ContainerStatus> WaitExited(const std::string& id, int64_t timeout_ms = 30'000) {
    const int64_t deadline = MonotonicNs() + timeout_ms * 1'000'000;
    for (;;) {
      v1::ContainerStatusResponse r = HAMI_TRY(node_->client().ContainerStatus(id));
      if (r.status().state() == v1::CONTAINER_EXITED) return r.status();
      if (MonotonicNs() >= deadline) {
        return Error(ErrorCode::kTimeout, "container " + id + " did not exit");
      }
      SleepForNs(5'000'000);
    }
  }

  // What Stop must leave: no process, mount, cgroup or /run/containerd entry of ours.
  void ExpectNothingLeft(const std::vector<pid_t>& container_pids) {
    EXPECT_TRUE(ProcessesWithArgument(node_->paths().socket).empty())
        << "a process (containerd, a shim) still names " << node_->paths().socket;
    for (pid_t pid : container_pids) {
      EXPECT_NE(kill(pid, 0), 0) << "container process " << pid << " is still there";
    }
    Result<std::vector<std::string>> mounts = MountPointsUnder(tmp_.path());
    ASSERT_TRUE(mounts.ok()) << mounts.error().message();
    EXPECT_TRUE(mounts->empty()) << "still mounted: " << mounts->front();
    ASSERT_FALSE(node_->pod_cgroup_roots().empty());
    for (const CgroupDir& root : node_->pod_cgroup_roots()) {
      EXPECT_FALSE(Exists(root.dir)) << root.dir;
      const std::string top = root.dir.substr(0, root.dir.size() - std::string("/node-a").size());
      EXPECT_FALSE(Exists(top)) << top;
    }
    EXPECT_THAT(NewRunContainerdEntries(run_before_), ::testing::IsEmpty())
        << "left in /run/containerd";
    if (!var_lib_existed_) {
      EXPECT_FALSE(Exists("/var/lib/containerd"));
    }
    std::vector<std::string> left;
    for (const auto& e : fs::directory_iterator(node_->paths().dir)) {
      left.push_back(e.path().filename().string());
    }
    EXPECT_EQ(left, std::vector<std::string>{"containerd.log"});
  }

  TempDir tmp_{"hami-cri"};
  std::string cgroup_top_ = "hami-sim-test-" + std::to_string(getpid());
  bool import_base_ = true;
  std::set<std::string> run_before_;
  bool var_lib_existed_ = false;
  std::unique_ptr<Containerd> node_;
};

TEST_F(ContainerdTest,
       RunsAHostNetworkPodInItsOwnPidNamespaceWithTheKubeletsMountsThenLeavesNothing) {
  CriClient& cri = node_->client();
  Result<v1::VersionResponse> version = cri.Version(5000);
  ASSERT_TRUE(version.ok()) << version.error().message();
  EXPECT_EQ(version->runtime_name(), "containerd");
  EXPECT_EQ(version->runtime_api_version(), "v1");
  Result<v1::StatusResponse> status = cri.RuntimeStatus();
  ASSERT_TRUE(status.ok()) << status.error().message();
  bool runtime_ready = false;
  for (const v1::RuntimeCondition& c : status->status().conditions()) {
    if (c.type() == "RuntimeReady") runtime_ready = c.status();
  }
  EXPECT_TRUE(runtime_ready);
  Result<std::vector<v1::Image>> images = cri.ListImages();
  ASSERT_TRUE(images.ok()) << images.error().message();
  std::set<std::string> tags;
  for (const v1::Image& i : *images) tags.insert(i.repo_tags().begin(), i.repo_tags().end());
  EXPECT_TRUE(tags.count(oci::kPauseImage) && tags.count(oci::kBaseImage));

  // Host directories the container binds: a writable one with a read-only one nested in it
  // (at /data/ro), and a single read-only file at /overrideEnv.
  const std::string rw = tmp_.File("rw"), ro = tmp_.File("ro"), limits = tmp_.File("limits");
  fs::create_directories(rw);
  fs::create_directories(ro);
  std::ofstream(limits) << "CUDA_DEVICE_MEMORY_LIMIT=1g\n";

  const std::string uid = "0c9f5a7e-1111-4a4a-9b9b-000000000001";
  const v1::PodSandboxConfig sandbox = SandboxConfig("probe", uid);
  const int64_t t_sandbox = MonotonicNs();
  Result<std::string> sandbox_id = cri.RunPodSandbox(sandbox);
  ASSERT_TRUE(sandbox_id.ok()) << sandbox_id.error().message();
  const int64_t t_sandbox_done = MonotonicNs();
  Result<v1::PodSandboxStatusResponse> ps = cri.PodSandboxStatus(*sandbox_id);
  ASSERT_TRUE(ps.ok()) << ps.error().message();
  EXPECT_EQ(ps->status().state(), v1::SANDBOX_READY);
  EXPECT_EQ(ps->status().metadata().uid(), uid);

  // The container prints what it sees, signals that it is ready through the writable mount,
  // and waits (bounded) for the test's go-ahead before exiting with 7.
  const std::string script =
      "echo \"nspid $(grep NSpid /proc/$$/status)\"\n"
      "echo \"env HAMI_TEST_ENV=$HAMI_TEST_ENV\"\n"
      "echo \"limits $(cat /overrideEnv)\"\n"
      "echo ok > /data/written && echo rw-ok\n"
      "(echo x > /overrideEnv) 2>&1 | sed 's/^/ro-file: /'\n"
      "(echo x > /data/ro/f) 2>&1 | sed 's/^/ro-nested: /'\n"
      "(echo x > /usr/hami-test) 2>&1 | sed 's/^/ro-usr: /'\n"
      ": > /data/ready\n"
      "i=0; while [ ! -e /data/go ] && [ $i -lt 1500 ]; do sleep 0.02; i=$((i+1)); done\n"
      "exit 7\n";
  v1::ContainerConfig config = ShellContainer(sandbox, "main", script);
  v1::KeyValue* env = config.add_envs();
  env->set_key("HAMI_TEST_ENV");
  env->set_value("from-cri");
  for (const auto& [host, container, read_only] :
       {std::tuple{rw, "/data", false}, std::tuple{ro, "/data/ro", true},
        std::tuple{limits, "/overrideEnv", true}}) {
    v1::Mount* m = config.add_mounts();
    m->set_host_path(host);
    m->set_container_path(container);
    m->set_readonly(read_only);
  }
  const int64_t t_create = MonotonicNs();
  Result<std::string> id = cri.CreateContainer(*sandbox_id, config, sandbox);
  ASSERT_TRUE(id.ok()) << id.error().message();
  Status started = cri.StartContainer(*id);
  ASSERT_TRUE(started.ok()) << started.error().message();
  const int64_t t_started = MonotonicNs();

  // Seen from the host while it runs: its host PID, its PID namespace, its cgroups.
  ASSERT_TRUE(testing::PollUntil([&] { return Exists(rw + "/ready"); }, 30000, 2000))
      << "the container never signalled; its log:\n"
      << ReadFile(sandbox.log_directory() + "/main/0.log");
  Result<pid_t> pid = cri.ContainerPid(*id);
  ASSERT_TRUE(pid.ok()) << pid.error().message();
  std::string nspid_line;
  {
    std::istringstream st(ReadFile("/proc/" + std::to_string(*pid) + "/status"));
    for (std::string line; std::getline(st, line);) {
      if (line.rfind("NSpid:", 0) == 0) nspid_line = line;
    }
  }
  EXPECT_EQ(nspid_line, "NSpid:\t" + std::to_string(*pid) + "\t1")
      << "two entries: the host's PID, then PID 1 of the container's own namespace";
  Result<std::vector<CgroupDir>> cgroups = CgroupDirsOfProcess(*pid);
  ASSERT_TRUE(cgroups.ok()) << cgroups.error().message();
  size_t under_parent = 0;
  for (const CgroupDir& d : *cgroups) {
    for (const CgroupDir& root : node_->pod_cgroup_roots()) {
      if (root.hierarchy != d.hierarchy) continue;
      EXPECT_EQ(d.dir, root.dir + "/" + uid + "/" + *id) << "hierarchy " << d.hierarchy;
      ++under_parent;
    }
  }
  EXPECT_GE(under_parent, 8u) << "every v1 hierarchy places the container under the parent";
  // The memory hierarchy's parent lies inside this process's own memory cgroup.
  Result<std::vector<CgroupDir>> own = CgroupDirsOfProcess(0);
  ASSERT_TRUE(own.ok());
  for (const CgroupDir& mine : *own) {
    if (mine.hierarchy != "/sys/fs/cgroup/memory") continue;
    for (const CgroupDir& d : *cgroups) {
      if (d.hierarchy == mine.hierarchy) {
        EXPECT_EQ(d.dir.rfind(mine.dir + "/", 0), 0u) << d.dir;
      }
    }
  }

  // A command run in the running container (kubectl exec's ExecSync): its environment,
  // output and exit code.
  Result<v1::ExecSyncResponse> exec =
      cri.ExecSync(*id, {"/bin/sh", "-c", "echo $HAMI_TEST_ENV; echo oops >&2; exit 3"}, 10);
  ASSERT_TRUE(exec.ok()) << exec.error().message();
  EXPECT_EQ(exec->stdout(), "from-cri\n");
  EXPECT_EQ(exec->stderr(), "oops\n");
  EXPECT_EQ(exec->exit_code(), 3);

  std::ofstream(rw + "/go").flush();
  const int64_t t_go = MonotonicNs();
  Result<v1::ContainerStatus> exited = WaitExited(*id);
  ASSERT_TRUE(exited.ok()) << exited.error().message();
  const int64_t t_exited = MonotonicNs();
  EXPECT_EQ(exited->exit_code(), 7);
  EXPECT_EQ(exited->reason(), "Error");
  EXPECT_EQ(exited->log_path(), sandbox.log_directory() + "/main/0.log");

  // The log, in the CRI format, line by line.
  std::vector<std::string> texts;
  for (const LogLine& l : ReadCriLog(exited->log_path())) {
    EXPECT_EQ(l.stream, "stdout") << l.text;
    EXPECT_EQ(l.tag, "F") << l.text;
    EXPECT_EQ(l.time.size() >= 20 && l.time[10] == 'T', true) << l.time;
    texts.push_back(l.text);
  }
  ASSERT_EQ(texts.size(), 7u) << ReadFile(exited->log_path());
  EXPECT_EQ(texts[0], "nspid NSpid:\t1") << "inside, its own /proc: PID 1, one level";
  EXPECT_EQ(texts[1], "env HAMI_TEST_ENV=from-cri");
  EXPECT_EQ(texts[2], "limits CUDA_DEVICE_MEMORY_LIMIT=1g");
  EXPECT_EQ(texts[3], "rw-ok");
  EXPECT_NE(texts[4].find("ro-file: "), std::string::npos);
  EXPECT_NE(texts[4].find("Read-only file system"), std::string::npos) << texts[4];
  EXPECT_NE(texts[5].find("ro-nested: "), std::string::npos);
  EXPECT_NE(texts[5].find("Read-only file system"), std::string::npos) << texts[5];
  EXPECT_NE(texts[6].find("ro-usr: "), std::string::npos);
  EXPECT_NE(texts[6].find("Read-only file system"), std::string::npos) << texts[6];
  EXPECT_EQ(ReadFile(rw + "/written"), "ok\n");
  EXPECT_FALSE(Exists(ro + "/f"));
  EXPECT_FALSE(Exists("/usr/hami-test"));

  // A second container in the same pod, for the plain create -> exit time.
  const int64_t t_quick = MonotonicNs();
  Result<std::string> quick =
      cri.CreateContainer(*sandbox_id, ShellContainer(sandbox, "quick", "exit 0"), sandbox);
  ASSERT_TRUE(quick.ok()) << quick.error().message();
  ASSERT_TRUE(cri.StartContainer(*quick).ok());
  Result<v1::ContainerStatus> quick_exited = WaitExited(*quick);
  ASSERT_TRUE(quick_exited.ok()) << quick_exited.error().message();
  const int64_t t_quick_exited = MonotonicNs();
  EXPECT_EQ(quick_exited->exit_code(), 0);
  EXPECT_EQ(quick_exited->reason(), "Completed");

  Result<std::vector<v1::Container>> listed = cri.ListContainers();
  ASSERT_TRUE(listed.ok()) << listed.error().message();
  EXPECT_EQ(listed->size(), 2u);

  const int64_t t_teardown = MonotonicNs();
  for (const std::string& c : {*id, *quick}) {
    Status s = cri.StopContainer(c, 0);
    EXPECT_TRUE(s.ok()) << s.error().message();
    s = cri.RemoveContainer(c);
    EXPECT_TRUE(s.ok()) << s.error().message();
  }
  Status s = cri.StopPodSandbox(*sandbox_id);
  EXPECT_TRUE(s.ok()) << s.error().message();
  s = cri.RemovePodSandbox(*sandbox_id);
  EXPECT_TRUE(s.ok()) << s.error().message();
  Result<std::vector<v1::PodSandbox>> sandboxes = cri.ListPodSandbox();
  ASSERT_TRUE(sandboxes.ok());
  EXPECT_TRUE(sandboxes->empty());
  const int64_t t_removed = MonotonicNs();
  s = node_->Stop();
  const int64_t t_stopped = MonotonicNs();
  ASSERT_TRUE(s.ok()) << s.error().message();
  std::printf(
      "timing: RunPodSandbox %.0f ms; CreateContainer+StartContainer %.0f ms; go -> exit seen "
      "%.0f ms; a second container create -> exit seen %.0f ms; stop+remove of both and the "
      "sandbox %.0f ms; containerd Stop and cleanup %.0f ms\n",
      Ms(t_sandbox, t_sandbox_done), Ms(t_create, t_started), Ms(t_go, t_exited),
      Ms(t_quick, t_quick_exited), Ms(t_teardown, t_removed), Ms(t_removed, t_stopped));
  ExpectNothingLeft({*pid});
}

TEST_F(ContainerdTest, StopWithAPodStillRunningKillsItAndLeavesNothing) {
  CriClient& cri = node_->client();
  const v1::PodSandboxConfig sandbox = SandboxConfig("left-running", "uid-left-running");
  Result<std::string> sandbox_id = cri.RunPodSandbox(sandbox);
  ASSERT_TRUE(sandbox_id.ok()) << sandbox_id.error().message();
  Result<std::string> id = cri.CreateContainer(
      *sandbox_id, ShellContainer(sandbox, "sleeper", "exec sleep 1000"), sandbox);
  ASSERT_TRUE(id.ok()) << id.error().message();
  ASSERT_TRUE(cri.StartContainer(*id).ok());
  Result<pid_t> pid = cri.ContainerPid(*id);
  ASSERT_TRUE(pid.ok()) << pid.error().message();
  ASSERT_EQ(kill(*pid, 0), 0);

  Status s = node_->Stop();
  ASSERT_TRUE(s.ok()) << s.error().message();
  ExpectNothingLeft({*pid});
}

TEST_F(ContainerdTest, ASecondContainerdForTheSameDirectoryIsRefused) {
  Result<std::unique_ptr<Containerd>> second = Containerd::Start(node_->options());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.error().code(), ErrorCode::kBusy);
  EXPECT_NE(second.error().message().find("a containerd already serves " + node_->paths().socket),
            std::string::npos)
      << second.error().message();
  Result<v1::VersionResponse> v = node_->client().Version(5000);
  EXPECT_TRUE(v.ok()) << "the first one still answers";
}

TEST(ContainerdStartFailure, AContainerdThatExitsAtOnceIsReportedWithItsLogAndLeavesNothing) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root: Start refuses otherwise";
  TempDir tmp("hami-cri-fail");
  ASSERT_TRUE(tmp.ok());
  const std::set<std::string> run_before = RunContainerdEntries();
  ContainerdOptions options;
  options.dir = tmp.File("node");
  options.cgroup_parent = "hami-sim-test-" + std::to_string(getpid()) + "/node-a";
  // /bin/sh takes "--config" for an option it does not know, says so and exits 2.
  options.containerd = "/bin/sh";
  Result<std::unique_ptr<Containerd>> c = Containerd::Start(options);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(c.error().message().find("containerd exited with status 2 before answering on " +
                                     tmp.File("node/containerd.sock")),
            std::string::npos)
      << c.error().message();
  EXPECT_NE(c.error().message().find("the end of " + tmp.File("node/containerd.log")),
            std::string::npos);
  EXPECT_NE(c.error().message().find("--"), std::string::npos) << "quotes the log";
  std::printf("%s\n", c.error().c_str());
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(options.dir)) {
    left.push_back(e.path().filename().string());
  }
  EXPECT_EQ(left, std::vector<std::string>{"containerd.log"});
  EXPECT_THAT(NewRunContainerdEntries(run_before), ::testing::IsEmpty());
}

class ContainerdWithoutBaseImageTest : public ContainerdTest {
 protected:
  void SetUp() override {
    import_base_ = false;
    ContainerdTest::SetUp();
  }
};

TEST_F(ContainerdWithoutBaseImageTest, AnImageTheNodeDoesNotHaveIsAnErrorNamingIt) {
  CriClient& cri = node_->client();
  Result<v1::Image> status = cri.ImageStatus(oci::kBaseImage);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(status.error().message().find(oci::kBaseImage), std::string::npos)
      << status.error().message();

  const v1::PodSandboxConfig sandbox = SandboxConfig("no-image", "uid-no-image");
  Result<std::string> sandbox_id = cri.RunPodSandbox(sandbox);
  ASSERT_TRUE(sandbox_id.ok()) << sandbox_id.error().message();
  Result<std::string> id =
      cri.CreateContainer(*sandbox_id, ShellContainer(sandbox, "main", "exit 0"), sandbox);
  ASSERT_FALSE(id.ok());
  EXPECT_NE(id.error().message().find("CRI CreateContainer"), std::string::npos);
  EXPECT_NE(id.error().message().find(oci::kBaseImage), std::string::npos) << id.error().message();
  std::printf("CreateContainer without the image: %s\n", id.error().c_str());

  Status imported = node_->ImportImage(tmp_.File("absent.tar"), "hami.local/sim/absent:1");
  ASSERT_FALSE(imported.ok());
  EXPECT_NE(imported.error().message().find("ctr image import " + tmp_.File("absent.tar")),
            std::string::npos)
      << imported.error().message();

  ASSERT_TRUE(cri.StopPodSandbox(*sandbox_id).ok());
  ASSERT_TRUE(cri.RemovePodSandbox(*sandbox_id).ok());
  Status s = node_->Stop();
  ASSERT_TRUE(s.ok()) << s.error().message();
  ExpectNothingLeft({});
}

}  // namespace
}  // namespace hami::sim::cri
