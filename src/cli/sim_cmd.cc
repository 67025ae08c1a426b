// hami sim (the hami-sim program, which `hami sim` runs): the simulated GPU's profiles,
// options and live state; the simulated Kubernetes API server and kube-scheduler. The only
// command that reads the simulator's internals; `hami` itself does not link them.
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "common/clock.h"
#include "common/exit_status.h"
#include "common/parse.h"
#include "sim/kube/api_server.h"
#include "sim/options.h"
#include "sim/profiles.h"
#include "sim/state.h"

namespace hami::cli {

namespace {

using sim::DeviceProfile;

void PrintProfiles(bool json) {
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const DeviceProfile& p : sim::Profiles()) {
      out.push_back(
          {{"profile", p.key},
           {"name", p.name},
           {"memory_mib", p.memory_mib},
           {"reserved_mib", p.reserved_mib},
           {"context_mib", p.context_mib},
           {"sm_count", p.sm_count},
           {"max_threads_per_sm", p.max_threads_per_sm},
           {"compute_capability", std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor)}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%-10s %-24s %10s %5s %8s %4s\n", "PROFILE", "NAME", "MEMORY", "SMs", "THR/SM", "CC");
  for (const DeviceProfile& p : sim::Profiles()) {
    std::printf("%-10s %-24s %6llu MiB %5d %8d %d.%d\n", std::string(p.key).c_str(),
                std::string(p.name).c_str(), static_cast<unsigned long long>(p.memory_mib),
                p.sm_count, p.max_threads_per_sm, p.cc_major, p.cc_minor);
  }
  std::printf(
      "\nChoose with HAMI_SIM_PROFILE=profile[:count][,...] (default %s), or\n"
      "`hami run --sim PROFILE -- CMD`.\n",
      std::string(sim::kDefaultProfileSpec).c_str());
}

void PrintOptions() {
  for (const sim::SimOptionInfo& o : sim::SimOptionTable()) {
    const char* v = std::getenv(o.name);
    std::printf("%-28s %s\n    default: %s%s%s\n", o.name, o.doc, o.default_text,
                v != nullptr ? "    set: " : "", v != nullptr ? v : "");
  }
}

int PrintStatus(const std::string& path, bool json) {
  auto state = sim::SharedState::OpenExisting(path);
  if (!state.ok()) {
    std::fprintf(stderr, "hami sim status: %s\n", state.error().message().c_str());
    return ExitStatusOf(state.error());
  }
  sim::SharedState& s = **state;
  s.SweepDead();  // processes that died still hold memory until someone reclaims it
  int64_t now = MonotonicNs();
  nlohmann::json out = {
      {"state", path}, {"profile", s.profile_spec()}, {"devices", nlohmann::json::array()}};
  for (const sim::DeviceSpec& d : s.devices()) {
    sim::BusyWindow w = s.DeviceBusy(d.index, now - 1000000000, now);
    int util = w.covered_ns > 0 ? int(w.busy_ns * 100 / w.covered_ns) : 0;
    nlohmann::json dev = {{"index", d.index},
                          {"name", d.profile->name},
                          {"uuid", d.uuid},
                          {"pci_bus_id", d.pci_bus_id},
                          {"memory_total_bytes", d.total_bytes()},
                          {"memory_reserved_bytes", d.reserved_bytes()},
                          {"memory_used_bytes", s.UsedBytes(d.index)},
                          {"utilization_percent", util},
                          {"processes", nlohmann::json::array()}};
    for (const sim::ProcessView& p : s.Processes(d.index)) {
      dev["processes"].push_back({{"host_pid", p.host_pid},
                                  {"pid", p.ns_pid},
                                  {"name", p.comm},
                                  {"contexts", p.contexts},
                                  {"memory_used_bytes", p.used_bytes}});
    }
    out["devices"].push_back(dev);
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("simulated machine %s (state %s)\n", s.profile_spec().c_str(), path.c_str());
  std::printf("%-4s %-24s %-41s %-25s %5s\n", "GPU", "NAME", "UUID", "MEMORY USED / TOTAL", "UTIL");
  for (const auto& d : out["devices"]) {
    std::string mem = FormatBytes(d["memory_used_bytes"].get<uint64_t>()) + " / " +
                      FormatBytes(d["memory_total_bytes"].get<uint64_t>() -
                                  d["memory_reserved_bytes"].get<uint64_t>());
    std::printf("%-4d %-24s %-41s %-25s %4d%%\n", d["index"].get<int>(),
                d["name"].get<std::string>().c_str(), d["uuid"].get<std::string>().c_str(),
                mem.c_str(), d["utilization_percent"].get<int>());
  }
  std::printf("\n%-4s %-10s %-10s %-16s %s\n", "GPU", "HOST PID", "PID", "NAME", "MEMORY");
  bool any = false;
  for (const auto& d : out["devices"]) {
    for (const auto& p : d["processes"]) {
      any = true;
      std::printf("%-4d %-10d %-10d %-16s %s\n", d["index"].get<int>(), p["host_pid"].get<int>(),
                  p["pid"].get<int>(), p["name"].get<std::string>().c_str(),
                  FormatBytes(p["memory_used_bytes"].get<uint64_t>()).c_str());
    }
  }
  if (!any) std::printf("(no process holds a context)\n");
  return 0;
}

// `hami sim xid DEVICE CODE`: records Xid CODE on DEVICE (index or UUID) in the machine's
// state; the simulated NVML delivers it to the event sets that registered for Xid errors.
int InjectXid(const std::string& path, const std::string& device, const std::string& code_text) {
  auto state = sim::SharedState::OpenExisting(path);
  if (!state.ok()) {
    std::fprintf(stderr, "hami sim xid: %s\n", state.error().message().c_str());
    return ExitStatusOf(state.error());
  }
  sim::SharedState& s = **state;
  auto code = ParseUint64(code_text, "Xid code");
  if (!code.ok() || *code == 0) {
    std::fprintf(stderr, "hami sim xid: CODE '%s' is not an Xid (a positive decimal number)\n",
                 code_text.c_str());
    return 2;
  }
  const sim::DeviceSpec* target = nullptr;
  for (const sim::DeviceSpec& d : s.devices()) {
    if (d.uuid == device || std::to_string(d.index) == device) target = &d;
  }
  if (target == nullptr) {
    std::fprintf(stderr,
                 "hami sim xid: no device '%s' on the simulated machine %s (give an index from "
                 "0 to %zu or a UUID; `hami sim status` lists them)\n",
                 device.c_str(), s.profile_spec().c_str(),
                 s.devices().empty() ? size_t(0) : s.devices().size() - 1);
    return 2;
  }
  if (Status st = s.RecordXid(target->index, *code); !st.ok()) {
    std::fprintf(stderr, "hami sim xid: %s\n", st.error().message().c_str());
    return ExitStatusOf(st.error());
  }
  std::printf("Xid %llu recorded on GPU %d (%s)\n", static_cast<unsigned long long>(*code),
              target->index, target->uuid.c_str());
  return 0;
}

std::string StatePathOrDefault(const std::string& flag) {
  if (!flag.empty()) return flag;
  const char* env = std::getenv("HAMI_SIM_STATE");
  return env != nullptr && *env != '\0' ? env : "/tmp/hami-sim.state";
}

struct ApiServerFlags {
  std::string host = "127.0.0.1";
  int port = 0;
  std::string kubeconfig_out;
  std::string tls_cert;
  std::string tls_key;
  int64_t watch_window = 10000;
  int threads = 128;
  std::string pod_log_dir;
  std::string audit = "on";
};

// A key=value value: as is when it has no space, quote, backslash or '=', else quoted.
std::string LogValue(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \t\"\\=") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// Serves until SIGINT or SIGTERM. Both are blocked before the server's threads start (they
// inherit the mask) and taken with sigwaitinfo: no handler ever runs.
int ServeApiServer(const ApiServerFlags& f) {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (int err = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); err != 0) {
    std::fprintf(stderr, "hami sim apiserver: pthread_sigmask: %s\n", std::strerror(err));
    return 1;
  }
  sim::kube::ApiServerOptions o;
  o.host = f.host;
  o.port = f.port;
  o.tls_cert_file = f.tls_cert;
  o.tls_key_file = f.tls_key;
  o.watch_window = f.watch_window;
  o.threads = f.threads;
  o.pod_log_dir = f.pod_log_dir;
  o.audit = f.audit == "on";
  auto started = sim::kube::ApiServer::Start(o);
  if (!started.ok()) {
    std::fprintf(stderr, "hami sim apiserver: %s\n", started.error().message().c_str());
    return ExitStatusOf(started.error());
  }
  std::unique_ptr<sim::kube::ApiServer> server = std::move(started).value();
  if (!f.kubeconfig_out.empty()) {
    if (Status s = server->WriteKubeconfig(f.kubeconfig_out); !s.ok()) {
      std::fprintf(stderr, "hami sim apiserver: %s\n", s.error().message().c_str());
      return ExitStatusOf(s.error());
    }
  }
  std::fprintf(stderr,
               "apiserver event=start url=%s kubeconfig=%s watch_window=%lld threads=%d "
               "pod_log_dir=%s audit=%s pid=%d\n",
               LogValue(server->url()).c_str(), LogValue(f.kubeconfig_out).c_str(),
               static_cast<long long>(f.watch_window), f.threads, LogValue(f.pod_log_dir).c_str(),
               f.audit.c_str(), int(getpid()));
  std::printf("apiserver: %s\n", server->url().c_str());
  std::fflush(stdout);
  int sig = 0;
  while (sig != SIGINT && sig != SIGTERM) {
    siginfo_t info{};
    sig = sigwaitinfo(&stop_signals, &info);
    if (sig < 0 && errno != EINTR) {
      std::fprintf(stderr, "hami sim apiserver: sigwaitinfo: %s\n", std::strerror(errno));
      server->Stop();
      return 1;
    }
  }
  server->Stop();
  const sim::kube::ApiServer::Stats st = server->stats();
  std::fprintf(stderr,
               "apiserver event=stop signal=%s requests=%llu faults_injected=%llu "
               "resource_version=%lld\n",
               sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<unsigned long long>(st.requests),
               static_cast<unsigned long long>(st.faults_injected),
               static_cast<long long>(server->resource_version()));
  return 0;
}

}  // namespace

void ConfigureSimCommand(CLI::App& app) {
  CLI::App* sim = &app;
  static bool json = false;
  sim->add_flag("--json", json, "print JSON");
  sim->callback([sim] {
    if (sim->get_subcommands().empty()) PrintProfiles(json);
  });

  CLI::App* profiles = sim->add_subcommand("profiles", "List the device profiles");
  profiles->add_flag("--json", json, "print JSON");
  profiles->callback([] { PrintProfiles(json); });

  sim->add_subcommand("options", "List every HAMI_SIM_* variable, its default and its value")
      ->callback(PrintOptions);

  CLI::App* status = sim->add_subcommand(
      "status", "Show the simulated machine's devices and processes, like nvidia-smi");
  static std::string state_path;
  status->add_option("--state", state_path,
                     "state file (default: $HAMI_SIM_STATE or "
                     "/tmp/hami-sim.state)");
  status->add_flag("--json", json, "print JSON");
  status->callback([] {
    std::string path = state_path;
    if (path.empty()) {
      const char* env = std::getenv("HAMI_SIM_STATE");
      path = env != nullptr && *env != '\0' ? env : "/tmp/hami-sim.state";
    }
    std::exit(PrintStatus(path, json));
  });

  CLI::App* xid = sim->add_subcommand(
      "xid",
      "Record an Xid error on a simulated GPU; NVML event sets registered for Xid errors "
      "receive it (e.g. `hami sim xid 0 79`: GPU 0 fell off the bus)");
  static std::string xid_state, xid_device, xid_code;
  xid->add_option("DEVICE", xid_device, "device index or UUID")->required();
  xid->add_option("CODE", xid_code, "the Xid (79, 48, 13, ...)")->required();
  xid->add_option("--state", xid_state,
                  "state file (default: $HAMI_SIM_STATE or /tmp/hami-sim.state)");
  xid->callback([] { std::exit(InjectXid(StatePathOrDefault(xid_state), xid_device, xid_code)); });

  CLI::App* apiserver = sim->add_subcommand(
      "apiserver",
      "Run the simulated Kubernetes API server (kubectl and client libraries work against it) "
      "until SIGINT or SIGTERM; prints `apiserver: URL`");
  static ApiServerFlags api;
  apiserver->add_option("--host", api.host, "address to listen on")->capture_default_str();
  apiserver->add_option("--port", api.port, "port (0: any free port)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  apiserver->add_option("--kubeconfig-out", api.kubeconfig_out,
                        "write a kubeconfig for this server (context hami-sim) to FILE");
  apiserver->add_option("--tls-cert", api.tls_cert, "serve HTTPS with this PEM certificate");
  apiserver->add_option("--tls-key", api.tls_key, "and this PEM private key");
  apiserver
      ->add_option("--watch-window", api.watch_window,
                   "changes kept for watch; older resourceVersions get 410 Gone")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}))
      ->capture_default_str();
  apiserver->add_option("--threads", api.threads, "request threads (each open watch holds one)")
      ->check(CLI::Range(2, 4096))
      ->capture_default_str();
  apiserver->add_option("--pod-log-dir", api.pod_log_dir,
                        "serve pods/log from DIR/<namespace>_<pod>_<uid>/<container>/<restart>.log "
                        "(the kubelet's layout; CRI log format, as containerd writes it)");
  apiserver
      ->add_option("--audit", api.audit,
                   "record every resource request for GET /sim/audit (on or off)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
  apiserver->callback([] { std::exit(ServeApiServer(api)); });

  AddSimKubeSchedulerCommand(*sim);
  AddSimClusterCommands(*sim);
}

}  // namespace hami::cli
