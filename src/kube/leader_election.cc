#include "kube/leader_election.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <tuple>
#include <utility>

#include "kube/resource.h"
#include "kube/time.h"
#include "log/log.h"

namespace hami::kube {
namespace {

using SteadyClock = std::chrono::steady_clock;

// The spec fields of two records are the same: what "the record changed" compares.
bool SameRecord(const Lease& a, const Lease& b) {
  return std::tie(a.holder_identity, a.lease_duration_seconds, a.acquire_time, a.renew_time,
                  a.lease_transitions) == std::tie(b.holder_identity, b.lease_duration_seconds,
                                                   b.acquire_time, b.renew_time,
                                                   b.lease_transitions);
}

SteadyClock::duration JitteredRetry(std::chrono::milliseconds period) {
  thread_local std::mt19937_64 rng{std::random_device{}()};
  double f = std::uniform_real_distribution<double>(1.0, 1.2)(rng);
  return std::chrono::duration_cast<SteadyClock::duration>(period * f);
}

}  // namespace

std::string DefaultIdentity() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0 || host[0] == '\0') {
    std::snprintf(host, sizeof(host), "unknown");
  }
  return std::string(host) + "_" + std::to_string(getpid());
}

Result<std::unique_ptr<LeaderElector>> LeaderElector::Create(Client& client,
                                                             LeaderElectionConfig config) {
  auto invalid = [](std::string msg) {
    return Error(ErrorCode::kInvalidArgument, "leader election: " + msg);
  };
  if (config.lease_name.empty()) return invalid("lease_name is empty");
  if (config.lease_namespace.empty()) return invalid("lease_namespace is empty");
  if (config.identity.empty()) config.identity = DefaultIdentity();
  if (!config.on_started_leading) return invalid("on_started_leading is not set");
  if (config.retry_period.count() <= 0) return invalid("retry_period must be positive");
  if (config.lease_duration <= config.renew_deadline) {
    return invalid("lease_duration (" + std::to_string(config.lease_duration.count()) +
                   " ms) must be greater than renew_deadline (" +
                   std::to_string(config.renew_deadline.count()) + " ms)");
  }
  if (config.renew_deadline.count() * 10 <= config.retry_period.count() * 12) {
    return invalid("renew_deadline (" + std::to_string(config.renew_deadline.count()) +
                   " ms) must be greater than 1.2 * retry_period (" +
                   std::to_string(config.retry_period.count()) + " ms)");
  }
  return std::unique_ptr<LeaderElector>(new LeaderElector(client, std::move(config)));
}

LeaderElector::LeaderElector(Client& client, LeaderElectionConfig config)
    : client_(client), config_(std::move(config)) {}

LeaderElector::~LeaderElector() = default;

bool LeaderElector::IsLeader() const {
  std::lock_guard lock(mu_);
  return leading_;
}

std::string LeaderElector::leader() const {
  std::lock_guard lock(mu_);
  return leader_;
}

LeaderElector::Stats LeaderElector::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

Result<LeaderElector::Record> LeaderElector::ParseRecord(nlohmann::json object) {
  Result<Lease> lease = ParseLease(object);
  if (!lease.ok()) {
    HAMI_LOG(kWarn, "leader election: %s", lease.error().message().c_str());
    return std::move(lease).error();
  }
  return Record{std::move(lease).value(), std::move(object)};
}

LeaderElector::Attempt LeaderElector::Failed(const Error& error) {
  std::lock_guard lock(mu_);
  ++stats_.failures;
  if (error.code() == ErrorCode::kConflict) ++stats_.conflicts;
  return Attempt::kFailed;
}

void LeaderElector::Observe(const Lease& lease) {
  if (observed_.has_value() && SameRecord(*observed_, lease)) return;
  observed_ = lease;
  observed_at_ = SteadyClock::now();
  const std::string& holder = lease.holder_identity;
  {
    std::lock_guard lock(mu_);
    if (holder == leader_) return;
    leader_ = holder;
  }
  if (!holder.empty() && config_.on_new_leader) config_.on_new_leader(holder);
}

LeaderElector::Attempt LeaderElector::WriteRecord(Record current, bool create) {
  WallTime now = std::chrono::system_clock::now();
  Lease& lease = current.lease;
  if (!create && lease.holder_identity == config_.identity) {
    if (!lease.acquire_time) lease.acquire_time = now;
    lease.lease_transitions = lease.lease_transitions.value_or(0);
  } else {
    lease.acquire_time = now;
    lease.lease_transitions = create ? 0 : lease.lease_transitions.value_or(0) + 1;
  }
  lease.holder_identity = config_.identity;
  lease.lease_duration_seconds = int32_t((config_.lease_duration.count() + 999) / 1000);
  lease.renew_time = now;
  nlohmann::json object = LeaseToJson(lease, std::move(current.object));
  Result<nlohmann::json> written = create ? client_.Create(kLeases, config_.lease_namespace, object)
                                          : client_.Update(kLeases, object);
  if (!written.ok()) return Failed(written.error());
  Result<Record> record = ParseRecord(std::move(written).value());
  if (!record.ok()) return Failed(record.error());
  Observe(record->lease);
  held_ = std::move(record).value();
  return Attempt::kHolding;
}

