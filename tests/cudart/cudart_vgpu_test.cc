// The CUDA runtime clients under libvgpu.so, as a user runs them: `hami run --memory 1g`.
// The runtime reaches the driver through cuGetProcAddress_v2, so these are the interposer's
// routes production takes. Checked: every case still works; cudaMemGetInfo shows the budget;
// an allocation past it fails with cudaErrorMemoryAllocation and the program goes on; a
// cuBLAS workspace larger than the budget fails cleanly; two processes sharing one region
// never hold more than the budget together.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <unistd.h>

#include <array>
#include <map>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "cudart_support.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

constexpr long long kMiB = 1 << 20;
constexpr long long kGiB = 1 << 30;
// Contexts made small, so that a 1 GiB budget leaves room for two processes' allocations.
constexpr long long kContext = 64 * kMiB;
constexpr int kMemoryAllocation = 2;  // cudaErrorMemoryAllocation

class CudartVgpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (std::string reason = CudartSkipReason(); !reason.empty()) GTEST_SKIP() << reason;
#ifdef HAMI_SANITIZER_RUNTIME
    GTEST_SKIP() << "sanitized build: the nvcc-built programs have no sanitizer runtime, and "
                    "hami run preloads the sanitized libvgpu.so ahead of one";
#endif
    state_ = SimEnv::NewStatePath();
  }

  // `hami run --memory 1g -- <command>` on a private simulated machine; stderr merged.
  CudartRun HamiRun(const std::vector<std::string>& command) {
    std::vector<std::string> argv = {"/bin/sh",
                                     "-c",
                                     "exec \"$0\" \"$@\" 2>&1",
                                     std::string(HAMI_BIN_DIR) + "/hami",
                                     "run",
                                     "-q",
                                     "--memory",
                                     "1g",
                                     "--"};
    argv.insert(argv.end(), command.begin(), command.end());
    Subprocess p(argv, Env());
    CudartRun r;
    r.out = p.ReadAll(120000);  // bounds, not expectations
    r.status = p.Wait(120000);
    return r;
  }

 public:
  std::map<std::string, std::string> Env() const {
    return {{"HAMI_SIM_STATE", state_},
            {"HAMI_SIM_PROFILE", ""},
            {"HAMI_SIM_CONTEXT_SIZE", "64m"},
            {"LD_LIBRARY_PATH", ""},
            {"LD_PRELOAD", ""},
            {"CUDA_VISIBLE_DEVICES", ""},
            {"CUDA_DEVICE_MEMORY_LIMIT", ""},
            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""},
            {"CUDA_MODULE_LOADING", ""},
            {"CUDA_OVERSUBSCRIBE", oversubscribe_},
            {"CUDA_OVERSUBSCRIBE_HOST_LIMIT", host_limit_}};
  }

  // CUDA_OVERSUBSCRIBE and CUDA_OVERSUBSCRIBE_HOST_LIMIT of the next runs ("": unset).
  std::string oversubscribe_, host_limit_;

  std::string state_;
};

class CudartVgpuClientTest : public CudartVgpuTest,
                             public ::testing::WithParamInterface<const char*> {
 protected:
  CudartRun RunClient(const std::vector<std::string>& args) {
    std::vector<std::string> command = {CudartProgram(GetParam())};
    command.insert(command.end(), args.begin(), args.end());
    CudartRun r = HamiRun(command);
    EXPECT_EQ(r.status, 0) << r.out;
    return r;
  }
};

TEST_P(CudartVgpuClientTest, EveryCaseStillWorksUnderTheInterposer) {
  CudartRun r = RunClient({"memcpy", "launch", "events", "managed", "pitch", "async", "graph",
                           "host", "threads", "4", "set-device", "1"});
  ExpectSucceeded(CaseFields(r.out, "memcpy"),
                  {"malloc", "h2d", "d2d", "d2h", "memset", "to_symbol", "from_symbol", "free"},
                  "memcpy");
  EXPECT_EQ(Field(CaseFields(r.out, "memcpy"), "match"), 1);
  ExpectSucceeded(CaseFields(r.out, "launch"), {"lead", "launches", "sync", "elapsed", "destroy"},
                  "launch");
  ExpectSucceeded(CaseFields(r.out, "events"), {"record", "sync", "elapsed"}, "events");
  EXPECT_EQ(Field(CaseFields(r.out, "managed"), "match"), 1);
  EXPECT_EQ(Field(CaseFields(r.out, "pitch"), "match"), 1);
  ExpectSucceeded(CaseFields(r.out, "async"), {"alloc", "free", "sync", "pool_alloc", "trim"},
                  "async");
  EXPECT_EQ(Field(CaseFields(r.out, "graph"), "match"), 1);
  ExpectSucceeded(CaseFields(r.out, "graph"), {"instantiate", "launch", "sync"}, "graph");
  EXPECT_EQ(Field(CaseFields(r.out, "host"), "match"), 1);
  EXPECT_EQ(Field(CaseFields(r.out, "threads"), "ok"), 4);
  auto s = CaseFields(r.out, "set_device");
  ExpectSucceeded(s, {"set", "malloc", "attributes", "launch", "sync"}, "set_device");
  EXPECT_EQ(Field(s, "pointer_device"), 1);
}

