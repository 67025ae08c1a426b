// The driver with real files: a temporary hook path, CDI directory, lock directory and
// checkpoint; claims from a StaticClaimSource (publisher_test.cc reads them from the simulated
// API server). The plugin's death is a real one: a forked child prepares and is
// killed, and a new driver in this process, from the same checkpoint, cleans up.
#include "dra/driver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "common/file.h"
#include "common/temp_dir.h"
#include "node/claim_record.h"

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::StartsWith;

constexpr char kNode[] = "n1";
constexpr uint64_t kMiB = 1 << 20;

json Result_(std::string request, std::string device, std::string share, json consumed) {
  json r = {{"request", std::move(request)},
            {"driver", kDriverName},
            {"pool", kNode},
            {"device", std::move(device)}};
  if (!share.empty()) r["shareID"] = share;
  if (!consumed.is_null()) r["consumedCapacity"] = std::move(consumed);
  return r;
}

json Claim(const std::string& name, const std::string& uid, json results) {
  return {{"metadata", {{"namespace", "ml"}, {"name", name}, {"uid", uid}}},
          {"status", {{"allocation", {{"devices", {{"results", std::move(results)}}}}}}}};
}

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

bool Exists(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0;
}

class DriverTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(root_.ok());
    hook_ = root_.File("hook");
    cdi_ = root_.File("cdi");
    ASSERT_TRUE(std::filesystem::create_directories(hook_ + "/vgpu"));
    ASSERT_TRUE(std::ofstream(hook_ + "/vgpu/libvgpu.so") << "ELF");
    ASSERT_TRUE(std::ofstream(hook_ + "/vgpu/ld.so.preload") << "/usr/local/vgpu/libvgpu.so\n");
    options_.node_name = kNode;
    options_.checkpoint_path = root_.File("checkpoint.json");
    options_.cdi_dir = cdi_;
    options_.hook_path = hook_;
    options_.lock_dir.parent = root_.path();
    options_.lock_dir.expected_owner = geteuid();
    options_.log = [this](std::string_view line) { log_ += std::string(line) + "\n"; };
    gpus_ = {{"hami-gpu-0", "GPU-aaaa", 80 * 1024 * kMiB, true},
             {"hami-gpu-1", "GPU-bbbb", 40 * 1024 * kMiB, true}};
  }

  std::unique_ptr<Driver> NewDriver() {
    auto d = Driver::Create(source_, gpus_, options_);
    EXPECT_TRUE(d.ok()) << d.error().message();
    return d.ok() ? std::move(d).value() : nullptr;
  }

  std::string Dir(const std::string& uid) { return hook_ + "/vgpu/containers/" + uid + "_claim"; }
  std::string Limits(const std::string& uid) { return Dir(uid) + ".limits"; }
  std::string Record(const std::string& uid) { return Dir(uid) + ".claim"; }
  std::string Spec(const std::string& uid) {
    return cdi_ + "/k8s.hami-core-gpu.project-hami.io-claim_" + uid + ".json";
  }

  TempDir root_{"hami-dra-drv"};
  std::string hook_, cdi_, log_;
  DriverOptions options_;
  std::vector<Gpu> gpus_;
  StaticClaimSource source_;
};

