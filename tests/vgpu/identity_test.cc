// How a process under libvgpu.so learns its host PID, on the simulated GPU: each tier where
// it applies, the fall-through from a failed tier to the next with its reason recorded, the
// probe serialized by a lock that dies with its holder, a failure recorded with its reason,
// and the telemetry in the region.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "broker/server.h"
#include "common/ofd_lock.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "region/region.h"
#include "vgpu_fixture.h"
#include "vgpu_probe.h"

namespace hami::testing {
namespace {

using region::IdentityReason;
using region::IdentitySource;
using region::IdentityTier;

constexpr uint64_t kGiB = 1ull << 30;

// The slot of the live process known as `pid` in its own namespace, with at least `attempts`
// identity attempts recorded, or nullopt. Read once: an attempt runs inside the CUDA call
// that makes it due (the region join, cuInit, an allocation after the backoff), so it is
// recorded before the probe answers that call.
std::optional<region::SlotView> SlotOf(const std::string& region_path, pid_t pid,
                                       uint32_t attempts = 1) {
  auto r = region::Region::Open(region_path, nullptr, region::Create::kNever, nullptr,
                                region::Access::kReadOnly);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  if (!r.ok()) return std::nullopt;
  for (const region::SlotView& s : (*r)->Slots()) {
    if (s.pid == pid && s.alive && s.identity_attempts >= attempts) return s;
  }
  ADD_FAILURE() << "no live slot of pid " << pid << " with " << attempts
                << " identity attempt(s) in " << region_path;
  return std::nullopt;
}

IdentityReason Reason(const region::SlotView& s, IdentityTier t) {
  return s.identity_reason[size_t(t)];
}

bool CanMakePidNamespaces() {
  if (geteuid() != 0) return false;
  // Without the preload: only the kernel's answer matters here.
  Subprocess probe({"/usr/bin/unshare", "--pid", "--fork", "/bin/true"}, {{"LD_PRELOAD", ""}});
  return probe.Wait() == 0;
}

const std::vector<std::string> kNewPidNamespace = {"/usr/bin/unshare", "--pid", "--fork"};

class IdentityTest : public ::testing::Test {
 protected:
  void SetUp() override { VgpuEnv::Get(); }
  std::map<std::string, std::string> Env(const std::map<std::string, std::string>& extra) {
    std::map<std::string, std::string> env = machine_.Env(extra);
    env["HAMI_IDENTITY_PROBE_LOCK"] = lock_dir_.File("probe.lock");
    env["LIBVGPU_HOSTPID_BROKER"] = "";
    env["LIBVGPU_HOST_PROCFS"] = "";
    for (const auto& [k, v] : extra) env[k] = v;
    return env;
  }
  // The simulated machine names processes as the PID namespace that made its state file
  // sees them: made here, that is the test's (the host's) namespace.
  void MakeMachineHere() {
    Probe p(Env({}));
    ASSERT_EQ(p.Do("init").Int("r"), 0);
    p.Exit();
  }
  Machine machine_{"h100-80g:2"};
  TempDir lock_dir_{"hami-identity-lock"};
};

TEST_F(IdentityTest, AProcessOfTheHostNamespaceIsKnownByItsOwnPid) {
  Probe p(Env({}));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), p.pid());
  ASSERT_TRUE(s);
  if (Reason(*s, IdentityTier::kNamespace) == IdentityReason::kOtherNamespace) {
    GTEST_SKIP() << "the test itself runs in a child PID namespace";
  }
  EXPECT_EQ(s->identity, IdentitySource::kSameNamespace);
  EXPECT_EQ(s->host_pid, p.pid());
  EXPECT_EQ(s->identity_attempts, 1u);
  // The gated tiers were off and the probe was never needed.
  EXPECT_EQ(Reason(*s, IdentityTier::kBroker), IdentityReason::kDisabled);
  EXPECT_EQ(Reason(*s, IdentityTier::kProcfs), IdentityReason::kDisabled);
  EXPECT_EQ(Reason(*s, IdentityTier::kProbe), IdentityReason::kNone);
}

TEST_F(IdentityTest, TheProbeFindsTheProcessNvmlNamesAndChargesNothingAfterwards) {
  Probe p(Env({{"HAMI_IDENTITY_TIERS", "probe"}, {"CUDA_DEVICE_MEMORY_LIMIT", "4g"}}));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), p.pid());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(s->host_pid, p.pid());
  EXPECT_EQ(Reason(*s, IdentityTier::kProbe), IdentityReason::kNone);
  EXPECT_EQ(Reason(*s, IdentityTier::kNamespace), IdentityReason::kDisabled);
  // The probe's context is gone: the process holds nothing until it makes its own.
  EXPECT_EQ(s->used_bytes[0], 0u);
  ASSERT_EQ(p.Do("context 0").Int("r"), 0);
  EXPECT_EQ(p.Do("meminfo").U64("cu_total"), 4 * kGiB);
}

