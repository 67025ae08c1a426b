#include "sim/cluster/node_agent.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
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
#include "sim/cluster/cdi.h"
#include "sim/cluster/cri_config.h"
#include "sim/cluster/gpu_toolkit.h"
#include "sim/cluster/kubelet_server.h"
#include "sim/cri/containerd.h"
#include "sim/kubelet/kubelet.h"
#include "sim/oci/blob.h"
#include "sim/oci/image.h"

namespace hami::sim::cluster {

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

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

// How long the node waits before starting a dead containerd again: containerd.service's
// RestartSec.
constexpr std::chrono::seconds kRuntimeRestartDelay{5};

int64_t MsSince(Clock::time_point from) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - from).count();
}

// A CRI time (nanoseconds since the epoch) as the API writes times.
std::string TimeOfNanos(int64_t ns) {
  return hami::kube::FormatTime(std::chrono::system_clock::time_point(
      std::chrono::duration_cast<std::chrono::system_clock::duration>(
          std::chrono::nanoseconds(ns))));
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
  for (const char* field : {"labels", "annotations"}) {
    const json* m = Find(pod, {"metadata", field});
    if (m == nullptr || !m->is_object()) continue;
    auto& out = std::string_view(field) == "labels" ? plan.labels : plan.annotations;
    for (const auto& [k, v] : m->items()) {
      if (v.is_string()) out[k] = v.get<std::string>();
    }
  }
  if (const json* v = Find(pod, {"spec", "hostNetwork"}); v != nullptr && v->is_boolean()) {
    plan.host_network = v->get<bool>();
  }
  if (const json* v = Find(pod, {"spec", "hostPID"}); v != nullptr && v->is_boolean()) {
    plan.host_pid = v->get<bool>();
  }
  if (const json* v = Find(pod, {"spec", "shareProcessNamespace"});
      v != nullptr && v->is_boolean()) {
    plan.share_process_namespace = v->get<bool>();
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
  if (const json* volumes = Find(pod, {"spec", "volumes"}); volumes != nullptr) {
    if (!volumes->is_array()) {
      return Error(ErrorCode::kInvalidArgument, pod_ref + ": spec.volumes is not a list");
    }
    for (size_t i = 0; i < volumes->size(); ++i) {
      const json& v = (*volumes)[i];
      const std::string at = pod_ref + ": spec.volumes[" + std::to_string(i) + "]";
      const std::string name = v.is_object() ? v.value("name", "") : "";
      if (name.empty()) return Error(ErrorCode::kInvalidArgument, at + ".name is empty");
      VolumePlan vp;
      if (const json* hp = Find(v, {"hostPath"}); hp != nullptr) {
        vp.host_path = StringAt(*hp, {"path"});
        const std::string type = StringAt(*hp, {"type"});
        if (vp.host_path.empty() || vp.host_path[0] != '/') {
          return Error(ErrorCode::kInvalidArgument,
                       at + " (" + name + "): hostPath.path must be an absolute path");
        }
        if (type != "" && type != "DirectoryOrCreate") {
          return Error(ErrorCode::kInvalidArgument,
                       at + " (" + name + "): hostPath.type '" + type +
                           "': the simulated node offers \"\" and DirectoryOrCreate only");
        }
        vp.create = type == "DirectoryOrCreate";
      } else if (Find(v, {"emptyDir"}) != nullptr) {
        vp.kind = VolumePlan::Kind::kEmptyDir;
      } else {
        return Error(
            ErrorCode::kInvalidArgument,
            at + " (" + name + "): the simulated node offers hostPath and emptyDir volumes only");
      }
      plan.volumes[name] = vp;
    }
  }
  std::set<std::string> pod_claims;
  if (const json* rc = Find(pod, {"spec", "resourceClaims"}); rc != nullptr && rc->is_array()) {
    for (const json& c : *rc) {
      if (c.is_object()) pod_claims.insert(c.value("name", ""));
    }
  }
  plan.uses_claims =
      !pod_claims.empty() ||
      !StringAt(pod, {"status", "extendedResourceClaimStatus", "resourceClaimName"}).empty();
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
    cp.image = c.value("image", json()).is_string() ? c["image"].get<std::string>() : "";
    if (cp.image.empty()) {
      return Error(ErrorCode::kInvalidArgument, at + " (" + cp.name + "): image is empty");
    }
    cp.command = HAMI_TRY(Strings(c.value("command", json()), at + ".command"));
    cp.args = HAMI_TRY(Strings(c.value("args", json()), at + ".args"));
    cp.working_dir = c.value("workingDir", "");
    if (const json* mounts = Find(c, {"volumeMounts"}); mounts != nullptr && mounts->is_array()) {
      for (size_t m = 0; m < mounts->size(); ++m) {
        const json& vm = (*mounts)[m];
        const std::string mat = at + ".volumeMounts[" + std::to_string(m) + "]";
        VolumeMountPlan mp;
        mp.volume = vm.is_object() ? vm.value("name", "") : "";
        mp.mount_path = vm.is_object() ? vm.value("mountPath", "") : "";
        mp.read_only = vm.is_object() && vm.value("readOnly", false);
        if (!plan.volumes.contains(mp.volume)) {
          return Error(ErrorCode::kInvalidArgument,
                       mat + ": no volume named '" + mp.volume + "' in spec.volumes");
        }
        if (mp.mount_path.empty() || mp.mount_path[0] != '/') {
          return Error(ErrorCode::kInvalidArgument,
                       mat + ".mountPath '" + mp.mount_path + "' is not an absolute path");
        }
        cp.volume_mounts.push_back(mp);
      }
    }
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
    if (const json* claims = Find(c, {"resources", "claims"});
        claims != nullptr && claims->is_array()) {
      for (size_t k = 0; k < claims->size(); ++k) {
        const json& rc = (*claims)[k];
        ContainerClaimPlan cc;
        cc.name = rc.is_object() ? rc.value("name", "") : "";
        cc.request = rc.is_object() ? rc.value("request", "") : "";
        if (!pod_claims.contains(cc.name)) {
          return Error(ErrorCode::kInvalidArgument, at + ".resources.claims[" + std::to_string(k) +
                                                        "].name '" + cc.name +
                                                        "' is not in spec.resourceClaims");
        }
        cp.claims.push_back(std::move(cc));
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

Result<std::vector<PodClaimRef>> PodClaimRefs(const json& pod) {
  std::vector<PodClaimRef> out;
  const std::string pod_ref =
      "pod " + StringAt(pod, {"metadata", "namespace"}) + "/" + StringAt(pod, {"metadata", "name"});
  const json* statuses = Find(pod, {"status", "resourceClaimStatuses"});
  if (const json* rc = Find(pod, {"spec", "resourceClaims"}); rc != nullptr && rc->is_array()) {
    for (size_t i = 0; i < rc->size(); ++i) {
      const json& c = (*rc)[i];
      const std::string at = pod_ref + ": spec.resourceClaims[" + std::to_string(i) + "]";
      const std::string name = c.is_object() ? c.value("name", "") : "";
      const std::string claim = StringAt(c, {"resourceClaimName"});
      const std::string tmpl = StringAt(c, {"resourceClaimTemplateName"});
      if (name.empty()) return Error(ErrorCode::kInvalidArgument, at + ".name is empty");
      if (claim.empty() == tmpl.empty()) {
        return Error(ErrorCode::kInvalidArgument,
                     at + " (" + name +
                         "): exactly one of resourceClaimName and resourceClaimTemplateName "
                         "must be set");
      }
      if (!claim.empty()) {
        out.push_back({name, claim});
        continue;
      }
      const json* entry = nullptr;
      if (statuses != nullptr && statuses->is_array()) {
        for (const json& s : *statuses) {
          if (s.is_object() && s.value("name", "") == name) entry = &s;
        }
      }
      if (entry == nullptr) {
        return Error(ErrorCode::kUnavailable,
                     at + " (" + name + "): the claim of template " + tmpl +
                         " is not named in status.resourceClaimStatuses yet");
      }
      const std::string generated = StringAt(*entry, {"resourceClaimName"});
      if (!generated.empty()) out.push_back({name, generated});
    }
  }
  const std::string extended =
      StringAt(pod, {"status", "extendedResourceClaimStatus", "resourceClaimName"});
  if (!extended.empty()) out.push_back({"", extended});
  return out;
}

Result<kubelet::DraClaim> CheckedClaim(const json& claim, const std::string& pod_uid) {
  kubelet::DraClaim out;
  out.ns = StringAt(claim, {"metadata", "namespace"});
  out.name = StringAt(claim, {"metadata", "name"});
  out.uid = StringAt(claim, {"metadata", "uid"});
  const std::string ref = "ResourceClaim " + out.ns + "/" + out.name;
  if (out.uid.empty()) return Error(ErrorCode::kInvalidArgument, ref + " has no metadata.uid");
  const json* allocation = Find(claim, {"status", "allocation"});
  if (allocation == nullptr || allocation->is_null()) {
    return Error(ErrorCode::kUnavailable, ref + " is not allocated yet (no status.allocation)");
  }
  bool reserved = false;
  std::string holders;
  if (const json* r = Find(claim, {"status", "reservedFor"}); r != nullptr && r->is_array()) {
    for (const json& e : *r) {
      const std::string uid = StringAt(e, {"uid"});
      holders += (holders.empty() ? "" : ", ") + StringAt(e, {"name"}) + " (" + uid + ")";
      reserved = reserved || uid == pod_uid;
    }
  }
  if (!reserved) {
    return Error(ErrorCode::kUnavailable, ref + " is not reserved for pod UID " + pod_uid +
                                              " (status.reservedFor: [" + holders + "])");
  }
  if (const json* results = Find(*allocation, {"devices", "results"});
      results != nullptr && results->is_array()) {
    for (size_t i = 0; i < results->size(); ++i) {
      const std::string driver = StringAt((*results)[i], {"driver"});
      if (driver.empty()) {
        return Error(ErrorCode::kInvalidArgument, ref + ": status.allocation.devices.results[" +
                                                      std::to_string(i) + "] has no driver");
      }
      if (std::find(out.drivers.begin(), out.drivers.end(), driver) == out.drivers.end()) {
        out.drivers.push_back(driver);
      }
    }
  }
  return out;
}

std::map<std::string, std::vector<std::string>> ContainerCdiIds(
    const json& pod, const std::vector<PodClaimRef>& refs,
    const std::map<std::string, std::vector<kubelet::DraDevice>>& devices) {
  std::map<std::string, std::vector<std::string>> out;
  auto devices_of = [&](const std::string& claim) -> const std::vector<kubelet::DraDevice>* {
    auto it = devices.find(claim);
    return it == devices.end() ? nullptr : &it->second;
  };
  auto add = [](std::vector<std::string>& ids, const kubelet::DraDevice& d) {
    for (const std::string& id : d.cdi_device_ids) {
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  };
  // A device without request names serves every request of its claim, as the kubelet reads it.
  auto has_request = [](const kubelet::DraDevice& d, const std::string& request) {
    return d.request_names.empty() || std::find(d.request_names.begin(), d.request_names.end(),
                                                request) != d.request_names.end();
  };
  std::string extended;
  for (const PodClaimRef& r : refs) {
    if (r.pod_claim.empty()) extended = r.claim;
  }
  const json* containers = Find(pod, {"spec", "containers"});
  if (containers == nullptr || !containers->is_array()) return out;
  for (const json& c : *containers) {
    if (!c.is_object()) continue;
    const std::string name = c.value("name", "");
    std::vector<std::string>& ids = out[name];
    if (const json* claims = Find(c, {"resources", "claims"});
        claims != nullptr && claims->is_array()) {
      for (const json& cc : *claims) {
        const std::string pod_claim = StringAt(cc, {"name"});
        const std::string request = StringAt(cc, {"request"});
        for (const PodClaimRef& r : refs) {
          if (r.pod_claim.empty() || r.pod_claim != pod_claim) continue;
          if (const auto* list = devices_of(r.claim)) {
            for (const kubelet::DraDevice& d : *list) {
              if (request.empty() || has_request(d, request)) add(ids, d);
            }
          }
        }
      }
    }
    const json* mappings = Find(pod, {"status", "extendedResourceClaimStatus", "requestMappings"});
    if (!extended.empty() && mappings != nullptr && mappings->is_array()) {
      if (const auto* list = devices_of(extended)) {
        for (const json& m : *mappings) {
          if (StringAt(m, {"containerName"}) != name) continue;
          const std::string request = StringAt(m, {"requestName"});
          for (const kubelet::DraDevice& d : *list) {
            if (has_request(d, request)) add(ids, d);
          }
        }
      }
    }
  }
  return out;
}

std::string PodCgroupPath(const PodPlan& plan) {
  // Every simulated pod is BestEffort: it sets no cpu or memory requests the node enforces.
  return "kubepods/besteffort/pod" + plan.uid;
}

bool GetsGpu(const ContainerPlan& container) {
  if (!container.devices.empty()) return true;
  auto v = container.env.find("NVIDIA_VISIBLE_DEVICES");
  return v != container.env.end() && !v->second.empty() && v->second != "void" &&
         v->second != "none";
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
                   const std::string& host_ip, const std::string& start_time,
                   const std::string& not_ready) {
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
               {"image", plan.containers[i].image},
               {"imageID", s.image_id}};
    if (!s.container_id.empty()) cs["containerID"] = s.container_id;
    statuses.push_back(std::move(cs));
  }
  auto condition = [&](const char* type, bool value) {
    json c = {{"type", type},
              {"status", value ? "True" : "False"},
              {"lastProbeTime", nullptr},
              {"lastTransitionTime", now}};
    return c;
  };
  auto readiness = [&](const char* type) {
    json c = condition(type, all_ready && not_ready.empty());
    if (all_ready && !not_ready.empty()) {
      c["reason"] = "ContainerRuntimeDown";
      c["message"] = not_ready;
    }
    return c;
  };
  const bool initialized = phase != "Pending" || !states.empty();
  json status = {{"phase", phase},
                 {"hostIP", host_ip},
                 {"hostIPs", json::array({{{"ip", host_ip}}})},
                 {"podIP", host_ip},
                 {"podIPs", json::array({{{"ip", host_ip}}})},
                 {"startTime", start_time},
                 {"qosClass", "BestEffort"},
                 {"conditions", json::array({condition("PodScheduled", true),
                                             condition("Initialized", initialized),
                                             readiness("ContainersReady"), readiness("Ready")})},
                 {"containerStatuses", statuses}};
  return status;
}

json NodeStatusJson(const NodeAgentOptions& options, const std::map<std::string, int64_t>& devices,
                    const std::string& runtime_version, const std::string& now, int kubelet_port,
                    const std::string& not_ready) {
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
                not_ready.empty()
                    ? condition("Ready", "True", "KubeletReady", "kubelet is posting ready status")
                    : condition("Ready", "False", "KubeletNotReady", not_ready.c_str())})},
          {"addresses", json::array({{{"type", "InternalIP"}, {"address", kHostIp}},
                                     {{"type", "Hostname"}, {"address", options.name}}})},
          {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", kubelet_port}}}}},
          {"nodeInfo",
           {{"machineID", ""},
            {"systemUUID", ""},
            {"bootID", ""},
            {"kernelVersion", u.release},
            {"osImage", "hami simulated node"},
            {"containerRuntimeVersion", runtime_version},
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
  std::unique_ptr<kubelet::DraManager> dra;  // with options.dra_registry_dir
  std::unique_ptr<cri::Containerd> containerd;
  std::unique_ptr<KubeletServer> kubelet_server;  // exec; started once the runtime is up
  std::unique_ptr<GpuToolkit> toolkit;
  NodeAdditions additions;
  std::unique_ptr<hami::kube::Informer> informer;
  std::string runtime_version;  // "containerd://1.6.20"

  std::mutex mu;
  bool stopping = false;
  std::map<std::string, std::unique_ptr<PodWorker>> workers;  // by pod UID
  std::vector<std::unique_ptr<PodWorker>> dying;              // deleted pods ending
  std::jthread node_thread;
  std::jthread pleg_thread;
  std::jthread runtime_thread;
  std::mutex runtime_mu;
  std::string runtime_down;  // why the runtime is down ("" while it answers); runtime_mu
  bool stopped = false;

  // The pod lifecycle event generator: relists the runtime's containers every
  // options.relist_period and wakes the workers waiting on a container's exit.
  std::mutex pleg_mu;
  std::condition_variable pleg_cv;
  std::map<std::string, cri::v1::ContainerState> container_states;  // guarded by pleg_mu
  bool pleg_stopping = false;                                       // guarded by pleg_mu

  cri::CriClient& cri() { return containerd->client(); }
  std::string RuntimeDown() {
    std::lock_guard<std::mutex> l(runtime_mu);
    return runtime_down;
  }
  // Records the runtime's state, then rewrites the Node's and every pod's status.
  void SetRuntimeDown(const std::string& why);
  // Watches containerd; when it exits, reports the node not ready and starts it again after
  // kRuntimeRestartDelay, as its service unit would, then relists what it runs.
  void RuntimeLoop(std::stop_token stop);
  Status EnsureNode();
  void PublishNodeStatus(const std::map<std::string, int64_t>& devices);
  void NodeLoop(std::stop_token stop);
  void PlegLoop(std::stop_token stop);
  // Wakes every worker waiting in WaitForExit (a pod is terminating).
  void WakeWaiters();
  std::map<std::string, int64_t> HealthyDevices() const;
  void OnPod(const hami::kube::ObjectPtr& pod);
  void OnPodDeleted(const hami::kube::ObjectPtr& pod);
  void SweepLocked();
  // containerd, the images, the GPU toolkit and the mounts every container gets.
  Status StartRuntime();
  void StopRuntime();
};

class PodWorker {
 public:
  PodWorker(NodeAgent::Impl* agent, PodPlan plan)
      : agent_(agent),
        plan_(std::move(plan)),
        states_(plan_.containers.size()),
        created_(plan_.containers.size()) {}
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
    {
      std::lock_guard<std::mutex> l(mu_);
      if (how == End::kDeleted) deleted_ = true;
      if (how == End::kGraceful) delete_object_ = true;
      terminating_ = true;
      cv_.notify_all();
    }
    agent_->WakeWaiters();
  }
  bool done() const {
    std::lock_guard<std::mutex> l(mu_);
    return done_;
  }
  bool terminating() const {
    std::lock_guard<std::mutex> l(mu_);
    return terminating_;
  }
  void RefreshStatus() {
    std::lock_guard<std::mutex> l(mu_);
    if (!done_) WriteStatusLocked();
  }

 private:
  void Run();
  void RunContainer(size_t i, const kubelet::ContainerAllocation& response, bool gpu);
  // The pod's claims prepared (see node_agent.h), cdi_ids_ set; an error says why not yet.
  Status PrepareClaims();
  // The claims no other pod uses, unprepared once the pod's containers are gone.
  void UnprepareClaims();
  // Waits until the PLEG sees container `id` exited, or the pod is terminating: true for an
  // exit.
  bool WaitForExit(const std::string& id);
  // Waits `delay` unless the pod starts terminating: false when it does.
  bool Backoff(std::chrono::milliseconds delay) {
    std::unique_lock<std::mutex> l(mu_);
    return !cv_.wait_for(l, delay, [this] { return terminating_; });
  }
  void WriteStatusLocked();
  void Waiting(size_t i, const std::string& reason, const std::string& message) {
    std::lock_guard<std::mutex> l(mu_);
    ContainerState& s = states_[i];
    s.kind = ContainerState::Kind::kWaiting;
    s.reason = reason;
    s.message = message;
    WriteStatusLocked();
  }
  // A kubelet event about the pod (or one of its containers: `container` not empty).
  void Event(hami::kube::EventType type, const std::string& reason, const std::string& message,
             const std::string& container = "") {
    hami::kube::ObjectReference ref{"v1", "Pod", plan_.ns, plan_.name, plan_.uid, "", ""};
    if (!container.empty()) ref.field_path = "spec.containers{" + container + "}";
    agent_->events->Record(ref, type, reason, message);
  }
  // The pod's volumes on the host (emptyDir made under PodDir()).
  Status PrepareVolumes();
  std::string PodDir() const { return agent_->options.dir + "/pods/" + plan_.uid; }
  Status StartSandbox();
  // Records container `id` of container `i`; removes the dead ones before the previous (and
  // their logs), as the kubelet's garbage collector keeps one dead container per container.
  void RecordCreated(size_t i, const std::string& id, int attempt);
  void RemoveContainer(size_t i, const std::string& id, int attempt);
  void RemoveSandbox();

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
  cri::v1::PodSandboxConfig sandbox_config_;
  std::string sandbox_id_;
  std::map<std::string, std::string> volume_paths_;  // volume name -> host path
  std::vector<std::vector<std::string>> cdi_ids_;    // per container, once prepared
  int64_t admit_ms_ = 0;                             // the device manager's allocations
  int64_t sandbox_ms_ = 0;                           // the last RunPodSandbox
  // The containers created and not removed, per container, oldest first, with their attempt;
  // guarded by mu_.
  std::vector<std::vector<std::pair<std::string, int>>> created_;
  std::vector<std::jthread> runners_;
  std::jthread main_;
};

void PodWorker::WriteStatusLocked() {
  if (deleted_) return;
  json status = PodStatusJson(plan_, states_, kHostIp, start_time_, agent_->RuntimeDown());
  auto written =
      agent_->client->Patch(hami::kube::kPods, plan_.ns, plan_.name, hami::kube::PatchType::kMerge,
                            {{"status", status}}, "status");
  if (!written.ok() && written.error().code() != ErrorCode::kNotFound) {
    Log("event=status_failed pod=" + plan_.ns + "/" + plan_.name +
        " error=" + Quote(written.error().message()));
  }
}

Status PodWorker::PrepareVolumes() {
  std::error_code ec;
  for (const auto& [name, v] : plan_.volumes) {
    std::string path = v.host_path;
    if (v.kind == VolumePlan::Kind::kEmptyDir) {
      path = PodDir() + "/volumes/kubernetes.io~empty-dir/" + name;
    }
    if (v.kind == VolumePlan::Kind::kEmptyDir || v.create) {
      std::filesystem::create_directories(path, ec);
      if (ec) return Error(ErrorCode::kIo, "volume " + name + ": " + path + ": " + ec.message());
    }
    volume_paths_[name] = path;
  }
  return OkStatus();
}

Status PodWorker::StartSandbox() {
  const NodeAgentOptions& o = agent_->options;
  sandbox_config_ = SandboxConfigFor(plan_, o.pod_log_dir,
                                     agent_->containerd->PodCgroupParent(PodCgroupPath(plan_)), 0);
  std::error_code ec;
  std::filesystem::create_directories(sandbox_config_.log_directory(), ec);
  if (ec) {
    return Error(ErrorCode::kIo, "the pod's log directory " + sandbox_config_.log_directory() +
                                     ": " + ec.message());
  }
  sandbox_id_ = HAMI_TRY(agent_->cri().RunPodSandbox(sandbox_config_));
  Log("event=sandbox pod=" + plan_.ns + "/" + plan_.name + " id=" + sandbox_id_);
  return OkStatus();
}

void PodWorker::RemoveContainer(size_t i, const std::string& id, int attempt) {
  if (Status s = agent_->cri().RemoveContainer(id);
      !s.ok() && s.error().code() != ErrorCode::kNotFound) {
    Log("event=remove_failed container=" + id + " error=" + Quote(s.error().message()));
  }
  const std::string log =
      sandbox_config_.log_directory() + "/" + ContainerLogPath(plan_.containers[i].name, attempt);
  unlink(log.c_str());
}

void PodWorker::RecordCreated(size_t i, const std::string& id, int attempt) {
  std::vector<std::pair<std::string, int>> old;
  {
    std::lock_guard<std::mutex> l(mu_);
    auto& list = created_[i];
    list.emplace_back(id, attempt);
    while (list.size() > 2) {
      old.push_back(list.front());
      list.erase(list.begin());
    }
  }
  for (const auto& [old_id, old_attempt] : old) RemoveContainer(i, old_id, old_attempt);
}

void PodWorker::RemoveSandbox() {
  std::vector<std::vector<std::pair<std::string, int>>> created;
  {
    std::lock_guard<std::mutex> l(mu_);
    created = created_;
    for (auto& list : created_) list.clear();
  }
  // Removing a container does not remove its log here: the pod's logs stay for `kubectl logs`
  // until the node's directory goes.
  for (const auto& list : created) {
    for (const auto& [id, attempt] : list) {
      if (Status s = agent_->cri().RemoveContainer(id);
          !s.ok() && s.error().code() != ErrorCode::kNotFound) {
        Log("event=remove_failed container=" + id + " error=" + Quote(s.error().message()));
      }
    }
  }
  cri::CriClient& cri = agent_->cri();
  if (sandbox_id_.empty()) return;
  for (Status s : {cri.StopPodSandbox(sandbox_id_), cri.RemovePodSandbox(sandbox_id_)}) {
    if (!s.ok() && s.error().code() != ErrorCode::kNotFound) {
      Log("event=sandbox_teardown_failed pod=" + plan_.ns + "/" + plan_.name +
          " error=" + Quote(s.error().message()));
    }
  }
}

Status PodWorker::PrepareClaims() {
  if (!agent_->dra) {
    return Error(ErrorCode::kUnsupported,
                 "the pod uses resource claims and this node runs no DRA manager (it was "
                 "started without a plugins-registry directory)");
  }
  // The pod as it is now: the status names template and KEP-5004 claims.
  auto pod = agent_->client->Get(hami::kube::kPods, plan_.ns, plan_.name);
  if (!pod.ok()) return std::move(pod).error().Context("reading the pod");
  if (hami::kube::MetadataString(*pod, "uid") != plan_.uid) {
    return Error(ErrorCode::kConflict, "the pod was replaced by another of the same name");
  }
  const std::vector<PodClaimRef> refs = HAMI_TRY(PodClaimRefs(*pod));
  std::vector<kubelet::DraClaim> claims;
  for (const PodClaimRef& r : refs) {
    auto claim = agent_->client->Get(hami::kube::kResourceClaims, plan_.ns, r.claim);
    if (!claim.ok()) {
      return std::move(claim).error().Context("ResourceClaim " + plan_.ns + "/" + r.claim);
    }
    claims.push_back(HAMI_TRY(CheckedClaim(*claim, plan_.uid)));
  }
  const auto prepared = agent_->dra->Prepare(plan_.uid, claims);
  std::string errors;
  std::map<std::string, std::vector<kubelet::DraDevice>> devices;  // by claim name
  for (const kubelet::DraClaim& c : claims) {
    auto it = prepared.find(c.uid);
    if (it == prepared.end()) continue;
    if (!it->second.error.empty()) {
      errors += (errors.empty() ? "" : "; ") + ("claim " + c.name + ": " + it->second.error);
      continue;
    }
    devices[c.name] = it->second.devices;
  }
  if (!errors.empty()) return Error(ErrorCode::kUnavailable, errors);
  const auto ids = ContainerCdiIds(*pod, refs, devices);
  for (size_t i = 0; i < plan_.containers.size(); ++i) {
    auto it = ids.find(plan_.containers[i].name);
    if (it != ids.end()) cdi_ids_[i] = it->second;
  }
  Log("event=claims_prepared pod=" + plan_.ns + "/" + plan_.name +
      " claims=" + std::to_string(claims.size()));
  return OkStatus();
}

void PodWorker::UnprepareClaims() {
  if (!agent_->dra) return;
  for (const auto& [uid, error] : agent_->dra->Unprepare(plan_.uid)) {
    // The node's heartbeat tries it again (NodeLoop).
    Log("event=unprepare_failed pod=" + plan_.ns + "/" + plan_.name + " claim_uid=" + uid +
        " error=" + Quote(error));
  }
}

void PodWorker::Run() {
  const std::string ref = plan_.ns + "/" + plan_.name;
  {
    std::lock_guard<std::mutex> l(mu_);
    WriteStatusLocked();
  }
  // Admission: the device manager's allocation for every container, before any starts.
  const auto admit_from = Clock::now();
  std::vector<kubelet::ContainerAllocation> responses(plan_.containers.size());
  for (size_t i = 0; i < plan_.containers.size(); ++i) {
    for (const auto& [resource, count] : plan_.containers[i].devices) {
      // A DRA node's allocatable lists no resource that no device plugin registered: the
      // kubelet drops such a request at admission (KEP-5004 serves it through a claim).
      if (agent_->dra && !agent_->kubelet->Plugin(resource).has_value()) {
        Log("event=extended_resource_dropped pod=" + ref +
            " container=" + plan_.containers[i].name + " resource=" + resource);
        continue;
      }
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
      for (const auto& [k, v] : allocated->response.annotations) r.annotations[k] = v;
      Log("event=allocated pod=" + ref + " container=" + plan_.containers[i].name +
          " resource=" + resource + " devices=" + std::to_string(allocated->device_ids.size()));
    }
  }
  admit_ms_ = MsSince(admit_from);
  // The pod's claims, prepared before its sandbox; retried until they are or the pod ends.
  cdi_ids_.assign(plan_.containers.size(), {});
  bool prepared = !plan_.uses_claims;
  for (int attempt = 1; !prepared && !terminating(); ++attempt) {
    Status s = PrepareClaims();
    if (s.ok()) {
      prepared = true;
      break;
    }
    Log("event=prepare_failed pod=" + ref + " error=" + Quote(s.error().message()));
    Event(hami::kube::EventType::kWarning, "FailedPrepareDynamicResources",
          "Failed to prepare dynamic resources: " + s.error().message());
    if (!Backoff(RestartBackoff(attempt))) break;
  }
  // The sandbox, retried with the containers' backoff until it runs or the pod ends.
  for (int attempt = 1; prepared; ++attempt) {
    if (terminating()) break;
    if (Status v = PrepareVolumes(); !v.ok()) {
      Log("event=volumes_failed pod=" + ref + " error=" + Quote(v.error().message()));
      Event(hami::kube::EventType::kWarning, "FailedMount",
            "MountVolume.SetUp failed: " + v.error().message());
      if (!Backoff(RestartBackoff(attempt))) break;
      continue;
    }
    const auto sandbox_from = Clock::now();
    Status s = StartSandbox();
    sandbox_ms_ = MsSince(sandbox_from);
    if (s.ok()) break;
    Log("event=sandbox_failed pod=" + ref + " error=" + Quote(s.error().message()));
    Event(hami::kube::EventType::kWarning, "FailedCreatePodSandBox",
          "Failed to create pod sandbox: " + s.error().message());
    if (!Backoff(RestartBackoff(attempt))) break;
  }
  if (!sandbox_id_.empty()) {
    for (size_t i = 0; i < plan_.containers.size(); ++i) {
      runners_.emplace_back([this, i, response = responses[i]] {
        RunContainer(i, response, GetsGpu(plan_.containers[i]) || !cdi_ids_[i].empty());
      });
    }
    for (std::jthread& t : runners_) t.join();
  }
  RemoveSandbox();
  std::error_code ec;
  std::filesystem::remove_all(PodDir(), ec);  // emptyDir volumes end with the pod
  agent_->toolkit->RemovePod(plan_.uid);      // and its containers' device-nodes files
  bool ended, delete_object;
  {
    std::lock_guard<std::mutex> l(mu_);
    ended = terminating_;
    delete_object = delete_object_ && !deleted_;
  }
  // The device manager frees the devices of a pod whose containers have all ended, and the
  // DRA manager its claims.
  agent_->kubelet->ReleasePod(plan_.uid);
  if (plan_.uses_claims) UnprepareClaims();
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

bool PodWorker::WaitForExit(const std::string& id) {
  NodeAgent::Impl& a = *agent_;
  std::unique_lock<std::mutex> l(a.pleg_mu);
  bool exited = false;
  a.pleg_cv.wait(l, [&] {
    auto it = a.container_states.find(id);
    exited = it != a.container_states.end() && it->second == cri::v1::CONTAINER_EXITED;
    return exited || a.pleg_stopping || terminating();
  });
  return exited;
}

void PodWorker::RunContainer(size_t i, const kubelet::ContainerAllocation& response, bool gpu) {
  const ContainerPlan& c = plan_.containers[i];
  const std::string ref = plan_.ns + "/" + plan_.name + "/" + c.name;
  cri::CriClient& cri = agent_->cri();
  int attempt = 0;   // the restart count
  int failures = 0;  // image and create failures in a row, for their backoff
  while (!terminating()) {
    // The image: the node pulls nothing (there is no registry); only what it imported runs.
    auto image = cri.ImageStatus(c.image);
    if (!image.ok()) {
      ++failures;
      const std::string message =
          "Failed to pull image \"" + c.image + "\": " + image.error().message() +
          " (the simulated node pulls no image: it runs " + oci::kBaseImage + ")";
      Log("event=image_missing container=" + ref + " error=" + Quote(image.error().message()));
      Event(hami::kube::EventType::kWarning, "Failed", message, c.name);
      Waiting(i, failures == 1 ? "ErrImagePull" : "ImagePullBackOff",
              failures == 1 ? message : "Back-off pulling image \"" + c.image + "\"");
      if (!Backoff(RestartBackoff(failures))) break;
      continue;
    }
    if (failures == 0 && attempt == 0) {
      Event(hami::kube::EventType::kNormal, "Pulled",
            "Container image \"" + c.image + "\" already present on machine", c.name);
    }
    std::vector<kubelet::Mount> volumes;
    for (const VolumeMountPlan& vm : c.volume_mounts) {
      volumes.push_back({vm.mount_path, volume_paths_.at(vm.volume), vm.read_only});
    }
    // The container's CDI devices, resolved here as a runtime with CDI would (cdi.h): their
    // edits join the device plugin's answer; a failure fails the create.
    kubelet::ContainerAllocation effective = response;
    Result<std::string> device_nodes = std::string();
    if (!cdi_ids_[i].empty()) {
      auto edits = ResolveCdiDevices(agent_->options.cdi_dirs, cdi_ids_[i]);
      if (edits.ok()) {
        for (const auto& [k, v] : edits->env) effective.envs[k] = v;
        effective.mounts.insert(effective.mounts.end(), edits->mounts.begin(), edits->mounts.end());
        effective.devices.insert(effective.devices.end(), edits->devices.begin(),
                                 edits->devices.end());
        effective.cdi_devices = cdi_ids_[i];
      } else {
        device_nodes = std::move(edits).error().Context("resolving the container's CDI devices");
      }
    }
    // A GPU container's device nodes, from the toolkit: its failure fails the create, as the
    // toolkit's hook fails a real one.
    if (gpu && device_nodes.ok()) {
      device_nodes = agent_->toolkit->WriteDeviceNodes(plan_.uid, c, effective);
    }
    cri::v1::ContainerConfig config =
        ContainerConfigFor(plan_, c, effective, agent_->additions,
                           device_nodes.ok() ? *device_nodes : "", attempt, volumes);
    std::error_code ec;
    std::filesystem::create_directories(sandbox_config_.log_directory() + "/" + c.name, ec);
    const auto create_from = Clock::now();
    auto created = device_nodes.ok() ? cri.CreateContainer(sandbox_id_, config, sandbox_config_)
                                     : Result<std::string>(device_nodes.error());
    const int64_t create_ms = MsSince(create_from);
    if (!created.ok()) {
      ++failures;
      const std::string message = created.error().message();
      Log("event=create_failed container=" + ref + " error=" + Quote(message));
      Event(hami::kube::EventType::kWarning, "Failed", "Error: " + message, c.name);
      Waiting(i, "CreateContainerError", message);
      if (!Backoff(RestartBackoff(failures))) break;
      continue;
    }
    failures = 0;
    const std::string id = *created;
    RecordCreated(i, id, attempt);
    Event(hami::kube::EventType::kNormal, "Created", "Created container " + c.name, c.name);
    const auto start_from = Clock::now();
    Status started = cri.StartContainer(id);
    const int64_t start_ms = MsSince(start_from);
    if (started.ok()) {
      {
        std::lock_guard<std::mutex> l(mu_);
        ContainerState& s = states_[i];
        s.kind = ContainerState::Kind::kRunning;
        s.will_restart = false;
        s.reason.clear();
        s.message.clear();
        s.container_id = "containerd://" + id;
        s.image_id = image->id();
        s.started_at = Now();
        WriteStatusLocked();
      }
      // The node's share of a pod's start: its CRI calls (and the device manager's Allocate).
      Log("event=started container=" + ref + " id=" + id + " attempt=" + std::to_string(attempt) +
          " admit_ms=" + std::to_string(admit_ms_) + " sandbox_ms=" + std::to_string(sandbox_ms_) +
          " create_ms=" + std::to_string(create_ms) + " start_ms=" + std::to_string(start_ms));
      Event(hami::kube::EventType::kNormal, "Started", "Started container " + c.name, c.name);
      if (!WaitForExit(id) && terminating()) {
        Event(hami::kube::EventType::kNormal, "Killing", "Stopping container " + c.name, c.name);
        const auto grace =
            std::min<std::chrono::seconds>(plan_.grace_period, agent_->options.max_grace_period);
        if (Status s = cri.StopContainer(id, grace.count()); !s.ok()) {
          Log("event=stop_failed container=" + ref + " error=" + Quote(s.error().message()));
        }
      }
    } else {
      Log("event=start_failed container=" + ref + " error=" + Quote(started.error().message()));
      Event(hami::kube::EventType::kWarning, "Failed", "Error: " + started.error().message(),
            c.name);
    }
    // The exit as the runtime reports it.
    int exit_code = 128;
    std::string reason = "Error", message, finished_at = Now(), started_at;
    if (auto status = cri.ContainerStatus(id); status.ok()) {
      const cri::v1::ContainerStatus& st = status->status();
      exit_code = st.exit_code();
      if (!st.reason().empty()) reason = st.reason();
      message = st.message();
      if (st.finished_at() > 0) finished_at = TimeOfNanos(st.finished_at());
      if (st.started_at() > 0) started_at = TimeOfNanos(st.started_at());
    } else {
      message = status.error().message();
    }
    if (!started.ok() && message.empty()) message = started.error().message();
    Log("event=exited container=" + ref + " exit_code=" + std::to_string(exit_code) +
        " reason=" + reason);
    std::unique_lock<std::mutex> l(mu_);
    ContainerState& s = states_[i];
    s.kind = ContainerState::Kind::kTerminated;
    s.exit_code = exit_code;
    s.reason = reason;
    s.message = message;
    s.container_id = "containerd://" + id;
    if (!started_at.empty()) s.started_at = started_at;
    s.finished_at = finished_at;
    const bool again = !terminating_ && ShouldRestart(plan_.restart_policy, exit_code);
    s.will_restart = again;
    if (!again) {
      WriteStatusLocked();
      break;
    }
    s.restart_count += 1;
    attempt = s.restart_count;
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
}

void NodeAgent::Impl::SetRuntimeDown(const std::string& why) {
  {
    std::lock_guard<std::mutex> l(runtime_mu);
    if (runtime_down == why) return;
    runtime_down = why;
  }
  PublishNodeStatus(HealthyDevices());
  std::lock_guard<std::mutex> l(mu);
  for (auto& [uid, worker] : workers) worker->RefreshStatus();
}

void NodeAgent::Impl::RuntimeLoop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    std::optional<int> exited = containerd->WaitForExit(250);
    if (!exited) continue;
    const std::string down = "container runtime is down: containerd exited with status " +
                             std::to_string(*exited) + " (its log: " + containerd->paths().log +
                             ")";
    Log("event=runtime_down node=" + options.name + " exit_status=" + std::to_string(*exited));
    SetRuntimeDown(down);
    bool restarted = false;
    for (int attempt = 1; !stop.stop_requested(); ++attempt) {
      std::mutex m;
      std::condition_variable_any timer;
      std::unique_lock<std::mutex> l(m);
      if (timer.wait_for(l, stop, kRuntimeRestartDelay, [] { return false; })) break;
      l.unlock();
      if (Status s = containerd->Restart(); !s.ok()) {
        Log("event=runtime_restart_failed node=" + options.name +
            " attempt=" + std::to_string(attempt) + " error=" + Quote(s.error().message()));
        SetRuntimeDown(down + "; restarting it failed: " + s.error().message());
        continue;
      }
      restarted = true;
      break;
    }
    if (!restarted) break;
    // What the runtime still runs: its shims kept the sandboxes and containers while it was
    // away; the workers carry on with the IDs they hold.
    auto sandboxes = cri().ListPodSandbox();
    auto containers = cri().ListContainers();
    Log("event=runtime_restarted node=" + options.name +
        " start_ms=" + std::to_string(containerd->start_ms()) + " sandboxes=" +
        (sandboxes.ok() ? std::to_string(sandboxes->size()) : Quote(sandboxes.error().message())) +
        " containers=" +
        (containers.ok() ? std::to_string(containers->size())
                         : Quote(containers.error().message())));
    SetRuntimeDown("");
  }
}

void NodeAgent::Impl::WakeWaiters() {
  { std::lock_guard<std::mutex> l(pleg_mu); }
  pleg_cv.notify_all();
}

void NodeAgent::Impl::PlegLoop(std::stop_token stop) {
  while (!stop.stop_requested()) {
    auto listed = containerd->client().ListContainers();
    if (listed.ok()) {
      std::map<std::string, cri::v1::ContainerState> now;
      for (const cri::v1::Container& c : *listed) now[c.id()] = c.state();
      bool changed;
      {
        std::lock_guard<std::mutex> l(pleg_mu);
        changed = now != container_states;
        container_states = std::move(now);
      }
      if (changed) pleg_cv.notify_all();
    } else {
      Log("event=relist_failed node=" + options.name + " error=" + Quote(listed.error().message()));
    }
    // The relist period: a timer that a stop request cuts short.
    std::mutex m;
    std::condition_variable_any timer;
    std::unique_lock<std::mutex> l(m);
    timer.wait_for(l, stop, options.relist_period, [] { return false; });
  }
  std::lock_guard<std::mutex> l(pleg_mu);
  pleg_stopping = true;
  pleg_cv.notify_all();
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
                               {{"status", NodeStatusJson(options, devices, runtime_version, Now(),
                                                          kubelet_server->port(), RuntimeDown())}},
                               "status");
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
      if (dra && Clock::now() >= next_heartbeat) {
        // Claims whose unprepare failed (no pod uses them): sent again.
        for (const auto& [uid, error] : dra->Unprepare("")) {
          Log("event=unprepare_failed claim_uid=" + uid + " error=" + Quote(error));
        }
      }
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

Status NodeAgent::Impl::StartRuntime() {
  const NodeAgentOptions& o = options;
  cri::ContainerdOptions co;
  co.dir = o.dir + "/containerd";
  co.cgroup_parent = o.cgroup_parent;
  co.log_level = o.containerd_log_level;
  auto started = cri::Containerd::Start(co);
  if (!started.ok()) return std::move(started).error().Context("the node's containerd");
  containerd = std::move(started).value();
  auto version = containerd->client().Version(5000);
  if (version.ok()) {
    runtime_version = version->runtime_name() + "://" + version->runtime_version();
  }
  const std::string images = o.dir + "/images";
  std::error_code ec;
  std::filesystem::create_directories(images, ec);
  if (ec)
    return Error(ErrorCode::kIo, "the node's image directory " + images + ": " + ec.message());
  oci::ImageDefinition pause = HAMI_TRY(oci::PauseImage(o.pause_program));
  HAMI_TRY(oci::WriteImageLayout(pause, images + "/pause.tar"));
  HAMI_TRY(containerd->ImportImage(images + "/pause.tar", pause.name));
  const oci::ImageDefinition base = oci::BaseImage();
  HAMI_TRY(oci::WriteImageLayout(base, images + "/base.tar"));
  HAMI_TRY(containerd->ImportImage(images + "/base.tar", base.name));
  toolkit =
      HAMI_TRY(GpuToolkit::Prepare(o.dir + "/toolkit", o.driver_libs, o.sim_state, o.image_env));

  additions.envs = o.image_env;
  if (!o.bin_dir.empty()) {
    additions.envs["PATH"] = std::string(kContainerBinDir) + ":" + kImagePath;
    additions.mounts.push_back({kContainerBinDir, o.bin_dir, true});
  }
  additions.gpu_mounts = toolkit->mounts();
  additions.plain_mounts = HostUserlandMounts();
  Log("event=runtime node=" + o.name + " version=" + runtime_version + " socket=" +
      containerd->paths().socket + " start_ms=" + std::to_string(containerd->start_ms()));
  return OkStatus();
}

void NodeAgent::Impl::StopRuntime() {
  if (containerd) {
    if (Status s = containerd->Stop(); !s.ok()) {
      Log("event=runtime_stop_failed node=" + options.name +
          " error=" + Quote(s.error().message()));
    }
  }
  if (toolkit) {
    if (Status s = toolkit->Unmount(); !s.ok()) {
      Log("event=toolkit_unmount_failed node=" + options.name +
          " error=" + Quote(s.error().message()));
    }
  }
}

Result<std::unique_ptr<NodeAgent>> NodeAgent::Start(NodeAgentOptions options) {
  if (options.name.empty()) return Error(ErrorCode::kInvalidArgument, "--name: empty node name");
  if (options.resources.empty()) {
    return Error(ErrorCode::kInvalidArgument, "no device-plugin resource to manage");
  }
  if (options.dir.empty() || options.dir[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 "--dir: the node's directory must be an absolute path, not '" + options.dir + "'");
  }
  if (options.cgroup_parent.empty()) {
    // Unique per node directory, so that two clusters on one machine never share cgroups.
    auto digest = oci::Sha256Digest(options.dir);
    if (!digest.ok()) return std::move(digest).error().Context("naming the node's cgroup parent");
    options.cgroup_parent = "hami-sim/" + options.name + "-" + digest->substr(7, 12);
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
  HAMI_TRY(m.StartRuntime());
  m.kubelet_server = HAMI_TRY(KubeletServer::Start(m.containerd->client(), m.options.name));
  HAMI_TRY(m.EnsureNode());

  kubelet::KubeletOptions ko;
  ko.dir = m.options.device_plugin_dir;
  m.kubelet = std::make_unique<kubelet::Kubelet>(ko);
  if (Status s = m.kubelet->Start(); !s.ok()) {
    return std::move(s).error().Context("device manager on " + ko.dir);
  }
  if (!m.options.dra_registry_dir.empty()) {
    kubelet::DraManagerOptions dro;
    dro.registry_dir = m.options.dra_registry_dir;
    m.dra = std::make_unique<kubelet::DraManager>(dro);
    if (Status s = m.dra->Start(); !s.ok()) {
      return std::move(s).error().Context("DRA manager on " + dro.registry_dir);
    }
  }
  m.node_thread = std::jthread([&m](std::stop_token stop) { m.NodeLoop(stop); });
  m.pleg_thread = std::jthread([&m](std::stop_token stop) { m.PlegLoop(stop); });
  m.runtime_thread = std::jthread([&m](std::stop_token stop) { m.RuntimeLoop(stop); });

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
      " pod_log_dir=" + m.options.pod_log_dir +
      (m.options.dra_registry_dir.empty() ? ""
                                          : " dra_registry_dir=" + m.options.dra_registry_dir));
  return std::unique_ptr<NodeAgent>(new NodeAgent(std::move(impl)));
}

NodeAgent::NodeAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

NodeAgent::~NodeAgent() { Stop(); }

void NodeAgent::Stop() {
  Impl& m = *impl_;
  if (m.stopped) return;
  m.stopped = true;
  m.kubelet_server->Stop();
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
  m.pleg_thread.request_stop();
  if (m.pleg_thread.joinable()) m.pleg_thread.join();
  m.runtime_thread.request_stop();
  if (m.runtime_thread.joinable()) m.runtime_thread.join();
  m.kubelet->Stop();
  if (m.dra) {
    for (const auto& [uid, error] : m.dra->Unprepare("")) {
      Log("event=unprepare_failed claim_uid=" + uid + " error=" + Quote(error));
    }
    m.dra->Stop();
  }
  m.StopRuntime();
  m.events->Flush(Clock::now() + std::chrono::seconds(2));
  Log("event=stop node=" + m.options.name);
}

size_t NodeAgent::active_pods() const {
  std::lock_guard<std::mutex> l(impl_->mu);
  return impl_->workers.size();
}

}  // namespace hami::sim::cluster
