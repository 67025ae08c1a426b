// Multi-process NCCL on the simulated GPU (nccl_ranks.cu): 2 and 4 processes, one GPU each,
// through ncclCommInitRank, every collective, send/recv and ncclCommDestroy, with NCCL's
// cuMem allocator on and off (NCCL_CUMEM_ENABLE: VMM shareable handles passed over Unix
// sockets, or CUDA IPC handles). Alone on the simulated driver, and under libvgpu as one
// container (`hami run --memory`: the vLLM TP / torchrun shape, one pod with N GPUs and N
// processes), where, while every rank holds its memory, the region's books for each rank
// equal what the simulated driver says that process uses (kernels loaded eagerly), and an
// allocation past the limit is refused. Then NCCL's NVLS transport on the NVSwitch profile
// (h100-hgx), which shares multicast objects between the ranks. The ranks run under a deadline,
// so a hang fails instead of blocking.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "cudart_support.h"
#include "region/region.h"
#include "sim/state.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

constexpr int kMemoryAllocation = 2;  // cudaErrorMemoryAllocation
constexpr int kDevices = 4;
constexpr int kDeadlineS = 90;       // the launcher kills the ranks past it
constexpr int kWaitMs = 150 * 1000;  // bounds, not expectations

// ranks, NCCL_CUMEM_ENABLE
using NcclCase = std::tuple<int, int>;

class NcclRanksTest : public ::testing::TestWithParam<NcclCase> {
 protected:
  void SetUp() override {
    if (std::string reason = NcclRanksSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    state_ = SimEnv::NewStatePath();
  }

  int ranks() const { return std::get<0>(GetParam()); }

  std::map<std::string, std::string> Env() const {
    return {{"HAMI_SIM_STATE", state_},
            {"HAMI_SIM_PROFILE", "h100-80g:" + std::to_string(kDevices)},
            {"HAMI_SIM_CONTEXT_SIZE", "64m"},
            {"LD_PRELOAD", ""},
            {"CUDA_VISIBLE_DEVICES", ""},
            {"CUDA_DEVICE_MEMORY_LIMIT", ""},
            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""},
            {"NCCL_CUMEM_ENABLE", std::to_string(std::get<1>(GetParam()))},
            {"NCCL_DEBUG", "WARN"},
            {"CUDA_MODULE_LOADING", ""}};
  }

  std::vector<std::string> RanksCommand(const std::string& past) const {
    return {CudartProgram("nccl_ranks"),
            "run",
            std::to_string(ranks()),
            state_ + ".id",
            "--past",
            past,
            "--deadline",
            std::to_string(kDeadlineS)};
  }

  // Reads the ranks' lines up to the barrier: {rank: its fields}.
  std::map<int, std::map<std::string, std::string>> UpToBarrier(Subprocess& p, std::string* out) {
    std::map<int, std::map<std::string, std::string>> seen;
    for (;;) {
      auto line = p.ReadLine(kWaitMs);
      if (!line) {
        ADD_FAILURE() << "no barrier; output so far:\n" << *out;
        return seen;
      }
      *out += *line + "\n";
      if (line->rfind("barrier ", 0) == 0) return seen;
      if (line->rfind("rank ", 0) == 0) {
        auto f = CaseFields(*line, "rank");
        seen[std::stoi(f["r"])] = f;
      }
    }
  }

  // After the barrier: every rank ended well and the launcher says none failed.
  void ExpectEnd(Subprocess& p, std::string* out, int past) {
    p.CloseStdin();
    *out += p.ReadAll(kWaitMs);
    EXPECT_EQ(p.Wait(kWaitMs), 0) << *out;
    for (int r = 0; r < ranks(); ++r) {
      auto f = CaseFields(*out, "rank-end", r);
      ExpectSucceeded(f, {"barrier", "freed", "destroy"}, "rank-end " + std::to_string(r));
      EXPECT_EQ(Field(f, "past"), past) << *out;
    }
    EXPECT_NE(out->find("ranks n=" + std::to_string(ranks()) + " failed=0"), std::string::npos)
        << *out;
  }

  static void ExpectRanksSucceeded(const std::map<int, std::map<std::string, std::string>>& seen,
                                   int n, const std::string& out) {
    ASSERT_EQ(int(seen.size()), n) << out;
    for (const auto& [r, f] : seen) {
      ExpectSucceeded(f,
                      {"setup", "id", "init", "all_reduce", "all_gather", "reduce_scatter",
                       "broadcast", "send_recv", "sync", "info"},
                      "rank " + std::to_string(r));
    }
  }

  std::string state_;
};

