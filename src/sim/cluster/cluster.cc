#include "sim/cluster/cluster.h"

#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <thread>

#include "common/file.h"
#include "common/unique_fd.h"
#include "kube/base64.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/http.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "sim/cri/containerd.h"
#include "sim/cri/host.h"
#include "sim/profiles.h"
#include "sim/spawn.h"

extern char** environ;

namespace hami::sim::cluster {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

constexpr hami::kube::Resource kMutatingWebhooks{"admissionregistration.k8s.io",
                                                 "v1",
                                                 "mutatingwebhookconfigurations",
                                                 "mutatingwebhookconfiguration",
                                                 "MutatingWebhookConfiguration",
                                                 false,
                                                 ""};
constexpr char kWebhookName[] = "hami-webhook";
constexpr int kMaxNodes = 16;
constexpr int64_t kMaxReadyTimeoutS = 3600;

// A duration as hami-monitor's main.cc reads --resync-interval and --feedback-interval: digits
// with an optional unit (ms, s, m, h; none is ms). In milliseconds; -1 when it is not one.
int64_t MonitorDurationMs(std::string_view text) {
  size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 9) return -1;
  const std::string_view unit = text.substr(digits);
  int64_t scale = 0;
  if (unit.empty() || unit == "ms") {
    scale = 1;
  } else if (unit == "s") {
    scale = 1000;
  } else if (unit == "m") {
    scale = 60 * 1000;
  } else if (unit == "h") {
    scale = 60 * 60 * 1000;
  } else {
    return -1;
  }
  return std::stoll(std::string(text.substr(0, digits))) * scale;
}
constexpr char kSystemNamespace[] = "hami-system";

void Say(std::FILE* out, const std::string& line) {
  if (out == nullptr) return;
  std::fprintf(out, "%s\n", line.c_str());
  std::fflush(out);
}

