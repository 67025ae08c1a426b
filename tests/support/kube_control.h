// Test support shared by kube_control_test's files (informer, leader election and event recorder
// tests): a simulated API server, a client of it, bounded polling and readable durations.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "kube/client.h"
#include "kube/config.h"
#include "sim/kube/api_server.h"
#include "support/subprocess.h"

namespace hami::kube::control_test {

// Milliseconds, for comparisons that print readably when they fail.
inline int64_t Ms(std::chrono::nanoseconds d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// A started simulated API server, or nullptr after recording the failure.
inline std::unique_ptr<sim::kube::ApiServer> StartServer(
    const sim::kube::ApiServerOptions& options = {}) {
  auto server = sim::kube::ApiServer::Start(options);
  if (!server.ok()) {
    ADD_FAILURE() << server.error().message();
    return nullptr;
  }
  return std::move(server).value();
}

// A client of `url` with `options`, or nullptr after recording the failure. `source` names the
// test in the client's errors.
inline std::unique_ptr<Client> ConnectTo(const std::string& url, const std::string& source,
                                         const ClientOptions& options) {
  Config config;
  config.server = url;
  config.source = source;
  auto client = Client::Create(config, options);
  if (!client.ok()) {
    ADD_FAILURE() << client.error().message();
    return nullptr;
  }
  return std::move(client).value();
}

// Polls `pred` until it holds (true) or `timeout` passes (false): testing::PollUntil, every
// 5 ms. Only for counters no event announces (a server's, an informer's or an elector's
// stats); the timeout bounds a failure, it is not a wait for time to pass.
inline bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout) {
  return ::hami::testing::PollUntil(pred, static_cast<int>(timeout.count()), 5000);
}

}  // namespace hami::kube::control_test
