// Memory shared between two processes (CUDA IPC handles; VMM allocations passed as file
// descriptors) and the VMM growth patterns of two allocators (expandable segments; a pool
// that maps as it grows), run by share_patterns.cu on the simulated GPU alone and under
// libvgpu as one container (`hami run --memory`). At every step the program holds, and the
// test compares for each process what it is charged on the device with what it created and
// still holds: the region's books under libvgpu, which must also equal what the simulated
// driver says the process uses, and the driver's figure alone. What cudaMemGetInfo told each
// process must be the budget (the limit, or the device) less everything charged on the
// device. The program runs under a deadline, so a hang fails instead of blocking.
#include <gtest/gtest.h>

#include <map>
#include <memory>
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

constexpr int kOutOfMemory = 2;                   // CUDA_ERROR_OUT_OF_MEMORY
constexpr long long kShared = 64 << 20;           // what the creator shares (share_patterns.cu)
constexpr uint64_t kLimit = uint64_t(512) << 20;  // under libvgpu; the device has 1 GiB
constexpr int kDeadlineS = 120;                   // the program kills what it started past it
constexpr int kWaitMs = 150 * 1000;               // bounds, not expectations

enum class Under { kAlone, kLibvgpu };
using ShareCase = std::tuple<std::string, Under>;
using Fields = std::map<std::string, std::string>;