TEST_F(IdentityTest, WithEveryTierOffTheIdentityFailsVisiblyAndMemoryLimitsStillHold) {
  Probe p(Env({{"HAMI_IDENTITY_TIERS", "none"}, {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}));
  ASSERT_EQ(p.Do("context 0").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), p.pid());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->identity, IdentitySource::kFailed);
  EXPECT_EQ(s->host_pid, 0);
  for (int t = 0; t < region::kIdentityTiers; ++t) {
    EXPECT_EQ(s->identity_reason[size_t(t)], IdentityReason::kDisabled) << t;
  }
  EXPECT_EQ(p.Do("alloc 2g").Int("r"), int(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(p.Do("alloc 256m").Int("r"), 0);
  auto r = OpenRegionReadOnly(machine_.Region());
  ASSERT_TRUE(r);
  EXPECT_GE(r->IdentityCounts()[size_t(IdentitySource::kFailed)], 1u);
}

// The retry that follows (after 1 s, doubling to 60 s, until a tier answers) is the schedule
// of src/vgpu/identity.cc, tested in-process on an injected clock (vgpu_identity_retry_test):
// a process here would have to wait the backoff out on the real clock.
TEST_F(IdentityTest, AProbeThatCannotHaveTheLockFailsVisiblyAndMemoryLimitsStillHold) {
  // The test holds the probe lock: the probe gives up after 200 ms without a change of holder.
  UniqueFd lock(open(lock_dir_.File("probe.lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666));
  ASSERT_TRUE(lock.valid());
  ASSERT_EQ(OfdLockByte(lock.get(), 0, F_WRLCK, LockWait::kNo), 0);
  Probe p(Env({{"HAMI_IDENTITY_TIERS", "probe"},
               {"HAMI_IDENTITY_PROBE_WAIT_MS", "200"},
               {"CUDA_DEVICE_MEMORY_LIMIT", "1g"}}));
  ASSERT_EQ(p.Do("context 0").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), p.pid());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->identity, IdentitySource::kFailed);
  EXPECT_EQ(s->host_pid, 0);
  EXPECT_EQ(Reason(*s, IdentityTier::kProbe), IdentityReason::kLockTimeout);
  EXPECT_GE(s->identity_ns, 200'000'000);
  auto r = OpenRegionReadOnly(machine_.Region());
  ASSERT_TRUE(r);
  EXPECT_GE(r->IdentityReasonCounts()[size_t(IdentityReason::kLockTimeout)], 1u);
  EXPECT_GE(r->IdentityCounts()[size_t(IdentitySource::kFailed)], 1u);
  // Without an identity, the process keeps working within its memory limit.
  EXPECT_EQ(p.Do("alloc 2g").Int("r"), int(CUDA_ERROR_OUT_OF_MEMORY));
  EXPECT_EQ(p.Do("alloc 256m").Int("r"), 0);
}

TEST_F(IdentityTest, AProbeLockHolderKilledInsideTheLockReleasesIt) {
  const std::string path = lock_dir_.File("probe.lock");
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t holder = fork();
  ASSERT_GE(holder, 0);
  if (holder == 0) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
    char c = OfdLockByte(fd, 0, F_WRLCK, LockWait::kNo) == 0 ? 'y' : 'n';
    (void)!write(ready[1], &c, 1);
    for (;;) pause();
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  close(ready[0]);
  ASSERT_EQ(c, 'y');

  // The probe waits (up to 30 s) behind the holder; the holder dies inside the lock. The
  // probe opening the lock file (inotify's IN_OPEN) says it has reached the lock.
  UniqueFd watch(inotify_init1(IN_CLOEXEC));
  ASSERT_TRUE(watch.valid());
  ASSERT_GE(inotify_add_watch(watch.get(), path.c_str(), IN_OPEN), 0);
  Probe p(Env({{"HAMI_IDENTITY_TIERS", "probe"}, {"HAMI_IDENTITY_PROBE_WAIT_MS", "30000"}}));
  std::atomic<bool> finished{false};
  Answer init;
  std::thread runner([&] {
    init = p.Do("init", 40000);
    finished.store(true);
  });
  pollfd opened{watch.get(), POLLIN, 0};
  EXPECT_EQ(poll(&opened, 1, 20'000), 1) << "the probe never opened the lock file";
  // While the holder lives, the probe cannot finish.
  EXPECT_FALSE(finished.load()) << "the probe finished while another process held the lock";
  kill(holder, SIGKILL);
  runner.join();
  waitpid(holder, nullptr, 0);
  ASSERT_EQ(init.Int("r"), 0);
  // One attempt, resolved: the lock came free when its holder died, not at the 30 s bound
  // (which would have recorded a lock timeout).
  auto s = SlotOf(machine_.Region(), p.pid());
  ASSERT_TRUE(s);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(s->host_pid, p.pid());
  EXPECT_EQ(s->identity_attempts, 1u);
  EXPECT_EQ(Reason(*s, IdentityTier::kProbe), IdentityReason::kNone);
}

TEST_F(IdentityTest, ConcurrentProbesEachFindTheirOwnPid) {
  std::vector<std::unique_ptr<Probe>> probes;
  for (int i = 0; i < 4; ++i) {
    probes.push_back(std::make_unique<Probe>(Env({{"HAMI_IDENTITY_TIERS", "probe"}})));
  }
  std::vector<std::thread> threads;
  for (auto& p : probes) threads.emplace_back([&p] { p->Do("init"); });
  for (auto& t : threads) t.join();
  for (auto& p : probes) {
    auto s = SlotOf(machine_.Region(), p->pid());
    ASSERT_TRUE(s);
    EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
    EXPECT_EQ(s->host_pid, p->pid());
  }
}

TEST_F(IdentityTest, TheProbeUsesTheDeviceTheProcessSeesUnderAnyVisibleDevices) {
  for (const char* visible : {"1", "1,0"}) {
    Probe p(Env({{"HAMI_IDENTITY_TIERS", "probe"}, {"CUDA_VISIBLE_DEVICES", visible}}));
    ASSERT_EQ(p.Do("init").Int("r"), 0) << visible;
    auto s = SlotOf(machine_.Region(), p.pid());
    ASSERT_TRUE(s) << visible;
    EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe) << visible;
    EXPECT_EQ(s->host_pid, p.pid()) << visible;
    p.Exit();
  }
}

TEST_F(IdentityTest, InAChildPidNamespaceTheProbeFindsTheHostPid) {
  if (!CanMakePidNamespaces()) GTEST_SKIP() << "needs root and PID namespaces (unshare --pid)";
  MakeMachineHere();
  Probe p(Env({}), kNewPidNamespace);
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  ASSERT_EQ(p.Do("pid").Int("pid"), 1);
  const pid_t host_pid = OnlyChildOf(p.pid());
  ASSERT_GT(host_pid, 0);
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(Reason(*s, IdentityTier::kNamespace), IdentityReason::kOtherNamespace);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(s->host_pid, host_pid);
}

// A container's process, healthy: the namespace tier does not apply to it and the probe
// answers, after a first NVML call that joined the region before cuInit. Nothing failed.
TEST_F(IdentityTest, AHealthyProcessInAChildPidNamespaceCountsNoTierFailure) {
  if (!CanMakePidNamespaces()) GTEST_SKIP() << "needs root and PID namespaces (unshare --pid)";
  MakeMachineHere();
  Probe p(Env({}), kNewPidNamespace);
  ASSERT_EQ(p.Do("nvml-init").Int("r"), 0);
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  ASSERT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(Reason(*s, IdentityTier::kNamespace), IdentityReason::kOtherNamespace)
      << "the slot still says why the namespace tier gave none";
  auto r = OpenRegionReadOnly(machine_.Region());
  ASSERT_TRUE(r);
  const auto failures = r->IdentityReasonCounts();
  for (int reason = 0; reason < region::layout::kIdentityReasons; ++reason) {
    EXPECT_EQ(failures[size_t(reason)], 0u)
        << region::IdentityReasonName(IdentityReason(reason)) << " counted as a tier failure";
  }
  const auto sources = r->IdentityCounts();
  EXPECT_EQ(sources[size_t(IdentitySource::kNvmlProbe)], 1u);
  EXPECT_EQ(sources[size_t(IdentitySource::kUnknown)], 0u)
      << "the attempt that waited for cuInit is counted once, when it is decided";
}

TEST_F(IdentityTest, ATrustedHostProcfsGivesTheHostPidWithoutTheProbe) {
  if (!CanMakePidNamespaces()) GTEST_SKIP() << "needs root and PID namespaces (unshare --pid)";
  // unshare without --mount-proc: /proc is still the host's.
  Probe p(Env({{"LIBVGPU_HOST_PROCFS", "/proc"}}), kNewPidNamespace);
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  const pid_t host_pid = OnlyChildOf(p.pid());
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->identity, IdentitySource::kProcfs);
  EXPECT_EQ(s->host_pid, host_pid);
  EXPECT_EQ(Reason(*s, IdentityTier::kProbe), IdentityReason::kNone) << "not reached";
}

TEST_F(IdentityTest, AProcfsRootThatIsNotAProcfsIsNotBelieved) {
  TempDir fake("hami-fake-proc");
  ASSERT_EQ(mkdir(fake.File("self").c_str(), 0755), 0);
  std::ofstream(fake.File("self/status")) << "Name:\tx\nNStgid:\t4242\t" << 1 << "\n";
  Probe p(Env({{"LIBVGPU_HOST_PROCFS", fake.path()}, {"HAMI_IDENTITY_TIERS", "procfs,probe"}}));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), p.pid());
  ASSERT_TRUE(s);
  EXPECT_EQ(Reason(*s, IdentityTier::kProcfs), IdentityReason::kUnreadable);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe) << "the next tier answered";
  EXPECT_EQ(s->host_pid, p.pid());
}