uint64_t StartTicks(pid_t pid) {
  auto stat = ReadFileToString("/proc/" + std::to_string(pid) + "/stat", 4096);
  if (!stat.ok()) return 0;
  size_t close = stat->rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream in(stat->substr(close + 2));
  std::string field;
  // Field 3 (state) is the first after ")"; field 22 is starttime.
  for (int i = 3; i <= 22 && (in >> field); ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

// A free TCP port on the loopback address (bound, read, released).
Result<int> FreePort() {
  UniqueFd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Error::FromErrno("socket");
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (bind(fd.get(), reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    return Error::FromErrno("binding a free port");
  }
  socklen_t len = sizeof(a);
  if (getsockname(fd.get(), reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return Error::FromErrno("getsockname");
  }
  return int(ntohs(a.sin_port));
}

// The last lines of a log, for an error message.
std::string Tail(const std::string& path, size_t lines = 8) {
  auto text = ReadFileToString(path, 16 << 20);
  if (!text.ok()) return "";
  std::vector<std::string> all;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out;
  for (size_t i = all.size() > lines ? all.size() - lines : 0; i < all.size(); ++i) {
    out += "\n    " + all[i];
  }
  return out;
}

// Starts argv in its own session, stdin /dev/null, stdout and stderr appended to `log`, with the
// environment plus `env`. Returns the PID.
Result<pid_t> Spawn(const std::vector<std::string>& argv,
                    const std::map<std::string, std::string>& env, const std::string& log) {
  std::map<std::string, std::string> all;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv = *e;
    size_t eq = kv.find('=');
    if (eq != std::string::npos) all[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  for (const auto& [k, v] : env) {
    if (v.empty()) {
      all.erase(k);
    } else {
      all[k] = v;
    }
  }
  std::vector<std::string> env_text;
  for (const auto& [k, v] : all) env_text.push_back(k + "=" + v);
  const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return Error::FromErrno("opening " + log);
  Result<pid_t> pid = SpawnInSession(argv, env_text, fd);
  close(fd);
  return pid;
}

// Runs argv to completion (output to `log`); its exit status.
Result<int> RunToEnd(const std::vector<std::string>& argv, const std::string& log) {
  pid_t pid = HAMI_TRY(Spawn(argv, {}, log));
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return Error::FromErrno("waitpid " + argv[0]);
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

Status MakeDirs(const std::string& path) {
  std::error_code ec;
  fs::create_directories(path, ec);
  if (ec) return Error(ErrorCode::kIo, "creating " + path + ": " + ec.message());
  return OkStatus();
}

Status WriteText(const std::string& path, const std::string& text) {
  std::string tmp = path + ".tmp";
  UniqueFd fd = HAMI_TRY(OpenRegularFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644));
  HAMI_TRY(WriteAll(fd.get(), text));
  fd.Reset();
  if (rename(tmp.c_str(), path.c_str()) != 0) return Error::FromErrno("rename " + tmp);
  return OkStatus();
}

int PidfdOpen(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }

// Waits for `pid` (any process) to end, at most `timeout`.
bool WaitGone(pid_t pid, std::chrono::milliseconds timeout) {
  UniqueFd fd(PidfdOpen(pid));
  if (!fd.valid()) return errno == ESRCH;
  // A child of this process must be reaped to be gone.
  pollfd p{fd.get(), POLLIN, 0};
  int r = poll(&p, 1, int(timeout.count()));
  if (r > 0) {
    int status;
    waitpid(pid, &status, WNOHANG);
    return true;
  }
  return false;
}

// An HTTP GET's status (0 when no answer), through the client library's transport.
long HttpStatus(const std::string& url, const std::string& ca_pem = "") {
  hami::kube::internal::TlsOptions tls;
  tls.ca_pem = ca_pem;
  hami::kube::internal::HttpTransport t(tls, "hami-sim-cluster", std::chrono::milliseconds(1000));
  hami::kube::internal::HttpRequest r;
  r.method = "GET";
  r.url = url;
  r.timeout = std::chrono::milliseconds(2000);
  auto res = t.Perform(r);
  return res.outcome == hami::kube::internal::TransportOutcome::kOk ? res.status : 0;
}

class Starter {
 public:
  Starter(const ClusterOptions& o, std::FILE* out) : o_(o), out_(out) {}
  Result<ClusterInfo> Run();
  ClusterInfo& info() { return info_; }

 private:
  Status Save() {
    return WriteText(info_.dir + "/" + kClusterFile, ClusterInfoToJson(info_).dump(2) + "\n");
  }
  Result<pid_t> Start(const std::string& name, const std::vector<std::string>& argv,
                      std::map<std::string, std::string> env) {
    std::string file = name;
    for (char& c : file) {
      if (c == '/') c = '-';
    }
    const std::string log = info_.dir + "/logs/" + file + ".log";
    env[kClusterEnv] = info_.dir;
    std::vector<std::string> words = argv;
    words.insert(words.end(), o_.log_args.begin(), o_.log_args.end());
    auto pid = Spawn(words, env, log);
    if (!pid.ok()) return std::move(pid).error().Context(name + " (log " + log + ")");
    Component c{name, *pid, StartTicks(*pid), log, words};
    info_.components.push_back(c);
    HAMI_TRY(Save());
    Say(out_, "  started " + name + " (pid " + std::to_string(*pid) + ", log " + log + ")");
    return *pid;
  }
  // An error when a started component has exited, naming it and its log.
  Status CheckAlive() {
    for (const Component& c : info_.components) {
      int status = 0;
      pid_t r = waitpid(c.pid, &status, WNOHANG);
      if (r == c.pid) {
        int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        return Error(ErrorCode::kUnavailable, c.name + " exited with status " +
                                                  std::to_string(code) + " (log " + c.log +
                                                  "):" + Tail(c.log));
      }
    }
    return OkStatus();
  }
  // Waits until `ready` holds, checking that every component lives; the error names `what`.
  Status WaitFor(const std::string& what, const std::string& log,
                 const std::function<bool()>& ready) {
    const auto deadline = Clock::now() + o_.ready_timeout;
    for (;;) {
      HAMI_TRY(CheckAlive());
      if (ready()) return OkStatus();
      if (Clock::now() >= deadline) {
        return Error(ErrorCode::kTimeout,
                     what + " not ready after " + std::to_string(o_.ready_timeout.count()) + " s" +
                         (log.empty() ? "" : " (log " + log + "):" + Tail(log)));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }
  Status ConfigFiles();
  Status Certificate();
  Status StartApiServer();
  Status StartNode(int index);
  Status StartDevicePlugin(const NodeInfo& n, const std::string& dp_dir,
                           const std::map<std::string, std::string>& gpu_env);
  Status StartDraPlugin(const NodeInfo& n, const std::string& registry_dir,
                        const std::map<std::string, std::string>& gpu_env);
  Status CreateDeviceClass();
  Status StartScheduler();
  Status RegisterWebhook();
  Status WaitForNodes();

  const ClusterOptions& o_;
  std::FILE* out_;
  ClusterInfo info_;
  std::unique_ptr<hami::kube::Client> client_;
  std::string device_config_, node_config_, scheduler_config_;
  std::string cert_, key_, ca_pem_;
};

Status Starter::ConfigFiles() {
  const std::string own = info_.dir + "/config";
  HAMI_TRY(MakeDirs(own));
  auto from = [&](const char* file) -> std::string {
    std::string p = o_.config_dir + "/" + file;
    return !o_.config_dir.empty() && Exists(p) ? p : std::string();
  };
  device_config_ = from("device-config.yaml");
  node_config_ = from("config.json");
  if (node_config_.empty()) {
    node_config_ = own + "/config.json";
    HAMI_TRY(WriteText(node_config_, "{\"nodeconfig\": []}\n"));
  }
  scheduler_config_ = from("kube-scheduler-config.yaml");
  if (scheduler_config_.empty()) {
    scheduler_config_ = own + "/kube-scheduler-config.default.yaml";
    std::string text =
        "apiVersion: kubescheduler.config.k8s.io/v1\n"
        "kind: KubeSchedulerConfiguration\n"
        "profiles:\n- schedulerName: hami-scheduler\n"
        "extenders:\n- urlPrefix: https://127.0.0.1:443\n"
        "  filterVerb: filter\n  prioritizeVerb: prioritize\n  bindVerb: bind\n  weight: 1\n"
        "  httpTimeout: 30s\n  enableHTTPS: true\n  nodeCacheCapable: true\n"
        "  managedResources:\n";
    for (const char* r : {"nvidia.com/gpu", "nvidia.com/gpumem", "nvidia.com/gpumem-percentage",
                          "nvidia.com/gpucores", "nvidia.com/priority"}) {
      text += std::string("  - name: ") + r + "\n    ignoredByScheduler: true\n";
    }
    HAMI_TRY(WriteText(scheduler_config_, text));
  }
  Say(out_,
      "  configuration: " + (device_config_.empty() ? "(default device config)" : device_config_) +
          ", " + node_config_ + ", " + scheduler_config_);
  return OkStatus();
}

Status Starter::Certificate() {
  HAMI_TRY(MakeDirs(info_.dir + "/tls"));
  cert_ = info_.dir + "/tls/scheduler.crt";
  key_ = info_.dir + "/tls/scheduler.key";
  const std::string log = info_.dir + "/logs/openssl.log";
  auto code =
      RunToEnd({"/usr/bin/openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                key_, "-out", cert_, "-days", "30", "-subj", "/CN=hami-scheduler", "-addext",
                "subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:hami-scheduler"},
               log);
  if (!code.ok()) return std::move(code).error().Context("the scheduler's certificate (openssl)");
  if (*code != 0) {
    return Error(ErrorCode::kIo, "the scheduler's certificate: openssl exited with status " +
                                     std::to_string(*code) + " (log " + log + "):" + Tail(log));
  }
  ca_pem_ = HAMI_TRY(ReadFileToString(cert_, 1 << 20));
  info_.ca_file = cert_;
  return OkStatus();
}

Status Starter::StartApiServer() {
  const std::string hami_sim = o_.bin_dir + "/hami-sim";
  const int port = HAMI_TRY(FreePort());
  info_.kubeconfig = info_.dir + "/kubeconfig";
  info_.api_server = "http://127.0.0.1:" + std::to_string(port);
  std::vector<std::string> argv = {
      hami_sim, "apiserver", "--port", std::to_string(port), "--kubeconfig-out", info_.kubeconfig};
  // --pod-log-dir is newer than the server's first version: offered when its help lists it.
  const std::string help_log = info_.dir + "/logs/apiserver-help.txt";
  auto help = RunToEnd({hami_sim, "apiserver", "--help"}, help_log);
  auto help_text = ReadFileToString(help_log, 1 << 20);
  if (help.ok() && help_text.ok() && help_text->find("--pod-log-dir") != std::string::npos) {
    argv.insert(argv.end(), {"--pod-log-dir", info_.dir + "/logs/pods"});
    info_.pod_logs = true;
  }
  std::remove(help_log.c_str());
  HAMI_TRY(Start("apiserver", argv, {}));
  HAMI_TRY(WaitFor("the API server", info_.components.back().log, [&] {
    return Exists(info_.kubeconfig) && HttpStatus(info_.api_server + "/readyz") == 200;
  }));
  auto config = HAMI_TRY(hami::kube::LoadConfig(info_.kubeconfig));
  hami::kube::ClientOptions co;
  co.qps = 0;
  co.user_agent = "hami-sim-cluster";
  client_ = HAMI_TRY(hami::kube::Client::Create(std::move(config), co));
  // The deployment's namespace: the scheduler's leader-election lease lives there.
  auto ns =
      client_->Create(hami::kube::kNamespaces, "", {{"metadata", {{"name", kSystemNamespace}}}});
  if (!ns.ok() && ns.error().code() != ErrorCode::kConflict) {
    return std::move(ns).error().Context(std::string("creating namespace ") + kSystemNamespace);
  }
  return OkStatus();
}

Status Starter::StartNode(int index) {
  NodeInfo n;
  n.name = "node-" + std::to_string(index);
  n.dir = info_.dir + "/nodes/" + n.name;
  n.hook_path = n.dir + "/hook";
  n.sim_state = n.dir + "/sim.state";
  const std::string dp_dir = n.dir + "/device-plugins";
  HAMI_TRY(MakeDirs(dp_dir));
  HAMI_TRY(MakeDirs(n.hook_path));
  HAMI_TRY(MakeDirs(n.dir + "/hostpid"));
  const std::map<std::string, std::string> gpu_env = {
      {"HAMI_SIM_STATE", n.sim_state}, {"HAMI_SIM_PROFILE", o_.gpus}, {"HAMI_SIM_NODE", n.name}};
  const std::string nvml = o_.sim_lib_dir + "/libnvidia-ml.so.1";

  std::vector<std::string> node_argv = {o_.bin_dir + "/hami-sim",
                                        "node",
                                        "--name",
                                        n.name,
                                        "--kubeconfig",
                                        info_.kubeconfig,
                                        "--dir",
                                        n.dir,
                                        "--gpus",
                                        o_.gpus,
                                        "--pod-log-dir",
                                        info_.dir + "/logs/pods",
                                        "--bin-dir",
                                        o_.bin_dir,
                                        "--sim-lib-dir",
                                        o_.sim_lib_dir};
  const std::string registry_dir = n.dir + "/plugins_registry";
  if (o_.mode == ClusterMode::kDra) {
    n.cdi_dir = n.dir + "/cdi";
    HAMI_TRY(MakeDirs(registry_dir));
    HAMI_TRY(MakeDirs(n.cdi_dir));
    HAMI_TRY(MakeDirs(n.dir + "/plugins"));
    node_argv.insert(node_argv.end(),
                     {"--dra-plugins-registry-dir", registry_dir, "--cdi-dir", n.cdi_dir});
  }
  HAMI_TRY(Start("node/" + n.name, node_argv, gpu_env));
  const std::string node_log = info_.components.back().log;
  HAMI_TRY(WaitFor("the simulated kubelet of " + n.name, node_log,
                   [&] { return Exists(dp_dir + "/kubelet.sock"); }));
  if (o_.mode == ClusterMode::kDra) {
    HAMI_TRY(StartDraPlugin(n, registry_dir, gpu_env));
  } else {
    HAMI_TRY(StartDevicePlugin(n, dp_dir, gpu_env));
  }

  const std::string monitor = o_.bin_dir + "/hami-monitor";
  if (Exists(monitor)) {
    const int port = HAMI_TRY(FreePort());
    n.monitor_url = "http://127.0.0.1:" + std::to_string(port);
    std::map<std::string, std::string> env = gpu_env;
    env["NODE_NAME"] = n.name;
    HAMI_TRY(Start("monitor/" + n.name,
                   {monitor, "--node-name", n.name, "--hook-path", n.hook_path, "--kubeconfig",
                    info_.kubeconfig, "--metrics-bind-address", "127.0.0.1:" + std::to_string(port),
                    "--resync-interval", o_.monitor_resync_interval, "--feedback-interval",
                    o_.monitor_feedback_interval, "--nvml-library", nvml},
                   env));
  } else {
    Say(out_, "  (no " + monitor + ": node " + n.name + " runs without hami-monitor)");
  }
  info_.nodes.push_back(n);
  return Save();
}

Status Starter::StartDraPlugin(const NodeInfo& n, const std::string& registry_dir,
                               const std::map<std::string, std::string>& gpu_env) {
  std::map<std::string, std::string> env = gpu_env;
  env["NODE_NAME"] = n.name;
  HAMI_TRY(Start(
      "dra-plugin/" + n.name,
      {o_.bin_dir + "/hami-dra-plugin", "--node-name", n.name, "--kubeconfig", info_.kubeconfig,
       "--plugins-registry-dir", registry_dir, "--plugins-dir", n.dir + "/plugins", "--cdi-dir",
       n.cdi_dir, "--hook-path", n.hook_path, "--vgpu-library", o_.vgpu_library, "--nvml-library",
       o_.sim_lib_dir + "/libnvidia-ml.so.1", "--cuda-library", o_.sim_lib_dir + "/libcuda.so.1"},
      env));
  return OkStatus();
}

Status Starter::StartDevicePlugin(const NodeInfo& n, const std::string& dp_dir,
                                  const std::map<std::string, std::string>& gpu_env) {
  const std::string nvml = o_.sim_lib_dir + "/libnvidia-ml.so.1";
  const std::string cuda = o_.sim_lib_dir + "/libcuda.so.1";
  std::vector<std::string> plugin = {o_.bin_dir + "/hami-device-plugin",
                                     "--node-name",
                                     n.name,
                                     "--kubeconfig",
                                     info_.kubeconfig,
                                     "--kubelet-socket",
                                     dp_dir + "/kubelet.sock",
                                     "--hook-path",
                                     n.hook_path,
                                     "--broker-dir",
                                     n.dir + "/hostpid",
                                     "--vgpu-library",
                                     o_.vgpu_library,
                                     "--nvml-library",
                                     nvml,
                                     "--cuda-library",
                                     cuda,
                                     "--node-config-file",
                                     node_config_};
  if (!device_config_.empty())
    plugin.insert(plugin.end(), {"--device-config-file", device_config_});
  std::map<std::string, std::string> plugin_env = gpu_env;
  plugin_env["NODE_NAME"] = n.name;
  plugin_env["LIBVGPU_HOSTPID_BROKER"] = o_.broker ? "1" : "";
  HAMI_TRY(Start("device-plugin/" + n.name, plugin, plugin_env));
  return OkStatus();
}

Status Starter::StartScheduler() {
  const int port = HAMI_TRY(FreePort());
  const int metrics = HAMI_TRY(FreePort());
  info_.scheduler = "https://127.0.0.1:" + std::to_string(port);
  info_.scheduler_metrics = "http://127.0.0.1:" + std::to_string(metrics);
  std::vector<std::string> argv = {
      o_.bin_dir + "/hami-scheduler", "--kubeconfig", info_.kubeconfig, "--http-bind",
      "127.0.0.1:" + std::to_string(port), "--cert-file", cert_, "--key-file", key_,
      "--metrics-bind-address", "127.0.0.1:" + std::to_string(metrics), "--scheduler-name",
      "hami-scheduler",
      // As deploy/base/scheduler.yaml runs it.
      "--node-scheduler-policy=binpack", "--gpu-scheduler-policy=spread", "--leader-elect",
      std::string("--leader-elect-namespace=") + kSystemNamespace,
      "--leader-elect-name=hami-scheduler"};
  if (!device_config_.empty()) argv.insert(argv.end(), {"--device-config-file", device_config_});
  if (o_.mode == ClusterMode::kDra) {
    // The webhook rewrites gpumem/gpucores pods into claims (docs/webhook.md, "DRA mode"), as
    // deploy/dra runs it.
    argv.push_back("--webhook-mode=dra");
  }
  HAMI_TRY(Start("hami-scheduler", argv, {}));
  HAMI_TRY(WaitFor("hami-scheduler", info_.components.back().log,
                   [&] { return HttpStatus(info_.scheduler + "/readyz", ca_pem_) == 200; }));

  auto yaml = ReadFileToString(scheduler_config_, 1 << 20);
  if (!yaml.ok()) return std::move(yaml).error().Context("kube-scheduler's configuration");
  const std::string rewritten =
      HAMI_TRY(RewriteSchedulerConfig(*yaml, scheduler_config_, info_.scheduler, ca_pem_));
  const std::string config = info_.dir + "/config/kube-scheduler-config.yaml";
  HAMI_TRY(WriteText(config, rewritten));
  HAMI_TRY(Start("kube-scheduler",
                 {o_.bin_dir + "/hami-sim", "kube-scheduler", "--kubeconfig", info_.kubeconfig,
                  "--config", config},
                 {}));
  const std::string plain = info_.dir + "/config/default-scheduler-config.yaml";
  HAMI_TRY(WriteText(plain,
                     "apiVersion: kubescheduler.config.k8s.io/v1\n"
                     "kind: KubeSchedulerConfiguration\n"
                     "profiles:\n- schedulerName: default-scheduler\n"));
  HAMI_TRY(Start("default-scheduler",
                 {o_.bin_dir + "/hami-sim", "kube-scheduler", "--kubeconfig", info_.kubeconfig,
                  "--config", plain},
                 {}));
  return OkStatus();
}

Status Starter::RegisterWebhook() {
  json webhook = {
      {"apiVersion", "admissionregistration.k8s.io/v1"},
      {"kind", "MutatingWebhookConfiguration"},
      {"metadata", {{"name", kWebhookName}}},
      {"webhooks",
       json::array({{{"name", "vgpu.hami.io"},
                     {"admissionReviewVersions", json::array({"v1"})},
                     {"sideEffects", "None"},
                     {"failurePolicy", "Ignore"},
                     {"timeoutSeconds", 10},
                     {"clientConfig",
                      {{"url", info_.scheduler + "/webhook"},
                       {"caBundle", hami::kube::EncodeBase64(ca_pem_)}}},
                     {"namespaceSelector",
                      {{"matchExpressions", json::array({{{"key", "hami.io/webhook"},
                                                          {"operator", "NotIn"},
                                                          {"values", json::array({"ignore"})}}})}}},
                     {"objectSelector",
                      {{"matchExpressions", json::array({{{"key", "hami.io/webhook"},
                                                          {"operator", "NotIn"},
                                                          {"values", json::array({"ignore"})}}})}}},
                     {"rules", json::array({{{"apiGroups", json::array({""})},
                                             {"apiVersions", json::array({"v1"})},
                                             {"operations", json::array({"CREATE"})},
                                             {"resources", json::array({"pods"})},
                                             {"scope", "*"}}})}}})}};
  auto created = client_->Create(kMutatingWebhooks, "", webhook);
  if (created.ok()) {
    info_.webhook = true;
    Say(out_, "  registered MutatingWebhookConfiguration " + std::string(kWebhookName) + " -> " +
                  info_.scheduler + "/webhook");
  } else if (created.error().code() == ErrorCode::kNotFound) {
    Say(out_,
        "  (this API server serves no mutatingwebhookconfigurations: GPU pods must set "
        "schedulerName: hami-scheduler themselves)");
  } else {
    return std::move(created).error().Context("registering the MutatingWebhookConfiguration");
  }
  return Save();
}

Status Starter::CreateDeviceClass() {
  auto created = client_->Create(hami::kube::kDeviceClasses, "", DraDeviceClass());
  if (!created.ok() && created.error().code() != ErrorCode::kConflict) {
    return std::move(created).error().Context(std::string("creating DeviceClass ") +
                                              kDraDriverName);
  }
  Say(out_, std::string("  created DeviceClass ") + kDraDriverName +
                " (extendedResourceName nvidia.com/gpu)");
  return OkStatus();
}

Status Starter::WaitForNodes() {
  for (const NodeInfo& n : info_.nodes) {
    std::string plugin_log, node_log;
    for (const Component& c : info_.components) {
      if (c.name == "device-plugin/" + n.name || c.name == "dra-plugin/" + n.name) {
        plugin_log = c.log;
      }
      if (c.name == "node/" + n.name) node_log = c.log;
    }
    if (o_.mode == ClusterMode::kDra) {
      const std::string registered = std::string("event=dra_registered driver=") + kDraDriverName;
      HAMI_TRY(WaitFor(
          "node " + n.name + " (Ready, hami-dra-plugin registered, its ResourceSlice published)",
          plugin_log, [&] {
            auto node = client_->Get(hami::kube::kNodes, "", n.name);
            if (!node.ok()) return false;
            bool ready = false;
            for (const json& c :
                 (*node).value("status", json::object()).value("conditions", json::array())) {
              if (c.value("type", "") == "Ready") ready = c.value("status", "") == "True";
            }
            auto log = ReadFileToString(node_log, 64 << 20);
            if (!ready || !log.ok() || log->find(registered) == std::string::npos) return false;
            hami::kube::ListOptions lo;
            lo.field_selector = "spec.nodeName=" + n.name;
            auto slices = client_->List(hami::kube::kResourceSlices, "", lo);
            return slices.ok() && !(*slices).value("items", json::array()).empty();
          }));
      continue;
    }
    HAMI_TRY(WaitFor("node " + n.name + " (Ready with its GPUs registered)", plugin_log, [&] {
      auto node = client_->Get(hami::kube::kNodes, "", n.name);
      if (!node.ok()) return false;
      const json& j = *node;
      bool ready = false;
      for (const json& c : j.value("status", json::object()).value("conditions", json::array())) {
        if (c.value("type", "") == "Ready") ready = c.value("status", "") == "True";
      }
      const json& cap = j.value("status", json::object()).value("capacity", json::object());
      const bool gpus = cap.contains("nvidia.com/gpu") && cap["nvidia.com/gpu"] != "0";
      const json& ann = j["metadata"].value("annotations", json::object());
      return ready && gpus && ann.contains("hami.io/node-nvidia-register");
    }));
    if (!n.monitor_url.empty()) {
      std::string log;
      for (const Component& c : info_.components) {
        if (c.name == "monitor/" + n.name) log = c.log;
      }
      HAMI_TRY(WaitFor("hami-monitor of " + n.name, log,
                       [&] { return HttpStatus(n.monitor_url + "/readyz") == 200; }));
    }
  }
  return OkStatus();
}

Result<ClusterInfo> Starter::Run() {
  info_.dir = o_.dir;
  HAMI_TRY(ValidateOptions(o_));
  if (geteuid() != 0) {
    return Error(
        ErrorCode::kPermission,
        "needs root: the nodes run containerd, which makes namespaces, mounts and cgroups, "
        "and the device plugin prepares the root-owned /tmp/vgpulock (run it with sudo)");
  }
  info_.mode = ClusterModeName(o_.mode);
  const char* plugin_tool = o_.mode == ClusterMode::kDra ? "hami-dra-plugin" : "hami-device-plugin";
  for (const char* tool : {"hami-sim", plugin_tool, "hami-scheduler"}) {
    if (!Exists(o_.bin_dir + "/" + tool)) {
      return Error(ErrorCode::kNotFound, std::string(tool) + " not found in " + o_.bin_dir +
                                             " (build it: cmake --build BUILD --target " + tool +
                                             ")");
    }
  }
  for (const std::string& f :
       {o_.sim_lib_dir + "/libcuda.so.1", o_.sim_lib_dir + "/libnvidia-ml.so.1", o_.vgpu_library}) {
    if (!Exists(f)) return Error(ErrorCode::kNotFound, f + " not found (build the project first)");
  }
  if (auto existing = ReadClusterInfo(o_.dir); existing.ok()) {
    for (const Component& c : existing->components) {
      if (ComponentAlive(c)) {
        return Error(ErrorCode::kBusy, "a cluster is already up in " + o_.dir + " (" + c.name +
                                           " runs as PID " + std::to_string(c.pid) +
                                           "); `hami sim cluster down --dir " + o_.dir +
                                           "` stops it");
      }
    }
  }
  if (Exists(o_.dir) && !Exists(o_.dir + "/" + kMarkerFile)) {
    std::error_code ec;
    if (!fs::is_empty(o_.dir, ec)) {
      return Error(ErrorCode::kBusy,
                   "--dir " + o_.dir +
                       " exists and is not a simulated cluster's directory; choose another (down "
                       "removes the directory it is given)");
    }
  }
  if (Exists(o_.dir)) {
    std::error_code ec;
    fs::remove_all(o_.dir, ec);  // a cluster directory whose processes are all gone
  }
  HAMI_TRY(MakeDirs(o_.dir + "/logs/pods"));
  HAMI_TRY(WriteText(o_.dir + "/" + kMarkerFile, "hami sim cluster\n"));
  HAMI_TRY(Save());
  Say(out_, "starting a simulated cluster in " + o_.dir + ": " + std::to_string(o_.nodes) +
                " node(s) with " + o_.gpus + " each, mode " + info_.mode);
  HAMI_TRY(ConfigFiles());
  HAMI_TRY(Certificate());
  HAMI_TRY(StartApiServer());
  if (o_.mode == ClusterMode::kDra) HAMI_TRY(CreateDeviceClass());
  for (int i = 1; i <= o_.nodes; ++i) HAMI_TRY(StartNode(i));
  HAMI_TRY(StartScheduler());
  HAMI_TRY(RegisterWebhook());
  HAMI_TRY(WaitForNodes());
  return info_;
}

}  // namespace

Result<ClusterMode> ParseClusterMode(std::string_view text) {
  if (text == "device-plugin") return ClusterMode::kDevicePlugin;
  if (text == "dra") return ClusterMode::kDra;
  return Error(ErrorCode::kInvalidArgument,
               "--mode '" + std::string(text) + "': must be device-plugin or dra");
}

const char* ClusterModeName(ClusterMode mode) {
  return mode == ClusterMode::kDra ? "dra" : "device-plugin";
}

json DraDeviceClass() {
  return {{"apiVersion", "resource.k8s.io/v1"},
          {"kind", "DeviceClass"},
          {"metadata", {{"name", kDraDriverName}}},
          {"spec",
           {{"selectors", json::array({{{"cel",
                                         {{"expression", std::string("device.driver == \"") +
                                                             kDraDriverName + "\""}}}}})},
            {"extendedResourceName", "nvidia.com/gpu"}}}};
}

Status ValidateOptions(const ClusterOptions& o) {
  if (o.mode == ClusterMode::kDra && o.broker) {
    return Error(ErrorCode::kInvalidArgument,
                 "--broker: not with --mode dra (hami-dra-plugin mounts the broker's directory "
                 "but serves no broker, and no device plugin runs there to serve it)");
  }
  if (o.dir.empty() || o.dir[0] != '/') {
    return Error(ErrorCode::kInvalidArgument, "--dir '" + o.dir + "': must be an absolute path");
  }
  if (o.nodes < 1 || o.nodes > kMaxNodes) {
    return Error(
        ErrorCode::kInvalidArgument,
        "--nodes " + std::to_string(o.nodes) + ": must be from 1 to " + std::to_string(kMaxNodes));
  }
  auto gpus = ParseProfileSpec(o.gpus, "node-1", "--gpus");
  if (!gpus.ok()) return std::move(gpus).error();
  if (gpus->empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "--gpus='" + o.gpus + "': every node of a simulated cluster needs a GPU (e.g. " +
                     std::string(kDefaultProfileSpec) + ")");
  }
  if (MonitorDurationMs(o.monitor_resync_interval) < 1000) {
    return Error(ErrorCode::kInvalidArgument,
                 "--monitor-resync-interval '" + o.monitor_resync_interval +
                     "': not a duration of at least 1s (digits with ms, s, m or h: 2s, 5m)");
  }
  if (MonitorDurationMs(o.monitor_feedback_interval) < 100) {
    return Error(ErrorCode::kInvalidArgument,
                 "--monitor-feedback-interval '" + o.monitor_feedback_interval +
                     "': not a duration of at least 100ms (digits with ms, s, m or h: 1s, 500ms)");
  }
  if (o.ready_timeout.count() < 1 || o.ready_timeout.count() > kMaxReadyTimeoutS) {
    return Error(ErrorCode::kInvalidArgument,
                 "--timeout " + std::to_string(o.ready_timeout.count()) + ": must be from 1 to " +
                     std::to_string(kMaxReadyTimeoutS) + " seconds");
  }
  return OkStatus();
}

std::string DefaultClusterDir() {
  const char* xdg = std::getenv("XDG_RUNTIME_DIR");
  if (xdg != nullptr && xdg[0] == '/') return std::string(xdg) + "/hami-cluster";
  return "/tmp/hami-cluster";
}

json ClusterInfoToJson(const ClusterInfo& info) {
  json nodes = json::array(), components = json::array();
  for (const NodeInfo& n : info.nodes) {
    nodes.push_back({{"name", n.name},
                     {"dir", n.dir},
                     {"hook_path", n.hook_path},
                     {"sim_state", n.sim_state},
                     {"monitor_url", n.monitor_url},
                     {"cdi_dir", n.cdi_dir}});
  }
  for (const Component& c : info.components) {
    components.push_back({{"name", c.name},
                          {"pid", c.pid},
                          {"start_ticks", c.start_ticks},
                          {"log", c.log},
                          {"argv", c.argv}});
  }
  return {{"dir", info.dir},
          {"kubeconfig", info.kubeconfig},
          {"api_server", info.api_server},
          {"scheduler", info.scheduler},
          {"scheduler_metrics", info.scheduler_metrics},
          {"ca_file", info.ca_file},
          {"webhook", info.webhook},
          {"pod_logs", info.pod_logs},
          {"mode", info.mode},
          {"nodes", nodes},
          {"components", components}};
}

Result<ClusterInfo> ClusterInfoFromJson(const json& j, const std::string& source) {
  try {
    ClusterInfo info;
    info.dir = j.at("dir").get<std::string>();
    info.kubeconfig = j.value("kubeconfig", "");
    info.api_server = j.value("api_server", "");
    info.scheduler = j.value("scheduler", "");
    info.scheduler_metrics = j.value("scheduler_metrics", "");
    info.ca_file = j.value("ca_file", "");
    info.webhook = j.value("webhook", false);
    info.pod_logs = j.value("pod_logs", false);
    info.mode = j.value("mode", "device-plugin");
    for (const json& n : j.value("nodes", json::array())) {
      info.nodes.push_back({n.at("name").get<std::string>(), n.value("dir", ""),
                            n.value("hook_path", ""), n.value("sim_state", ""),
                            n.value("monitor_url", ""), n.value("cdi_dir", "")});
    }
    for (const json& c : j.value("components", json::array())) {
      info.components.push_back({c.at("name").get<std::string>(), c.at("pid").get<pid_t>(),
                                 c.value("start_ticks", uint64_t{0}), c.value("log", ""),
                                 c.value("argv", std::vector<std::string>{})});
    }
    return info;
  } catch (const json::exception& e) {
    return Error(ErrorCode::kCorrupt, source + ": " + e.what());
  }
}

Result<ClusterInfo> ReadClusterInfo(const std::string& dir) {
  const std::string path = dir + "/" + kClusterFile;
  if (!Exists(path)) return Error(ErrorCode::kNotFound, "no simulated cluster in " + dir);
  std::string text = HAMI_TRY(ReadFileToString(path, 16 << 20));
  json j = json::parse(text, nullptr, false);
  if (j.is_discarded()) return Error(ErrorCode::kCorrupt, path + ": not JSON");
  return ClusterInfoFromJson(j, path);
}

bool ComponentAlive(const Component& c) {
  return c.pid > 0 && StartTicks(c.pid) != 0 && StartTicks(c.pid) == c.start_ticks;
}

Result<std::string> RewriteSchedulerConfig(const std::string& yaml, const std::string& source,
                                           const std::string& url, const std::string& ca_pem) {
  try {
    YAML::Node root = YAML::Load(yaml);
    YAML::Node extenders = root["extenders"];
    if (!extenders || !extenders.IsSequence() || extenders.size() == 0) {
      return Error(ErrorCode::kInvalidArgument,
                   "KubeSchedulerConfiguration " + source + ": no extenders to point at " + url);
    }
    const bool https = url.rfind("https://", 0) == 0;
    for (YAML::Node e : extenders) {
      e["urlPrefix"] = url;
      e["enableHTTPS"] = https;
      if (https) {
        YAML::Node tls;
        tls["caData"] = hami::kube::EncodeBase64(ca_pem);
        e["tlsConfig"] = tls;
      } else {
        e.remove("tlsConfig");
      }
    }
    // The stand-in holds no lease; one kube-scheduler runs.
    if (root["leaderElection"]) root["leaderElection"]["leaderElect"] = false;
    YAML::Emitter out;
    out << root;
    return std::string(out.c_str()) + "\n";
  } catch (const YAML::Exception& e) {
    return Error(ErrorCode::kInvalidArgument,
                 "KubeSchedulerConfiguration " + source + ": " + e.what());
  }
}

Result<ClusterInfo> Up(const ClusterOptions& options, std::FILE* out) {
  Starter s(options, out);
  auto up = s.Run();
  if (!up.ok()) {
    if (!s.info().components.empty()) {
      Say(out, "stopping what was started; logs are kept in " + options.dir +
                   "/logs (`hami sim cluster down --dir " + options.dir + "` removes them)");
      for (auto it = s.info().components.rbegin(); it != s.info().components.rend(); ++it) {
        if (!ComponentAlive(*it)) continue;
        kill(it->pid, SIGTERM);
        if (!WaitGone(it->pid, options.stop_timeout)) {
          kill(it->pid, SIGKILL);
          WaitGone(it->pid, std::chrono::seconds(5));
        }
      }
    }
    return std::move(up).error();
  }
  return up;
}

Status Down(const std::string& dir, std::chrono::seconds stop_timeout, std::FILE* out) {
  if (dir.empty() || dir[0] != '/') {
    return Error(ErrorCode::kInvalidArgument, "--dir '" + dir + "': must be an absolute path");
  }
  if (!Exists(dir)) {
    Say(out, "no simulated cluster in " + dir + " (nothing to do)");
    return OkStatus();
  }
  if (!Exists(dir + "/" + kMarkerFile)) {
    return Error(ErrorCode::kInvalidArgument, dir + " is not a simulated cluster's directory (no " +
                                                  kMarkerFile +
                                                  "); nothing was stopped or removed");
  }
  auto info = ReadClusterInfo(dir);
  if (info.ok()) {
    for (auto it = info->components.rbegin(); it != info->components.rend(); ++it) {
      if (!ComponentAlive(*it)) continue;
      kill(it->pid, SIGTERM);
      if (WaitGone(it->pid, stop_timeout)) {
        Say(out, "  stopped " + it->name + " (pid " + std::to_string(it->pid) + ")");
      } else {
        kill(it->pid, SIGKILL);
        WaitGone(it->pid, std::chrono::seconds(5));
        Say(out, "  killed " + it->name + " (pid " + std::to_string(it->pid) +
                     "): it did not stop within " + std::to_string(stop_timeout.count()) + " s");
      }
    }
  } else if (info.error().code() != ErrorCode::kNotFound) {
    Say(out, "  " + info.error().message() + "; stopping by environment only");
  }
  // What a node killed before it could stop its containerd leaves: pods still running, shims,
  // mounts, cgroups (a node that stopped cleanly left nothing, and this finds nothing).
  std::error_code ec;
  // (Before the sweep below, which would kill the shims before their sockets are known.)
  if (Exists(dir + "/nodes")) {
    for (const auto& node : fs::directory_iterator(dir + "/nodes", ec)) {
      const std::string runtime = node.path().string() + "/containerd";
      if (!Exists(runtime)) continue;
      if (Status s = cri::Containerd::CleanUpAfter(runtime); !s.ok()) {
        Say(out, "  " + s.error().message());
      }
    }
  }
  // Anything else this cluster started (a child a component left behind).
  const std::string mark = std::string(kClusterEnv) + "=" + dir;
  if (DIR* proc = opendir("/proc"); proc != nullptr) {
    std::vector<pid_t> left;
    while (dirent* e = readdir(proc)) {
      pid_t pid = pid_t(std::atoi(e->d_name));
      if (pid <= 0 || pid == getpid()) continue;
      auto env = ReadFileToString("/proc/" + std::to_string(pid) + "/environ", 1 << 20);
      if (!env.ok()) continue;
      size_t pos = 0;
      while (pos < env->size()) {
        size_t end = env->find('\0', pos);
        if (end == std::string::npos) end = env->size();
        if (env->compare(pos, end - pos, mark) == 0) left.push_back(pid);
        pos = end + 1;
      }
    }
    closedir(proc);
    for (pid_t pid : left) {
      kill(pid, SIGKILL);
      WaitGone(pid, std::chrono::seconds(5));
      Say(out, "  killed a leftover process of the cluster (pid " + std::to_string(pid) + ")");
    }
  }
  // The rest: every mount under the directory (the GPU toolkit's overlay), deepest first.
  if (auto mounts = cri::MountPointsUnder(dir); mounts.ok()) {
    std::sort(mounts->rbegin(), mounts->rend());
    for (const std::string& m : *mounts) {
      if (umount2(m.c_str(), MNT_DETACH) != 0) {
        Say(out, "  unmounting " + m + ": " + std::string(strerror(errno)));
      }
    }
  }
  fs::remove_all(dir, ec);
  if (ec) return Error(ErrorCode::kIo, "removing " + dir + ": " + ec.message());
  Say(out, "removed " + dir);
  return OkStatus();
}

}  // namespace hami::sim::cluster
