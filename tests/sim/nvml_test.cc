// The simulated NVML: initialization, device identity, memory, processes, utilization,
// accounting, PCI and topology, modes and sensors, events, and what it does not model.
#include "nvml/nvml.h"

#include <cuda.h>
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/temp_dir.h"
#include "sim/sim_test_util.h"
#include "support/enum_values.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::UnorderedElementsAre;

constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kH100TotalMiB = 81559, kH100ReservedMiB = 540, kH100ContextMiB = 500;

std::string NvmlUuid(nvmlDevice_t dev) {
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(nvmlDeviceGetUUID(dev, buf, sizeof(buf)), NVML_SUCCESS);
  return buf;
}

std::string Serial(nvmlDevice_t dev) {
  char buf[NVML_DEVICE_SERIAL_BUFFER_SIZE] = {};
  EXPECT_EQ(nvmlDeviceGetSerial(dev, buf, sizeof(buf)), NVML_SUCCESS);
  return buf;
}

// Device 0's primary context of this process, current while the object lives.
class PrimaryContext {
 public:
  PrimaryContext() {
    EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx_, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxPushCurrent_v2(ctx_), CUDA_SUCCESS);
  }
  ~PrimaryContext() {
    EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
    CUcontext c;
    EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_SUCCESS);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  }

 private:
  CUcontext ctx_ = nullptr;
};

class NvmlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    SimEnv::Setup("h100-80g:2");
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev0_), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &dev1_), NVML_SUCCESS);
  }
  void TearDown() override { EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS); }

  static std::unique_ptr<Subprocess> Worker(std::vector<std::string> steps) {
    steps.insert(steps.begin(), TestProgram("sim_worker"));
    return std::make_unique<Subprocess>(steps, std::map<std::string, std::string>{});
  }

  nvmlDevice_t dev0_ = nullptr, dev1_ = nullptr;
};

// ---- initialization ----

