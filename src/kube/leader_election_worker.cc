// A leader-election candidate for leader_election_test.cc: campaigns for one Lease and reports
// on stdout, one line each: "leading" when it starts leading, "following <holder>" when
// another holder is seen, "stopped" when leadership ends, "exited" when Run returned.
// SIGTERM or SIGINT stops it (releasing the Lease with --release).
//
// leader_election_worker SERVER_URL LEASE_NAME IDENTITY LEASE_MS RENEW_MS RETRY_MS [--release]
#include <signal.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>

#include "kube/client.h"
#include "kube/leader_election.h"

namespace {

std::mutex g_out_mu;

void Say(const std::string& line) {
  std::lock_guard lock(g_out_mu);
  std::fputs((line + "\n").c_str(), stdout);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 7) {
    std::fprintf(
        stderr, "usage: %s SERVER_URL LEASE_NAME IDENTITY LEASE_MS RENEW_MS RETRY_MS [--release]\n",
        argv[0]);
    return 2;
  }
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  using std::chrono::milliseconds;
  hami::kube::Config config;
  config.server = argv[1];
  config.source = "leader_election_worker";
  hami::kube::ClientOptions client_options;
  client_options.qps = 0;
  client_options.max_retries = 0;  // the elector retries every retry period
  client_options.request_timeout = milliseconds(std::atol(argv[5]) / 2);
  client_options.connect_timeout = milliseconds(std::atol(argv[5]) / 2);
  auto client = hami::kube::Client::Create(config, client_options);
  if (!client.ok()) {
    std::fprintf(stderr, "%s\n", client.error().message().c_str());
    return 1;
  }

  hami::kube::LeaderElectionConfig le;
  le.lease_namespace = "default";
  le.lease_name = argv[2];
  le.identity = argv[3];
  le.lease_duration = milliseconds(std::atol(argv[4]));
  le.renew_deadline = milliseconds(std::atol(argv[5]));
  le.retry_period = milliseconds(std::atol(argv[6]));
  le.release_on_cancel = argc > 7 && std::string(argv[7]) == "--release";
  const std::string me = le.identity;
  le.on_started_leading = [](std::stop_token stop) {
    Say("leading");
    std::mutex mu;
    std::condition_variable_any cv;
    std::unique_lock lock(mu);
    cv.wait(lock, stop, [] { return false; });
  };
  le.on_stopped_leading = [] { Say("stopped"); };
  le.on_new_leader = [me](const std::string& holder) {
    if (holder != me) Say("following " + holder);
  };
  auto elector = hami::kube::LeaderElector::Create(**client, std::move(le));
  if (!elector.ok()) {
    std::fprintf(stderr, "%s\n", elector.error().message().c_str());
    return 1;
  }

  std::stop_source stop;
  std::thread waiter([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    stop.request_stop();
  });
  (*elector)->Run(stop.get_token());
  Say("exited");
  pthread_kill(waiter.native_handle(), SIGTERM);  // wakes the waiter if no signal came
  waiter.join();
  return 0;
}