TEST_F(DriverTest, PreparesTheShareAsAllocateWouldAndAnswersCdiIds) {
  source_.Put(Claim(
      "c", "u-1", {Result_("gpu", "hami-gpu-0", "s-1", {{"memory", "3000Mi"}, {"cores", "30"}})}));
  auto driver = NewDriver();
  auto answers = driver->Prepare({{"ml", "u-1", "c"}});
  ASSERT_EQ(answers.size(), 1u);
  const PrepareAnswer& a = answers["u-1"];
  ASSERT_THAT(a.error, IsEmpty());
  ASSERT_EQ(a.devices.size(), 1u);
  EXPECT_EQ(a.devices[0].request_names, std::vector<std::string>{"gpu"});
  EXPECT_EQ(a.devices[0].pool, kNode);
  EXPECT_EQ(a.devices[0].device, "hami-gpu-0");
  EXPECT_EQ(a.devices[0].share_id, "s-1");
  EXPECT_EQ(a.devices[0].cdi_device_ids,
            std::vector<std::string>{"k8s.hami-core-gpu.project-hami.io/claim=u-1-hami-gpu-0-s-1"});

  // The container directory (libvgpu makes its region, usage.cache, in it) and the limits file.
  struct stat st {};
  ASSERT_EQ(stat(Dir("u-1").c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 07777, 0777u);
  const std::string limits = Read(Limits("u-1"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=3000m\n"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_SM_LIMIT=30\n"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache\n"));
  EXPECT_THAT(limits, HasSubstr("HAMI_LIMITS_FORMAT=1\n"));
  EXPECT_THAT(limits, Not(HasSubstr("NVIDIA_VISIBLE_DEVICES")));
  // Beside them, the claim record naming the claim (node/claim_record.h).
  auto record = node::ReadClaimRecord(Record("u-1"));
  ASSERT_TRUE(record.ok()) << record.error().message();
  EXPECT_EQ(*record, (node::ClaimRecord{"ml", "c", "u-1"}));
  // /tmp/vgpulock as seed 000 says: a directory, mode 01777.
  ASSERT_EQ(lstat(root_.File("vgpulock").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 01777u);

  // The CDI spec carries the same env and mounts as the device plugin's answer.
  json spec = json::parse(Read(Spec("u-1")));
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");
  EXPECT_EQ(spec["kind"], "k8s.hami-core-gpu.project-hami.io/claim");
  EXPECT_EQ(spec["containerEdits"]["env"],
            json::array({"CUDA_DEVICE_MEMORY_LIMIT_0=3000m",
                         "CUDA_DEVICE_MEMORY_SHARED_CACHE=/usr/local/vgpu/usage.cache",
                         "CUDA_DEVICE_SM_LIMIT=30", "NVIDIA_VISIBLE_DEVICES=GPU-aaaa"}));
  std::vector<std::pair<std::string, std::string>> mounts;
  for (const json& m : spec["containerEdits"]["mounts"]) {
    mounts.emplace_back(m["containerPath"], m["hostPath"]);
  }
  EXPECT_EQ(mounts, (std::vector<std::pair<std::string, std::string>>{
                        {"/usr/local/vgpu", Dir("u-1")},
                        {"/usr/local/vgpu/libvgpu.so", hook_ + "/vgpu/libvgpu.so"},
                        {"/tmp/vgpulock", root_.File("vgpulock")},
                        {"/etc/ld.so.preload", hook_ + "/vgpu/ld.so.preload"},
                        {"/overrideEnv", Limits("u-1")}}));
  EXPECT_EQ(spec["devices"][0]["name"], "u-1-hami-gpu-0-s-1");
  EXPECT_EQ(spec["devices"][0]["containerEdits"]["env"],
            json::array({"HAMI_DRA_DEVICE_0=GPU-aaaa"}));
}

TEST_F(DriverTest, ARepeatGetsTheSameAnswerAlsoAfterARestartWithoutTheClaim) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-1", "", {{"memory", "1Gi"}})}));
  auto first = NewDriver()->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(first["u-1"].error, IsEmpty());
  auto driver = NewDriver();
  EXPECT_EQ(driver->Prepare({{"ml", "u-1", "c"}}), first);
  source_.Remove("ml", "c");  // the checkpoint answers; the claim is not read again
  auto restarted = NewDriver();
  EXPECT_EQ(restarted->Prepare({{"ml", "u-1", "c"}}), first);
  EXPECT_EQ(restarted->Prepare({{"ml", "u-1", "c"}}), first);
}

TEST_F(DriverTest, ARepeatAfterTheFilesWereLostPreparesThemAgain) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto first = NewDriver()->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(first["u-1"].error, IsEmpty());
  // A node reboot: /var/run/cdi and /tmp are emptied, the checkpoint stays.
  std::filesystem::remove_all(cdi_);
  std::filesystem::remove_all(root_.File("vgpulock"));
  auto restarted = NewDriver();
  EXPECT_EQ(restarted->Prepare({{"ml", "u-1", "c"}}), first);
  EXPECT_TRUE(Exists(Spec("u-1")));
  EXPECT_TRUE(Exists(Limits("u-1")));
  EXPECT_TRUE(Exists(root_.File("vgpulock")));
  EXPECT_THAT(log_, HasSubstr("event=prepare_again"));
  // Only the lock directory lost: the answer is the recorded one, and the directory is back.
  std::filesystem::remove_all(root_.File("vgpulock"));
  source_.Remove("ml", "c");
  EXPECT_EQ(restarted->Prepare({{"ml", "u-1", "c"}}), first);
  EXPECT_TRUE(Exists(root_.File("vgpulock")));
  // Files lost and the claim gone: the claim fails, and nothing of it is left.
  std::filesystem::remove(Spec("u-1"));
  auto failed = restarted->Prepare({{"ml", "u-1", "c"}});
  EXPECT_THAT(failed["u-1"].error, HasSubstr("not found"));
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Limits("u-1")));
  EXPECT_EQ(restarted->Prepared().count("u-1"), 0u);
}

