#include "sim/cluster/node_agent.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <csignal>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "common/strings.h"
#include "common/unique_fd.h"
#include "kube/client.h"
#include "kube/config.h"
#include "kube/event_recorder.h"
#include "kube/informer.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "sim/kubelet/kubelet.h"
#include "sim/kubelet/runtime.h"

namespace hami::sim::cluster {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
namespace rt = sim::runtime;

constexpr char kHostIp[] = "127.0.0.1";

std::string Now() { return hami::kube::FormatTime(std::chrono::system_clock::now()); }

// A key=value value, quoted when it needs to be.
std::string Quote(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \t\"\\=") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c == '\n' ? ' ' : c;
  }
  return out + "\"";
}

void Log(const std::string& line) {
  std::fprintf(stderr, "sim-node %s\n", line.c_str());
  std::fflush(stderr);
}

// `n` random bytes as 2n hex digits.
std::string RandomHex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  std::vector<uint8_t> bytes(n);
  for (uint8_t& b : bytes) b = uint8_t(rng());
  return HexEncode(bytes);
}

int PidfdOpen(pid_t pid) { return int(syscall(SYS_pidfd_open, pid, 0)); }
int PidfdSignal(int fd, int sig) {
  return int(syscall(SYS_pidfd_send_signal, fd, sig, nullptr, 0));
}

const json* Find(const json& j, std::initializer_list<const char*> path) {
  const json* cur = &j;
  for (const char* key : path) {
    if (!cur->is_object()) return nullptr;
    auto it = cur->find(key);
    if (it == cur->end()) return nullptr;
    cur = &*it;
  }
  return cur;
}

std::string StringAt(const json& j, std::initializer_list<const char*> path) {
  const json* v = Find(j, path);
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

Result<std::vector<std::string>> Strings(const json& j, const std::string& what) {
  std::vector<std::string> out;
  if (j.is_null()) return out;
  if (!j.is_array()) return Error(ErrorCode::kInvalidArgument, what + ": not a list of strings");
  for (const json& s : j) {
    if (!s.is_string()) return Error(ErrorCode::kInvalidArgument, what + ": not a list of strings");
    out.push_back(s.get<std::string>());
  }
  return out;
}

Result<int64_t> WholeCount(const json& v, const std::string& what) {
  std::string text = v.is_string() ? v.get<std::string>() : v.is_number() ? v.dump() : "";
  if (text.empty() || text.size() > 18 ||
      !std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return Error(ErrorCode::kInvalidArgument,
                 what + ": '" + (v.is_string() ? text : v.dump()) + "' is not a whole number");
  }
  return std::stoll(text);
}

}  // namespace

// ---- pure parts ----

