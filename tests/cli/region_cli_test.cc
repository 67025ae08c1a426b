// `hami inspect`, `hami top` and `hami region set` as an operator runs them, on regions this
// test makes with the library: from this process and from forked children, live ones and
// ones that died without unregistering.
#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <pwd.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "common/file.h"
#include "common/proc.h"
#include "region/region.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using region::Admission;
using region::IdentitySource;
using region::PolicySpec;
using region::Region;
using region::SlotStatus;
using region::UsageKind;
using ::testing::ContainsRegex;
using ::testing::HasSubstr;
using ::testing::Not;
using ::testing::StartsWith;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr char kUuid0[] = "GPU-aaaaaaaa-0000-4000-8000-000000000000";
constexpr char kUuid1[] = "GPU-bbbbbbbb-0000-4000-8000-000000000000";
constexpr char kNobody[] = "65534";

struct Outcome {
  int status;
  std::string out;
};

std::string HamiPath() { return std::string(HAMI_BIN_DIR) + "/hami"; }

// Runs `prefix... hami args...` with stderr merged into stdout. The region variable is unset
// unless `env` sets it, so the test never reads the machine's own region.
Outcome HamiWith(std::vector<std::string> prefix, const std::vector<std::string>& args,
                 std::map<std::string, std::string> env = {}) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  argv.insert(argv.end(), prefix.begin(), prefix.end());
  argv.push_back(HamiPath());
  argv.insert(argv.end(), args.begin(), args.end());
  env.emplace("CUDA_DEVICE_MEMORY_SHARED_CACHE", "");
  Subprocess p(argv, env);
  std::string out = p.ReadAll(20000);
  return {p.Wait(20000), out};
}

Outcome Hami(const std::vector<std::string>& args, std::map<std::string, std::string> env = {}) {
  return HamiWith({}, args, std::move(env));
}

nlohmann::json Json(const Outcome& o) {
  auto j = nlohmann::json::parse(o.out, nullptr, false);
  EXPECT_FALSE(j.is_discarded()) << o.out;
  return j;
}

PolicySpec TwoDevices(uint64_t limit0 = 1ull << 30, uint64_t limit1 = 0) {
  PolicySpec p;
  p.device_count = 2;
  p.memory_limit[0] = limit0;
  p.memory_limit[1] = limit1;
  p.sm_limit[0] = 30;
  p.uuid[0] = kUuid0;
  p.uuid[1] = kUuid1;
  return p;
}

void WriteFile(const std::string& path, const std::string& data) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  auto fd = OpenRegularFile(path, O_CREAT | O_WRONLY | O_TRUNC, 0644);
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  ASSERT_TRUE(WriteAll(fd->get(), data).ok());
}

// Writes a 32-bit field of a region file in place, as the monitor does through its mapping.
void Poke32(const std::string& path, size_t offset, uint32_t value) {
  auto fd = OpenRegularFile(path, O_WRONLY);
  ASSERT_TRUE(fd.ok()) << fd.error().message();
  ASSERT_EQ(pwrite(fd->get(), &value, sizeof(value), off_t(offset)), ssize_t(sizeof(value)));
}

class RegionCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/hami-region-cli-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    path_ = dir_ + "/usage.cache";
  }

  void TearDown() override {
    for (pid_t pid : children_) {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
    std::filesystem::remove_all(dir_);
  }

  std::unique_ptr<Region> Make(const std::string& path, const PolicySpec& spec = TwoDevices()) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    auto r = Region::Open(path, &spec, region::Create::kIfMissing, nullptr);
    EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
    return r.ok() ? std::move(r).value() : nullptr;
  }

  // The region at path_ with this process registered holding 8 MiB on device 0, and a dead
  // owner ("doomed", `*dead`, in `*dead_slot`) that left 16 MiB there.
  std::unique_ptr<Region> WithADeadOwner(pid_t* dead, int* dead_slot) {
    auto r = Make(path_);
    if (r == nullptr || !r->Register().ok() ||
        r->Reserve(0, 8 * kMiB, UsageKind::kData) != Admission::kOk) {
      ADD_FAILURE() << "the region could not be made";
      return nullptr;
    }
    *dead = Holder(path_, "doomed", 0, 16 * kMiB, /*stay=*/false, dead_slot);
    EXPECT_GT(*dead, 0);
    return r;
  }

  // Forks a child named `comm` that registers in the region at `path` and reserves `bytes`
  // on `device`. With `stay`, it holds its slot until the test ends; without, it exits
  // without unregistering, as a killed process would, leaving a dead owner. Returns the
  // child's PID once it has done so (-1 on failure) and its slot in `*slot`.
  pid_t Holder(const std::string& path, const char* comm, int device, uint64_t bytes, bool stay,
               int* slot) {
    int ready[2];
    if (pipe(ready) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
      close(ready[0]);
      prctl(PR_SET_NAME, comm);
      auto r = Region::Open(path, nullptr, region::Create::kNever, nullptr);
      if (!r.ok()) _exit(1);
      auto s = (*r)->Register();
      if (!s.ok() || (*r)->Reserve(device, bytes, UsageKind::kData) != Admission::kOk) _exit(2);
      int index = *s;
      if (write(ready[1], &index, sizeof(index)) != ssize_t(sizeof(index))) _exit(3);
      if (!stay) _exit(0);  // no Unregister: the slot and its usage stay behind
      for (;;) pause();
    }
    close(ready[1]);
    int index = -1;
    bool ok = read(ready[0], &index, sizeof(index)) == ssize_t(sizeof(index));
    close(ready[0]);
    if (stay) {
      children_.push_back(pid);
    } else {
      int st = 0;
      waitpid(pid, &st, 0);
      ok = ok && WIFEXITED(st) && WEXITSTATUS(st) == 0;
    }
    *slot = index;
    return ok ? pid : -1;
  }

  std::string dir_, path_;
  std::vector<pid_t> children_;
};

// ---- hami inspect ----

