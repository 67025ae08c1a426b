#include "kube/annotations.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

namespace hami::kube {
namespace {

using std::chrono::seconds;
using std::chrono::sys_days;

// The examples of seed 004, byte for byte.
constexpr std::string_view kSeedInventory =
    R"([{"id":"GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec","count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true},{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","index":1,"count":10,"devmem":32768,"devcore":100,"type":"NVIDIA-Tesla V100-PCIE-32GB","numa":1,"mode":"hami-core","health":true}])";
constexpr std::string_view kSeedHandshake = "Requesting_2024-01-23 04:30:04";
constexpr std::string_view kSeedAllocated =
    "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,NVIDIA,3000,0:;";
constexpr std::string_view kSeedToAllocateDone = ";";
constexpr std::string_view kSeedBindTime = "1716199325";

WallTime At(int y, unsigned mo, unsigned d, int h, int mi, int s) {
  return WallTime(sys_days(std::chrono::year(y) / std::chrono::month(mo) / std::chrono::day(d)) +
                  std::chrono::hours(h) + std::chrono::minutes(mi) + seconds(s));
}

std::vector<NodeDevice> SeedDevices() {
  NodeDevice a;
  a.id = "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec";
  a.count = 10;
  a.devmem_mib = 32768;
  a.devcore = 100;
  a.type = "NVIDIA-Tesla V100-PCIE-32GB";
  a.numa = 1;
  a.mode = "hami-core";
  a.health = true;
  NodeDevice b = a;
  b.id = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448";
  b.index = 1;
  return {a, b};
}

// Asserts a kInvalidArgument naming `annotation` that contains `part`.
void ExpectRejected(const Error& e, std::string_view annotation, std::string_view part) {
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.message().rfind(std::string(annotation) + ": ", 0), 0u) << e.message();
  EXPECT_NE(e.message().find(part), std::string::npos) << e.message();
}

TEST(AnnotationNames, AreHamisKeys) {
  EXPECT_EQ(kNodeRegisterAnnotation, "hami.io/node-nvidia-register");
  EXPECT_EQ(kNodeHandshakeAnnotation, "hami.io/node-handshake");
  EXPECT_EQ(kDevicesToAllocateAnnotation, "hami.io/vgpu-devices-to-allocate");
  EXPECT_EQ(kDevicesAllocatedAnnotation, "hami.io/vgpu-devices-allocated");
  EXPECT_EQ(kNodeLockAnnotation, "hami.io/mutex.lock");
  EXPECT_EQ(kBindPhaseAnnotation, "hami.io/bind-phase");
  EXPECT_EQ(kBindTimeAnnotation, "hami.io/bind-time");
  EXPECT_EQ(kVgpuNodeAnnotation, "hami.io/vgpu-node");
  EXPECT_EQ(kVgpuTimeAnnotation, "hami.io/vgpu-time");
  EXPECT_EQ(kLimitDeliveryAnnotation, "hami.io/limit-delivery");
  EXPECT_EQ(kResourceGpu, "nvidia.com/gpu");
  EXPECT_EQ(kResourceGpuMem, "nvidia.com/gpumem");
  EXPECT_EQ(kResourceGpuMemPercentage, "nvidia.com/gpumem-percentage");
  EXPECT_EQ(kResourceGpuCores, "nvidia.com/gpucores");
  EXPECT_EQ(kResourceGpuPriority, "nvidia.com/priority");
  EXPECT_EQ(kUseGpuTypeAnnotation, "nvidia.com/use-gputype");
  EXPECT_EQ(kNoUseGpuTypeAnnotation, "nvidia.com/nouse-gputype");
  EXPECT_EQ(kUseGpuUuidAnnotation, "nvidia.com/use-gpuuuid");
  EXPECT_EQ(kNoUseGpuUuidAnnotation, "nvidia.com/nouse-gpuuuid");
  EXPECT_EQ(kGpuSchedulerPolicyAnnotation, "hami.io/gpu-scheduler-policy");
  EXPECT_EQ(kNodeSchedulerPolicyAnnotation, "hami.io/node-scheduler-policy");
}

// ---- node inventory ----

TEST(NodeInventory, EncodesTheSeedsTwoV100sByteForByte) {
  EXPECT_EQ(EncodeNodeInventory(SeedDevices()), kSeedInventory);
}

TEST(NodeInventory, DecodesTheSeedsExample) {
  auto d = DecodeNodeInventory(kSeedInventory);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(*d, SeedDevices());
  EXPECT_EQ((*d)[0].index, 0);  // absent: the first device
}

TEST(NodeInventory, OmitsEveryZeroValuedField) {
  NodeDevice d;
  d.id = "GPU-x";
  EXPECT_EQ(EncodeNodeInventory({d}), R"([{"id":"GPU-x"}])");
  EXPECT_EQ(EncodeNodeInventory({}), "[]");
  d.numa = -1;
  d.health = true;
  EXPECT_EQ(EncodeNodeInventory({d}), R"([{"id":"GPU-x","numa":-1,"health":true}])");
}

TEST(NodeInventory, EscapesStringsAsJson) {
  NodeDevice d;
  d.id = "GPU-\"q\"\\";
  d.type = "T\xc3\xa9sla";  // UTF-8 kept as is
  std::string encoded = EncodeNodeInventory({d});
  EXPECT_EQ(encoded, "[{\"id\":\"GPU-\\\"q\\\"\\\\\",\"type\":\"T\xc3\xa9sla\"}]");
  auto back = DecodeNodeInventory(encoded);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, std::vector<NodeDevice>{d});
  NodeDevice bad;
  bad.id = "GPU-\xff";  // not UTF-8: replaced, so the JSON stays valid
  EXPECT_EQ(EncodeNodeInventory({bad}), "[{\"id\":\"GPU-\xef\xbf\xbd\"}]");
}

