#include "kube/resize.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace hami::kube {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(ResizeRequest, ReadsTheContainerAndEitherOrBothAmounts) {
  auto both = DecodeResizeRequest("main:gpumem=4096,gpucores=50");
  ASSERT_TRUE(both.ok()) << both.error().message();
  EXPECT_EQ(both->container, "main");
  EXPECT_EQ(both->mem_mib, 4096);
  EXPECT_EQ(both->cores, 50);
  auto cores = DecodeResizeRequest("train:gpucores=0");
  ASSERT_TRUE(cores.ok());
  EXPECT_FALSE(cores->mem_mib.has_value());
  EXPECT_EQ(cores->cores, 0);
  EXPECT_EQ(EncodeResizeRequest(*both), "main:gpumem=4096,gpucores=50");
}

class RefusedRequest : public ::testing::TestWithParam<std::pair<const char*, const char*>> {};

TEST_P(RefusedRequest, NamesTheAnnotationAndWhatIsWrong) {
  auto r = DecodeResizeRequest(GetParam().first);
  ASSERT_FALSE(r.ok()) << GetParam().first;
  EXPECT_THAT(r.error().message(),
              AllOf(HasSubstr("hami.io/resize: '"), HasSubstr(GetParam().second)));
}

INSTANTIATE_TEST_SUITE_P(
    All, RefusedRequest,
    ::testing::Values(std::pair{"gpumem=4096", "no ':'"}, std::pair{":gpumem=1", "name is empty"},
                      std::pair{"main:", "neither gpumem nor gpucores"},
                      std::pair{"main:gpumem=4Gi", "not a whole number of MiB"},
                      std::pair{"main:gpumem=-1", "not a whole number"},
                      std::pair{"main:gpumem=0", "would be no limit"},
                      std::pair{"main:gpumem=99999999999", "not a whole number"},
                      std::pair{"main:gpucores=101", "out of range 0..100"},
                      std::pair{"main:memory=1", "'memory' is not gpumem or gpucores"},
                      std::pair{"main:gpumem=1,gpumem=2", "given twice"},
                      std::pair{"main:gpumem=1,", "ends with ','"},
                      std::pair{"main:gpumem", "expected gpumem=MiB"},
                      std::pair{"main: gpumem=1", "space"}));

TEST(ResizeStatus, RoundTripsAndRefusesWhatIsNotOne) {
  ResizeStatus s{"main:gpumem=4096", ResizePhase::kAccepted, "4096 MiB", "GPU-a,NVIDIA,2048,0:;"};
  auto back = DecodeResizeStatus(EncodeResizeStatus(s));
  ASSERT_TRUE(back.ok()) << back.error().message();
  EXPECT_EQ(back->request, s.request);
  EXPECT_EQ(back->phase, ResizePhase::kAccepted);
  EXPECT_EQ(back->previous, s.previous);
  EXPECT_THAT(DecodeResizeStatus("[]").error().message(), HasSubstr("not a JSON object"));
  EXPECT_THAT(DecodeResizeStatus(R"({"request":"a","reason":""})").error().message(),
              HasSubstr("phase: missing"));
  EXPECT_THAT(DecodeResizeStatus(R"({"request":"a","phase":"done","reason":""})").error().message(),
              HasSubstr("'done' is not accepted, applied or refused"));
}

TEST(ResizeStatus, WhileAcceptedEachDeviceCountsTheLargerOfOldAndNew) {
  PodDevices now = {{{"GPU-a", "NVIDIA", 1000, 50}}, {{"GPU-a", "NVIDIA", 300, 10}}};
  PodDevices before = {{{"GPU-a", "NVIDIA", 2000, 20}}, {{"GPU-a", "NVIDIA", 300, 10}}};
  PodDevices larger = LargerOfEach(now, before);
  EXPECT_EQ(larger[0][0].mem_mib, 2000);
  EXPECT_EQ(larger[0][0].cores, 50);
  PodDevices other = {{{"GPU-b", "NVIDIA", 9000, 90}}, {{"GPU-a", "NVIDIA", 300, 10}}};
  EXPECT_EQ(LargerOfEach(now, other), now) << "another GPU: not the same share";
}

}  // namespace
}  // namespace hami::kube