Result<PodPlan> PlanPod(const json& pod, const std::string& host_ip,
                        const std::vector<std::string>& resources) {
  PodPlan plan;
  plan.ns = StringAt(pod, {"metadata", "namespace"});
  plan.name = StringAt(pod, {"metadata", "name"});
  plan.uid = StringAt(pod, {"metadata", "uid"});
  const std::string pod_ref = "pod " + plan.ns + "/" + plan.name;
  if (plan.name.empty() || plan.uid.empty()) {
    return Error(ErrorCode::kInvalidArgument, "a pod without metadata.name or metadata.uid");
  }
  const std::string policy = StringAt(pod, {"spec", "restartPolicy"});
  if (policy.empty() || policy == "Always") {
    plan.restart_policy = RestartPolicy::kAlways;
  } else if (policy == "OnFailure") {
    plan.restart_policy = RestartPolicy::kOnFailure;
  } else if (policy == "Never") {
    plan.restart_policy = RestartPolicy::kNever;
  } else {
    return Error(ErrorCode::kInvalidArgument, pod_ref + ": spec.restartPolicy '" + policy +
                                                  "' is not Always, OnFailure or Never");
  }
  if (const json* g = Find(pod, {"spec", "terminationGracePeriodSeconds"});
      g != nullptr && g->is_number_integer() && g->get<int64_t>() >= 0) {
    plan.grace_period = std::chrono::seconds(g->get<int64_t>());
  }
  const json* containers = Find(pod, {"spec", "containers"});
  if (containers == nullptr || !containers->is_array() || containers->empty()) {
    return Error(ErrorCode::kInvalidArgument, pod_ref + ": spec.containers is empty");
  }
  for (size_t i = 0; i < containers->size(); ++i) {
    const json& c = (*containers)[i];
    const std::string at = pod_ref + ": spec.containers[" + std::to_string(i) + "]";
    ContainerPlan cp;
    cp.name = c.is_object() ? c.value("name", "") : "";
    if (cp.name.empty()) return Error(ErrorCode::kInvalidArgument, at + ".name is empty");
    cp.command = HAMI_TRY(Strings(c.value("command", json()), at + ".command"));
    std::vector<std::string> args = HAMI_TRY(Strings(c.value("args", json()), at + ".args"));
    if (cp.command.empty()) {
      return Error(ErrorCode::kInvalidArgument,
                   at + " (" + cp.name +
                       "): no command (the simulated runtime runs no image entrypoint: give "
                       "`command`)");
    }
    cp.command.insert(cp.command.end(), args.begin(), args.end());
    cp.working_dir = c.value("workingDir", "");
    if (const json* env = Find(c, {"env"}); env != nullptr && env->is_array()) {
      for (size_t e = 0; e < env->size(); ++e) {
        const json& var = (*env)[e];
        const std::string eat = at + ".env[" + std::to_string(e) + "]";
        std::string name = var.is_object() ? var.value("name", "") : "";
        if (name.empty()) return Error(ErrorCode::kInvalidArgument, eat + ".name is empty");
        if (const json* v = Find(var, {"value"}); v != nullptr && v->is_string()) {
          cp.env[name] = v->get<std::string>();
          continue;
        }
        const json* from = Find(var, {"valueFrom"});
        if (from == nullptr) {
          cp.env[name] = "";
          continue;
        }
        std::string field = StringAt(*from, {"fieldRef", "fieldPath"});
        if (field == "metadata.name") {
          cp.env[name] = plan.name;
        } else if (field == "metadata.namespace") {
          cp.env[name] = plan.ns;
        } else if (field == "metadata.uid") {
          cp.env[name] = plan.uid;
        } else if (field == "spec.nodeName") {
          cp.env[name] = StringAt(pod, {"spec", "nodeName"});
        } else if (field == "status.hostIP" || field == "status.podIP") {
          cp.env[name] = host_ip;
        } else {
          return Error(ErrorCode::kInvalidArgument,
                       eat + " (" + name + "): valueFrom " + from->dump() +
                           " is not supported by the simulated kubelet (fieldRef "
                           "metadata.name, metadata.namespace, metadata.uid, spec.nodeName, "
                           "status.hostIP or status.podIP)");
        }
      }
    }
    if (const json* limits = Find(c, {"resources", "limits"}); limits != nullptr) {
      for (const std::string& r : resources) {
        auto it = limits->find(r);
        if (it == limits->end()) continue;
        int64_t n = HAMI_TRY(WholeCount(*it, at + ".resources.limits[" + r + "]"));
        if (n > 0) cp.devices[r] = n;
      }
    }
    plan.containers.push_back(std::move(cp));
  }
  return plan;
}

bool ShouldRestart(RestartPolicy policy, int exit_code) {
  switch (policy) {
    case RestartPolicy::kAlways:
      return true;
    case RestartPolicy::kOnFailure:
      return exit_code != 0;
    case RestartPolicy::kNever:
      return false;
  }
  return false;
}

std::chrono::milliseconds RestartBackoff(int restarts) {
  int64_t ms = 1000;
  for (int i = 1; i < restarts && ms < 30000; ++i) ms *= 2;
  return std::chrono::milliseconds(std::min<int64_t>(ms, 30000));
}

std::string PodPhase(const std::vector<ContainerState>& states) {
  if (states.empty()) return "Pending";
  bool all_done = true, any_failed = false, any_running = false;
  for (const ContainerState& s : states) {
    if (s.kind == ContainerState::Kind::kRunning || s.will_restart) any_running = true;
    if (s.kind != ContainerState::Kind::kTerminated || s.will_restart) all_done = false;
    if (s.kind == ContainerState::Kind::kTerminated && s.exit_code != 0) any_failed = true;
  }
  if (all_done) return any_failed ? "Failed" : "Succeeded";
  return any_running ? "Running" : "Pending";
}

