#include "sim/kube/scheduler_standin.h"

#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <condition_variable>
#include <exception>
#include <limits>
#include <mutex>
#include <set>
#include <stop_token>
#include <thread>
#include <tuple>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "common/file.h"
#include "common/quote.h"
#include "kube/base64.h"
#include "kube/event_recorder.h"
#include "kube/http.h"
#include "kube/informer.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "log/log.h"
#include "sim/kube/dra_claim_controller.h"
#include "sim/kube/dra_scheduling.h"

namespace hami::sim::kube {
namespace {

using hami::kube::ObjectPtr;
using nlohmann::json;
using SteadyTime = std::chrono::steady_clock::time_point;

constexpr size_t kMaxConfigBytes = 1 << 20;
constexpr size_t kMaxPemBytes = 1 << 20;
constexpr int64_t kDefaultAllocatablePods = 110;
constexpr std::string_view kApiVersion = "kubescheduler.config.k8s.io/v1";

// ---- Configuration ------------------------------------------------------------------------------

class ConfigReader {
 public:
  explicit ConfigReader(std::string_view file) : prefix_("KubeSchedulerConfiguration ") {
    prefix_ += file.empty() ? std::string("(unnamed)") : std::string(file);
  }

  Error Fail(std::string_view field, std::string_view what,
             ErrorCode code = ErrorCode::kInvalidArgument) const {
    std::string msg = prefix_ + ": ";
    if (!field.empty()) msg += std::string(field) + ": ";
    msg += what;
    return Error(code, std::move(msg));
  }

  static bool Present(const YAML::Node& n) { return n.IsDefined() && !n.IsNull(); }

  Status OnlyKeys(const YAML::Node& map, std::initializer_list<std::string_view> keys,
                  const std::string& field) const {
    for (auto it = map.begin(); it != map.end(); ++it) {
      if (!it->first.IsScalar()) return Fail(field, "a key is not a string");
      const std::string& key = it->first.Scalar();
      if (std::find(keys.begin(), keys.end(), key) == keys.end()) {
        return Fail(field.empty() ? key : field + "." + key, "unknown field");
      }
    }
    return OkStatus();
  }

  Result<std::string> String(const YAML::Node& map, const char* key,
                             const std::string& field) const {
    const YAML::Node n = map[key];
    if (!Present(n)) return std::string();
    if (!n.IsScalar()) return Fail(field, "not a string");
    return n.Scalar();
  }

  Result<bool> Bool(const YAML::Node& map, const char* key, const std::string& field) const {
    const YAML::Node n = map[key];
    if (!Present(n)) return false;
    bool b = false;
    if (!n.IsScalar() || !YAML::convert<bool>::decode(n, b)) {
      return Fail(field, "not a boolean" + (n.IsScalar() ? ": " + QuoteInput(n.Scalar()) : ""));
    }
    return b;
  }

  Result<int64_t> Int(const YAML::Node& map, const char* key, const std::string& field,
                      int64_t absent) const {
    const YAML::Node n = map[key];
    if (!Present(n)) return absent;
    int64_t v = 0;
    if (!n.IsScalar() || !YAML::convert<int64_t>::decode(n, v)) {
      return Fail(field, "not an integer" + (n.IsScalar() ? ": " + QuoteInput(n.Scalar()) : ""));
    }
    return v;
  }

  // A *File field's content, or a *Data field's base64-decoded bytes; both must be PEM.
  Result<std::string> Pem(const YAML::Node& tls, const char* file_key, const char* data_key,
                          const std::string& field, std::string* file_out) const {
    std::string data_field = field + "." + data_key;
    std::string data = HAMI_TRY(String(tls, data_key, data_field));
    std::string file_field = field + "." + file_key;
    *file_out = HAMI_TRY(String(tls, file_key, file_field));
    if (!data.empty() && !file_out->empty()) {
      return Fail(field, std::string(file_key) + " and " + data_key + " are both set");
    }
    std::string pem;
    if (!data.empty()) {
      auto decoded = hami::kube::DecodeBase64(data);
      if (!decoded.ok()) return Fail(data_field, decoded.error().message());
      pem = std::move(*decoded);
    } else if (!file_out->empty()) {
      auto read = ReadFileToString(*file_out, kMaxPemBytes, Symlinks::kFollow);
      if (!read.ok()) return Fail(file_field, read.error().message(), read.error().code());
      pem = std::move(*read);
    } else {
      return std::string();
    }
    if (pem.find("-----BEGIN ") == std::string::npos) {
      return Fail(data.empty() ? file_field : data_field, "not PEM (no -----BEGIN line)");
    }
    return pem;
  }

  Result<ExtenderConfig> Extender(const YAML::Node& e, const std::string& field) const {
    if (!e.IsMap()) return Fail(field, "not a mapping");
    HAMI_TRY(OnlyKeys(e,
                      {"urlPrefix", "filterVerb", "preemptVerb", "prioritizeVerb", "weight",
                       "bindVerb", "enableHTTPS", "tlsConfig", "httpTimeout", "nodeCacheCapable",
                       "managedResources", "ignorable"},
                      field));
    ExtenderConfig x;
    x.url_prefix = HAMI_TRY(String(e, "urlPrefix", field + ".urlPrefix"));
    if (x.url_prefix.empty()) return Fail(field + ".urlPrefix", "missing");
    if (x.url_prefix.rfind("http://", 0) != 0 && x.url_prefix.rfind("https://", 0) != 0) {
      return Fail(field + ".urlPrefix",
                  QuoteInput(x.url_prefix) + " is not an http:// or https:// URL");
    }
    if (x.url_prefix.find_first_of(" \t\r\n") != std::string::npos) {
      return Fail(field + ".urlPrefix", "contains white space");
    }
    x.filter_verb = HAMI_TRY(String(e, "filterVerb", field + ".filterVerb"));
    x.preempt_verb = HAMI_TRY(String(e, "preemptVerb", field + ".preemptVerb"));
    x.prioritize_verb = HAMI_TRY(String(e, "prioritizeVerb", field + ".prioritizeVerb"));
    x.bind_verb = HAMI_TRY(String(e, "bindVerb", field + ".bindVerb"));
    x.weight = HAMI_TRY(Int(e, "weight", field + ".weight", 0));
    if (!x.prioritize_verb.empty() && x.weight <= 0) {
      return Fail(field + ".weight", "must be positive when prioritizeVerb is set (got " +
                                         std::to_string(x.weight) + ")");
    }
    x.enable_https = HAMI_TRY(Bool(e, "enableHTTPS", field + ".enableHTTPS"));
    x.node_cache_capable = HAMI_TRY(Bool(e, "nodeCacheCapable", field + ".nodeCacheCapable"));
    x.ignorable = HAMI_TRY(Bool(e, "ignorable", field + ".ignorable"));

    const YAML::Node timeout = e["httpTimeout"];
    if (Present(timeout)) {
      if (!timeout.IsScalar()) return Fail(field + ".httpTimeout", "not a duration string");
      auto d = ParseGoDuration(timeout.Scalar(), "");
      if (!d.ok()) return Fail(field + ".httpTimeout", d.error().message());
      if (d->count() < 0) {
        return Fail(field + ".httpTimeout",
                    QuoteInput(timeout.Scalar()) + ": must not be negative");
      }
      if (d->count() > 0) {
        // Rounded up to a millisecond: the transport's unit; a positive timeout stays positive.
        x.http_timeout = std::chrono::ceil<std::chrono::milliseconds>(*d);
      }
    }

    const YAML::Node tls = e["tlsConfig"];
    if (Present(tls)) {
      std::string tf = field + ".tlsConfig";
      if (!tls.IsMap()) return Fail(tf, "not a mapping");
      HAMI_TRY(OnlyKeys(tls,
                        {"insecure", "serverName", "certFile", "keyFile", "caFile", "certData",
                         "keyData", "caData"},
                        tf));
      x.tls.insecure = HAMI_TRY(Bool(tls, "insecure", tf + ".insecure"));
      std::string server_name = HAMI_TRY(String(tls, "serverName", tf + ".serverName"));
      if (!server_name.empty()) {
        return Fail(tf + ".serverName", "not supported by the stand-in", ErrorCode::kUnsupported);
      }
      x.tls.cert_data = HAMI_TRY(Pem(tls, "certFile", "certData", tf, &x.tls.cert_file));
      x.tls.key_data = HAMI_TRY(Pem(tls, "keyFile", "keyData", tf, &x.tls.key_file));
      x.tls.ca_data = HAMI_TRY(Pem(tls, "caFile", "caData", tf, &x.tls.ca_file));
      if (x.tls.cert_data.empty() != x.tls.key_data.empty()) {
        return Fail(tf, x.tls.cert_data.empty() ? "a client key without a certificate"
                                                : "a client certificate without a key");
      }
    }

    const YAML::Node managed = e["managedResources"];
    if (Present(managed)) {
      std::string mf = field + ".managedResources";
      if (!managed.IsSequence()) return Fail(mf, "not a list");
      for (size_t i = 0; i < managed.size(); ++i) {
        std::string rf = mf + "[" + std::to_string(i) + "]";
        const YAML::Node r = managed[i];
        if (!r.IsMap()) return Fail(rf, "not a mapping");
        HAMI_TRY(OnlyKeys(r, {"name", "ignoredByScheduler"}, rf));
        ExtenderManagedResource res;
        res.name = HAMI_TRY(String(r, "name", rf + ".name"));
        if (res.name.empty()) return Fail(rf + ".name", "missing");
        res.ignored_by_scheduler =
            HAMI_TRY(Bool(r, "ignoredByScheduler", rf + ".ignoredByScheduler"));
        x.managed_resources.push_back(std::move(res));
      }
    }
    return x;
  }

