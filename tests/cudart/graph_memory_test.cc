// Graphs with memory nodes, made by a real client (graph_memory.cu): cudaMallocAsync and
// cudaFreeAsync captured into a graph, instantiated, launched several times, trimmed with
// cudaDeviceGraphMemTrim, a second graph whose allocation outlives its launch and is freed
// outside it, a third that fits the budget only once the unused graph memory is trimmed, a
// fourth that asks for more than the device holds, all destroyed. Run on the
// simulated GPU alone and under libvgpu (`hami run --memory 512m`, the device has 1 GiB); at
// every step the program holds while the test compares what the process is charged with the
// graph memory the device reports reserved: the region's books under libvgpu, which must also
// equal what the simulated driver says the process uses, and the driver's figure alone. What
// cudaMemGetInfo told the process must be the budget less everything charged. The program runs
// under a deadline, so a hang fails instead of blocking.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "books.h"
#include "cudart_support.h"
#include "region/region.h"
#include "sim/state.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

constexpr long long kMiB = 1 << 20;
constexpr long long kFreed = 64 * kMiB;     // graph A's allocation (graph_memory.cu)
constexpr long long kOutlives = 32 * kMiB;  // graph B's
constexpr long long kLarger = 384 * kMiB;   // graph D's
constexpr long long kPast = 1024 * kMiB;    // graph C's: more than the device or the budget
constexpr uint64_t kLimit = uint64_t(512) << 20;
constexpr int kMemoryAllocation = 2;  // cudaErrorMemoryAllocation
constexpr int kDeadlineS = 60;        // the program exits 124 past it
constexpr int kWaitMs = 90 * 1000;    // bounds, not expectations

enum class Under { kAlone, kLibvgpu };
using Fields = std::map<std::string, std::string>;