TEST(NodeInventory, DecodeIgnoresUnknownMembersOrderAndNulls) {
  auto d = DecodeNodeInventory(
      R"( [{"health":false,"customfield":[1,2],"type":null,"count":4,"id":"GPU-a","numa":-1}] )");
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_EQ(d->size(), 1u);
  EXPECT_EQ((*d)[0].id, "GPU-a");
  EXPECT_EQ((*d)[0].count, 4);
  EXPECT_EQ((*d)[0].numa, -1);
  EXPECT_EQ((*d)[0].type, "");
  EXPECT_FALSE((*d)[0].health);
}

TEST(NodeInventory, DecodesAnEmptyArrayAsNoDevices) {
  auto d = DecodeNodeInventory("[]");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_TRUE(d->empty());
}

struct BadValue {
  std::string_view value;
  std::string_view part;
};

class NodeInventoryReject : public ::testing::TestWithParam<BadValue> {};

TEST_P(NodeInventoryReject, NamesTheAnnotationAndTheOffendingPart) {
  auto d = DecodeNodeInventory(GetParam().value);
  ASSERT_FALSE(d.ok()) << GetParam().value;
  ExpectRejected(d.error(), kNodeRegisterAnnotation, GetParam().part);
}

INSTANTIATE_TEST_SUITE_P(
    Json, NodeInventoryReject,
    ::testing::Values(
        BadValue{"", "is empty"}, BadValue{" \n", "is empty"}, BadValue{"[{", "not valid JSON"},
        BadValue{R"([{"id":"a"}] x)", "not valid JSON"},
        BadValue{R"({"id":"a"})", "expected a JSON array"},
        BadValue{R"(["GPU-a"])", "device 0: expected an object, got string"},
        BadValue{R"([{"id":"a"},{"count":1}])", "device 1 id: is missing"},
        BadValue{R"([{"id":""}])", "device 0 id: is missing"},
        BadValue{R"([{"id":5}])", "device 0 id: expected a string, got number"},
        BadValue{R"([{"id":"a","count":"10"}])", "device 0 count: expected an integer, got string"},
        BadValue{R"([{"id":"a","count":1.5}])", "device 0 count: expected an integer, got 1.5"},
        BadValue{R"([{"id":"a","count":-1}])", "device 0 count: -1 is negative or too large"},
        BadValue{R"([{"id":"a","index":-1}])", "device 0 index: -1 is negative"},
        BadValue{R"([{"id":"a","devmem":2147483648}])", "device 0 devmem: 2147483648 is negative"},
        BadValue{R"([{"id":"a","devcore":true}])", "device 0 devcore: expected an integer"},
        BadValue{R"([{"id":"a","numa":-2147483649}])",
                 "device 0 numa: -2147483649 is out of range"},
        BadValue{R"([{"id":"a","type":7}])", "device 0 type: expected a string"},
        BadValue{R"([{"id":"a","mode":{}}])", "device 0 mode: expected a string, got object"},
        BadValue{R"([{"id":"a","health":"true"}])", "device 0 health: expected a boolean"},
        BadValue{R"([{"id":"a","type":"V\u0001"}])",
                 "device 0 type: 'V\\x01' contains a control"}));