TEST_F(DriverTest, ARepeatWritesTheClaimRecordWhenItIsMissing) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "2Gi"}})}));
  auto driver = NewDriver();
  auto first = driver->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(first["u-1"].error, IsEmpty());
  // As a claim prepared by a driver that wrote no record leaves it.
  ASSERT_EQ(unlink(Record("u-1").c_str()), 0);
  auto again = driver->Prepare({{"ml", "u-1", "c"}});
  EXPECT_EQ(again["u-1"], first["u-1"]);
  auto record = node::ReadClaimRecord(Record("u-1"));
  ASSERT_TRUE(record.ok()) << record.error().message();
  EXPECT_EQ(*record, (node::ClaimRecord{"ml", "c", "u-1"}));
}

TEST_F(DriverTest, ARepeatRewritesAClaimRecordThatNoLongerNamesTheClaim) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "2Gi"}})}));
  auto driver = NewDriver();
  auto first = driver->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(first["u-1"].error, IsEmpty());
  for (const char* text : {"", "{\"name\":\"other\",\"namespace\":\"ml\",\"uid\":\"u-9\"}\n"}) {
    ASSERT_TRUE(std::ofstream(Record("u-1"), std::ios::trunc) << text);
    EXPECT_EQ(driver->Prepare({{"ml", "u-1", "c"}})["u-1"], first["u-1"]);
    auto record = node::ReadClaimRecord(Record("u-1"));
    ASSERT_TRUE(record.ok()) << record.error().message();
    EXPECT_EQ(*record, (node::ClaimRecord{"ml", "c", "u-1"})) << "after '" << text << "'";
  }
  EXPECT_THAT(log_, Not(HasSubstr("prepare_again")));
}