json PodStatusJson(const PodPlan& plan, const std::vector<ContainerState>& states,
                   const std::string& host_ip, const std::string& start_time) {
  const std::string phase = PodPhase(states);
  const std::string now = Now();
  bool all_ready = !states.empty();
  json statuses = json::array();
  for (size_t i = 0; i < states.size() && i < plan.containers.size(); ++i) {
    const ContainerState& s = states[i];
    const bool running = s.kind == ContainerState::Kind::kRunning;
    all_ready = all_ready && running;
    json state;
    if (running) {
      state = {{"running", {{"startedAt", s.started_at}}}};
    } else if (s.kind == ContainerState::Kind::kTerminated) {
      json t = {{"exitCode", s.exit_code},
                {"reason", s.reason},
                {"startedAt", s.started_at.empty() ? now : s.started_at},
                {"finishedAt", s.finished_at.empty() ? now : s.finished_at}};
      if (!s.message.empty()) t["message"] = s.message;
      if (!s.container_id.empty()) t["containerID"] = s.container_id;
      state = {{"terminated", t}};
    } else {
      json w = {{"reason", s.reason}};
      if (!s.message.empty()) w["message"] = s.message;
      state = {{"waiting", w}};
    }
    json cs = {{"name", plan.containers[i].name},
               {"state", state},
               {"ready", running},
               {"started", running},
               {"restartCount", s.restart_count},
               {"image", "hami-sim"},
               {"imageID", ""}};
    if (!s.container_id.empty()) cs["containerID"] = s.container_id;
    statuses.push_back(std::move(cs));
  }
  auto condition = [&](const char* type, bool value) {
    return json{{"type", type},
                {"status", value ? "True" : "False"},
                {"lastProbeTime", nullptr},
                {"lastTransitionTime", now}};
  };
  const bool initialized = phase != "Pending" || !states.empty();
  json status = {
      {"phase", phase},
      {"hostIP", host_ip},
      {"hostIPs", json::array({{{"ip", host_ip}}})},
      {"podIP", host_ip},
      {"podIPs", json::array({{{"ip", host_ip}}})},
      {"startTime", start_time},
      {"qosClass", "BestEffort"},
      {"conditions",
       json::array({condition("PodScheduled", true), condition("Initialized", initialized),
                    condition("ContainersReady", all_ready), condition("Ready", all_ready)})},
      {"containerStatuses", statuses}};
  return status;
}

json NodeStatusJson(const NodeAgentOptions& options, const std::map<std::string, int64_t>& devices,
                    const std::string& now) {
  json resources = {{"cpu", std::to_string(options.cpu_millis) + "m"},
                    {"memory", std::to_string(options.memory_bytes / 1024) + "Ki"},
                    {"pods", std::to_string(options.max_pods)},
                    {"ephemeral-storage", "100Gi"}};
  for (const auto& [name, count] : devices) resources[name] = std::to_string(count);
  struct utsname u {};
  uname(&u);
  auto condition = [&](const char* type, const char* status, const char* reason,
                       const char* message) {
    return json{{"type", type},       {"status", status},         {"reason", reason},
                {"message", message}, {"lastHeartbeatTime", now}, {"lastTransitionTime", now}};
  };
  return {{"capacity", resources},
          {"allocatable", resources},
          {"conditions",
           json::array(
               {condition("MemoryPressure", "False", "KubeletHasSufficientMemory",
                          "kubelet has sufficient memory available"),
                condition("DiskPressure", "False", "KubeletHasNoDiskPressure",
                          "kubelet has no disk pressure"),
                condition("PIDPressure", "False", "KubeletHasSufficientPID",
                          "kubelet has sufficient PID available"),
                condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")})},
          {"addresses", json::array({{{"type", "InternalIP"}, {"address", kHostIp}},
                                     {{"type", "Hostname"}, {"address", options.name}}})},
          {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 10250}}}}},
          {"nodeInfo",
           {{"machineID", ""},
            {"systemUUID", ""},
            {"bootID", ""},
            {"kernelVersion", u.release},
            {"osImage", "hami simulated node"},
            {"containerRuntimeVersion", "hami-sim://1"},
            {"kubeletVersion", "v1.30.0-hami-sim"},
            {"kubeProxyVersion", ""},
            {"operatingSystem", "linux"},
            {"architecture", "amd64"}}}};
}

// ---- the agent ----

class PodWorker;

