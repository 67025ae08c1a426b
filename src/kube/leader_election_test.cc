#include "kube/leader_election.h"

#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "kube/client.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "sim/kube/api_server.h"
#include "support/kube_control.h"
#include "support/subprocess.h"

namespace hami::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using sim::kube::ApiServer;
using sim::kube::Faults;
using SteadyClock = std::chrono::steady_clock;
using control_test::Ms;
using control_test::StartServer;
using control_test::WaitUntil;
using std::chrono::milliseconds;

// Short timings, in the proportions of client-go's defaults.
constexpr milliseconds kLease{1500};
constexpr milliseconds kRenew{1000};
constexpr milliseconds kRetry{200};

std::unique_ptr<Client> Connect(const ApiServer& server,
                                milliseconds request_timeout = kRenew / 2) {
  ClientOptions options;
  options.qps = 0;
  options.max_retries = 0;
  options.request_timeout = request_timeout;
  options.connect_timeout = kRenew / 2;
  return control_test::ConnectTo(server.url(), "leader_election_test", options);
}

json LeaseSpec(const ApiServer& server, const std::string& name) {
  auto lease = server.GetObject(kLeases, "default", name);
  EXPECT_TRUE(lease.ok()) << lease.error().message();
  return lease.ok() ? (*lease)["spec"] : json();
}

// The first "leading" or "following <holder>" line of a worker.
std::optional<std::string> NextStatusLine(testing::Subprocess& worker, int timeout_ms) {
  auto deadline = SteadyClock::now() + milliseconds(timeout_ms);
  while (true) {
    int left = int(std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now()).count());
    if (left <= 0) return std::nullopt;
    auto line = worker.ReadLine(left);
    if (!line) return std::nullopt;
    if (*line == "leading" || line->rfind("following ", 0) == 0) return line;
  }
}

std::unique_ptr<testing::Subprocess> Worker(const ApiServer& server, const std::string& lease,
                                            const std::string& identity) {
  return std::make_unique<testing::Subprocess>(
      std::vector<std::string>{testing::TestProgram("leader_election_worker"), server.url(), lease,
                               identity, std::to_string(kLease.count()),
                               std::to_string(kRenew.count()), std::to_string(kRetry.count())},
      std::map<std::string, std::string>{});
}

// An in-process candidate whose leader work records when its stop was requested.
struct Candidate {
  std::mutex mu;
  std::condition_variable cv;
  bool leading = false;
  bool stopped = false;                // on_stopped_leading ran
  bool stop_seen_in_callback = false;  // the work's stop token was requested by then
  SteadyClock::time_point work_stopped_at;
  std::atomic<bool> work_stop_requested{false};
  std::unique_ptr<LeaderElector> elector;
  std::jthread runner;
  std::atomic<bool> run_returned{false};

  LeaderElectionConfig Config(const std::string& identity) {
    LeaderElectionConfig c;
    c.lease_namespace = "default";
    c.lease_name = "lock";
    c.identity = identity;
    c.lease_duration = kLease;
    c.renew_deadline = kRenew;
    c.retry_period = kRetry;
    c.on_started_leading = [this](std::stop_token stop) {
      {
        std::lock_guard lock(mu);
        leading = true;
      }
      cv.notify_all();
      std::stop_callback on_stop(stop, [this] {
        std::lock_guard lock(mu);
        work_stopped_at = SteadyClock::now();
        work_stop_requested = true;
      });
      std::unique_lock lock(mu);
      std::condition_variable_any any;
      any.wait(lock, stop, [] { return false; });
    };
    c.on_stopped_leading = [this] {
      std::lock_guard lock(mu);
      stopped = true;
      stop_seen_in_callback = work_stop_requested.load();
      cv.notify_all();
    };
    return c;
  }

  void Start(Client& client, LeaderElectionConfig config) {
    auto e = LeaderElector::Create(client, std::move(config));
    ASSERT_TRUE(e.ok()) << e.error().message();
    elector = std::move(e).value();
    runner = std::jthread([this](std::stop_token stop) {
      elector->Run(stop);
      run_returned = true;
      cv.notify_all();
    });
  }

  bool WaitLeading(milliseconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [this] { return leading; });
  }
  bool WaitStopped(milliseconds timeout) {
    std::unique_lock lock(mu);
    return cv.wait_for(lock, timeout, [this] { return stopped; });
  }
};