// The broker at the compiled path, as the device plugin arranges it: its directory mounted
// read-only at /tmp/vgpulock/hostpid in the workload's mount namespace.
class BrokerIdentityTest : public IdentityTest {
 protected:
  void SetUp() override {
    IdentityTest::SetUp();
    if (!CanMakePidNamespaces()) GTEST_SKIP() << "needs root, PID and mount namespaces";
    mkdir("/tmp/vgpulock", 01777);
    broker::ServerOptions o;
    o.socket_path = dir_.File("hostpid/broker.sock");
    auto s = broker::Server::Start(o);
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(s).value();
    MakeMachineHere();
  }
  // unshare: new mount and PID namespaces; the broker directory at the compiled path.
  std::vector<std::string> Wrapper(bool read_only) {
    std::string script =
        "mount -t tmpfs -o mode=1777 tmpfs /tmp/vgpulock && mkdir /tmp/vgpulock/hostpid && "
        "mount --bind '" +
        dir_.File("hostpid") + "' /tmp/vgpulock/hostpid && " +
        (read_only ? "mount -o remount,bind,ro /tmp/vgpulock/hostpid && " : "") +
        "exec \"$0\" \"$@\"";
    return {"/usr/bin/unshare", "--mount", "--pid", "--fork", "/bin/sh", "-c", script};
  }
  TempDir dir_{"hami-broker"};
  std::unique_ptr<broker::Server> server_;
};

