// ApiClaimSource against a bare HTTP server that answers as an API server serving
// resource.k8s.io/v1 does: the path it asks for, and the claim or the 404 it gets back
// (publisher_test.cc reads claims from the simulated API server).
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "dra/claim.h"
#include "kube/client.h"

namespace hami::dra {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

TEST(ApiClaimSource, ReadsTheClaimFromResourceK8sIoV1) {
  const json claim = {{"apiVersion", "resource.k8s.io/v1"},
                      {"kind", "ResourceClaim"},
                      {"metadata", {{"namespace", "ml"}, {"name", "c"}, {"uid", "u-1"}}},
                      {"status",
                       {{"allocation",
                         {{"devices",
                           {{"results",
                             {{{"request", "gpu"},
                               {"driver", kDriverName},
                               {"pool", "n1"},
                               {"device", "hami-gpu-0"}}}}}}}}}}};
  httplib::Server server;
  server.Get("/apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/c",
             [&](const httplib::Request&, httplib::Response& res) {
               res.set_content(claim.dump(), "application/json");
             });
  server.Get(".*", [](const httplib::Request& req, httplib::Response& res) {
    res.status = 404;
    res.set_content(json{{"kind", "Status"},
                         {"apiVersion", "v1"},
                         {"status", "Failure"},
                         {"reason", "NotFound"},
                         {"code", 404},
                         {"message", "not found: " + req.path}}
                        .dump(),
                    "application/json");
  });
  const int port = server.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { server.listen_after_bind(); });

  kube::Config config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  kube::ClientOptions options;
  options.max_retries = 0;
  auto client = kube::Client::Create(config, options);
  ASSERT_TRUE(client.ok()) << client.error().message();
  ApiClaimSource source(**client);

  auto got = source.Get({"ml", "u-1", "c"});
  ASSERT_TRUE(got.ok()) << got.error().message();
  EXPECT_EQ(*got, claim);
  auto allocation = ParseClaimAllocation(*got, {"ml", "u-1", "c"}, kDriverName);
  ASSERT_TRUE(allocation.ok()) << allocation.error().message();
  EXPECT_EQ(allocation->size(), 1u);

  auto gone = source.Get({"ml", "u-2", "gone"});
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.error().code(), ErrorCode::kNotFound);
  EXPECT_THAT(gone.error().message(), HasSubstr("claim ml/gone (uid u-2)"));

  client->reset();  // closes its kept-alive connection, so that the server stops at once
  server.stop();
  serving.join();
}

}  // namespace
}  // namespace hami::dra