TEST(LeaderElection, ExactlyOneOfTwoProcessesLeadsAndKillingItHandsOverWithinTheLease) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto a = Worker(*server, "lock", "worker-a");
  auto b = Worker(*server, "lock", "worker-b");
  auto status_a = NextStatusLine(*a, 10000);
  auto status_b = NextStatusLine(*b, 10000);
  ASSERT_TRUE(status_a && status_b);
  ASSERT_NE(*status_a == "leading", *status_b == "leading") << *status_a << " / " << *status_b;
  bool a_leads = *status_a == "leading";
  testing::Subprocess& leader = a_leads ? *a : *b;
  testing::Subprocess& follower = a_leads ? *b : *a;
  std::string leader_id = a_leads ? "worker-a" : "worker-b";
  std::string follower_id = a_leads ? "worker-b" : "worker-a";
  EXPECT_EQ(a_leads ? *status_b : *status_a, "following " + leader_id);
  EXPECT_EQ(LeaseSpec(*server, "lock").value("holderIdentity", ""), leader_id);

  // The follower keeps following while the leader renews: a few lease durations pass without
  // it printing anything else.
  EXPECT_FALSE(NextStatusLine(follower, int(2 * kLease.count())).has_value());

  leader.Kill(SIGKILL);
  auto killed_at = SteadyClock::now();
  EXPECT_EQ(leader.Wait(5000), 128 + SIGKILL);
  auto taken = NextStatusLine(follower, 10000);
  auto elapsed = SteadyClock::now() - killed_at;
  ASSERT_TRUE(taken.has_value());
  EXPECT_EQ(*taken, "leading");
  // Expiry is measured from when the follower last saw the record change (up to 1.2 retry
  // periods after the leader's last renewal); it tries again the moment that expires. The
  // margin covers that, the requests and scheduling.
  RecordProperty("takeover_ms", std::to_string(Ms(elapsed)));
  EXPECT_LE(Ms(elapsed), Ms(kLease + 3 * kRetry));
  EXPECT_GE(Ms(elapsed), Ms(kLease - 2 * kRetry));  // it did not take a lease that was still valid
  json spec = LeaseSpec(*server, "lock");
  EXPECT_EQ(spec.value("holderIdentity", ""), follower_id);
  EXPECT_EQ(spec.value("leaseTransitions", -1), 1);
}

// Leads, waits for one renewal (the steady state), injects `faults`, and returns how long the
// leader work ran on before its stop was requested.
milliseconds LeadThenFail(Client& client, ApiServer& server, const Faults& faults) {
  Candidate c;
  c.Start(client, c.Config("solo"));
  EXPECT_TRUE(c.WaitLeading(5s));
  uint64_t renewals = c.elector->stats().renewals;
  EXPECT_TRUE(WaitUntil([&] { return c.elector->stats().renewals > renewals; }, 5s));

  server.SetFaults(faults);
  auto failing_from = SteadyClock::now();
  EXPECT_TRUE(c.WaitStopped(5s));
  SteadyClock::time_point stopped_at;
  {
    std::lock_guard lock(c.mu);
    EXPECT_TRUE(c.stop_seen_in_callback);  // the work was told to stop before the callback
    stopped_at = c.work_stopped_at;
  }
  EXPECT_FALSE(c.elector->IsLeader());
  std::unique_lock lock(c.mu);
  EXPECT_TRUE(c.cv.wait_for(lock, 10s, [&] { return c.run_returned.load(); }));
  return std::chrono::duration_cast<milliseconds>(stopped_at - failing_from);
}

TEST(LeaderElection, LeaderWhoseRenewalsFailStopsLeadingWithinTheRenewDeadline) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Faults faults;
  faults.rate_500 = 1.0;
  milliseconds elapsed = LeadThenFail(*client, *server, faults);
  RecordProperty("stop_after_failures_ms", std::to_string(elapsed.count()));
  EXPECT_LE(Ms(elapsed), Ms(kRenew + kRetry));      // the deadline, and a margin for scheduling
  EXPECT_GE(Ms(elapsed), Ms(kRenew - 2 * kRetry));  // it kept leading while the deadline allowed
}

