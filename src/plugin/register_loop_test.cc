// The registration loop against the simulated API server.
#include "plugin/register_loop.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "kube/config.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"

namespace hami::plugin {
namespace {

using ::testing::HasSubstr;
using Stats = RegisterLoop::Stats;

// Bounds the waits of a broken build only; never reached when the code works.
constexpr std::chrono::milliseconds kBound{60000};

class RegisterLoopTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto server = sim::kube::ApiServer::Start({});
    ASSERT_TRUE(server.ok()) << server.error().message();
    api_ = std::move(server).value();
    ASSERT_TRUE(api_->CreateObject(kube::kNodes, {{"metadata", {{"name", "n1"}}}}).ok());
    kube::Config c;
    c.server = api_->url();
    c.source = "test";
    kube::ClientOptions o;
    o.qps = 0;
    o.max_retries = 0;  // the loop's own retry is under test
    auto client = kube::Client::Create(c, o);
    ASSERT_TRUE(client.ok()) << client.error().message();
    client_ = std::move(client).value();
  }
  void TearDown() override {
    loop_.reset();
    client_.reset();
    if (api_) api_->Stop();
  }

  RegisterLoop& MakeLoop(std::chrono::milliseconds period = std::chrono::hours(1),
                         Advertise advertise = Advertise::kOff) {
    RegisterLoopOptions o;
    o.advertise = advertise;
    o.node_name = node_;
    o.period = period;
    o.error_retry = std::chrono::milliseconds(10);
    o.devices = [this]() -> Result<std::vector<kube::NodeDevice>> {
      kube::NodeDevice d;
      d.id = "GPU-aaaa";
      d.count = 10;
      d.devmem_mib = 81559;
      d.devcore = 100;
      d.type = "NVIDIA H100 80GB HBM3";
      d.mode = "hami-core";
      d.health = healthy_.load();
      return std::vector<kube::NodeDevice>{d};
    };
    loop_ = std::make_unique<RegisterLoop>(*client_, o);
    return *loop_;
  }

  std::string Annotation() {
    auto node = api_->GetObject(kube::kNodes, "", "n1");
    if (!node.ok()) return "";
    const auto& a = (*node)["metadata"]["annotations"];
    auto it = a.find(std::string(kube::kNodeRegisterAnnotation));
    return it == a.end() ? "" : it->get<std::string>();
  }

  // The Node's status.<field> as the API server holds it.
  nlohmann::json Status(const char* field) {
    auto node = api_->GetObject(kube::kNodes, "", "n1");
    if (!node.ok()) return nullptr;
    return node->value("status", nlohmann::json::object()).value(field, nlohmann::json::object());
  }

  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<RegisterLoop> loop_;
  std::string node_ = "n1";
  std::atomic<bool> healthy_{true};
};

TEST_F(RegisterLoopTest, TheFirstCheckWritesTheAnnotationAndAnUnchangedOneWritesNothing) {
  RegisterLoop& loop = MakeLoop();
  loop.Start();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.checks >= 1; }, kBound));
  const std::string written = Annotation();
  EXPECT_EQ(written,
            "[{\"id\":\"GPU-aaaa\",\"count\":10,\"devmem\":81559,\"devcore\":100,"
            "\"type\":\"NVIDIA H100 80GB HBM3\",\"mode\":\"hami-core\",\"health\":true}]");
  EXPECT_EQ(loop.last_written(), written);
  const int64_t version = api_->resource_version();
  loop.Kick();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.checks >= 2; }, kBound));
  EXPECT_EQ(loop.stats().writes, 1u);
  EXPECT_EQ(loop.stats().errors, 0u);
  EXPECT_EQ(api_->resource_version(), version) << "nothing may be written when unchanged";
}

TEST_F(RegisterLoopTest, AHealthChangeIsWrittenWithinOneKick) {
  RegisterLoop& loop = MakeLoop();
  loop.Start();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.writes >= 1; }, kBound));
  healthy_ = false;
  loop.Kick();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.checks >= 2; }, kBound));
  EXPECT_EQ(loop.stats().writes, 2u);
  auto decoded = kube::DecodeNodeInventory(Annotation());
  ASSERT_TRUE(decoded.ok()) << decoded.error().message();
  ASSERT_EQ(decoded->size(), 1u);
  EXPECT_FALSE((*decoded)[0].health);
}

TEST_F(RegisterLoopTest, TheLoopChecksAgainEveryPeriod) {
  RegisterLoop& loop = MakeLoop(std::chrono::milliseconds(1));
  loop.Start();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.checks >= 5; }, kBound));
  EXPECT_EQ(loop.stats().writes, 1u);
}

