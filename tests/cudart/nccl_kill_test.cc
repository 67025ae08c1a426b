// A peer killed in the middle of an all-reduce (nccl_ranks.cu --kill-rank): N NCCL ranks,
// one process and one simulated GPU each, connect through a first all-reduce; then one rank
// enqueues a second all-reduce and SIGKILLs itself while the others run theirs, watch it
// (cudaStreamQuery, ncclCommGetAsyncError), reclaim what the dead rank left (cudaMemGetInfo)
// and ncclCommAbort. Alone on the simulated driver and under libvgpu as one container (`hami
// run --memory`), with NCCL's cuMem allocator on (the ranks map each other's VMM allocations
// through file descriptors) and off (CUDA IPC handles).
//
// What NCCL does here: on the simulated GPU kernels run no code, so no survivor's kernel waits
// for the dead peer as it would on a real GPU (where the all-reduce never finishes and only
// ncclCommAbort ends it). The survivors' all-reduce completes, NCCL reports no asynchronous
// error, before or after the peer's death is known, and ncclCommAbort returns ncclSuccess
// without blocking. The test asserts exactly that, so that a change in what NCCL reports (or a
// hang, which the launcher's deadline turns into exit 124) fails it.
//
// The books: while every rank is alive, each one's books equal what the simulated driver says
// it uses. Once the killed rank is reaped and a survivor's cudaMemGetInfo has run, the dead
// rank's slot is gone from the region (its memory, exported memory included, is returned by
// the dead-process sweep), each survivor's books still equal the driver's, and the
// container's total on each device equals the driver's total, while the survivors still hold
// their communicators and what they imported from the dead rank. When every process has
// exited, nothing is left: no slot in the region, no process or memory in the driver.
#include <gtest/gtest.h>

#include <csignal>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "books.h"
#include "cudart_support.h"
#include "region/region.h"
#include "sim/state.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

constexpr int kDevices = 4;
constexpr int kDeadlineS = 60;      // the launcher kills the ranks past it
constexpr int kWaitMs = 90 * 1000;  // bounds, not expectations

enum class Under { kAlone, kLibvgpu };
// ranks, the rank killed, NCCL_CUMEM_ENABLE, where
using KillCase = std::tuple<int, int, int, Under>;
using Fields = std::map<std::string, std::string>;