TEST_F(BrokerIdentityTest, TheBrokerAnswersAProcessInAnotherPidNamespaceWithItsHostPid) {
  Probe p(Env({{"LIBVGPU_HOSTPID_BROKER", "1"}}), Wrapper(true));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  ASSERT_EQ(p.Do("pid").Int("pid"), 1);
  const pid_t host_pid = OnlyChildOf(p.pid());
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(s->identity, IdentitySource::kBroker);
  EXPECT_EQ(s->host_pid, host_pid);
  EXPECT_EQ(Reason(*s, IdentityTier::kBroker), IdentityReason::kNone);
  // The server counts an answer right after writing it, on its serving thread, which Stop()
  // joins: once stopped, the count includes the answer the client read.
  server_->Stop();
  EXPECT_EQ(server_->Counters().ok, 1u);
}

TEST_F(BrokerIdentityTest, AWritableBrokerMountIsNotTrustedAndTheNextTierAnswers) {
  Probe p(Env({{"LIBVGPU_HOSTPID_BROKER", "1"}}), Wrapper(false));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  const pid_t host_pid = OnlyChildOf(p.pid());
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(Reason(*s, IdentityTier::kBroker), IdentityReason::kUntrusted);
  EXPECT_EQ(Reason(*s, IdentityTier::kNamespace), IdentityReason::kOtherNamespace);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(s->host_pid, host_pid);
  EXPECT_EQ(server_->Counters().accepted, 0u) << "nothing was asked of an untrusted endpoint";
}

TEST_F(BrokerIdentityTest, AGateOtherThanExactlyOneLeavesTheBrokerAlone) {
  Probe p(Env({{"LIBVGPU_HOSTPID_BROKER", "true"}}), Wrapper(true));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(Reason(*s, IdentityTier::kBroker), IdentityReason::kDisabled);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(server_->Counters().accepted, 0u);
}

TEST_F(BrokerIdentityTest, AStoppedBrokerIsUnavailableAndTheProbeAnswers) {
  server_->Stop();
  Probe p(Env({{"LIBVGPU_HOSTPID_BROKER", "1"}}), Wrapper(true));
  ASSERT_EQ(p.Do("init").Int("r"), 0);
  auto s = SlotOf(machine_.Region(), 1);
  ASSERT_TRUE(s);
  EXPECT_EQ(Reason(*s, IdentityTier::kBroker), IdentityReason::kMissing);
  EXPECT_EQ(s->identity, IdentitySource::kNvmlProbe);
  EXPECT_EQ(s->host_pid, OnlyChildOf(p.pid()));
}

}  // namespace
}  // namespace hami::testing