struct NodeAgent::Impl {
  NodeAgentOptions options;
  std::unique_ptr<hami::kube::Client> client;
  std::unique_ptr<hami::kube::EventRecorder> events;
  std::unique_ptr<kubelet::Kubelet> kubelet;
  std::unique_ptr<hami::kube::Informer> informer;

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  std::map<std::string, std::unique_ptr<PodWorker>> workers;  // by pod UID
  std::vector<std::unique_ptr<PodWorker>> dying;              // deleted pods ending
  std::jthread node_thread;
  bool stopped = false;

  Status EnsureNode();
  void PublishNodeStatus(const std::map<std::string, int64_t>& devices);
  void NodeLoop(std::stop_token stop);
  std::map<std::string, int64_t> HealthyDevices() const;
  void OnPod(const hami::kube::ObjectPtr& pod);
  void OnPodDeleted(const hami::kube::ObjectPtr& pod);
  void SweepLocked();
};

class PodWorker {
 public:
  PodWorker(NodeAgent::Impl* agent, PodPlan plan)
      : agent_(agent), plan_(std::move(plan)), states_(plan_.containers.size()) {
    pidfds_.resize(plan_.containers.size());
  }
  ~PodWorker() {
    Terminate(End::kDeleted);
    if (main_.joinable()) main_.join();
  }

  void Begin() {
    main_ = std::jthread([this] { Run(); });
  }
  enum class End {
    kDeleted,   // the object is gone: end the containers, write nothing
    kGraceful,  // deletionTimestamp: end the containers, then delete the object
  };
  // Asks the worker to end the pod's containers; returns at once.
  void Terminate(End how) {
    std::lock_guard<std::mutex> l(mu_);
    if (how == End::kDeleted) deleted_ = true;
    if (how == End::kGraceful) delete_object_ = true;
    terminating_ = true;
    cv_.notify_all();
  }
  bool done() const {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }

 private:
  void Run();
  void RunContainer(size_t i, const kubelet::ContainerAllocation& response);
  void WriteStatusLocked();
  void SignalAllLocked(int sig);
  // A kubelet event about the pod (or one of its containers: `container` not empty).
  void Event(hami::kube::EventType type, const std::string& reason, const std::string& message,
             const std::string& container = "") {
    hami::kube::ObjectReference ref{"v1", "Pod", plan_.ns, plan_.name, plan_.uid, "", ""};
    if (!container.empty()) ref.field_path = "spec.containers{" + container + "}";
    agent_->events->Record(ref, type, reason, message);
  }
  bool AllEndedLocked() const {
    return std::all_of(ended_.begin(), ended_.end(), [](bool e) { return e; });
  }

  NodeAgent::Impl* const agent_;
  const PodPlan plan_;
  const std::string start_time_ = Now();
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool terminating_ = false;
  bool deleted_ = false;
  bool delete_object_ = false;
  bool done_ = false;
  std::vector<ContainerState> states_;
  std::vector<UniqueFd> pidfds_;  // the running command of each container
  std::vector<bool> ended_;       // each container's runner has returned
  std::vector<std::jthread> runners_;
  std::jthread main_;
};

void PodWorker::WriteStatusLocked() {
  if (deleted_) return;
  json status = PodStatusJson(plan_, states_, kHostIp, start_time_);
  auto written =
      agent_->client->Patch(hami::kube::kPods, plan_.ns, plan_.name, hami::kube::PatchType::kMerge,
                            {{"status", status}}, "status");
  if (!written.ok() && written.error().code() != ErrorCode::kNotFound) {
    Log("event=status_failed pod=" + plan_.ns + "/" + plan_.name +
        " error=" + Quote(written.error().message()));
  }
}

void PodWorker::SignalAllLocked(int sig) {
  for (UniqueFd& fd : pidfds_) {
    if (fd.valid()) PidfdSignal(fd.get(), sig);
  }
}

