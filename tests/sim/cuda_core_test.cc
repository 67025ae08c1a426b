// The simulated driver's core API: initialization, devices, CUDA_VISIBLE_DEVICES, profiles,
// contexts, errors and symbol lookup. Streams, events, modules and launches:
// cuda_exec_test.cc.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <future>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "common/temp_dir.h"
#include "sim/sim_test_util.h"
#include "support/enum_values.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Legacy ABIs that cudaTypedefs.h declares only for the driver's own build.
using PfnCuCtxCreateV2000 = CUresult(CUDAAPI*)(CUcontext* pctx, unsigned flags, CUdevice dev);
using PfnCuDeviceTotalMemV2000 = CUresult(CUDAAPI*)(unsigned* bytes, CUdevice dev);

int Attribute(CUdevice_attribute attribute, CUdevice dev = 0) {
  int v = -1;
  EXPECT_EQ(cuDeviceGetAttribute(&v, attribute, dev), CUDA_SUCCESS) << attribute;
  return v;
}

std::string PciBusId(CUdevice dev) {
  char buf[32] = {};
  EXPECT_EQ(cuDeviceGetPCIBusId(buf, sizeof(buf), dev), CUDA_SUCCESS);
  return buf;
}

// ---- initialization ----

class CudaInitTest : public ::testing::Test {
 protected:
  void SetUp() override { SimEnv::Setup("h100-80g:2"); }
};

TEST_F(CudaInitTest, EveryCallBeforeCuInitFailsNotInitializedButDriverGetVersion) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);  // the fork child must start afresh all the same
  EXPECT_IN_CHILD({{"HAMI_SIM_DRIVER_VERSION", std::nullopt}}, [] {
    int n = 0, version = 0;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr p;
    CUmodule m;
    CUstream s;
    char name[64];
    size_t free = 0, total = 0;
    EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuDeviceGet(&dev, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuDeviceGetName(name, sizeof(name), 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuDeviceGetAttribute(&n, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
              CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuCtxGetCurrent(&ctx), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuModuleLoadData(&m, kManifest), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_NOT_INITIALIZED);
    EXPECT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
    EXPECT_EQ(version, CUDA_VERSION);
    EXPECT_EQ(cuInit(1), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS) << "bad flags are not a sticky failure";
    EXPECT_EQ(cuDeviceGetCount(&n), CUDA_SUCCESS);
    EXPECT_EQ(n, 2);
  });
}

TEST_F(CudaInitTest, AForkChildHasNoneOfItsParentsContextsCurrent) {
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  CUcontext primary, created;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&primary, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(primary), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxCreate_v4(&created, nullptr, 0, 1), CUDA_SUCCESS);  // the stack: 2 deep
  EXPECT_IN_CHILD({}, [] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext c = nullptr;
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr);
    EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_ERROR_INVALID_CONTEXT);
  });
  EXPECT_EQ(cuCtxDestroy_v2(created), CUDA_SUCCESS);
  CUcontext c = nullptr;
  EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, primary);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
}