INSTANTIATE_TEST_SUITE_P(
    Legacy, NodeInventoryReject,
    ::testing::Values(
        BadValue{"GPU-a,10,32768,100,NVIDIA,Tesla,0,true:",
                 "expected 7 comma-separated fields (id,count,devmem,devcore,type,numa,health), "
                 "got 8 (a ',' in the id or type is ambiguous)"},
        BadValue{"GPU-a,10,32768,100,NVIDIA,0:", "got 6"},
        BadValue{"GPU-a", "legacy entry 0 'GPU-a': expected 7 comma-separated fields"},
        BadValue{"GPU-a,10,32768,100,NVIDIA,0,true::GPU-b,10,32768,100,NVIDIA,0,true:",
                 "legacy entry 1 '': is empty"},
        BadValue{":", "legacy entry 0 '': is empty"},
        BadValue{",10,32768,100,NVIDIA,0,true:", "id is empty"},
        BadValue{"GPU-a,x,32768,100,NVIDIA,0,true:", "count 'x' is not a non-negative int32"},
        BadValue{"GPU-a,-1,32768,100,NVIDIA,0,true:", "count '-1' is not a non-negative int32"},
        BadValue{"GPU-a,10,99999999999,100,NVIDIA,0,true:", "devmem '99999999999' is not a"},
        BadValue{"GPU-a,10,32768, 100,NVIDIA,0,true:", "devcore ' 100' is not a"},
        BadValue{"GPU-a,10,32768,100,NVIDIA,x,true:", "numa 'x' is not an int32"},
        BadValue{"GPU-a,10,32768,100,NVIDIA,0,yes:", "health 'yes' is not a boolean"},
        BadValue{"GPU-a,10,32768,100,NVIDIA\xff,0,true:", "type is not valid UTF-8"},
        BadValue{"GPU-\x02,10,32768,100,NVIDIA,0,true:", "id contains a control character"}));

TEST(NodeInventory, DecodesTheLegacyRecordForm) {
  auto d = DecodeNodeInventory(
      "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
      "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448,10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,1,"
      "false:");
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].id, "GPU-00552014-5c87-89ac-b1a6-7b53aa24b0ec");
  EXPECT_EQ((*d)[0].count, 10);
  EXPECT_EQ((*d)[0].devmem_mib, 32768);
  EXPECT_EQ((*d)[0].devcore, 100);
  EXPECT_EQ((*d)[0].type, "NVIDIA-Tesla V100-PCIE-32GB");
  EXPECT_EQ((*d)[0].numa, 0);
  EXPECT_TRUE((*d)[0].health);
  EXPECT_EQ((*d)[1].numa, 1);
  EXPECT_FALSE((*d)[1].health);
  EXPECT_EQ((*d)[1].index, 0);  // the legacy form has no index
}