void PodWorker::Run() {
  const std::string ref = plan_.ns + "/" + plan_.name;
  {
    std::lock_guard<std::mutex> l(mu_);
    WriteStatusLocked();
  }
  // Admission: the device manager's allocation for every container, before any starts.
  std::vector<kubelet::ContainerAllocation> responses(plan_.containers.size());
  for (size_t i = 0; i < plan_.containers.size(); ++i) {
    for (const auto& [resource, count] : plan_.containers[i].devices) {
      auto allocated = agent_->kubelet->AllocateContainer(plan_.uid, plan_.containers[i].name,
                                                          resource, int(count));
      if (!allocated.ok()) {
        const std::string message = "Pod was rejected: Allocate failed due to " +
                                    allocated.error().message() + ", which is unexpected";
        Log("event=admission_failed pod=" + ref + " container=" + plan_.containers[i].name +
            " error=" + Quote(allocated.error().message()));
        agent_->kubelet->ReleasePod(plan_.uid);
        Event(hami::kube::EventType::kWarning, "UnexpectedAdmissionError",
              "Allocate failed due to " + allocated.error().message() + ", which is unexpected");
        std::lock_guard<std::mutex> l(mu_);
        if (!deleted_) {
          // As the kubelet reports a rejected pod: no container ever started.
          json status = {{"phase", "Failed"},           {"reason", "UnexpectedAdmissionError"},
                         {"message", message},          {"hostIP", kHostIp},
                         {"startTime", start_time_},    {"conditions", nullptr},
                         {"containerStatuses", nullptr}};
          auto written =
              agent_->client->Patch(hami::kube::kPods, plan_.ns, plan_.name,
                                    hami::kube::PatchType::kMerge, {{"status", status}}, "status");
          if (!written.ok()) {
            Log("event=status_failed pod=" + ref + " error=" + Quote(written.error().message()));
          }
        }
        done_ = true;
        return;
      }
      kubelet::ContainerAllocation& r = responses[i];
      for (const auto& [k, v] : allocated->response.envs) r.envs[k] = v;
      r.mounts.insert(r.mounts.end(), allocated->response.mounts.begin(),
                      allocated->response.mounts.end());
      r.devices.insert(r.devices.end(), allocated->response.devices.begin(),
                       allocated->response.devices.end());
      Log("event=allocated pod=" + ref + " container=" + plan_.containers[i].name +
          " resource=" + resource + " devices=" + std::to_string(allocated->device_ids.size()));
    }
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    ended_.assign(plan_.containers.size(), false);
  }
  for (size_t i = 0; i < plan_.containers.size(); ++i) {
    runners_.emplace_back([this, i, response = responses[i]] { RunContainer(i, response); });
  }
  {
    std::unique_lock<std::mutex> l(mu_);
    cv_.wait(l, [this] { return terminating_ || AllEndedLocked(); });
    if (terminating_ && !AllEndedLocked()) {
      for (size_t i = 0; i < plan_.containers.size(); ++i) {
        if (!ended_[i]) {
          Event(hami::kube::EventType::kNormal, "Killing",
                "Stopping container " + plan_.containers[i].name, plan_.containers[i].name);
        }
      }
      SignalAllLocked(SIGTERM);
      const auto grace =
          std::min<std::chrono::seconds>(plan_.grace_period, agent_->options.max_grace_period);
      if (!cv_.wait_for(l, grace, [this] { return AllEndedLocked(); })) {
        Log("event=kill pod=" + ref + " reason=grace_period_over");
        SignalAllLocked(SIGKILL);
      }
    }
  }
  for (std::jthread& t : runners_) t.join();
  bool ended, delete_object;
  {
    std::lock_guard<std::mutex> l(mu_);
    ended = terminating_;
    delete_object = delete_object_ && !deleted_;
  }
  // The device manager frees the devices of a pod whose containers have all ended.
  agent_->kubelet->ReleasePod(plan_.uid);
  if (ended) {
    Log("event=pod_ended pod=" + ref + " devices=released");
    // The kubelet removes a gracefully deleted pod once its containers are gone.
    if (delete_object) (void)agent_->client->Delete(hami::kube::kPods, plan_.ns, plan_.name);
  } else {
    Log("event=pod_completed pod=" + ref);
  }
  std::lock_guard<std::mutex> l(mu_);
  done_ = true;
}