TEST_F(DriverTest, AStartInALaterBootRemovesEveryClaimsFilesAndTheKubeletsRepeatPreparesAgain) {
  const std::string boot = root_.File("boot");
  ASSERT_TRUE(std::ofstream(boot) << "boot-a\n");
  options_.boot_id_path = boot;
  const std::string marker = root_.File(kBootMarkerFileName);
  source_.Put(Claim("kept", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  source_.Put(Claim("lost", "u-2", {Result_("gpu", "hami-gpu-1", "", {{"memory", "1Gi"}})}));
  auto driver = NewDriver();
  EXPECT_EQ(Read(marker), "boot-a\n");
  auto first = driver->Prepare({{"ml", "u-1", "kept"}});
  ASSERT_THAT(first["u-1"].error, IsEmpty());
  ASSERT_THAT(driver->Prepare({{"ml", "u-2", "lost"}})["u-2"].error, IsEmpty());
  driver.reset();
  // The node goes down before the checkpoint naming u-2 reaches the disk: the one on disk
  // knows u-1 alone, and u-2's files are there.
  Checkpoint on_disk = *LoadCheckpoint(options_.checkpoint_path);
  on_disk.erase("u-2");
  ASSERT_TRUE(SaveCheckpoint(options_.checkpoint_path, on_disk).ok());
  ASSERT_EQ(unlink(CheckpointLogPath(options_.checkpoint_path).c_str()), 0);
  // A device plugin's container directory and limits file on the same node are not claims.
  const std::string pod_dir = hook_ + "/vgpu/containers/pod-9_main";
  ASSERT_TRUE(std::filesystem::create_directories(pod_dir));
  ASSERT_TRUE(std::ofstream(pod_dir + ".limits") << "CUDA_DEVICE_MEMORY_LIMIT_0=1g\n");

  // The same boot (the plugin restarted): nothing is removed, a container may use it.
  driver = NewDriver();
  EXPECT_TRUE(Exists(Dir("u-1")));
  EXPECT_TRUE(Exists(Dir("u-2")));
  EXPECT_THAT(log_, Not(HasSubstr("reboot_cleanup")));
  driver.reset();

  // A later boot: every claim's directory, limits file, CDI spec and record go, the one the
  // checkpoint holds and the one it lost; the pod's stay.
  ASSERT_TRUE(std::ofstream(boot) << "boot-b\n");
  driver = NewDriver();
  for (const char* uid : {"u-1", "u-2"}) {
    for (const std::string& gone : {Dir(uid), Limits(uid), Spec(uid), Record(uid)}) {
      EXPECT_FALSE(Exists(gone)) << gone;
    }
  }
  EXPECT_TRUE(Exists(pod_dir));
  EXPECT_TRUE(Exists(pod_dir + ".limits"));
  EXPECT_THAT(log_, HasSubstr("dra event=reboot_cleanup claims=2"));
  EXPECT_TRUE(driver->Prepared().empty());
  EXPECT_TRUE(LoadCheckpoint(options_.checkpoint_path)->empty());
  EXPECT_EQ(Read(marker), "boot-b\n");
  // The kubelet, restarted, prepares u-1 again: the same answer, the files made again.
  EXPECT_EQ(driver->Prepare({{"ml", "u-1", "kept"}})["u-1"], first["u-1"]);
  EXPECT_TRUE(Exists(Spec("u-1")));
  EXPECT_THAT(Read(Limits("u-1")), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"));
}

TEST_F(DriverTest, AnUnreadableCheckpointAfterARebootIsCleanedUpByName) {
  const std::string boot = root_.File("boot");
  ASSERT_TRUE(std::ofstream(boot) << "boot-a\n");
  options_.boot_id_path = boot;
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto driver = NewDriver();
  ASSERT_THAT(driver->Prepare({{"ml", "u-1", "c"}})["u-1"].error, IsEmpty());
  driver.reset();
  // Cut short by the crash.
  ASSERT_EQ(truncate(options_.checkpoint_path.c_str(), 7), 0);
  // In the same boot that is corruption, and the driver does not start.
  EXPECT_FALSE(Driver::Create(source_, gpus_, options_).ok());
  ASSERT_TRUE(std::ofstream(boot) << "boot-b\n");
  driver = NewDriver();
  ASSERT_NE(driver, nullptr);
  EXPECT_THAT(log_, HasSubstr("dra event=checkpoint_unreadable_after_reboot"));
  EXPECT_THAT(log_, HasSubstr("dra event=reboot_cleanup claims=1"));
  for (const std::string& gone : {Dir("u-1"), Limits("u-1"), Spec("u-1"), Record("u-1")}) {
    EXPECT_FALSE(Exists(gone)) << gone;
  }
  auto loaded = LoadCheckpoint(options_.checkpoint_path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message();
  EXPECT_TRUE(loaded->empty());
}

TEST_F(DriverTest, WithoutABootIdNothingIsCleanedUpAndTheDriverSaysSo) {
  options_.boot_id_path = root_.File("no-such-boot-id");
  ASSERT_TRUE(std::ofstream(root_.File(kBootMarkerFileName)) << "boot-a\n");
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto driver = NewDriver();
  ASSERT_THAT(driver->Prepare({{"ml", "u-1", "c"}})["u-1"].error, IsEmpty());
  driver.reset();
  driver = NewDriver();
  EXPECT_THAT(log_, HasSubstr("dra event=boot_id_unknown path=" + options_.boot_id_path));
  EXPECT_THAT(log_, Not(HasSubstr("reboot_cleanup")));
  EXPECT_TRUE(Exists(Dir("u-1")));
  EXPECT_EQ(Read(root_.File(kBootMarkerFileName)), "boot-a\n");
}

TEST_F(DriverTest, ConcurrentPreparesOfOneClaimGetOneAnswer) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "s", {{"memory", "1Gi"}})}));
  auto driver = NewDriver();
  std::vector<std::map<std::string, PrepareAnswer>> answers(4);
  std::vector<std::thread> threads;
  for (auto& a : answers) {
    threads.emplace_back([&] { a = driver->Prepare({{"ml", "u-1", "c"}}); });
  }
  for (auto& t : threads) t.join();
  for (const auto& a : answers) {
    EXPECT_THAT(a.at("u-1").error, IsEmpty());
    EXPECT_EQ(a, answers[0]);
  }
  EXPECT_EQ(driver->Prepared().size(), 1u);
  EXPECT_EQ(std::count(log_.begin(), log_.end(), '\n'), 4);  // four answers, no failure
}