  Result<SchedulerConfig> Parse(std::string_view yaml) const {
    const YAML::Node root = YAML::Load(std::string(yaml));
    if (!root.IsMap()) return Fail("", "not a YAML mapping");
    HAMI_TRY(OnlyKeys(
        root,
        {"apiVersion", "kind", "parallelism", "leaderElection", "clientConnection",
         "healthzBindAddress", "metricsBindAddress", "enableProfiling", "enableContentionProfiling",
         "percentageOfNodesToScore", "podInitialBackoffSeconds", "podMaxBackoffSeconds", "profiles",
         "extenders", "delayCacheUntilActive"},
        ""));
    std::string api_version = HAMI_TRY(String(root, "apiVersion", "apiVersion"));
    if (api_version != kApiVersion) {
      return Fail("apiVersion",
                  (api_version.empty() ? std::string("missing") : QuoteInput(api_version)) +
                      " (want " + std::string(kApiVersion) + ")");
    }
    std::string kind = HAMI_TRY(String(root, "kind", "kind"));
    if (kind != "KubeSchedulerConfiguration") {
      return Fail("kind", (kind.empty() ? std::string("missing") : QuoteInput(kind)) +
                              " (want KubeSchedulerConfiguration)");
    }
    SchedulerConfig c;
    c.source = prefix_;

    int64_t pct = HAMI_TRY(Int(root, "percentageOfNodesToScore", "percentageOfNodesToScore", 0));
    if (pct < 0 || pct > 100) {
      return Fail("percentageOfNodesToScore",
                  "must be between 0 and 100 (got " + std::to_string(pct) + ")");
    }
    c.percentage_of_nodes_to_score = int32_t(pct);
    int64_t initial =
        HAMI_TRY(Int(root, "podInitialBackoffSeconds", "podInitialBackoffSeconds", 1));
    int64_t max = HAMI_TRY(Int(root, "podMaxBackoffSeconds", "podMaxBackoffSeconds", 10));
    if (initial <= 0) {
      return Fail("podInitialBackoffSeconds",
                  "must be positive (got " + std::to_string(initial) + ")");
    }
    if (max < initial) {
      return Fail("podMaxBackoffSeconds",
                  "must be at least podInitialBackoffSeconds (got " + std::to_string(max) + ")");
    }
    if (max > 24 * 3600) {
      return Fail("podMaxBackoffSeconds",
                  "must be at most a day (got " + std::to_string(max) + ")");
    }
    c.pod_initial_backoff = std::chrono::seconds(initial);
    c.pod_max_backoff = std::chrono::seconds(max);

    const YAML::Node profiles = root["profiles"];
    if (Present(profiles)) {
      if (!profiles.IsSequence()) return Fail("profiles", "not a list");
      for (size_t i = 0; i < profiles.size(); ++i) {
        std::string pf = "profiles[" + std::to_string(i) + "]";
        const YAML::Node p = profiles[i];
        if (!p.IsMap()) return Fail(pf, "not a mapping");
        HAMI_TRY(OnlyKeys(
            p, {"schedulerName", "percentageOfNodesToScore", "plugins", "pluginConfig"}, pf));
        std::string name = HAMI_TRY(String(p, "schedulerName", pf + ".schedulerName"));
        if (name.empty()) name = "default-scheduler";  // kube-scheduler's default profile name
        if (std::find(c.scheduler_names.begin(), c.scheduler_names.end(), name) !=
            c.scheduler_names.end()) {
          return Fail(pf + ".schedulerName", QuoteInput(name) + " is used twice");
        }
        c.scheduler_names.push_back(std::move(name));
      }
    }

    const YAML::Node extenders = root["extenders"];
    if (Present(extenders)) {
      if (!extenders.IsSequence()) return Fail("extenders", "not a list");
      int binders = 0;
      std::unordered_set<std::string> managed;
      for (size_t i = 0; i < extenders.size(); ++i) {
        std::string ef = "extenders[" + std::to_string(i) + "]";
        ExtenderConfig x = HAMI_TRY(Extender(extenders[i], ef));
        if (!x.bind_verb.empty() && ++binders > 1) {
          return Fail(ef + ".bindVerb", "only one extender can implement bind");
        }
        for (size_t j = 0; j < x.managed_resources.size(); ++j) {
          if (!managed.insert(x.managed_resources[j].name).second) {
            return Fail(ef + ".managedResources[" + std::to_string(j) + "].name",
                        QuoteInput(x.managed_resources[j].name) +
                            ": duplicate extender managed resource name");
          }
        }
        c.extenders.push_back(std::move(x));
      }
    }
    return c;
  }

