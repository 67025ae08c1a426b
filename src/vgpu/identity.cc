#include "vgpu/identity.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>

#include "common/clock.h"
#include "limits/vocabulary.h"
#include "region/region.h"

namespace hami::vgpu {
namespace {

using region::IdentitySource;
using region::IdentityTier;

// Set while this thread runs an attempt: the probe's own driver calls must not start another.
constinit thread_local bool t_resolving = false;

bool Enabled(const Config& c, IdentityTier tier) {
  return (c.identity_tiers & (1u << unsigned(tier))) != 0;
}

// "broker missing, probe lock-timeout" (tiers that were off or answered are left out); false
// when none is left.
bool DescribeReasons(const std::array<IdentityReason, region::kIdentityTiers>& reasons, char* out,
                     size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int t = 0; t < region::kIdentityTiers; ++t) {
    const IdentityReason r = reasons[size_t(t)];
    if (r == IdentityReason::kNone || r == IdentityReason::kDisabled) continue;
    int n = std::snprintf(out + used, size - used, "%s%s %s", used == 0 ? "" : ", ",
                          region::IdentityTierName(IdentityTier(t)), region::IdentityReasonName(r));
    if (n < 0 || size_t(n) >= size - used) break;
    used += size_t(n);
  }
  return used != 0;
}

void Attempt(Runtime& rt, region::Region* reg, bool cuda_ready, IdentityClock now_ns)
    REQUIRES(rt.identity_mu) {
  const Config& c = rt.config;
  const int64_t start = now_ns();
  std::array<IdentityReason, region::kIdentityTiers> reasons;
  reasons.fill(IdentityReason::kDisabled);
  TierOutcome found;
  IdentitySource source = IdentitySource::kUnknown;
  auto run = [&](IdentityTier tier, IdentitySource src, auto&& tier_fn) {
    if (found.host_pid > 0) {
      reasons[size_t(tier)] = IdentityReason::kNone;  // not reached
      return;
    }
    TierOutcome o = tier_fn();
    reasons[size_t(tier)] = o.reason;
    if (o.reason == IdentityReason::kNone && o.host_pid > 0) {
      found = o;
      source = src;
    }
  };
  if (Enabled(c, IdentityTier::kBroker) && c.hostpid_broker) {
    run(IdentityTier::kBroker, IdentitySource::kBroker, [&rt] { return BrokerTier(rt); });
  }
  if (Enabled(c, IdentityTier::kProcfs) && !c.host_procfs.empty()) {
    run(IdentityTier::kProcfs, IdentitySource::kProcfs,
        [&c] { return ProcfsTier(c.host_procfs.c_str()); });
  }
  if (Enabled(c, IdentityTier::kNamespace)) {
    run(IdentityTier::kNamespace, IdentitySource::kSameNamespace, [] { return NamespaceTier(); });
  }
  bool awaiting_cuda = false;
  if (Enabled(c, IdentityTier::kProbe)) {
    if (found.host_pid > 0) {
      reasons[size_t(IdentityTier::kProbe)] = IdentityReason::kNone;
    } else if (!cuda_ready) {
      reasons[size_t(IdentityTier::kProbe)] = IdentityReason::kNoDriver;
      awaiting_cuda = true;
    } else {
      run(IdentityTier::kProbe, IdentitySource::kNvmlProbe, [&rt, &c] { return ProbeTier(rt, c); });
    }
  }
  const int64_t duration = now_ns() - start;

  char why[256];
  if (found.host_pid > 0) {
    reg->RecordIdentity(found.host_pid, source, reasons, duration);
    rt.identity_state.store(int(IdentityState::kResolved), std::memory_order_release);
    if (!rt.identity_logged || rt.identity_backoff_ns != 0) {
      const bool earlier_failed = DescribeReasons(reasons, why, sizeof(why));
      g_log.Log(LogLevel::kInfo, "host PID %d (pid %d here) from the %s tier in %.3f ms%s%s%s",
                int(found.host_pid), int(getpid()), region::IdentitySourceName(source),
                double(duration) / 1e6, earlier_failed ? " (before it: " : "",
                earlier_failed ? why : "", earlier_failed ? ")" : "");
    }
    rt.identity_logged = true;
    rt.identity_backoff_ns = 0;
    return;
  }
  if (awaiting_cuda) {
    // Not a failure yet: the probe runs once CUDA is initialized.
    reg->RecordIdentity(0, IdentitySource::kUnknown, reasons, duration);
    rt.identity_state.store(int(IdentityState::kAwaitingCuda), std::memory_order_release);
    return;
  }
  reg->RecordIdentity(0, IdentitySource::kFailed, reasons, duration);
  if (c.identity_tiers == 0) {
    rt.identity_state.store(int(IdentityState::kOff), std::memory_order_release);
    g_log.Log(LogLevel::kInfo,
              "host PID not looked up (%s=none); memory limits are enforced as always",
              limits::KeyName(limits::Key::kIdentityTiers));
    return;
  }
  rt.identity_backoff_ns = NextIdentityBackoffNs(rt.identity_backoff_ns);
  rt.identity_retry_ns.store(now_ns() + rt.identity_backoff_ns, std::memory_order_relaxed);
  rt.identity_state.store(int(IdentityState::kRetryLater), std::memory_order_release);
  if (!rt.identity_logged) {
    if (!DescribeReasons(reasons, why, sizeof(why))) {
      std::snprintf(why, sizeof(why), "no enabled tier applies here");
    }
    g_log.Log(LogLevel::kWarn,
              "host PID unknown (%s); memory limits stay enforced, and the lookup is retried "
              "with backoff (1 s doubling to 60 s)",
              why);
    rt.identity_logged = true;
  }
}

}  // namespace

