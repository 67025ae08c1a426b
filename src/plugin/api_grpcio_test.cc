// The plugin's gRPC server against an independent gRPC implementation: Debian's python3-grpcio
// playing the kubelet (api_grpcio_checks.py, stubs generated from api.proto by grpc_tools at
// test time). Skips when /usr/bin/python3 or those modules are missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "plugin/api.h"
#include "support/subprocess.h"

namespace hami::plugin {
namespace {

using ::testing::HasSubstr;

TEST(PluginApiGrpcio, APythonKubeletAgreesWithTheServer) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is absent";
  TempDir dir("hami-pgrpcio");
  ASSERT_TRUE(dir.ok());

  ServiceOptions options;
  options.allocate = [](const std::vector<ContainerRequest>& containers)
      -> Result<std::vector<ContainerResponse>> {
    std::vector<ContainerResponse> out;
    for (const ContainerRequest& c : containers) {
      if (c.device_ids != std::vector<std::string>{"GPU-1111-0"}) {
        return Error(ErrorCode::kNotFound, "no binding pod found on node n1");
      }
      ContainerResponse r;
      r.envs = {{"NVIDIA_VISIBLE_DEVICES", "GPU-1111-0"}, {"CUDA_DEVICE_SM_LIMIT", "30"}};
      r.mounts = {{"/usr/local/vgpu", "/host/containers/u_main", false},
                  {"/overrideEnv", "/host/containers/u_main.limits", true}};
      r.devices = {{"/dev/nvidia0", "/dev/nvidia0", "rw"}};
      out.push_back(r);
    }
    return out;
  };
  options.prefer = [](const std::vector<PreferredRequest>& containers)
      -> Result<std::vector<std::vector<std::string>>> {
    std::vector<std::vector<std::string>> out;
    for (const PreferredRequest& c : containers) {
      out.emplace_back(c.available_device_ids.end() - c.allocation_size,
                       c.available_device_ids.end());
    }
    return out;
  };
  DevicePluginService service(std::move(options));
  service.SetDevices({{"GPU-1111-0", true, 1}, {"GPU-1111-1", false, -1}});
  auto server = ServeDevicePlugin(dir.File("hami-nvidia.sock"), &service);
  ASSERT_TRUE(server.ok()) << server.error().message();

  TempDir out("hami-pgrpcio-stubs");
  ASSERT_TRUE(out.ok());
  testing::Subprocess python(
      {"/usr/bin/python3", std::string(HAMI_PLUGIN_SOURCE_DIR) + "/api_grpcio_checks.py",
       HAMI_KUBELET_API_PROTO_DIR, (*server)->path(), out.path()},
      {{"PYTHONDONTWRITEBYTECODE", "1"}});
  const std::string output = python.ReadAll(60'000);
  const int status = python.Wait(60'000);
  if (status == 77) GTEST_SKIP() << output;
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("ok all")) << output;

  ServiceCounters c = service.Counters();
  EXPECT_EQ(c[Rpc::kAllocate].calls, 2u);
  EXPECT_EQ(c[Rpc::kAllocate].errors, 1u);
  EXPECT_EQ(c[Rpc::kListAndWatch].calls, 1u);
  EXPECT_EQ(c[Rpc::kGetPreferredAllocation].calls, 1u);
  EXPECT_EQ(c[Rpc::kPreStartContainer].calls, 1u);
}

}  // namespace
}  // namespace hami::plugin