TEST_F(RegionCliTest, InspectPrintsThePolicyTheUsageByKindAndEverySlot) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  r->SetHostPid(4242, IdentitySource::kBroker);
  ASSERT_EQ(r->Reserve(0, 60 * kMiB, UsageKind::kData), Admission::kOk);
  ASSERT_EQ(r->Reserve(0, 4 * kMiB, UsageKind::kContext), Admission::kOk);

  Outcome o = Hami({"inspect", "--no-nvml", path_});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("file     " + path_ + " (opened read-write)"));
  EXPECT_THAT(o.out, HasSubstr("layout   2.5, fingerprint 0x"));
  EXPECT_THAT(o.out, HasSubstr("creator  pid " + std::to_string(getpid()) + " (" + ProcessComm() +
                               ") at 20"));
  EXPECT_THAT(o.out, HasSubstr("policy   2 device(s), generation 0, priority 1 (low), core "
                               "policy default, utilization switch on, oversubscribe off, "
                               "paused no"));
  EXPECT_THAT(o.out, HasSubstr("changed  never"));
  EXPECT_THAT(o.out, ContainsRegex(std::string("0 +") + kUuid0 + " +1.0 GiB +30%"));
  EXPECT_THAT(o.out, ContainsRegex(std::string("1 +") + kUuid1 + " +unlimited +unlimited"));
  EXPECT_THAT(o.out, ContainsRegex("0 +64.0 MiB / 1.0 GiB +64.0 MiB +0 +0%"));
  EXPECT_THAT(o.out, HasSubstr("by kind: context 4.0 MiB, module 0 B, data 60.0 MiB, pool 0 B, "
                               "graph 0 B, vmm 0 B, other 0 B"));
  EXPECT_THAT(o.out, ContainsRegex(std::to_string(r->slot()) + " +live +yes +" +
                                   std::to_string(getpid()) + " +4242 +broker +running +" +
                                   ProcessComm() + " +20[0-9-]+T[0-9:]+Z +0: 64.0 MiB, 1: 0 B"));
  EXPECT_THAT(
      o.out,
      HasSubstr("check: the region's own records are consistent; NVML's view was not checked"));
}

TEST_F(RegionCliTest, InspectJsonCarriesTheSameFactsInStableFields) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  int slot = *r->Register();
  r->SetHostPid(4242, IdentitySource::kProcfs);
  ASSERT_EQ(r->Reserve(0, 60 * kMiB, UsageKind::kData), Admission::kOk);
  ASSERT_EQ(r->Reserve(1, 4 * kMiB, UsageKind::kPool), Admission::kOk);

  Outcome o = Hami({"inspect", "--no-nvml", path_, "--json"});
  ASSERT_EQ(o.status, 0) << o.out;
  nlohmann::json j = Json(o);
  EXPECT_EQ(j["file"], path_);
  EXPECT_EQ(j["access"], "read-write");
  EXPECT_EQ(j["layout"]["major"], 2);
  EXPECT_EQ(j["creator"]["pid"], getpid());
  EXPECT_EQ(j["creator"]["comm"], ProcessComm());
  EXPECT_GT(j["creator"]["created"]["realtime_ns"].get<int64_t>(), 0);
  const nlohmann::json& pol = j["policy"];
  EXPECT_EQ(pol["device_count"], 2);
  EXPECT_EQ(pol["generation"], 0);
  EXPECT_EQ(pol["priority"], 1);
  EXPECT_EQ(pol["core_policy"], "default");
  EXPECT_EQ(pol["utilization_switch"], 1);
  EXPECT_EQ(pol["paused"], false);
  EXPECT_TRUE(pol["changed"].is_null());
  ASSERT_EQ(j["devices"].size(), 2u);
  const nlohmann::json& d0 = j["devices"][0];
  EXPECT_EQ(d0["uuid"], kUuid0);
  EXPECT_EQ(d0["memory_limit_bytes"], 1ull << 30);
  EXPECT_EQ(d0["sm_limit_percent"], 30);
  EXPECT_EQ(d0["used_bytes"], 60 * kMiB);
  EXPECT_EQ(d0["peak_bytes"], 60 * kMiB);
  EXPECT_EQ(d0["rejected"], 0);
  EXPECT_EQ(d0["usage_bytes"]["data"], 60 * kMiB);
  EXPECT_EQ(d0["usage_bytes"]["context"], 0);
  EXPECT_EQ(d0["usage_bytes"].size(), 7u) << d0["usage_bytes"];
  EXPECT_EQ(j["devices"][1]["memory_limit_bytes"], 0);
  EXPECT_EQ(j["devices"][1]["usage_bytes"]["pool"], 4 * kMiB);
  ASSERT_EQ(j["slots"].size(), 1u);
  const nlohmann::json& s = j["slots"][0];
  EXPECT_EQ(s["index"], slot);
  EXPECT_EQ(s["state"], "live");
  EXPECT_EQ(s["alive"], true);
  EXPECT_EQ(s["pid"], getpid());
  EXPECT_EQ(s["host_pid"], 4242);
  EXPECT_EQ(s["identity"], "procfs");
  EXPECT_EQ(s["status"], "running");
  EXPECT_EQ(s["comm"], ProcessComm());
  EXPECT_EQ(s["used_bytes"], nlohmann::json::array({60 * kMiB, 4 * kMiB}));
  EXPECT_TRUE(j["inconsistencies"].empty());
  EXPECT_FALSE(j.contains("repair"));
}

// Oversubscription and imports: what the container holds outside its device budget, in the
// text and in the JSON, per process and for the container.
TEST_F(RegionCliTest, InspectShowsMemoryServedFromHostAndMemoryImportedOutsideTheBudget) {
  PolicySpec spec = TwoDevices();
  spec.oversubscribe = true;
  spec.host_limit = 1ull << 30;
  auto r = Make(path_, spec);
  ASSERT_NE(r, nullptr);
  int slot = *r->Register();
  ASSERT_EQ(r->Reserve(0, 60 * kMiB, UsageKind::kData), Admission::kOk);
  ASSERT_EQ(r->ReserveHost(300 * kMiB), Admission::kOk);
  ASSERT_EQ(r->ReserveHost(800 * kMiB), Admission::kOverLimit);
  r->AddImported(12 * kMiB);

  Outcome o = Hami({"inspect", "--no-nvml", path_});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("oversubscribe on"));
  EXPECT_THAT(o.out, HasSubstr("outside the device budget: 300.0 MiB served from host memory of "
                               "a 1.0 GiB host budget (peak 300.0 MiB, 1 refused); 12.0 MiB "
                               "mapped from other processes"));
  EXPECT_THAT(o.out, HasSubstr("0: 60.0 MiB, 1: 0 B, host: 300.0 MiB, imported: 12.0 MiB"));
  EXPECT_THAT(o.out, ContainsRegex("0 +60.0 MiB / 1.0 GiB")) << "the device's books alone";

  o = Hami({"inspect", "--no-nvml", path_, "--json"});
  ASSERT_EQ(o.status, 0) << o.out;
  nlohmann::json j = Json(o);
  EXPECT_EQ(j["policy"]["host_limit_bytes"], 1ull << 30);
  EXPECT_EQ(j["outside_budget"]["host_limit_bytes"], 1ull << 30);
  EXPECT_EQ(j["outside_budget"]["spilled_bytes"], 300 * kMiB);
  EXPECT_EQ(j["outside_budget"]["spilled_peak_bytes"], 300 * kMiB);
  EXPECT_EQ(j["outside_budget"]["spill_rejected"], 1);
  EXPECT_EQ(j["outside_budget"]["imported_bytes"], 12 * kMiB);
  EXPECT_EQ(j["devices"][0]["used_bytes"], 60 * kMiB);
  ASSERT_EQ(j["slots"].size(), 1u);
  EXPECT_EQ(j["slots"][0]["index"], slot);
  EXPECT_EQ(j["slots"][0]["spilled_bytes"], 300 * kMiB);
  EXPECT_EQ(j["slots"][0]["imported_bytes"], 12 * kMiB);
}