TEST_P(NcclRanksTest, RunAloneOnTheSimulatedDriver) {
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  for (const std::string& a : RanksCommand("1g")) argv.push_back(a);
  auto env = Env();
  env["LD_LIBRARY_PATH"] = HAMI_SIM_LIB_DIR;
  Subprocess p(argv, env);
  std::string out;
  auto seen = UpToBarrier(p, &out);
  ExpectRanksSucceeded(seen, ranks(), out);
  ExpectEnd(p, &out, 0);
}

TEST_P(NcclRanksTest, UnderOneContainersLimitTheBooksEqualTheDriversAndTheLimitHolds) {
  std::vector<std::string> argv = {"/bin/sh",
                                   "-c",
                                   "exec \"$0\" \"$@\" 2>&1",
                                   std::string(HAMI_BIN_DIR) + "/hami",
                                   "run",
                                   "--sim",
                                   "h100-80g:" + std::to_string(kDevices),
                                   "--memory",
                                   "1g",
                                   "--"};
  // 1 GiB more than a budget of 1 GiB that already holds a context and NCCL's buffers.
  for (const std::string& a : RanksCommand("1g")) argv.push_back(a);
  auto env = Env();
  env["LD_LIBRARY_PATH"] = "";
  Subprocess p(argv, env);
  std::string out;
  auto seen = UpToBarrier(p, &out);
  ExpectRanksSucceeded(seen, ranks(), out);

  // While every rank holds its memory: the region's books per process and device against the
  // simulated driver's per-process use.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(out, m, std::regex("region (\\S+usage\\.cache)"))) << out;
  auto reg = region::Region::Open(m[1].str(), nullptr, region::Create::kNever, nullptr,
                                  region::Access::kReadOnly);
  ASSERT_TRUE(reg.ok()) << reg.error().message();
  auto state = sim::SharedState::OpenExisting(state_);
  ASSERT_TRUE(state.ok()) << state.error().message();
  for (const auto& [r, f] : seen) {
    const pid_t pid = pid_t(std::stol(f.at("pid")));
    for (int d = 0; d < kDevices; ++d) {
      uint64_t driver = 0;
      for (const sim::ProcessView& v : (*state)->Processes(d)) {
        if (v.host_pid == pid) driver = v.used_bytes;
      }
      uint64_t books = 0;
      for (const region::SlotView& s : (*reg)->Slots()) {
        if (s.pid == pid && s.alive) books = s.used_bytes[size_t(d)];
      }
      EXPECT_EQ(books, driver) << "rank " << r << " (pid " << pid << ") on device " << d;
      if (d == r) {
        EXPECT_GT(driver, 0u) << "rank " << r << " holds memory on its own GPU";
      }
    }
  }
  ExpectEnd(p, &out, kMemoryAllocation);
}

// NCCL's NVLS transport on the NVSwitch profile: the ranks share a multicast object and bind
// their memory to it. Alone and under one container's limit, where the books of every rank
// and device equal the driver's and nothing is charged for the object.
enum class Under { kAlone, kLibvgpu };

class NcclNvlsTest : public ::testing::TestWithParam<Under> {
 protected:
  void SetUp() override {
    if (std::string reason = NcclRanksSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    state_ = SimEnv::NewStatePath();
  }
  bool libvgpu() const { return GetParam() == Under::kLibvgpu; }

  std::string state_;
};

TEST_P(NcclNvlsTest, TheRanksRunOverNvlsAndTheBooksEqualTheDrivers) {
  constexpr int kRanks = 2;
  const std::string profile = "h100-hgx:" + std::to_string(kRanks);
  std::vector<std::string> argv = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  if (libvgpu()) {
    for (std::string a :
         {std::string(HAMI_BIN_DIR) + "/hami", std::string("run"), std::string("--sim"), profile,
          std::string("--memory"), std::string("2g"), std::string("--")}) {
      argv.push_back(a);
    }
  }
  // 2 GiB more: within the device, past a budget of 2 GiB that holds NCCL's buffers.
  for (std::string a : {CudartProgram("nccl_ranks"), std::string("run"), std::to_string(kRanks),
                        state_ + ".id", std::string("--past"), std::string("2g"),
                        std::string("--deadline"), std::to_string(kDeadlineS)}) {
    argv.push_back(a);
  }
  std::map<std::string, std::string> env = {{"HAMI_SIM_STATE", state_},
                                            {"HAMI_SIM_PROFILE", profile},
                                            {"HAMI_SIM_CONTEXT_SIZE", "64m"},
                                            {"LD_PRELOAD", ""},
                                            {"CUDA_VISIBLE_DEVICES", ""},
                                            {"CUDA_DEVICE_MEMORY_LIMIT", ""},
                                            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""},
                                            {"NCCL_NVLS_ENABLE", "1"},
                                            {"NCCL_DEBUG", "INFO"},
                                            {"NCCL_DEBUG_SUBSYS", "INIT"},
                                            {"CUDA_MODULE_LOADING", ""},
                                            {"LD_LIBRARY_PATH", libvgpu() ? "" : HAMI_SIM_LIB_DIR}};
  Subprocess p(argv, env);
  std::string out;
  std::map<int, std::map<std::string, std::string>> seen;
  for (;;) {
    auto line = p.ReadLine(kWaitMs);
    ASSERT_TRUE(line) << "no barrier; output so far:\n" << out;
    out += *line + "\n";
    if (line->rfind("barrier ", 0) == 0) break;
    if (line->rfind("rank ", 0) == 0) {
      auto f = CaseFields(*line, "rank");
      seen[std::stoi(f["r"])] = f;
    }
  }
  ASSERT_EQ(int(seen.size()), kRanks) << out;
  for (const auto& [r, f] : seen) {
    ExpectSucceeded(f,
                    {"setup", "id", "init", "all_reduce", "all_gather", "reduce_scatter",
                     "broadcast", "send_recv", "sync", "info"},
                    "rank " + std::to_string(r));
  }
  std::smatch nvls;
  ASSERT_TRUE(std::regex_search(out, nvls, std::regex(" (\\d+) nvls channels"))) << out;
  EXPECT_GT(std::stoi(nvls[1].str()), 0) << "NCCL uses NVLS\n" << out;