class GraphMemoryTest : public ::testing::TestWithParam<Under> {
 protected:
  void SetUp() override {
    if (std::string reason = CudartSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
#ifdef HAMI_SANITIZER_RUNTIME
    GTEST_SKIP() << "sanitized build: graph_memory is built by nvcc without a sanitizer runtime";
#endif
    state_ = SimEnv::NewStatePath();
  }

  bool libvgpu() const { return GetParam() == Under::kLibvgpu; }

  std::unique_ptr<Subprocess> Start() const {
    return StartOnSim({CudartProgram("graph_memory"), "--past", std::to_string(kPast), "--deadline",
                       std::to_string(kDeadlineS)},
                      state_, "sim-1g:1", libvgpu() ? "512m" : "");
  }

  // Reads up to the next hold: its step, with the program's line of the step in *line. ""
  // when the program ended instead.
  std::string NextHold(Subprocess& p, Fields* line) {
    line->clear();
    while (auto l = p.ReadLine(kWaitMs)) {
      out_ += *l + "\n";
      if (l->rfind("hold step=", 0) == 0) return l->substr(10);
      if (l->rfind("graph ", 0) == 0) *line = CaseFields(*l, "graph");
    }
    return "";
  }

  void OpenBooks() { cudart::OpenBooks(state_, libvgpu(), out_, &state_file_, &region_); }

  // What `pid` is charged on the device: the books under libvgpu (which must equal what the
  // driver says it uses), else the driver's figure.
  uint64_t Charged(pid_t pid, const std::string& step) {
    uint64_t driver = 0;
    for (const sim::ProcessView& v : state_file_->Processes(0)) {
      if (v.host_pid == pid) driver = v.used_bytes;
    }
    if (!libvgpu()) return driver;
    uint64_t books = 0;
    for (const region::SlotView& s : region_->Slots()) {
      if (s.pid == pid && s.alive) books = s.used_bytes[0];
    }
    EXPECT_EQ(books, driver) << step << ": the books against the driver";
    return books;
  }

  std::string state_;
  std::string out_;
  std::unique_ptr<sim::SharedState> state_file_;
  std::unique_ptr<region::Region> region_;
};

TEST_P(GraphMemoryTest, TheBooksFollowTheGraphMemoryTheDeviceReserves) {
  auto p = Start();
  // What the device's graph memory reserves at each step (and of it, what is in use).
  std::map<std::string, std::pair<long long, long long>> expected = {
      {"ready", {0, 0}},
      {"captured", {0, 0}},
      {"instantiated", {0, 0}},
      {"launched", {kFreed, 0}},
      {"relaunched", {kFreed, 0}},
      {"trimmed", {0, 0}},
      {"regrown", {kFreed, 0}},
      {"outlived", {kFreed + kOutlives, kOutlives}},
      {"freed-outside", {kFreed + kOutlives, 0}},
      // Under libvgpu, D fits the budget (the context and 384 MiB) once the graph memory of A
      // and B, unused now, is trimmed; the device holds all three.
      {"larger", {libvgpu() ? kLarger : kFreed + kOutlives + kLarger, 0}},
      // C fits neither: the driver refuses it, and so does libvgpu, which first trims the
      // unused graph memory once.
      {"past", {libvgpu() ? 0 : kFreed + kOutlives + kLarger, 0}},
      {"destroyed", {0, 0}},
  };
  const std::vector<std::string> order = {"ready",         "captured", "instantiated", "launched",
                                          "relaunched",    "trimmed",  "regrown",      "outlived",
                                          "freed-outside", "larger",   "past",         "destroyed"};
  std::vector<std::string> seen;
  uint64_t base = 0;  // charged at the first step: the context
  Fields line;
  for (std::string step; !(step = NextHold(*p, &line)).empty();) {
    seen.push_back(step);
    ASSERT_NO_FATAL_FAILURE(OpenBooks());
    ASSERT_FALSE(line.empty()) << step << ": no line\n" << out_;
    EXPECT_EQ(Field(line, "failed"), 0) << step << "\n" << out_;
    const pid_t pid = pid_t(Field(line, "pid"));
    const uint64_t charged = Charged(pid, step);
    if (step == "ready") {
      EXPECT_GT(charged, 0u) << "its context is charged";
      base = charged;
    }
    ASSERT_EQ(expected.count(step), 1u) << step;
    EXPECT_EQ(Field(line, "reserved"), expected[step].first) << step << "\n" << out_;
    EXPECT_EQ(Field(line, "used"), expected[step].second) << step << "\n" << out_;
    EXPECT_EQ(charged, base + uint64_t(Field(line, "holds"))) << step;
    const uint64_t all = libvgpu() ? region_->UsedBytes(0) : state_file_->UsedBytes(0);
    EXPECT_EQ(uint64_t(Field(line, "total") - Field(line, "free")), all)
        << step << ": cudaMemGetInfo's total less its free";
    if (libvgpu()) {
      EXPECT_EQ(uint64_t(Field(line, "total")), kLimit) << step;
    }
    if (step == "captured") {
      EXPECT_EQ(Field(line, "nodes"), 3) << "alloc, set, free";
    }
    if (step == "outlived") {
      EXPECT_EQ(Field(line, "intact"), 1) << "B's bytes read back";
    }
    if (step == "past") {
      EXPECT_EQ(Field(line, "past"), kMemoryAllocation) << out_;
    }
    if (HasFatalFailure()) return;
    ASSERT_TRUE(p->WriteStdin("\n")) << step << "\n" << out_;
  }
  EXPECT_EQ(seen, order) << out_;
  p->CloseStdin();
  out_ += p->ReadAll(kWaitMs);
  EXPECT_EQ(p->Wait(kWaitMs), 0) << out_;
  EXPECT_NE(out_.find("done failed=0"), std::string::npos) << out_;
}

std::string CaseName(const ::testing::TestParamInfo<Under>& info) {
  return info.param == Under::kLibvgpu ? "UnderLibvgpu" : "Alone";
}

INSTANTIATE_TEST_SUITE_P(Graph, GraphMemoryTest, ::testing::Values(Under::kAlone, Under::kLibvgpu),
                         CaseName);

}  // namespace
}  // namespace hami::testing