TEST_F(DriverTest, UnprepareRemovesExactlyWhatPrepareMadeEvenWhenTheClaimIsGone) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "2Gi"}})}));
  source_.Put(Claim("d", "u-2", {Result_("gpu", "hami-gpu-0", "", {{"memory", "2Gi"}})}));
  auto driver = NewDriver();
  auto answers = driver->Prepare({{"ml", "u-1", "c"}, {"ml", "u-2", "d"}});
  ASSERT_THAT(answers["u-1"].error, IsEmpty());
  ASSERT_THAT(answers["u-2"].error, IsEmpty());
  // The region libvgpu would have made, and a file of the lock directory's.
  ASSERT_TRUE(std::ofstream(Dir("u-1") + "/usage.cache") << "region");
  source_.Remove("ml", "c");

  auto errors = driver->Unprepare({{"ml", "u-1", "c"}});
  EXPECT_EQ(errors, (std::map<std::string, std::string>{{"u-1", ""}}));
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Limits("u-1")));
  EXPECT_FALSE(Exists(Spec("u-1")));
  EXPECT_FALSE(Exists(Record("u-1")));
  // The other claim's files, the lock directory and the hook files stay.
  EXPECT_TRUE(Exists(Dir("u-2")));
  EXPECT_TRUE(Exists(Limits("u-2")));
  EXPECT_TRUE(Exists(Spec("u-2")));
  EXPECT_TRUE(Exists(Record("u-2")));
  EXPECT_TRUE(Exists(root_.File("vgpulock")));
  EXPECT_TRUE(Exists(hook_ + "/vgpu/libvgpu.so"));
  EXPECT_EQ(driver->Prepared().count("u-1"), 0u);
  // Again, and a claim never prepared here: both succeed.
  EXPECT_EQ(driver->Unprepare({{"ml", "u-1", "c"}, {"ml", "u-9", "z"}}),
            (std::map<std::string, std::string>{{"u-1", ""}, {"u-9", ""}}));
}

TEST_F(DriverTest, AClaimOnADeviceTheNodeLacksFailsAloneNamingTheDevice) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-7", "", {{"memory", "1Gi"}})}));
  source_.Put(Claim("d", "u-2", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  json other_pool = Claim("e", "u-3", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})});
  other_pool["status"]["allocation"]["devices"]["results"][0]["pool"] = "n2";
  source_.Put(other_pool);
  auto answers = NewDriver()->Prepare({{"ml", "u-1", "c"}, {"ml", "u-2", "d"}, {"ml", "u-3", "e"}});
  EXPECT_THAT(answers["u-1"].error, HasSubstr("device hami-gpu-7"));
  EXPECT_THAT(answers["u-1"].error, HasSubstr("claim ml/c"));
  EXPECT_TRUE(answers["u-1"].devices.empty());
  EXPECT_THAT(answers["u-3"].error, HasSubstr("pool n2"));
  EXPECT_THAT(answers["u-2"].error, IsEmpty());
  EXPECT_EQ(answers["u-2"].devices.size(), 1u);
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Spec("u-1")));
}

TEST_F(DriverTest, AMissingOrUnallocatedClaimFails) {
  json unallocated = Claim("c", "u-1", json::array());
  unallocated.erase("status");
  source_.Put(unallocated);
  auto answers = NewDriver()->Prepare({{"ml", "u-1", "c"}, {"ml", "u-2", "gone"}});
  EXPECT_THAT(answers["u-1"].error, HasSubstr("not allocated"));
  EXPECT_THAT(answers["u-2"].error, HasSubstr("not found"));
}

TEST_F(DriverTest, AnUnwritableCdiDirectoryFailsThePrepareAndLeavesNoLimitsBehind) {
  ASSERT_TRUE(std::ofstream(root_.File("not-a-dir")) << "x");
  options_.cdi_dir = root_.File("not-a-dir") + "/cdi";
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto driver = NewDriver();
  auto answers = driver->Prepare({{"ml", "u-1", "c"}});
  EXPECT_THAT(answers["u-1"].error, HasSubstr(root_.File("not-a-dir")));
  EXPECT_TRUE(answers["u-1"].devices.empty());
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Limits("u-1")));
  EXPECT_FALSE(Exists(Record("u-1")));
  EXPECT_TRUE(driver->Prepared().empty());
}

