// Test helpers for the simulated API server's tests: a started server and a plain HTTP client
// for it, replies decoded as JSON, and checks of a Status body. Header-only, tests only.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "sim/kube/api_server.h"

namespace hami::sim::kube::testing {

struct Reply {
  int status = -1;
  std::string text;
  nlohmann::json body;
  std::string content_type;
};

inline Reply FromResult(const httplib::Result& r) {
  Reply out;
  if (!r) {
    out.text = "transport error " + httplib::to_string(r.error());
    return out;
  }
  out.status = r->status;
  out.text = r->body;
  out.content_type = r->get_header_value("Content-Type");
  out.body = nlohmann::json::parse(r->body, nullptr, false);
  return out;
}

// A server started with `options` and a client that names itself `user_agent`.
class ServerFixture : public ::testing::Test {
 protected:
  void Start(ApiServerOptions options = {}, const std::string& user_agent = "hami-test/1.0") {
    client_.reset();
    server_.reset();
    auto s = ApiServer::Start(options);
    ASSERT_TRUE(s.ok()) << s.error().message();
    server_ = std::move(*s);
    client_ = std::make_unique<httplib::Client>("127.0.0.1", server_->port());
    client_->set_read_timeout(30, 0);
    client_->set_default_headers({{"User-Agent", user_agent}});
  }

  Reply Get(const std::string& path) { return FromResult(client_->Get(path)); }
  Reply Post(const std::string& path, const nlohmann::json& body) {
    return FromResult(client_->Post(path, body.dump(), "application/json"));
  }
  Reply Put(const std::string& path, const nlohmann::json& body) {
    return FromResult(client_->Put(path, body.dump(), "application/json"));
  }
  Reply Patch(const std::string& path, const nlohmann::json& body,
              const std::string& type = "application/merge-patch+json") {
    return FromResult(client_->Patch(path, body.dump(), type));
  }
  Reply Delete(const std::string& path) { return FromResult(client_->Delete(path)); }

  std::unique_ptr<ApiServer> server_;
  std::unique_ptr<httplib::Client> client_;
};

// The reply is a Status with this code and reason whose message contains `message_part`.
inline void ExpectStatus(const Reply& r, int code, const std::string& reason,
                         const std::string& message_part = "") {
  EXPECT_EQ(r.status, code) << r.text;
  EXPECT_EQ(r.body.value("kind", ""), "Status") << r.text;
  EXPECT_EQ(r.body.value("reason", ""), reason) << r.text;
  EXPECT_EQ(r.body.value("code", 0), code) << r.text;
  EXPECT_NE(r.body.value("message", "").find(message_part), std::string::npos)
      << "message lacks '" << message_part << "': " << r.text;
}

}  // namespace hami::sim::kube::testing