void BeginIdentity(Runtime& rt) {
  EnsureConfigured(rt);
  const Config& c = rt.config;
  if (!c.hostpid_broker || !Enabled(c, IdentityTier::kBroker) ||
      rt.identity_state.load(std::memory_order_acquire) != int(IdentityState::kNotStarted)) {
    return;
  }
  if (!rt.identity_mu.TryLock()) return;  // an attempt is under way
  if (!rt.broker_query_started) {
    rt.broker_query = broker::BeginQuery(broker::ClientOptions{});
    rt.broker_query_started = true;
  }
  rt.identity_mu.Unlock();
}

void ResolveIdentity(Runtime& rt, bool cuda_ready, IdentityClock now_ns) {
  if (t_resolving) return;
  const int settled = rt.identity_state.load(std::memory_order_acquire);
  if (settled == int(IdentityState::kResolved) || settled == int(IdentityState::kOff)) return;
  region::Region* reg = ViewRegion(rt);
  if (reg == nullptr || reg->slot() < 0) return;
  // Others do not wait: identity_mu is only ever tried, so holding it across the tiers (the
  // broker's socket, the probe's driver calls) blocks no thread.
  if (!rt.identity_mu.TryLock()) return;  // another thread is on it
  const int state = rt.identity_state.load(std::memory_order_acquire);
  const bool due = state != int(IdentityState::kResolved) && state != int(IdentityState::kOff) &&
                   !(state == int(IdentityState::kAwaitingCuda) && !cuda_ready) &&
                   !(state == int(IdentityState::kRetryLater) &&
                     now_ns() < rt.identity_retry_ns.load(std::memory_order_relaxed));
  if (due) {
    t_resolving = true;
    Attempt(rt, reg, cuda_ready, now_ns);
    t_resolving = false;
  }
  rt.identity_mu.Unlock();
}

void RetryIdentitySlow(Runtime& rt, IdentityClock now_ns) {
  if (now_ns() < rt.identity_retry_ns.load(std::memory_order_relaxed)) return;
  ResolveIdentity(rt, rt.cuda_initialized.load(std::memory_order_acquire), now_ns);
}

}  // namespace hami::vgpu