// The same figures in `hami top`: the container's host line against its host budget, and each
// process's host and imported memory on rows of their own; a region without oversubscription or
// imports has no host line.
TEST_F(RegionCliTest, TopShowsMemoryServedFromHostAndMemoryImportedOutsideTheBudget) {
  PolicySpec spec = TwoDevices();
  spec.oversubscribe = true;
  spec.host_limit = 1ull << 30;
  auto r = Make(path_, spec);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  ASSERT_EQ(r->Reserve(0, 60 * kMiB, UsageKind::kData), Admission::kOk);
  ASSERT_EQ(r->ReserveHost(256 * kMiB), Admission::kOk);
  r->AddImported(12 * kMiB);

  Outcome o = Hami({"top", path_, "--once"});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, ContainsRegex("HOST +256.0 MiB / 1.0 GiB +\\[#+ +\\] +25% +spilled to host "
                                   "memory; 12.0 MiB imported"))
      << o.out;
  const std::string pid = std::to_string(getpid());
  EXPECT_THAT(o.out, ContainsRegex("0 +" + pid + " .* alive +60.0 MiB")) << o.out;
  EXPECT_THAT(o.out, ContainsRegex("host +" + pid + " .* alive +256.0 MiB")) << o.out;
  EXPECT_THAT(o.out, ContainsRegex("imp +" + pid + " .* alive +12.0 MiB")) << o.out;

  const std::string plain = dir_ + "/plain.cache";
  auto q = Make(plain);
  ASSERT_NE(q, nullptr);
  o = Hami({"top", plain, "--once"});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, Not(HasSubstr("HOST"))) << o.out;
}

TEST_F(RegionCliTest, InspectExitsThreeForADeadOwnerAndRepairReclaimsIt) {
  pid_t dead = -1;
  int dead_slot = -1;
  auto r = WithADeadOwner(&dead, &dead_slot);
  ASSERT_NE(r, nullptr);
  ASSERT_GT(dead, 0);

  Outcome o = Hami({"inspect", "--no-nvml", path_});
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_THAT(o.out, ContainsRegex(std::to_string(dead_slot) + " +live +no +" +
                                   std::to_string(dead) + " +- +unknown +running +doomed"));
  EXPECT_THAT(o.out, HasSubstr("24.0 MiB / 1.0 GiB"));
  EXPECT_THAT(o.out, HasSubstr("check: 1 inconsistency"));
  EXPECT_THAT(o.out, HasSubstr("slot " + std::to_string(dead_slot) + ": its owner (pid " +
                               std::to_string(dead) + ", doomed) is gone"));
  nlohmann::json j = Json(Hami({"inspect", "--no-nvml", "--json", path_}));
  ASSERT_EQ(j["inconsistencies"].size(), 1u);
  EXPECT_EQ(j["inconsistencies"][0]["kind"], "dead_owner");
  EXPECT_EQ(j["inconsistencies"][0]["slot"], dead_slot);
  EXPECT_TRUE(j["inconsistencies"][0]["device"].is_null());
  EXPECT_EQ(r->Slots().size(), 2u) << "inspect without --repair changes nothing";

  Outcome repaired = Hami({"inspect", "--no-nvml", path_, "--repair"});
  EXPECT_EQ(repaired.status, 0) << repaired.out;
  EXPECT_THAT(repaired.out, HasSubstr("repair: reclaimed 1 dead slot(s)"));
  EXPECT_THAT(repaired.out, HasSubstr("8.0 MiB / 1.0 GiB"));
  EXPECT_THAT(repaired.out, HasSubstr("check: the region's own records are consistent"));
  EXPECT_EQ(r->Snapshot(0).used_bytes, 8 * kMiB);
  ASSERT_EQ(r->Slots().size(), 1u);
  EXPECT_EQ(r->Slots()[0].pid, getpid());

  nlohmann::json again = Json(Hami({"inspect", "--no-nvml", path_, "--repair", "--json"}));
  EXPECT_EQ(again["repair"]["reclaimed"], 0);
  EXPECT_EQ(Hami({"inspect", "--no-nvml", path_}).status, 0);
}

// What libvgpu's NVML cross-check recorded (memory NVML shows past a process's books) is an
// inconsistency: inspect names the process and the gap, and exits 3.
TEST_F(RegionCliTest, InspectReportsMemoryHeldPastTheBooksAndExitsThree) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  r->SetHostPid(4242, IdentitySource::kBroker);
  ASSERT_EQ(r->Reserve(0, 60 * kMiB, UsageKind::kData), Admission::kOk);
  const std::vector<region::SlotView> slots = r->Slots();
  const std::vector<region::NvmlProcessUse> nvml = {{4242, 2108 * kMiB}};
  r->RecordCrossCheck(
      region::CrossCheckDevice(0, slots, nvml, region::kDefaultUnaccountedToleranceBytes),
      MonotonicNs());

  Outcome o = Hami({"inspect", "--no-nvml", path_});
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_THAT(o.out, HasSubstr("device 0: host pid 4242 (pid " + std::to_string(getpid())));
  EXPECT_THAT(o.out,
              HasSubstr("holds 2.1 GiB as NVML counts it but its books say 60.0 MiB: 2.0 GiB (" +
                        std::to_string(2048 * kMiB) + " bytes) unaccounted"));
  EXPECT_THAT(o.out, HasSubstr("cross-check: not made: --no-nvml"));
  nlohmann::json j = Json(Hami({"inspect", "--json", "--no-nvml", path_}));
  EXPECT_EQ(j["devices"][0]["crosscheck"]["unaccounted_bytes"], 2048 * kMiB);
  EXPECT_EQ(j["devices"][0]["crosscheck"]["largest_host_pid"], 4242);
  EXPECT_EQ(j["slots"][0]["unaccounted"]["bytes"], 2048 * kMiB);
  bool listed = false;
  for (const auto& i : j["inconsistencies"]) listed |= i["kind"] == "unaccounted";
  EXPECT_TRUE(listed);

  // Closed by the next check: consistent again.
  const std::vector<region::NvmlProcessUse> agree = {{4242, 60 * kMiB}};
  r->RecordCrossCheck(
      region::CrossCheckDevice(0, r->Slots(), agree, region::kDefaultUnaccountedToleranceBytes),
      MonotonicNs());
  EXPECT_EQ(Hami({"inspect", "--no-nvml", path_}).status, 0);
}