TEST_F(CudaInitTest, CuInitTwiceSucceedsAndNonZeroFlagsAreInvalid) {
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuInit(0), CUDA_SUCCESS);
  EXPECT_EQ(cuInit(2), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaInitTest, DriverVersionIsTheHeadersUnlessHamiSimDriverVersionSaysOtherwise) {
  int version = 0;
  EXPECT_EQ(cuDriverGetVersion(nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuDriverGetVersion(&version), CUDA_SUCCESS);
  EXPECT_EQ(version, CUDA_VERSION);
  EXPECT_IN_CHILD({{"HAMI_SIM_DRIVER_VERSION", "12040"}}, [] {
    int v = 0;
    EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
    EXPECT_EQ(v, 12040) << "before cuInit";
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    EXPECT_EQ(cuDriverGetVersion(&v), CUDA_SUCCESS);
    EXPECT_EQ(v, 12040) << "after cuInit";
  });
}

TEST_F(CudaInitTest, AMalformedVariableFailsCuInitStickily) {
  EXPECT_IN_CHILD({{"HAMI_SIM_WAVE_NS", "0"}}, [] {
    int n = 0;
    EXPECT_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuInit(0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(cuDeviceGetCount(&n), CUDA_ERROR_NOT_INITIALIZED);
  });
}

TEST_F(CudaInitTest, AMachineWithoutGpusFailsCuInitWithNoDevice) {
  EXPECT_IN_CHILD({{"HAMI_SIM_PROFILE", "none"}, {"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [] {
    EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
    EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE);
  });
}

// ---- devices ----

class CudaDeviceTest : public CudaInitTest {
 protected:
  void SetUp() override {
    CudaInitTest::SetUp();
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  }
};

TEST_F(CudaDeviceTest, CountsAndGetsEachDeviceAndRefusesOthers) {
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(cuDeviceGetCount(nullptr), CUDA_ERROR_INVALID_VALUE);
  CUdevice dev = -1;
  EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuDeviceGet(&dev, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(&dev, -1), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGet(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaDeviceTest, NameIsTheProductsAndTruncatesToTheBuffer) {
  char name[64];
  ASSERT_EQ(cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
  EXPECT_STREQ(name, "NVIDIA H100 80GB HBM3");
  char small[7];
  ASSERT_EQ(cuDeviceGetName(small, sizeof(small), 1), CUDA_SUCCESS);
  EXPECT_STREQ(small, "NVIDIA");
  EXPECT_EQ(cuDeviceGetName(name, sizeof(name), 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetName(nullptr, 64, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaDeviceTest, UuidsHaveTheGpuFormAreDistinctAndBothVersionsAgree) {
  std::vector<std::string> uuids = CudaUuids();
  ASSERT_EQ(uuids.size(), 2u);
  const std::regex form("GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}");
  for (const std::string& u : uuids) EXPECT_TRUE(std::regex_match(u, form)) << u;
  EXPECT_NE(uuids[0], uuids[1]);
  CUuuid v1{};
  ASSERT_EQ(Proc<PFN_cuDeviceGetUuid_v9020>("cuDeviceGetUuid", 9020)(&v1, 1), CUDA_SUCCESS);
  EXPECT_EQ(UuidText(v1), uuids[1]);
  EXPECT_EQ(cuDeviceGetUuid_v2(&v1, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetUuid_v2(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaDeviceTest, UuidsAndBusIdsAreTheSameInAnotherProcess) {
  Subprocess worker({TestProgram("sim_worker"), "print-devices"}, {});
  std::vector<std::string> lines;
  for (int i = 0; i < 2; ++i) {
    auto line = worker.ReadLine();
    ASSERT_TRUE(line);
    lines.push_back(*line);
  }
  EXPECT_EQ(worker.Wait(), 0);
  EXPECT_THAT(lines, ElementsAre("device 0 " + CudaUuid(0) + " 0000:08:00.0",
                                 "device 1 " + CudaUuid(1) + " 0000:17:00.0"));
}

TEST_F(CudaDeviceTest, TotalMemoryIsWhatTheDriverDoesNotReserve) {
  size_t bytes = 0;
  ASSERT_EQ(cuDeviceTotalMem_v2(&bytes, 0), CUDA_SUCCESS);
  EXPECT_EQ(bytes, (81559ull - 540) << 20);
  unsigned legacy = 0;
  ASSERT_EQ(Proc<PfnCuDeviceTotalMemV2000>("cuDeviceTotalMem", 2000)(&legacy, 0), CUDA_SUCCESS);
  EXPECT_EQ(legacy, 0xffffffffu) << "the 32-bit ABI saturates";
  EXPECT_EQ(cuDeviceTotalMem_v2(&bytes, 5), CUDA_ERROR_INVALID_DEVICE);
}

TEST_F(CudaDeviceTest, PciBusIdsRoundTripInEitherDomainWidth) {
  EXPECT_EQ(PciBusId(0), "0000:08:00.0");
  EXPECT_EQ(PciBusId(1), "0000:17:00.0");
  for (CUdevice d : {0, 1}) {
    CUdevice back = -1;
    ASSERT_EQ(cuDeviceGetByPCIBusId(&back, PciBusId(d).c_str()), CUDA_SUCCESS);
    EXPECT_EQ(back, d);
  }
  CUdevice dev = -1;
  EXPECT_EQ(cuDeviceGetByPCIBusId(&dev, "00000000:17:00.0"), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuDeviceGetByPCIBusId(&dev, "08:00.0"), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
  EXPECT_EQ(cuDeviceGetByPCIBusId(&dev, "0000:99:00.0"), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetByPCIBusId(&dev, "not a bus id"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetByPCIBusId(nullptr, "0000:08:00.0"), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetPCIBusId(nullptr, 32, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaDeviceTest, AttributesAreTheH100s) {
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), 132);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR), 9);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR), 0);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), 2048);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR), 32);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK), 1024);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_WARP_SIZE), 32);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 1), 0x17);
  EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH), 1);
}