TEST(NodeInventory, LegacyFormNeedsNoTrailingColonAndReadsGoBooleans) {
  for (std::string_view health : {"1", "t", "T", "TRUE", "true", "True"}) {
    auto d = DecodeNodeInventory("GPU-a,1,2,3,X,0," + std::string(health));
    ASSERT_TRUE(d.ok()) << health << ": " << d.error().message();
    EXPECT_TRUE((*d)[0].health) << health;
  }
  for (std::string_view health : {"0", "f", "F", "FALSE", "false", "False"}) {
    auto d = DecodeNodeInventory("GPU-a,1,2,3,X,0," + std::string(health) + ":");
    ASSERT_TRUE(d.ok()) << health << ": " << d.error().message();
    EXPECT_FALSE((*d)[0].health) << health;
  }
}

// ---- handshake ----

TEST(Handshake, DecodesTheSeedsRequest) {
  auto h = DecodeHandshake(kSeedHandshake);
  ASSERT_TRUE(h.ok()) << h.error().message();
  EXPECT_EQ(h->state, HandshakeState::kRequesting);
  EXPECT_EQ(h->time, At(2024, 1, 23, 4, 30, 4));
}

TEST(Handshake, EncodesTheSeedsRequestByteForByte) {
  EXPECT_EQ(EncodeHandshake(HandshakeState::kRequesting, At(2024, 1, 23, 4, 30, 4)),
            kSeedHandshake);
  EXPECT_EQ(EncodeHandshake(HandshakeState::kReported,
                            At(2024, 1, 23, 4, 30, 4) + std::chrono::milliseconds(999)),
            "Reported_2024-01-23 04:30:04");
  EXPECT_EQ(EncodeHandshake(HandshakeState::kDeleted, At(1999, 12, 31, 23, 59, 59)),
            "Deleted_1999-12-31 23:59:59");
}

TEST(Handshake, ReadsHamisOlderFormsTolerantly) {
  struct Form {
    std::string_view value;
    HandshakeState state;
    WallTime time;
  };
  const WallTime t = At(2024, 1, 23, 4, 30, 4);
  for (const Form& f : {
           Form{"Reported 2024-01-23 04:30:04", HandshakeState::kReported, t},
           Form{"Reported_2024-01-23 04:30:04", HandshakeState::kReported, t},
           Form{"Deleted_2024.01.23 04:30:04", HandshakeState::kDeleted, t},
           Form{"Requesting_2024.01.23 04:30:04", HandshakeState::kRequesting, t},
           Form{"Reported 2024-01-23 04:30:04 +0000 UTC", HandshakeState::kReported, t},
           Form{"Reported 2024-01-23 12:30:04.123456789 +0800 CST m=+12.500000001",
                HandshakeState::kReported, t + std::chrono::nanoseconds(123456789)},
           Form{"Reported 2024-01-22 23:30:04.5 -0500 EST", HandshakeState::kReported,
                t + std::chrono::milliseconds(500)},
           Form{"Reported 2024-01-23 04:30:04 +0000", HandshakeState::kReported, t},
       }) {
    auto h = DecodeHandshake(f.value);
    ASSERT_TRUE(h.ok()) << f.value << ": " << h.error().message();
    EXPECT_EQ(h->state, f.state) << f.value;
    EXPECT_EQ(h->time, f.time) << f.value;
  }
}

class HandshakeReject : public ::testing::TestWithParam<BadValue> {};

