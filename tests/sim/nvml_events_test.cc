// The simulated NVML's events: an Xid recorded in the machine's state (by `hami sim xid` in
// another process, or through the state directly) reaches every event set that registered
// Xid errors on that device and existed before the event, each set reading at its own pace.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nvml/nvml.h"
#include "sim/state.h"
#include "support/sim_env.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using ::testing::HasSubstr;

constexpr unsigned kLongWaitMs = 60000;  // only bounds a broken build; never reached

std::string NvmlUuid(nvmlDevice_t dev) {
  char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  EXPECT_EQ(nvmlDeviceGetUUID(dev, buf, sizeof(buf)), NVML_SUCCESS);
  return buf;
}

class NvmlEventsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    state_path_ = SimEnv::Setup("h100-80g:2");
    ASSERT_EQ(nvmlInit_v2(), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(0, &dev0_), NVML_SUCCESS);
    ASSERT_EQ(nvmlDeviceGetHandleByIndex_v2(1, &dev1_), NVML_SUCCESS);
  }
  void TearDown() override { EXPECT_EQ(nvmlShutdown(), NVML_SUCCESS); }

  // Runs `hami sim xid ARGS...` against this test's machine; returns its exit status and
  // puts its stdout in *out.
  int SimXid(const std::vector<std::string>& args, std::string* out = nullptr) {
    std::vector<std::string> argv = {std::string(HAMI_BIN_DIR) + "/hami-sim", "xid"};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess p(argv, {{"HAMI_SIM_STATE", state_path_}});
    std::string text = p.ReadAll(60000);
    if (out != nullptr) *out = text;
    return p.Wait(60000);
  }

  nvmlEventSet_t XidSet(std::vector<nvmlDevice_t> devices) {
    nvmlEventSet_t set = nullptr;
    EXPECT_EQ(nvmlEventSetCreate(&set), NVML_SUCCESS);
    for (nvmlDevice_t d : devices) {
      EXPECT_EQ(nvmlDeviceRegisterEvents(d, nvmlEventTypeXidCriticalError, set), NVML_SUCCESS);
    }
    return set;
  }

  std::string state_path_;
  nvmlDevice_t dev0_ = nullptr, dev1_ = nullptr;
};