TEST_F(CudaDeviceTest, AnAttributeOutOfRangeIsInvalidAndABadDeviceIsInvalidDevice) {
  int v = 0;
  EXPECT_EQ(cuDeviceGetAttribute(&v, CUdevice_attribute(0), 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_MAX, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&v, UnnamedValue<CUdevice_attribute>(100000), 0),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDeviceGetAttribute(nullptr, CU_DEVICE_ATTRIBUTE_WARP_SIZE, 0),
            CUDA_ERROR_INVALID_VALUE);
}

// ---- CUDA_VISIBLE_DEVICES and profiles (each in a child: read once, at cuInit) ----

// Runs `body` after cuInit in a child with CUDA_VISIBLE_DEVICES=`value`.
std::function<void()> AfterCuInit(std::function<void()> body) {
  return [body] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    body();
  };
}

#define EXPECT_WITH_VISIBLE(value, ...) \
  EXPECT_IN_CHILD({{"CUDA_VISIBLE_DEVICES", value}}, AfterCuInit(__VA_ARGS__))

TEST_F(CudaDeviceTest, VisibleDevicesSelectAndOrderByIndex) {
  const std::vector<std::string> all = CudaUuids();
  EXPECT_WITH_VISIBLE("1", [&] {
    EXPECT_THAT(CudaUuids(), ElementsAre(all[1]));
    EXPECT_EQ(PciBusId(0), "0000:17:00.0");
    CUdevice dev;
    EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
    EXPECT_EQ(cuDeviceGetByPCIBusId(&dev, "0000:08:00.0"), CUDA_ERROR_INVALID_DEVICE);
  });
  EXPECT_WITH_VISIBLE("1,0", [&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[1], all[0])); });
}

TEST_F(CudaDeviceTest, VisibleDevicesSelectByUuidAndUuidPrefix) {
  const std::vector<std::string> all = CudaUuids();
  EXPECT_WITH_VISIBLE(all[1], [&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[1])); });
  EXPECT_WITH_VISIBLE(all[1].substr(0, 9) + "," + all[0].substr(0, 12),
                      [&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[1], all[0])); });
}

TEST_F(CudaDeviceTest, VisibleDevicesStopAtTheFirstInvalidEntry) {
  const std::vector<std::string> all = CudaUuids();
  EXPECT_WITH_VISIBLE("0,7,1", [&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[0])); });
  EXPECT_WITH_VISIBLE("1,1,0", [&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[1])); });
}

TEST_F(CudaDeviceTest, AnEmptyVisibleDevicesListFailsCuInitWithNoDevice) {
  EXPECT_IN_CHILD({{"CUDA_VISIBLE_DEVICES", ""}},
                  [] { EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE); });
  EXPECT_IN_CHILD({{"CUDA_VISIBLE_DEVICES", "5"}},
                  [] { EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE); });
}

TEST_F(CudaDeviceTest, AContextOnAVisibleDeviceReportsTheOrdinalTheCallerUsed) {
  EXPECT_WITH_VISIBLE("1", [] {
    CUcontext ctx;
    CUdevice dev = -1;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
    EXPECT_EQ(dev, 0);
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(0), CUDA_SUCCESS);
  });
}

// ---- device nodes (sim/device_nodes.h): the GPUs a container's toolkit gave it ----

// A device-nodes file holding `text`, in a directory removed with the object.
class DeviceNodesFile {
 public:
  explicit DeviceNodesFile(const std::string& text) {
    std::ofstream(dir_.File("device-nodes")) << text;
  }
  std::string path() const { return dir_.File("device-nodes"); }

 private:
  TempDir dir_{"hami-device-nodes"};
};