TEST_P(HandshakeReject, NamesTheAnnotationAndTheValue) {
  auto h = DecodeHandshake(GetParam().value);
  ASSERT_FALSE(h.ok()) << GetParam().value;
  ExpectRejected(h.error(), kNodeHandshakeAnnotation, GetParam().part);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, HandshakeReject,
    ::testing::Values(
        BadValue{"", "expected Requesting_, Reported_ or Deleted_"},
        BadValue{"Pending_2024-01-23 04:30:04", "expected Requesting_, Reported_ or Deleted_"},
        BadValue{"Requesting", "expected '_' or ' ' after the state"},
        BadValue{"Requesting-2024-01-23 04:30:04", "expected '_' or ' ' after the state"},
        BadValue{"Requesting_", "expected a date"},
        BadValue{"Requesting_24-01-23 04:30:04", "expected a date"},
        BadValue{"Requesting_2024/01/23 04:30:04", "expected a date"},
        BadValue{"Requesting_2024-01.23 04:30:04", "expected a date"},
        BadValue{"Requesting_2024-01-23T04:30:04", "expected 'YYYY-MM-DD HH:MM:SS'"},
        BadValue{"Requesting_2024-01-23 04:30", "expected a time HH:MM:SS"},
        BadValue{"Requesting_2024-13-01 00:00:00", "the date does not exist"},
        BadValue{"Requesting_2023-02-29 00:00:00", "the date does not exist"},
        BadValue{"Requesting_2024-01-00 00:00:00", "the date does not exist"},
        BadValue{"Requesting_2024-01-23 24:00:00", "the time of day is out of range"},
        BadValue{"Requesting_2024-01-23 04:60:00", "the time of day is out of range"},
        BadValue{"Requesting_2024-01-23 04:30:60", "the time of day is out of range"},
        BadValue{"Requesting_2024-01-23 04:30:04x", "unexpected text after the time"},
        BadValue{"Requesting_2024-01-23 04:30:04.", "expected digits after '.'"},
        BadValue{"Requesting_2024-01-23 04:30:04 CST", "expected a zone offset"},
        BadValue{"Reported 2024-01-23 04:30:04 +2500 CST", "expected a zone offset"},
        BadValue{"Reported 2024-01-23 04:30:04 +08:00 CST", "expected a zone offset"},
        BadValue{"Reported 2024-01-23 04:30:04 +0800 ", "expected a zone name"},
        BadValue{"Reported 2024-01-23 04:30:04 +0800 CST junk", "expected a monotonic reading"},
        BadValue{"Reported 2024-01-23 04:30:04 +0800 CST m=", "expected a monotonic reading"},
        BadValue{"Reported 2024-01-23 04:30:04 +0800 CST m=+1.", "expected a monotonic reading"},
        BadValue{"Reported 2024-01-23 04:30:04 +0800 CST!", "unexpected text after the time"},
        BadValue{"Requesting_1600-01-01 00:00:00", "the year is out of range"},
        BadValue{"Requesting_9999-01-01 00:00:00", "the year is out of range"}));

// ---- pod device lists ----

TEST(PodDevices, DecodesTheSeedsAllocation) {
  auto p = DecodePodDevices(kSeedAllocated, kDevicesAllocatedAnnotation);
  ASSERT_TRUE(p.ok()) << p.error().message();
  ASSERT_EQ(p->size(), 1u);
  ASSERT_EQ((*p)[0].size(), 1u);
  EXPECT_EQ((*p)[0][0],
            (ContainerDevice{"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", "NVIDIA", 3000, 0}));
}

TEST(PodDevices, EncodesTheSeedsAllocationAndItsEmptiedFormByteForByte) {
  PodDevices one = {{{"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448", "NVIDIA", 3000, 0}}};
  auto e = EncodePodDevices(one, kDevicesToAllocateAnnotation);
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(*e, kSeedAllocated);
  auto emptied = EncodePodDevices({{}}, kDevicesToAllocateAnnotation);
  ASSERT_TRUE(emptied.ok());
  EXPECT_EQ(*emptied, kSeedToAllocateDone);
}

TEST(PodDevices, DecodesTheEmptiedFormAsOneContainerWithoutDevices) {
  auto p = DecodePodDevices(kSeedToAllocateDone, kDevicesToAllocateAnnotation);
  ASSERT_TRUE(p.ok()) << p.error().message();
  EXPECT_EQ(*p, PodDevices{{}});
}

