// hami sim kube-scheduler: the kube-scheduler stand-in (src/sim/kube/scheduler_standin.h) as a
// command, scheduling pending pods through the extenders of a KubeSchedulerConfiguration until
// SIGINT or SIGTERM.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "kube/client.h"
#include "kube/config.h"
#include "sim/kube/scheduler_standin.h"

namespace hami::cli {
namespace {

struct KubeSchedulerFlags {
  std::string kubeconfig;
  std::string config;
  int parallelism = 1;
  std::string scheduler_name = "hami-scheduler";
  double qps = 50;  // kube-scheduler's clientConnection defaults
  int burst = 100;
};

int RunKubeScheduler(const KubeSchedulerFlags& f) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (int err = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); err != 0) {
    std::fprintf(stderr, "hami sim kube-scheduler: pthread_sigmask: %s\n", std::strerror(err));
    return 1;
  }
  auto config = sim::kube::LoadSchedulerConfig(f.config);
  if (!config.ok()) {
    std::fprintf(stderr, "hami sim kube-scheduler: %s\n", config.error().message().c_str());
    return 2;
  }
  const size_t extenders = config->extenders.size();
  auto kube_config = kube::LoadConfig(f.kubeconfig);
  if (!kube_config.ok()) {
    std::fprintf(stderr, "hami sim kube-scheduler: %s\n", kube_config.error().message().c_str());
    return 2;
  }
  kube::ClientOptions co;
  co.qps = f.qps;
  co.burst = f.burst;
  co.user_agent = "hami-kube-scheduler-standin";
  auto client = kube::Client::Create(std::move(*kube_config), co);
  if (!client.ok()) {
    std::fprintf(stderr, "hami sim kube-scheduler: %s\n", client.error().message().c_str());
    return 2;
  }
  sim::kube::StandinOptions so;
  so.scheduler_name = f.scheduler_name;
  so.parallelism = f.parallelism;
  auto standin = sim::kube::SchedulerStandin::Create(**client, std::move(*config), so);
  if (!standin.ok()) {
    std::fprintf(stderr, "hami sim kube-scheduler: %s\n", standin.error().message().c_str());
    return 2;
  }
  sim::kube::SchedulerStandin& s = **standin;
  s.Start();
  std::string names;
  for (const std::string& n : s.scheduler_names()) names += (names.empty() ? "" : ",") + n;
  std::fprintf(stderr,
               "kube-scheduler event=start server=%s schedulers=%s extenders=%zu parallelism=%d "
               "pid=%d\n",
               (*client)->config().server.c_str(), names.c_str(), extenders, f.parallelism,
               int(getpid()));
  int sig = 0;
  while (sig != SIGINT && sig != SIGTERM) {
    siginfo_t info{};
    sig = sigwaitinfo(&stop_signals, &info);
    if (sig < 0 && errno != EINTR) {
      std::fprintf(stderr, "hami sim kube-scheduler: sigwaitinfo: %s\n", std::strerror(errno));
      s.Stop();
      return 1;
    }
  }
  s.Stop();
  const sim::kube::SchedulerStandin::Stats st = s.stats();
  std::fprintf(stderr,
               "kube-scheduler event=stop signal=%s attempts=%llu scheduled=%llu "
               "unschedulable=%llu errors=%llu filter_calls=%llu prioritize_calls=%llu "
               "bind_calls=%llu preempt_calls=%llu preemptions=%llu victims_deleted=%llu "
               "extender_failures=%llu\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<unsigned long long>(st.attempts),
               static_cast<unsigned long long>(st.scheduled),
               static_cast<unsigned long long>(st.unschedulable),
               static_cast<unsigned long long>(st.errors),
               static_cast<unsigned long long>(st.filter_calls),
               static_cast<unsigned long long>(st.prioritize_calls),
               static_cast<unsigned long long>(st.bind_calls),
               static_cast<unsigned long long>(st.preempt_calls),
               static_cast<unsigned long long>(st.preemptions),
               static_cast<unsigned long long>(st.victims_deleted),
               static_cast<unsigned long long>(st.extender_failures));
  return 0;
}

}  // namespace

void AddSimKubeSchedulerCommand(CLI::App& sim) {
  CLI::App* cmd = sim.add_subcommand(
      "kube-scheduler",
      "Run the kube-scheduler stand-in: schedule pending pods through the extenders of a "
      "KubeSchedulerConfiguration (filter, prioritize, bind over HTTP) until SIGINT or SIGTERM");
  static KubeSchedulerFlags flags;
  cmd->add_option("--kubeconfig", flags.kubeconfig,
                  "kubeconfig of the API server (default: $KUBECONFIG, in-cluster, "
                  "~/.kube/config)");
  cmd->add_option("--config", flags.config,
                  "KubeSchedulerConfiguration file (kubescheduler.config.k8s.io/v1) with the "
                  "extenders")
      ->required();
  cmd->add_option("--parallelism", flags.parallelism,
                  "pods scheduled at once, each through filter, prioritize and bind")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  cmd->add_option("--scheduler-name", flags.scheduler_name,
                  "spec.schedulerName served when the configuration has no profiles")
      ->capture_default_str();
  cmd->add_option("--kube-api-qps", flags.qps, "API requests per second (<= 0: unlimited)")
      ->capture_default_str();
  cmd->add_option("--kube-api-burst", flags.burst, "API request burst")
      ->check(CLI::Range(1, 100000))
      ->capture_default_str();
  cmd->callback([] { std::exit(RunKubeScheduler(flags)); });
}

}  // namespace hami::cli