// With CUDA_OVERSUBSCRIBE, cudaMalloc past the budget is served from host memory: the runtime
// copies through it both ways and device to device, sets it and frees it as device memory;
// cudaMemGetInfo still shows the device budget, spent. Without, the same call fails as before.
TEST_P(CudartVgpuClientTest, CudaMallocPastTheBudgetIsServedFromHostMemoryWithOversubscription) {
  oversubscribe_ = "true";
  host_limit_ = "512m";
  CudartRun r = RunClient({"spill", std::to_string(256 * kMiB)});
  auto s = CaseFields(r.out, "spill");
  ExpectSucceeded(s,
                  {"info", "fill", "past", "h2d", "d2h", "d2d", "d2h_fill", "memset", "d2h_set",
                   "info_after", "free", "free_fill", "again", "free_again"},
                  "spill");
  EXPECT_EQ(Field(s, "match"), 1);
  EXPECT_EQ(Field(s, "d2d_match"), 1);
  EXPECT_EQ(Field(s, "set_match"), 1);
  EXPECT_EQ(Field(s, "free_after"), 0) << "the device budget is spent, not raised";

  // Past both budgets: the allocation fails and the program goes on.
  r = RunClient({"spill", std::to_string(768 * kMiB)});
  s = CaseFields(r.out, "spill");
  EXPECT_EQ(Field(s, "past"), kMemoryAllocation);
  EXPECT_EQ(Field(s, "free_fill"), 0);

  oversubscribe_ = "";
  r = RunClient({"spill", std::to_string(256 * kMiB)});
  s = CaseFields(r.out, "spill");
  EXPECT_EQ(Field(s, "fill"), 0);
  EXPECT_EQ(Field(s, "past"), kMemoryAllocation) << "without oversubscription, as before";
}

TEST_P(CudartVgpuClientTest, MemGetInfoShowsTheBudget) {
  CudartRun r = RunClient({"meminfo", "set-device", "0"});
  auto m = CaseFields(r.out, "meminfo");
  EXPECT_EQ(Field(m, "err"), 0);
  EXPECT_EQ(Field(m, "total"), kGiB);
  EXPECT_EQ(Field(m, "total") - Field(m, "free"), kContext) << "the context is charged";
  EXPECT_LE(Field(CaseFields(r.out, "set_device"), "used"), kGiB);
}

TEST_P(CudartVgpuClientTest, AnAllocationPastTheBudgetFailsAndTheProgramGoesOn) {
  CudartRun r = RunClient({"overcommit", "2147483648"});
  auto o = CaseFields(r.out, "overcommit");
  EXPECT_EQ(Field(o, "big"), kMemoryAllocation);
  EXPECT_EQ(Field(o, "last"), kMemoryAllocation);
  ExpectSucceeded(o, {"cleared", "small", "h2d", "d2h", "launch", "sync", "free"}, "overcommit");
  EXPECT_EQ(Field(o, "match"), 1);
}

INSTANTIATE_TEST_SUITE_P(SharedStaticAndPerThread, CudartVgpuClientTest,
                         ::testing::Values("cudart_client_shared", "cudart_client_static",
                                           "cudart_client_ptds"),
                         [](const ::testing::TestParamInfo<const char*>& p) {
                           std::string n = p.param;
                           return n.substr(n.rfind('_') + 1);
                         });

TEST_F(CudartVgpuTest, ACublasWorkspaceLargerThanTheBudgetFailsCleanly) {
  CudartRun r = HamiRun({CudartProgram("cudart_libs"), "cublas", "2147483648"});
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = CaseFields(r.out, "cublas");
  if (f.count("skipped") != 0) GTEST_SKIP() << "cuBLAS is not installed";
  EXPECT_EQ(Field(f, "workspace_alloc"), kMemoryAllocation);
  EXPECT_EQ(f.count("set_workspace"), 0u) << "no workspace to give it";
  ExpectSucceeded(f, {"create", "malloc", "set_matrix", "sgemm", "sync", "destroy", "free"},
                  "cublas with its own workspace");
}