TEST_F(RegisterLoopTest, AnApiErrorIsRetriedUntilTheWriteSucceeds) {
  sim::kube::Faults f;
  f.rate_500 = 1;
  api_->SetFaults(f);
  RegisterLoop& loop = MakeLoop();
  loop.Start();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.errors >= 2; }, kBound));
  EXPECT_EQ(loop.stats().writes, 0u);
  EXPECT_EQ(Annotation(), "");
  api_->SetFaults({});
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.writes >= 1; }, kBound));
  EXPECT_THAT(Annotation(), HasSubstr("GPU-aaaa"));
}

TEST_F(RegisterLoopTest, AMissingNodeIsAnErrorNamingIt) {
  node_ = "absent";
  RegisterLoop& loop = MakeLoop();
  auto r = loop.RunOnce();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(r.error().message(),
              HasSubstr("patching node absent's hami.io/node-nvidia-register"));
}

TEST_F(RegisterLoopTest, AdvertisingKeepsTheStatusResourcesInStepWithHealth) {
  RegisterLoop& loop = MakeLoop(std::chrono::hours(1), Advertise::kOn);
  ASSERT_TRUE(loop.RunOnce().ok());
  for (const char* field : {"capacity", "allocatable"}) {
    EXPECT_EQ(Status(field).value("nvidia.com/gpumem", ""), "81559") << field;
    EXPECT_EQ(Status(field).value("nvidia.com/gpucores", ""), "100") << field;
  }
  EXPECT_EQ(loop.stats().status_writes, 1u);

  const int64_t version = api_->resource_version();
  auto again = loop.RunOnce();
  ASSERT_TRUE(again.ok());
  EXPECT_FALSE(*again);
  EXPECT_EQ(api_->resource_version(), version) << "nothing may be written when unchanged";

  healthy_ = false;
  auto changed = loop.RunOnce();
  ASSERT_TRUE(changed.ok()) << changed.error().message();
  EXPECT_TRUE(*changed);
  for (const char* field : {"capacity", "allocatable"}) {
    EXPECT_EQ(Status(field).value("nvidia.com/gpumem", ""), "0") << field;
    EXPECT_EQ(Status(field).value("nvidia.com/gpucores", ""), "0") << field;
  }
  EXPECT_EQ(loop.stats().writes, 2u);
  EXPECT_EQ(loop.stats().status_writes, 2u);
}

TEST_F(RegisterLoopTest, OffRemovesWhatAnEarlierRunPublishedAndKeepsTheRest) {
  const nlohmann::json published = {
      {"cpu", "8"}, {"nvidia.com/gpumem", "81559"}, {"nvidia.com/gpucores", "100"}};
  ASSERT_TRUE(client_
                  ->Patch(kube::kNodes, "", "n1", kube::PatchType::kMerge,
                          {{"status", {{"capacity", published}, {"allocatable", published}}}},
                          "status")
                  .ok());
  RegisterLoop& loop = MakeLoop();
  auto r = loop.RunOnce();
  ASSERT_TRUE(r.ok()) << r.error().message();
  for (const char* field : {"capacity", "allocatable"}) {
    EXPECT_EQ(Status(field), (nlohmann::json{{"cpu", "8"}})) << field;
  }
  EXPECT_EQ(loop.stats().status_writes, 1u);
}

TEST_F(RegisterLoopTest, OffOnANodeThatNeverPublishedSendsNoStatusPatch) {
  RegisterLoop& loop = MakeLoop();
  ASSERT_TRUE(loop.RunOnce().ok());
  EXPECT_EQ(loop.stats().writes, 1u);
  EXPECT_EQ(loop.stats().status_writes, 0u);
  EXPECT_FALSE(Status("capacity").contains("nvidia.com/gpumem"));
}

TEST_F(RegisterLoopTest, AfterAFailedCheckTheNextOneWritesTheAnnotationThenTheStatus) {
  RegisterLoop& loop = MakeLoop(std::chrono::hours(1), Advertise::kOn);
  ASSERT_TRUE(loop.RunOnce().ok());
  healthy_ = false;
  sim::kube::Faults f;
  f.rate_500 = 1;
  api_->SetFaults(f);
  auto failed = loop.RunOnce();
  ASSERT_FALSE(failed.ok());
  EXPECT_THAT(failed.error().message(),
              HasSubstr("patching node n1's hami.io/node-nvidia-register"));
  api_->SetFaults({});
  // The annotation goes first; the status follows in the same check.
  auto retried = loop.RunOnce();
  ASSERT_TRUE(retried.ok()) << retried.error().message();
  EXPECT_EQ(Status("allocatable").value("nvidia.com/gpumem", ""), "0");
}

TEST_F(RegisterLoopTest, StopEndsAnIdleLoop) {
  RegisterLoop& loop = MakeLoop();
  loop.Start();
  ASSERT_TRUE(loop.WaitFor([](const Stats& s) { return s.checks >= 1; }, kBound));
  loop.Stop();  // the next check is an hour away
  loop.Stop();
  EXPECT_EQ(loop.stats().checks, 1u);
}

}  // namespace
}  // namespace hami::plugin
