#include "dra/cdi.h"

#include <gtest/gtest.h>

namespace hami::dra {
namespace {

using nlohmann::json;

TEST(Cdi, NamesFollowTheTransientSpecScheme) {
  EXPECT_EQ(CdiSpecFileName("0b6f-1"), "k8s.hami-core-gpu.project-hami.io-claim_0b6f-1.json");
  EXPECT_EQ(CdiSpecFileName("a/b"), "k8s.hami-core-gpu.project-hami.io-claim_a_b.json");
  EXPECT_EQ(CdiDeviceName("0b6f-1", "hami-gpu-0", ""), "0b6f-1-hami-gpu-0");
  EXPECT_EQ(CdiDeviceName("0b6f-1", "hami-gpu-0", "s-9"), "0b6f-1-hami-gpu-0-s-9");
  EXPECT_EQ(CdiDeviceId("0b6f-1-hami-gpu-0"),
            "k8s.hami-core-gpu.project-hami.io/claim=0b6f-1-hami-gpu-0");
}

TEST(Cdi, DeviceNamesMustBeCdiNames) {
  EXPECT_TRUE(IsValidCdiDeviceName("0b6f-1-hami-gpu-0"));
  EXPECT_TRUE(IsValidCdiDeviceName("a_b.c:d"));
  EXPECT_FALSE(IsValidCdiDeviceName(""));
  EXPECT_FALSE(IsValidCdiDeviceName("-a"));
  EXPECT_FALSE(IsValidCdiDeviceName("a-"));
  EXPECT_FALSE(IsValidCdiDeviceName("a/b"));
  EXPECT_FALSE(IsValidCdiDeviceName("a b"));
}

TEST(Cdi, SpecCarriesTheShareOnceAndOneDevicePerResult) {
  plugin::ContainerResponse edits;
  edits.envs = {{"NVIDIA_VISIBLE_DEVICES", "GPU-a"}, {"CUDA_DEVICE_SM_LIMIT", "30"}};
  edits.mounts = {{"/usr/local/vgpu", "/h/c/u_claim", false},
                  {"/overrideEnv", "/h/c/u.limits", true}};
  json spec = CdiSpec(edits, {{"u-hami-gpu-0-s1", "GPU-a", 0}, {"u-hami-gpu-0-s2", "GPU-a", 0}});
  EXPECT_EQ(spec["cdiVersion"], "0.5.0");  // the oldest that accepts a name starting with a digit
  EXPECT_EQ(spec["kind"], "k8s.hami-core-gpu.project-hami.io/claim");
  EXPECT_EQ(spec["containerEdits"]["env"],
            json::array({"CUDA_DEVICE_SM_LIMIT=30", "NVIDIA_VISIBLE_DEVICES=GPU-a"}));
  EXPECT_EQ(spec["containerEdits"]["mounts"][0],
            json({{"hostPath", "/h/c/u_claim"},
                  {"containerPath", "/usr/local/vgpu"},
                  {"options", {"rw", "nosuid", "nodev", "bind"}}}));
  EXPECT_EQ(spec["containerEdits"]["mounts"][1]["options"][0], "ro");
  ASSERT_EQ(spec["devices"].size(), 2u);
  EXPECT_EQ(spec["devices"][1]["name"], "u-hami-gpu-0-s2");
  EXPECT_EQ(spec["devices"][1]["containerEdits"]["env"], json::array({"HAMI_DRA_DEVICE_0=GPU-a"}));
}

}  // namespace
}  // namespace hami::dra