void PodWorker::RunContainer(size_t i, const kubelet::ContainerAllocation& response) {
  const ContainerPlan& c = plan_.containers[i];
  const NodeAgentOptions& o = agent_->options;
  const std::string ref = plan_.ns + "/" + plan_.name + "/" + c.name;
  const std::string log_path =
      o.pod_log_dir + "/" + plan_.ns + "_" + plan_.name + "_" + c.name + ".log";
  for (;;) {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (terminating_) break;
    }
    rt::ContainerSpec spec;
    spec.response = response;
    spec.command = c.command;
    spec.image_env = {{"PATH", std::string(kContainerBinDir) + ":" + kImagePath},
                      {"HOSTNAME", plan_.name},
                      {"HOME", "/root"}};
    for (const auto& [k, v] : o.image_env) spec.image_env[k] = v;
    for (const auto& [k, v] : c.env) spec.image_env[k] = v;
    // The NVIDIA container toolkit gives the container only the device nodes of the GPUs in
    // NVIDIA_VISIBLE_DEVICES; the simulated GPU has no device nodes, and CUDA_VISIBLE_DEVICES
    // says the same to it.
    if (auto v = response.envs.find("NVIDIA_VISIBLE_DEVICES");
        v != response.envs.end() && v->second.rfind("GPU-", 0) == 0 &&
        !c.env.contains("CUDA_VISIBLE_DEVICES")) {
      spec.image_env["CUDA_VISIBLE_DEVICES"] = v->second;
    }
    if (!c.working_dir.empty()) spec.working_dir = c.working_dir;
    if (!o.bin_dir.empty()) spec.host_mounts.push_back({kContainerBinDir, o.bin_dir, true});
    spec.driver_libs = o.driver_libs;
    spec.sim_state = o.sim_state;
    UniqueFd log(open(log_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644));
    UniqueFd null(open("/dev/null", O_RDONLY | O_CLOEXEC));
    spec.stdin_fd = null.get();
    spec.stdout_fd = log.valid() ? log.get() : -1;
    spec.stderr_fd = log.valid() ? log.get() : -1;

    auto started = log.valid() ? rt::StartContainer(spec)
                               : Result<std::unique_ptr<rt::Container>>(
                                     Error::FromErrno("opening the pod log " + log_path));
    int exit_code = 128;
    std::string reason, message;
    if (!started.ok()) {
      reason = "StartError";
      message = started.error().message();
      Log("event=start_failed container=" + ref + " error=" + Quote(message));
      Event(hami::kube::EventType::kWarning, "Failed", "Error: " + message, c.name);
      if (log.valid()) {
        std::string line = "hami sim node: " + message + "\n";
        (void)!write(log.get(), line.data(), line.size());
      }
    } else {
      std::unique_ptr<rt::Container> container = std::move(started).value();
      {
        std::lock_guard<std::mutex> l(mu_);
        ContainerState& s = states_[i];
        s.kind = ContainerState::Kind::kRunning;
        s.will_restart = false;
        s.reason.clear();
        s.message.clear();
        s.container_id = "sim://" + RandomHex(32);
        s.started_at = Now();
        pidfds_[i] = UniqueFd(PidfdOpen(container->pid()));
        if (terminating_ && pidfds_[i].valid()) PidfdSignal(pidfds_[i].get(), SIGTERM);
        WriteStatusLocked();
      }
      Log("event=started container=" + ref + " pid=" + std::to_string(container->pid()));
      Event(hami::kube::EventType::kNormal, "Started", "Started container " + c.name, c.name);
      auto waited = container->init().Wait();
      exit_code = waited.ok() ? *waited : 128;
      reason = exit_code == 0 ? "Completed" : "Error";
      if (!waited.ok()) message = waited.error().message();
      Log("event=exited container=" + ref + " exit_code=" + std::to_string(exit_code));
    }
    std::unique_lock<std::mutex> l(mu_);
    pidfds_[i].Reset();
    ContainerState& s = states_[i];
    s.kind = ContainerState::Kind::kTerminated;
    s.exit_code = exit_code;
    s.reason = reason;
    s.message = message;
    s.finished_at = Now();
    const bool again = !terminating_ && ShouldRestart(plan_.restart_policy, exit_code);
    s.will_restart = again;
    if (!again) {
      WriteStatusLocked();
      break;
    }
    s.restart_count += 1;
    const auto backoff = RestartBackoff(s.restart_count);
    s.kind = ContainerState::Kind::kWaiting;
    s.reason = "CrashLoopBackOff";
    s.message =
        "back-off " + std::to_string(backoff.count() / 1000) + "s restarting container " + c.name;
    Event(hami::kube::EventType::kWarning, "BackOff",
          "Back-off restarting failed container " + c.name + " in pod " + plan_.name, c.name);
    WriteStatusLocked();
    if (cv_.wait_for(l, backoff, [this] { return terminating_; })) {
      s.kind = ContainerState::Kind::kTerminated;
      s.will_restart = false;
      break;
    }
  }
  std::lock_guard<std::mutex> l(mu_);
  ended_[i] = true;
  cv_.notify_all();
}