TEST_F(CudaDeviceTest, DeviceNodesShowOnlyTheListedDevicesRenumberedFromZero) {
  const std::vector<std::string> all = CudaUuids();
  DeviceNodesFile one(all[1] + "\n");
  EXPECT_IN_CHILD({{"HAMI_SIM_DEVICE_NODES", one.path()}}, AfterCuInit([&] {
                    EXPECT_THAT(CudaUuids(), ElementsAre(all[1]));
                    EXPECT_EQ(PciBusId(0), "0000:17:00.0");
                    CUdevice dev;
                    EXPECT_EQ(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
                    EXPECT_EQ(cuDeviceGetByPCIBusId(&dev, "0000:08:00.0"),
                              CUDA_ERROR_INVALID_DEVICE);
                  }));
  // The machine's order, not the file's.
  DeviceNodesFile both(all[1] + "\n" + all[0] + "\n");
  EXPECT_IN_CHILD({{"HAMI_SIM_DEVICE_NODES", both.path()}},
                  AfterCuInit([&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[0], all[1])); }));
}

TEST_F(CudaDeviceTest, VisibleDevicesApplyWithinTheDeviceNodes) {
  const std::vector<std::string> all = CudaUuids();
  DeviceNodesFile one(all[1] + "\n");
  const auto with = [&](const std::string& visible) -> ChildEnv {
    return {{"HAMI_SIM_DEVICE_NODES", one.path()}, {"CUDA_VISIBLE_DEVICES", visible}};
  };
  EXPECT_IN_CHILD(with("0"), AfterCuInit([&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[1])); }));
  EXPECT_IN_CHILD(with(all[1]),
                  AfterCuInit([&] { EXPECT_THAT(CudaUuids(), ElementsAre(all[1])); }));
  // An index past them, and another device's UUID or UUID prefix, name no device it has.
  for (const std::string& none : {std::string("1"), all[0], all[0].substr(0, 12)}) {
    EXPECT_IN_CHILD(with(none), [] { EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE); });
  }
}

TEST_F(CudaDeviceTest, AnEmptyDeviceNodesFileShowsNoDevice) {
  DeviceNodesFile empty("");
  EXPECT_IN_CHILD({{"HAMI_SIM_DEVICE_NODES", empty.path()}},
                  [] { EXPECT_EQ(cuInit(0), CUDA_ERROR_NO_DEVICE); });
}

TEST_F(CudaDeviceTest, AMalformedDeviceNodesFileIsLoggedAndShowsNoDevice) {
  const std::vector<std::string> all = CudaUuids();
  DeviceNodesFile bad(all[0] + "\n1\n");
  Subprocess worker({"/bin/sh", "-c", "exec \"$0\" print-devices 2>&1", TestProgram("sim_worker")},
                    {{"HAMI_SIM_DEVICE_NODES", bad.path()}});
  const std::string out = worker.ReadAll();
  EXPECT_EQ(worker.Wait(), 1) << out;
  EXPECT_THAT(out, HasSubstr(bad.path() + ": line 2 '1' is not a GPU UUID")) << out;
  EXPECT_THAT(out, HasSubstr("this process sees no device")) << out;
  EXPECT_THAT(out, HasSubstr("error cuInit 100")) << "CUDA_ERROR_NO_DEVICE, never every device";
}

struct ProfileCase {
  const char* spec;
  const char* name;
  int sms, cc, threads_per_sm;
  uint64_t total_mib;  // as cuDeviceTotalMem reports it: nvidia-smi's less the reservation
};

class CudaProfileTest : public ::testing::TestWithParam<ProfileCase> {
 protected:
  void SetUp() override { SimEnv::Setup("h100-80g:2"); }
};

TEST_P(CudaProfileTest, ReportsTheProductsNumbers) {
  const ProfileCase c = GetParam();
  EXPECT_IN_CHILD({{"HAMI_SIM_PROFILE", c.spec}, {"HAMI_SIM_STATE", SimEnv::NewStatePath()}}, [&c] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    int count = 0;
    EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
    EXPECT_EQ(count, 1);
    char name[64];
    EXPECT_EQ(cuDeviceGetName(name, sizeof(name), 0), CUDA_SUCCESS);
    EXPECT_STREQ(name, c.name);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT), c.sms);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                  Attribute(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
              c.cc);
    EXPECT_EQ(Attribute(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR), c.threads_per_sm);
    size_t total = 0;
    EXPECT_EQ(cuDeviceTotalMem_v2(&total, 0), CUDA_SUCCESS);
    EXPECT_EQ(total, c.total_mib << 20);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Profiles, CudaProfileTest,
    ::testing::Values(ProfileCase{"a100-40g", "NVIDIA A100-SXM4-40GB", 108, 80, 2048, 40960 - 280},
                      ProfileCase{"h200-141g", "NVIDIA H200", 132, 90, 2048, 143771 - 560},
                      ProfileCase{"t4-16g", "Tesla T4", 40, 75, 1024, 15360 - 220},
                      ProfileCase{"sim-1g", "HAMi Simulated GPU 1GB", 8, 90, 2048, 1024 - 16}),
    [](const auto& p) {
      std::string n = p.param.spec;
      n.erase(std::remove(n.begin(), n.end(), '-'), n.end());
      return n;
    });