TEST(PodDevices, EmptyValueIsNoContainers) {
  auto p = DecodePodDevices("", kDevicesToAllocateAnnotation);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->empty());
  auto e = EncodePodDevices({}, kDevicesToAllocateAnnotation);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, "");
}

TEST(PodDevices, KeepsContainerPositionsWithInitContainersFirst) {
  // An init container without devices, then a container with two, then one without.
  PodDevices pod = {{}, {{"GPU-a", "NVIDIA", 1000, 30}, {"GPU-b", "NVIDIA", 2000, 0}}, {}};
  auto e = EncodePodDevices(pod, kDevicesAllocatedAnnotation);
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(*e, ";GPU-a,NVIDIA,1000,30:GPU-b,NVIDIA,2000,0:;;");
  auto back = DecodePodDevices(*e, kDevicesAllocatedAnnotation);
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(*back, pod);
}

TEST(PodDevices, ToleratesAMissingFinalColonOrSemicolon) {
  const PodDevices want = {{{"GPU-a", "NVIDIA", 1000, 30}}};
  for (std::string_view v :
       {"GPU-a,NVIDIA,1000,30:", "GPU-a,NVIDIA,1000,30;", "GPU-a,NVIDIA,1000,30"}) {
    auto p = DecodePodDevices(v, kDevicesAllocatedAnnotation);
    ASSERT_TRUE(p.ok()) << v << ": " << p.error().message();
    EXPECT_EQ(*p, want) << v;
  }
  auto two = DecodePodDevices("GPU-a,NVIDIA,1,2;GPU-b,NVIDIA,3,4", kDevicesAllocatedAnnotation);
  ASSERT_TRUE(two.ok()) << two.error().message();
  EXPECT_EQ(*two, (PodDevices{{{"GPU-a", "NVIDIA", 1, 2}}, {{"GPU-b", "NVIDIA", 3, 4}}}));
}

class PodDevicesReject : public ::testing::TestWithParam<BadValue> {};

TEST_P(PodDevicesReject, NamesTheAnnotationContainerAndDevice) {
  auto p = DecodePodDevices(GetParam().value, kDevicesAllocatedAnnotation);
  ASSERT_FALSE(p.ok()) << GetParam().value;
  ExpectRejected(p.error(), kDevicesAllocatedAnnotation, GetParam().part);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, PodDevicesReject,
    ::testing::Values(
        BadValue{"GPU-a,NVIDIA,3000:;",
                 "container 0 device 0 'GPU-a,NVIDIA,3000': expected 4 comma-separated fields "
                 "(uuid,type,memMiB,cores), got 3"},
        BadValue{"GPU-a,NVIDIA,3000,0,5:;", "container 0 device 0 'GPU-a,NVIDIA,3000,0,5': "},
        BadValue{"GPU-a,NVIDIA,3000,0::;", "container 0 device 1 '': empty device entry"},
        BadValue{":;", "container 0 device 0 '': empty device entry"},
        BadValue{";:", "container 1 device 0 '': empty device entry"},
        BadValue{",NVIDIA,3000,0:;", "uuid is empty"}, BadValue{"GPU-a,,3000,0:;", "type is empty"},
        BadValue{"GPU-a,NVIDIA,abc,0:;", "memory 'abc' is not a non-negative int32 (MiB)"},
        BadValue{"GPU-a,NVIDIA,-1,0:;", "memory '-1' is not"},
        BadValue{"GPU-a,NVIDIA, 3000,0:;", "memory ' 3000' is not"},
        BadValue{"GPU-a,NVIDIA,2147483648,0:;", "memory '2147483648' is not"},
        BadValue{"GPU-a,NVIDIA,3000,x:;", "cores 'x' is not a non-negative int32 (percent)"},
        BadValue{"GPU-a,NVIDIA,3000,:;", "cores '' is not"},
        BadValue{"GPU-\x01,NVIDIA,3000,0:;", "uuid contains a control character"},
        BadValue{"GPU-a,NVIDIA,1,0:;GPU-b,NV\xc3,1,0:;",
                 "container 1 device 0 'GPU-b,NV\\xc3,1,0': type is not valid UTF-8"}));