class SharePatternsTest : public ::testing::TestWithParam<ShareCase> {
 protected:
  void SetUp() override {
    if (std::string reason = CudartSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    if (access(CudartProgram("share_patterns").c_str(), X_OK) != 0) {
      GTEST_SKIP() << "the toolkit's stub of libcuda was not found when the build was "
                      "configured: share_patterns was not built";
    }
#ifdef HAMI_SANITIZER_RUNTIME
    GTEST_SKIP() << "sanitized build: share_patterns is built by nvcc without a sanitizer runtime";
#endif
    state_ = SimEnv::NewStatePath();
  }

  const std::string& name() const { return std::get<0>(GetParam()); }
  bool libvgpu() const { return std::get<1>(GetParam()) == Under::kLibvgpu; }

  std::unique_ptr<Subprocess> Start() const {
    return StartOnSim(
        {CudartProgram("share_patterns"), name(), "--deadline", std::to_string(kDeadlineS)}, state_,
        "sim-1g:1", libvgpu() ? "512m" : "");
  }

  // Reads up to the next hold: its step, with each process's line of the step by role. ""
  // when the program ended instead.
  std::string NextHold(Subprocess& p, std::map<std::string, Fields>* lines) {
    lines->clear();
    const std::string prefix = name() + " ";
    while (auto line = p.ReadLine(kWaitMs)) {
      out_ += *line + "\n";
      if (line->rfind("hold step=", 0) == 0) return line->substr(10);
      if (line->rfind(prefix, 0) == 0) {
        Fields f = CaseFields(*line, name());
        (*lines)[f["role"]] = f;
      }
    }
    return "";
  }

  // What the driver says `pid` uses on the device.
  uint64_t Driver(pid_t pid) {
    uint64_t used = 0;
    for (const sim::ProcessView& v : state_file_->Processes(0)) {
      if (v.host_pid == pid) used = v.used_bytes;
    }
    return used;
  }

  // What the region charges `pid` on the device.
  uint64_t Books(pid_t pid) {
    uint64_t books = 0;
    for (const region::SlotView& s : region_->Slots()) {
      if (s.pid == pid && s.alive) books = s.used_bytes[0];
    }
    return books;
  }

  // Other processes' memory the region records `pid` mapping (never charged to it).
  uint64_t Imported(pid_t pid) {
    for (const region::SlotView& s : region_->Slots()) {
      if (s.pid == pid && s.alive) return s.imported_bytes;
    }
    return 0;
  }

  // Under libvgpu: each role's imported memory at `step` is `want` (a role not named: 0).
  void ExpectImported(const std::string& step, const std::map<std::string, Fields>& lines,
                      const std::map<std::string, uint64_t>& want) {
    if (!libvgpu()) return;
    for (const auto& [role, f] : lines) {
      auto it = want.find(role);
      EXPECT_EQ(Imported(pid_t(Field(f, "pid"))), it == want.end() ? 0 : it->second)
          << step << " " << role << ": recorded as imported";
    }
  }

  // What `pid` is charged: the books under libvgpu (equal to the driver's figure), else the
  // driver's.
  uint64_t Charged(pid_t pid, const std::string& where) {
    const uint64_t driver = Driver(pid);
    if (!libvgpu()) return driver;
    const uint64_t books = Books(pid);
    EXPECT_EQ(books, driver) << where << ": the books against the driver";
    return books;
  }

  // Everything charged on the device, against which its free memory is told.
  uint64_t DeviceCharged() {
    if (!libvgpu()) return state_file_->UsedBytes(0);
    uint64_t all = 0;
    for (const region::SlotView& s : region_->Slots()) {
      if (s.alive) all += s.used_bytes[0];
    }
    return all;
  }

  void OpenBooks() { cudart::OpenBooks(state_, libvgpu(), out_, &state_file_, &region_); }

  // The checks of every step: no process failed a check of its own; each is charged what
  // it was charged at the start plus what it created and still holds; each was told the
  // budget less everything charged.
  void CheckStep(const std::string& step, const std::map<std::string, Fields>& lines) {
    ASSERT_NO_FATAL_FAILURE(OpenBooks());
    for (const auto& [role, f] : lines) {
      const std::string where = step + " " + role;
      EXPECT_EQ(Field(f, "failed"), 0) << where << "\n" << out_;
      const pid_t pid = pid_t(Field(f, "pid"));
      const uint64_t charged = Charged(pid, where);
      if (step == "ready") {
        EXPECT_GT(charged, 0u) << where << ": its context is charged";
        base_[role] = charged;
      }
      EXPECT_EQ(charged, base_[role] + uint64_t(Field(f, "holds"))) << where;
      const uint64_t told = uint64_t(Field(f, "total") - Field(f, "free"));
      EXPECT_EQ(told, DeviceCharged()) << where << ": cudaMemGetInfo's total less its free";
      if (libvgpu()) {
        EXPECT_EQ(uint64_t(Field(f, "total")), kLimit) << where;
      }
    }
  }

  std::string state_;
  std::string out_;
  std::unique_ptr<sim::SharedState> state_file_;
  std::unique_ptr<region::Region> region_;
  std::map<std::string, uint64_t> base_;  // by role: charged at the first step
};

void Finish(Subprocess& p, std::string* out, const std::string& name) {
  p.CloseStdin();
  *out += p.ReadAll(kWaitMs);
  EXPECT_EQ(p.Wait(kWaitMs), 0) << *out;
  EXPECT_NE(out->find("done case=" + name + " failed=0"), std::string::npos) << *out;
}

TEST_P(SharePatternsTest, EachProcessIsChargedWhatItCreatedAndHolds) {
  auto p = Start();
  const std::vector<std::string> two = {"creator", "importer"};
  const std::vector<std::string> one = {"self"};
  std::map<std::string, long long> mapped;  // by step
  auto steps = [&](const std::vector<std::string>& names, const std::vector<std::string>& roles,
                   auto check) {
    std::vector<std::string> seen;
    std::map<std::string, Fields> lines;
    for (std::string step; !(step = NextHold(*p, &lines)).empty();) {
      seen.push_back(step);
      std::vector<std::string> present;
      for (const auto& [role, f] : lines) present.push_back(role);
      if (present != roles) {
        ADD_FAILURE() << step << ": not every process printed its line\n" << out_;
        return;
      }
      CheckStep(step, lines);
      check(step, lines);
      if (HasFatalFailure()) return;
      ASSERT_TRUE(p->WriteStdin("\n")) << step << "\n" << out_;
    }
    EXPECT_EQ(seen, names) << out_;
  };

  if (name() == "ipc") {
    steps({"ready", "shared", "peer-closed", "freed"}, two, [&](const std::string& step, auto& l) {
      ExpectImported(step, l,
                     step == "shared" ? std::map<std::string, uint64_t>{{"importer", kShared}}
                                      : std::map<std::string, uint64_t>{});
      if (step == "peer-closed") ExpectSucceeded(l.at("importer"), {"close"}, step);
      if (step == "freed") ExpectSucceeded(l.at("creator"), {"release"}, step);
      if (step != "shared") return;
      ExpectSucceeded(l.at("creator"), {"alloc", "fill", "export"}, "creator");
      ExpectSucceeded(l.at("importer"), {"open", "write"}, "importer");
      EXPECT_EQ(Field(l.at("creator"), "holds"), kShared);
      EXPECT_EQ(Field(l.at("creator"), "sees_peer"), 1) << "A sees what B wrote";
      EXPECT_EQ(Field(l.at("importer"), "sees_peer"), 1) << "B reads what A wrote";
      EXPECT_EQ(Field(l.at("importer"), "charged"), 0) << "B is charged nothing for the open";
    });
  } else if (name() == "vmm-fd") {
    long long size = 0;  // of each allocation A makes
    steps({"ready", "shared", "peer-released", "shared-again", "creator-released", "freed"}, two,
          [&](const std::string& step, auto& l) {
            const Fields& a = l.at("creator");
            const Fields& b = l.at("importer");
            if (step == "ready") size = Field(a, "size");
            // B maps one allocation of A's while it is shared, and the second still after A
            // let go of it.
            const bool maps =
                step == "shared" || step == "shared-again" || step == "creator-released";
            ExpectImported(step, l,
                           maps ? std::map<std::string, uint64_t>{{"importer", uint64_t(size)}}
                                : std::map<std::string, uint64_t>{});
            if (step == "shared" || step == "shared-again") {
              ExpectSucceeded(b, {"import", "reserve", "map", "access"}, step + " importer");
              EXPECT_EQ(Field(b, "sees_peer"), 1) << step << ": B reads what A wrote";
              EXPECT_EQ(Field(b, "charged"), 0) << step << ": B is charged nothing for it";
            }
            if (step == "shared") {
              EXPECT_EQ(Field(a, "sees_peer"), 1) << "A sees what B wrote";
              EXPECT_GE(Field(a, "holds"), kShared);
            }
            if (step == "shared-again") {
              EXPECT_EQ(Field(a, "holds"), 2 * size);
            }
            if (step == "peer-released") {
              ExpectSucceeded(b, {"unmap", "release", "address_free"}, step);
              EXPECT_EQ(Field(a, "holds"), size) << "B's release leaves A's charge";
            }
            if (step == "creator-released") {
              // A let go of the second allocation, B still maps it: its pages stay, and it is
              // charged to no one (the charge went with its creator).
              ExpectSucceeded(a, {"unmap", "release", "address_free"}, step);
              EXPECT_EQ(Field(b, "still_reads"), 1) << "B still reads the pages A let go";
              EXPECT_EQ(Field(a, "holds"), size);
            }
          });
  } else if (name() == "expandable") {
    long long chunk = 0;
    steps({"ready", "grow1", "grow2", "grow3", "grow4", "shrink1", "shrink2", "regrow1", "regrow2",
           "regrow3", "limit", "freed"},
          one, [&](const std::string& step, auto& l) {
            const Fields& f = l.at("self");
            if (step == "ready") chunk = Field(f, "chunk");
            EXPECT_EQ(Field(f, "intact"), 1) << step << ": every chunk keeps its bytes";
            EXPECT_EQ(Field(f, "mapped"), Field(f, "chunks") * chunk) << step;
            EXPECT_EQ(Field(f, "holds"), Field(f, "mapped")) << step;
            mapped[step] = Field(f, "mapped");
            if (step == "limit") {
              EXPECT_EQ(Field(f, "past"), kOutOfMemory) << "growing past the limit";
              EXPECT_GT(Field(f, "grown"), 0) << "the budget held more chunks";
              EXPECT_LT(Field(f, "free"), chunk) << "no room for another chunk";
            }
          });
    EXPECT_EQ(chunk, 20LL << 20) << "20 MiB is a multiple of the granularity";
    EXPECT_EQ(mapped["grow4"], 4 * chunk);
    EXPECT_EQ(mapped["shrink2"], 2 * chunk);
    EXPECT_EQ(mapped["regrow3"], 5 * chunk);
    EXPECT_EQ(mapped["freed"], 0);
  } else {
    steps({"ready", "take1", "take2", "take3", "take4", "take5", "take6", "past", "freed"}, one,
          [&](const std::string& step, auto& l) {
            const Fields& f = l.at("self");
            EXPECT_EQ(Field(f, "intact"), 1) << step << ": every piece keeps its bytes";
            EXPECT_EQ(Field(f, "holds"), Field(f, "mapped")) << step;
            EXPECT_GE(Field(f, "mapped"), Field(f, "used")) << step;
            mapped[step] = Field(f, "mapped");
            if (step == "past") {
              EXPECT_EQ(Field(f, "past"), kOutOfMemory) << "growing past what is left";
            }
            if (step == "freed") ExpectSucceeded(f, {"unmap", "address_free"}, step);
          });
    EXPECT_EQ(mapped["take2"], mapped["take1"]) << "the second piece fits what is mapped";
    EXPECT_GT(mapped["take5"], mapped["take4"]);
    EXPECT_EQ(mapped["take6"], mapped["take5"]) << "a piece given back stays mapped";
    EXPECT_EQ(mapped["past"], mapped["take6"]) << "a refused growth maps nothing";
    EXPECT_EQ(mapped["freed"], 0);
  }
  Finish(*p, &out_, name());
}

std::string CaseName(const ::testing::TestParamInfo<ShareCase>& info) {
  std::string n;
  bool upper = true;
  for (char c : std::get<0>(info.param)) {
    if (c == '-') {
      upper = true;
      continue;
    }
    n += upper ? char(std::toupper(c)) : c;
    upper = false;
  }
  return n + (std::get<1>(info.param) == Under::kLibvgpu ? "UnderLibvgpu" : "Alone");
}

INSTANTIATE_TEST_SUITE_P(Share, SharePatternsTest,
                         ::testing::Combine(::testing::Values("ipc", "vmm-fd", "expandable",
                                                              "vmm-pool"),
                                            ::testing::Values(Under::kAlone, Under::kLibvgpu)),
                         CaseName);

}  // namespace
}  // namespace hami::testing