// A lock word forged to look held by a live process (here, this test's): inspect, its repair
// and region set each give the lock a bounded wait, report it, and return.
TEST_F(RegionCliTest, AForgedLockWordIsReportedNeverWaitedOnForever) {
  pid_t dead = -1;
  int dead_slot = -1;
  auto r = WithADeadOwner(&dead, &dead_slot);
  ASSERT_NE(r, nullptr);
  ASSERT_GT(dead, 0);
  auto* word =
      reinterpret_cast<int*>(&const_cast<region::layout::File&>(r->file()).devices[0].mutex);
  ASSERT_EQ(*word, 0);
  *word = int(getpid());
  const std::string wedged = "device 0 locked by pid " + std::to_string(getpid());

  Outcome o = Hami({"inspect", "--no-nvml", path_});
  EXPECT_EQ(o.status, 3) << o.out;
  EXPECT_THAT(o.out, HasSubstr(wedged));
  EXPECT_THAT(o.out, HasSubstr("wedged?"));
  nlohmann::json j = Json(Hami({"inspect", "--no-nvml", "--json", path_}));
  bool listed = false;
  for (const auto& i : j["inconsistencies"]) listed |= i["kind"] == "wedged_lock";
  EXPECT_TRUE(listed) << j.dump();

  Outcome repaired = Hami({"inspect", "--no-nvml", path_, "--repair"});
  EXPECT_EQ(repaired.status, 3) << repaired.out;
  EXPECT_THAT(repaired.out, HasSubstr("repair: reclaimed 0 dead slot(s)"))
      << "the dead slot keeps its usage while its device cannot be locked";
  EXPECT_THAT(repaired.out, HasSubstr(wedged));

  Outcome set = Hami({"region", "set", path_, "--memory-limit", "0=2g"});
  EXPECT_EQ(set.status, 0) << set.out;
  EXPECT_EQ(r->MemoryLimit(0), 2 * kGiB);

  *word = 0;  // let go, so this handle and the next inspect may lock again
  Outcome after = Hami({"inspect", "--no-nvml", path_, "--repair"});
  EXPECT_THAT(after.out, HasSubstr("repair: reclaimed 1 dead slot(s)")) << after.out;
  EXPECT_EQ(after.status, 0) << after.out;
}

TEST_F(RegionCliTest, InspectRefusesWhatIsNotARegionNamingTheFile) {
  std::string foreign = dir_ + "/foreign.cache";
  WriteFile(foreign, std::string(8192, 'q'));
  std::string link = dir_ + "/link.cache";
  ASSERT_NE(Make(path_), nullptr);
  ASSERT_EQ(symlink(path_.c_str(), link.c_str()), 0);
  std::string truncated = dir_ + "/truncated.cache";
  ASSERT_NE(Make(truncated), nullptr);
  ASSERT_EQ(truncate(truncated.c_str(), 100000), 0);
  std::string tiny = dir_ + "/tiny.cache";
  ASSERT_NE(Make(tiny), nullptr);
  ASSERT_EQ(truncate(tiny.c_str(), 100), 0);
  std::string empty = dir_ + "/empty.cache";
  WriteFile(empty, "");
  std::string fifo = dir_ + "/fifo.cache";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {foreign, "not a shared region (bad magic)"},
      {link, "is a symbolic link"},
      {truncated, "the file is 100000 bytes but its header says"},
      {tiny, "the file is 100 bytes, smaller than a header"},
      {empty, "is empty"},
      {fifo, "not a regular file"},
      {dir_ + "/missing.cache", "No such file or directory"},
  };
  for (const auto& [file, why] : cases) {
    for (const char* format : {"--repair", "--json"}) {
      Outcome o = Hami({"inspect", "--no-nvml", file, format});
      EXPECT_EQ(o.status, 2) << file << ": " << o.out;
      EXPECT_THAT(o.out, StartsWith("hami inspect: "));
      EXPECT_THAT(o.out, HasSubstr(file));
      EXPECT_THAT(o.out, HasSubstr(why));
    }
  }
  EXPECT_EQ(*ReadFileToString(foreign), std::string(8192, 'q')) << "left as it was";
}

TEST_F(RegionCliTest, InspectRefusesADeviceCountTheLayoutCannotHold) {
  ASSERT_NE(Make(path_), nullptr);
  Poke32(path_,
         offsetof(region::layout::File, policy) + offsetof(region::layout::Policy, device_count),
         99);
  Outcome o = Hami({"inspect", "--no-nvml", path_, "--repair"});
  EXPECT_EQ(o.status, 2) << o.out;
  EXPECT_THAT(o.out, HasSubstr("hami inspect: shared region " + path_ +
                               ": its policy counts 99 devices, more than the 16"));
}

TEST_F(RegionCliTest, InspectOpensReadOnlyWhenItMayNotWriteAndThenCannotRepair) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  std::vector<std::string> as_reader;
  if (geteuid() == 0) {
    // Root may write any file: run hami as nobody, who may read the file and not write it.
    if (access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs setpriv to drop root";
    as_reader = {"/usr/bin/setpriv", std::string("--reuid=") + kNobody,
                 std::string("--regid=") + kNobody, "--clear-groups"};
    ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
    ASSERT_EQ(chmod(path_.c_str(), 0644), 0);
  } else {
    ASSERT_EQ(chmod(path_.c_str(), 0444), 0);
  }
  Outcome o = HamiWith(as_reader, {"inspect", "--no-nvml", path_});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("(opened read-only)"));
  EXPECT_THAT(o.out, ContainsRegex("live +yes +" + std::to_string(getpid())));
  Outcome repair = HamiWith(as_reader, {"inspect", "--no-nvml", path_, "--repair"});
  EXPECT_EQ(repair.status, 1) << repair.out;
  EXPECT_THAT(repair.out,
              HasSubstr("repair: not done: " + path_ + " could only be opened read-only"));
}

// ---- hami top ----

class RegionCliTopTest : public RegionCliTest {
 protected:
  // DIR/a/usage.cache: this process, 64 MiB on device 0, observed at 42% SM.
  // DIR/b/c/usage.cache: a live child "holder-b", 32 MiB on device 1.
  // DIR/broken.cache, DIR/1/2/3/level4.cache: not regions (reported and skipped).
  // DIR/notes.txt, DIR/1/2/3/4/level5.cache: not looked at (name; too deep).
  void SetUp() override {
    RegionCliTest::SetUp();
    top_ = dir_ + "/top";
    a_ = top_ + "/a/usage.cache";
    b_ = top_ + "/b/c/usage.cache";
    region_a_ = Make(a_);
    ASSERT_NE(region_a_, nullptr);
    int slot_a = *region_a_->Register();
    ASSERT_EQ(region_a_->Reserve(0, 64 * kMiB, UsageKind::kData), Admission::kOk);
    using region::layout::File;
    Poke32(a_, offsetof(File, devices) + offsetof(region::layout::DeviceAccount, sm_util), 42);
    Poke32(a_,
           offsetof(File, slots) + size_t(slot_a) * sizeof(region::layout::Slot) +
               offsetof(region::layout::Slot, sm_util),
           17);
    region_b_ = Make(b_);
    ASSERT_NE(region_b_, nullptr);
    int slot_b = -1;
    holder_ = Holder(b_, "holder-b", 1, 32 * kMiB, /*stay=*/true, &slot_b);
    ASSERT_GT(holder_, 0);
    WriteFile(top_ + "/broken.cache", std::string(8192, 'q'));
    WriteFile(top_ + "/notes.txt", "not a region");
    WriteFile(top_ + "/1/2/3/level4.cache", "short");
    WriteFile(top_ + "/1/2/3/4/level5.cache", "short");
  }