  auto state = sim::SharedState::OpenExisting(state_);
  ASSERT_TRUE(state.ok()) << state.error().message();
  std::unique_ptr<region::Region> reg;
  if (libvgpu()) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("region (\\S+usage\\.cache)"))) << out;
    auto opened = region::Region::Open(m[1].str(), nullptr, region::Create::kNever, nullptr,
                                       region::Access::kReadOnly);
    ASSERT_TRUE(opened.ok()) << opened.error().message();
    reg = std::move(opened).value();
  }
  for (const auto& [r, f] : seen) {
    const pid_t pid = pid_t(std::stol(f.at("pid")));
    for (int d = 0; d < kRanks; ++d) {
      uint64_t driver = 0;
      for (const sim::ProcessView& v : (*state)->Processes(d)) {
        if (v.host_pid == pid) driver = v.used_bytes;
      }
      if (d == r) {
        EXPECT_GT(driver, 0u) << "rank " << r << " holds memory on its own GPU";
        // Less than the 512 MiB multicast object: the object itself is charged nothing.
        EXPECT_LT(driver, uint64_t(2) << 30) << "rank " << r;
      }
      if (!libvgpu()) continue;
      uint64_t books = 0;
      for (const region::SlotView& s : reg->Slots()) {
        if (s.pid == pid && s.alive) books = s.used_bytes[size_t(d)];
      }
      EXPECT_EQ(books, driver) << "rank " << r << " (pid " << pid << ") on device " << d;
    }
  }
  if (libvgpu()) {
    // The ranks map each other's buffers alike; rank 0 made the multicast object and the
    // others imported it: its mapping is no other process's memory, recorded for none.
    std::map<int, uint64_t> imported;
    for (const auto& [r, f] : seen) {
      for (const region::SlotView& s : reg->Slots()) {
        if (s.pid == pid_t(std::stol(f.at("pid"))) && s.alive) imported[r] = s.imported_bytes;
      }
    }
    EXPECT_EQ(imported[1], imported[0]) << out;
  }
  p.CloseStdin();
  out += p.ReadAll(kWaitMs);
  EXPECT_EQ(p.Wait(kWaitMs), 0) << out;
  for (int r = 0; r < kRanks; ++r) {
    auto f = CaseFields(out, "rank-end", r);
    ExpectSucceeded(f, {"barrier", "freed", "destroy"}, "rank-end " + std::to_string(r));
    EXPECT_EQ(Field(f, "past"), libvgpu() ? kMemoryAllocation : 0) << out;
  }
  EXPECT_NE(out.find("ranks n=2 failed=0"), std::string::npos) << out;
}

std::string NvlsCaseName(const ::testing::TestParamInfo<Under>& info) {
  return info.param == Under::kLibvgpu ? "UnderLibvgpu" : "Alone";
}

INSTANTIATE_TEST_SUITE_P(Nccl, NcclNvlsTest, ::testing::Values(Under::kAlone, Under::kLibvgpu),
                         NvlsCaseName);

std::string CaseName(const ::testing::TestParamInfo<NcclCase>& info) {
  return std::to_string(std::get<0>(info.param)) + "Ranks" +
         (std::get<1>(info.param) != 0 ? "CuMem" : "CudaIpc");
}

INSTANTIATE_TEST_SUITE_P(Nccl, NcclRanksTest,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values(0, 1)),
                         CaseName);

}  // namespace
}  // namespace hami::testing
