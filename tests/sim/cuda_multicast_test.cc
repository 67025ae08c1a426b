// The simulated driver's multicast objects (cuMulticast*) on a machine whose first three GPUs
// sit on NVLink switches (h100-hgx) and whose fourth does not (h100-80g): the team, binding
// memory, mapping the object, copies through it, what is charged, and every refusal. The
// refusals on a machine without a switch are in cuda_memory_test.cc.
#include <cuda.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "cuda_device_fixture.h"
#include "cudart/program_io.h"
#include "sim_test_util.h"

namespace hami::testing {
namespace {

constexpr size_t kMiB = size_t(1) << 20;

class MulticastTest : public SimDeviceTest {
 protected:
  void SetUp() override {
    SimEnv::Setup("h100-hgx:3,h100-80g");
    SimDeviceTest::SetUp();
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx1_, 1), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuDevicePrimaryCtxRelease_v2(1), CUDA_SUCCESS);
    SimDeviceTest::TearDown();
  }

  static CUmulticastObjectProp Prop(unsigned devices, size_t size) {
    CUmulticastObjectProp prop{};
    prop.numDevices = devices;
    prop.size = size;
    return prop;
  }
  static CUmemGenericAllocationHandle Create(unsigned devices, size_t size) {
    CUmulticastObjectProp prop = Prop(devices, size);
    CUmemGenericAllocationHandle mc = 0;
    EXPECT_EQ(cuMulticastCreate(&mc, &prop), CUDA_SUCCESS);
    return mc;
  }
  // A multicast object of devices 0 and 1, both added.
  static CUmemGenericAllocationHandle Team(size_t size) {
    CUmemGenericAllocationHandle mc = Create(2, size);
    EXPECT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuMulticastAddDevice(mc, 1), CUDA_SUCCESS);
    return mc;
  }
  static CUmemGenericAllocationHandle Memory(int device, size_t size) {
    CUmemAllocationProp prop = DeviceProp(device);
    CUmemGenericAllocationHandle h = 0;
    EXPECT_EQ(cuMemCreate(&h, size, &prop, 0), CUDA_SUCCESS);
    return h;
  }
  static CUresult Access(CUdeviceptr va, size_t size, std::vector<int> devices) {
    std::vector<CUmemAccessDesc> desc;
    for (int d : devices) {
      CUmemAccessDesc a{};
      a.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      a.location.id = d;
      a.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      desc.push_back(a);
    }
    return cuMemSetAccess(va, size, desc.data(), desc.size());
  }
  // Reserves a range and maps `h` there, read-write for `devices`.
  static CUdeviceptr Map(CUmemGenericAllocationHandle h, size_t size, std::vector<int> devices) {
    CUdeviceptr va = 0;
    EXPECT_EQ(cuMemAddressReserve(&va, size, 0, 0, 0), CUDA_SUCCESS);
    EXPECT_EQ(cuMemMap(va, size, 0, h, 0), CUDA_SUCCESS);
    EXPECT_EQ(Access(va, size, devices), CUDA_SUCCESS);
    return va;
  }
  static void Unmap(CUdeviceptr va, size_t size) {
    EXPECT_EQ(cuMemUnmap(va, size), CUDA_SUCCESS);
    EXPECT_EQ(cuMemAddressFree(va, size), CUDA_SUCCESS);
  }
  // Free memory of device `d`, as cuMemGetInfo reports it in d's primary context.
  size_t FreeOn(int d) {
    EXPECT_EQ(cuCtxSetCurrent(d == 0 ? ctx_ : ctx1_), CUDA_SUCCESS);
    size_t free_bytes = FreeBytes();
    EXPECT_EQ(cuCtxSetCurrent(ctx_), CUDA_SUCCESS);
    return free_bytes;
  }

  CUcontext ctx1_ = nullptr;
};