  std::string top_, a_, b_;
  std::unique_ptr<Region> region_a_, region_b_;
  pid_t holder_ = -1;
};

TEST_F(RegionCliTopTest, OnceShowsEveryRegionUnderADirectoryAndSkipsBrokenFilesSayingWhy) {
  Outcome o = Hami({"top", top_, "--once"});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, Not(HasSubstr("\x1b"))) << "no escape codes in a single frame";
  EXPECT_THAT(o.out, HasSubstr(top_ + ": 2 regions"));
  EXPECT_THAT(o.out, HasSubstr("skipped: shared region " + top_ +
                               "/broken.cache: not a shared region (bad magic)"));
  EXPECT_THAT(o.out, HasSubstr("skipped: shared region " + top_ + "/1/2/3/level4.cache"));
  EXPECT_THAT(o.out, Not(HasSubstr("level5")));
  EXPECT_THAT(o.out, Not(HasSubstr("notes.txt")));
  // Region a: this process.
  EXPECT_THAT(o.out, HasSubstr(a_ + "  generation 0, priority 1, core policy default"));
  EXPECT_THAT(o.out, ContainsRegex("0 +64.0 MiB / 1.0 GiB +\\[#+ +\\] +6% +30% +42%"));
  EXPECT_THAT(o.out, ContainsRegex("1 +0 B / unlimited +\\[ +\\] +- +unlimited +0%"));
  EXPECT_THAT(o.out, ContainsRegex("0 +" + std::to_string(getpid()) + " +- +" + ProcessComm() +
                                   " +running +unknown +alive +64.0 MiB +17%"));
  // Region b: the child.
  EXPECT_THAT(o.out, HasSubstr(b_ + "  generation 0"));
  EXPECT_THAT(o.out, ContainsRegex("1 +32.0 MiB / unlimited"));
  EXPECT_THAT(o.out, ContainsRegex("1 +" + std::to_string(holder_) +
                                   " +- +holder-b +running +unknown +alive +32.0 MiB +0%"));
}

TEST_F(RegionCliTopTest, OnceJsonListsTheRegionsAndTheSkippedFiles) {
  Outcome o = Hami({"top", top_, "--once", "--json"});
  ASSERT_EQ(o.status, 0) << o.out;
  nlohmann::json j = Json(o);
  EXPECT_EQ(j["source"], top_);
  ASSERT_EQ(j["regions"].size(), 2u);
  EXPECT_EQ(j["regions"][0]["file"], a_);
  EXPECT_EQ(j["regions"][0]["access"], "read-only");
  EXPECT_EQ(j["regions"][0]["devices"][0]["sm_util_percent"], 42);
  EXPECT_EQ(j["regions"][0]["slots"][0]["sm_util_percent"][0], 17);
  EXPECT_EQ(j["regions"][1]["file"], b_);
  EXPECT_EQ(j["regions"][1]["slots"][0]["pid"], holder_);
  EXPECT_EQ(j["regions"][1]["slots"][0]["comm"], "holder-b");
  EXPECT_EQ(j["regions"][1]["devices"][1]["used_bytes"], 32 * kMiB);
  ASSERT_EQ(j["skipped"].size(), 2u) << j["skipped"];
  EXPECT_EQ(j["skipped"][0]["file"], top_ + "/1/2/3/level4.cache");
  EXPECT_EQ(j["skipped"][1]["file"], top_ + "/broken.cache");
  EXPECT_THAT(j["skipped"][1]["error"].get<std::string>(), HasSubstr("bad magic"));
}

TEST_F(RegionCliTopTest, RefreshesByClearingTheTerminalUntilInterrupted) {
  Subprocess p({HamiPath(), "top", a_, "--interval", "0.05"},
               {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""}});
  int frames = 0;
  while (frames < 3) {
    auto line = p.ReadLine(5000);
    ASSERT_TRUE(line.has_value()) << "after " << frames << " frames";
    if (line->find("\x1b[H\x1b[2J") != std::string::npos) {
      ++frames;
      EXPECT_THAT(*line, HasSubstr(a_ + ": 1 region"));
    }
  }
  p.Kill(SIGINT);
  EXPECT_EQ(p.Wait(), 128 + SIGINT);
}