TEST_F(NvmlEventsTest, AWaitingSetReceivesAnXidInjectedByAnotherProcess) {
  nvmlEventSet_t set = XidSet({dev0_, dev1_});
  nvmlEventData_t data{};
  nvmlReturn_t waited = NVML_ERROR_UNKNOWN;
  std::thread waiter([&] { waited = nvmlEventSetWait_v2(set, &data, kLongWaitMs); });
  std::string out;
  EXPECT_EQ(SimXid({"1", "79"}, &out), 0);
  waiter.join();
  EXPECT_THAT(out, HasSubstr("Xid 79 recorded on GPU 1 (" + NvmlUuid(dev1_) + ")"));
  ASSERT_EQ(waited, NVML_SUCCESS);
  EXPECT_EQ(data.device, dev1_);
  EXPECT_EQ(data.eventType, static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
  EXPECT_EQ(data.eventData, 79u);
  EXPECT_EQ(data.gpuInstanceId, 0xFFFFFFFFu);
  EXPECT_EQ(data.computeInstanceId, 0xFFFFFFFFu);
  // Delivered once.
  EXPECT_EQ(nvmlEventSetWait_v2(set, &data, 0), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST_F(NvmlEventsTest, EachSetReadsEveryEventInOrderAtItsOwnPosition) {
  nvmlEventSet_t a = XidSet({dev0_});
  nvmlEventSet_t b = XidSet({dev0_});
  ASSERT_EQ(SimXid({NvmlUuid(dev0_), "48"}), 0);  // by UUID
  ASSERT_EQ(SimXid({"0", "13"}), 0);
  nvmlEventData_t data{};
  ASSERT_EQ(nvmlEventSetWait_v2(a, &data, kLongWaitMs), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 48u);
  ASSERT_EQ(nvmlEventSetWait_v2(a, &data, kLongWaitMs), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 13u);
  EXPECT_EQ(nvmlEventSetWait_v2(a, &data, 0), NVML_ERROR_TIMEOUT);
  ASSERT_EQ(nvmlEventSetWait_v2(b, &data, kLongWaitMs), NVML_SUCCESS);
  EXPECT_EQ(data.eventData, 48u);
  // A set made after the events sees none of them.
  nvmlEventSet_t later = XidSet({dev0_, dev1_});
  EXPECT_EQ(nvmlEventSetWait_v2(later, &data, 10), NVML_ERROR_TIMEOUT);
  for (nvmlEventSet_t s : {a, b, later}) EXPECT_EQ(nvmlEventSetFree(s), NVML_SUCCESS);
}

TEST_F(NvmlEventsTest, OnlyDevicesRegisteredForXidErrorsDeliverThem) {
  nvmlEventSet_t set = XidSet({dev1_});
  nvmlEventSet_t ecc_only = nullptr;
  ASSERT_EQ(nvmlEventSetCreate(&ecc_only), NVML_SUCCESS);
  ASSERT_EQ(nvmlDeviceRegisterEvents(dev0_, nvmlEventTypeDoubleBitEccError, ecc_only),
            NVML_SUCCESS);
  auto state = sim::SharedState::OpenExisting(state_path_);
  ASSERT_TRUE(state.ok()) << state.error().message();
  ASSERT_TRUE((*state)->RecordXid(0, 79).ok());
  nvmlEventData_t data{};
  EXPECT_EQ(nvmlEventSetWait_v2(set, &data, 10), NVML_ERROR_TIMEOUT);
  EXPECT_EQ(nvmlEventSetWait_v2(ecc_only, &data, 10), NVML_ERROR_TIMEOUT);
  ASSERT_TRUE((*state)->RecordXid(1, 94).ok());
  ASSERT_EQ(nvmlEventSetWait_v2(set, &data, kLongWaitMs), NVML_SUCCESS);
  EXPECT_EQ(data.device, dev1_);
  EXPECT_EQ(data.eventData, 94u);
  EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
  EXPECT_EQ(nvmlEventSetFree(ecc_only), NVML_SUCCESS);
}

TEST_F(NvmlEventsTest, TheUnversionedWaitFillsTheLegacyLayout) {
  nvmlEventSet_t set = XidSet({dev0_});
  auto state = sim::SharedState::OpenExisting(state_path_);
  ASSERT_TRUE(state.ok()) << state.error().message();
  ASSERT_TRUE((*state)->RecordXid(0, 31).ok());
  hamiNvmlEventDataLegacy_t legacy{};
  ASSERT_EQ(nvmlEventSetWait(set, &legacy, kLongWaitMs), NVML_SUCCESS);
  EXPECT_EQ(legacy.device, dev0_);
  EXPECT_EQ(legacy.eventType, static_cast<unsigned long long>(nvmlEventTypeXidCriticalError));
  EXPECT_EQ(legacy.eventData, 31u);
  EXPECT_EQ(nvmlEventSetFree(set), NVML_SUCCESS);
}

TEST_F(NvmlEventsTest, SimXidRefusesAnUnknownDeviceAndABadCode) {
  std::string out;
  EXPECT_EQ(SimXid({"2", "79"}), 2);
  EXPECT_EQ(SimXid({"GPU-nope", "79"}), 2);
  EXPECT_EQ(SimXid({"0", "seventy-nine"}), 2);
  EXPECT_EQ(SimXid({"0", "0"}), 2);
  Subprocess p({std::string(HAMI_BIN_DIR) + "/hami-sim", "xid", "0", "79", "--state",
                state_path_ + ".missing"},
               {});
  EXPECT_EQ(p.Wait(60000), 1);
  auto state = sim::SharedState::OpenExisting(state_path_);
  ASSERT_TRUE(state.ok());
  EXPECT_EQ((*state)->XidCount(0), 0u);
  EXPECT_EQ((*state)->XidCount(1), 0u);
}

}  // namespace
}  // namespace hami::testing
