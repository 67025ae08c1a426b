#include "sim/kubelet/convert.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/enum_values.h"

namespace hami::sim::kubelet {
namespace {

using ::testing::ElementsAre;

TEST(SimKubeletConvert, KeepsEachDeviceAsSentAndCountsOnlyExactlyHealthy) {
  v1beta1::ListAndWatchResponse r;
  v1beta1::Device* a = r.add_devices();
  a->set_id("GPU-a-0");
  a->set_health("Healthy");
  a->mutable_topology()->add_nodes()->set_id(1);
  a->mutable_topology()->add_nodes()->set_id(3);
  v1beta1::Device* b = r.add_devices();
  b->set_id("GPU-a-1");
  b->set_health("healthy");  // not the API's spelling
  v1beta1::Device* c = r.add_devices();
  c->set_id("GPU-a-2");
  c->set_health("Unhealthy");
  c->mutable_topology();  // present and empty

  std::vector<Device> d = DevicesOf(r);
  ASSERT_EQ(d.size(), 3u);
  EXPECT_EQ(d[0], (Device{"GPU-a-0", "Healthy", {1, 3}}));
  EXPECT_TRUE(d[0].healthy());
  EXPECT_EQ(d[1].health, "healthy");
  EXPECT_FALSE(d[1].healthy());
  EXPECT_TRUE(d[1].numa_nodes.empty()) << "no topology";
  EXPECT_FALSE(d[2].healthy());
  EXPECT_TRUE(d[2].numa_nodes.empty());
  EXPECT_TRUE(DevicesOf(v1beta1::ListAndWatchResponse()).empty());
}

TEST(SimKubeletConvert, SendsOneContainerRequestPerContainerInOrder) {
  v1beta1::AllocateRequest r = AllocateRequestOf({{"GPU-b-1", "GPU-a-0"}, {}, {"GPU-c-0"}});
  ASSERT_EQ(r.container_requests_size(), 3);
  EXPECT_THAT(r.container_requests(0).devices_ids(), ElementsAre("GPU-b-1", "GPU-a-0"));
  EXPECT_EQ(r.container_requests(1).devices_ids_size(), 0);
  EXPECT_THAT(r.container_requests(2).devices_ids(), ElementsAre("GPU-c-0"));
}

TEST(SimKubeletConvert, ReadsEveryFieldOfAnAllocateAnswerKeepingTheOrderOfMounts) {
  v1beta1::ContainerAllocateResponse r;
  (*r.mutable_envs())["B"] = "2";
  (*r.mutable_envs())["A"] = "1";
  v1beta1::Mount* m = r.add_mounts();
  m->set_container_path("/tmp/vgpulock");
  m->set_host_path("/host/locks");
  m = r.add_mounts();
  m->set_container_path("/tmp/vgpulock/hostpid");
  m->set_host_path("/host/hostpid");
  m->set_read_only(true);
  v1beta1::DeviceSpec* d = r.add_devices();
  d->set_container_path("/dev/nvidia0");
  d->set_host_path("/dev/nvidia3");
  d->set_permissions("rw");
  (*r.mutable_annotations())["k"] = "v";
  r.add_cdi_devices()->set_name("nvidia.com/gpu=0");

  ContainerAllocation a = AllocationOf(r);
  EXPECT_EQ(a.envs, (std::map<std::string, std::string>{{"A", "1"}, {"B", "2"}}));
  EXPECT_THAT(a.mounts, ElementsAre(Mount{"/tmp/vgpulock", "/host/locks", false},
                                    Mount{"/tmp/vgpulock/hostpid", "/host/hostpid", true}));
  EXPECT_THAT(a.devices, ElementsAre(DeviceSpec{"/dev/nvidia0", "/dev/nvidia3", "rw"}));
  EXPECT_EQ(a.annotations, (std::map<std::string, std::string>{{"k", "v"}}));
  EXPECT_THAT(a.cdi_devices, ElementsAre("nvidia.com/gpu=0"));
  EXPECT_EQ(AllocationOf(v1beta1::ContainerAllocateResponse()), ContainerAllocation());
}

TEST(SimKubeletConvert, AsksForAPreferenceAndReadsTheAnswerInOrder) {
  v1beta1::PreferredAllocationRequest r =
      PreferredRequestOf({PreferredRequest{{"a", "b", "c"}, {"b"}, 2}});
  ASSERT_EQ(r.container_requests_size(), 1);
  EXPECT_THAT(r.container_requests(0).available_deviceids(), ElementsAre("a", "b", "c"));
  EXPECT_THAT(r.container_requests(0).must_include_deviceids(), ElementsAre("b"));
  EXPECT_EQ(r.container_requests(0).allocation_size(), 2);

  v1beta1::PreferredAllocationResponse answer;
  answer.add_container_responses()->add_deviceids("c");
  answer.mutable_container_responses(0)->add_deviceids("b");
  answer.add_container_responses();
  EXPECT_THAT(PreferredIdsOf(answer), ElementsAre(ElementsAre("c", "b"), ElementsAre()));
}

TEST(SimKubeletConvert, AFailedCallNamesWhatFailedTheMessageAndTheCode) {
  Error e = ErrorOfStatus(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no pod"), "Allocate");
  EXPECT_EQ(e.code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(e.message(), "Allocate: no pod (gRPC INVALID_ARGUMENT)");
  EXPECT_EQ(ErrorOfStatus(grpc::Status(grpc::StatusCode::UNAVAILABLE, "x"), "y").code(),
            ErrorCode::kUnavailable);
  EXPECT_EQ(ErrorOfStatus(grpc::Status(grpc::StatusCode::DEADLINE_EXCEEDED, "x"), "y").code(),
            ErrorCode::kTimeout);
  EXPECT_EQ(ErrorOfStatus(grpc::Status(grpc::StatusCode::UNKNOWN, "x"), "y").code(),
            ErrorCode::kInternal);
  EXPECT_EQ(StatusCodeText(::hami::testing::UnnamedValue<grpc::StatusCode>(99)), "CODE_99");
}

}  // namespace
}  // namespace hami::sim::kubelet