TEST_F(MulticastTest, OnlyDevicesOnASwitchReportMulticastAndTheGranularities) {
  int supported = -1;
  for (int d = 0; d < 4; ++d) {
    ASSERT_EQ(cuDeviceGetAttribute(&supported, CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, d),
              CUDA_SUCCESS);
    EXPECT_EQ(supported, d < 3 ? 1 : 0) << "device " << d;
  }
  CUmulticastObjectProp prop = Prop(2, g_);
  size_t minimum = 0, recommended = 0;
  EXPECT_EQ(cuMulticastGetGranularity(&minimum, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
            CUDA_SUCCESS);
  EXPECT_EQ(minimum, g_);
  EXPECT_EQ(cuMulticastGetGranularity(&recommended, &prop, CU_MULTICAST_GRANULARITY_RECOMMENDED),
            CUDA_SUCCESS);
  EXPECT_EQ(recommended, 512 * kMiB);
  CUmulticastGranularity_flags unknown;
  const int two = 2;  // neither option: its bytes, as a caller may pass any int
  std::memcpy(&unknown, &two, sizeof unknown);
  EXPECT_EQ(cuMulticastGetGranularity(&minimum, &prop, unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastGetGranularity(&minimum, nullptr, CU_MULTICAST_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastGetGranularity(nullptr, &prop, CU_MULTICAST_GRANULARITY_MINIMUM),
            CUDA_ERROR_INVALID_VALUE);
}

TEST_F(MulticastTest, CreateRefusesBadPropertiesAndChargesNothing) {
  const size_t free0 = FreeOn(0), free1 = FreeOn(1);
  CUmemGenericAllocationHandle mc = 0;
  auto create = [&](CUmulticastObjectProp prop) { return cuMulticastCreate(&mc, &prop); };
  EXPECT_EQ(create(Prop(2, 0)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(Prop(2, g_ + 1)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(Prop(0, g_)), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(create(Prop(4, g_)), CUDA_ERROR_INVALID_VALUE) << "three devices on the switch";
  CUmulticastObjectProp flagged = Prop(2, g_);
  flagged.flags = 1;
  EXPECT_EQ(create(flagged), CUDA_ERROR_INVALID_VALUE);
  CUmulticastObjectProp typed = Prop(2, g_);
  typed.handleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
  EXPECT_EQ(create(typed), CUDA_ERROR_NOT_SUPPORTED);
  typed.handleTypes = 0x100;
  EXPECT_EQ(create(typed), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastCreate(nullptr, &typed), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastCreate(&mc, nullptr), CUDA_ERROR_INVALID_VALUE);

  typed.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  typed.size = 64 * g_;
  ASSERT_EQ(create(typed), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 1), CUDA_SUCCESS);
  CUdeviceptr va = Map(mc, 64 * g_, {0, 1});
  EXPECT_EQ(FreeOn(0), free0) << "the object and its mapping hold no device memory";
  EXPECT_EQ(FreeOn(1), free1);
  int fd = -1;
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_FABRIC, 0),
            CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  EXPECT_GE(fd, 0);
  close(fd);
  CUmemGenericAllocationHandle plain = Create(2, g_);
  EXPECT_EQ(cuMemExportToShareableHandle(&fd, plain, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_ERROR_INVALID_VALUE)
      << "created without asking for descriptors";
  EXPECT_EQ(cuMemRelease(plain), CUDA_SUCCESS);
  Unmap(va, 64 * g_);
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(mc), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastAddDevice(mc, 2), CUDA_ERROR_INVALID_VALUE) << "released";
}

TEST_F(MulticastTest, TheTeamTakesEachSwitchDeviceOnceAndNoMoreThanAsked) {
  CUmemGenericAllocationHandle mc = Create(2, 4 * g_);
  CUmemGenericAllocationHandle a = Memory(0, 4 * g_);
  CUdeviceptr va = 0;
  ASSERT_EQ(cuMemAddressReserve(&va, 4 * g_, 0, 0, 0), CUDA_SUCCESS);
  // The driver waits for the rest of the team here; nobody else can add it in the model.
  EXPECT_EQ(cuMemMap(va, 4 * g_, 0, mc, 0), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, 0, 4 * g_, 0), CUDA_ERROR_NOT_PERMITTED);
  EXPECT_EQ(cuMulticastAddDevice(mc, 0), CUDA_ERROR_INVALID_VALUE) << "already added";
  EXPECT_EQ(cuMulticastAddDevice(mc, 3), CUDA_ERROR_NOT_SUPPORTED) << "not on a switch";
  EXPECT_EQ(cuMulticastAddDevice(mc, 4), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastAddDevice(12345, 1), CUDA_ERROR_INVALID_VALUE) << "no such object";
  EXPECT_EQ(cuMulticastAddDevice(a, 1), CUDA_ERROR_INVALID_VALUE) << "memory, not multicast";
  EXPECT_EQ(cuMulticastAddDevice(mc, 1), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(mc, 2), CUDA_ERROR_INVALID_VALUE) << "the team is full";
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, 0, 4 * g_, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, 4 * g_, 0, mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMemMap(va, 4 * g_, 0, mc, 0), CUDA_ERROR_INVALID_VALUE) << "mapped already";
  Unmap(va, 4 * g_);
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(a), CUDA_SUCCESS);
}

TEST_F(MulticastTest, BindRefusesMemoryOutsideTheTeamOrTheRangesAndBindsOnce) {
  CUmemGenericAllocationHandle mc = Team(4 * g_);
  CUmemGenericAllocationHandle a = Memory(0, 4 * g_);
  CUmemGenericAllocationHandle off_team = Memory(2, g_);
  CUmemAllocationProp host_prop{};
  host_prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  host_prop.location.type = CU_MEM_LOCATION_TYPE_HOST;
  CUmemGenericAllocationHandle host = 0;
  ASSERT_EQ(cuMemCreate(&host, g_, &host_prop, 0), CUDA_SUCCESS);

  EXPECT_EQ(cuMulticastBindMem(mc, 0, off_team, 0, g_, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, host, 0, g_, 0), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, 0, g_ + 1, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, 0, 0, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, kMiB, a, 0, g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, kMiB, g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, g_, 4 * g_, 0), CUDA_ERROR_INVALID_VALUE)
      << "past the memory's end";
  EXPECT_EQ(cuMulticastBindMem(mc, 2 * g_, a, 0, 4 * g_, 0), CUDA_ERROR_INVALID_VALUE)
      << "past the object's end";
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, 0, g_, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, 12345, 0, g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(12345, 0, a, 0, g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, a, 0, 2 * g_, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem(mc, g_, a, 2 * g_, 2 * g_, 0), CUDA_ERROR_INVALID_VALUE)
      << "device 0 has memory at that range already";
  EXPECT_EQ(cuMulticastBindMem(mc, 2 * g_, a, 2 * g_, 2 * g_, 0), CUDA_SUCCESS);

  // An exportable object binds only exportable memory.
  CUmulticastObjectProp typed = Prop(2, g_);
  typed.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle shared_mc = 0;
  ASSERT_EQ(cuMulticastCreate(&shared_mc, &typed), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(shared_mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastAddDevice(shared_mc, 1), CUDA_SUCCESS);
  CUmemGenericAllocationHandle b = Memory(0, g_);
  EXPECT_EQ(cuMulticastBindMem(shared_mc, 0, b, 0, g_, 0), CUDA_ERROR_INVALID_VALUE);
  CUmemAllocationProp exportable = DeviceProp(0);
  exportable.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle c = 0;
  ASSERT_EQ(cuMemCreate(&c, g_, &exportable, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuMulticastBindMem(shared_mc, 0, c, 0, g_, 0), CUDA_SUCCESS);

  for (CUmemGenericAllocationHandle h : {mc, shared_mc, a, off_team, host, b, c}) {
    EXPECT_EQ(cuMemRelease(h), CUDA_SUCCESS);
  }
}

TEST_F(MulticastTest, ACopyIntoTheObjectReachesEveryTeamDevicesMemory) {
  const size_t size = 2 * g_;
  CUmemGenericAllocationHandle mc = Team(size);
  CUmemGenericAllocationHandle a = Memory(0, size), b = Memory(1, size);
  ASSERT_EQ(cuMulticastBindMem(mc, 0, a, 0, size, 0), CUDA_SUCCESS);
  CUdeviceptr b_va = Map(b, size, {1});
  ASSERT_EQ(cuMulticastBindAddr(mc, 0, b_va, size, 0), CUDA_SUCCESS);
  CUdeviceptr a_va = Map(a, size, {0});
  CUdeviceptr mc_va = 0;
  ASSERT_EQ(cuMemAddressReserve(&mc_va, size, 0, 0, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMemMap(mc_va, size, 0, mc, 0), CUDA_SUCCESS);
  EXPECT_EQ(Access(mc_va, size, {0, 2}), CUDA_ERROR_ILLEGAL_STATE) << "device 2 is not in it";
  ASSERT_EQ(Access(mc_va, size, {0, 1}), CUDA_SUCCESS);

  std::vector<uint8_t> data = Pattern(size - 4096, 7);
  ASSERT_EQ(cuMemcpyHtoD_v2(mc_va + 4096, data.data(), data.size()), CUDA_SUCCESS);
  EXPECT_EQ(Download(a_va + 4096, data.size()), data);
  EXPECT_EQ(Download(b_va + 4096, data.size()), data);
  std::vector<uint8_t> more = Pattern(4096, 9);
  ASSERT_EQ(cuMemcpyHtoD_v2(a_va + g_, more.data(), more.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoD_v2(mc_va, a_va + g_, more.size()), CUDA_SUCCESS);
  EXPECT_EQ(Download(b_va, more.size()), more) << "device to device, broadcast";

  // The model says nothing of which copy a read of the object would see: reads and sets of
  // it are refused, as is a copy past its mapping.
  std::vector<uint8_t> back(16);
  EXPECT_EQ(cuMemcpyDtoH_v2(back.data(), mc_va, back.size()), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemsetD8_v2(mc_va, 0, 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMemcpyHtoD_v2(mc_va + size - 8, data.data(), 16), CUDA_ERROR_INVALID_VALUE);

  // Device 1 unbound: part of the team has no memory there, and a write is refused.
  EXPECT_EQ(cuMulticastUnbind(mc, 2, 0, size), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(cuMulticastUnbind(mc, 1, 0, g_), CUDA_ERROR_INVALID_VALUE) << "half a binding";
  EXPECT_EQ(cuMulticastUnbind(mc, 1, kMiB, size), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastUnbind(mc, 1, 0, size), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(mc_va, data.data(), 16), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindMem(mc, 0, b, 0, size, 0), CUDA_SUCCESS) << "bound again";
  EXPECT_EQ(cuMemcpyHtoD_v2(mc_va, data.data(), 16), CUDA_SUCCESS);

  // Released while mapped, the object still carries writes until the mapping goes.
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMemcpyHtoD_v2(mc_va, more.data(), 16), CUDA_SUCCESS);
  EXPECT_EQ(Download(b_va, 16), std::vector<uint8_t>(more.begin(), more.begin() + 16));
  Unmap(mc_va, size);
  Unmap(a_va, size);
  Unmap(b_va, size);
  EXPECT_EQ(cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(b), CUDA_SUCCESS);
}

TEST_F(MulticastTest, BindAddrTakesMappedMemoryOnly) {
  CUmemGenericAllocationHandle mc = Team(2 * g_);
  CUmemGenericAllocationHandle a = Memory(0, 2 * g_);
  CUdeviceptr a_va = Map(a, 2 * g_, {0});
  CUdeviceptr plain = Alloc(g_);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, plain, g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, Outside(), g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, a_va + g_, 2 * g_, 0), CUDA_ERROR_INVALID_VALUE)
      << "past the mapping";
  EXPECT_EQ(cuMulticastBindAddr(mc, 0, a_va + kMiB, g_, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuMulticastBindAddr(mc, g_, a_va + g_, g_, 0), CUDA_SUCCESS);
  Free({plain});
  Unmap(a_va, 2 * g_);
  EXPECT_EQ(cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
}

TEST_F(MulticastTest, BoundMemoryIsChargedAsCreatedAndFreedWithItsLastHandleAndMapping) {
  const size_t size = 4 * g_;
  const size_t free0 = FreeOn(0), free1 = FreeOn(1);
  CUmemGenericAllocationHandle mc = Team(size);
  CUmemGenericAllocationHandle a = Memory(0, size), b = Memory(1, size);
  ASSERT_EQ(cuMulticastBindMem(mc, 0, a, 0, size, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastBindMem(mc, 0, b, 0, size, 0), CUDA_SUCCESS);
  CUdeviceptr mc_va = Map(mc, size, {0, 1});
  EXPECT_EQ(free0 - FreeOn(0), size) << "the bound memory, once";
  EXPECT_EQ(free1 - FreeOn(1), size);
  // A binding does not hold memory: released, it is freed, and its binding goes with it.
  EXPECT_EQ(cuMemRelease(b), CUDA_SUCCESS);
  EXPECT_EQ(FreeOn(1), free1);
  std::vector<uint8_t> data = Pattern(64, 3);
  EXPECT_EQ(cuMemcpyHtoD_v2(mc_va, data.data(), data.size()), CUDA_ERROR_INVALID_VALUE);
  Unmap(mc_va, size);
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(free0 - FreeOn(0), size) << "a's own handle still holds it";
  EXPECT_EQ(cuMemRelease(a), CUDA_SUCCESS);
  EXPECT_EQ(FreeOn(0), free0);
}

// The shape of a collective library's ranks: one process creates the object and exports it,
// another imports it; each adds its own device and binds its own memory, and a write through
// either's mapping reaches both devices' memory.
TEST_F(MulticastTest, AnExportedObjectIsOneObjectInEveryProcessThatImportsIt) {
  const size_t size = 2 * g_;
  CUmulticastObjectProp prop = Prop(2, size);
  prop.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle mc = 0;
  ASSERT_EQ(cuMulticastCreate(&mc, &prop), CUDA_SUCCESS);
  ASSERT_EQ(cuMulticastAddDevice(mc, 0), CUDA_SUCCESS);
  CUmemAllocationProp exportable = DeviceProp(0);
  exportable.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  CUmemGenericAllocationHandle a = 0;
  ASSERT_EQ(cuMemCreate(&a, size, &exportable, 0), CUDA_SUCCESS);
  CUdeviceptr a_va = Map(a, size, {0});
  int fd = -1;
  ASSERT_EQ(cuMemExportToShareableHandle(&fd, mc, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
            CUDA_SUCCESS);
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  ASSERT_TRUE(cudart::SendFd(sv[0], fd, 0));
  close(fd);

  // This process binds once the other has added its device: the bind waits for it.
  CUresult bound = CUDA_ERROR_UNKNOWN;
  std::thread binder([&] {
    bound = cuMulticastBindMem(mc, 0, a, 0, size, 0);
    const char done = bound == CUDA_SUCCESS ? 'y' : 'n';
    EXPECT_TRUE(cudart::WriteAll(sv[0], &done, 1));
  });
  const std::vector<uint8_t> data = Pattern(size, 11);
  EXPECT_IN_CHILD({}, [&] {
    ASSERT_EQ(cuInit(0), CUDA_SUCCESS);
    CUcontext ctx = nullptr;
    ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 1), CUDA_SUCCESS);
    ASSERT_EQ(cuCtxSetCurrent(ctx), CUDA_SUCCESS);
    int got = -1;
    uint64_t word = 0;
    ASSERT_TRUE(cudart::ReceiveFd(sv[1], &got, &word));
    CUmemGenericAllocationHandle theirs = 0;
    ASSERT_EQ(cuMemImportFromShareableHandle(&theirs, reinterpret_cast<void*>(intptr_t(got)),
                                             CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
              CUDA_SUCCESS);
    close(got);
    EXPECT_EQ(cuMulticastAddDevice(theirs, 0), CUDA_ERROR_INVALID_VALUE) << "added there";
    ASSERT_EQ(cuMulticastAddDevice(theirs, 1), CUDA_SUCCESS);
    CUmemAllocationProp mine_prop = DeviceProp(1);
    mine_prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    CUmemGenericAllocationHandle b = 0;
    ASSERT_EQ(cuMemCreate(&b, size, &mine_prop, 0), CUDA_SUCCESS);
    ASSERT_EQ(cuMulticastBindMem(theirs, 0, b, 0, size, 0), CUDA_SUCCESS);
    char done = 0;
    ASSERT_TRUE(cudart::ReadAll(sv[1], &done, 1));
    ASSERT_EQ(done, 'y') << "the creator bound its memory";
    CUdeviceptr mc_va = Map(theirs, size, {0, 1});
    ASSERT_EQ(cuMemcpyHtoD_v2(mc_va, data.data(), size), CUDA_SUCCESS);
    CUdeviceptr b_va = Map(b, size, {1});
    EXPECT_EQ(Download(b_va, size), data) << "this process's memory";
    Unmap(b_va, size);
    Unmap(mc_va, size);
    EXPECT_EQ(cuMemRelease(theirs), CUDA_SUCCESS);
    EXPECT_EQ(cuMemRelease(b), CUDA_SUCCESS);
  });
  binder.join();
  EXPECT_EQ(bound, CUDA_SUCCESS);
  EXPECT_EQ(Download(a_va, size), data) << "written in the other process, through the object";
  // The other process is gone, and with it its memory: part of the team has none now.
  CUdeviceptr mc_va = Map(mc, size, {0, 1});
  EXPECT_EQ(cuMemcpyHtoD_v2(mc_va, data.data(), 64), CUDA_ERROR_INVALID_VALUE);
  Unmap(mc_va, size);
  Unmap(a_va, size);
  close(sv[0]);
  close(sv[1]);
  EXPECT_EQ(cuMemRelease(mc), CUDA_SUCCESS);
  EXPECT_EQ(cuMemRelease(a), CUDA_SUCCESS);
}

TEST_F(MulticastTest, OnlyAMulticastDescriptorImportsAsOne) {
  int not_ours = memfd_create("hami-sim-multicast-forged", MFD_CLOEXEC);
  ASSERT_GE(not_ours, 0);
  ASSERT_EQ(ftruncate(not_ours, 4096), 0);
  CUmemGenericAllocationHandle h = 0;
  EXPECT_EQ(cuMemImportFromShareableHandle(&h, reinterpret_cast<void*>(intptr_t(not_ours)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
            CUDA_ERROR_INVALID_VALUE)
      << "the name, without the object's page";
  close(not_ours);
}

}  // namespace
}  // namespace hami::testing