TEST(LeaderElection, LeaderWhoseRenewalHangsStopsLeadingAtTheRenewDeadlineWithoutWaitingForIt) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server, 10s);  // the request outlasts the renew deadline
  ASSERT_TRUE(client);
  Faults faults;
  faults.latency = 3 * kRenew;
  milliseconds elapsed = LeadThenFail(*client, *server, faults);
  RecordProperty("stop_after_hang_ms", std::to_string(elapsed.count()));
  EXPECT_LE(Ms(elapsed), Ms(kRenew + kRetry));
  EXPECT_GE(Ms(elapsed), Ms(kRenew - 2 * kRetry));
}

TEST(LeaderElection, LeaderThatFindsAnotherHolderInTheLeaseStopsAtItsNextRenewal) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Candidate c;
  c.Start(*client, c.Config("solo"));
  ASSERT_TRUE(c.WaitLeading(5s));
  bool written = false;
  for (int attempt = 0; attempt < 20 && !written; ++attempt) {  // races with the renewals
    auto lease = client->Get(kLeases, "default", "lock");
    ASSERT_TRUE(lease.ok()) << lease.error().message();
    (*lease)["spec"]["holderIdentity"] = "intruder";
    written = client->Update(kLeases, *lease).ok();
  }
  ASSERT_TRUE(written);
  auto written_at = SteadyClock::now();
  ASSERT_TRUE(c.WaitStopped(5s));
  EXPECT_LT(Ms(SteadyClock::now() - written_at), Ms(kRenew - kRetry));  // not the deadline
  EXPECT_EQ(c.elector->leader(), "intruder");
  EXPECT_FALSE(c.elector->IsLeader());
}

TEST(LeaderElection, LeaseRecordCarriesHolderTimesAndTransitionsAndReleaseHandsOverAtOnce) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Candidate first;
  LeaderElectionConfig config = first.Config("first");
  config.release_on_cancel = true;
  first.Start(*client, std::move(config));
  ASSERT_TRUE(first.WaitLeading(5s));
  json spec = LeaseSpec(*server, "lock");
  EXPECT_EQ(spec.value("holderIdentity", ""), "first");
  EXPECT_EQ(spec.value("leaseDurationSeconds", 0), 2);  // 1.5 s, rounded up
  EXPECT_EQ(spec.value("leaseTransitions", -1), 0);
  for (const char* field : {"acquireTime", "renewTime"}) {
    std::string text = spec.value(field, "");
    EXPECT_TRUE(ParseTime(text).ok()) << field << "=" << text;
    EXPECT_EQ(text.size(), std::string("2026-01-01T00:00:00.000000Z").size()) << text;
  }
  EXPECT_EQ(first.elector->leader(), "first");

  std::mutex mu;
  std::condition_variable cv;
  std::string seen_leader;
  Candidate second;
  LeaderElectionConfig second_config = second.Config("second");
  second_config.on_new_leader = [&](const std::string& id) {
    std::lock_guard lock(mu);
    seen_leader = id;
    cv.notify_all();
  };
  second.Start(*client, std::move(second_config));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, 5s, [&] { return seen_leader == "first"; }));
  }
  EXPECT_FALSE(second.elector->IsLeader());

  auto released_at = SteadyClock::now();
  first.runner.request_stop();
  first.runner.join();
  EXPECT_TRUE(first.stopped);
  EXPECT_NE(LeaseSpec(*server, "lock").value("holderIdentity", ""), "first");  // released
  ASSERT_TRUE(second.WaitLeading(5s));
  EXPECT_LT(Ms(SteadyClock::now() - released_at), Ms(kLease - kRetry));  // no wait for expiry
  spec = LeaseSpec(*server, "lock");
  EXPECT_EQ(spec.value("holderIdentity", ""), "second");
  EXPECT_EQ(spec.value("leaseTransitions", -1), 1);
  {
    std::unique_lock lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 5s, [&] { return seen_leader == "second"; }));
  }
}