TEST_F(RegionCliTest, TopReadsTheRegionTheEnvironmentNamesByDefault) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  Outcome o = Hami({"top", "--once"}, {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", path_}});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr(path_ + ": 1 region"));
  EXPECT_THAT(o.out, ContainsRegex("- +" + std::to_string(getpid()) + " +- +" + ProcessComm()));
}

TEST_F(RegionCliTest, InspectReadsTheRegionTheEnvironmentNamesByDefault) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  Outcome o = Hami({"inspect", "--no-nvml"}, {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", path_}});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("file     " + path_ + " (opened read-write)"));
  // A region the environment names but nobody has made yet: said so, naming where it came from.
  Outcome missing =
      Hami({"inspect", "--no-nvml"}, {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_ + "/none.cache"}});
  EXPECT_EQ(missing.status, 2) << missing.out;
  EXPECT_THAT(missing.out, HasSubstr(dir_ + "/none.cache"));
  EXPECT_THAT(missing.out, HasSubstr("(CUDA_DEVICE_MEMORY_SHARED_CACHE in the environment)"));
  Outcome top_missing =
      Hami({"top", "--once"}, {{"CUDA_DEVICE_MEMORY_SHARED_CACHE", dir_ + "/none.cache"}});
  EXPECT_EQ(top_missing.status, 2) << top_missing.out;
  EXPECT_THAT(top_missing.out,
              HasSubstr(dir_ + "/none.cache (CUDA_DEVICE_MEMORY_SHARED_CACHE in the environment): "
                               "No such file or directory"));
}

// Without a path and with no region in the caller's environment, top and inspect read none:
// they list the regions this host shows (the device plugin's, by pod) and whose they are.
TEST_F(RegionCliTest, WithoutAPathOrARegionOfTheirOwnTopAndInspectListRegionsAndReadNone) {
  const std::string hook = dir_ + "/hook";
  const std::string containers = hook + "/vgpu/containers";
  const std::string uid_a = "11111111-0000-4000-8000-00000000000a";
  const std::string uid_b = "22222222-0000-4000-8000-00000000000b";
  ASSERT_NE(Make(containers + "/" + uid_a + "_main/usage.cache"), nullptr);
  ASSERT_NE(Make(containers + "/" + uid_b + "_side/usage.cache"), nullptr);
  WriteFile(containers + "/" + uid_a + "_main/pod.json",
            R"({"container":"main","name":"train","namespace":"team-a","uid":")" + uid_a + R"("})");
  WriteFile(containers + "/" + uid_b + "_side.limits", "HAMI_LIMITS_FORMAT=1\n");
  struct passwd* me = getpwuid(geteuid());
  ASSERT_NE(me, nullptr);
  const std::string owner = std::string("owner ") + me->pw_name;

  for (const char* command : {"top", "inspect"}) {
    std::vector<std::string> args = {command, "--hook-path", hook};
    args.push_back(std::string(command) == "top" ? "--once" : "--no-nvml");
    Outcome o = Hami(args);
    const std::string prefix = std::string("hami ") + command + ": ";
    EXPECT_EQ(o.status, 2) << o.out;
    EXPECT_THAT(o.out, HasSubstr(prefix + "no region given, and CUDA_DEVICE_MEMORY_SHARED_CACHE "
                                          "names none here"));
    EXPECT_THAT(o.out, HasSubstr(prefix + "regions on this host:\n"));
    EXPECT_THAT(o.out, HasSubstr("  " + containers + "/" + uid_a + "_main/usage.cache  " + owner +
                                 "  pod team-a/train (container main, pod UID " + uid_a + ")\n"));
    EXPECT_THAT(o.out, HasSubstr("  " + containers + "/" + uid_b + "_side/usage.cache  " + owner +
                                 "  pod UID " + uid_b + ", container side (no pod record)\n"));
    EXPECT_THAT(o.out, HasSubstr(prefix + "give one: hami " + command + " REGION\n"));
    // Nothing was read: no frame, no report.
    EXPECT_THAT(o.out, Not(HasSubstr("hami top  ")));
    EXPECT_THAT(o.out, Not(HasSubstr("file     ")));
  }
  // An empty hook path: the places looked at are named.
  Outcome none = Hami({"top", "--once", "--hook-path", dir_ + "/no-hook"});
  EXPECT_EQ(none.status, 2);
  EXPECT_THAT(none.out, ContainsRegex("no region found \\(looked at .*" + dir_ +
                                      "/no-hook/vgpu/containers\\)|regions on this host"));
}

TEST_F(RegionCliTest, InspectReadsADraClaimsRegionAsAnyOtherAndTheListNamesTheClaim) {
  // The DRA driver's layout for a prepared claim: <claimUID>_claim with its region, the limits
  // file and the claim record beside it.
  const std::string hook = dir_ + "/hook";
  const std::string containers = hook + "/vgpu/containers";
  const std::string uid = "0b6f8c2e-6d1a-4f0e-9a55-3c2d1e7f9a10";
  const std::string claim_dir = containers + "/" + uid + "_claim";
  const std::string region_path = claim_dir + "/usage.cache";
  auto r = Make(region_path);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  ASSERT_EQ(r->Reserve(0, 48 * kMiB, UsageKind::kData), Admission::kOk);
  WriteFile(claim_dir + ".limits", "CUDA_DEVICE_MEMORY_LIMIT_0=1024m\nHAMI_LIMITS_FORMAT=1\n");
  WriteFile(claim_dir + ".claim",
            R"({"name":"shared-gpu","namespace":"ml","uid":")" + uid + "\"}\n");

  Outcome o = Hami({"inspect", "--no-nvml", region_path});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("file     " + region_path + " (opened read-write)"));
  EXPECT_THAT(o.out, ContainsRegex(std::string("0 +") + kUuid0 + " +1.0 GiB +30%"));
  EXPECT_THAT(
      o.out, ContainsRegex(std::to_string(r->slot()) + " +live +yes +" + std::to_string(getpid())));
  EXPECT_THAT(o.out, HasSubstr("check: the region's own records are consistent"));
  Outcome j = Hami({"inspect", "--no-nvml", "--json", region_path});
  EXPECT_EQ(j.status, 0) << j.out;
  EXPECT_EQ(Json(j)["file"], region_path);

  Outcome list = Hami({"inspect", "--no-nvml", "--hook-path", hook});
  EXPECT_EQ(list.status, 2) << list.out;
  struct passwd* me = getpwuid(geteuid());
  ASSERT_NE(me, nullptr);
  EXPECT_THAT(list.out, HasSubstr("  " + region_path + "  owner " + me->pw_name +
                                  "  claim ml/shared-gpu (claim UID " + uid + ")\n"));
}

TEST_F(RegionCliTest, TopRejectsABadIntervalAndAMissingPathNamingThem) {
  ASSERT_NE(Make(path_), nullptr);
  for (const char* bad : {"0", "-1", "abc", "1s", "", " 1", "1e3", "inf", "0.5.5"}) {
    Outcome o = Hami({"top", path_, "--once", "--interval", bad});
    EXPECT_EQ(o.status, 2) << bad << ": " << o.out;
    EXPECT_THAT(o.out, HasSubstr(std::string("hami top: --interval '") + bad + "'"));
  }
  Outcome missing = Hami({"top", dir_ + "/nowhere", "--once"});
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.out, HasSubstr(dir_ + "/nowhere: No such file or directory"));
  std::filesystem::create_directories(dir_ + "/empty-dir");
  Outcome none = Hami({"top", dir_ + "/empty-dir", "--once"});
  EXPECT_EQ(none.status, 1) << none.out;
  EXPECT_THAT(none.out, HasSubstr(": 0 regions"));
}

// ---- hami region set ----