TEST_F(NvmlTest, InitIsRefcountedAndEveryCallAfterTheLastShutdownIsUninitialized) {
  EXPECT_IN_CHILD({}, [] {  // a process where NVML was never initialized
    unsigned count = 0;
    nvmlDevice_t dev;
    EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlInit(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS) << "one reference left";
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_ERROR_UNINITIALIZED);
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    EXPECT_EQ(nvmlDeviceGetName(dev, name, sizeof(name)), NVML_ERROR_UNINITIALIZED);
    EXPECT_EQ(nvmlShutdown(), NVML_ERROR_UNINITIALIZED);
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS) << "NVML may start again";
    EXPECT_EQ(nvmlDeviceGetName(dev, name, sizeof(name)), NVML_SUCCESS);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST_F(NvmlTest, InitWithFlagsRefusesUnknownFlags) {
  EXPECT_EQ(nvmlInitWithFlags(4), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(nvmlInitWithFlags(NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH), NVML_SUCCESS);
  EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
}

TEST_F(NvmlTest, AMalformedVariableFailsInit) {
  EXPECT_IN_CHILD({{"HAMI_SIM_UTIL_WINDOW_MS", "1"}},
                  [] { EXPECT_EQ(nvmlInit_v2(), NVML_ERROR_UNKNOWN); });
}

TEST_F(NvmlTest, AMachineWithoutGpusInitializesWithNoDevices) {
  EXPECT_IN_CHILD({{"HAMI_SIM_PROFILE", "none"}, {"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    unsigned count = 9;
    nvmlDevice_t dev;
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    EXPECT_EQ(count, 0u);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

// ---- enumeration and identity ----

TEST_F(NvmlTest, CountsEveryDeviceWithEitherVersion) {
  unsigned v2 = 0, v1 = 0;
  ASSERT_EQ(nvmlDeviceGetCount_v2(&v2), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetCount(&v1), NVML_SUCCESS);
  EXPECT_EQ(v2, 2u);
  EXPECT_EQ(v1, 2u);
  EXPECT_EQ(nvmlDeviceGetCount_v2(nullptr), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, HandlesByIndexAreStableAndOutOfRangeIsInvalid) {
  nvmlDevice_t again = nullptr;
  EXPECT_NE(dev0_, dev1_);
  ASSERT_EQ(nvmlDeviceGetHandleByIndex(1, &again), NVML_SUCCESS);
  EXPECT_EQ(again, dev1_);
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(2, &again), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  unsigned index = 9, minor = 9;
  ASSERT_EQ(nvmlDeviceGetIndex(dev1_, &index), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetMinorNumber(dev1_, &minor), NVML_SUCCESS);
  EXPECT_EQ(index, 1u);
  EXPECT_EQ(minor, 1u);
}

TEST_F(NvmlTest, AUuidNamesTheSameDeviceAsInCuda) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  for (CUdevice d : {0, 1}) {
    nvmlDevice_t dev = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByUUID(CudaUuid(d).c_str(), &dev), NVML_SUCCESS);
    EXPECT_EQ(dev, d == 0 ? dev0_ : dev1_);
    EXPECT_EQ(NvmlUuid(dev), CudaUuid(d));
  }
  nvmlDevice_t dev;
  EXPECT_EQ(nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000", &dev),
            NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetHandleByUUID(nullptr, &dev), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, ShowsEveryDeviceWhateverCudaVisibleDevicesSays) {
  const std::string uuid1 = NvmlUuid(dev1_);
  EXPECT_IN_CHILD({{"CUDA_VISIBLE_DEVICES", "1"}}, [&uuid1] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    int cuda_count = 0;
    unsigned nvml_count = 0;
    EXPECT_EQ(cuDeviceGetCount(&cuda_count), CUDA_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetCount_v2(&nvml_count), NVML_SUCCESS);
    EXPECT_EQ(cuda_count, 1);
    EXPECT_EQ(nvml_count, 2u);
    nvmlDevice_t dev;
    unsigned index = 0;
    ASSERT_EQ(nvmlDeviceGetHandleByUUID(CudaUuid(0).c_str(), &dev), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetIndex(dev, &index), NVML_SUCCESS);
    EXPECT_EQ(index, 1u) << "CUDA's device 0 is NVML's device 1";
    EXPECT_EQ(CudaUuid(0), uuid1);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

// A device-nodes file (sim/device_nodes.h) holding `text`: a container's GPUs.
std::string DeviceNodesFile(const TempDir& dir, const std::string& text) {
  std::ofstream(dir.File("device-nodes")) << text;
  return dir.File("device-nodes");
}

// As real NVML in a container, which ignores GPUs whose device node it cannot open: only the
// listed devices, indexed from 0; any other is not found. The minor number stays the
// machine's (the container's node is /dev/nvidia1).
TEST_F(NvmlTest, DeviceNodesShowOnlyTheListedDevicesIndexedFromZero) {
  const std::string uuid0 = NvmlUuid(dev0_), uuid1 = NvmlUuid(dev1_), serial0 = Serial(dev0_);
  TempDir dir("hami-device-nodes");
  const std::string nodes = DeviceNodesFile(dir, uuid1 + "\n");
  EXPECT_IN_CHILD({{"HAMI_SIM_DEVICE_NODES", nodes}}, [&] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    unsigned count = 0, index = 9, minor = 9;
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    EXPECT_EQ(count, 1u);
    nvmlDevice_t dev = nullptr, other = nullptr;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    EXPECT_EQ(NvmlUuid(dev), uuid1);
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &other), NVML_ERROR_INVALID_ARGUMENT);
    ASSERT_EQ(nvmlDeviceGetIndex(dev, &index), NVML_SUCCESS);
    EXPECT_EQ(index, 0u);
    ASSERT_EQ(nvmlDeviceGetMinorNumber(dev, &minor), NVML_SUCCESS);
    EXPECT_EQ(minor, 1u);
    ASSERT_EQ(nvmlDeviceGetHandleByUUID(uuid1.c_str(), &other), NVML_SUCCESS);
    EXPECT_EQ(other, dev);
    ASSERT_EQ(nvmlDeviceGetHandleByPciBusId_v2("00000000:17:00.0", &other), NVML_SUCCESS);
    EXPECT_EQ(other, dev);
    EXPECT_EQ(nvmlDeviceGetHandleByUUID(uuid0.c_str(), &other), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("00000000:08:00.0", &other), NVML_ERROR_NOT_FOUND);
    EXPECT_EQ(nvmlDeviceGetHandleBySerial(serial0.c_str(), &other), NVML_ERROR_NOT_FOUND);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    EXPECT_THAT(CudaUuids(), ::testing::ElementsAre(uuid1)) << "CUDA sees the same device";
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST_F(NvmlTest, AMalformedDeviceNodesFileShowsNoDevice) {
  TempDir dir("hami-device-nodes");
  const std::string nodes = DeviceNodesFile(dir, "GPU-0\n");
  EXPECT_IN_CHILD({{"HAMI_SIM_DEVICE_NODES", nodes}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    unsigned count = 9;
    nvmlDevice_t dev;
    EXPECT_EQ(nvmlDeviceGetCount_v2(&count), NVML_SUCCESS);
    EXPECT_EQ(count, 0u) << "never every device";
    EXPECT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST_F(NvmlTest, APciBusIdNamesADeviceWithAFourOrEightDigitDomain) {
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(nvmlDeviceGetHandleByPciBusId_v2("0000:08:00.0", &dev), NVML_SUCCESS);
  EXPECT_EQ(dev, dev0_);
  ASSERT_EQ(nvmlDeviceGetHandleByPciBusId_v2("00000000:08:00.0", &dev), NVML_SUCCESS);
  EXPECT_EQ(dev, dev0_);
  ASSERT_EQ(nvmlDeviceGetHandleByPciBusId("00000000:17:00.0", &dev), NVML_SUCCESS);
  EXPECT_EQ(dev, dev1_);
  EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("0000:99:00.0", &dev), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2("bus 8", &dev), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetHandleByPciBusId_v2(nullptr, &dev), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, ASerialNamesItsDevice) {
  const std::string s0 = Serial(dev0_), s1 = Serial(dev1_);
  EXPECT_NE(s0, s1);
  EXPECT_EQ(s0.size(), 13u);
  nvmlDevice_t dev = nullptr;
  ASSERT_EQ(nvmlDeviceGetHandleBySerial(s1.c_str(), &dev), NVML_SUCCESS);
  EXPECT_EQ(dev, dev1_);
  EXPECT_EQ(nvmlDeviceGetHandleBySerial("1000000000000", &dev), NVML_ERROR_NOT_FOUND);
}

TEST_F(NvmlTest, StringsNeedRoomForTheirTerminator) {
  const std::string name = "NVIDIA H100 80GB HBM3";
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE];
  EXPECT_EQ(nvmlDeviceGetName(dev0_, buf, unsigned(name.size())), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_EQ(nvmlDeviceGetName(dev0_, buf, unsigned(name.size() + 1)), NVML_SUCCESS);
  EXPECT_EQ(buf, name);
  const std::string uuid = NvmlUuid(dev0_);
  EXPECT_EQ(nvmlDeviceGetUUID(dev0_, buf, unsigned(uuid.size())), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(nvmlDeviceGetUUID(dev0_, buf, unsigned(uuid.size() + 1)), NVML_SUCCESS);
  const std::string serial = Serial(dev0_);
  EXPECT_EQ(nvmlDeviceGetSerial(dev0_, buf, unsigned(serial.size())), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(nvmlDeviceGetName(dev0_, nullptr, 64), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlSystemGetDriverVersion(buf, 4), NVML_ERROR_INSUFFICIENT_SIZE);
}

TEST_F(NvmlTest, ReportsTheModelsArchitectureAndComputeCapability) {
  nvmlDeviceArchitecture_t arch = 0;
  int major = 0, minor = -1;
  unsigned cores = 0;
  nvmlBrandType_t brand = NVML_BRAND_UNKNOWN;
  ASSERT_EQ(nvmlDeviceGetArchitecture(dev0_, &arch), NVML_SUCCESS);
  EXPECT_EQ(arch, unsigned(NVML_DEVICE_ARCH_HOPPER));
  ASSERT_EQ(nvmlDeviceGetCudaComputeCapability(dev1_, &major, &minor), NVML_SUCCESS);
  EXPECT_EQ(major * 10 + minor, 90);
  ASSERT_EQ(nvmlDeviceGetNumGpuCores(dev0_, &cores), NVML_SUCCESS);
  EXPECT_EQ(cores, 132u * 128);
  ASSERT_EQ(nvmlDeviceGetBrand(dev0_, &brand), NVML_SUCCESS);
  EXPECT_EQ(brand, NVML_BRAND_NVIDIA);
}

// ---- memory ----

TEST_F(NvmlTest, MemoryInfoCountsTheReservationAndAContextsAllocations) {
  auto check = [&](nvmlMemory_t* v1, nvmlMemory_v2_t* v2) {
    v2->version = nvmlMemory_v2;
    ASSERT_EQ(nvmlDeviceGetMemoryInfo(dev0_, v1), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetMemoryInfo_v2(dev0_, v2), NVML_SUCCESS);
    EXPECT_EQ(v1->total, kH100TotalMiB * kMiB);
    EXPECT_EQ(v1->used + v1->free, v1->total);
    EXPECT_EQ(v2->total, v1->total);
    EXPECT_EQ(v2->reserved, kH100ReservedMiB * kMiB);
    EXPECT_EQ(v2->reserved + v2->used + v2->free, v2->total);
    EXPECT_EQ(v1->used, v2->used + v2->reserved) << "v1's used includes the reservation";
  };
  nvmlMemory_t before1, during1, after1;
  nvmlMemory_v2_t before2, during2, after2;
  check(&before1, &before2);
  {
    PrimaryContext ctx;
    CUdeviceptr p;
    ASSERT_EQ(cuMemAlloc_v2(&p, 1ull << 30), CUDA_SUCCESS);
    check(&during1, &during2);
    EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  }
  check(&after1, &after2);
  const uint64_t delta = kH100ContextMiB * kMiB + (1ull << 30);
  EXPECT_EQ(during1.used - before1.used, delta);
  EXPECT_EQ(during2.used - before2.used, delta);
  EXPECT_EQ(after1.used, before1.used);
  EXPECT_EQ(after2.used, before2.used);
}

TEST_F(NvmlTest, MemoryInfoV2ChecksTheStructVersion) {
  nvmlMemory_v2_t m{};
  m.version = 0;
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(dev0_, &m), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  m.version = (1u << 24) | unsigned(sizeof(m));
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(dev0_, &m), NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  EXPECT_EQ(nvmlDeviceGetMemoryInfo_v2(dev0_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetMemoryInfo(dev0_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
}

// ---- processes ----

// Fills `count` entries of `Info` with 0xab, queries, and checks that exactly the two
// workers were written with the layout's stride and the entry after them left alone.
template <typename Info, typename Fn>
void ExpectTwoProcesses(Fn fn, nvmlDevice_t dev, pid_t a, pid_t b, uint64_t a_bytes,
                        uint64_t b_bytes) {
  std::vector<Info> infos(3);
  std::memset(infos.data(), 0xab, sizeof(Info) * infos.size());
  unsigned count = 3;
  ASSERT_EQ(fn(dev, &count, infos.data()), NVML_SUCCESS);
  ASSERT_EQ(count, 2u);
  for (int i = 0; i < 2; ++i) {
    const Info& info = infos[size_t(i)];
    ASSERT_TRUE(info.pid == unsigned(a) || info.pid == unsigned(b)) << info.pid;
    EXPECT_EQ(info.usedGpuMemory, info.pid == unsigned(a) ? a_bytes : b_bytes);
    if constexpr (sizeof(Info) > sizeof(nvmlProcessInfo_v1_t)) {
      EXPECT_EQ(info.gpuInstanceId, 0xFFFFFFFFu);
      EXPECT_EQ(info.computeInstanceId, 0xFFFFFFFFu);
    }
  }
  EXPECT_NE(infos[0].pid, infos[1].pid);
  const auto* tail = reinterpret_cast<const unsigned char*>(&infos[2]);
  for (size_t i = 0; i < sizeof(Info); ++i) EXPECT_EQ(tail[i], 0xab) << "byte " << i;
  count = 1;
  EXPECT_EQ(fn(dev, &count, infos.data()), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u) << "the count needed";
  count = 0;
  EXPECT_EQ(fn(dev, &count, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(count, 2u);
}

template <typename Info, typename Fn>
void ExpectNoProcesses(Fn fn, nvmlDevice_t dev) {
  unsigned count = 0;
  EXPECT_EQ(fn(dev, &count, static_cast<Info*>(nullptr)), NVML_SUCCESS);
  EXPECT_EQ(count, 0u);
}

TEST_F(NvmlTest, ComputeProcessesListEachProcessInEveryStructLayout) {
  auto a = Worker({"alloc", "1g", "hold"});
  auto b = Worker({"alloc", "3g", "hold"});
  ASSERT_TRUE(a->WaitForLine("holding"));
  ASSERT_TRUE(b->WaitForLine("holding"));
  const uint64_t ctx = kH100ContextMiB * kMiB;
  const uint64_t a_bytes = ctx + (1ull << 30), b_bytes = ctx + (3ull << 30);
  ExpectTwoProcesses<nvmlProcessInfo_v1_t>(nvmlDeviceGetComputeRunningProcesses, dev0_, a->pid(),
                                           b->pid(), a_bytes, b_bytes);
  ExpectTwoProcesses<nvmlProcessInfo_v2_t>(nvmlDeviceGetComputeRunningProcesses_v2, dev0_, a->pid(),
                                           b->pid(), a_bytes, b_bytes);
  ExpectTwoProcesses<nvmlProcessInfo_t>(nvmlDeviceGetComputeRunningProcesses_v3, dev0_, a->pid(),
                                        b->pid(), a_bytes, b_bytes);
  ExpectNoProcesses<nvmlProcessInfo_v2_t>(nvmlDeviceGetComputeRunningProcesses_v2, dev1_);
  ExpectNoProcesses<nvmlProcessInfo_v1_t>(nvmlDeviceGetGraphicsRunningProcesses, dev0_);
  ExpectNoProcesses<nvmlProcessInfo_v2_t>(nvmlDeviceGetGraphicsRunningProcesses_v2, dev0_);
  ExpectNoProcesses<nvmlProcessInfo_t>(nvmlDeviceGetGraphicsRunningProcesses_v3, dev0_);
  ExpectNoProcesses<nvmlProcessInfo_v1_t>(nvmlDeviceGetMPSComputeRunningProcesses, dev0_);
  ExpectNoProcesses<nvmlProcessInfo_v2_t>(nvmlDeviceGetMPSComputeRunningProcesses_v2, dev0_);
  ExpectNoProcesses<nvmlProcessInfo_t>(nvmlDeviceGetMPSComputeRunningProcesses_v3, dev0_);

  std::vector<nvmlProcessDetail_v1_t> details(4);
  nvmlProcessDetailList_t list{};
  list.version = nvmlProcessDetailList_v1;
  list.mode = NVML_PROCESS_MODE_COMPUTE;
  list.numProcArrayEntries = 4;
  list.procArray = details.data();
  ASSERT_EQ(nvmlDeviceGetRunningProcessDetailList(dev0_, &list), NVML_SUCCESS);
  ASSERT_EQ(list.numProcArrayEntries, 2u);
  EXPECT_THAT((std::vector<unsigned>{details[0].pid, details[1].pid}),
              UnorderedElementsAre(unsigned(a->pid()), unsigned(b->pid())));
  list.version = 0;
  EXPECT_EQ(nvmlDeviceGetRunningProcessDetailList(dev0_, &list),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH);

  a->CloseStdin();
  b->CloseStdin();
  EXPECT_EQ(a->Wait(), 0);
  EXPECT_EQ(b->Wait(), 0);
}

TEST_F(NvmlTest, AProcessHoldingAContextIsNamedByItsPid) {
  PrimaryContext ctx;
  std::ifstream comm("/proc/self/comm");
  std::string expected;
  std::getline(comm, expected);
  char name[256] = {};
  ASSERT_EQ(nvmlSystemGetProcessName(unsigned(getpid()), name, sizeof(name)), NVML_SUCCESS);
  EXPECT_EQ(name, expected);
  EXPECT_EQ(nvmlSystemGetProcessName(0x7ffffff0u, name, sizeof(name)), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlSystemGetProcessName(unsigned(getpid()), nullptr, 16), NVML_ERROR_INVALID_ARGUMENT);
}

// ---- utilization ----

TEST_F(NvmlTest, AnIdleMachineReportsNoUtilization) {
  EXPECT_IN_CHILD({{"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    for (unsigned i : {0u, 1u}) {
      nvmlDevice_t dev;
      nvmlUtilization_t u{99, 99};
      ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(i, &dev), NVML_SUCCESS);
      ASSERT_EQ(nvmlDeviceGetUtilizationRates(dev, &u), NVML_SUCCESS);
      EXPECT_EQ(u.gpu, 0u);
      EXPECT_EQ(u.memory, 0u);
    }
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST_F(NvmlTest, BackToBackKernelsOfAnotherProcessKeepTheDeviceFullyBusy) {
  auto worker = Worker({"launch-for-ms", "1200", "sync", "hold"});
  ASSERT_TRUE(worker->WaitForLine("holding", 30000));
  nvmlUtilization_t u{};
  ASSERT_EQ(nvmlDeviceGetUtilizationRates(dev0_, &u), NVML_SUCCESS);
  EXPECT_GE(u.gpu, 90u);
  EXPECT_EQ(u.memory, u.gpu / 2);
  unsigned count = 8;
  nvmlProcessUtilizationSample_t samples[8];
  ASSERT_EQ(nvmlDeviceGetProcessUtilization(dev0_, samples, &count, 0), NVML_SUCCESS);
  ASSERT_EQ(count, 1u);
  EXPECT_EQ(samples[0].pid, unsigned(worker->pid()));
  EXPECT_GE(samples[0].smUtil, 90u);
  worker->CloseStdin();
  EXPECT_EQ(worker->Wait(), 0);
}

TEST_F(NvmlTest, ProcessUtilizationSamplesTheProcessThatLaunched) {
  PrimaryContext ctx;
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, kManifest), CUDA_SUCCESS);
  CUfunction k = Function(m, "k20ms");
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);

  unsigned count = 0;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(dev0_, nullptr, &count, 0),
            NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_GE(count, 1u);
  std::vector<nvmlProcessUtilizationSample_t> samples(count);
  ASSERT_EQ(nvmlDeviceGetProcessUtilization(dev0_, samples.data(), &count, 0), NVML_SUCCESS);
  bool found = false;
  for (unsigned i = 0; i < count; ++i) {
    if (samples[i].pid != unsigned(getpid())) continue;
    found = true;
    EXPECT_GT(samples[i].smUtil, 0u);
    EXPECT_LE(samples[i].smUtil, 100u);
  }
  EXPECT_TRUE(found) << "no sample for this process";
  const unsigned long long future_us =
      static_cast<unsigned long long>(RealtimeNs() / 1000) + 10'000'000;
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(dev0_, samples.data(), &count, future_us),
            NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(dev1_, samples.data(), &count, 0), NVML_ERROR_NOT_FOUND)
      << "no process uses device 1";
  EXPECT_EQ(nvmlDeviceGetProcessUtilization(dev0_, samples.data(), nullptr, 0),
            NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
}

TEST_F(NvmlTest, ProcessesUtilizationInfoGivesTheSameSamplesInItsLayout) {
  PrimaryContext ctx;
  CUmodule m;
  ASSERT_EQ(cuModuleLoadData(&m, kManifest), CUDA_SUCCESS);
  CUfunction k = Function(m, "k20ms");
  for (int i = 0; i < 5; ++i) ASSERT_EQ(Launch(k, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  const unsigned long long before_us = static_cast<unsigned long long>(RealtimeNs() / 1000);

  nvmlProcessesUtilizationInfo_t info{};
  info.version = nvmlProcessesUtilizationInfo_v1;
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev0_, &info), NVML_ERROR_INSUFFICIENT_SIZE)
      << "no array: the count needed";
  ASSERT_GE(info.processSamplesCount, 1u);
  const unsigned needed = info.processSamplesCount;
  std::vector<nvmlProcessUtilizationInfo_v1_t> samples(needed + 1);
  std::memset(samples.data(), 0xab, sizeof(samples[0]) * samples.size());
  info.procUtilArray = samples.data();
  info.processSamplesCount = needed - 1;
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev0_, &info), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(info.processSamplesCount, needed);
  info.processSamplesCount = needed + 1;
  ASSERT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev0_, &info), NVML_SUCCESS);
  ASSERT_EQ(info.processSamplesCount, needed);
  const auto* tail = reinterpret_cast<const unsigned char*>(&samples[needed]);
  for (size_t i = 0; i < sizeof(samples[0]); ++i) EXPECT_EQ(tail[i], 0xab) << "byte " << i;
  std::vector<unsigned> pids;
  for (unsigned i = 0; i < needed; ++i) {
    const nvmlProcessUtilizationInfo_v1_t& s = samples[i];
    pids.push_back(s.pid);
    EXPECT_LE(s.smUtil, 100u);
    EXPECT_EQ(s.memUtil, s.smUtil / 2);
    EXPECT_EQ(s.encUtil, 0u);
    EXPECT_EQ(s.decUtil, 0u);
    EXPECT_EQ(s.jpgUtil, 0u);
    EXPECT_EQ(s.ofaUtil, 0u);
    EXPECT_GE(s.timeStamp, before_us);
    EXPECT_LE(s.timeStamp, static_cast<unsigned long long>(RealtimeNs() / 1000));
    if (s.pid == unsigned(getpid())) {
      EXPECT_GT(s.smUtil, 0u) << "this process launched";
    }
  }
  EXPECT_THAT(pids, ::testing::Contains(unsigned(getpid())));
  // The processes nvmlDeviceGetProcessUtilization samples.
  unsigned count = needed + 1;
  std::vector<nvmlProcessUtilizationSample_t> legacy(count);
  ASSERT_EQ(nvmlDeviceGetProcessUtilization(dev0_, legacy.data(), &count, 0), NVML_SUCCESS);
  std::vector<unsigned> legacy_pids;
  for (unsigned i = 0; i < count; ++i) legacy_pids.push_back(legacy[i].pid);
  EXPECT_THAT(pids, ::testing::UnorderedElementsAreArray(legacy_pids));

  info.lastSeenTimeStamp = static_cast<unsigned long long>(RealtimeNs() / 1000) + 10'000'000;
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev0_, &info), NVML_ERROR_NOT_FOUND);
  info.lastSeenTimeStamp = 0;
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev1_, &info), NVML_ERROR_NOT_FOUND)
      << "no process uses device 1";
  info.version = nvmlProcessesUtilizationInfo_v1 + (1u << 24);
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev0_, &info),
            NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
  EXPECT_EQ(nvmlDeviceGetProcessesUtilizationInfo(dev0_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(cuModuleUnload(m), CUDA_SUCCESS);
}

// ---- accounting ----

std::vector<unsigned> AccountingPids(nvmlDevice_t dev) {
  unsigned n = 0;
  nvmlReturn_t r = nvmlDeviceGetAccountingPids(dev, &n, nullptr);
  std::vector<unsigned> pids(n);
  if (r == NVML_ERROR_INSUFFICIENT_SIZE) r = nvmlDeviceGetAccountingPids(dev, &n, pids.data());
  EXPECT_EQ(r, NVML_SUCCESS);
  pids.resize(r == NVML_SUCCESS ? n : 0);
  return pids;
}

TEST_F(NvmlTest, AccountingIsOnAndKeepsARecordOfEachProcessThatUsedTheDevice) {
  nvmlEnableState_t mode = NVML_FEATURE_DISABLED;
  ASSERT_EQ(nvmlDeviceGetAccountingMode(dev0_, &mode), NVML_SUCCESS);
  EXPECT_EQ(mode, NVML_FEATURE_ENABLED);
  unsigned buffer = 0;
  ASSERT_EQ(nvmlDeviceGetAccountingBufferSize(dev0_, &buffer), NVML_SUCCESS);
  EXPECT_EQ(buffer, 256u);

  const int64_t before_ns = RealtimeNs();
  auto worker = Worker({"alloc", "1g", "free-all", "launch-for-ms", "50", "sync", "hold"});
  ASSERT_TRUE(worker->WaitForLine("holding"));
  const int64_t holding_ns = RealtimeNs();
  const unsigned pid = unsigned(worker->pid());
  EXPECT_THAT(AccountingPids(dev0_), ::testing::Contains(pid));
  EXPECT_THAT(AccountingPids(dev1_), ::testing::Not(::testing::Contains(pid)))
      << "it never used device 1";

  // The caller's array, sized as for the process lists.
  unsigned n = 0;
  ASSERT_EQ(nvmlDeviceGetAccountingPids(dev0_, &n, nullptr), NVML_ERROR_INSUFFICIENT_SIZE);
  ASSERT_GE(n, 1u);
  std::vector<unsigned> pids(n + 1, 0xabababab);
  unsigned small = n - 1;
  EXPECT_EQ(nvmlDeviceGetAccountingPids(dev0_, &small, pids.data()), NVML_ERROR_INSUFFICIENT_SIZE);
  EXPECT_EQ(small, n);
  unsigned room = n + 1;
  ASSERT_EQ(nvmlDeviceGetAccountingPids(dev0_, &room, pids.data()), NVML_SUCCESS);
  EXPECT_EQ(room, n);
  EXPECT_EQ(pids[n], 0xababababu) << "nothing written past the PIDs";
  EXPECT_EQ(nvmlDeviceGetAccountingPids(dev0_, nullptr, pids.data()), NVML_ERROR_INVALID_ARGUMENT);

  nvmlAccountingStats_t running{};
  ASSERT_EQ(nvmlDeviceGetAccountingStats(dev0_, pid, &running), NVML_SUCCESS);
  EXPECT_EQ(running.isRunning, 1u);
  EXPECT_EQ(running.time, 0u) << "reported once it has ended";
  EXPECT_EQ(running.maxMemoryUsage, kH100ContextMiB * kMiB + (1ull << 30))
      << "its most, though it freed the allocation";
  EXPECT_GE(running.startTime, static_cast<unsigned long long>(before_ns / 1000));
  EXPECT_LE(running.startTime, static_cast<unsigned long long>(holding_ns / 1000));
  EXPECT_GT(running.gpuUtilization, 0u) << "it launched";
  EXPECT_LE(running.gpuUtilization, 100u);
  EXPECT_EQ(running.memoryUtilization, running.gpuUtilization / 2);

  // Kept after the process has ended, with how long it ran.
  const int64_t closing_ns = RealtimeNs();
  worker->CloseStdin();
  ASSERT_EQ(worker->Wait(), 0);
  EXPECT_THAT(AccountingPids(dev0_), ::testing::Contains(pid));
  nvmlAccountingStats_t ended{};
  ASSERT_EQ(nvmlDeviceGetAccountingStats(dev0_, pid, &ended), NVML_SUCCESS);
  const int64_t after_ns = RealtimeNs();
  EXPECT_EQ(ended.isRunning, 0u);
  EXPECT_EQ(ended.startTime, running.startTime);
  EXPECT_EQ(ended.maxMemoryUsage, running.maxMemoryUsage);
  EXPECT_GE(ended.time, static_cast<unsigned long long>((closing_ns - holding_ns) / 1000000));
  EXPECT_LE(ended.time, static_cast<unsigned long long>((after_ns - before_ns) / 1000000));
  EXPECT_GT(ended.gpuUtilization, 0u);

  EXPECT_EQ(nvmlDeviceGetAccountingStats(dev0_, 0x7ffffff0u, &ended), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetAccountingStats(dev1_, pid, &ended), NVML_ERROR_NOT_FOUND);
  EXPECT_EQ(nvmlDeviceGetAccountingStats(dev0_, pid, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetAccountingMode(dev0_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetAccountingBufferSize(dev0_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, TurningAccountingOffDropsItsRecordsAndRefusesItsQueries) {
  EXPECT_IN_CHILD({{"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t dev;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev), NVML_SUCCESS);
    if (geteuid() != 0) {
      EXPECT_EQ(nvmlDeviceSetAccountingMode(dev, NVML_FEATURE_DISABLED), NVML_ERROR_NO_PERMISSION);
      EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
      return;
    }
    EXPECT_EQ(nvmlDeviceSetAccountingMode(dev, UnnamedValue<nvmlEnableState_t>(2)),
              NVML_ERROR_INVALID_ARGUMENT);
    {
      PrimaryContext ctx;
      EXPECT_THAT(AccountingPids(dev), ::testing::ElementsAre(unsigned(getpid())));
      ASSERT_EQ(nvmlDeviceSetAccountingMode(dev, NVML_FEATURE_DISABLED), NVML_SUCCESS);
      nvmlEnableState_t mode = NVML_FEATURE_ENABLED;
      ASSERT_EQ(nvmlDeviceGetAccountingMode(dev, &mode), NVML_SUCCESS);
      EXPECT_EQ(mode, NVML_FEATURE_DISABLED);
      unsigned n = 4, pids[4];
      nvmlAccountingStats_t stats;
      EXPECT_EQ(nvmlDeviceGetAccountingPids(dev, &n, pids), NVML_ERROR_NOT_SUPPORTED);
      EXPECT_EQ(nvmlDeviceGetAccountingStats(dev, unsigned(getpid()), &stats),
                NVML_ERROR_NOT_SUPPORTED);
      ASSERT_EQ(nvmlDeviceSetAccountingMode(dev, NVML_FEATURE_ENABLED), NVML_SUCCESS);
      EXPECT_TRUE(AccountingPids(dev).empty()) << "the records went with the mode";
      CUdeviceptr p;
      ASSERT_EQ(cuMemAlloc_v2(&p, 64 * kMiB), CUDA_SUCCESS);
      EXPECT_THAT(AccountingPids(dev), ::testing::ElementsAre(unsigned(getpid())))
          << "a new record from its next allocation";
      ASSERT_EQ(nvmlDeviceGetAccountingStats(dev, unsigned(getpid()), &stats), NVML_SUCCESS);
      EXPECT_EQ(stats.maxMemoryUsage, kH100ContextMiB * kMiB + 64 * kMiB);
      EXPECT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
    }
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

// ---- PCI and topology ----

TEST_F(NvmlTest, LegacyPciInfoWritesOnlyThe52ByteLayout) {
  for (auto fn : {nvmlDeviceGetPciInfo, nvmlDeviceGetPciInfo_v2}) {
    unsigned char buf[sizeof(hamiNvmlPciInfoLegacy_t) + 16];
    std::memset(buf, 0xab, sizeof(buf));
    auto* pci = reinterpret_cast<hamiNvmlPciInfoLegacy_t*>(buf);
    ASSERT_EQ(fn(dev1_, pci), NVML_SUCCESS);
    EXPECT_STREQ(pci->busId, "0000:17:00.0");
    EXPECT_EQ(pci->domain, 0u);
    EXPECT_EQ(pci->bus, 0x17u);
    EXPECT_EQ(pci->device, 0u);
    EXPECT_EQ(pci->pciDeviceId, 0x233010DEu);
    for (size_t i = sizeof(hamiNvmlPciInfoLegacy_t); i < sizeof(buf); ++i) {
      EXPECT_EQ(buf[i], 0xab) << "byte " << i << " is past the legacy struct";
    }
  }
}

TEST_F(NvmlTest, PciInfoV3HasBothBusIdForms) {
  nvmlPciInfo_t pci;
  ASSERT_EQ(nvmlDeviceGetPciInfo_v3(dev0_, &pci), NVML_SUCCESS);
  EXPECT_STREQ(pci.busId, "00000000:08:00.0");
  EXPECT_STREQ(pci.busIdLegacy, "0000:08:00.0");
  EXPECT_EQ(pci.bus, 8u);
  EXPECT_EQ(pci.pciDeviceId, 0x233010DEu);
  EXPECT_EQ(pci.pciSubSystemId & 0xffffu, 0x10DEu);
  EXPECT_EQ(nvmlDeviceGetPciInfo_v3(dev0_, nullptr), NVML_ERROR_INVALID_ARGUMENT);
  unsigned gen = 0, width = 0;
  ASSERT_EQ(nvmlDeviceGetCurrPcieLinkGeneration(dev0_, &gen), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetCurrPcieLinkWidth(dev0_, &width), NVML_SUCCESS);
  EXPECT_EQ(gen, 5u);
  EXPECT_EQ(width, 16u);
}

TEST_F(NvmlTest, TwoDevicesSitOnTwoNumaNodesWithDisjointCpus) {
  unsigned node0 = 9, node1 = 9;
  ASSERT_EQ(nvmlDeviceGetNumaNodeId(dev0_, &node0), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetNumaNodeId(dev1_, &node1), NVML_SUCCESS);
  EXPECT_EQ(node0, 0u);
  EXPECT_EQ(node1, 1u);
  constexpr unsigned kWords = 16;
  unsigned long cpus0[kWords], cpus1[kWords], mem0[kWords], mem1[kWords];
  ASSERT_EQ(nvmlDeviceGetCpuAffinity(dev0_, kWords, cpus0), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetCpuAffinityWithinScope(dev1_, kWords, cpus1, NVML_AFFINITY_SCOPE_NODE),
            NVML_SUCCESS);
  long cpus = sysconf(_SC_NPROCESSORS_CONF);
  int in0 = 0, in1 = 0;
  for (long cpu = 0; cpu < long(kWords) * 64; ++cpu) {
    bool a = (cpus0[cpu / 64] >> (cpu % 64)) & 1, b = (cpus1[cpu / 64] >> (cpu % 64)) & 1;
    EXPECT_FALSE(a && b) << "cpu " << cpu << " is in both nodes";
    EXPECT_EQ(a || b, cpu < cpus) << "cpu " << cpu;
    in0 += a;
    in1 += b;
  }
  if (cpus >= 2) {
    EXPECT_GT(in0, 0);
    EXPECT_GT(in1, 0);
  }
  ASSERT_EQ(nvmlDeviceGetMemoryAffinity(dev0_, kWords, mem0, NVML_AFFINITY_SCOPE_NODE),
            NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetMemoryAffinity(dev1_, kWords, mem1, NVML_AFFINITY_SCOPE_SOCKET),
            NVML_SUCCESS);
  EXPECT_EQ(mem0[0], 1ul);
  EXPECT_EQ(mem1[0], 2ul);
  EXPECT_EQ(nvmlDeviceGetMemoryAffinity(dev0_, kWords, mem0, 7), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlDeviceGetCpuAffinity(dev0_, 0, cpus0), NVML_ERROR_INVALID_ARGUMENT);
}

TEST_F(NvmlTest, DevicesOnDifferentNodesMeetAtTheSystemLevelAndReachEachOther) {
  nvmlGpuTopologyLevel_t level;
  ASSERT_EQ(nvmlDeviceGetTopologyCommonAncestor(dev0_, dev1_, &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_SYSTEM);
  ASSERT_EQ(nvmlDeviceGetTopologyCommonAncestor(dev0_, dev0_, &level), NVML_SUCCESS);
  EXPECT_EQ(level, NVML_TOPOLOGY_INTERNAL);
  nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
  ASSERT_EQ(nvmlDeviceGetP2PStatus(dev0_, dev1_, NVML_P2P_CAPS_INDEX_READ, &status), NVML_SUCCESS);
  EXPECT_EQ(status, NVML_P2P_STATUS_OK);
  EXPECT_EQ(nvmlDeviceGetP2PStatus(dev0_, dev1_, NVML_P2P_CAPS_INDEX_UNKNOWN, &status),
            NVML_ERROR_INVALID_ARGUMENT);
}

// ---- MIG, modes and sensors ----

TEST_F(NvmlTest, AnH100HasMigDisabledAndAT4CannotDoMig) {
  unsigned current = 9, pending = 9, max = 0, is_mig = 9;
  ASSERT_EQ(nvmlDeviceGetMigMode(dev0_, &current, &pending), NVML_SUCCESS);
  EXPECT_EQ(current, unsigned(NVML_DEVICE_MIG_DISABLE));
  EXPECT_EQ(pending, unsigned(NVML_DEVICE_MIG_DISABLE));
  ASSERT_EQ(nvmlDeviceGetMaxMigDeviceCount(dev0_, &max), NVML_SUCCESS);
  EXPECT_EQ(max, 7u);
  ASSERT_EQ(nvmlDeviceIsMigDeviceHandle(dev0_, &is_mig), NVML_SUCCESS);
  EXPECT_EQ(is_mig, 0u);
  nvmlDevice_t mig;
  EXPECT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(dev0_, 0, &mig), NVML_ERROR_NOT_FOUND);
  EXPECT_IN_CHILD({{"HAMI_SIM_PROFILE", "t4-16g"}, {"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    nvmlDevice_t t4;
    unsigned c = 0, p = 0, n = 9;
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &t4), NVML_SUCCESS);
    EXPECT_EQ(nvmlDeviceGetMigMode(t4, &c, &p), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlDeviceGetMaxMigDeviceCount(t4, &n), NVML_SUCCESS);
    EXPECT_EQ(n, 0u);
    nvmlDevice_t m;
    EXPECT_EQ(nvmlDeviceGetMigDeviceHandleByIndex(t4, 0, &m), NVML_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST_F(NvmlTest, ModesAreThoseOfADataCenterBoard) {
  nvmlEnableState_t persistence = NVML_FEATURE_DISABLED, ecc = NVML_FEATURE_DISABLED,
                    ecc_pending = NVML_FEATURE_DISABLED;
  nvmlComputeMode_t compute = NVML_COMPUTEMODE_PROHIBITED;
  ASSERT_EQ(nvmlDeviceGetPersistenceMode(dev0_, &persistence), NVML_SUCCESS);
  EXPECT_EQ(persistence, NVML_FEATURE_ENABLED);
  ASSERT_EQ(nvmlDeviceGetComputeMode(dev0_, &compute), NVML_SUCCESS);
  EXPECT_EQ(compute, NVML_COMPUTEMODE_DEFAULT);
  ASSERT_EQ(nvmlDeviceGetEccMode(dev0_, &ecc, &ecc_pending), NVML_SUCCESS);
  EXPECT_EQ(ecc, NVML_FEATURE_ENABLED);
  EXPECT_EQ(ecc_pending, NVML_FEATURE_ENABLED);
}

TEST_F(NvmlTest, SensorsAndClocksStayWithinTheModelsLimits) {
  unsigned temp = 0, power = 0, limit = 0, sm = 0, mem = 0, max_sm = 0, speed = 0;
  nvmlPstates_t pstate = NVML_PSTATE_UNKNOWN;
  ASSERT_EQ(nvmlDeviceGetTemperature(dev1_, NVML_TEMPERATURE_GPU, &temp), NVML_SUCCESS);
  EXPECT_GE(temp, 30u);
  EXPECT_LE(temp, 64u);
  EXPECT_EQ(nvmlDeviceGetTemperature(dev1_, NVML_TEMPERATURE_COUNT, &temp),
            NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(nvmlDeviceGetEnforcedPowerLimit(dev1_, &limit), NVML_SUCCESS);
  EXPECT_EQ(limit, 700000u);
  ASSERT_EQ(nvmlDeviceGetPowerUsage(dev1_, &power), NVML_SUCCESS);
  EXPECT_GE(power, limit / 6 - 1000);
  EXPECT_LE(power, limit);
  ASSERT_EQ(nvmlDeviceGetClockInfo(dev1_, NVML_CLOCK_SM, &sm), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetMaxClockInfo(dev1_, NVML_CLOCK_SM, &max_sm), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceGetMaxClockInfo(dev1_, NVML_CLOCK_MEM, &mem), NVML_SUCCESS);
  EXPECT_EQ(max_sm, 1980u);
  EXPECT_LE(sm, max_sm);
  EXPECT_EQ(mem, 2619u);
  EXPECT_EQ(nvmlDeviceGetClockInfo(dev1_, NVML_CLOCK_COUNT, &sm), NVML_ERROR_INVALID_ARGUMENT);
  ASSERT_EQ(nvmlDeviceGetPerformanceState(dev1_, &pstate), NVML_SUCCESS);
  EXPECT_EQ(pstate, NVML_PSTATE_0);
  EXPECT_EQ(nvmlDeviceGetFanSpeed(dev1_, &speed), NVML_ERROR_NOT_SUPPORTED);
}

// ---- events ----

TEST_F(NvmlTest, EventSetsRegisterSupportedTypesAndTheirWaitTimesOut) {
  nvmlEventSet_t set = nullptr;
  ASSERT_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS);
  unsigned long long supported = 0;
  ASSERT_EQ(nvmlDeviceGetSupportedEventTypes(dev0_, &supported), NVML_SUCCESS);
  EXPECT_NE(supported & nvmlEventTypeXidCriticalError, 0u);
  EXPECT_EQ(nvmlDeviceRegisterEvents(dev0_, supported, set), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceRegisterEvents(dev1_, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
  EXPECT_EQ(nvmlDeviceRegisterEvents(dev0_, nvmlEventMigConfigChange, set),
            NVML_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(nvmlDeviceRegisterEvents(dev0_, nvmlEventTypeXidCriticalError, nullptr),
            NVML_ERROR_INVALID_ARGUMENT);
  nvmlEventData_t data;
  hamiNvmlEventDataLegacy_t legacy;
  EXPECT_EQ(nvmlEventSetWait_v2(set, &data, 10), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvmlEventSetWait(set, &legacy, 10), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvmlEventSetWait_v2(set, nullptr, 10), NVML_ERROR_INVALID_ARGUMENT);
  EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
  EXPECT_EQ(nvmlEventSetCreate(nullptr), NVML_ERROR_INVALID_ARGUMENT);
}

// ---- system, errors, bad handles, and what is not modelled ----

TEST_F(NvmlTest, ErrorStringsNameEachCode) {
  EXPECT_STREQ(nvmlErrorString(NVML_SUCCESS), "Success");
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_INSUFFICIENT_SIZE), "Insufficient Size");
  EXPECT_STREQ(nvmlErrorString(NVML_ERROR_UNINITIALIZED), "Uninitialized");
  EXPECT_STREQ(nvmlErrorString(UnnamedValue<nvmlReturn_t>(12345)), "Unknown Error");
}

TEST_F(NvmlTest, VersionsFollowTheSimulatedCudaDriverVersion) {
  char driver[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], nvml[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
  int cuda = 0, cuda_v2 = 0;
  ASSERT_EQ(nvmlSystemGetDriverVersion(driver, sizeof(driver)), NVML_SUCCESS);
  ASSERT_EQ(nvmlSystemGetNVMLVersion(nvml, sizeof(nvml)), NVML_SUCCESS);
  ASSERT_EQ(nvmlSystemGetCudaDriverVersion(&cuda), NVML_SUCCESS);
  ASSERT_EQ(nvmlSystemGetCudaDriverVersion_v2(&cuda_v2), NVML_SUCCESS);
  EXPECT_STREQ(driver, "580.95.05");
  EXPECT_STREQ(nvml, "13.580.95.05");
  EXPECT_EQ(cuda, CUDA_VERSION);
  EXPECT_EQ(cuda_v2, CUDA_VERSION);
  EXPECT_IN_CHILD({{"HAMI_SIM_DRIVER_VERSION", "12040"}}, [] {
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    char d[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE], n[NVML_SYSTEM_NVML_VERSION_BUFFER_SIZE];
    int c = 0, version = 0;
    ASSERT_EQ(nvmlSystemGetDriverVersion(d, sizeof(d)), NVML_SUCCESS);
    ASSERT_EQ(nvmlSystemGetNVMLVersion(n, sizeof(n)), NVML_SUCCESS);
    ASSERT_EQ(nvmlSystemGetCudaDriverVersion(&c), NVML_SUCCESS);
    EXPECT_STREQ(d, "550.127.08");
    EXPECT_STREQ(n, "12.550.127.08");
    EXPECT_EQ(c, 12040);
    ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
    EXPECT_EQ(c, version) << "NVML and CUDA agree";
    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
  });
}

TEST_F(NvmlTest, AHandleNvmlDidNotGiveIsAnInvalidArgument) {
  int not_a_device = 0;
  for (nvmlDevice_t bad :
       {static_cast<nvmlDevice_t>(nullptr), reinterpret_cast<nvmlDevice_t>(&not_a_device)}) {
    char buf[96];
    unsigned v = 0;
    nvmlMemory_t m;
    nvmlPciInfo_t pci;
    nvmlUtilization_t u;
    EXPECT_EQ(nvmlDeviceGetName(bad, buf, sizeof(buf)), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetUUID(bad, buf, sizeof(buf)), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetIndex(bad, &v), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetMemoryInfo(bad, &m), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetPciInfo_v3(bad, &pci), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetUtilizationRates(bad, &u), NVML_ERROR_INVALID_ARGUMENT);
    EXPECT_EQ(nvmlDeviceGetComputeRunningProcesses_v3(bad, &v, nullptr),
              NVML_ERROR_INVALID_ARGUMENT);
    nvmlGpuTopologyLevel_t level;
    EXPECT_EQ(nvmlDeviceGetTopologyCommonAncestor(dev0_, bad, &level), NVML_ERROR_INVALID_ARGUMENT);
  }
}

TEST_F(NvmlTest, ANameTheRealLibraryExportsButTheModelLacksIsNotSupported) {
  using GetString = nvmlReturn_t (*)(nvmlDevice_t, char*, unsigned);
  for (const char* name : {"nvmlDeviceGetVbiosVersion", "nvmlDeviceGetBoardPartNumber"}) {
    auto fn = reinterpret_cast<GetString>(dlsym(RTLD_DEFAULT, name));
    ASSERT_NE(fn, nullptr) << name;
    char buf[96];
    EXPECT_EQ(fn(dev0_, buf, sizeof(buf)), NVML_ERROR_NOT_SUPPORTED) << name;
  }
}

// NVLink, which nvml.h (src/nvml) does not declare: reached by name, with NVML's own types.
TEST_F(NvmlTest, NvLinkLeadsToASwitchOnlyOnABoardWithNvLinkSwitches) {
  using LinkState = nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlEnableState_t*);
  using LinkCapability = nvmlReturn_t (*)(nvmlDevice_t, unsigned, int, unsigned*);
  using RemotePci = nvmlReturn_t (*)(nvmlDevice_t, unsigned, nvmlPciInfo_t*);
  using RemoteType = nvmlReturn_t (*)(nvmlDevice_t, unsigned, int*);
  struct FieldValue {  // nvmlFieldValue_t
    unsigned field_id, scope_id;
    long long timestamp, latency_us;
    int value_type;
    nvmlReturn_t ret;
    unsigned long long value;
  };
  using FieldValues = nvmlReturn_t (*)(nvmlDevice_t, int, FieldValue*);
  auto state = reinterpret_cast<LinkState>(dlsym(RTLD_DEFAULT, "nvmlDeviceGetNvLinkState"));
  auto capability =
      reinterpret_cast<LinkCapability>(dlsym(RTLD_DEFAULT, "nvmlDeviceGetNvLinkCapability"));
  auto remote =
      reinterpret_cast<RemotePci>(dlsym(RTLD_DEFAULT, "nvmlDeviceGetNvLinkRemotePciInfo_v2"));
  auto type =
      reinterpret_cast<RemoteType>(dlsym(RTLD_DEFAULT, "nvmlDeviceGetNvLinkRemoteDeviceType"));
  auto fields = reinterpret_cast<FieldValues>(dlsym(RTLD_DEFAULT, "nvmlDeviceGetFieldValues"));
  ASSERT_TRUE(state && capability && remote && type && fields);
  nvmlEnableState_t active = NVML_FEATURE_DISABLED;
  EXPECT_EQ(state(dev0_, 0, &active), NVML_ERROR_NOT_SUPPORTED) << "h100-80g: no NVLink";
  FieldValue v{165, 0, 0, 0, 0, NVML_SUCCESS, 0};  // NVML_FI_DEV_NVLINK_GET_STATE, link 0
  EXPECT_EQ(fields(dev0_, 1, &v), NVML_ERROR_NOT_SUPPORTED);
  EXPECT_IN_CHILD({{"HAMI_SIM_PROFILE", "h100-hgx:2"}, {"HAMI_SIM_STATE", SimEnv::NewStatePath()}},
                  [&] {
                    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
                    nvmlDevice_t dev;
                    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &dev), NVML_SUCCESS);
                    for (unsigned link = 0; link < 18; ++link) {
                      nvmlEnableState_t up = NVML_FEATURE_DISABLED;
                      EXPECT_EQ(state(dev, link, &up), NVML_SUCCESS);
                      EXPECT_EQ(up, NVML_FEATURE_ENABLED);
                      unsigned p2p = 0;
                      EXPECT_EQ(capability(dev, link, 0, &p2p), NVML_SUCCESS);  // P2P_SUPPORTED
                      EXPECT_EQ(p2p, 1u);
                      int kind = -1;
                      EXPECT_EQ(type(dev, link, &kind), NVML_SUCCESS);
                      EXPECT_EQ(kind, 2) << "NVML_NVLINK_DEVICE_TYPE_SWITCH";
                      nvmlPciInfo_t pci{};
                      EXPECT_EQ(remote(dev, link, &pci), NVML_SUCCESS);
                      EXPECT_EQ(pci.pciDeviceId, 0x22a310deu) << "an NVSwitch";
                    }
                    EXPECT_EQ(state(dev, 18, nullptr), NVML_ERROR_INVALID_ARGUMENT);
                    nvmlEnableState_t up = NVML_FEATURE_DISABLED;
                    EXPECT_EQ(state(dev, 18, &up), NVML_ERROR_INVALID_ARGUMENT) << "no link 18";
                    FieldValue values[2] = {{165, 17, 0, 0, 0, NVML_SUCCESS, 0},
                                            {1, 0, 0, 0, 0, NVML_SUCCESS, 0}};
                    ASSERT_EQ(fields(dev, 2, values), NVML_SUCCESS);
                    EXPECT_EQ(values[0].ret, NVML_SUCCESS);
                    EXPECT_EQ(unsigned(values[0].value), unsigned(NVML_FEATURE_ENABLED));
                    EXPECT_EQ(values[1].ret, NVML_ERROR_NOT_SUPPORTED) << "a field not modelled";
                    EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS);
                  });
}

TEST(NvmlExports, EveryNameTheRealLibraryExportsIsExported) {
  std::ifstream in(HAMI_NVML_EXPORTS_TXT);
  ASSERT_TRUE(in) << HAMI_NVML_EXPORTS_TXT;
  std::set<std::string> names;
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    names.insert(line);
    EXPECT_NE(dlsym(RTLD_DEFAULT, line.c_str()), nullptr) << line;
  }
  EXPECT_GT(names.size(), 400u);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "nvmlNoSuchFunction"), nullptr);
}

}  // namespace
}  // namespace hami::testing