TEST_F(CudartVgpuTest, CufftPlansAndExecutesUnderTheInterposer) {
  CudartRun r = HamiRun({CudartProgram("cudart_libs"), "cufft"});
  ASSERT_EQ(r.status, 0) << r.out;
  auto f = CaseFields(r.out, "cufft");
  if (f.count("skipped") != 0) GTEST_SKIP() << "cuFFT is not installed";
  ExpectSucceeded(f,
                  {"malloc", "plan", "exec", "plan_many", "exec_many", "malloc_large", "plan_large",
                   "exec_large", "sync", "destroy", "free"},
                  "cufft");
}

// Two processes of one container (`hami run --memory 1g`), started together, each grabbing
// 64 MiB at a time until refused once both have made their contexts; `prefixes` go before
// each one's command (another limit of its own, say). Returns what both held together.
long long HoldTogether(CudartVgpuTest& t, const std::string& state,
                       const std::array<std::string, 2>& prefixes) {
  const std::string client = CudartProgram("cudart_client_shared");
  // Held while the test holds this lock: both processes' memory is measured together.
  const std::string lock_file = state + ".hold";
  UniqueFd lock(open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  EXPECT_TRUE(lock.valid());
  EXPECT_EQ(flock(lock.get(), LOCK_EX), 0);
  // Both make their contexts (never refused) and wait; at stdin's end both grab 64 MiB at a
  // time until refused, asking for up to 2 GiB. fd 3 keeps the shell's stdin for the
  // background jobs.
  const std::string script = "exec 3<&0; " + prefixes[0] +
                             " \"$0\" hold 2147483648 67108864 \"$1\" <&3 & " + prefixes[1] +
                             " \"$0\" hold 2147483648 67108864 \"$1\" <&3 & wait";
  std::vector<std::string> argv = {"/bin/sh",
                                   "-c",
                                   "exec \"$0\" \"$@\" 2>&1",
                                   std::string(HAMI_BIN_DIR) + "/hami",
                                   "run",
                                   "-q",
                                   "--memory",
                                   "1g",
                                   "--",
                                   "/bin/sh",
                                   "-c",
                                   script,
                                   client,
                                   lock_file};
  Subprocess p(argv, t.Env());
  for (int i = 0; i < 2; ++i) {
    auto ready = p.WaitForLine("ready ", 120000);
    EXPECT_TRUE(ready) << "process " << i << " did not start";
    if (!ready) return -1;
    EXPECT_EQ(Field(CaseFields(*ready, "ready"), "init"), 0);
  }
  p.CloseStdin();
  long long held = 0;
  for (int i = 0; i < 2; ++i) {
    auto line = p.WaitForLine("hold ", 120000);
    EXPECT_TRUE(line) << "process " << i << " did not report";
    if (!line) return -1;
    auto f = CaseFields(*line, "hold");
    EXPECT_EQ(Field(f, "last"), kMemoryAllocation) << *line;
    held += Field(f, "held");
  }
  EXPECT_EQ(flock(lock.get(), LOCK_UN), 0);
  EXPECT_EQ(p.Wait(120000), 0);
  unlink(lock_file.c_str());
  return held;
}

TEST_F(CudartVgpuTest, TwoRuntimeProcessesSharingOneRegionNeverExceedTheBudgetTogether) {
  long long held = HoldTogether(*this, state_, {"", ""});
  // Two contexts and what both hold fit in 1 GiB, with less than one 64 MiB step to spare.
  EXPECT_LE(held + 2 * kContext, kGiB);
  EXPECT_GT(held + 2 * kContext, kGiB - 64 * kMiB);
}

// Whichever of the two makes the region stamps its own limit; the other, told 2 GiB, must
// not run at 2 GiB beside the one told 1 GiB, whoever came first: a stricter joiner lowers
// the region's limit, and a looser one holds to the region's.
TEST_F(CudartVgpuTest, TwoProcessesStartedTogetherWithDifferentLimitsBothHoldToTheStricter) {
  for (int round = 0; round < 10; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    const std::string looser = "env CUDA_DEVICE_MEMORY_LIMIT=2g";
    std::array<std::string, 2> prefixes = {round % 2 == 0 ? looser : "",
                                           round % 2 == 0 ? "" : looser};
    long long held = HoldTogether(*this, state_, prefixes);
    ASSERT_GE(held, 0);
    EXPECT_LE(held + 2 * kContext, kGiB) << "the stricter limit, 1 GiB, holds for both";
  }
}

}  // namespace
}  // namespace hami::testing