TEST(LeaderElection, TakeoverKeepsTheFieldsOfTheLeaseTheElectorDoesNotWrite) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  json lease = {{"apiVersion", "coordination.k8s.io/v1"},
                {"kind", "Lease"},
                {"metadata",
                 {{"name", "lock"},
                  {"namespace", "default"},
                  {"labels", {{"app", "hami"}}},
                  {"annotations", {{"note", "kept"}}}}},
                {"spec", {{"leaseTransitions", 4}, {"preferredHolder", "someone"}}}};
  ASSERT_TRUE(server->CreateObject(kLeases, lease).ok());
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Candidate c;
  c.Start(*client, c.Config("solo"));
  ASSERT_TRUE(c.WaitLeading(5s));
  auto stored = server->GetObject(kLeases, "default", "lock");
  ASSERT_TRUE(stored.ok()) << stored.error().message();
  EXPECT_EQ((*stored)["metadata"]["labels"], lease["metadata"]["labels"]);
  EXPECT_EQ((*stored)["metadata"]["annotations"], lease["metadata"]["annotations"]);
  EXPECT_EQ((*stored)["spec"].value("preferredHolder", ""), "someone");
  EXPECT_EQ((*stored)["spec"].value("holderIdentity", ""), "solo");
  EXPECT_EQ((*stored)["spec"].value("leaseTransitions", -1), 5);  // a takeover of a released one
}

TEST(LeaderElection, ALeaseThatDoesNotParseCountsAsAFailedReadAndIsNeverTaken) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  json garbled = {{"apiVersion", "coordination.k8s.io/v1"},
                  {"kind", "Lease"},
                  {"metadata", {{"name", "lock"}, {"namespace", "default"}}},
                  {"spec", {{"holderIdentity", "other"}, {"leaseTransitions", "many"}}}};
  ASSERT_TRUE(server->CreateObject(kLeases, garbled).ok());
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Candidate c;
  c.Start(*client, c.Config("solo"));
  // Read every retry period, refused each time.
  EXPECT_TRUE(WaitUntil([&] { return c.elector->stats().failures >= 3; }, 5s));
  EXPECT_FALSE(c.elector->IsLeader());
  EXPECT_EQ(c.elector->leader(), "");  // never observed
  EXPECT_EQ(LeaseSpec(*server, "lock"), garbled["spec"]);

  ASSERT_TRUE(server->DeleteObject(kLeases, "default", "lock").ok());
  ASSERT_TRUE(c.WaitLeading(5s));  // the next read finds none and creates it
  EXPECT_EQ(LeaseSpec(*server, "lock").value("holderIdentity", ""), "solo");
}

TEST(LeaderElection, StopWhileFollowingReturnsPromptly) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Candidate leader;
  leader.Start(*client, leader.Config("leader"));
  ASSERT_TRUE(leader.WaitLeading(5s));
  Candidate follower;
  LeaderElectionConfig config = follower.Config("follower");
  config.retry_period = 400ms;  // a longer wait to interrupt
  follower.Start(*client, std::move(config));
  ASSERT_TRUE(WaitUntil([&] { return follower.elector->leader() == "leader"; }, 5s));
  auto start = SteadyClock::now();
  follower.runner.request_stop();
  follower.runner.join();
  EXPECT_LT(Ms(SteadyClock::now() - start), Ms(300ms));
  EXPECT_FALSE(follower.leading);
  EXPECT_TRUE(leader.elector->IsLeader());
}

TEST(LeaderElection, CreateRejectsTimingsThatCouldLetTwoLeadersOverlap) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  LeaderElectionConfig config;
  config.lease_name = "lock";
  config.on_started_leading = [](std::stop_token) {};
  config.lease_duration = 10s;
  config.renew_deadline = 10s;
  auto e = LeaderElector::Create(*client, config);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(e.error().message().find("renew_deadline"), std::string::npos) << e.error().message();

  config.renew_deadline = 2s;
  config.retry_period = 2s;
  e = LeaderElector::Create(*client, config);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("retry_period"), std::string::npos) << e.error().message();

  config.retry_period = 1s;
  config.lease_name.clear();
  e = LeaderElector::Create(*client, config);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("lease_name"), std::string::npos) << e.error().message();

  config.lease_name = "lock";
  e = LeaderElector::Create(*client, config);
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ((*e)->identity(), DefaultIdentity());  // "<hostname>_<pid>"
  EXPECT_NE((*e)->identity().find('_'), std::string::npos);
}

}  // namespace
}  // namespace hami::kube