std::map<std::string, int64_t> NodeAgent::Impl::HealthyDevices() const {
  std::map<std::string, int64_t> out;
  for (const std::string& r : options.resources) {
    int64_t n = 0;
    if (kubelet->Connected(r)) {
      for (const kubelet::Device& d : kubelet->Devices(r)) n += d.healthy() ? 1 : 0;
    }
    out[r] = n;
  }
  return out;
}

Status NodeAgent::Impl::EnsureNode() {
  const json labels = {{"kubernetes.io/hostname", options.name},
                       {"kubernetes.io/os", "linux"},
                       {"kubernetes.io/arch", "amd64"},
                       {"gpu", "on"}};
  auto existing = client->Get(hami::kube::kNodes, "", options.name);
  if (!existing.ok()) {
    if (existing.error().code() != ErrorCode::kNotFound) {
      return std::move(existing).error().Context("reading Node " + options.name);
    }
    auto created = client->Create(
        hami::kube::kNodes, "",
        {{"metadata", {{"name", options.name}, {"labels", labels}}}, {"spec", json::object()}});
    if (!created.ok()) return std::move(created).error().Context("creating Node " + options.name);
  } else {
    auto patched =
        client->Patch(hami::kube::kNodes, "", options.name, hami::kube::PatchType::kMerge,
                      {{"metadata", {{"labels", labels}}}});
    if (!patched.ok()) return std::move(patched).error().Context("labelling Node " + options.name);
  }
  return OkStatus();
}

void NodeAgent::Impl::PublishNodeStatus(const std::map<std::string, int64_t>& devices) {
  auto written = client->Patch(hami::kube::kNodes, "", options.name, hami::kube::PatchType::kMerge,
                               {{"status", NodeStatusJson(options, devices, Now())}}, "status");
  if (!written.ok()) {
    Log("event=node_status_failed node=" + options.name +
        " error=" + Quote(written.error().message()));
  }
}

void NodeAgent::Impl::NodeLoop(std::stop_token stop) {
  std::map<std::string, int64_t> last = HealthyDevices();
  PublishNodeStatus(last);
  auto next_heartbeat = Clock::now() + options.heartbeat;
  while (!stop.stop_requested()) {
    // The device lists change on the plugin's ListAndWatch; the kubelet offers no stop token
    // to wait with, so the wait is bounded and the stop checked between waits.
    const std::string& first = options.resources.front();
    (void)kubelet->WaitForDevices(first, kubelet->DeviceGeneration(first), 250);
    std::map<std::string, int64_t> now = HealthyDevices();
    if (now != last || Clock::now() >= next_heartbeat) {
      if (now != last) {
        std::string counts;
        for (const auto& [r, n] : now) counts += " " + r + "=" + std::to_string(n);
        Log("event=devices node=" + options.name + counts);
      }
      PublishNodeStatus(now);
      last = now;
      next_heartbeat = Clock::now() + options.heartbeat;
    }
  }
}

void NodeAgent::Impl::SweepLocked() {
  std::erase_if(dying, [](const std::unique_ptr<PodWorker>& w) { return w->done(); });
}

void NodeAgent::Impl::OnPod(const hami::kube::ObjectPtr& pod) {
  const std::string uid(hami::kube::MetadataString(*pod, "uid"));
  const bool deleting = Find(*pod, {"metadata", "deletionTimestamp"}) != nullptr &&
                        !(*pod)["metadata"]["deletionTimestamp"].is_null();
  std::lock_guard<std::mutex> l(mu);
  SweepLocked();
  if (stopping) return;
  auto it = workers.find(uid);
  if (it != workers.end()) {
    if (deleting) it->second->Terminate(PodWorker::End::kGraceful);
    return;
  }
  const std::string phase = StringAt(*pod, {"status", "phase"});
  if (deleting || phase == "Succeeded" || phase == "Failed") return;
  auto plan = PlanPod(*pod, kHostIp, options.resources);
  if (!plan.ok()) {
    Log("event=pod_refused pod=" + std::string(hami::kube::MetadataString(*pod, "namespace")) +
        "/" + std::string(hami::kube::MetadataString(*pod, "name")) +
        " error=" + Quote(plan.error().message()));
    (void)client->Patch(hami::kube::kPods, hami::kube::MetadataString(*pod, "namespace"),
                        hami::kube::MetadataString(*pod, "name"), hami::kube::PatchType::kMerge,
                        {{"status",
                          {{"phase", "Failed"},
                           {"reason", "CreateContainerConfigError"},
                           {"message", plan.error().message()}}}},
                        "status");
    return;
  }
  Log("event=pod_added pod=" + plan->ns + "/" + plan->name + " uid=" + plan->uid);
  auto worker = std::make_unique<PodWorker>(this, std::move(plan).value());
  worker->Begin();
  workers.emplace(uid, std::move(worker));
}