TEST(PodDevices, EncodeRefusesWhatCouldNotBeReadBack) {
  struct Case {
    ContainerDevice device;
    std::string_view part;
  };
  for (const Case& c : {
           Case{{"GPU,a", "NVIDIA", 1, 0}, "container 0 device 0 uuid 'GPU,a' contains ','"},
           Case{{"GPU:a", "NVIDIA", 1, 0}, "uuid 'GPU:a' contains"},
           Case{{"GPU-a", "NV;", 1, 0}, "type 'NV;' contains"},
           Case{{"", "NVIDIA", 1, 0}, "uuid '' is empty"},
           Case{{"GPU-a", "", 1, 0}, "type '' is empty"},
           Case{{"GPU-a", "NV\n", 1, 0}, "contains a control character"},
           Case{{"GPU-a", "NVIDIA", -1, 0}, "negative memory or core count"},
           Case{{"GPU-a", "NVIDIA", 1, -5}, "negative memory or core count"},
       }) {
    auto e = EncodePodDevices({{c.device}}, kDevicesToAllocateAnnotation);
    ASSERT_FALSE(e.ok()) << c.part;
    ExpectRejected(e.error(), kDevicesToAllocateAnnotation, c.part);
  }
}

// ---- node lock ----

TEST(NodeLock, EncodesAndDecodesTimeNamespaceAndPod) {
  NodeLock lock{At(2024, 5, 20, 10, 2, 5), "default", "gpu-pod"};
  auto e = EncodeNodeLock(lock);
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(*e, "2024-05-20T10:02:05Z,default,gpu-pod");
  auto d = DecodeNodeLock(*e);
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(*d, lock);
}

TEST(NodeLock, DecodesHamisLocalTimeOffset) {
  auto d = DecodeNodeLock("2024-05-20T18:02:05+08:00,default,gpu-pod");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->time, At(2024, 5, 20, 10, 2, 5));
}

TEST(NodeLock, DecodesTheOlderBareTimeWithAnUnknownHolder) {
  auto d = DecodeNodeLock("2024-05-20T10:02:05Z");
  ASSERT_TRUE(d.ok()) << d.error().message();
  EXPECT_EQ(d->time, At(2024, 5, 20, 10, 2, 5));
  EXPECT_EQ(d->ns, "");
  EXPECT_EQ(d->pod, "");
  auto e = EncodeNodeLock(*d);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, "2024-05-20T10:02:05Z");
}

TEST(NodeLock, EncodeTruncatesToTheSecond) {
  auto e = EncodeNodeLock({At(2024, 5, 20, 10, 2, 5) + std::chrono::milliseconds(900), "a", "b"});
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(*e, "2024-05-20T10:02:05Z,a,b");
}

class NodeLockReject : public ::testing::TestWithParam<BadValue> {};

TEST_P(NodeLockReject, NamesTheAnnotationAndTheField) {
  auto d = DecodeNodeLock(GetParam().value);
  ASSERT_FALSE(d.ok()) << GetParam().value;
  ExpectRejected(d.error(), kNodeLockAnnotation, GetParam().part);
}

INSTANTIATE_TEST_SUITE_P(
    Forms, NodeLockReject,
    ::testing::Values(
        BadValue{"", "invalid time"}, BadValue{"garbage", "invalid time"},
        BadValue{"2024-13-20T10:02:05Z,default,pod", "invalid time"},
        BadValue{"2024-05-20 10:02:05,default,pod", "invalid time"},
        BadValue{"2024-05-20T10:02:05Z,default",
                 "expected '<RFC 3339 time>,<namespace>,<pod>' or a bare time, got 2"},
        BadValue{"2024-05-20T10:02:05Z,a,b,c", "got 4 comma-separated fields"},
        BadValue{"2024-05-20T10:02:05Z,,pod", "namespace is empty"},
        BadValue{"2024-05-20T10:02:05Z,default,", "pod is empty"},
        BadValue{"2024-05-20T10:02:05Z,de fault,pod", "namespace contains whitespace"},
        BadValue{"2024-05-20T10:02:05Z,default,p\tod", "pod contains whitespace"}));

