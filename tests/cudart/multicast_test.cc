// A multicast object over two GPUs on NVLink switches, made by a real client (multicast.cu):
// created, both devices added, cuMemCreate memory bound on each, mapped, written through,
// unbound and released. Run on the simulated GPU's NVSwitch profile (h100-hgx) alone and under
// libvgpu (`hami run --memory 1g`); at every step the program holds while the test compares
// what the process is charged on each device with the memory it created and still holds: the
// region's books under libvgpu, which must also equal what the simulated driver says the
// process uses, and the driver's figure alone. The object itself is charged nothing. What
// cudaMemGetInfo told the process must be the budget less everything charged, and under the
// limit an allocation that does not fit is refused. The program runs under a deadline, so a
// hang fails instead of blocking.
#include <gtest/gtest.h>

#include <map>
#include <memory>
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

constexpr uint64_t kLimit = uint64_t(1) << 30;  // under libvgpu, on each device
constexpr long long kPast = 1ll << 30;          // more than the budget left under it
constexpr int kOutOfMemory = 2;                 // CUDA_ERROR_OUT_OF_MEMORY
constexpr int kDeadlineS = 60;                  // the program exits 124 past it
constexpr int kWaitMs = 90 * 1000;              // bounds, not expectations

enum class Under { kAlone, kLibvgpu };
using Fields = std::map<std::string, std::string>;

class MulticastClientTest : public ::testing::TestWithParam<Under> {
 protected:
  void SetUp() override {
    if (std::string reason = CudartSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
    if (access(CudartProgram("multicast").c_str(), X_OK) != 0) {
      GTEST_SKIP() << "the toolkit's stub of libcuda was not found when the build was "
                      "configured: multicast was not built";
    }
#ifdef HAMI_SANITIZER_RUNTIME
    GTEST_SKIP() << "sanitized build: multicast is built by nvcc without a sanitizer runtime";
#endif
    state_ = SimEnv::NewStatePath();
  }

  bool libvgpu() const { return GetParam() == Under::kLibvgpu; }

  std::unique_ptr<Subprocess> Start() const {
    return StartOnSim({CudartProgram("multicast"), "--past", std::to_string(kPast), "--deadline",
                       std::to_string(kDeadlineS)},
                      state_, "h100-hgx:2", libvgpu() ? "1g" : "");
  }

  // Reads up to the next hold: its step, with the program's line of the step in *line. ""
  // when the program ended instead.
  std::string NextHold(Subprocess& p, Fields* line) {
    line->clear();
    while (auto l = p.ReadLine(kWaitMs)) {
      out_ += *l + "\n";
      if (l->rfind("hold step=", 0) == 0) return l->substr(10);
      if (l->rfind("multicast ", 0) == 0) *line = CaseFields(*l, "multicast");
    }
    return "";
  }

  void OpenBooks() { cudart::OpenBooks(state_, libvgpu(), out_, &state_file_, &region_); }

  // What `pid` is charged on device `d`: the books under libvgpu (which must equal what the
  // driver says it uses), else the driver's figure.
  uint64_t Charged(pid_t pid, int d, const std::string& step) {
    uint64_t driver = 0;
    for (const sim::ProcessView& v : state_file_->Processes(d)) {
      if (v.host_pid == pid) driver = v.used_bytes;
    }
    if (!libvgpu()) return driver;
    uint64_t books = 0;
    for (const region::SlotView& s : region_->Slots()) {
      if (s.pid == pid && s.alive) books = s.used_bytes[size_t(d)];
    }
    EXPECT_EQ(books, driver) << step << " device " << d << ": the books against the driver";
    return books;
  }

  std::string state_;
  std::string out_;
  std::unique_ptr<sim::SharedState> state_file_;
  std::unique_ptr<region::Region> region_;
};

TEST_P(MulticastClientTest, EachDeviceIsChargedTheBoundMemoryAndNothingForTheObject) {
  auto p = Start();
  const std::vector<std::string> order = {"ready",   "created", "bound",
                                          "written", "unbound", "released"};
  std::vector<std::string> seen;
  uint64_t base[2] = {0, 0};  // charged at the first step: the contexts
  long long size = 0;         // the memory bound on each device
  Fields line;
  for (std::string step; !(step = NextHold(*p, &line)).empty();) {
    seen.push_back(step);
    ASSERT_NO_FATAL_FAILURE(OpenBooks());
    ASSERT_FALSE(line.empty()) << step << ": no line\n" << out_;
    EXPECT_EQ(Field(line, "failed"), 0) << step << "\n" << out_;
    const pid_t pid = pid_t(Field(line, "pid"));
    for (int d = 0; d < 2; ++d) {
      const std::string n = std::to_string(d);
      const uint64_t charged = Charged(pid, d, step);
      if (step == "ready") {
        EXPECT_GT(charged, 0u) << "device " << d << ": its context is charged";
        base[d] = charged;
      }
      EXPECT_EQ(charged, base[d] + uint64_t(Field(line, "holds" + n))) << step << " device " << d;
      const uint64_t all = libvgpu() ? region_->UsedBytes(d) : state_file_->UsedBytes(d);
      EXPECT_EQ(uint64_t(Field(line, "total" + n) - Field(line, "free" + n)), all)
          << step << " device " << d << ": cudaMemGetInfo's total less its free";
      if (libvgpu()) {
        EXPECT_EQ(uint64_t(Field(line, "total" + n)), kLimit) << step << " device " << d;
      }
    }
    if (step == "ready") {
      EXPECT_EQ(Field(line, "supported"), 1) << "h100-hgx offers multicast";
    }
    if (step == "created") {
      size = Field(line, "size");
      EXPECT_GT(size, 0);
      EXPECT_EQ(Field(line, "holds0"), 0) << "the object holds no memory";
    }
    if (step == "bound") {
      EXPECT_EQ(Field(line, "holds0"), size);
      EXPECT_EQ(Field(line, "past"), libvgpu() ? kOutOfMemory : 0)
          << "1 GiB more fits the device, not the budget\n"
          << out_;
    }
    if (step == "written") {
      EXPECT_EQ(Field(line, "reach0"), 1) << "device 0's memory holds what was written";
      EXPECT_EQ(Field(line, "reach1"), 1) << "device 1's memory holds what was written";
    }
    if (step == "unbound") {
      EXPECT_EQ(Field(line, "refused"), 1) << "a write with device 1 unbound";
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

INSTANTIATE_TEST_SUITE_P(Multicast, MulticastClientTest,
                         ::testing::Values(Under::kAlone, Under::kLibvgpu), CaseName);

}  // namespace
}  // namespace hami::testing