TEST_F(DriverTest, MissingHookFilesFailThePrepare) {
  std::filesystem::remove(hook_ + "/vgpu/ld.so.preload");
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto answers = NewDriver()->Prepare({{"ml", "u-1", "c"}});
  EXPECT_THAT(answers["u-1"].error, HasSubstr(hook_ + "/vgpu/ld.so.preload"));
  EXPECT_THAT(answers["u-1"].error, HasSubstr("hami-dra-plugin"));
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Spec("u-1")));
}

TEST_F(DriverTest, HookFilesInstalledAsTheDevicePluginInstallsThemServeAPrepare) {
  std::filesystem::remove_all(hook_);
  ASSERT_TRUE(std::ofstream(root_.File("libvgpu.so")) << "ELF");
  ASSERT_TRUE(plugin::InstallHookFiles(hook_, root_.File("libvgpu.so")).ok());
  EXPECT_EQ(Read(hook_ + "/vgpu/libvgpu.so"), "ELF");
  EXPECT_EQ(Read(hook_ + "/vgpu/ld.so.preload"), "/usr/local/vgpu/libvgpu.so\n");
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  EXPECT_THAT(NewDriver()->Prepare({{"ml", "u-1", "c"}})["u-1"].error, IsEmpty());
}

TEST_F(DriverTest, WithoutConsumedCapacityTheClaimHasTheWholeGpu) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-1", "", nullptr)}));
  auto answers = NewDriver()->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(answers["u-1"].error, IsEmpty());
  const std::string limits = Read(Limits("u-1"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=40960m\n"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_SM_LIMIT=100\n"));
}

TEST_F(DriverTest, TwoGpusAndTwoSharesOfOneGpuInOneClaim) {
  source_.Put(Claim("c", "u-1",
                    {Result_("a", "hami-gpu-0", "s-1", {{"memory", "1Gi"}, {"cores", "20"}}),
                     Result_("b", "hami-gpu-1", "s-2", {{"memory", "2Gi"}, {"cores", "10"}}),
                     Result_("c", "hami-gpu-0", "s-3", {{"memory", "1Gi"}, {"cores", "20"}})}));
  auto answers = NewDriver()->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(answers["u-1"].error, IsEmpty());
  ASSERT_EQ(answers["u-1"].devices.size(), 3u);
  const std::string limits = Read(Limits("u-1"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=2048m\n"));  // the two shares
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_1=2048m\n"));
  EXPECT_THAT(limits, HasSubstr("CUDA_DEVICE_SM_LIMIT=40\n"));
  json spec = json::parse(Read(Spec("u-1")));
  EXPECT_EQ(spec["devices"][2]["containerEdits"]["env"],
            json::array({"HAMI_DRA_DEVICE_0=GPU-aaaa"}));
  EXPECT_EQ(spec["devices"][1]["containerEdits"]["env"],
            json::array({"HAMI_DRA_DEVICE_1=GPU-bbbb"}));
}

TEST_F(DriverTest, TheBrokerIsMountedWhenEnabled) {
  options_.broker = plugin::Broker::kEnabled;
  options_.broker_host_dir = root_.File("hostpid");
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto answers = NewDriver()->Prepare({{"ml", "u-1", "c"}});
  ASSERT_THAT(answers["u-1"].error, IsEmpty());
  json spec = json::parse(Read(Spec("u-1")));
  EXPECT_THAT(spec["containerEdits"]["env"].dump(), HasSubstr("LIBVGPU_HOSTPID_BROKER=1"));
  EXPECT_EQ(spec["containerEdits"]["mounts"][3],
            json({{"hostPath", root_.File("hostpid")},
                  {"containerPath", "/tmp/vgpulock/hostpid"},
                  {"options", {"ro", "nosuid", "nodev", "bind"}}}));
  EXPECT_THAT(Read(Limits("u-1")), HasSubstr("LIBVGPU_HOSTPID_BROKER=1\n"));
}

TEST_F(DriverTest, ACorruptCheckpointStopsTheDriverFromStarting) {
  ASSERT_TRUE(WriteFileAtomically(options_.checkpoint_path, "{", 0600).ok());
  auto d = Driver::Create(source_, gpus_, options_);
  ASSERT_FALSE(d.ok());
  EXPECT_THAT(d.error().message(), HasSubstr(options_.checkpoint_path));
}

// Runs `body` in a forked child and returns how it ended (waitpid's status).
template <typename F>
int InChild(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST_F(DriverTest, APluginKilledAfterPrepareIsCleanedUpByItsSuccessor) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  const int status = InChild([&] {
    auto d = Driver::Create(source_, gpus_, options_);
    if (!d.ok() || !(*d)->Prepare({{"ml", "u-1", "c"}})["u-1"].error.empty()) _exit(1);
    raise(SIGKILL);
  });
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  ASSERT_TRUE(Exists(Spec("u-1")));
  source_.Remove("ml", "c");
  auto successor = NewDriver();
  EXPECT_EQ(successor->Unprepare({{"ml", "u-1", "c"}})["u-1"], "");
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Limits("u-1")));
  EXPECT_FALSE(Exists(Spec("u-1")));
}