TEST(NodeLock, EncodeRefusesAHolderThatCouldNotBeReadBack) {
  const WallTime t = At(2024, 5, 20, 10, 2, 5);
  for (const auto& [lock, part] : std::vector<std::pair<NodeLock, std::string_view>>{
           {{t, "", "pod"}, "namespace '' is empty"},
           {{t, "default", ""}, "pod '' is empty"},
           {{t, "de,fault", "pod"}, "namespace 'de,fault' contains ','"},
           {{t, "default", "a b"}, "pod 'a b' contains whitespace"},
       }) {
    auto e = EncodeNodeLock(lock);
    ASSERT_FALSE(e.ok()) << part;
    ExpectRejected(e.error(), kNodeLockAnnotation, part);
  }
}

// ---- bind phase and times ----

TEST(BindPhase, EncodesAndDecodesTheSeedsValues) {
  EXPECT_EQ(EncodeBindPhase(BindPhase::kAllocating), "allocating");
  EXPECT_EQ(EncodeBindPhase(BindPhase::kSuccess), "success");
  EXPECT_EQ(EncodeBindPhase(BindPhase::kFailed), "failed");
  for (BindPhase p : {BindPhase::kAllocating, BindPhase::kSuccess, BindPhase::kFailed}) {
    auto d = DecodeBindPhase(EncodeBindPhase(p));
    ASSERT_TRUE(d.ok());
    EXPECT_EQ(*d, p);
  }
}

TEST(BindPhase, RejectsAnythingElseNamingTheAnnotation) {
  for (std::string_view v : {"", "Allocating", "succeeded", " success", "failed\n"}) {
    auto d = DecodeBindPhase(v);
    ASSERT_FALSE(d.ok()) << v;
    ExpectRejected(d.error(), kBindPhaseAnnotation, "(expected allocating, success or failed)");
  }
}

TEST(UnixSeconds, DecodesTheSeedsBindTimeAndEncodesItBack) {
  auto t = DecodeUnixSeconds(kSeedBindTime, kBindTimeAnnotation);
  ASSERT_TRUE(t.ok()) << t.error().message();
  EXPECT_EQ(*t, At(2024, 5, 20, 10, 2, 5));
  EXPECT_EQ(EncodeUnixSeconds(*t), kSeedBindTime);
  EXPECT_EQ(EncodeUnixSeconds(*t + std::chrono::milliseconds(999)), kSeedBindTime);
  auto zero = DecodeUnixSeconds("0", kVgpuTimeAnnotation);
  ASSERT_TRUE(zero.ok());
  EXPECT_EQ(*zero, WallTime{});
  auto padded = DecodeUnixSeconds("01716199325", kBindTimeAnnotation);
  ASSERT_TRUE(padded.ok());
  EXPECT_EQ(*padded, *t);
  EXPECT_EQ(EncodeUnixSeconds(WallTime{} - seconds(5)), "0");
}

TEST(UnixSeconds, RejectsAnythingButDigitsInRange) {
  for (std::string_view v : {"", "-1", "+1", "1.5", "17e8", " 1", "1716199325 "}) {
    auto t = DecodeUnixSeconds(v, kVgpuTimeAnnotation);
    ASSERT_FALSE(t.ok()) << v;
    ExpectRejected(t.error(), kVgpuTimeAnnotation, "Unix seconds");
  }
  for (std::string_view v : {"99999999999999999999", "9223372037"}) {
    auto t = DecodeUnixSeconds(v, kBindTimeAnnotation);
    ASSERT_FALSE(t.ok()) << v;
    ExpectRejected(t.error(), kBindTimeAnnotation, "out of range");
  }
}

}  // namespace
}  // namespace hami::kube
