#include "plugin/register_loop.h"

#include <utility>

#include "common/quote.h"
#include "kube/resource.h"
#include "log/log.h"

namespace hami::plugin {

RegisterLoop::RegisterLoop(kube::Client& client, RegisterLoopOptions options)
    : client_(client), options_(std::move(options)) {}

RegisterLoop::~RegisterLoop() { Stop(); }

void RegisterLoop::Start() {
  if (thread_.joinable()) return;
  thread_ = std::jthread([this](std::stop_token stop) { Run(stop); });
}

void RegisterLoop::Stop() {
  if (!thread_.joinable()) return;
  thread_.request_stop();
  cv_.notify_all();
  thread_.join();
}

void RegisterLoop::Kick() {
  {
    std::lock_guard<std::mutex> l(mu_);
    kicked_ = true;
  }
  cv_.notify_all();
}

Result<bool> RegisterLoop::RunOnce() {
  const std::string what =
      "node " + options_.node_name + "'s " + std::string(kube::kNodeRegisterAnnotation);
  if (!options_.devices) {
    return Error(ErrorCode::kInvalidArgument, what + ": no devices function");
  }
  auto devices = options_.devices();
  if (!devices.ok()) {
    return Error(devices.error().code(), "computing " + what + ": " + devices.error().message());
  }
  const std::string value = kube::EncodeNodeInventory(*devices);
  bool wrote = false;
  nlohmann::json node;
  {
    std::lock_guard<std::mutex> l(mu_);
    node = value == last_written_ ? node_ : nlohmann::json();
  }
  if (node.is_null()) {
    const nlohmann::json patch = {
        {"metadata", {{"annotations", {{std::string(kube::kNodeRegisterAnnotation), value}}}}}};
    auto r = client_.Patch(kube::kNodes, "", options_.node_name, kube::PatchType::kMerge, patch);
    if (!r.ok()) return Error(r.error().code(), "patching " + what + ": " + r.error().message());
    node = std::move(r).value();
    std::lock_guard<std::mutex> l(mu_);
    last_written_ = value;
    node_ = node;
    stats_.writes += 1;
    wrote = true;
    HAMI_LOG(kInfo, "event=node_registered node=%s annotation=%s", options_.node_name.c_str(),
             std::string(kube::kNodeRegisterAnnotation).c_str());
  }
  const NodeResourceNames& names = options_.resource_names;
  auto status = NodeResourcesPatch(node, *devices, names, options_.advertise);
  if (!status) return wrote;
  auto r = client_.Patch(kube::kNodes, "", options_.node_name, kube::PatchType::kMerge, *status,
                         "status");
  if (!r.ok()) {
    return Error(r.error().code(), "patching node " + options_.node_name + "'s status (" +
                                       names.memory + ", " + names.cores +
                                       "): " + r.error().message());
  }
  const NodeResourceAmounts amounts = AmountsOf(*devices);
  {
    std::lock_guard<std::mutex> l(mu_);
    node_ = std::move(r).value();
    stats_.status_writes += 1;
  }
  if (options_.advertise == Advertise::kOn) {
    HAMI_LOG(kInfo, "event=node_resources_published node=%s %s=%lld %s=%lld",
             options_.node_name.c_str(), names.memory.c_str(),
             static_cast<long long>(amounts.memory_mib), names.cores.c_str(),
             static_cast<long long>(amounts.cores));
  } else {
    HAMI_LOG(kInfo, "event=node_resources_removed node=%s resources=%s,%s",
             options_.node_name.c_str(), names.memory.c_str(), names.cores.c_str());
  }
  return true;
}

void RegisterLoop::Run(std::stop_token stop) {
  auto next = std::chrono::steady_clock::now();
  while (!stop.stop_requested()) {
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_.wait_until(l, stop, next, [&] { return kicked_; });
      if (stop.stop_requested()) return;
      kicked_ = false;
    }
    Result<bool> r = RunOnce();
    if (!r.ok()) {
      HAMI_LOG(kWarn, "event=node_register_failed node=%s retry_ms=%lld error=%s",
               options_.node_name.c_str(), static_cast<long long>(options_.error_retry.count()),
               QuoteInput(r.error().message(), 300).c_str());
    }
    next = std::chrono::steady_clock::now() + (r.ok() ? options_.period : options_.error_retry);
    {
      std::lock_guard<std::mutex> l(mu_);
      stats_.checks += 1;
      if (!r.ok()) stats_.errors += 1;
    }
    cv_.notify_all();
  }
}

RegisterLoop::Stats RegisterLoop::stats() const {
  std::lock_guard<std::mutex> l(mu_);
  return stats_;
}

std::string RegisterLoop::last_written() const {
  std::lock_guard<std::mutex> l(mu_);
  return last_written_;
}

bool RegisterLoop::WaitFor(const std::function<bool(const Stats&)>& done,
                           std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return done(stats_); });
}

}  // namespace hami::plugin
