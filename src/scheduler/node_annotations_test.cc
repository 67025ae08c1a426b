#include "scheduler/node_annotations.h"

#include <gtest/gtest.h>

namespace hami::scheduler {
namespace {

TEST(NodeAnnotations, DecodesPairScores) {
  auto s = DecodePairScores(
      R"([{"uuid":"GPU-a","score":{"GPU-b":200,"GPU-c":20}},{"uuid":"GPU-b","score":{"GPU-a":200}},{"uuid":"GPU-c"}])");
  ASSERT_TRUE(s.ok()) << s.error().message();
  EXPECT_EQ(s->at("GPU-a").at("GPU-b"), 200);
  EXPECT_EQ(s->at("GPU-a").at("GPU-c"), 20);
  EXPECT_TRUE(s->at("GPU-c").empty());
}

TEST(NodeAnnotations, RejectsMalformedPairScoresNamingThePart) {
  EXPECT_EQ(DecodePairScores("nope").error().message(),
            "hami.io/node-nvidia-score: not JSON: 'nope'");
  EXPECT_EQ(DecodePairScores("{}").error().message(),
            "hami.io/node-nvidia-score: expected a JSON array");
  EXPECT_EQ(DecodePairScores(R"([{"score":{}}])").error().message(),
            "hami.io/node-nvidia-score: element 0: \"uuid\" must be a non-empty string");
  EXPECT_EQ(DecodePairScores(R"([{"uuid":"a","score":{"b":-1}}])").error().message(),
            "hami.io/node-nvidia-score: element 0: score of 'b': expected an integer in [0, "
            "2^31-1]");
  EXPECT_EQ(DecodePairScores(R"([{"uuid":"a","score":[1]}])").error().message(),
            "hami.io/node-nvidia-score: element 0: \"score\" must be an object");
}

TEST(NodeAnnotations, CordonListIsTrimmedAndSkipsEmptyEntries) {
  EXPECT_EQ(DecodeCordonList(" GPU-a, 3,,GPU-b "),
            (std::vector<std::string>{"GPU-a", "3", "GPU-b"}));
  EXPECT_TRUE(DecodeCordonList("").empty());
}

}  // namespace
}  // namespace hami::scheduler
