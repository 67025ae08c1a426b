// The driver's gRPC servers against an independent gRPC implementation: Debian's
// python3-grpcio playing the kubelet (grpcio_checks/checks.py), with stubs generated from the
// test's own copies of the upstream protos (grpcio_checks/*.proto), never the product's. Skips
// when /usr/bin/python3 or those modules are missing.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/temp_dir.h"
#include "dra/service.h"
#include "support/subprocess.h"

namespace hami::dra {
namespace {

using ::testing::HasSubstr;

TEST(DraGrpcio, APythonKubeletRegistersPreparesAndUnprepares) {
  if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is absent";
  TempDir root("hami-dra-grpcio");
  ASSERT_TRUE(root.ok());
  const std::string hook = root.File("hook");
  ASSERT_TRUE(std::filesystem::create_directories(hook + "/vgpu"));
  ASSERT_TRUE(std::ofstream(hook + "/vgpu/libvgpu.so") << "ELF");
  ASSERT_TRUE(std::ofstream(hook + "/vgpu/ld.so.preload") << "/usr/local/vgpu/libvgpu.so\n");
  DriverOptions o;
  o.node_name = "n1";
  o.checkpoint_path = root.File("checkpoint.json");
  o.cdi_dir = root.File("cdi");
  o.hook_path = hook;
  o.lock_dir.parent = root.path();
  o.lock_dir.expected_owner = geteuid();
  o.log = [](std::string_view) {};
  StaticClaimSource source;
  source.Put({{"metadata", {{"namespace", "ml"}, {"name", "c"}, {"uid", "u-1"}}},
              {"status",
               {{"allocation",
                 {{"devices",
                   {{"results",
                     {{{"request", "gpu"},
                       {"driver", kDriverName},
                       {"pool", "n1"},
                       {"device", "hami-gpu-0"},
                       {"shareID", "s-1"},
                       {"consumedCapacity", {{"memory", "1Gi"}, {"cores", "30"}}}}}}}}}}}}});
  auto driver = Driver::Create(source, {{"hami-gpu-0", "GPU-aaaa", uint64_t{8} << 30, true}}, o);
  ASSERT_TRUE(driver.ok()) << driver.error().message();
  DraV1Service v1(**driver);
  DraV1beta1Service v1beta1(**driver);
  const std::string endpoint = root.File("dra.sock");
  RegistrationService registration(kDriverName, endpoint, Health::kServed, [](std::string_view) {});
  HealthService health({{"n1", "hami-gpu-0", false, "Xid 79", 1765000000}});
  auto dra =
      SocketServer::Start(endpoint, {&v1, &v1beta1, &health}, [&health] { health.EndStreams(); });
  ASSERT_TRUE(dra.ok()) << dra.error().message();
  auto reg = SocketServer::Start(root.File(RegistrationSocketName(kDriverName)), {&registration});
  ASSERT_TRUE(reg.ok()) << reg.error().message();

  TempDir out("hami-dra-grpcio-stubs");
  ASSERT_TRUE(out.ok());
  testing::Subprocess python({"/usr/bin/python3", std::string(HAMI_DRA_GRPCIO_DIR) + "/checks.py",
                              HAMI_DRA_GRPCIO_DIR, (*reg)->path(), endpoint, out.path()},
                             {{"PYTHONDONTWRITEBYTECODE", "1"}});
  const std::string output = python.ReadAll(90'000);
  const int status = python.Wait(90'000);
  if (status == 77) GTEST_SKIP() << output;
  EXPECT_EQ(status, 0) << output;
  EXPECT_THAT(output, HasSubstr("ok all")) << output;

  // What the Python kubelet did, seen from the driver's side.
  EXPECT_TRUE(registration.state().registered);
  EXPECT_TRUE((*driver)->Prepared().empty());
  struct stat st {};
  EXPECT_NE(stat(root.File("cdi/k8s.hami-core-gpu.project-hami.io-claim_u-1.json").c_str(), &st),
            0);
  EXPECT_NE(stat((hook + "/vgpu/containers/u-1_claim").c_str(), &st), 0);
}

}  // namespace
}  // namespace hami::dra