class NcclKillTest : public ::testing::TestWithParam<KillCase> {
 protected:
  void SetUp() override {
    if (std::string reason = NcclRanksSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    state_ = SimEnv::NewStatePath();
  }

  int ranks() const { return std::get<0>(GetParam()); }
  int killed() const { return std::get<1>(GetParam()); }
  bool libvgpu() const { return std::get<3>(GetParam()) == Under::kLibvgpu; }
  int DeviceOf(int rank) const { return rank % kDevices; }  // as nccl_ranks picks it

  std::unique_ptr<Subprocess> Start() const {
    std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
    std::map<std::string, std::string> env = {
        {"HAMI_SIM_STATE", state_},
        {"HAMI_SIM_PROFILE", "h100-80g:" + std::to_string(kDevices)},
        {"HAMI_SIM_CONTEXT_SIZE", "64m"},
        {"LD_PRELOAD", ""},
        {"CUDA_VISIBLE_DEVICES", ""},
        {"CUDA_DEVICE_MEMORY_LIMIT", ""},
        {"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""},
        {"NCCL_CUMEM_ENABLE", std::to_string(std::get<2>(GetParam()))},
        {"NCCL_DEBUG", "WARN"},
        {"CUDA_MODULE_LOADING", ""}};
    if (libvgpu()) {
      for (std::string a : {std::string(HAMI_BIN_DIR) + "/hami", std::string("run"),
                            std::string("--sim"), "h100-80g:" + std::to_string(kDevices),
                            std::string("--memory"), std::string("1g"), std::string("--")}) {
        argv.push_back(a);
      }
      env["LD_LIBRARY_PATH"] = "";
    } else {
      env["LD_LIBRARY_PATH"] = HAMI_SIM_LIB_DIR;
    }
    for (std::string a : {CudartProgram("nccl_ranks"), std::string("run"), std::to_string(ranks()),
                          state_ + ".id", std::string("--deadline"), std::to_string(kDeadlineS),
                          std::string("--kill-rank"), std::to_string(killed())}) {
      argv.push_back(a);
    }
    return std::make_unique<Subprocess>(argv, env);
  }

  // Reads up to the next hold and returns its step ("" when the launcher ended instead),
  // keeping every rank's lines by kind (rank, rank-after, ...) and rank.
  std::string NextHold(Subprocess& p) {
    while (auto line = p.ReadLine(kWaitMs)) {
      out_ += *line + "\n";
      if (line->rfind("hold step=", 0) == 0) return line->substr(10);
      const std::string kind = line->substr(0, line->find(' '));
      if (kind.rfind("rank", 0) != 0 || kind == "ranks") continue;
      Fields f = CaseFields(*line, kind);
      if (f.count("r") != 0) lines_[kind][std::stoi(f["r"])] = f;
    }
    return "";
  }

  const Fields& Line(const std::string& kind, int rank) {
    static const Fields kNone;
    auto k = lines_.find(kind);
    if (k == lines_.end() || k->second.count(rank) == 0) {
      ADD_FAILURE() << "no " << kind << " line of rank " << rank << "\n" << out_;
      return kNone;
    }
    return k->second.at(rank);
  }

  void OpenBooks() { cudart::OpenBooks(state_, libvgpu(), out_, &state_file_, &region_); }

  // What the driver says `pid` uses on `device`; the driver's list reclaims the dead first,
  // as NVML's does.
  uint64_t Driver(pid_t pid, int device) {
    uint64_t used = 0;
    for (const sim::ProcessView& v : state_file_->Processes(device)) {
      if (v.host_pid == pid) used = v.used_bytes;
    }
    return used;
  }

  // The region's slot of `pid`, or nullopt.
  std::optional<region::SlotView> Slot(pid_t pid) {
    for (const region::SlotView& s : region_->Slots()) {
      if (s.pid == pid) return s;
    }
    return std::nullopt;
  }

  // Each listed rank's books against the driver, on every device.
  void ExpectBooksEqualDriver(const std::vector<int>& rank_list, const std::string& where) {
    for (int r : rank_list) {
      const pid_t pid = pid_t(Field(Line("rank", r), "pid"));
      auto slot = Slot(pid);
      ASSERT_TRUE(slot.has_value())
          << where << ": rank " << r << " (pid " << pid << ") has no slot\n"
          << out_;
      EXPECT_TRUE(slot->alive) << where << ": rank " << r;
      for (int d = 0; d < kDevices; ++d) {
        EXPECT_EQ(slot->used_bytes[size_t(d)], Driver(pid, d))
            << where << ": rank " << r << " (pid " << pid << ") on device " << d;
      }
    }
  }

  std::string state_;
  std::string out_;
  std::map<std::string, std::map<int, Fields>> lines_;
  std::unique_ptr<sim::SharedState> state_file_;
  std::unique_ptr<region::Region> region_;
};

TEST_P(NcclKillTest, SurvivorsGoOnAndTheKilledRanksMemoryIsReclaimed) {
  auto p = Start();
  std::vector<int> all, survivors;
  for (int r = 0; r < ranks(); ++r) {
    all.push_back(r);
    if (r != killed()) survivors.push_back(r);
  }

  // Every rank connected and holds its memory.
  ASSERT_EQ(NextHold(*p), "warm") << out_;
  ASSERT_NO_FATAL_FAILURE(OpenBooks());
  for (int r : all) {
    ExpectSucceeded(Line("rank", r), {"setup", "id", "init", "warm", "sync", "info"},
                    "rank " + std::to_string(r));
  }
  const pid_t dead = pid_t(Field(Line("rank", killed()), "pid"));
  EXPECT_GT(Driver(dead, DeviceOf(killed())), 0u) << "the rank to be killed holds memory";
  if (libvgpu()) ExpectBooksEqualDriver(all, "warm");
  if (HasFatalFailure()) return;
  ASSERT_TRUE(p->WriteStdin("\n")) << out_;

  // The rank died in its all-reduce; the survivors watched theirs and reclaimed its memory.
  ASSERT_EQ(NextHold(*p), "swept") << out_;
  EXPECT_EQ(Field(Line("rank-killing", killed()), "all_reduce"), 0) << out_;
  EXPECT_EQ(Field(Line("rank-killed", killed()), "signal"), SIGKILL) << out_;
  EXPECT_EQ(Field(Line("rank-killed", killed()), "pid"), dead) << out_;
  for (int r : survivors) {
    const Fields& after = Line("rank-after", r);
    const std::string who = "rank " + std::to_string(r);
    ExpectSucceeded(after, {"all_reduce", "query", "async"}, who + " after the kill");
    const std::string outcome = after.count("outcome") != 0 ? after.at("outcome") : "";
    EXPECT_EQ(outcome, "completed") << who << "\n" << out_;
    ExpectSucceeded(Line("rank-swept", r), {"info", "async"}, who + " once it is known dead");
  }
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_EQ(Driver(dead, d), 0u) << "the driver freed the dead rank's memory on device " << d;
  }
  if (libvgpu()) {
    EXPECT_FALSE(Slot(dead).has_value()) << "the dead rank's slot was reclaimed\n" << out_;
    ExpectBooksEqualDriver(survivors, "swept");
  }
  for (int d = 0; d < kDevices; ++d) {
    const uint64_t driver_total = state_file_->UsedBytes(d);
    if (libvgpu()) {
      EXPECT_EQ(region_->UsedBytes(d), driver_total) << "the container's total on device " << d;
    }
    uint64_t survivors_use = 0;
    for (int r : survivors) {
      survivors_use += Driver(pid_t(Field(Line("rank", r), "pid")), d);
    }
    EXPECT_EQ(driver_total, survivors_use) << "device " << d << " holds the survivors' alone";
  }
  for (int r : survivors) {
    // What cudaMemGetInfo told the survivor after the sweep: its device less what is charged.
    const Fields& swept = Line("rank-swept", r);
    const int d = DeviceOf(r);
    const uint64_t charged = libvgpu() ? region_->UsedBytes(d) : state_file_->UsedBytes(d);
    EXPECT_EQ(uint64_t(Field(swept, "total") - Field(swept, "free")), charged)
        << "rank " << r << " was told the memory of device " << d << " without the dead rank's";
  }
  if (HasFatalFailure()) return;
  ASSERT_TRUE(p->WriteStdin("\n")) << out_;

  // The survivors aborted their communicators and exited.
  p->CloseStdin();
  EXPECT_EQ(NextHold(*p), "") << out_;
  EXPECT_EQ(p->Wait(kWaitMs), 0) << out_;
  for (int r : survivors) {
    ExpectSucceeded(Line("rank-end", r), {"barrier", "abort", "freed"},
                    "rank-end " + std::to_string(r));
  }
  EXPECT_NE(out_.find("ranks n=" + std::to_string(ranks()) +
                      " failed=0 killed=" + std::to_string(killed())),
            std::string::npos)
      << out_;
  for (int d = 0; d < kDevices; ++d) {
    EXPECT_TRUE(state_file_->Processes(d).empty()) << "device " << d;
    EXPECT_EQ(state_file_->UsedBytes(d), 0u) << "device " << d;
    if (libvgpu()) {
      EXPECT_EQ(region_->UsedBytes(d), 0u) << "the container on device " << d;
    }
  }
  if (libvgpu()) {
    for (const region::SlotView& s : region_->Slots()) {
      ADD_FAILURE() << "slot " << s.index << " of pid " << s.pid << " is still held";
    }
  }
}

std::string CaseName(const ::testing::TestParamInfo<KillCase>& info) {
  const auto& [n, killed, cumem, under] = info.param;
  return std::to_string(n) + "RanksKill" + std::to_string(killed) +
         (cumem != 0 ? "CuMem" : "CudaIpc") + (under == Under::kLibvgpu ? "UnderLibvgpu" : "Alone");
}

INSTANTIATE_TEST_SUITE_P(
    Nccl, NcclKillTest,
    ::testing::Values(KillCase{2, 1, 1, Under::kAlone}, KillCase{2, 1, 1, Under::kLibvgpu},
                      KillCase{2, 1, 0, Under::kAlone}, KillCase{2, 1, 0, Under::kLibvgpu},
                      KillCase{4, 0, 1, Under::kLibvgpu}, KillCase{4, 2, 0, Under::kLibvgpu}),
    CaseName);

}  // namespace
}  // namespace hami::testing