TEST_F(RegionCliTest, RegionSetChangesLimitsThatAnotherHandleSeesAtItsNextReservation) {
  auto r = Make(path_, TwoDevices(10 * kMiB));
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  ASSERT_EQ(r->Reserve(0, 20 * kMiB, UsageKind::kData), Admission::kOverLimit);
  uint64_t generation = r->Policy().generation;

  Outcome o = Hami({"region", "set", path_, "--memory-limit", "0=32m", "--memory-limit", "1=2g",
                    "--sm-limit", "1=50", "--sm-limit", "0=30", "--priority", "0", "--core-policy",
                    "force"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("memory_limit[0]: 10.0 MiB -> 32.0 MiB"));
  EXPECT_THAT(o.out, HasSubstr("memory_limit[1]: unlimited -> 2.0 GiB"));
  EXPECT_THAT(o.out, HasSubstr("sm_limit[1]: unlimited -> 50%"));
  EXPECT_THAT(o.out, HasSubstr("sm_limit[0]: 30% (unchanged)"));
  EXPECT_THAT(o.out, HasSubstr("priority: 1 (low) -> 0 (high)"));
  EXPECT_THAT(o.out, HasSubstr("core_policy: default -> force"));
  EXPECT_THAT(o.out, HasSubstr("generation " + std::to_string(generation) + " -> " +
                               std::to_string(generation + 5)));

  region::PolicyView p = r->Policy();
  EXPECT_EQ(p.memory_limit[0], 32 * kMiB);
  EXPECT_EQ(p.memory_limit[1], 2ull << 30);
  EXPECT_EQ(p.sm_limit[0], 30u);
  EXPECT_EQ(p.sm_limit[1], 50u);
  EXPECT_EQ(p.priority, 0);
  EXPECT_EQ(p.core_policy, region::CorePolicy::kForce);
  EXPECT_EQ(p.generation, generation + 5);
  EXPECT_EQ(r->Reserve(0, 20 * kMiB, UsageKind::kData), Admission::kOk);

  Outcome lower = Hami({"region", "set", path_, "--memory-limit", "0=8m", "--memory-limit", "1=0"});
  ASSERT_EQ(lower.status, 0) << lower.out;
  EXPECT_THAT(lower.out, HasSubstr("memory_limit[1]: 2.0 GiB -> unlimited"));
  EXPECT_THAT(lower.out, HasSubstr("note: 20.0 MiB in use on device 0, above the new limit"));
  EXPECT_EQ(r->Policy().memory_limit[1], 0u);
  EXPECT_EQ(r->Reserve(0, 1, UsageKind::kData), Admission::kOverLimit);
}

TEST_F(RegionCliTest, RegionSetRejectsEachBadValueNamingItAndChangesNothing) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  const region::PolicyView before = r->Policy();
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--memory-limit", "0=4x"}, "--memory-limit '0=4x': unknown size suffix"},
      {{"--memory-limit", "0="}, "--memory-limit '0=': empty value"},
      {{"--memory-limit", "4g"}, "--memory-limit '4g': expected DEV=SIZE"},
      {{"--memory-limit", "x=4g"}, "--memory-limit 'x=4g': device index: not a non-negative"},
      {{"--memory-limit", "5=1g"}, "--memory-limit '5=1g': the region has no device 5 (it has 2)"},
      {{"--memory-limit", "16=1g"}, "--memory-limit '16=1g': no device 16"},
      {{"--memory-limit", "1=1g", "--memory-limit", "1=2g"},
       "--memory-limit '1=2g': device 1 is given twice"},
      {{"--sm-limit", "0=101"}, "--sm-limit '0=101': 101 is not a percentage (0 to 100)"},
      {{"--sm-limit", "0=50%"}, "--sm-limit '0=50%': trailing characters after the number"},
      {{"--priority", "2"}, "--priority '2': expected 0 (high) or 1 (low)"},
      {{"--core-policy", "sometimes"},
       "--core-policy 'sometimes': expected default, force or disable"},
      {{"--suspend", "1000"}, "--suspend '1000': slot 1000 holds no process"},
      {{"--suspend", "5000"}, "--suspend '5000': no such slot (slots are 0 to 1023)"},
      {{"--resume", "abc"}, "--resume 'abc': not a non-negative integer"},
      {{"--suspend", "0", "--resume", "0"}, "--resume '0': slot 0 is given twice"},
  };
  for (const auto& [bad, message] : cases) {
    // A good change beside each bad one: it must not be made either.
    std::vector<std::string> args = {"region", "set",        path_, "--memory-limit",
                                     "0=3g",   "--sm-limit", "1=40"};
    args.insert(args.end(), bad.begin(), bad.end());
    Outcome o = Hami(args);
    EXPECT_EQ(o.status, 2) << message << "\n" << o.out;
    EXPECT_THAT(o.out, HasSubstr("hami region set: " + message));
    EXPECT_THAT(o.out, HasSubstr("hami region set: nothing was changed"));
    EXPECT_THAT(o.out, Not(HasSubstr("->")));
  }
  Outcome both = Hami({"region", "set", path_, "--memory-limit", "0=4x", "--priority", "7"});
  EXPECT_EQ(both.status, 2);
  EXPECT_THAT(both.out, HasSubstr("'0=4x'"));
  EXPECT_THAT(both.out, HasSubstr("'7'")) << "every bad argument is named, not just the first";
  Outcome nothing = Hami({"region", "set", path_});
  EXPECT_EQ(nothing.status, 2);
  EXPECT_THAT(nothing.out, HasSubstr("nothing to change"));
  std::string foreign = dir_ + "/foreign.cache";
  WriteFile(foreign, std::string(8192, 'q'));
  Outcome not_region = Hami({"region", "set", foreign, "--priority", "0"});
  EXPECT_EQ(not_region.status, 2);
  EXPECT_THAT(not_region.out, HasSubstr(foreign));

  const region::PolicyView after = r->Policy();
  EXPECT_EQ(after.generation, before.generation);
  EXPECT_EQ(after.memory_limit, before.memory_limit);
  EXPECT_EQ(after.sm_limit, before.sm_limit);
  EXPECT_EQ(after.priority, before.priority);
  EXPECT_EQ(r->Slots()[0].status, SlotStatus::kRunning);
}

TEST_F(RegionCliTest, RegionSetSuspendsAndResumesSlots) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  int mine = *r->Register();
  int theirs = -1;
  pid_t child = Holder(path_, "holder", 0, kMiB, /*stay=*/true, &theirs);
  ASSERT_GT(child, 0);
  auto status_of = [&](int slot) {
    for (const region::SlotView& s : r->Slots()) {
      if (s.index == slot) return s.status;
    }
    return SlotStatus(0);
  };

  Outcome o = Hami({"region", "set", path_, "--suspend", std::to_string(mine), "--suspend",
                    std::to_string(theirs)});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(
      o.out, HasSubstr("slot " + std::to_string(mine) + " (pid " + std::to_string(getpid()) + ", " +
                       ProcessComm() + "): running -> suspended"));
  EXPECT_THAT(o.out, HasSubstr("slot " + std::to_string(theirs) + " (pid " + std::to_string(child) +
                               ", holder): running -> suspended"));
  EXPECT_EQ(status_of(mine), SlotStatus::kSuspended);
  EXPECT_EQ(status_of(theirs), SlotStatus::kSuspended);
  EXPECT_THAT(Hami({"inspect", "--no-nvml", path_}).out,
              ContainsRegex("holder +suspended|suspended +holder"));

  Outcome resumed = Hami({"region", "set", path_, "--resume", std::to_string(theirs)});
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_THAT(resumed.out, HasSubstr("suspended -> running"));
  EXPECT_EQ(status_of(theirs), SlotStatus::kRunning);
  EXPECT_EQ(status_of(mine), SlotStatus::kSuspended);
}