TEST_F(DriverTest, APluginKilledMidwayLeavesARecordThatUnprepareAndPrepareFinish) {
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  // Killed while publishing the limits file: the directory exists, the CDI spec does not.
  options_.publish.inject = [](limits::PublishStep step) {
    if (step == limits::PublishStep::kChmod) raise(SIGKILL);
    return 0;
  };
  const int status = InChild([&] {
    auto d = Driver::Create(source_, gpus_, options_);
    if (d.ok()) (*d)->Prepare({{"ml", "u-1", "c"}});
    _exit(1);
  });
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
  options_.publish.inject = nullptr;
  ASSERT_TRUE(Exists(Dir("u-1")));
  ASSERT_FALSE(Exists(Spec("u-1")));
  // The limits file's temporary copy, written but never renamed.
  auto entries = [&] {
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(hook_ + "/vgpu/containers")) {
      names.push_back(e.path().filename().string());
    }
    return names;
  };
  ASSERT_THAT(entries(), Contains(StartsWith(".u-1_claim.limits.tmp-")));
  {
    auto successor = NewDriver();
    ASSERT_EQ(successor->Prepared().at("u-1").state, ClaimState::kPreparing);
    EXPECT_EQ(successor->Unprepare({{"ml", "u-1", "c"}})["u-1"], "");
    EXPECT_FALSE(Exists(Dir("u-1")));
    EXPECT_FALSE(Exists(Limits("u-1")));
    EXPECT_THAT(entries(), IsEmpty()) << "nothing of the claim is left, temporary files included";
  }
  // The same death, then a prepare: it starts again and completes.
  options_.publish.inject = [](limits::PublishStep step) {
    if (step == limits::PublishStep::kChmod) raise(SIGKILL);
    return 0;
  };
  InChild([&] {
    auto d = Driver::Create(source_, gpus_, options_);
    if (d.ok()) (*d)->Prepare({{"ml", "u-1", "c"}});
    _exit(1);
  });
  options_.publish.inject = nullptr;
  auto successor = NewDriver();
  auto answers = successor->Prepare({{"ml", "u-1", "c"}});
  EXPECT_THAT(answers["u-1"].error, IsEmpty());
  EXPECT_TRUE(Exists(Spec("u-1")));
  EXPECT_THAT(Read(Limits("u-1")), HasSubstr("CUDA_DEVICE_MEMORY_LIMIT_0=1024m\n"));
}

TEST_F(DriverTest, AFailedLimitsFileIsRolledBack) {
  options_.publish.inject = [](limits::PublishStep step) {
    return step == limits::PublishStep::kWrite ? ENOSPC : 0;
  };
  source_.Put(Claim("c", "u-1", {Result_("gpu", "hami-gpu-0", "", {{"memory", "1Gi"}})}));
  auto driver = NewDriver();
  auto answers = driver->Prepare({{"ml", "u-1", "c"}});
  EXPECT_THAT(answers["u-1"].error, Not(IsEmpty()));
  EXPECT_FALSE(Exists(Dir("u-1")));
  EXPECT_FALSE(Exists(Limits("u-1")));
  EXPECT_FALSE(Exists(Spec("u-1")));
  EXPECT_FALSE(Exists(Record("u-1")));
  EXPECT_TRUE(driver->Prepared().empty());
}

}  // namespace
}  // namespace hami::dra