void NodeAgent::Impl::OnPodDeleted(const hami::kube::ObjectPtr& pod) {
  const std::string uid(hami::kube::MetadataString(*pod, "uid"));
  std::lock_guard<std::mutex> l(mu);
  SweepLocked();
  auto it = workers.find(uid);
  if (it == workers.end()) return;
  Log("event=pod_deleted pod=" + std::string(hami::kube::MetadataString(*pod, "namespace")) + "/" +
      std::string(hami::kube::MetadataString(*pod, "name")));
  it->second->Terminate(PodWorker::End::kDeleted);
  dying.push_back(std::move(it->second));
  workers.erase(it);
}

Result<std::unique_ptr<NodeAgent>> NodeAgent::Start(NodeAgentOptions options) {
  if (options.name.empty()) return Error(ErrorCode::kInvalidArgument, "--name: empty node name");
  if (options.resources.empty()) {
    return Error(ErrorCode::kInvalidArgument, "no device-plugin resource to manage");
  }
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  Impl& m = *impl;
  auto config = hami::kube::LoadConfig(m.options.kubeconfig);
  if (!config.ok()) return std::move(config).error().Context("kubeconfig");
  hami::kube::ClientOptions co;
  co.qps = 50;
  co.burst = 100;
  co.user_agent = "hami-sim-kubelet";
  auto client = hami::kube::Client::Create(std::move(config).value(), co);
  if (!client.ok()) return std::move(client).error().Context("API client");
  m.client = std::move(client).value();
  hami::kube::EventRecorderOptions eo;
  eo.component = "kubelet";
  eo.instance = m.options.name;
  m.events = std::make_unique<hami::kube::EventRecorder>(*m.client, eo);
  HAMI_TRY(m.EnsureNode());

  kubelet::KubeletOptions ko;
  ko.dir = m.options.device_plugin_dir;
  m.kubelet = std::make_unique<kubelet::Kubelet>(ko);
  if (Status s = m.kubelet->Start(); !s.ok()) {
    return std::move(s).error().Context("device manager on " + ko.dir);
  }
  m.node_thread = std::jthread([&m](std::stop_token stop) { m.NodeLoop(stop); });

  hami::kube::InformerScope scope;
  scope.field_selector = "spec.nodeName=" + m.options.name;
  m.informer = std::make_unique<hami::kube::Informer>(*m.client, hami::kube::kPods, scope);
  m.informer->AddHandler(
      {.on_add = [&m](const hami::kube::ObjectPtr& p) { m.OnPod(p); },
       .on_update = [&m](const hami::kube::ObjectPtr&,
                         const hami::kube::ObjectPtr& p) { m.OnPod(p); },
       .on_delete = [&m](const hami::kube::ObjectPtr& p) { m.OnPodDeleted(p); }});
  m.informer->Start();
  Log("event=start node=" + m.options.name + " device_plugin_dir=" + m.options.device_plugin_dir +
      " pod_log_dir=" + m.options.pod_log_dir);
  return std::unique_ptr<NodeAgent>(new NodeAgent(std::move(impl)));
}

NodeAgent::NodeAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NodeAgent::~NodeAgent() { Stop(); }

void NodeAgent::Stop() {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  m.informer->Stop();
  std::map<std::string, std::unique_ptr<PodWorker>> workers;
  std::vector<std::unique_ptr<PodWorker>> dying;
  {
    std::lock_guard<std::mutex> l(m.mu);
    m.stopping = true;
    workers.swap(m.workers);
    dying.swap(m.dying);
  }
  for (auto& [uid, w] : workers) w->Terminate(PodWorker::End::kDeleted);
  workers.clear();  // each destructor waits for its containers to end
  dying.clear();
  m.node_thread.request_stop();
  if (m.node_thread.joinable()) m.node_thread.join();
  m.kubelet->Stop();
  m.events->Flush(Clock::now() + std::chrono::seconds(2));
  Log("event=stop node=" + m.options.name);
}

size_t NodeAgent::active_pods() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->workers.size();
}

}  // namespace hami::sim::cluster