TEST_F(RegionCliTest, SuspendAndResumeCommandsChangeSlotsAsRegionSetDoes) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  int mine = *r->Register();
  auto status = [&] { return r->Slots()[0].status; };
  Outcome o = Hami({"suspend", path_, std::to_string(mine)});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("running -> suspended"));
  EXPECT_EQ(status(), SlotStatus::kSuspended);
  Outcome again = Hami({"resume", path_, std::to_string(mine)});
  ASSERT_EQ(again.status, 0) << again.out;
  EXPECT_THAT(again.out, HasSubstr("suspended -> running"));
  EXPECT_EQ(status(), SlotStatus::kRunning);
  Outcome bad = Hami({"suspend", path_, "77"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.out, HasSubstr("slot 77 holds no process"));
}

TEST_F(RegionCliTest, SuspendAndResumeAllChangeEveryProcessOfTheRegion) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  int mine = *r->Register();
  int theirs = -1;
  ASSERT_GT(Holder(path_, "holder", 0, kMiB, /*stay=*/true, &theirs), 0);
  auto statuses = [&] {
    std::vector<SlotStatus> out;
    for (const region::SlotView& s : r->Slots()) out.push_back(s.status);
    return out;
  };
  Outcome o = Hami({"suspend", path_, "all"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("slot " + std::to_string(mine) + " (pid "));
  EXPECT_THAT(o.out, HasSubstr("slot " + std::to_string(theirs) + " (pid "));
  EXPECT_EQ(statuses(), (std::vector<SlotStatus>{SlotStatus::kSuspended, SlotStatus::kSuspended}));
  Outcome resumed = Hami({"resume", path_, "all"});
  ASSERT_EQ(resumed.status, 0) << resumed.out;
  EXPECT_EQ(statuses(), (std::vector<SlotStatus>{SlotStatus::kRunning, SlotStatus::kRunning}));

  // `all` stands alone; errors name the command that was typed, never `hami region set`.
  Outcome mixed = Hami({"resume", path_, "all", "0"});
  EXPECT_EQ(mixed.status, 2);
  EXPECT_THAT(mixed.out, StartsWith("hami resume: SLOT 'all' stands alone"));
  Outcome bad = Hami({"suspend", path_, "77"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.out, StartsWith("hami suspend: SLOT '77': slot 77 holds no process\n"
                                  "hami suspend: nothing was changed\n"));
  Outcome gone = Hami({"resume", dir_ + "/none.cache", "all"});
  EXPECT_EQ(gone.status, 2);
  EXPECT_THAT(gone.out, StartsWith("hami resume: "));
  EXPECT_THAT(gone.out, HasSubstr(dir_ + "/none.cache"));
  for (const Outcome& e : {mixed, bad, gone}) EXPECT_THAT(e.out, Not(HasSubstr("region set")));
  EXPECT_EQ(statuses(), (std::vector<SlotStatus>{SlotStatus::kRunning, SlotStatus::kRunning}));
}

TEST_F(RegionCliTest, SuspendAllOfARegionWithoutProcessesChangesNothingAndSaysSo) {
  ASSERT_NE(Make(path_), nullptr);
  Outcome o = Hami({"suspend", path_, "all"});
  EXPECT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr(path_ + ": no process holds a slot; nothing to change"));
}

// No NVML where inspect looks: the cross-check is not made, the verdict says which part is
// unknown, and the exit status is 4, not 0. --no-nvml (asked for) keeps 0.
TEST_F(RegionCliTest, InspectWithoutNvmlExitsFourAndNeverSaysConsistentForTheCheckItSkipped) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  ASSERT_TRUE(r->Register().ok());
  const std::string nowhere = dir_ + "/no-such-dir/libnvidia-ml.so.1";
  Outcome o = Hami({"inspect", path_, "--nvml-library", nowhere});
  EXPECT_EQ(o.status, 4) << o.out;
  EXPECT_THAT(o.out, HasSubstr("cross-check: not made: "));
  EXPECT_THAT(o.out, HasSubstr("check: the region's own records are consistent; NVML's view was "
                               "not checked for any device, so that part is unknown"));
  EXPECT_THAT(o.out, Not(HasSubstr("check: consistent")));
  nlohmann::json j = Json(Hami({"inspect", path_, "--json", "--nvml-library", nowhere}));
  EXPECT_EQ(j["crosscheck"]["run"], false);
  EXPECT_EQ(Hami({"inspect", path_, "--json", "--nvml-library", nowhere}).status, 4);
  EXPECT_EQ(Hami({"inspect", path_, "--no-nvml"}).status, 0);
  // An inconsistency outranks the missing cross-check: 3.
  pid_t dead = 0;
  int dead_slot = -1;
  dead = Holder(path_, "doomed", 0, kMiB, /*stay=*/false, &dead_slot);
  ASSERT_GT(dead, 0);
  EXPECT_EQ(Hami({"inspect", path_, "--nvml-library", nowhere}).status, 3);
}

TEST_F(RegionCliTest, InspectAndTopShowTheComputeLimiterAndADegradedOne) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  region::layout::LimiterDevice& lim = r->Limiter(0);
  lim.mode.store(uint32_t(region::LimiterMode::kOpenLoop));
  lim.measured.store(2950);
  lim.rate.store(12000 * region::layout::kMilliUnitsPerWave);
  Outcome o = Hami({"inspect", "--no-nvml", path_});
  EXPECT_THAT(o.out, HasSubstr("compute: limiter open-loop (DEGRADED: a process has no host PID), "
                               "measured 29.5%, rate 12000 waves/s"));
  Outcome j = Hami({"inspect", "--no-nvml", "--json", path_});
  auto doc = nlohmann::json::parse(j.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  EXPECT_EQ(doc["devices"][0]["limiter"]["mode"], "open-loop");
  EXPECT_EQ(doc["devices"][1]["limiter"]["mode"], "off");
  EXPECT_THAT(Hami({"top", "--once", path_}).out, HasSubstr("limiter open-loop (DEGRADED"));
  lim.mode.store(uint32_t(region::LimiterMode::kClosedLoop));
  EXPECT_THAT(Hami({"inspect", "--no-nvml", path_}).out,
              HasSubstr("compute: limiter closed-loop, measured"));
}

TEST_F(RegionCliTest, RegionSetPausesAndTurnsTheUtilizationSwitch) {
  auto r = Make(path_);
  ASSERT_NE(r, nullptr);
  Outcome o = Hami({"region", "set", path_, "--paused", "on", "--utilization-switch", "off"});
  ASSERT_EQ(o.status, 0) << o.out;
  EXPECT_THAT(o.out, HasSubstr("paused: off -> on"));
  EXPECT_THAT(o.out, HasSubstr("utilization_switch: on -> off"));
  EXPECT_TRUE(r->Policy().paused);
  EXPECT_EQ(r->Policy().utilization_switch, 0u);
  Outcome back = Hami({"region", "set", path_, "--paused", "off"});
  ASSERT_EQ(back.status, 0) << back.out;
  EXPECT_FALSE(r->Policy().paused);
  Outcome bad = Hami({"region", "set", path_, "--paused", "yes"});
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.out, HasSubstr("--paused 'yes': expected on or off"));
}

}  // namespace
}  // namespace hami::testing