// ---- contexts ----

using CudaContextTest = CudaTest;

// Checks that `ctx`, just created on device 1, is current, then destroys it.
void ExpectCreatedCurrentOnDevice1(CUcontext ctx) {
  CUcontext current = nullptr;
  CUdevice dev = -1;
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_EQ(current, ctx);
  EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  dev = -1;
  EXPECT_EQ(cuCtxGetDevice_v2(&dev, ctx), CUDA_SUCCESS);
  EXPECT_EQ(dev, 1);
  EXPECT_EQ(cuCtxDestroy_v2(ctx), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetCurrent(&current), CUDA_SUCCESS);
  EXPECT_NE(current, ctx) << "a destroyed context leaves the stack";
  EXPECT_EQ(cuCtxDestroy_v2(ctx), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(CudaContextTest, EveryCtxCreateVersionCreatesACurrentContextOnTheDevice) {
  auto v1 = Proc<PfnCuCtxCreateV2000>("cuCtxCreate", 3000);
  auto v2 = Proc<PFN_cuCtxCreate_v3020>("cuCtxCreate", 3020);
  auto v3 = Proc<PFN_cuCtxCreate_v11040>("cuCtxCreate", 11040);
  auto v4 = Proc<PFN_cuCtxCreate_v12050>("cuCtxCreate", 12050);
  EXPECT_EQ(reinterpret_cast<void*>(v1), Sym("cuCtxCreate"));
  EXPECT_EQ(reinterpret_cast<void*>(v2), Sym("cuCtxCreate_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(v3), Sym("cuCtxCreate_v3"));
  EXPECT_EQ(reinterpret_cast<void*>(v4), Sym("cuCtxCreate_v4"));
  CUcontext ctx = nullptr;
  ASSERT_EQ(v1(&ctx, 0, 1), CUDA_SUCCESS);
  ExpectCreatedCurrentOnDevice1(ctx);
  ASSERT_EQ(v2(&ctx, CU_CTX_SCHED_BLOCKING_SYNC, 1), CUDA_SUCCESS);
  unsigned flags = 0;
  EXPECT_EQ(cuCtxGetFlags(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_CTX_SCHED_BLOCKING_SYNC));
  ExpectCreatedCurrentOnDevice1(ctx);
  ASSERT_EQ(v3(&ctx, nullptr, 0, 0, 1), CUDA_SUCCESS);
  ExpectCreatedCurrentOnDevice1(ctx);
  ASSERT_EQ(v4(&ctx, nullptr, 0, 1), CUDA_SUCCESS);
  ExpectCreatedCurrentOnDevice1(ctx);
}

TEST_F(CudaContextTest, CtxCreateRefusesUnknownFlagsAndDevices) {
  CUcontext ctx;
  EXPECT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0x10000, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxCreate_v4(&ctx, nullptr, 0, 2), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuCtxCreate_v4(nullptr, nullptr, 0, 0), CUDA_ERROR_INVALID_VALUE);
  auto v3 = Proc<PFN_cuCtxCreate_v11040>("cuCtxCreate", 11040);
  EXPECT_EQ(v3(&ctx, nullptr, 1, 0, 0), CUDA_ERROR_INVALID_VALUE) << "params promised, none given";
}

TEST_F(CudaContextTest, PushAndPopKeepAStackWhoseTopIsCurrent) {
  CUcontext a, b, c = nullptr;
  ASSERT_EQ(cuCtxCreate_v4(&a, nullptr, 0, 0), CUDA_SUCCESS);  // pushed: [ctx_, a]
  ASSERT_EQ(cuCtxCreate_v4(&b, nullptr, 0, 1), CUDA_SUCCESS);  // [ctx_, a, b]
  EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, b);
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, a);
  EXPECT_EQ(cuCtxPushCurrent_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);  // replaces the top: [ctx_, a, ctx_]
  EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, ctx_);
  EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, a);
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, ctx_);
  EXPECT_EQ(cuCtxPushCurrent_v2(reinterpret_cast<CUcontext>(&c)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy_v2(a), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxDestroy_v2(b), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxSetCurrent(a), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(CudaContextTest, EachThreadHasItsOwnContextStack) {
  CUcontext other;
  ASSERT_EQ(cuCtxCreate_v4(&other, nullptr, 0, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
  std::thread([&] {
    CUcontext c = ctx_;
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, nullptr) << "a new thread has no current context";
    EXPECT_EQ(cuCtxPopCurrent_v2(&c), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSetCurrent(other), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
    EXPECT_EQ(c, other);
  }).join();
  CUcontext c = nullptr;
  EXPECT_EQ(cuCtxGetCurrent(&c), CUDA_SUCCESS);
  EXPECT_EQ(c, ctx_);
  EXPECT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
}

TEST_F(CudaContextTest, AContextDestroyedByAnotherThreadIsReportedDestroyedWhereCurrent) {
  CUcontext doomed;
  ASSERT_EQ(cuCtxCreate_v4(&doomed, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPopCurrent_v2(&doomed), CUDA_SUCCESS);
  std::promise<void> current, destroyed;
  std::thread other([&] {
    ASSERT_EQ(cuCtxSetCurrent(doomed), CUDA_SUCCESS);
    current.set_value();
    destroyed.get_future().wait();
    CUdevice dev = -1;
    EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUdeviceptr p;
    EXPECT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_CONTEXT_IS_DESTROYED);
    CUcontext popped = nullptr;
    EXPECT_EQ(cuCtxPopCurrent_v2(&popped), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
  });
  current.get_future().wait();
  ASSERT_EQ(cuCtxDestroy_v2(doomed), CUDA_SUCCESS);
  // A new context may well get the destroyed one's address; it must not become current
  // in the other thread.
  CUcontext successor;
  ASSERT_EQ(cuCtxCreate_v4(&successor, nullptr, 0, 1), CUDA_SUCCESS);
  destroyed.set_value();
  other.join();
  EXPECT_EQ(cuCtxDestroy_v2(successor), CUDA_SUCCESS);
}

TEST_F(CudaContextTest, DestroyingAnInvalidOrPrimaryContextIsInvalidContext) {
  int not_a_context = 0;
  EXPECT_EQ(cuCtxDestroy_v2(reinterpret_cast<CUcontext>(&not_a_context)),
            CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy_v2(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuCtxDestroy_v2(ctx_), CUDA_ERROR_INVALID_CONTEXT);
}

TEST_F(CudaContextTest, CtxSynchronizeWaitsForEveryStreamOfTheContext) {
  CUstream s;
  ASSERT_EQ(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1, s), CUDA_SUCCESS);
  ASSERT_EQ(Launch(k100ms_, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
  EXPECT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(s), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(nullptr), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(s), CUDA_SUCCESS);
}

TEST_F(CudaContextTest, LimitsArePerContextAndUnknownOnesInvalid) {
  size_t v = 0;
  ASSERT_EQ(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(v, 1024u);
  ASSERT_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 8192), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(v, 8192u);
  CUcontext other;
  ASSERT_EQ(cuCtxCreate_v4(&other, nullptr, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(v, 1024u);
  ASSERT_EQ(cuCtxGetLimit(&v, CU_LIMIT_MALLOC_HEAP_SIZE), CUDA_SUCCESS);
  EXPECT_EQ(v, 8u << 20);
  EXPECT_EQ(cuCtxDestroy_v2(other), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetLimit(&v, UnnamedValue<CUlimit>(0x100)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSetLimit(UnnamedValue<CUlimit>(0x100), 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxGetLimit(nullptr, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 1024), CUDA_SUCCESS);
}

TEST_F(CudaContextTest, CallsNeedingAContextFailInvalidContextWithoutOne) {
  CUfunction f = k1ms_;
  std::thread([f] {
    CUdeviceptr p;
    size_t free = 0, total = 0, v = 0;
    CUmodule m;
    CUstream s;
    CUevent e;
    CUdevice dev;
    EXPECT_EQ(cuMemAlloc_v2(&p, 4096), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuMemGetInfo_v2(&free, &total), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuModuleLoadData(&m, kManifest), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuStreamCreate(&s, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuEventCreate(&e, 0), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxSynchronize(), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxGetDevice(&dev), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuCtxGetLimit(&v, CU_LIMIT_STACK_SIZE), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(Launch(f, 1), CUDA_ERROR_INVALID_CONTEXT);
    EXPECT_EQ(cuStreamSynchronize(nullptr), CUDA_ERROR_INVALID_CONTEXT);
  }).join();
}

// ---- primary contexts ----

TEST_F(CudaContextTest, PrimaryContextIsRefcountedAndActiveWhileRetained) {
  unsigned flags = 0;
  int active = -1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  CUcontext a, b;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&a, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&b, 1), CUDA_SUCCESS);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, ctx_);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 1) << "one reference left";
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(cuDevicePrimaryCtxGetState(2, &flags, &active), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuDevicePrimaryCtxGetState(1, nullptr, &active), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(CudaContextTest, PrimaryContextFlagsAreSetBeforeOrWhileActive) {
  ASSERT_EQ(cuDevicePrimaryCtxSetFlags_v2(1, CU_CTX_SCHED_BLOCKING_SYNC), CUDA_SUCCESS);
  unsigned flags = 0;
  int active = -1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_CTX_SCHED_BLOCKING_SYNC));
  CUcontext p;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetFlags(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_CTX_SCHED_BLOCKING_SYNC));
  EXPECT_EQ(cuDevicePrimaryCtxSetFlags_v2(1, CU_CTX_SCHED_SPIN), CUDA_SUCCESS);
  EXPECT_EQ(cuCtxGetFlags(&flags), CUDA_SUCCESS);
  EXPECT_EQ(flags, unsigned(CU_CTX_SCHED_SPIN));
  EXPECT_EQ(cuDevicePrimaryCtxSetFlags_v2(1, 0x10000), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuCtxPopCurrent_v2(&p), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxSetFlags_v2(1, 0), CUDA_SUCCESS);
}

TEST_F(CudaContextTest, PrimaryContextResetFreesItsMemory) {
  CUcontext p;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxPushCurrent_v2(p), CUDA_SUCCESS);
  size_t free_before = 0, free_during = 0, free_after = 0, total = 0;
  ASSERT_EQ(cuMemGetInfo_v2(&free_before, &total), CUDA_SUCCESS);
  CUdeviceptr mem;
  ASSERT_EQ(cuMemAlloc_v2(&mem, 1ull << 30), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&free_during, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_before - free_during, 1ull << 30);
  ASSERT_EQ(cuDevicePrimaryCtxReset_v2(1), CUDA_SUCCESS);
  unsigned flags;
  int active = -1;
  ASSERT_EQ(cuDevicePrimaryCtxGetState(1, &flags, &active), CUDA_SUCCESS);
  EXPECT_EQ(active, 0);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&p, 1), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSetCurrent(p), CUDA_SUCCESS);
  ASSERT_EQ(cuMemGetInfo_v2(&free_after, &total), CUDA_SUCCESS);
  EXPECT_EQ(free_after, free_before);
  EXPECT_EQ(cuCtxPopCurrent_v2(&p), CUDA_SUCCESS);
  EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
}

// ---- errors and symbol lookup ----

TEST(CudaErrors, NameAndDescribeKnownCodesAndRefuseUnknownOnes) {
  const char* s = nullptr;
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_OUT_OF_MEMORY");
  ASSERT_EQ(cuGetErrorString(CUDA_ERROR_OUT_OF_MEMORY, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "out of memory");
  ASSERT_EQ(cuGetErrorName(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_SUCCESS");
  ASSERT_EQ(cuGetErrorString(CUDA_SUCCESS, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "no error");
  ASSERT_EQ(cuGetErrorName(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, &s), CUDA_SUCCESS);
  EXPECT_STREQ(s, "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
  s = "stale";
  EXPECT_EQ(cuGetErrorName(UnnamedValue<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  s = "stale";
  EXPECT_EQ(cuGetErrorString(UnnamedValue<CUresult>(12345), &s), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(s, nullptr);
  EXPECT_EQ(cuGetErrorName(CUDA_SUCCESS, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(CudaProcAddress, TheRequestedVersionPicksTheAbi) {
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuMemAlloc", 3000)), Sym("cuMemAlloc"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuMemAlloc", 12000)), Sym("cuMemAlloc_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuMemAlloc", 3020)), Sym("cuMemAlloc_v2"));
  EXPECT_NE(Sym("cuMemAlloc"), Sym("cuMemAlloc_v2"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuGetProcAddress", 11030)),
            Sym("cuGetProcAddress"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuGetProcAddress", 12000)),
            Sym("cuGetProcAddress_v2"));
}

TEST(CudaProcAddress, ThePerThreadFlagPicksThePtszOrPtdsVariant) {
  constexpr cuuint64_t kPtds = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuLaunchKernel", 12000, kPtds)),
            Sym("cuLaunchKernel_ptsz"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuLaunchKernel", 12000)), Sym("cuLaunchKernel"));
  EXPECT_EQ(reinterpret_cast<void*>(
                Proc<void*>("cuLaunchKernel", 12000, CU_GET_PROC_ADDRESS_LEGACY_STREAM)),
            Sym("cuLaunchKernel"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuMemcpyHtoD", 12000, kPtds)),
            Sym("cuMemcpyHtoD_v2_ptds"));
  EXPECT_EQ(reinterpret_cast<void*>(Proc<void*>("cuMemAlloc", 12000, kPtds)), Sym("cuMemAlloc_v2"))
      << "a function without a per-thread variant resolves as usual";
}

TEST(CudaProcAddress, ReportsUnknownNamesTooOldVersionsAndBadArguments) {
  void* p = &p;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
  EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchFunction", &p, 13000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
  EXPECT_EQ(p, nullptr);
  EXPECT_EQ(cuGetProcAddress_v2("cuMemAllocAsync", &p, 11000, 0, &status), CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT);
  EXPECT_EQ(cuGetProcAddress_v2(nullptr, &p, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", nullptr, 13000, 0, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &p, 13000, 0x100, &status), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetProcAddress_v2("cuInit", &p, 13000, 0, nullptr), CUDA_SUCCESS);
  EXPECT_EQ(p, Sym("cuInit"));
  auto v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(Sym("cuGetProcAddress"));
  ASSERT_NE(v1, nullptr);
  EXPECT_EQ(v1("cuDeviceGet", &p, 13000, 0), CUDA_SUCCESS);
  EXPECT_EQ(p, Sym("cuDeviceGet"));
  EXPECT_EQ(v1("cuNoSuchFunction", &p, 13000, 0), CUDA_ERROR_NOT_FOUND);
}

struct ApiRow {
  const char* base;
  int version;
  int flavor;
  const char* name;
};

constexpr ApiRow kApiTable[] = {
#define HAMI_CUDA_API(base, version, flavor, name) {#base, version, flavor, #name},
#include "cuda_api_table.inc"
#undef HAMI_CUDA_API
};

TEST(CudaProcAddress, EveryExportedAbiIsExportedAndFoundByItsBaseNameAndVersion) {
  std::set<std::string> names;
  for (const ApiRow& row : kApiTable) {
    void* exported = Sym(row.name);
    EXPECT_NE(exported, nullptr) << row.name << " is not exported";
    names.insert(row.name);
    void* found = nullptr;
    CUdriverProcAddressQueryResult status;
    const cuuint64_t flags = row.flavor == 1 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                             : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
    EXPECT_EQ(cuGetProcAddress_v2(row.base, &found, row.version, flags, &status), CUDA_SUCCESS)
        << row.base << "@" << row.version;
    EXPECT_EQ(found, exported) << row.base << "@" << row.version << " should be " << row.name;
  }
  EXPECT_EQ(names.size(), std::size(kApiTable)) << "each exported name is one row";
  EXPECT_GT(names.size(), 600u);
}

TEST(CudaProcAddress, AnUnmodelledFunctionIsExportedAndReturnsNotSupported) {
  SimEnv::Setup("h100-80g:2");
  ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
  auto tex_ref_create = reinterpret_cast<PFN_cuTexRefCreate_v2000>(Sym("cuTexRefCreate"));
  ASSERT_NE(tex_ref_create, nullptr);
  CUtexref ref;
  EXPECT_EQ(tex_ref_create(&ref), CUDA_ERROR_NOT_SUPPORTED);
  auto map = Proc<PFN_cuGraphicsMapResources_v3000>("cuGraphicsMapResources", 12000);
  ASSERT_NE(map, nullptr);
  EXPECT_EQ(map(0, nullptr, nullptr), CUDA_ERROR_NOT_SUPPORTED);
}

}  // namespace
}  // namespace hami::testing