 private:
  std::string prefix_;
};

// ---- JSON access --------------------------------------------------------------------------------

bool EqualFoldAscii(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = char(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = char(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

// A member as Go's encoding/json finds it: the exact name, else the first case-insensitive
// match. nullptr when absent or JSON null.
const json* Member(const json& object, std::string_view name) {
  if (!object.is_object()) return nullptr;
  const json* found = nullptr;
  if (auto it = object.find(name); it != object.end()) {
    found = &*it;
  } else {
    for (auto m = object.begin(); m != object.end(); ++m) {
      if (EqualFoldAscii(m.key(), name)) {
        found = &m.value();
        break;
      }
    }
  }
  return found == nullptr || found->is_null() ? nullptr : found;
}

// object[a][b]... when every step is an object; nullptr otherwise.
const json* Path(const json& object, std::initializer_list<std::string_view> path) {
  const json* at = &object;
  for (std::string_view key : path) {
    if (!at->is_object()) return nullptr;
    auto it = at->find(key);
    if (it == at->end()) return nullptr;
    at = &*it;
  }
  return at;
}

std::string_view StringAt(const json& object, std::initializer_list<std::string_view> path) {
  const json* v = Path(object, path);
  return v != nullptr && v->is_string() ? std::string_view(v->get_ref<const std::string&>())
                                        : std::string_view();
}

Result<std::map<std::string, std::string>> StringMapMember(const json& body,
                                                           std::string_view name) {
  std::map<std::string, std::string> out;
  const json* m = Member(body, name);
  if (m == nullptr) return out;
  if (!m->is_object()) {
    return Error(ErrorCode::kInvalidArgument, std::string(name) + ": not an object");
  }
  for (auto it = m->begin(); it != m->end(); ++it) {
    if (!it->is_string()) {
      return Error(ErrorCode::kInvalidArgument,
                   std::string(name) + "[" + json(it.key()).dump() + "]: not a string");
    }
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

bool ContainersName(const json& pod, std::string_view list,
                    const std::vector<ExtenderManagedResource>& managed) {
  const json* containers = Path(pod, {"spec", list});
  if (containers == nullptr || !containers->is_array()) return false;
  for (const json& c : *containers) {
    for (std::string_view kind : {"requests", "limits"}) {
      const json* resources = Path(c, {"resources", kind});
      if (resources == nullptr || !resources->is_object()) continue;
      for (auto it = resources->begin(); it != resources->end(); ++it) {
        for (const ExtenderManagedResource& m : managed) {
          if (m.name == it.key()) return true;
        }
      }
    }
  }
  return false;
}

// ---- Durations ----------------------------------------------------------------------------------

struct GoUnit {
  std::string_view name;
  uint64_t nanos;
};
constexpr GoUnit kGoUnits[] = {
    {"ns", 1},
    {"us", 1000},
    {"\xc2\xb5s", 1000},  // U+00B5 micro sign
    {"\xce\xbcs", 1000},  // U+03BC Greek mu
    {"ms", 1000000},
    {"s", 1000000000},
    {"m", uint64_t(60) * 1000000000},
    {"h", uint64_t(3600) * 1000000000},
};

}  // namespace

// ---- Public pure functions ----------------------------------------------------------------------

Result<std::chrono::nanoseconds> ParseGoDuration(std::string_view text, std::string_view what) {
  auto fail = [&](std::string_view why) {
    std::string msg;
    if (!what.empty()) msg = std::string(what) + ": ";
    msg += "duration " + QuoteInput(text) + ": " + std::string(why);
    return Error(ErrorCode::kInvalidArgument, std::move(msg));
  };
  std::string_view s = text;
  bool negative = false;
  if (!s.empty() && (s[0] == '-' || s[0] == '+')) {
    negative = s[0] == '-';
    s.remove_prefix(1);
  }
  if (s == "0") return std::chrono::nanoseconds(0);
  if (s.empty()) return fail("empty");
  constexpr uint64_t kLimit = uint64_t(1) << 63;  // |int64 min|
  uint64_t total = 0;
  auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (!s.empty()) {
    if (!(s[0] == '.' || digit(s[0]))) return fail("expected a number");
    uint64_t whole = 0;
    bool pre = false;
    while (!s.empty() && digit(s[0])) {
      pre = true;
      if (whole > (kLimit - uint64_t(s[0] - '0')) / 10) return fail("out of range");
      whole = whole * 10 + uint64_t(s[0] - '0');
      s.remove_prefix(1);
    }
    uint64_t frac = 0;
    double scale = 1;
    bool post = false;
    if (!s.empty() && s[0] == '.') {
      s.remove_prefix(1);
      while (!s.empty() && digit(s[0])) {
        post = true;
        if (frac <= (uint64_t(1) << 62) / 10) {  // further digits are below any unit's precision
          frac = frac * 10 + uint64_t(s[0] - '0');
          scale *= 10;
        }
        s.remove_prefix(1);
      }
    }
    if (!pre && !post) return fail("expected a number");
    size_t unit_len = 0;
    while (unit_len < s.size() && s[unit_len] != '.' && !digit(s[unit_len])) ++unit_len;
    std::string_view unit = s.substr(0, unit_len);
    if (unit.empty()) return fail("missing unit");
    s.remove_prefix(unit_len);
    const GoUnit* u = nullptr;
    for (const GoUnit& g : kGoUnits) {
      if (g.name == unit) u = &g;
    }
    if (u == nullptr) return fail("unknown unit " + QuoteInput(unit));
    if (whole > kLimit / u->nanos) return fail("out of range");
    uint64_t v = whole * u->nanos;
    if (frac > 0) {
      v += uint64_t(double(frac) * (double(u->nanos) / scale));
      if (v > kLimit) return fail("out of range");
    }
    if (total > kLimit - v) return fail("out of range");
    total += v;
  }
  if (!negative && total > kLimit - 1) return fail("out of range");
  int64_t signed_total = negative ? int64_t(0 - total) : int64_t(total);
  return std::chrono::nanoseconds(signed_total);
}

Result<SchedulerConfig> ParseSchedulerConfig(std::string_view yaml, std::string_view file) {
  ConfigReader reader(file);
  try {
    return reader.Parse(yaml);
  } catch (const YAML::Exception& e) {
    return reader.Fail("", std::string("YAML: ") + e.what());
  } catch (const std::exception& e) {
    return reader.Fail("", e.what());
  }
}

Result<SchedulerConfig> LoadSchedulerConfig(const std::string& path) {
  auto text = ReadFileToString(path, kMaxConfigBytes, Symlinks::kFollow);
  if (!text.ok()) {
    return Error(text.error().code(),
                 "KubeSchedulerConfiguration " + path + ": " + text.error().message());
  }
  return ParseSchedulerConfig(*text, path);
}

bool ExtenderConfig::IsInterested(const nlohmann::json& pod) const {
  if (managed_resources.empty()) return true;
  return ContainersName(pod, "containers", managed_resources) ||
         ContainersName(pod, "initContainers", managed_resources);
}

nlohmann::json ExtenderArgsJson(const nlohmann::json& pod, std::span<const ObjectPtr> nodes,
                                std::span<const std::string> node_names, bool node_cache_capable) {
  json args = json::object();
  args["Pod"] = pod;
  if (node_cache_capable) {
    args["Nodes"] = nullptr;
    json names = json::array();
    for (const std::string& n : node_names) names.push_back(n);
    args["NodeNames"] = std::move(names);
  } else {
    json items = json::array();
    for (const ObjectPtr& n : nodes) items.push_back(*n);
    args["Nodes"] = {{"metadata", json::object()}, {"items", std::move(items)}};
    args["NodeNames"] = nullptr;
  }
  return args;
}

nlohmann::json ExtenderBindingArgsJson(std::string_view pod_name, std::string_view pod_namespace,
                                       std::string_view pod_uid, std::string_view node) {
  return {
      {"PodName", pod_name}, {"PodNamespace", pod_namespace}, {"PodUID", pod_uid}, {"Node", node}};
}

nlohmann::json ExtenderPreemptionArgsJson(
    const nlohmann::json& pod, const std::map<std::string, std::vector<ObjectPtr>>& victims,
    bool node_cache_capable) {
  json by_node = json::object();
  for (const auto& [node, pods] : victims) {
    json list = json::array();
    for (const ObjectPtr& p : pods) {
      if (node_cache_capable) {
        list.push_back({{"UID", hami::kube::MetadataString(*p, "uid")}});
      } else {
        list.push_back(*p);
      }
    }
    by_node[node] = {{"Pods", std::move(list)}, {"NumPDBViolations", 0}};
  }
  json args = json::object();
  args["Pod"] = pod;
  args["NodeNameToVictims"] = node_cache_capable ? json(nullptr) : by_node;
  args["NodeNameToMetaVictims"] = node_cache_capable ? by_node : json(nullptr);
  return args;
}

Result<std::map<std::string, MetaVictims>> ParseExtenderPreemptionResult(
    const nlohmann::json& body) {
  auto bad = [](std::string what) { return Error(ErrorCode::kInvalidArgument, std::move(what)); };
  if (!body.is_object()) return bad("ExtenderPreemptionResult: not a JSON object");
  std::map<std::string, MetaVictims> out;
  const json* map = Member(body, "NodeNameToMetaVictims");
  if (map == nullptr) return out;
  if (!map->is_object()) return bad("NodeNameToMetaVictims: not an object");
  for (auto it = map->begin(); it != map->end(); ++it) {
    const std::string at = "NodeNameToMetaVictims[" + json(it.key()).dump() + "]";
    MetaVictims& v = out[it.key()];
    if (it->is_null()) continue;
    if (!it->is_object()) return bad(at + ": not an object");
    if (const json* n = Member(*it, "NumPDBViolations"); n != nullptr) {
      if (!n->is_number_integer()) return bad(at + ".NumPDBViolations: not an integer");
      v.num_pdb_violations = n->get<int64_t>();
    }
    const json* pods = Member(*it, "Pods");
    if (pods == nullptr) continue;
    if (!pods->is_array()) return bad(at + ".Pods: not a list");
    for (size_t i = 0; i < pods->size(); ++i) {
      const json* uid = Member((*pods)[i], "UID");
      if (uid == nullptr || !uid->is_string()) {
        return bad(at + ".Pods[" + std::to_string(i) + "].UID: not a string");
      }
      v.uids.push_back(uid->get<std::string>());
    }
  }
  return out;
}

Result<ExtenderFilterResult> ParseExtenderFilterResult(const nlohmann::json& body) {
  auto bad = [](std::string what) { return Error(ErrorCode::kInvalidArgument, std::move(what)); };
  if (!body.is_object()) return bad("ExtenderFilterResult: not a JSON object");
  ExtenderFilterResult r;
  if (const json* names = Member(body, "NodeNames"); names != nullptr) {
    if (!names->is_array()) return bad("NodeNames: not a list");
    r.has_node_names = true;
    for (size_t i = 0; i < names->size(); ++i) {
      if (!(*names)[i].is_string()) {
        return bad("NodeNames[" + std::to_string(i) + "]: not a string");
      }
      r.node_names.push_back((*names)[i].get<std::string>());
    }
  }
  if (const json* nodes = Member(body, "Nodes"); nodes != nullptr) {
    if (!nodes->is_object()) return bad("Nodes: not a NodeList object");
    r.has_nodes = true;
    if (const json* items = Member(*nodes, "items"); items != nullptr) {
      if (!items->is_array()) return bad("Nodes.items: not a list");
      for (size_t i = 0; i < items->size(); ++i) {
        const json* meta = Member((*items)[i], "metadata");
        const json* name = meta != nullptr ? Member(*meta, "name") : nullptr;
        if (name == nullptr || !name->is_string() || name->get_ref<const std::string&>().empty()) {
          return bad("Nodes.items[" + std::to_string(i) + "].metadata.name: missing");
        }
        r.nodes.push_back(name->get<std::string>());
      }
    }
  }
  r.failed_nodes = HAMI_TRY(StringMapMember(body, "FailedNodes"));
  r.failed_and_unresolvable_nodes = HAMI_TRY(StringMapMember(body, "FailedAndUnresolvableNodes"));
  r.error = HAMI_TRY(ParseExtenderBindingResultError(body));
  return r;
}

Result<std::vector<HostPriority>> ParseHostPriorityList(const nlohmann::json& body) {
  auto bad = [](std::string what) { return Error(ErrorCode::kInvalidArgument, std::move(what)); };
  std::vector<HostPriority> out;
  if (body.is_null()) return out;
  if (!body.is_array()) return bad("HostPriorityList: not a list");
  for (size_t i = 0; i < body.size(); ++i) {
    const json& e = body[i];
    std::string at = "HostPriorityList[" + std::to_string(i) + "]";
    if (!e.is_object()) return bad(at + ": not an object");
    HostPriority hp;
    if (const json* host = Member(e, "Host"); host != nullptr) {
      if (!host->is_string()) return bad(at + ".Host: not a string");
      hp.host = host->get<std::string>();
    }
    if (const json* score = Member(e, "Score"); score != nullptr) {
      if (score->is_number_unsigned()) {
        if (score->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
          return bad(at + ".Score: out of int64 range");
        }
        hp.score = int64_t(score->get<uint64_t>());
      } else if (score->is_number_integer()) {
        hp.score = score->get<int64_t>();
      } else {
        return bad(at + ".Score: not an integer");
      }
    }
    out.push_back(std::move(hp));
  }
  return out;
}

Result<std::string> ParseExtenderBindingResultError(const nlohmann::json& body) {
  if (!body.is_object()) {
    return Error(ErrorCode::kInvalidArgument, "extender answer: not a JSON object");
  }
  const json* error = Member(body, "Error");
  if (error == nullptr) return std::string();
  if (!error->is_string()) return Error(ErrorCode::kInvalidArgument, "Error: not a string");
  return error->get<std::string>();
}

int32_t NumFeasibleNodesToFind(int32_t percentage, int32_t num_all_nodes) {
  constexpr int32_t kMinFeasibleNodesToFind = 100;
  constexpr int32_t kMinFeasibleNodesPercentageToFind = 5;
  if (num_all_nodes < kMinFeasibleNodesToFind) return num_all_nodes;
  if (percentage <= 0) {
    percentage = 50 - num_all_nodes / 125;
    if (percentage < kMinFeasibleNodesPercentageToFind) {
      percentage = kMinFeasibleNodesPercentageToFind;
    }
  }
  if (percentage >= 100) return num_all_nodes;
  int32_t n = int32_t(int64_t(num_all_nodes) * percentage / 100);
  return n < kMinFeasibleNodesToFind ? kMinFeasibleNodesToFind : n;
}

int64_t LeastAllocatedScore(int64_t pods_on_node, int64_t allocatable_pods) {
  if (allocatable_pods <= 0) return 0;
  int64_t free = allocatable_pods - std::clamp<int64_t>(pods_on_node, 0, allocatable_pods);
  return free * kMaxNodeScore / allocatable_pods;
}

std::vector<int64_t> CombineScores(std::span<const std::string> nodes,
                                   std::span<const int64_t> own_scores,
                                   std::span<const WeightedPriorities> extenders) {
  std::unordered_map<std::string_view, int64_t> combined;
  for (const WeightedPriorities& e : extenders) {
    for (const HostPriority& hp : e.priorities) combined[hp.host] += hp.score * e.weight;
  }
  std::vector<int64_t> totals(nodes.size());
  for (size_t i = 0; i < nodes.size(); ++i) {
    int64_t own = i < own_scores.size() ? own_scores[i] : 0;
    auto it = combined.find(nodes[i]);
    int64_t ext = it == combined.end() ? 0 : it->second;
    totals[i] = own + ext * (kMaxNodeScore / kMaxExtenderPriority);
  }
  return totals;
}

size_t SelectHost(std::span<const int64_t> totals, std::mt19937_64& rng) {
  size_t best = 0;
  int64_t seen = 1;
  for (size_t i = 1; i < totals.size(); ++i) {
    if (totals[i] > totals[best]) {
      best = i;
      seen = 1;
    } else if (totals[i] == totals[best]) {
      ++seen;
      if (std::uniform_int_distribution<int64_t>(0, seen - 1)(rng) == 0) best = i;
    }
  }
  return best;
}

int32_t PodPriority(const nlohmann::json& pod) {
  const json* p = Path(pod, {"spec", "priority"});
  if (p == nullptr || !p->is_number_integer()) return 0;
  const int64_t v = p->get<int64_t>();
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max()) return 0;
  return int32_t(v);
}

int32_t NumPreemptionCandidates(int32_t num_all_nodes) {
  constexpr int32_t kMinCandidateNodesPercentage = 10;
  constexpr int32_t kMinCandidateNodesAbsolute = 100;
  int32_t n = int32_t(int64_t(num_all_nodes) * kMinCandidateNodesPercentage / 100);
  n = std::max(n, kMinCandidateNodesAbsolute);
  return std::min(n, num_all_nodes);
}

size_t PickPreemptionCandidate(std::span<const PreemptionCandidate> candidates) {
  // Each criterion as a key to minimize, in kube-scheduler's order.
  auto keys = [](const PreemptionCandidate& c) {
    int64_t highest = std::numeric_limits<int64_t>::min();
    int64_t sum = 0;
    for (int32_t p : c.victim_priorities) {
      highest = std::max<int64_t>(highest, p);
      sum += int64_t(p) + (int64_t(1) << 31);  // never negative, so more victims cost more
    }
    return std::tuple(c.num_pdb_violations, highest, sum, c.victim_priorities.size());
  };
  size_t best = 0;
  for (size_t i = 1; i < candidates.size(); ++i) {
    if (keys(candidates[i]) < keys(candidates[best])) best = i;
  }
  return best;
}

std::string FitErrorMessage(int num_all_nodes, const std::map<std::string, std::string>& reasons) {
  if (num_all_nodes == 0) return "no nodes available to schedule pods";
  std::map<std::string, int> histogram;
  for (const auto& entry : reasons) ++histogram[entry.second];
  std::vector<std::string> parts;
  for (const auto& [reason, count] : histogram)
    parts.push_back(std::to_string(count) + " " + reason);
  std::sort(parts.begin(), parts.end());
  std::string msg = "0/" + std::to_string(num_all_nodes) + " nodes are available";
  for (size_t i = 0; i < parts.size(); ++i) msg += (i == 0 ? ": " : ", ") + parts[i];
  return msg + ".";
}

// ---- The stand-in -------------------------------------------------------------------------------

namespace {

// What the stand-in keeps of a node.
struct NodeInfo {
  std::string name;
  ObjectPtr object;
  bool ready = false;
  bool unschedulable = false;
  hami::kube::StringMap labels;
  int64_t allocatable_pods = kDefaultAllocatablePods;
  std::string parse_error;  // ParseNode's, when the node could not be read
};
using NodeInfoPtr = std::shared_ptr<const NodeInfo>;

struct Extender {
  ExtenderConfig config;
  std::unique_ptr<hami::kube::internal::HttpTransport> transport;

  std::string Url(std::string_view verb) const {
    std::string url = config.url_prefix;
    while (!url.empty() && url.back() == '/') url.pop_back();
    return url + "/" + std::string(verb);
  }
};

std::string DurationText(std::chrono::milliseconds d) {
  if (d.count() % 1000 == 0) return std::to_string(d.count() / 1000) + "s";
  return std::to_string(d.count()) + "ms";
}

}  // namespace

struct SchedulerStandin::Impl {
  hami::kube::Client& client;
  SchedulerConfig config;
  StandinOptions options;
  std::vector<std::string> names;
  std::vector<Extender> extenders;
  std::chrono::milliseconds initial_backoff{1000};
  std::chrono::milliseconds max_backoff{10000};
  std::function<void(const ScheduleAttempt&)> observer;

  std::unique_ptr<hami::kube::InformerFactory> factory;
  std::shared_ptr<hami::kube::Informer> node_informer;
  std::shared_ptr<hami::kube::Informer> pod_informer;
  std::unique_ptr<hami::kube::EventRecorder> recorder;
  std::string recorder_component;  // the events' source
  std::unique_ptr<DraScheduler> dra;
  std::unique_ptr<ResourceClaimController> claim_controller;

  struct Entry {
    int attempts = 0;
    SteadyTime not_before{};
    bool in_flight = false;
    // An event that would have woken the pod came while an attempt was running: when the
    // attempt fails, the pod is tried again at once (kube-scheduler's in-flight events).
    bool woken_in_flight = false;
  };
  struct Assumed {
    std::string node;
    SteadyTime expires{};
  };

  mutable std::mutex mu;  // guards what follows
  std::condition_variable_any cv;
  uint64_t generation = 0;  // changes whenever a worker may have something new to do
  std::map<std::string, NodeInfoPtr> nodes;  // by name
  std::vector<NodeInfoPtr> node_list;        // the same in name order, rebuilt when stale
  bool node_list_stale = true;
  std::unordered_map<std::string, int64_t> pods_on_node;  // bound and not terminated
  std::unordered_map<std::string, Assumed> assumed;       // pod key -> node
  std::set<std::pair<SteadyTime, std::string>> assumed_expiry;
  std::unordered_map<std::string, int64_t> assumed_on_node;
  std::unordered_map<std::string, Entry> pending;      // pod key -> queue entry
  std::set<std::pair<SteadyTime, std::string>> ready;  // (not_before, key) of queued pods
  size_t next_start = 0;
  std::mt19937_64 rng;
  Stats stats;

  std::vector<std::jthread> workers;
  bool started = false;
  bool stopped = false;

  Impl(hami::kube::Client& c, SchedulerConfig cfg, StandinOptions opts)
      : client(c), config(std::move(cfg)), options(std::move(opts)) {}

  // ---- What a pod is ----

  bool PendingForUs(const json& pod) const {
    if (!StringAt(pod, {"spec", "nodeName"}).empty()) return false;
    std::string_view scheduler = StringAt(pod, {"spec", "schedulerName"});
    if (scheduler.empty()) scheduler = "default-scheduler";
    if (std::find(names.begin(), names.end(), scheduler) == names.end()) return false;
    const json* deletion = Path(pod, {"metadata", "deletionTimestamp"});
    if (deletion != nullptr && !deletion->is_null()) return false;
    std::string_view phase = StringAt(pod, {"status", "phase"});
    if (phase == "Succeeded" || phase == "Failed") return false;
    const json* gates = Path(pod, {"spec", "schedulingGates"});
    if (gates != nullptr && gates->is_array() && !gates->empty()) return false;
    return true;
  }

  // status.resourceClaimStatuses changed between the two versions of a pod.
  static bool ClaimsRecorded(const json& old_pod, const json& new_pod) {
    const json* before = Path(old_pod, {"status", "resourceClaimStatuses"});
    const json* after = Path(new_pod, {"status", "resourceClaimStatuses"});
    if (after == nullptr) return false;
    return before == nullptr || *before != *after;
  }

  // The node a pod occupies: bound and not terminated; "" otherwise.
  static std::string_view OccupiedNode(const json& pod) {
    std::string_view phase = StringAt(pod, {"status", "phase"});
    if (phase == "Succeeded" || phase == "Failed") return {};
    return StringAt(pod, {"spec", "nodeName"});
  }

  // ---- Informer handlers (the informers' dispatch threads) ----

  void ObservePod(const ObjectPtr& old_object, const ObjectPtr& new_object) {
    const json& any = new_object != nullptr ? *new_object : *old_object;
    std::string key = hami::kube::ObjectKey(any);
    if (key.empty()) return;
    std::lock_guard lock(mu);
    if (old_object != nullptr) {
      std::string_view node = OccupiedNode(*old_object);
      if (!node.empty()) {
        auto it = pods_on_node.find(std::string(node));
        if (it != pods_on_node.end() && --it->second <= 0) pods_on_node.erase(it);
      }
    }
    if (new_object != nullptr) {
      std::string_view node = OccupiedNode(*new_object);
      if (!node.empty()) ++pods_on_node[std::string(node)];
    }
    if (new_object == nullptr || !StringAt(*new_object, {"spec", "nodeName"}).empty()) {
      ForgetAssumedLocked(key);
    }
    if (new_object != nullptr && PendingForUs(*new_object)) {
      if (!assumed.contains(key) && !pending.contains(key)) {
        EnqueueLocked(key, Now());
      } else if (old_object != nullptr && ClaimsRecorded(*old_object, *new_object)) {
        // The pod's template claims now exist: try again at once rather than after the backoff.
        auto it = pending.find(key);
        if (it != pending.end() && !it->second.in_flight) {
          ready.erase({it->second.not_before, key});
          EnqueueLocked(key, Now());
        } else if (it != pending.end()) {
          it->second.woken_in_flight = true;
        }
      }
    } else {
      DropLocked(key);
    }
  }

  // A claim made for a pod (owned by it, from a template or KEP-5004's) that a waiting pod may
  // have been refused for ("not found", the claim informer behind the pod's status): the pod
  // is tried again at once, as kube-scheduler's queueing hint for claims does.
  void ObserveClaimAdded(const ObjectPtr& claim) {
    const json* owners = Path(*claim, {"metadata", "ownerReferences"});
    if (owners == nullptr || !owners->is_array()) return;
    const std::string ns(hami::kube::MetadataString(*claim, "namespace"));
    std::lock_guard lock(mu);
    for (const json& o : *owners) {
      if (!o.is_object() || o.value("kind", "") != "Pod") continue;
      auto it = pending.find(ns + "/" + o.value("name", ""));
      if (it != pending.end() && !it->second.in_flight) {
        const std::string key = it->first;
        ready.erase({it->second.not_before, key});
        EnqueueLocked(key, Now());
      } else if (it != pending.end()) {
        it->second.woken_in_flight = true;
      }
    }
  }

  void ObserveNode(const ObjectPtr& object, bool deleted) {
    std::string name(hami::kube::MetadataString(*object, "name"));
    if (name.empty()) return;
    std::lock_guard lock(mu);
    node_list_stale = true;
    if (deleted) {
      nodes.erase(name);
      return;
    }
    auto info = std::make_shared<NodeInfo>();
    info->name = name;
    info->object = object;
    auto parsed = hami::kube::ParseNode(*object);
    if (!parsed.ok()) {
      info->parse_error = parsed.error().message();
      HAMI_LOG(kWarn, "event=node_unreadable node=%s error=\"%s\"", name.c_str(),
               info->parse_error.c_str());
    } else {
      info->ready = parsed->ready == hami::kube::ConditionStatus::kTrue;
      info->unschedulable = parsed->unschedulable;
      info->labels = std::move(parsed->metadata.labels);
      if (auto it = parsed->allocatable.find("pods"); it != parsed->allocatable.end()) {
        info->allocatable_pods = it->second.Value();
      }
    }
    nodes[name] = std::move(info);
  }

  // ---- The queue (mu held) ----

  static SteadyTime Now() { return std::chrono::steady_clock::now(); }

  void EnqueueLocked(const std::string& key, SteadyTime when) {
    Entry& e = pending[key];
    e.not_before = when;
    e.in_flight = false;
    ready.emplace(when, key);
    ++generation;
    cv.notify_one();
  }

  void DropLocked(const std::string& key) {
    auto it = pending.find(key);
    if (it == pending.end()) return;
    if (!it->second.in_flight) ready.erase({it->second.not_before, key});
    pending.erase(it);
  }

  void AssumeLocked(const std::string& key, const std::string& node) {
    SteadyTime expires = Now() + options.assume_ttl;
    assumed[key] = Assumed{node, expires};
    assumed_expiry.emplace(expires, key);
    ++assumed_on_node[node];
    ++generation;
    cv.notify_one();
  }

  void ForgetAssumedLocked(const std::string& key) {
    auto it = assumed.find(key);
    if (it == assumed.end()) return;
    assumed_expiry.erase({it->second.expires, key});
    auto n = assumed_on_node.find(it->second.node);
    if (n != assumed_on_node.end() && --n->second <= 0) assumed_on_node.erase(n);
    assumed.erase(it);
  }

  // Assumptions past their time: the pod is scheduled again if it is still pending.
  void ExpireAssumedLocked(SteadyTime now) {
    while (!assumed_expiry.empty() && assumed_expiry.begin()->first <= now) {
      std::string key = assumed_expiry.begin()->second;
      ForgetAssumedLocked(key);
      ObjectPtr pod = pod_informer->store().Get(key);
      if (pod != nullptr && PendingForUs(*pod) && !pending.contains(key)) {
        HAMI_LOG(kWarn, "event=assume_expired pod=%s", key.c_str());
        EnqueueLocked(key, now);
      }
    }
  }

  std::chrono::milliseconds Backoff(int attempts) const {
    std::chrono::milliseconds d = initial_backoff;
    for (int i = 1; i < attempts && d < max_backoff; ++i) d *= 2;
    return std::min(d, max_backoff);
  }

  // ---- Workers ----

  void Worker(std::stop_token stop) {
    auto far = [] { return Now() + std::chrono::hours(24); };
    while (!factory->WaitForSync(far(), stop)) {
      if (stop.stop_requested()) return;
    }
    for (;;) {
      std::string key;
      {
        std::unique_lock lock(mu);
        for (;;) {
          if (stop.stop_requested()) return;
          SteadyTime now = Now();
          ExpireAssumedLocked(now);
          if (!ready.empty() && ready.begin()->first <= now) {
            key = ready.begin()->second;
            ready.erase(ready.begin());
            pending[key].in_flight = true;
            break;
          }
          SteadyTime wake = far();
          if (!ready.empty()) wake = std::min(wake, ready.begin()->first);
          if (!assumed_expiry.empty()) wake = std::min(wake, assumed_expiry.begin()->first);
          uint64_t seen = generation;
          cv.wait_until(lock, stop, wake, [&] { return generation != seen; });
        }
      }
      std::optional<ScheduleAttempt> attempt;
      try {
        attempt = ScheduleOne(key, stop);
      } catch (const std::exception& e) {
        ScheduleAttempt a;
        a.pod = key;
        a.outcome = ScheduleAttempt::Outcome::kError;
        a.message = std::string("internal error: ") + e.what();
        attempt = std::move(a);
      }
      std::lock_guard lock(mu);
      auto it = pending.find(key);
      if (!attempt.has_value() || attempt->outcome == ScheduleAttempt::Outcome::kScheduled) {
        if (it != pending.end()) pending.erase(it);
        continue;
      }
      if (it == pending.end()) continue;  // bound or deleted meanwhile
      if (stop.stop_requested()) continue;
      int attempts = ++it->second.attempts;
      const bool woken = std::exchange(it->second.woken_in_flight, false);
      EnqueueLocked(key, woken ? Now() : Now() + Backoff(attempts));
    }
  }

  std::vector<NodeInfoPtr> NodeSnapshot() {
    std::lock_guard lock(mu);
    if (node_list_stale) {
      node_list.clear();
      node_list.reserve(nodes.size());
      for (const auto& entry : nodes) node_list.push_back(entry.second);
      node_list_stale = false;
    }
    return node_list;
  }

  // The own filter's reason for refusing `node`, or "" when the pod fits.
  static std::string OwnFilter(const NodeInfo& node, const json* node_selector) {
    if (!node.parse_error.empty()) return "node(s) could not be read";
    if (node.unschedulable) return "node(s) were unschedulable";
    if (!node.ready) return "node(s) were not ready";
    if (node_selector != nullptr && node_selector->is_object()) {
      for (auto it = node_selector->begin(); it != node_selector->end(); ++it) {
        auto label = node.labels.find(it.key());
        if (label == node.labels.end() || !it->is_string() ||
            label->second != it->get_ref<const std::string&>()) {
          return "node(s) didn't match Pod's node affinity/selector";
        }
      }
    }
    return {};
  }

  // One POST of `args` to `verb` of `e`; the decoded JSON answer.
  Result<json> Call(Extender& e, std::string_view action, const std::string& verb, const json& args,
                    std::stop_token stop) {
    std::string url = e.Url(verb);
    std::string body = args.dump(-1, ' ', false, json::error_handler_t::replace);
    hami::kube::internal::HttpRequest req;
    req.method = "POST";
    req.url = url;
    req.headers = {"Content-Type: application/json", "Accept: application/json"};
    req.body = body;
    req.timeout = e.config.http_timeout;
    hami::kube::internal::HttpResponse res = e.transport->Perform(req, stop);
    auto fail = [&](ErrorCode code, const std::string& why) {
      {
        std::lock_guard lock(mu);
        ++stats.extender_failures;
      }
      return Error(code, std::string(action) + " with extender at URL " + url + ": " + why);
    };
    using hami::kube::internal::TransportOutcome;
    switch (res.outcome) {
      case TransportOutcome::kOk:
        break;
      case TransportOutcome::kTimeout:
        return fail(ErrorCode::kTimeout,
                    "no answer within httpTimeout " + DurationText(e.config.http_timeout));
      case TransportOutcome::kStopped:
        return fail(ErrorCode::kTimeout, "stopped");
      case TransportOutcome::kTlsFailed:
        return fail(ErrorCode::kPermission, "TLS: " + res.transport_error);
      default:
        return fail(ErrorCode::kUnavailable, res.transport_error);
    }
    if (res.status != 200)
      return fail(ErrorCode::kUnavailable, "code " + std::to_string(res.status));
    json answer = json::parse(res.body, nullptr, /*allow_exceptions=*/false);
    if (answer.is_discarded()) {
      return fail(ErrorCode::kInvalidArgument, "the answer is not JSON: " + QuoteInput(res.body));
    }
    return answer;
  }

  struct FilterOutcome {
    std::vector<NodeInfoPtr> feasible;
    std::map<std::string, std::string> failed;
    std::map<std::string, std::string> unresolvable;
  };

  Result<FilterOutcome> Filter(Extender& e, const json& pod, const std::vector<NodeInfoPtr>& in,
                               std::stop_token stop) {
    std::vector<ObjectPtr> objects;
    std::vector<std::string> names_in;
    std::unordered_map<std::string_view, NodeInfoPtr> by_name;
    for (const NodeInfoPtr& n : in) {
      if (e.config.node_cache_capable) {
        names_in.push_back(n->name);
      } else {
        objects.push_back(n->object);
      }
      by_name[n->name] = n;
    }
    {
      std::lock_guard lock(mu);
      ++stats.filter_calls;
    }
    json answer =
        HAMI_TRY(Call(e, "filter", e.config.filter_verb,
                      ExtenderArgsJson(pod, objects, names_in, e.config.node_cache_capable), stop));
    std::string url = e.Url(e.config.filter_verb);
    auto decoded = ParseExtenderFilterResult(answer);
    if (!decoded.ok()) {
      return Error(ErrorCode::kInvalidArgument,
                   "filter with extender at URL " + url + ": " + decoded.error().message());
    }
    if (!decoded->error.empty()) {
      return Error(ErrorCode::kUnavailable, decoded->error);
    }
    FilterOutcome out;
    const std::vector<std::string>* result = nullptr;
    if (e.config.node_cache_capable && decoded->has_node_names) {
      result = &decoded->node_names;
    } else if (decoded->has_nodes) {
      result = &decoded->nodes;
    }
    if (result != nullptr) {
      for (const std::string& name : *result) {
        auto it = by_name.find(name);
        if (it == by_name.end()) {
          return Error(ErrorCode::kInvalidArgument,
                       "extender " + QuoteInput(e.config.url_prefix) + " claims a filtered node " +
                           QuoteInput(name) + " which is not found in the input node list");
        }
        out.feasible.push_back(it->second);
      }
    }
    out.failed = std::move(decoded->failed_nodes);
    out.unresolvable = std::move(decoded->failed_and_unresolvable_nodes);
    return out;
  }

  Result<WeightedPriorities> Prioritize(Extender& e, const json& pod,
                                        const std::vector<NodeInfoPtr>& in, std::stop_token stop) {
    std::vector<ObjectPtr> objects;
    std::vector<std::string> names_in;
    for (const NodeInfoPtr& n : in) {
      if (e.config.node_cache_capable) {
        names_in.push_back(n->name);
      } else {
        objects.push_back(n->object);
      }
    }
    {
      std::lock_guard lock(mu);
      ++stats.prioritize_calls;
    }
    json answer =
        HAMI_TRY(Call(e, "prioritize", e.config.prioritize_verb,
                      ExtenderArgsJson(pod, objects, names_in, e.config.node_cache_capable), stop));
    auto decoded = ParseHostPriorityList(answer);
    if (!decoded.ok()) {
      return Error(ErrorCode::kInvalidArgument, "prioritize with extender at URL " +
                                                    e.Url(e.config.prioritize_verb) + ": " +
                                                    decoded.error().message());
    }
    return WeightedPriorities{std::move(*decoded), e.config.weight};
  }

  Status Bind(const json& pod, const std::string& node, std::stop_token stop) {
    std::string name(hami::kube::MetadataString(pod, "name"));
    std::string ns(hami::kube::MetadataString(pod, "namespace"));
    std::string uid(hami::kube::MetadataString(pod, "uid"));
    for (Extender& e : extenders) {
      if (e.config.bind_verb.empty() || !e.config.IsInterested(pod)) continue;
      {
        std::lock_guard lock(mu);
        ++stats.bind_calls;
      }
      json answer = HAMI_TRY(
          Call(e, "bind", e.config.bind_verb, ExtenderBindingArgsJson(name, ns, uid, node), stop));
      auto error = ParseExtenderBindingResultError(answer);
      if (!error.ok()) {
        return Error(ErrorCode::kInvalidArgument, "bind with extender at URL " +
                                                      e.Url(e.config.bind_verb) + ": " +
                                                      error.error().message());
      }
      if (!error->empty()) return Error(ErrorCode::kUnavailable, *error);
      return OkStatus();
    }
    json binding = {{"apiVersion", "v1"},
                    {"kind", "Binding"},
                    {"metadata", {{"name", name}, {"namespace", ns}, {"uid", uid}}},
                    {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}};
    auto r = client.CreateSubresource(hami::kube::kPods, ns, name, "binding", binding);
    if (!r.ok()) return std::move(r).error();
    return OkStatus();
  }

  // One scheduling attempt of the pod `key`; nullopt when it no longer needs scheduling.
  std::optional<ScheduleAttempt> ScheduleOne(const std::string& key, std::stop_token stop) {
    ObjectPtr pod_ptr = pod_informer->store().Get(key);
    if (pod_ptr == nullptr || !PendingForUs(*pod_ptr)) return std::nullopt;
    const json& pod = *pod_ptr;
    {
      std::lock_guard lock(mu);
      ++stats.attempts;
    }
    ScheduleAttempt a;
    a.pod = key;
    a.outcome = ScheduleAttempt::Outcome::kError;

    std::vector<NodeInfoPtr> all = NodeSnapshot();
    const int32_t n = int32_t(all.size());
    auto claims = dra->PreFilter(pod);
    if (!claims.ok()) {
      // kube-scheduler's FitError with a PreFilter message: the same for every node.
      a.outcome = ScheduleAttempt::Outcome::kUnschedulable;
      a.message = n == 0 ? FitErrorMessage(0, {})
                         : "0/" + std::to_string(n) +
                               " nodes are available: " + claims.error().message() + ".";
      return Finish(std::move(a), pod);
    }
    std::map<std::string, std::string> reasons;
    std::set<std::string> might_help;  // failed by an extender, not unresolvably
    std::vector<NodeInfoPtr> feasible;
    if (n > 0) {
      const int32_t to_find = NumFeasibleNodesToFind(config.percentage_of_nodes_to_score, n);
      size_t start;
      {
        std::lock_guard lock(mu);
        start = next_start % size_t(n);
      }
      const json* selector = Path(pod, {"spec", "nodeSelector"});
      int32_t processed = 0;
      for (int32_t i = 0; i < n && int32_t(feasible.size()) < to_find; ++i) {
        const NodeInfoPtr& node = all[(start + size_t(i)) % size_t(n)];
        ++processed;
        std::string why = OwnFilter(*node, selector);
        if (why.empty() && claims->active) why = dra->Filter(*claims, *node->object);
        if (why.empty()) {
          feasible.push_back(node);
        } else {
          reasons[node->name] = std::move(why);
        }
      }
      std::lock_guard lock(mu);
      next_start = (start + size_t(processed)) % size_t(n);
    }

    for (Extender& e : extenders) {
      if (feasible.empty()) break;
      if (e.config.filter_verb.empty() || !e.config.IsInterested(pod)) continue;
      auto filtered = Filter(e, pod, feasible, stop);
      if (!filtered.ok()) {
        if (e.config.ignorable) {
          HAMI_LOG(kInfo, "event=extender_ignored pod=%s error=\"%s\"", key.c_str(),
                   filtered.error().message().c_str());
          continue;
        }
        a.message = filtered.error().message();
        return Finish(std::move(a), pod);
      }
      for (auto& [node, why] : filtered->unresolvable) {
        reasons[node] = why;
        might_help.erase(node);
      }
      for (auto& [node, why] : filtered->failed) {
        reasons.try_emplace(node, why);
        if (!filtered->unresolvable.contains(node)) might_help.insert(node);
      }
      feasible = std::move(filtered->feasible);
    }
    for (const NodeInfoPtr& f : feasible) a.feasible.push_back(f->name);
    if (feasible.empty()) {
      a.outcome = ScheduleAttempt::Outcome::kUnschedulable;
      a.message = FitErrorMessage(n, reasons);
      Preempt(a, pod, n, might_help, stop);
      return Finish(std::move(a), pod);
    }

    size_t chosen = 0;
    if (feasible.size() > 1) {
      std::vector<int64_t> own(feasible.size());
      {
        std::lock_guard lock(mu);
        for (size_t i = 0; i < feasible.size(); ++i) {
          int64_t count = 0;
          if (auto it = pods_on_node.find(feasible[i]->name); it != pods_on_node.end()) {
            count += it->second;
          }
          if (auto it = assumed_on_node.find(feasible[i]->name); it != assumed_on_node.end()) {
            count += it->second;
          }
          own[i] = LeastAllocatedScore(count, feasible[i]->allocatable_pods);
        }
      }
      std::vector<WeightedPriorities> weighted;
      for (Extender& e : extenders) {
        if (e.config.prioritize_verb.empty() || !e.config.IsInterested(pod)) continue;
        auto p = Prioritize(e, pod, feasible, stop);
        if (!p.ok()) {
          HAMI_LOG(kInfo, "event=prioritize_ignored pod=%s error=\"%s\"", key.c_str(),
                   p.error().message().c_str());
          continue;
        }
        weighted.push_back(std::move(*p));
      }
      a.totals = CombineScores(a.feasible, own, weighted);
      std::lock_guard lock(mu);
      chosen = SelectHost(a.totals, rng);
    }
    const std::string node = feasible[chosen]->name;

    if (claims->active) {
      std::string why = dra->Reserve(*claims, *feasible[chosen]->object);
      if (!why.empty()) {
        a.outcome = ScheduleAttempt::Outcome::kUnschedulable;
        a.message = FitErrorMessage(n, {{node, why}});
        return Finish(std::move(a), pod);
      }
    }
    {
      std::lock_guard lock(mu);
      AssumeLocked(key, node);
    }
    auto fail_bind = [&](std::string message) {
      {
        std::lock_guard lock(mu);
        ForgetAssumedLocked(key);
      }
      dra->Unreserve(*claims);
      a.message = std::move(message);
      return Finish(std::move(a), pod);
    };
    Status prebound = dra->PreBind(*claims, pod, node);
    if (!prebound.ok()) {
      return fail_bind("running PreBind plugin \"DynamicResources\": " +
                       prebound.error().message());
    }
    Status bound = Bind(pod, node, stop);
    if (!bound.ok()) return fail_bind("Binding rejected: " + bound.error().message());
    a.outcome = ScheduleAttempt::Outcome::kScheduled;
    a.node = node;
    a.message = "Successfully assigned " + key + " to " + node;
    return Finish(std::move(a), pod);
  }

  // ---- Preemption (kube-scheduler's DefaultPreemption) ----

  static bool Deleting(const json& pod) {
    const json* d = Path(pod, {"metadata", "deletionTimestamp"});
    return d != nullptr && !d->is_null();
  }

  // The pods occupying each node, from the informer.
  std::map<std::string, std::vector<ObjectPtr>, std::less<>> PodsByNode() const {
    std::map<std::string, std::vector<ObjectPtr>, std::less<>> out;
    for (ObjectPtr& p : pod_informer->store().List()) {
      std::string_view node = OccupiedNode(*p);
      if (!node.empty()) out[std::string(node)].push_back(std::move(p));
    }
    for (auto& [node, pods] : out) {
      std::sort(pods.begin(), pods.end(), [](const ObjectPtr& x, const ObjectPtr& y) {
        return hami::kube::ObjectKey(*x) < hami::kube::ObjectKey(*y);
      });
    }
    return out;
  }

  using VictimMap = std::map<std::string, std::vector<ObjectPtr>>;

  // One extender's narrowing of `victims`; `pdb` gets its NumPDBViolations per node.
  Result<VictimMap> CallPreempt(
      Extender& e, const json& pod, const VictimMap& victims,
      const std::map<std::string, std::vector<ObjectPtr>, std::less<>>& on_node,
      std::map<std::string, int64_t>& pdb, std::stop_token stop) {
    {
      std::lock_guard lock(mu);
      ++stats.preempt_calls;
    }
    json answer =
        HAMI_TRY(Call(e, "preempt", e.config.preempt_verb,
                      ExtenderPreemptionArgsJson(pod, victims, e.config.node_cache_capable), stop));
    const std::string url = e.Url(e.config.preempt_verb);
    auto fail = [&](const std::string& why) {
      return Error(ErrorCode::kInvalidArgument, "preempt with extender at URL " + url + ": " + why);
    };
    auto decoded = ParseExtenderPreemptionResult(answer);
    if (!decoded.ok()) return fail(decoded.error().message());
    VictimMap out;
    for (const auto& [node, meta] : *decoded) {
      if (!victims.contains(node)) return fail("node " + QuoteInput(node) + " is not a candidate");
      if (meta.uids.empty()) {
        if (e.config.ignorable) continue;
        return fail("expected at least one victim pod on node " + QuoteInput(node));
      }
      auto pods = on_node.find(node);
      for (const std::string& uid : meta.uids) {
        ObjectPtr found;
        if (pods != on_node.end()) {
          for (const ObjectPtr& p : pods->second) {
            if (hami::kube::MetadataString(*p, "uid") == uid) found = p;
          }
        }
        if (found == nullptr) {
          return fail("it claims to preempt pod (UID: " + QuoteInput(uid) + ") on node " +
                      QuoteInput(node) + ", but the pod is not found on that node");
        }
        out[node].push_back(std::move(found));
      }
      pdb[node] = meta.num_pdb_violations;
    }
    return out;
  }

  // DefaultPreemption's PostFilter for attempt `a`, which found no feasible node among the
  // `num_nodes`; `might_help` are the nodes an extender failed resolvably.
  void Preempt(ScheduleAttempt& a, const json& pod, int32_t num_nodes,
               const std::set<std::string>& might_help, std::stop_token stop) {
    if (StringAt(pod, {"spec", "preemptionPolicy"}) == "Never") {
      a.message += " preemption: not eligible due to preemptionPolicy=Never.";
      return;
    }
    const int32_t priority = PodPriority(pod);
    const auto on_node = PodsByNode();
    const std::string_view nominated = StringAt(pod, {"status", "nominatedNodeName"});
    if (auto it = on_node.find(nominated); !nominated.empty() && it != on_node.end()) {
      for (const ObjectPtr& p : it->second) {
        if (Deleting(*p) && PodPriority(*p) < priority) {
          a.message += " preemption: not eligible due to a terminating pod on the nominated node.";
          return;
        }
      }
    }
    // Candidates: nodes where removing the lower-priority pods might help, in name order.
    std::map<std::string, std::string> why_not;
    VictimMap victims;
    const size_t limit = size_t(NumPreemptionCandidates(num_nodes));
    for (const std::string& node : might_help) {
      auto it = on_node.find(node);
      std::vector<ObjectPtr> lower;
      if (it != on_node.end()) {
        for (const ObjectPtr& p : it->second) {
          if (PodPriority(*p) < priority) lower.push_back(p);
        }
      }
      if (lower.empty()) {
        why_not[node] = "No preemption victims found for incoming pod";
      } else if (victims.size() < limit) {
        victims[node] = std::move(lower);
      }
    }
    std::map<std::string, int64_t> pdb;
    for (Extender& e : extenders) {
      if (victims.empty()) break;
      if (e.config.preempt_verb.empty() || !e.config.IsInterested(pod)) continue;
      auto narrowed = CallPreempt(e, pod, victims, on_node, pdb, stop);
      if (!narrowed.ok()) {
        if (e.config.ignorable) {
          HAMI_LOG(kInfo, "event=extender_ignored pod=%s error=\"%s\"", a.pod.c_str(),
                   narrowed.error().message().c_str());
          continue;
        }
        a.message += " preemption: " + narrowed.error().message();
        return;
      }
      for (const auto& [node, pods] : victims) {
        if (!narrowed->contains(node)) why_not[node] = "Preemption is not helpful for scheduling";
      }
      victims = std::move(*narrowed);
    }
    if (victims.empty()) {
      std::map<std::string, std::string> reasons;
      for (const NodeInfoPtr& node : NodeSnapshot()) {
        auto w = why_not.find(node->name);
        reasons[node->name] =
            w != why_not.end() ? w->second : "Preemption is not helpful for scheduling";
      }
      a.message += " preemption: " + FitErrorMessage(num_nodes, reasons);
      return;
    }

    std::vector<PreemptionCandidate> candidates;
    for (const auto& [node, pods] : victims) {
      PreemptionCandidate c;
      c.node = node;
      for (const ObjectPtr& p : pods) c.victim_priorities.push_back(PodPriority(*p));
      if (auto it = pdb.find(node); it != pdb.end()) c.num_pdb_violations = it->second;
      candidates.push_back(std::move(c));
    }
    const std::string node = candidates[PickPreemptionCandidate(candidates)].node;
    const std::string pod_uid(hami::kube::MetadataString(pod, "uid"));
    for (const ObjectPtr& victim : victims[node]) {
      const std::string vkey = hami::kube::ObjectKey(*victim);
      const std::string vns(hami::kube::MetadataString(*victim, "namespace"));
      const std::string vname(hami::kube::MetadataString(*victim, "name"));
      json condition = {
          {"status",
           {{"conditions",
             json::array({{{"type", "DisruptionTarget"},
                           {"status", "True"},
                           {"reason", "PreemptionByScheduler"},
                           {"message", recorder_component + ": preempting to accommodate a higher "
                                                            "priority pod"},
                           {"lastTransitionTime",
                            hami::kube::FormatTime(std::chrono::system_clock::now())}}})}}}};
      auto patched = client.Patch(hami::kube::kPods, vns, vname, hami::kube::PatchType::kStrategic,
                                  condition, "status");
      if (!patched.ok() && patched.error().code() != ErrorCode::kNotFound) {
        HAMI_LOG(kWarn, "event=victim_condition_not_set pod=%s error=\"%s\"", vkey.c_str(),
                 patched.error().message().c_str());
      }
      recorder->Record(hami::kube::ReferenceToObject(hami::kube::kPods, *victim),
                       hami::kube::EventType::kNormal, "Preempted",
                       "Preempted by pod " + pod_uid + " on node " + node);
      auto deleted = client.Delete(hami::kube::kPods, vns, vname);
      if (!deleted.ok() && deleted.error().code() != ErrorCode::kNotFound) {
        a.message += " preemption: deleting victim " + vkey + ": " + deleted.error().message();
        return;
      }
      if (deleted.ok()) a.victims.push_back(vkey);  // else another preemptor's deletion won
    }
    // Lower-priority pods nominated to the node lose their nomination.
    for (const ObjectPtr& p : pod_informer->store().List()) {
      if (StringAt(*p, {"status", "nominatedNodeName"}) != node || PodPriority(*p) >= priority ||
          hami::kube::ObjectKey(*p) == a.pod) {
        continue;
      }
      auto cleared =
          client.Patch(hami::kube::kPods, hami::kube::MetadataString(*p, "namespace"),
                       hami::kube::MetadataString(*p, "name"), hami::kube::PatchType::kStrategic,
                       json{{"status", {{"nominatedNodeName", nullptr}}}}, "status");
      if (!cleared.ok()) {
        HAMI_LOG(kWarn, "event=nomination_not_cleared pod=%s error=\"%s\"",
                 hami::kube::ObjectKey(*p).c_str(), cleared.error().message().c_str());
      }
    }
    auto nominated_now =
        client.Patch(hami::kube::kPods, hami::kube::MetadataString(pod, "namespace"),
                     hami::kube::MetadataString(pod, "name"), hami::kube::PatchType::kStrategic,
                     json{{"status", {{"nominatedNodeName", node}}}}, "status");
    if (!nominated_now.ok()) {
      HAMI_LOG(kWarn, "event=nomination_not_set pod=%s node=%s error=\"%s\"", a.pod.c_str(),
               node.c_str(), nominated_now.error().message().c_str());
    }
    a.nominated_node = node;
    HAMI_LOG(kInfo, "event=preempted pod=%s node=%s victims=%zu", a.pod.c_str(), node.c_str(),
             a.victims.size());
    std::lock_guard lock(mu);
    ++stats.preemptions;
    stats.victims_deleted += a.victims.size();
  }

  // Counts, records the event and, for a failure, the pod's condition; tells the observer.
  ScheduleAttempt Finish(ScheduleAttempt a, const json& pod) {
    using Outcome = ScheduleAttempt::Outcome;
    {
      std::lock_guard lock(mu);
      switch (a.outcome) {
        case Outcome::kScheduled:
          ++stats.scheduled;
          break;
        case Outcome::kUnschedulable:
          ++stats.unschedulable;
          break;
        case Outcome::kError:
          ++stats.errors;
          break;
      }
    }
    hami::kube::ObjectReference ref = hami::kube::ReferenceToObject(hami::kube::kPods, pod);
    if (a.outcome == Outcome::kScheduled) {
      HAMI_VLOG(4, "event=scheduled pod=%s node=%s", a.pod.c_str(), a.node.c_str());
      recorder->Record(ref, hami::kube::EventType::kNormal, "Scheduled", a.message);
    } else {
      HAMI_LOG(kInfo, "event=failed_scheduling pod=%s reason=%s message=\"%s\"", a.pod.c_str(),
               a.outcome == Outcome::kUnschedulable ? "Unschedulable" : "SchedulerError",
               a.message.c_str());
      recorder->Record(ref, hami::kube::EventType::kWarning, "FailedScheduling", a.message);
      UpdateCondition(pod,
                      a.outcome == Outcome::kUnschedulable ? "Unschedulable" : "SchedulerError",
                      a.message);
    }
    if (observer) observer(a);
    return a;
  }

  // PodScheduled=False with `reason` and `message`, unless the pod already says so.
  void UpdateCondition(const json& pod, std::string_view reason, const std::string& message) {
    std::string transition = hami::kube::FormatTime(std::chrono::system_clock::now());
    const json* conditions = Path(pod, {"status", "conditions"});
    if (conditions != nullptr && conditions->is_array()) {
      for (const json& c : *conditions) {
        if (StringAt(c, {"type"}) != "PodScheduled") continue;
        if (StringAt(c, {"status"}) == "False") {
          if (StringAt(c, {"reason"}) == reason && StringAt(c, {"message"}) == message) return;
          std::string_view last = StringAt(c, {"lastTransitionTime"});
          if (!last.empty()) transition = std::string(last);
        }
      }
    }
    json patch = {{"status",
                   {{"conditions", json::array({{{"type", "PodScheduled"},
                                                 {"status", "False"},
                                                 {"reason", reason},
                                                 {"message", message},
                                                 {"lastTransitionTime", transition}}})}}}};
    auto r = client.Patch(hami::kube::kPods, hami::kube::MetadataString(pod, "namespace"),
                          hami::kube::MetadataString(pod, "name"),
                          hami::kube::PatchType::kStrategic, patch, "status");
    if (!r.ok()) {
      HAMI_LOG(kWarn, "event=condition_not_updated pod=%s/%s error=\"%s\"",
               std::string(hami::kube::MetadataString(pod, "namespace")).c_str(),
               std::string(hami::kube::MetadataString(pod, "name")).c_str(),
               r.error().message().c_str());
    }
  }
};

Result<std::unique_ptr<SchedulerStandin>> SchedulerStandin::Create(hami::kube::Client& client,
                                                                   SchedulerConfig config,
                                                                   StandinOptions options) {
  if (options.parallelism < 1) {
    return Error(ErrorCode::kInvalidArgument,
                 "kube-scheduler stand-in: parallelism must be at least 1 (got " +
                     std::to_string(options.parallelism) + ")");
  }
  auto impl = std::make_unique<Impl>(client, std::move(config), std::move(options));
  impl->names = impl->config.scheduler_names;
  if (impl->names.empty()) impl->names.push_back(impl->options.scheduler_name);
  impl->initial_backoff = impl->options.initial_backoff.count() > 0
                              ? impl->options.initial_backoff
                              : std::chrono::milliseconds(impl->config.pod_initial_backoff);
  impl->max_backoff = impl->options.max_backoff.count() > 0
                          ? impl->options.max_backoff
                          : std::chrono::milliseconds(impl->config.pod_max_backoff);
  if (impl->max_backoff < impl->initial_backoff) impl->max_backoff = impl->initial_backoff;
  impl->rng.seed(impl->options.seed != 0 ? impl->options.seed : std::random_device{}());

  for (const ExtenderConfig& x : impl->config.extenders) {
    hami::kube::internal::TlsOptions tls;
    tls.ca_pem = x.tls.ca_data;
    tls.client_cert_pem = x.tls.cert_data;
    tls.client_key_pem = x.tls.key_data;
    // kube-scheduler: HTTPS without a CA does not verify the extender's certificate.
    tls.insecure_skip_verify = x.tls.insecure || (x.enable_https && x.tls.ca_data.empty());
    Extender e;
    e.config = x;
    e.transport = std::make_unique<hami::kube::internal::HttpTransport>(
        std::move(tls), "hami-kube-scheduler-standin", x.http_timeout);
    impl->extenders.push_back(std::move(e));
  }

  hami::kube::EventRecorderOptions ro;
  ro.component = impl->options.component.empty() ? impl->names.front() : impl->options.component;
  impl->recorder_component = ro.component;
  impl->recorder = std::make_unique<hami::kube::EventRecorder>(client, ro);
  impl->factory = std::make_unique<hami::kube::InformerFactory>(client);
  impl->node_informer = impl->factory->Get(hami::kube::kNodes);
  impl->pod_informer = impl->factory->Get(hami::kube::kPods);
  impl->dra = std::make_unique<DraScheduler>(client, *impl->factory);
  impl->claim_controller =
      std::make_unique<ResourceClaimController>(client, *impl->factory, impl->names);
  Impl* raw = impl.get();
  impl->node_informer->AddHandler({
      .on_add = [raw](const ObjectPtr& o) { raw->ObserveNode(o, false); },
      .on_update = [raw](const ObjectPtr&, const ObjectPtr& o) { raw->ObserveNode(o, false); },
      .on_delete = [raw](const ObjectPtr& o) { raw->ObserveNode(o, true); },
  });
  impl->pod_informer->AddHandler({
      .on_add = [raw](const ObjectPtr& o) { raw->ObservePod(nullptr, o); },
      .on_update = [raw](const ObjectPtr& old, const ObjectPtr& o) { raw->ObservePod(old, o); },
      .on_delete = [raw](const ObjectPtr& o) { raw->ObservePod(o, nullptr); },
  });
  impl->factory->Get(hami::kube::kResourceClaims)
      ->AddHandler({
          .on_add = [raw](const ObjectPtr& o) { raw->ObserveClaimAdded(o); },
      });
  return std::unique_ptr<SchedulerStandin>(new SchedulerStandin(std::move(impl)));
}

SchedulerStandin::SchedulerStandin(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SchedulerStandin::~SchedulerStandin() { Stop(); }

void SchedulerStandin::Start() {
  if (impl_->started) return;
  impl_->started = true;
  impl_->factory->Start();
  impl_->claim_controller->Start();
  Impl* raw = impl_.get();
  for (int i = 0; i < impl_->options.parallelism; ++i) {
    impl_->workers.emplace_back([raw](std::stop_token stop) { raw->Worker(stop); });
  }
}

void SchedulerStandin::Stop() {
  if (impl_->stopped) return;
  impl_->stopped = true;
  for (std::jthread& w : impl_->workers) w.request_stop();
  impl_->workers.clear();  // joins
  impl_->claim_controller->Stop();
  impl_->factory->StopAll();
  impl_->recorder.reset();
}

bool SchedulerStandin::WaitForSync(std::chrono::steady_clock::time_point deadline) {
  return impl_->factory->WaitForSync(deadline);
}

void SchedulerStandin::set_observer(std::function<void(const ScheduleAttempt&)> observer) {
  impl_->observer = std::move(observer);
}

SchedulerStandin::Stats SchedulerStandin::stats() const {
  std::lock_guard lock(impl_->mu);
  return impl_->stats;
}

const std::vector<std::string>& SchedulerStandin::scheduler_names() const { return impl_->names; }

}  // namespace hami::sim::kube
