// Several processes on one simulated machine: what NVML reports covers all of them.
#include <cuda.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nvml/nvml.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

class MultiProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_ = SimEnv::Setup("h100-80g:2");
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev0_), NVML_SUCCESS);
  }
  void TearDown() override { nvmlShutdown(); }

  std::unique_ptr<Subprocess> Worker(std::vector<std::string> steps) {
    steps.insert(steps.begin(), TestProgram("sim_worker"));
    return std::make_unique<Subprocess>(steps, std::map<std::string, std::string>{});
  }

  std::vector<nvmlProcessInfo_t> Processes(nvmlDevice_t dev) {
    unsigned count = 64;
    std::vector<nvmlProcessInfo_t> infos(count);
    EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(dev, &count, infos.data()), NVML_SUCCESS);
    infos.resize(count);
    return infos;
  }

  // Initializes CUDA in this process and makes `device`'s primary context current.
  static CUcontext MakeCurrent(int device) {
    CUcontext ctx = nullptr;
    EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, device), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    return ctx;
  }

  std::string state_;
  nvmlDevice_t dev0_ = nullptr;
};

TEST_F(MultiProcessTest, TwoAllocatingProcessesBothAppearWithTheirMemory) {
  nvmlMemory_t before;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &before), NVML_SUCCESS);

  auto a = Worker({"alloc", "1g", "hold"});
  auto b = Worker({"alloc", "3g", "hold"});
  ASSERT_TRUE(a->WaitForLine("holding"));
  ASSERT_TRUE(b->WaitForLine("holding"));

  auto procs = Processes(dev0_);
  ASSERT_EQ(procs.size(), 2u);
  const uint64_t context = 500ull << 20;  // h100-80g's context cost
  for (const nvmlProcessInfo_t& p : procs) {
    if (p.pid == unsigned(a->pid())) {
      EXPECT_EQ(p.usedGpuMemory, context + (1ull << 30));
    } else {
      EXPECT_EQ(p.pid, unsigned(b->pid()));
      EXPECT_EQ(p.usedGpuMemory, context + (3ull << 30));
    }
  }
  nvmlMemory_t during;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &during), NVML_SUCCESS);
  EXPECT_EQ(during.used - before.used, 2 * context + (4ull << 30));
  EXPECT_EQ(during.total, before.total);
  EXPECT_EQ(during.free + during.used, during.total);

  a->CloseStdin();
  b->CloseStdin();
  EXPECT_EQ(a->Wait(), 0);
  EXPECT_EQ(b->Wait(), 0);
}

TEST_F(MultiProcessTest, AKilledProcessDisappearsAndItsMemoryReturns) {
  nvmlMemory_t before;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &before), NVML_SUCCESS);
  auto a = Worker({"alloc", "2g", "hold"});
  ASSERT_TRUE(a->WaitForLine("holding"));
  ASSERT_EQ(Processes(dev0_).size(), 1u);
  a->Kill(SIGKILL);
  EXPECT_EQ(a->Wait(), 128 + SIGKILL);
  EXPECT_TRUE(Processes(dev0_).empty());
  nvmlMemory_t after;
  ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, &after), NVML_SUCCESS);
  EXPECT_EQ(after.used, before.used);
}