LeaderElector::Attempt LeaderElector::TryAcquireOrRenew() {
  {
    std::lock_guard lock(mu_);
    ++stats_.attempts;
  }
  if (IsLeader() && held_.has_value()) {
    Attempt a = WriteRecord(*held_, false);
    if (a == Attempt::kHolding) return a;
    // Re-read below: a conflict means someone else wrote the Lease.
  }
  Result<nlohmann::json> got = client_.Get(kLeases, config_.lease_namespace, config_.lease_name);
  if (!got.ok()) {
    if (got.error().code() != ErrorCode::kNotFound) return Failed(got.error());
    Record fresh;
    fresh.lease.metadata.name = config_.lease_name;
    fresh.lease.metadata.ns = config_.lease_namespace;
    fresh.object = nlohmann::json::object();
    return WriteRecord(std::move(fresh), true);
  }
  Result<Record> current = ParseRecord(std::move(got).value());
  if (!current.ok()) return Failed(current.error());
  Observe(current->lease);
  const std::string& holder = current->lease.holder_identity;
  if (!holder.empty() && holder != config_.identity &&
      SteadyClock::now() < observed_at_ + config_.lease_duration) {
    return Attempt::kHeldByOther;
  }
  return WriteRecord(std::move(current).value(), false);
}

void LeaderElector::Lose() {
  {
    std::lock_guard lock(mu_);
    if (!leading_) return;
    leading_ = false;
    work_.request_stop();
  }
  cv_.notify_all();
  if (config_.on_stopped_leading) config_.on_stopped_leading();
}

void LeaderElector::Watchdog(std::stop_token stop) {
  std::unique_lock lock(mu_);
  while (!stop.stop_requested() && leading_) {
    SteadyClock::time_point deadline = renewed_at_ + config_.renew_deadline;
    if (SteadyClock::now() >= deadline) {
      lock.unlock();
      HAMI_LOG(kWarn, "lease %s/%s: no renewal within the renew deadline, %s stops leading",
               config_.lease_namespace.c_str(), config_.lease_name.c_str(),
               config_.identity.c_str());
      Lose();
      return;
    }
    cv_.wait_until(lock, stop, deadline, [] { return false; });
  }
}

bool LeaderElector::WaitFor(std::stop_token& stop, SteadyClock::duration d) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, stop, d, [] { return false; });
  return !stop.stop_requested();
}

void LeaderElector::Release() {
  for (int attempt = 0; attempt < 2 && held_.has_value(); ++attempt) {
    Lease lease = held_->lease;
    WallTime now = std::chrono::system_clock::now();
    lease.holder_identity.clear();
    lease.lease_duration_seconds = 1;
    lease.acquire_time = now;
    lease.renew_time = now;
    Result<nlohmann::json> written = client_.Update(kLeases, LeaseToJson(lease, held_->object));
    if (written.ok()) {
      if (Result<Record> released = ParseRecord(std::move(written).value()); released.ok()) {
        Observe(released->lease);
      }
      break;
    }
    if (written.error().code() != ErrorCode::kConflict) break;
    Result<nlohmann::json> got = client_.Get(kLeases, config_.lease_namespace, config_.lease_name);
    if (!got.ok()) break;
    Result<Record> current = ParseRecord(std::move(got).value());
    if (!current.ok() || current->lease.holder_identity != config_.identity) {
      break;  // someone else holds it already
    }
    held_ = std::move(current).value();
  }
  held_.reset();
}

void LeaderElector::Run(std::stop_token stop) {
  held_.reset();
  bool acquired = false;
  SteadyClock::time_point acquired_at;
  while (!stop.stop_requested()) {
    SteadyClock::time_point start = SteadyClock::now();
    Attempt a = TryAcquireOrRenew();
    if (a == Attempt::kHolding) {
      acquired = true;
      acquired_at = start;
      break;
    }
    SteadyClock::duration wait = JitteredRetry(config_.retry_period);
    if (a == Attempt::kHeldByOther) {  // try again as soon as the lease expires, if sooner
      SteadyClock::duration until_expiry =
          observed_at_ + config_.lease_duration - SteadyClock::now() + std::chrono::milliseconds(1);
      wait = std::min(wait, std::max(until_expiry, SteadyClock::duration::zero()));
    }
    if (!WaitFor(stop, wait)) break;
  }
  if (!acquired) return;

  {
    std::lock_guard lock(mu_);
    leading_ = true;
    renewed_at_ = acquired_at;
    ++stats_.acquisitions;
    work_ =
        std::jthread([this](std::stop_token work_stop) { config_.on_started_leading(work_stop); });
  }
  std::jthread watchdog([this](std::stop_token s) { Watchdog(s); });
  while (true) {
    {
      std::unique_lock lock(mu_);
      cv_.wait_for(lock, stop, config_.retry_period, [this] { return !leading_; });
      if (!leading_ || stop.stop_requested()) break;
    }
    SteadyClock::time_point start = SteadyClock::now();
    Attempt a = TryAcquireOrRenew();
    if (a == Attempt::kHeldByOther) break;
    std::lock_guard lock(mu_);
    if (!leading_) break;
    if (a == Attempt::kHolding) {
      ++stats_.renewals;
      if (start > renewed_at_) renewed_at_ = start;
    } else if (SteadyClock::now() - renewed_at_ >= config_.renew_deadline) {
      break;
    }
  }
  bool release = config_.release_on_cancel && stop.stop_requested() && IsLeader();
  Lose();
  watchdog.request_stop();
  watchdog.join();
  if (work_.joinable()) work_.join();
  if (release) Release();
}

}  // namespace hami::kube