TEST_F(MultiProcessTest, CuMemGetInfoSeesTheMemoryOfADeadProcessFreeAgain) {
  CUcontext ctx = MakeCurrent(0);
  ASSERT_NE(ctx, nullptr);
  size_t free_before, free_during, free_after, total;
  ASSERT_EQ(cuMemGetInfo_v2(&free_before, &total), CUDA_SUCCESS);
  auto a = Worker({"alloc", "3g", "hold"});
  ASSERT_TRUE(a->WaitForLine("holding"));
  ASSERT_EQ(cuMemGetInfo_v2(&free_during, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_before - free_during, (3ull << 30) + (500ull << 20));
  a->Kill(SIGKILL);
  ASSERT_EQ(a->Wait(), 128 + SIGKILL);
  ASSERT_EQ(cuMemGetInfo_v2(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

TEST_F(MultiProcessTest, AForkChildStartsAfreshAndNeverTakesItsParentsPlace) {
  CUcontext ctx = MakeCurrent(0);
  ASSERT_NE(ctx, nullptr);
  CUdeviceptr p;
  ASSERT_EQ(cuMemAlloc_v2(&p, 1ull << 30), CUDA_SUCCESS);
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  pid_t child = fork();
  if (child == 0) {
    int count = 0;
    // The parent's initialization does not carry over: the child is a new CUDA process.
    if (cuDeviceGetCount(&count) != CUDA_ERROR_NOT_INITIALIZED) _exit(10);
    if (cuInit(0) != CUDA_SUCCESS) _exit(11);
    CUcontext c;
    CUdeviceptr q;
    if (cuDevicePrimaryCtxRetain(&c, 0) != CUDA_SUCCESS) _exit(12);
    if (cuCtxSetCurrent(c) != CUDA_SUCCESS) _exit(13);
    if (cuMemAlloc_v2(&q, 2ull << 30) != CUDA_SUCCESS) _exit(14);
    char go = 1;
    if (write(to_parent[1], &go, 1) != 1 || read(to_child[0], &go, 1) != 1) _exit(15);
    _exit(0);
  }
  close(to_parent[1]);
  close(to_child[0]);
  char go;
  if (read(to_parent[0], &go, 1) != 1) {
    int st = 0;
    waitpid(child, &st, 0);
    FAIL() << "the child failed at step " << WEXITSTATUS(st);
  }
  const uint64_t context = 500ull << 20;
  auto procs = Processes(dev0_);
  ASSERT_EQ(procs.size(), 2u);
  for (const nvmlProcessInfo_t& info : procs) {
    EXPECT_EQ(info.usedGpuMemory,
              info.pid == unsigned(getpid()) ? context + (1ull << 30) : context + (2ull << 30));
  }
  ASSERT_EQ(write(to_child[1], &go, 1), 1);
  close(to_child[1]);
  close(to_parent[0]);
  int st = 0;
  ASSERT_EQ(waitpid(child, &st, 0), child);
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "child step " << WEXITSTATUS(st);
  procs = Processes(dev0_);
  ASSERT_EQ(procs.size(), 1u) << "the child's exit must not remove its parent";
  EXPECT_EQ(procs[0].pid, unsigned(getpid()));
  EXPECT_EQ(procs[0].usedGpuMemory, context + (1ull << 30));
  EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

TEST_F(MultiProcessTest, ManyThreadsAllocatingCopyingAndLaunchingKeepTheBooksExact) {
  CUcontext ctx = MakeCurrent(1);
  ASSERT_NE(ctx, nullptr);
  CUmodule module;
  CUfunction kernel;
  ASSERT_EQ(cuModuleLoadData(&module, "hami-sim-module\nkernel k wave_ns=1000\n"), CUDA_SUCCESS);
  ASSERT_EQ(cuModuleGetFunction(&kernel, module, "k"), CUDA_SUCCESS);
  size_t free_before, total;
  ASSERT_EQ(cuMemGetInfo_v2(&free_before, &total), CUDA_SUCCESS);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      if (cuCtxSetCurrent(ctx) != CUDA_SUCCESS) failures++;
      CUstream stream;
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) failures++;
      for (int i = 0; i < 150; ++i) {
        size_t bytes = size_t(1 + (t * 7919 + i * 104729) % (3 << 20));
        CUdeviceptr p;
        if (cuMemAlloc_v2(&p, bytes) != CUDA_SUCCESS) {
          failures++;
          continue;
        }
        std::vector<unsigned char> in(bytes, static_cast<unsigned char>(t * 31 + i)), out(bytes);
        if (cuMemcpyHtoDAsync_v2(p, in.data(), bytes, stream) != CUDA_SUCCESS ||
            cuLaunchKernel(kernel, 64, 1, 1, 128, 1, 1, 0, stream, nullptr, nullptr) !=
                CUDA_SUCCESS ||
            cuMemcpyDtoHAsync_v2(out.data(), p, bytes, stream) != CUDA_SUCCESS ||
            cuStreamSynchronize(stream) != CUDA_SUCCESS || in != out ||
            cuMemFree_v2(p) != CUDA_SUCCESS) {
          failures++;
        }
      }
      if (cuStreamDestroy_v2(stream) != CUDA_SUCCESS) failures++;
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  size_t free_after;
  ASSERT_EQ(cuMemGetInfo_v2(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before) << "every charge was returned";
  EXPECT_EQ(cuModuleUnload(module), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
}

// A tool opens NVML for one query and closes the library: the host-PID resolver its
// initialization started keeps the library loaded and goes on answering.
TEST(HostPidResolver, ServesOnAfterItsLibraryIsClosed) {
  std::map<std::string, std::string> env = {{"HAMI_SIM_STATE", SimEnv::NewStatePath()},
                                            {"LD_LIBRARY_PATH", ""}};
  Subprocess p({TestProgram("sim_nvml_dlclose_probe"), HAMI_SIM_NVML_LIBRARY}, env);
  std::string out = p.ReadAll();
  EXPECT_EQ(p.Wait(), 0) << out;
  EXPECT_NE(out.find("resolver " + std::to_string(p.pid()) + "\n"), std::string::npos) << out;
}

class PidNamespaceTest : public MultiProcessTest, public ::testing::WithParamInterface<bool> {};

TEST_P(PidNamespaceTest, NvmlNamesAProcessInAPidNamespaceByItsHostPid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a PID namespace";
  {
    Subprocess probe(
        {"/usr/bin/unshare", "--pid", "--fork", "--mount", "--mount-proc", "/bin/true"}, {});
    if (probe.Wait() != 0) GTEST_SKIP() << "this kernel or sandbox refuses new PID namespaces";
  }
  bool own_proc = GetParam();
  std::vector<std::string> argv = {"/usr/bin/unshare", "--pid", "--fork"};
  if (own_proc) {
    argv.push_back("--mount");
    argv.push_back("--mount-proc");
  }
  argv.push_back(TestProgram("sim_worker"));
  argv.push_back("alloc");
  argv.push_back("1g");
  argv.push_back("hold");
  Subprocess unshare(argv, {});
  auto line = unshare.WaitForLine("holding");
  ASSERT_TRUE(line) << "unshare failed (no PID namespace support?)";
  EXPECT_EQ(*line, "holding pid=1") << "the worker runs as PID 1 of its namespace";
  pid_t host_pid = OnlyChildOf(unshare.pid());  // it said "holding"
  ASSERT_GT(host_pid, 0);
  auto procs = Processes(dev0_);
  ASSERT_EQ(procs.size(), 1u);
  EXPECT_EQ(procs[0].pid, unsigned(host_pid));
  unshare.CloseStdin();
  EXPECT_EQ(unshare.Wait(), 0);
}

// Asked from inside the namespace, as the interposer's NVML probe asks: a real driver names
// every process by its PID in the initial namespace, never by its namespace PID. The answer
// comes from the host namespace's resolver (this test process, which initialized NVML).
TEST_P(PidNamespaceTest, AProcessInAPidNamespaceSeesItselfListedByItsHostPid) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to create a PID namespace";
  {
    Subprocess probe(
        {"/usr/bin/unshare", "--pid", "--fork", "--mount", "--mount-proc", "/bin/true"}, {});
    if (probe.Wait() != 0) GTEST_SKIP() << "this kernel or sandbox refuses new PID namespaces";
  }
  std::vector<std::string> argv = {"/usr/bin/unshare", "--pid", "--fork"};
  if (GetParam()) {
    argv.push_back("--mount");
    argv.push_back("--mount-proc");
  }
  argv.push_back(TestProgram("sim_nvml_self_probe"));
  Subprocess unshare(argv, {});
  auto self = unshare.WaitForLine("self ");
  ASSERT_TRUE(self) << "unshare failed (no PID namespace support?)";
  EXPECT_EQ(*self, "self 1") << "it runs as PID 1 of its namespace";
  auto pids = unshare.WaitForLine("pids");
  ASSERT_TRUE(pids);
  pid_t host_pid = OnlyChildOf(unshare.pid());  // it printed its lines
  ASSERT_GT(host_pid, 0);
  EXPECT_EQ(*pids, "pids " + std::to_string(host_pid));
  unshare.CloseStdin();
  EXPECT_EQ(unshare.Wait(), 0);
}

INSTANTIATE_TEST_SUITE_P(HostProcOrOwnProc, PidNamespaceTest, ::testing::Bool(),
                         [](const auto& param) { return param.param ? "OwnProc" : "HostProc"; });

}  // namespace
}  // namespace hami::testing
