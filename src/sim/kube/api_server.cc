#include "sim/kube/api_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

#include "common/file.h"
#include "common/strings.h"
#include "kube/patch.h"
#include "kube/selector.h"
#include "kube/time.h"
#include "sim/kube/admission.h"
#include "sim/kube/api_status.h"
#include "sim/kube/audit.h"
#include "sim/kube/cri_log.h"
#include "sim/kube/discovery.h"
#include "sim/kube/exec.h"
#include "sim/kube/sockets.h"
#include "sim/kube/store.h"
#include "sim/kube/strategy.h"

namespace hami::sim::kube {

using hami::kube::Resource;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

constexpr int kWriteTimeoutSeconds = 30;
constexpr size_t kMaxBodyBytes = 3 * 1024 * 1024;  // the API server's request limit
constexpr int kMaxJsonDepth = 512;
constexpr size_t kMaxLogBytes = 64 << 20;  // the most of a pod log file served
// The kind that pods/log's query parameters are validated as (422 "PodLogOptions "p" is invalid").
constexpr Resource kPodLogOptions{"", "v1", "", "", "PodLogOptions", true, ""};
constexpr size_t kKeepAliveMaxCount = 1000000;
constexpr int kInitialEventsPerStep = 256;
constexpr auto kBookmarkInterval = std::chrono::seconds(1);
constexpr auto kMaxWatchWait = std::chrono::seconds(1);
constexpr auto kStopWatchGrace = std::chrono::seconds(2);
constexpr int64_t kHighestUserPriority = 1000000000;  // above it: the system classes only

std::string MetaString(const json& object, const char* field) {
  auto m = object.find("metadata");
  if (m == object.end() || !m->is_object()) return "";
  auto it = m->find(field);
  return it != m->end() && it->is_string() ? it->get<std::string>() : "";
}
constexpr char kJsonType[] = "application/json";
// Watch streams: a JSON type that cpp-httplib does not gzip (it compresses exactly
// "application/json", and a compressed stream would hold events back until its buffer fills).
constexpr char kWatchJsonType[] = "application/json; charset=utf-8";

std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

bool Is(const Resource& a, const Resource& b) { return a.group == b.group && a.plural == b.plural; }

// Whether `text` nests arrays and objects deeper than `limit` (strings skipped).
bool NestsDeeperThan(std::string_view text, int limit) {
  int depth = 0;
  bool in_string = false;
  bool escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      if (++depth > limit) return true;
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return false;
}

ApiResult<json> ParseJson(std::string_view text, std::string_view what) {
  if (text.empty()) return BadRequest(std::string(what) + " is empty: a JSON document is required");
  if (NestsDeeperThan(text, kMaxJsonDepth)) {
    return BadRequest(std::string(what) + " nests deeper than " + std::to_string(kMaxJsonDepth) +
                      " levels");
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    return BadRequest(std::string(what) + " is not valid JSON: " + e.what());
  }
}

// "application/merge-patch+json; charset=utf-8" → "application/merge-patch+json".
std::string MediaType(std::string_view content_type) {
  std::string out;
  for (char c : content_type.substr(0, content_type.find(';'))) {
    if (c != ' ' && c != '\t') out += char(std::tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

std::optional<bool> ParseBool(std::string_view v) {
  if (v == "true" || v == "True" || v == "TRUE" || v == "1" || v == "t" || v == "T") return true;
  if (v == "false" || v == "False" || v == "FALSE" || v == "0" || v == "f" || v == "F") {
    return false;
  }
  return std::nullopt;
}

ApiResult<bool> BoolParam(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return false;
  const std::string v = req.get_param_value(name);
  auto b = ParseBool(v);
  if (!b) return BadRequest(std::string(name) + ": invalid boolean \"" + v + "\"");
  return *b;
}

std::optional<int64_t> ParseInt(std::string_view v) {
  int64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc() || p != v.data() + v.size()) return std::nullopt;
  return n;
}

// A non-negative integer parameter; 0 when absent.
ApiResult<int64_t> CountParam(const httplib::Request& req, const char* name) {
  if (!req.has_param(name)) return int64_t{0};
  const std::string v = req.get_param_value(name);
  auto n = ParseInt(v);
  if (!n || *n < 0) {
    return BadRequest(std::string(name) + ": invalid value \"" + v +
                      "\": must be a non-negative integer");
  }
  return *n;
}

// includeObject: what each row of a Table carries (metadata by default).
ApiResult<TableRowObject> IncludeObjectParam(const httplib::Request& req) {
  const std::string v = req.get_param_value("includeObject");
  if (auto o = ParseIncludeObject(v)) return *o;
  return BadRequest("includeObject: Unsupported value: \"" + v +
                    "\": supported values: \"Metadata\", \"None\", \"Object\"");
}

ApiResult<WriteMode> DryRunParam(const httplib::Request& req) {
  if (!req.has_param("dryRun")) return WriteMode::kCommit;
  const std::string v = req.get_param_value("dryRun");
  if (v == "All") return WriteMode::kDryRun;
  if (v.empty()) return WriteMode::kCommit;
  return BadRequest("dryRun: Unsupported value: \"" + v + "\": supported values: \"All\"");
}

// What a request addresses under /api/v1 or /apis/GROUP/VERSION.
struct Target {
  const Resource* resource = nullptr;
  std::string ns;    // the URL's namespace; empty for cluster-scoped or all namespaces
  std::string name;  // empty: the collection
  Subresource sub = Subresource::kNone;
};

const Resource* Lookup(std::string_view group, std::string_view version, std::string_view plural) {
  for (const Resource& r : hami::kube::AllResources()) {
    if (r.group == group && r.version == version && r.plural == plural) return &r;
  }
  return nullptr;
}

// The target of a resource path, nullopt for any other path (discovery, unknown resources).
// `unserved` is set for a resource path whose subresource or shape the server does not serve.
std::optional<Target> ParseTarget(std::string_view path, bool* unserved) {
  *unserved = false;
  if (path.empty() || path[0] != '/') return std::nullopt;
  path.remove_prefix(1);
  if (!path.empty() && path.back() == '/') path.remove_suffix(1);
  std::vector<std::string_view> s = SplitString(path, '/', false);
  if (s.back().empty()) s.pop_back();  // "" and "a/" (a trailing '/' was removed above)
  if (std::any_of(s.begin(), s.end(), [](std::string_view p) { return p.empty(); })) {
    return std::nullopt;
  }
  std::string_view group, version;
  size_t at = 0;
  if (s.size() >= 2 && s[0] == "api") {
    version = s[1];
    at = 2;
  } else if (s.size() >= 3 && s[0] == "apis") {
    group = s[1];
    version = s[2];
    at = 3;
  } else {
    return std::nullopt;
  }
  std::vector<std::string_view> rest(s.begin() + long(at), s.end());
  if (rest.empty()) return std::nullopt;
  Target t;
  if (rest[0] == "namespaces" && rest.size() >= 3 && Lookup(group, version, rest[2]) != nullptr &&
      Lookup(group, version, rest[2])->namespaced) {
    t.ns = rest[1];
    rest.erase(rest.begin(), rest.begin() + 2);
    t.resource = Lookup(group, version, rest[0]);
  } else {
    t.resource = Lookup(group, version, rest[0]);
    if (t.resource == nullptr) return std::nullopt;
    if (t.resource->namespaced && rest.size() > 1) {
      *unserved = true;
      return std::nullopt;
    }
  }
  if (t.resource == nullptr) return std::nullopt;
  if (rest.size() >= 2) t.name = rest[1];
  if (rest.size() == 3) {
    if (rest[2] == "status" && HasStatusSubresource(*t.resource)) {
      t.sub = Subresource::kStatus;
    } else if (rest[2] == "binding" && Is(*t.resource, hami::kube::kPods)) {
      t.sub = Subresource::kBinding;
    } else if (rest[2] == "log" && Is(*t.resource, hami::kube::kPods)) {
      t.sub = Subresource::kLog;
    } else if (rest[2] == "exec" && Is(*t.resource, hami::kube::kPods)) {
      t.sub = Subresource::kExec;
    } else {
      *unserved = true;
      return std::nullopt;
    }
  } else if (rest.size() > 3) {
    *unserved = true;
    return std::nullopt;
  }
  return t;
}

// The object as a response carries it: kind and apiVersion first, then the stored fields.
std::string TypedJson(const Resource& r, const StoredObject& o) {
  const std::string& body = o.Json();
  std::string out;
  out.reserve(body.size() + 64);
  out += "{\"kind\":\"";
  out += r.kind;
  out += "\",\"apiVersion\":\"";
  out += r.ApiVersion();
  out += '"';
  if (body.size() > 2) {
    out += ',';
    out.append(body, 1, std::string::npos);
  } else {
    out += '}';
  }
  return out;
}

json TypedObject(const Resource& r, const StoredObject& o) {
  json j = o.object();
  j["kind"] = r.kind;
  j["apiVersion"] = r.ApiVersion();
  return j;
}

void SetBody(httplib::Response& res, int code, std::string body, const char* content_type) {
  res.status = code;
  res.body = std::move(body);
  res.set_header("Content-Type", content_type);
}

void SendStatus(httplib::Response& res, const ApiStatus& s) {
  if (s.retry_after_seconds > 0)
    res.set_header("Retry-After", std::to_string(s.retry_after_seconds));
  SetBody(res, s.code, Dump(ToStatusJson(s)), kJsonType);
}

std::string EventLine(std::string_view type, std::string_view object_json) {
  std::string line;
  line.reserve(object_json.size() + 32);
  line += "{\"type\":\"";
  line += type;
  line += "\",\"object\":";
  line += object_json;
  line += "}\n";
  return line;
}

std::string ServerAddress(const httplib::Request& req) {
  if (req.local_addr.find(':') != std::string::npos) {
    return "[" + req.local_addr + "]:" + std::to_string(req.local_port);
  }
  return req.local_addr + ":" + std::to_string(req.local_port);
}

constexpr char kBase64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64(std::string_view in) {
  std::string out;
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v = uint32_t(uint8_t(in[i])) << 16 | uint32_t(uint8_t(in[i + 1])) << 8 |
                       uint32_t(uint8_t(in[i + 2]));
    for (int k = 18; k >= 0; k -= 6) out += kBase64[(v >> k) & 0x3f];
  }
  if (i < in.size()) {
    uint32_t v = uint32_t(uint8_t(in[i])) << 16;
    if (i + 1 < in.size()) v |= uint32_t(uint8_t(in[i + 1])) << 8;
    out += kBase64[(v >> 18) & 0x3f];
    out += kBase64[(v >> 12) & 0x3f];
    out += i + 1 < in.size() ? kBase64[(v >> 6) & 0x3f] : '=';
    out += '=';
  }
  return out;
}

std::vector<std::string> SplitList(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view item : SplitString(text, ',', true)) {
    while (!item.empty() && item.front() == ' ') item.remove_prefix(1);
    while (!item.empty() && item.back() == ' ') item.remove_suffix(1);
    if (!item.empty()) out.emplace_back(item);
  }
  return out;
}

}  // namespace

json FaultsToJson(const Faults& f) {
  return {{"latency_ms", f.latency.count()},
          {"rate_429", f.rate_429},
          {"retry_after_seconds", f.retry_after_seconds},
          {"rate_500", f.rate_500},
          {"cut_watch_after_events", f.cut_watch_after_events},
          {"force_gone_watches", f.force_gone_watches},
          {"seed", f.seed}};
}

Result<Faults> FaultsFromJson(const json& j) {
  auto bad = [](const std::string& field, const std::string& why) {
    return Error(ErrorCode::kInvalidArgument, "faults: " + field + ": " + why);
  };
  if (!j.is_object()) return Error(ErrorCode::kInvalidArgument, "faults: must be a JSON object");
  Faults f;
  for (const auto& item : j.items()) {
    const std::string& key = item.key();  // named, not bound: clang 14 cannot capture bindings
    const json& v = item.value();
    auto integer = [&](int64_t min, int64_t max) -> Result<int64_t> {
      if (!v.is_number_integer()) return bad(key, "must be an integer, not " + v.dump());
      const int64_t n = v.get<int64_t>();
      if (n < min || n > max) {
        return bad(key, std::to_string(n) + " is not from " + std::to_string(min) + " to " +
                            std::to_string(max));
      }
      return n;
    };
    auto rate = [&]() -> Result<double> {
      if (!v.is_number()) return bad(key, "must be a number, not " + v.dump());
      const double d = v.get<double>();
      if (!(d >= 0 && d <= 1)) return bad(key, v.dump() + " is not from 0 to 1");
      return d;
    };
    if (key == "latency_ms") {
      f.latency = std::chrono::milliseconds(HAMI_TRY(integer(0, 600000)));
    } else if (key == "rate_429") {
      f.rate_429 = HAMI_TRY(rate());
    } else if (key == "retry_after_seconds") {
      f.retry_after_seconds = int(HAMI_TRY(integer(0, 3600)));
    } else if (key == "rate_500") {
      f.rate_500 = HAMI_TRY(rate());
    } else if (key == "cut_watch_after_events") {
      f.cut_watch_after_events = int(HAMI_TRY(integer(0, 1 << 30)));
    } else if (key == "force_gone_watches") {
      f.force_gone_watches = int(HAMI_TRY(integer(0, 1 << 30)));
    } else if (key == "seed") {
      if (!v.is_number_unsigned())
        return bad(key, "must be a non-negative integer, not " + v.dump());
      f.seed = v.get<uint64_t>();
    } else {
      return bad(key,
                 "unknown field (known: latency_ms, rate_429, retry_after_seconds, rate_500, "
                 "cut_watch_after_events, force_gone_watches, seed)");
    }
  }
  if (f.rate_429 + f.rate_500 > 1) {
    return bad("rate_429", "rate_429 + rate_500 is more than 1");
  }
  return f;
}

struct ApiServer::Impl {
  struct WatchStream;

  explicit Impl(const ApiServerOptions& o)
      : options(o),
        store(Store::Options{o.watch_window, std::chrono::seconds(300), 128}),
        audit(o.audit_capacity) {}

  void Handle(const httplib::Request& req, httplib::Response& res);
  void HandleResource(const httplib::Request& req, httplib::Response& res, const Target& t);
  // True when a fault answered the request.
  bool InjectFaults(httplib::Response& res);
  bool TakeForcedGone();
  void Wait(std::chrono::milliseconds d);

  void ServeList(const httplib::Request& req, httplib::Response& res, const Target& t,
                 const hami::kube::LabelSelector& labels, const hami::kube::FieldSelector& fields);
  void ServeWatch(const httplib::Request& req, httplib::Response& res, const Target& t,
                  hami::kube::LabelSelector labels, hami::kube::FieldSelector fields);
  void ServeGet(const httplib::Request& req, httplib::Response& res, const Target& t);
  void ServeCreate(const httplib::Request& req, httplib::Response& res, const Target& t);
  void ServeUpdate(const httplib::Request& req, httplib::Response& res, const Target& t);
  void ServePatch(const httplib::Request& req, httplib::Response& res, const Target& t);
  void ServeDelete(const httplib::Request& req, httplib::Response& res, const Target& t);
  void ServeDeleteCollection(const httplib::Request& req, httplib::Response& res, const Target& t,
                             const hami::kube::LabelSelector& labels,
                             const hami::kube::FieldSelector& fields);
  void ServeBinding(const httplib::Request& req, httplib::Response& res, const Target& t);
  void ServeFaults(const httplib::Request& req, httplib::Response& res);
  void ServeAudit(const httplib::Request& req, httplib::Response& res);
  void ServeLog(const httplib::Request& req, httplib::Response& res, const Target& t);
  // pods/exec (exec.h): takes the request's connection over for the session.
  void ServeExec(const httplib::Request& req, httplib::Response& res, const Target& t);
  void Audit(const httplib::Request& req, const Target& t);
  // Mutating admission of a create of `body` (a request body) into `ns`: the body as the
  // webhooks leave it, or the Status refusing it. Only pods are admitted; other resources,
  // and any create while no webhook configuration exists, pass unchanged.
  // The Priority admission plugin. A PriorityClass create: a value above
  // kHighestUserPriority, or a second globalDefault, is refused (403). A pod create: its
  // spec.priorityClassName (none: the globalDefault class, the lowest of several; none of
  // those: priority 0 and no class) gives spec.priority and spec.preemptionPolicy; an unknown
  // class, or a priority or preemptionPolicy the pod gives that differs, is refused (403).
  std::optional<ApiStatus> AdmitPriorityClass(const json& body);
  std::optional<ApiStatus> AdmitPodPriority(json& body);
  ApiResult<json> AdmitCreate(const Resource& r, const std::string& ns, json body,
                              const std::string& user_agent, WriteMode mode);
  void SendObject(const httplib::Request& req, httplib::Response& res, int code, const Resource& r,
                  const StoredObject& o);

  ApiServerOptions options;
  Store store;
  AuditLog audit;
  Admitter admitter;
  std::unique_ptr<httplib::Server> http;
  std::thread thread;
  int port = 0;
  bool tls = false;

  std::atomic<bool> stopping{false};
  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  mutable std::mutex faults_mu;
  Faults faults;
  std::mt19937_64 fault_rng{1};

  std::atomic<uint64_t> requests{0};
  std::atomic<uint64_t> watches_open{0};
  std::atomic<uint64_t> faults_injected{0};
};

// One watch stream's state, owned by its content provider.
struct ApiServer::Impl::WatchStream {
  enum class Step { kMore, kDone, kAbort };

  Step Pump(httplib::DataSink& sink);
  bool Matches(const json& o) const { return labels.Matches(o) && fields.Matches(o); }
  bool Send(httplib::DataSink& sink, std::string_view type, const StoredObject& o);
  bool SendBookmark(httplib::DataSink& sink, int64_t rv, bool initial_events_end);
  bool SendChange(httplib::DataSink& sink, const Change& c);
  // Counts an object event; true when the cut fault ends the stream here.
  bool Cut() { return cut_after > 0 && ++events >= cut_after; }

  Impl* impl = nullptr;
  const Resource* r = nullptr;
  std::shared_ptr<Watcher> watcher;
  std::vector<ObjectPtr> initial;
  size_t initial_next = 0;
  hami::kube::LabelSelector labels;
  hami::kube::FieldSelector fields;
  bool table = false;
  TableRowObject row_object = TableRowObject::kMetadata;
  bool columns_sent = false;
  bool bookmarks = false;
  bool initial_events_end = false;
  std::optional<Clock::time_point> deadline;
  int cut_after = 0;
  int events = 0;
  bool cut = false;
  int64_t last_rv = 0;
  int sock = -1;
  Clock::time_point last_write = Clock::now();
};

bool ApiServer::Impl::WatchStream::Send(httplib::DataSink& sink, std::string_view type,
                                        const StoredObject& o) {
  std::string object;
  if (table) {
    object = Dump(RenderTable(*r, {&o.object()}, std::to_string(o.rv()), !columns_sent,
                              std::chrono::system_clock::now(), row_object));
    columns_sent = true;
  } else {
    object = TypedJson(*r, o);
  }
  last_rv = std::max(last_rv, o.rv());
  last_write = Clock::now();
  const std::string line = EventLine(type, object);
  return sink.write(line.data(), line.size());
}

bool ApiServer::Impl::WatchStream::SendBookmark(httplib::DataSink& sink, int64_t rv,
                                                bool initial_end) {
  json meta = {{"resourceVersion", std::to_string(rv)}};
  if (initial_end) meta["annotations"] = {{"k8s.io/initial-events-end", "true"}};
  const json object = {{"kind", r->kind}, {"apiVersion", r->ApiVersion()}, {"metadata", meta}};
  last_write = Clock::now();
  const std::string line = EventLine("BOOKMARK", Dump(object));
  return sink.write(line.data(), line.size());
}

bool ApiServer::Impl::WatchStream::SendChange(httplib::DataSink& sink, const Change& c) {
  const bool now_matches = c.type != EventType::kDeleted && Matches(c.object->object());
  const bool matched = c.previous != nullptr && Matches(c.previous->object());
  if (!now_matches && !matched) return true;
  bool ok = true;
  if (now_matches) {
    ok = Send(sink, matched ? "MODIFIED" : "ADDED", *c.object);
  } else if (c.type == EventType::kDeleted) {
    ok = Send(sink, "DELETED", *c.object);
  } else {
    // Stopped matching: DELETED with the previous content and this change's version.
    json last = c.previous->object();
    last["metadata"]["resourceVersion"] = std::to_string(c.rv);
    ok = Send(sink, "DELETED", StoredObject(std::move(last), c.rv));
  }
  if (ok && Cut()) cut = true;
  return ok;
}

ApiServer::Impl::WatchStream::Step ApiServer::Impl::WatchStream::Pump(httplib::DataSink& sink) {
  if (initial_next < initial.size()) {
    const size_t end = std::min(initial.size(), initial_next + kInitialEventsPerStep);
    for (; initial_next < end; ++initial_next) {
      const StoredObject& o = *initial[initial_next];
      if (!Matches(o.object())) continue;
      if (!Send(sink, "ADDED", o)) return Step::kAbort;
      if (Cut()) return Step::kAbort;
    }
    if (initial_next == initial.size()) {
      initial.clear();
      initial.shrink_to_fit();
      if (initial_events_end && bookmarks && !SendBookmark(sink, last_rv, true)) {
        return Step::kAbort;
      }
    }
    return Step::kMore;
  }
  switch (watcher->state()) {
    case Watcher::State::kClosed:
      return Step::kDone;
    case Watcher::State::kOverflowed: {
      ApiStatus s =
          Expired("the watch fell more than " + std::to_string(impl->options.watch_window) +
                  " changes behind; list again and watch from the list's resourceVersion");
      const std::string line = EventLine("ERROR", Dump(ToStatusJson(s)));
      sink.write(line.data(), line.size());
      return Step::kDone;
    }
    case Watcher::State::kOpen:
      break;
  }
  std::vector<ChangePtr> changes = watcher->Take();
  for (const ChangePtr& c : changes) {
    if (!SendChange(sink, *c)) return Step::kAbort;
    if (cut) return Step::kAbort;
  }
  if (!changes.empty()) return Step::kMore;
  const auto now = Clock::now();
  if (deadline && now >= *deadline) {
    if (bookmarks) {
      const int64_t rv = impl->store.DrainedRv(*watcher).value_or(last_rv);
      if (!SendBookmark(sink, std::max(rv, last_rv), false)) return Step::kAbort;
    }
    return Step::kDone;
  }
  if (bookmarks && now - last_write >= kBookmarkInterval) {
    if (auto rv = impl->store.DrainedRv(*watcher)) {
      last_rv = std::max(last_rv, *rv);
      if (!SendBookmark(sink, last_rv, false)) return Step::kAbort;
    }
    return Step::kMore;
  }
  auto until = now + kMaxWatchWait;
  if (deadline) until = std::min(until, *deadline);
  if (bookmarks) until = std::min(until, last_write + kBookmarkInterval);
  const auto wait_ms =
      std::chrono::duration_cast<std::chrono::milliseconds>(until - now).count() + 1;
  pollfd fds[2] = {{watcher->fd(), POLLIN, 0}, {sock, POLLRDHUP, 0}};
  const int n = poll(fds, sock >= 0 ? 2 : 1, int(std::max<int64_t>(wait_ms, 0)));
  if (n > 0 && sock >= 0 && (fds[1].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) != 0) {
    return Step::kAbort;  // the client went away
  }
  return Step::kMore;
}

void ApiServer::Impl::Wait(std::chrono::milliseconds d) {
  std::unique_lock lock(stop_mu);
  stop_cv.wait_for(lock, d, [this] { return stopping.load(); });
}

bool ApiServer::Impl::InjectFaults(httplib::Response& res) {
  Faults f;
  double draw = 0;
  {
    std::lock_guard lock(faults_mu);
    f = faults;
    if (f.rate_429 > 0 || f.rate_500 > 0) {
      draw = std::uniform_real_distribution<double>(0, 1)(fault_rng);
    } else {
      draw = 1;
    }
  }
  if (f.latency.count() > 0) Wait(f.latency);
  if (draw < f.rate_429) {
    ++faults_injected;
    SendStatus(res, TooManyRequests(std::max(f.retry_after_seconds, 1)));
    return true;
  }
  if (draw < f.rate_429 + f.rate_500) {
    ++faults_injected;
    SendStatus(res, InternalError("injected fault"));
    return true;
  }
  return false;
}

bool ApiServer::Impl::TakeForcedGone() {
  std::lock_guard lock(faults_mu);
  if (faults.force_gone_watches <= 0) return false;
  --faults.force_gone_watches;
  return true;
}

void ApiServer::Impl::SendObject(const httplib::Request& req, httplib::Response& res, int code,
                                 const Resource& r, const StoredObject& o) {
  if (WantsTable(req.get_header_value("Accept"))) {
    SetBody(res, code,
            Dump(RenderTable(r, {&o.object()}, std::to_string(o.rv()), true,
                             std::chrono::system_clock::now(),
                             ParseIncludeObject(req.get_param_value("includeObject"))
                                 .value_or(TableRowObject::kMetadata))),
            std::string(kTableContentType).c_str());
    return;
  }
  SetBody(res, code, TypedJson(r, o), kJsonType);
}

void ApiServer::Impl::ServeFaults(const httplib::Request& req, httplib::Response& res) {
  if (req.method == "PUT") {
    auto body = ParseJson(req.body, "the faults");
    if (!body.ok()) return SendStatus(res, body.status());
    auto f = FaultsFromJson(*body);
    if (!f.ok()) return SendStatus(res, BadRequest(f.error().message()));
    std::lock_guard lock(faults_mu);
    faults = *f;
    fault_rng.seed(f->seed);
  } else if (req.method != "GET") {
    return SendStatus(res, MethodNotAllowed(req.method));
  }
  std::lock_guard lock(faults_mu);
  SetBody(res, 200, Dump(FaultsToJson(faults)), kJsonType);
}

void ApiServer::Impl::ServeAudit(const httplib::Request& req, httplib::Response& res) {
  if (req.method == "DELETE") {
    audit.Clear();
  } else if (req.method != "GET" && req.method != "HEAD") {
    return SendStatus(res, MethodNotAllowed(req.method));
  }
  SetBody(res, 200, Dump(audit.ToJson(req.get_param_value("user_agent"))), kJsonType);
}

void ApiServer::Impl::Audit(const httplib::Request& req, const Target& t) {
  if (!options.audit) return;
  const bool collection = t.name.empty();
  auto watch = ParseBool(req.get_param_value("watch"));
  AuditEntry e;
  e.user_agent = AuditUserAgent(req.get_header_value("User-Agent"));
  e.verb = AuditVerb(req.method, collection, watch.value_or(false));
  e.group = std::string(t.resource->group);
  e.resource = std::string(t.resource->plural);
  switch (t.sub) {
    case Subresource::kNone:
      break;
    case Subresource::kStatus:
      e.subresource = "status";
      break;
    case Subresource::kBinding:
      e.subresource = "binding";
      break;
    case Subresource::kLog:
      e.subresource = "log";
      break;
    case Subresource::kExec:
      e.subresource = "exec";
      break;
  }
  // As kube-apiserver's RequestInfo: a namespace object is in its own namespace.
  e.ns = Is(*t.resource, hami::kube::kNamespaces) ? t.name : t.ns;
  e.name = t.name;
  audit.Record(std::move(e));
}

void ApiServer::Impl::Handle(const httplib::Request& req, httplib::Response& res) {
  ++requests;
  try {
    const std::string& path = req.path;
    if (path == "/healthz" || path == "/readyz" || path == "/livez" ||
        path.starts_with("/healthz/") || path.starts_with("/readyz/") ||
        path.starts_with("/livez/")) {
      SetBody(res, 200, "ok", "text/plain; charset=utf-8");
      return;
    }
    if (path == "/sim/faults") return ServeFaults(req, res);
    if (path == "/sim/audit") return ServeAudit(req, res);
    bool unserved = false;
    std::optional<Target> target = ParseTarget(path, &unserved);
    if (!target) {
      if (!unserved && (req.method == "GET" || req.method == "HEAD")) {
        if (auto d = RenderDiscovery(path, req.get_header_value("Accept"), ServerAddress(req))) {
          SetBody(res, d->status, std::move(d->body), d->content_type.c_str());
          return;
        }
      }
      return SendStatus(res, PathNotFound());
    }
    Audit(req, *target);
    if (InjectFaults(res)) return;
    HandleResource(req, res, *target);
  } catch (const std::exception& e) {
    SendStatus(res, InternalError(e.what()));
  }
}

void ApiServer::Impl::HandleResource(const httplib::Request& req, httplib::Response& res,
                                     const Target& t) {
  const Resource& r = *t.resource;
  const std::string& m = req.method;
  if (!t.ns.empty() && !r.namespaced) return SendStatus(res, PathNotFound());
  if (t.name.empty()) {
    auto labels = hami::kube::LabelSelector::Parse(req.get_param_value("labelSelector"));
    if (!labels.ok()) return SendStatus(res, BadRequest(labels.error().message()));
    auto fields = hami::kube::FieldSelector::Parse(req.get_param_value("fieldSelector"));
    if (!fields.ok()) return SendStatus(res, BadRequest(fields.error().message()));
    if (Status s = fields->CheckSupported(SupportedFields(r)); !s.ok()) {
      return SendStatus(res, BadRequest(s.error().message()));
    }
    if (m == "GET" || m == "HEAD") {
      auto watch = BoolParam(req, "watch");
      if (!watch.ok()) return SendStatus(res, watch.status());
      if (*watch) return ServeWatch(req, res, t, std::move(*labels), std::move(*fields));
      return ServeList(req, res, t, *labels, *fields);
    }
    if (m == "POST") {
      if (r.namespaced && t.ns.empty()) return SendStatus(res, MethodNotAllowed(m));
      return ServeCreate(req, res, t);
    }
    if (m == "DELETE") return ServeDeleteCollection(req, res, t, *labels, *fields);
    return SendStatus(res, MethodNotAllowed(m));
  }
  if (r.namespaced && t.ns.empty()) return SendStatus(res, PathNotFound());
  switch (t.sub) {
    case Subresource::kBinding:
      if (m == "POST") return ServeBinding(req, res, t);
      return SendStatus(res, MethodNotAllowed(m));
    case Subresource::kStatus:
      if (m == "GET" || m == "HEAD") return ServeGet(req, res, t);
      if (m == "PUT") return ServeUpdate(req, res, t);
      if (m == "PATCH") return ServePatch(req, res, t);
      return SendStatus(res, MethodNotAllowed(m));
    case Subresource::kLog:
      if (m == "GET" || m == "HEAD") return ServeLog(req, res, t);
      return SendStatus(res, MethodNotAllowed(m));
    case Subresource::kExec:
      if (m == "GET" || m == "POST") return ServeExec(req, res, t);
      return SendStatus(res, MethodNotAllowed(m));
    case Subresource::kNone:
      break;
  }
  if (m == "GET" || m == "HEAD") return ServeGet(req, res, t);
  if (m == "PUT") return ServeUpdate(req, res, t);
  if (m == "PATCH") return ServePatch(req, res, t);
  if (m == "DELETE") return ServeDelete(req, res, t);
  return SendStatus(res, MethodNotAllowed(m));
}

void ApiServer::Impl::ServeList(const httplib::Request& req, httplib::Response& res,
                                const Target& t, const hami::kube::LabelSelector& labels,
                                const hami::kube::FieldSelector& fields) {
  const Resource& r = *t.resource;
  auto limit = CountParam(req, "limit");
  if (!limit.ok()) return SendStatus(res, limit.status());
  Store::Filter filter;
  const bool selective = !labels.empty() || !fields.empty();
  if (selective) {
    filter = [&](const json& o) { return labels.Matches(o) && fields.Matches(o); };
  }
  auto page = store.List(r, t.ns, filter, *limit, req.get_param_value("continue"));
  if (!page.ok()) return SendStatus(res, page.status());
  if (WantsTable(req.get_header_value("Accept"))) {
    auto row_object = IncludeObjectParam(req);
    if (!row_object.ok()) return SendStatus(res, row_object.status());
    std::vector<const json*> objects;
    objects.reserve(page->items.size());
    for (const ObjectPtr& o : page->items) objects.push_back(&o->object());
    json table = RenderTable(r, objects, std::to_string(page->rv), true,
                             std::chrono::system_clock::now(), *row_object);
    if (!page->continue_token.empty()) table["metadata"]["continue"] = page->continue_token;
    return SetBody(res, 200, Dump(table), std::string(kTableContentType).c_str());
  }
  size_t size = 128;
  for (const ObjectPtr& o : page->items) size += o->Json().size() + 1;
  std::string body;
  body.reserve(size);
  body += "{\"kind\":\"";
  body += r.kind;
  body += "List\",\"apiVersion\":\"";
  body += r.ApiVersion();
  body += "\",\"metadata\":{\"resourceVersion\":\"";
  body += std::to_string(page->rv);
  body += '"';
  if (!page->continue_token.empty()) {
    body += ",\"continue\":\"";
    body += page->continue_token;
    body += '"';
    if (!selective && page->remaining) {
      body += ",\"remainingItemCount\":";
      body += std::to_string(*page->remaining);
    }
  }
  body += "},\"items\":[";
  for (size_t i = 0; i < page->items.size(); ++i) {
    if (i > 0) body += ',';
    body += page->items[i]->Json();
  }
  body += "]}";
  SetBody(res, 200, std::move(body), kJsonType);
}

void ApiServer::Impl::ServeWatch(const httplib::Request& req, httplib::Response& res,
                                 const Target& t, hami::kube::LabelSelector labels,
                                 hami::kube::FieldSelector fields) {
  const Resource& r = *t.resource;
  const bool table = WantsTable(req.get_header_value("Accept"));
  const char* type = table ? kTableContentType.data() : kWatchJsonType;
  auto bookmarks = BoolParam(req, "allowWatchBookmarks");
  if (!bookmarks.ok()) return SendStatus(res, bookmarks.status());
  auto initial_events = BoolParam(req, "sendInitialEvents");
  if (!initial_events.ok()) return SendStatus(res, initial_events.status());
  auto timeout = CountParam(req, "timeoutSeconds");
  if (!timeout.ok()) return SendStatus(res, timeout.status());
  auto row_object = IncludeObjectParam(req);
  if (!row_object.ok()) return SendStatus(res, row_object.status());
  const std::string rv_text = req.get_param_value("resourceVersion");
  std::optional<int64_t> from_rv;
  if (!rv_text.empty() && rv_text != "0" && !*initial_events) {
    from_rv = ParseInt(rv_text);
    if (!from_rv || *from_rv < 0) {
      return SendStatus(res, BadRequest("resourceVersion: invalid value \"" + rv_text +
                                        "\": must be a non-negative integer"));
    }
  }
  auto send_error = [&](const ApiStatus& s) {
    SetBody(res, 200, EventLine("ERROR", Dump(ToStatusJson(s))), type);
  };
  if (TakeForcedGone()) {
    ++faults_injected;
    const int64_t now = store.resource_version();
    return send_error(Expired("too old resource version: " + std::to_string(from_rv.value_or(now)) +
                              " (" + std::to_string(now) + ")"));
  }
  auto start = store.Watch(r, t.ns, from_rv);
  if (!start.ok()) {
    if (start.status().code == 410) return send_error(start.status());
    return SendStatus(res, start.status());
  }
  auto stream = std::make_shared<WatchStream>();
  stream->impl = this;
  stream->r = &r;
  stream->watcher = start->watcher;
  stream->initial = std::move(start->initial);
  stream->labels = std::move(labels);
  stream->fields = std::move(fields);
  stream->table = table;
  stream->row_object = *row_object;
  stream->bookmarks = *bookmarks;
  stream->initial_events_end = *initial_events;
  if (*timeout > 0) stream->deadline = Clock::now() + std::chrono::seconds(*timeout);
  {
    std::lock_guard lock(faults_mu);
    stream->cut_after = faults.cut_watch_after_events;
  }
  stream->last_rv = start->rv;
  stream->sock =
      FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  ++watches_open;
  res.status = 200;
  res.set_chunked_content_provider(
      type,
      [stream](size_t, httplib::DataSink& sink) {
        WatchStream::Step step = WatchStream::Step::kAbort;
        try {
          step = stream->Pump(sink);
        } catch (const std::exception&) {
          // Nothing may escape into the server's thread: drop this stream only.
        }
        switch (step) {
          case WatchStream::Step::kMore:
            return true;
          case WatchStream::Step::kDone:
            sink.done();
            return true;
          case WatchStream::Step::kAbort:
            return false;
        }
        return false;
      },
      [this, stream](bool) {
        store.Unwatch(stream->watcher);
        {
          std::lock_guard lock(stop_mu);
          --watches_open;
        }
        stop_cv.notify_all();
      });
}

void ApiServer::Impl::ServeGet(const httplib::Request& req, httplib::Response& res,
                               const Target& t) {
  auto o = store.Get(*t.resource, t.ns, t.name);
  if (!o.ok()) return SendStatus(res, o.status());
  SendObject(req, res, 200, *t.resource, **o);
}

void ApiServer::Impl::ServeLog(const httplib::Request& req, httplib::Response& res,
                               const Target& t) {
  auto o = store.Get(hami::kube::kPods, t.ns, t.name);
  if (!o.ok()) return SendStatus(res, o.status());
  const json& pod = (*o)->object();
  std::vector<std::string> containers, all;
  const json spec = pod.value("spec", json::object());
  for (const char* list : {"containers", "initContainers", "ephemeralContainers"}) {
    auto it = spec.find(list);
    if (it == spec.end() || !it->is_array()) continue;
    for (const json& c : *it) {
      if (!c.is_object() || !c.contains("name") || !c["name"].is_string()) continue;
      all.push_back(c["name"].get<std::string>());
      if (std::string_view(list) == "containers") containers.push_back(all.back());
    }
  }
  std::string container = req.get_param_value("container");
  if (container.empty()) {
    if (containers.size() != 1) {
      std::string choices;
      for (const std::string& c : containers) choices += (choices.empty() ? "" : " ") + c;
      return SendStatus(res, BadRequest("a container name must be specified for pod " + t.name +
                                        ", choose one of: [" + choices + "]"));
    }
    container = containers.front();
  } else if (std::find(all.begin(), all.end(), container) == all.end()) {
    return SendStatus(res,
                      BadRequest("container " + container + " is not valid for pod " + t.name));
  }
  auto tail = CountParam(req, "tailLines");
  if (!tail.ok()) return SendStatus(res, tail.status());
  auto limit = CountParam(req, "limitBytes");
  if (!limit.ok()) return SendStatus(res, limit.status());
  auto since_seconds = CountParam(req, "sinceSeconds");
  if (!since_seconds.ok()) return SendStatus(res, since_seconds.status());
  auto follow = BoolParam(req, "follow");
  if (!follow.ok()) return SendStatus(res, follow.status());
  auto previous = BoolParam(req, "previous");
  if (!previous.ok()) return SendStatus(res, previous.status());
  auto timestamps = BoolParam(req, "timestamps");
  if (!timestamps.ok()) return SendStatus(res, timestamps.status());
  CriLogOptions decode;
  decode.timestamps = *timestamps ? LogTimestamps::kPrefix : LogTimestamps::kOmit;
  if (req.has_param("tailLines")) decode.tail_lines = *tail;
  if (*limit > 0) decode.limit_bytes = *limit;
  if (req.has_param("sinceSeconds") && req.has_param("sinceTime")) {
    return SendStatus(res, Invalid(kPodLogOptions, t.name, "",
                                   "Forbidden: at most one of `sinceTime` or `sinceSeconds` may "
                                   "be specified"));
  }
  if (req.has_param("sinceSeconds")) {
    if (*since_seconds < 1) {
      return SendStatus(res, Invalid(kPodLogOptions, t.name, "sinceSeconds",
                                     "Invalid value: 0: must be greater than 0"));
    }
    decode.since = std::chrono::system_clock::now() - std::chrono::seconds(*since_seconds);
  }
  if (req.has_param("sinceTime")) {
    const std::string v = req.get_param_value("sinceTime");
    auto since = hami::kube::ParseTime(v);
    if (!since.ok()) {
      return SendStatus(
          res, BadRequest("sinceTime: invalid value \"" + v + "\": " + since.error().message()));
    }
    decode.since = *since;
  }
  auto waiting = [&](const std::string& why) {
    SendStatus(res, BadRequest("container \"" + container + "\" in pod \"" + t.name +
                               "\" is waiting to start: no log (" + why + ")"));
  };
  if (options.pod_log_dir.empty()) return waiting("the server has no pod log directory");
  // The API validates container names as DNS labels; this server does not, so a name that is
  // not one path component never reaches the file system.
  if (container.find('/') != std::string::npos || container == "." || container == "..") {
    return waiting("the container name is not a file name");
  }
  // The kubelet's layout: one directory per pod incarnation (its uid), one file per start.
  const std::string uid = pod.value("metadata", json::object()).value("uid", "");
  const std::string dir =
      options.pod_log_dir + "/" + t.ns + "_" + t.name + "_" + uid + "/" + container;
  std::vector<std::string> names;
  std::error_code ec;
  for (std::filesystem::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names.push_back(it->path().filename().string());
  }
  const ContainerLogFiles files = PickContainerLogFiles(names);
  std::optional<int64_t> restart = files.current;
  if (*previous) {
    if (!files.previous) {
      return SendStatus(res, BadRequest("previous terminated container \"" + container +
                                        "\" in pod \"" + t.name + "\" not found"));
    }
    restart = files.previous;
  }
  if (!restart) return waiting(dir + " has no <restart count>.log file");
  const std::string file = dir + "/" + RestartLogName(*restart);
  auto text = ReadFileToString(file, kMaxLogBytes);
  if (!text.ok()) return SendStatus(res, InternalError(text.error().message()));
  CriLogOutput out = DecodeCriLog(*text, decode);
  if (out.malformed_lines > 0) {
    std::fprintf(stderr,
                 "apiserver event=pod_log_malformed file=%s skipped_lines=%zu first_line=%zu\n",
                 file.c_str(), out.malformed_lines, out.first_malformed_line);
  }
  SetBody(res, 200, std::move(out.text), "text/plain");
}

void ApiServer::Impl::ServeExec(const httplib::Request& req, httplib::Response& res,
                                const Target& t) {
  auto o = store.Get(hami::kube::kPods, t.ns, t.name);
  if (!o.ok()) return SendStatus(res, o.status());
  auto asked = ParseExecOptions(req.params);
  if (!asked.ok()) return SendStatus(res, asked.status());
  const json& pod = (*o)->object();
  auto container = ExecContainer(pod, t.name, asked->container);
  if (!container.ok()) return SendStatus(res, container.status());
  const json spec = pod.value("spec", json::object());
  const std::string node = spec.is_object() ? spec.value("nodeName", "") : "";
  if (node.empty()) {
    return SendStatus(res, BadRequest("pod " + t.name + " does not have a host assigned"));
  }
  auto node_object = store.Get(hami::kube::kNodes, "", node);
  if (!node_object.ok()) return SendStatus(res, node_object.status());
  ExecPlan plan;
  plan.ns = t.ns;
  plan.pod = t.name;
  plan.container = *container;
  plan.node = node;
  plan.options = std::move(*asked);
  if (auto endpoint = KubeletEndpointOf((*node_object)->object()); endpoint.ok()) {
    plan.kubelet = *endpoint;
  } else {
    plan.kubelet_error = endpoint.error().message();
  }
  if (tls) {
    // The session writes to the request's socket, which here carries TLS records.
    ApiStatus s;
    s.code = 501;
    s.reason = "NotImplemented";
    s.message =
        "pods/exec is not served over HTTPS by the simulated API server: serve it "
        "without a TLS certificate";
    return SendStatus(res, s);
  }
  UpgradeRequest upgrade{req.method, HeaderList(req.headers.begin(), req.headers.end())};
  const int sock =
      FindConnectionSocket(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  const ExecOutcome out = ServeExecSession(upgrade, sock, plan);
  std::string detail = out.detail;
  std::replace(detail.begin(), detail.end(), '"', '\'');
  std::fprintf(stderr, "apiserver event=exec pod=%s/%s container=%s route=%s detail=\"%s\"\n",
               t.ns.c_str(), t.name.c_str(), plan.container.c_str(), out.route.c_str(),
               detail.c_str());
  if (out.upgraded) {
    // The session answered on the socket and shut it down: what the server writes after this
    // handler goes nowhere.
    res.status = 101;
    return;
  }
  SetBody(res, out.status, out.body, out.content_type.c_str());
}

void ApiServer::Impl::ServeCreate(const httplib::Request& req, httplib::Response& res,
                                  const Target& t) {
  auto mode = DryRunParam(req);
  if (!mode.ok()) return SendStatus(res, mode.status());
  auto body = ParseJson(req.body, "the request body");
  if (!body.ok()) return SendStatus(res, body.status());
  auto admitted = AdmitCreate(*t.resource, t.ns, std::move(*body),
                              AuditUserAgent(req.get_header_value("User-Agent")), *mode);
  if (!admitted.ok()) return SendStatus(res, admitted.status());
  auto created = store.Create(*t.resource, t.ns, std::move(*admitted), *mode);
  if (!created.ok()) return SendStatus(res, created.status());
  SendObject(req, res, 201, *t.resource, **created);
}

std::optional<ApiStatus> ApiServer::Impl::AdmitPriorityClass(const json& body) {
  if (!body.is_object()) return std::nullopt;  // decoding refuses it
  const std::string name = body.contains("metadata") && body["metadata"].is_object()
                               ? body["metadata"].value("name", "")
                               : std::string();
  const Resource& r = hami::kube::kPriorityClasses;
  if (auto v = body.find("value");
      v != body.end() && v->is_number_integer() && v->get<int64_t>() > kHighestUserPriority) {
    return Forbidden(r, name,
                     "maximum allowed value of a user defined priority is " +
                         std::to_string(kHighestUserPriority));
  }
  if (body.value("globalDefault", json()) != true) return std::nullopt;
  auto all = store.List(r, "", nullptr, 0, "");
  if (!all.ok()) return all.status();
  for (const ObjectPtr& o : all->items) {
    if (o->object().value("globalDefault", json()) == true) {
      return Forbidden(r, name,
                       "PriorityClass " + MetaString(o->object(), "name") +
                           " is already marked as default. Only one default can exist");
    }
  }
  return std::nullopt;
}

std::optional<ApiStatus> ApiServer::Impl::AdmitPodPriority(json& body) {
  if (!body.is_object()) return std::nullopt;
  auto spec = body.find("spec");
  if (spec == body.end() || !spec->is_object()) return std::nullopt;  // validation refuses it
  const std::string name = body.contains("metadata") && body["metadata"].is_object()
                               ? body["metadata"].value("name", "")
                               : std::string();
  std::string class_name;
  if (auto c = spec->find("priorityClassName"); c != spec->end() && c->is_string()) {
    class_name = c->get<std::string>();
  }
  int64_t priority = 0;  // no class named and no default
  json policy;
  if (class_name.empty()) {
    auto all = store.List(hami::kube::kPriorityClasses, "", nullptr, 0, "");
    if (!all.ok()) return all.status();
    const json* chosen = nullptr;  // the default of lowest value, should there be several
    for (const ObjectPtr& o : all->items) {
      const json& pc = o->object();
      if (pc.value("globalDefault", json()) != true) continue;
      if (chosen == nullptr || pc.value("value", int64_t{0}) < chosen->value("value", int64_t{0})) {
        chosen = &pc;
      }
    }
    if (chosen != nullptr) {
      class_name = MetaString(*chosen, "name");
      priority = chosen->value("value", int64_t{0});
      policy = chosen->value("preemptionPolicy", json());
    }
  } else {
    auto pc = store.Get(hami::kube::kPriorityClasses, "", class_name);
    if (!pc.ok()) {
      if (pc.status().code != 404) return pc.status();
      return Forbidden(hami::kube::kPods, name,
                       "no PriorityClass with name " + class_name + " was found");
    }
    priority = (*pc)->object().value("value", int64_t{0});
    policy = (*pc)->object().value("preemptionPolicy", json());
  }
  if (auto p = spec->find("priority"); p != spec->end() && !p->is_null()) {
    if (!p->is_number_integer() || p->get<int64_t>() != priority) {
      return Forbidden(hami::kube::kPods, name,
                       "the integer value of priority (" + p->dump() +
                           ") must not be provided in pod spec; priority admission controller "
                           "computed " +
                           std::to_string(priority) + " from the given PriorityClass name");
    }
  }
  (*spec)["priority"] = priority;
  if (!class_name.empty()) (*spec)["priorityClassName"] = class_name;
  if (policy.is_string()) {
    if (auto p = spec->find("preemptionPolicy");
        p != spec->end() && !p->is_null() && *p != policy) {
      return Forbidden(hami::kube::kPods, name,
                       "the string value of PreemptionPolicy (" +
                           (p->is_string() ? p->get<std::string>() : p->dump()) +
                           ") must not be provided in pod spec; priority admission controller "
                           "computed " +
                           policy.get<std::string>() + " from the given PriorityClass name");
    }
    (*spec)["preemptionPolicy"] = policy;
  }
  return std::nullopt;
}

ApiResult<json> ApiServer::Impl::AdmitCreate(const Resource& r, const std::string& ns, json body,
                                             const std::string& user_agent, WriteMode mode) {
  if (Is(r, hami::kube::kPriorityClasses)) {
    if (auto bad = AdmitPriorityClass(body)) return std::move(*bad);
    return body;
  }
  if (!Is(r, hami::kube::kPods)) return body;
  // Priority admission runs before the webhooks, once the namespace is known to exist (else
  // the store's 404 answers).
  if (store.Get(hami::kube::kNamespaces, "", ns).ok()) {
    if (auto bad = AdmitPodPriority(body)) return std::move(*bad);
  }
  auto configs = store.List(hami::kube::kMutatingWebhookConfigurations, "", nullptr, 0, "");
  if (!configs.ok() || configs->items.empty()) return body;
  // As the namespace lifecycle plugin, which runs before the webhooks: a create into a missing
  // namespace is refused (by the store's 404) without calling them.
  auto namespace_object = store.Get(hami::kube::kNamespaces, "", ns);
  if (!namespace_object.ok()) return body;
  auto decoded = DecodeObject(r, std::move(body));
  if (!decoded.ok()) return std::move(decoded).status();
  json object = std::move(*decoded);
  json& meta = object["metadata"];
  const std::string body_ns = meta.value("namespace", "");
  if (!body_ns.empty() && body_ns != ns) {
    return BadRequest(
        "the namespace of the provided object does not match the namespace sent on the request");
  }
  meta["namespace"] = ns;
  ApplyDefaults(r, object);
  object["kind"] = r.kind;
  object["apiVersion"] = r.ApiVersion();
  std::vector<json> configurations;
  for (const ObjectPtr& o : configs->items) configurations.push_back(o->object());
  AdmissionAttributes a;
  a.resource = &r;
  a.operation = "CREATE";
  a.ns = ns;
  a.name = object["metadata"].value("name", "");
  const json m = (*namespace_object)->object().value("metadata", json::object());
  a.namespace_labels = m.value("labels", json::object());
  a.object = std::move(object);
  a.username = user_agent;
  a.dry_run = mode == WriteMode::kDryRun;
  return admitter.Admit(configurations, std::move(a), [](const std::string& line) {
    std::fprintf(stderr, "apiserver event=admission %s\n", line.c_str());
  });
}

void ApiServer::Impl::ServeUpdate(const httplib::Request& req, httplib::Response& res,
                                  const Target& t) {
  auto mode = DryRunParam(req);
  if (!mode.ok()) return SendStatus(res, mode.status());
  auto body = ParseJson(req.body, "the request body");
  if (!body.ok()) return SendStatus(res, body.status());
  const json& desired = *body;
  auto updated = store.Update(
      *t.resource, t.ns, t.name, t.sub, [&](const json*) -> ApiResult<json> { return desired; },
      t.sub == Subresource::kNone && AllowsCreateOnUpdate(*t.resource), *mode);
  if (!updated.ok()) return SendStatus(res, updated.status());
  SendObject(req, res, updated->created ? 201 : 200, *t.resource, *updated->object);
}

void ApiServer::Impl::ServePatch(const httplib::Request& req, httplib::Response& res,
                                 const Target& t) {
  enum class Kind { kMerge, kJson, kStrategic, kApply };
  const std::string media = MediaType(req.get_header_value("Content-Type"));
  Kind kind;
  if (media == "application/merge-patch+json") {
    kind = Kind::kMerge;
  } else if (media == "application/json-patch+json") {
    kind = Kind::kJson;
  } else if (media == "application/strategic-merge-patch+json") {
    kind = Kind::kStrategic;
  } else if (media == "application/apply-patch+yaml" || media == "application/apply-patch+json") {
    kind = Kind::kApply;
  } else {
    return SendStatus(
        res, UnsupportedMediaType("the body of the request was in an unknown format - accepted "
                                  "media types include: application/json-patch+json, "
                                  "application/merge-patch+json, application/apply-patch+yaml, "
                                  "application/strategic-merge-patch+json"));
  }
  auto mode = DryRunParam(req);
  if (!mode.ok()) return SendStatus(res, mode.status());
  if (kind == Kind::kApply && req.get_param_value("fieldManager").empty()) {
    return SendStatus(res, BadRequest("PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: "
                                      "Required value: is required for apply patch"));
  }
  auto body = ParseJson(
      req.body, kind == Kind::kApply ? "the apply patch (JSON is served, not YAML)" : "the patch");
  if (!body.ok()) return SendStatus(res, body.status());
  const json& patch = *body;
  if (kind == Kind::kJson && !patch.is_array()) {
    return SendStatus(res, BadRequest("a JSON patch must be a list of operations, not " +
                                      std::string(patch.type_name())));
  }
  if ((kind == Kind::kStrategic || kind == Kind::kApply) && !patch.is_object()) {
    return SendStatus(res, BadRequest("a strategic merge or apply patch must be an object, not " +
                                      std::string(patch.type_name())));
  }
  const Resource& r = *t.resource;
  auto mutation = [&](const json* current) -> ApiResult<json> {
    if (current == nullptr) {
      if (kind == Kind::kApply) return patch;
      return NotFound(r, t.name);
    }
    switch (kind) {
      case Kind::kMerge:
        return hami::kube::ApplyMergePatch(*current, patch);
      case Kind::kJson: {
        auto patched = hami::kube::ApplyJsonPatch(*current, patch);
        if (!patched.ok()) {
          ApiStatus s;
          s.code = 422;
          s.reason = "Invalid";
          s.message = patched.error().message();
          return s;
        }
        return std::move(*patched);
      }
      case Kind::kStrategic:
      case Kind::kApply: {
        auto patched = hami::kube::ApplyStrategicMergePatch(*current, patch);
        if (!patched.ok()) return BadRequest(patched.error().message());
        return std::move(*patched);
      }
    }
    return InternalError("unknown patch type");
  };
  auto updated = store.Update(r, t.ns, t.name, t.sub, mutation,
                              kind == Kind::kApply && t.sub == Subresource::kNone, *mode);
  if (!updated.ok()) return SendStatus(res, updated.status());
  SendObject(req, res, updated->created ? 201 : 200, r, *updated->object);
}

void ApiServer::Impl::ServeDelete(const httplib::Request& req, httplib::Response& res,
                                  const Target& t) {
  auto mode = DryRunParam(req);
  if (!mode.ok()) return SendStatus(res, mode.status());
  Store::Preconditions pre;
  if (!req.body.empty()) {
    auto body = ParseJson(req.body, "the delete options");
    if (!body.ok()) return SendStatus(res, body.status());
    if (!body->is_object())
      return SendStatus(res, BadRequest("the delete options must be an object"));
    if (auto p = body->find("preconditions"); p != body->end() && !p->is_null()) {
      if (!p->is_object()) return SendStatus(res, BadRequest("preconditions: must be an object"));
      for (const char* key : {"resourceVersion", "uid"}) {
        auto v = p->find(key);
        if (v == p->end() || v->is_null()) continue;
        if (!v->is_string()) {
          return SendStatus(res,
                            BadRequest(std::string("preconditions.") + key + ": must be a string"));
        }
        (std::string_view(key) == "uid" ? pre.uid : pre.resource_version) = v->get<std::string>();
      }
    }
    if (auto d = body->find("dryRun"); d != body->end() && d->is_array()) {
      for (const json& v : *d) {
        if (v == "All") *mode = WriteMode::kDryRun;
      }
    }
  }
  auto deleted = store.Delete(*t.resource, t.ns, t.name, pre, *mode);
  if (!deleted.ok()) return SendStatus(res, deleted.status());
  SendObject(req, res, 200, *t.resource, **deleted);
}

void ApiServer::Impl::ServeDeleteCollection(const httplib::Request& req, httplib::Response& res,
                                            const Target& t,
                                            const hami::kube::LabelSelector& labels,
                                            const hami::kube::FieldSelector& fields) {
  const Resource& r = *t.resource;
  auto mode = DryRunParam(req);
  if (!mode.ok()) return SendStatus(res, mode.status());
  auto page = store.List(
      r, t.ns, [&](const json& o) { return labels.Matches(o) && fields.Matches(o); }, 0, "");
  if (!page.ok()) return SendStatus(res, page.status());
  json items = json::array();
  for (const ObjectPtr& o : page->items) {
    const json meta = o->object().value("metadata", json::object());
    auto deleted = store.Delete(r, meta.value("namespace", ""), meta.value("name", ""), {}, *mode);
    if (deleted.ok()) items.push_back((*deleted)->object());
  }
  json list = {{"kind", std::string(r.kind) + "List"},
               {"apiVersion", r.ApiVersion()},
               {"metadata", {{"resourceVersion", std::to_string(store.resource_version())}}},
               {"items", std::move(items)}};
  SetBody(res, 200, Dump(list), kJsonType);
}

void ApiServer::Impl::ServeBinding(const httplib::Request& req, httplib::Response& res,
                                   const Target& t) {
  auto mode = DryRunParam(req);
  if (!mode.ok()) return SendStatus(res, mode.status());
  auto body = ParseJson(req.body, "the binding");
  if (!body.ok()) return SendStatus(res, body.status());
  const json& b = *body;
  auto invalid = [&](const std::string& field, const std::string& what) {
    ApiStatus s;
    s.code = 422;
    s.reason = "Invalid";
    s.message = "Binding \"" + t.name + "\" is invalid: " + field + ": " + what;
    s.name = t.name;
    s.kind = "Binding";
    return s;
  };
  if (!b.is_object()) return SendStatus(res, BadRequest("the binding must be a JSON object"));
  if (auto k = b.find("kind"); k != b.end() && !k->is_null() && *k != "Binding") {
    return SendStatus(res, BadRequest("the kind in the data (" + k->dump() +
                                      ") does not match the expected kind (Binding)"));
  }
  const json meta =
      b.contains("metadata") && b["metadata"].is_object() ? b["metadata"] : json::object();
  auto meta_string = [&](const char* key) {
    auto it = meta.find(key);
    return it != meta.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  const std::string name = meta_string("name");
  if (!name.empty() && name != t.name) {
    return SendStatus(res, BadRequest("the name of the object (" + name +
                                      ") does not match the name on the URL (" + t.name + ")"));
  }
  auto target = b.find("target");
  if (target == b.end() || !target->is_object())
    return SendStatus(res, invalid("target", "Required value"));
  auto node = target->find("name");
  if (node == target->end() || !node->is_string() || node->get_ref<const std::string&>().empty()) {
    return SendStatus(res, invalid("target.name", "Required value"));
  }
  if (auto k = target->find("kind");
      k != target->end() && !k->is_null() && *k != "" && *k != "Node") {
    return SendStatus(res, invalid("target.kind", "Unsupported value: " + k->dump() +
                                                      ": supported values: \"Node\""));
  }
  const std::string node_name = node->get<std::string>();
  const std::string uid = meta_string("uid");
  const std::string rv = meta_string("resourceVersion");
  json annotations = meta.contains("annotations") && meta["annotations"].is_object()
                         ? meta["annotations"]
                         : json::object();
  auto binding_conflict = [&](const std::string& why) {
    ApiStatus s;
    s.code = 409;
    s.reason = "Conflict";
    s.message = "Operation cannot be fulfilled on pods/binding \"" + t.name + "\": " + why;
    s.name = t.name;
    s.kind = "pods/binding";
    return s;
  };
  auto mutation = [&](const json* current) -> ApiResult<json> {
    if (current == nullptr) return NotFound(hami::kube::kPods, t.name);
    json pod = *current;
    json& m = pod["metadata"];
    if (!uid.empty() && m.value("uid", "") != uid) {
      return binding_conflict("the UID in the binding (" + uid + ") does not match the pod's (" +
                              m.value("uid", "") + ")");
    }
    if (!rv.empty() && m.value("resourceVersion", "") != rv) {
      return binding_conflict(
          "the object has been modified; please apply your changes to the "
          "latest version and try again");
    }
    json& spec = pod["spec"];
    if (!spec.is_object()) spec = json::object();
    auto bound_at = spec.find("nodeName");
    const std::string bound =
        bound_at != spec.end() && bound_at->is_string() ? bound_at->get<std::string>() : "";
    if (!bound.empty()) {
      return binding_conflict("pod " + t.name + " is already assigned to node \"" + bound + "\"");
    }
    spec["nodeName"] = node_name;
    if (!annotations.empty()) {
      json& a = m["annotations"];
      if (!a.is_object()) a = json::object();
      for (const auto& [k, v] : annotations.items()) a[k] = v;
    }
    json& status = pod["status"];
    if (!status.is_object()) status = json::object();
    json& conditions = status["conditions"];
    if (!conditions.is_array()) conditions = json::array();
    json condition = {
        {"type", "PodScheduled"},
        {"status", "True"},
        {"lastProbeTime", nullptr},
        {"lastTransitionTime", hami::kube::FormatTime(std::chrono::system_clock::now())}};
    auto it = std::find_if(conditions.begin(), conditions.end(), [](const json& c) {
      return c.is_object() && c.contains("type") && c["type"] == "PodScheduled";
    });
    if (it != conditions.end()) {
      *it = std::move(condition);
    } else {
      conditions.push_back(std::move(condition));
    }
    return pod;
  };
  auto updated =
      store.Update(hami::kube::kPods, t.ns, t.name, Subresource::kBinding, mutation, false, *mode);
  if (!updated.ok()) return SendStatus(res, updated.status());
  const json ok = {{"kind", "Status"},
                   {"apiVersion", "v1"},
                   {"metadata", json::object()},
                   {"status", "Success"},
                   {"code", 201}};
  SetBody(res, 201, Dump(ok), kJsonType);
}

ApiServer::ApiServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

ApiServer::~ApiServer() { Stop(); }

Result<std::unique_ptr<ApiServer>> ApiServer::Start(const ApiServerOptions& options) {
  if (options.tls_cert_file.empty() != options.tls_key_file.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 "simulated API server: TLS needs both a certificate and a key (tls_cert_file='" +
                     options.tls_cert_file + "', tls_key_file='" + options.tls_key_file + "')");
  }
  if (options.threads < 2) {
    return Error(ErrorCode::kInvalidArgument,
                 "simulated API server: threads " + std::to_string(options.threads) +
                     ": at least 2 are needed (each open watch holds one)");
  }
  if (options.watch_window < 1) {
    return Error(ErrorCode::kInvalidArgument, "simulated API server: watch_window " +
                                                  std::to_string(options.watch_window) +
                                                  ": must be at least 1");
  }
  struct sigaction old_action {};
  if (sigaction(SIGPIPE, nullptr, &old_action) == 0 && old_action.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  auto impl = std::make_unique<Impl>(options);
  for (const std::string& ns : SplitList(options.default_namespaces)) {
    auto created =
        impl->store.Create(hami::kube::kNamespaces, "", json{{"metadata", {{"name", ns}}}});
    if (!created.ok() && created.status().reason != "AlreadyExists") {
      return Error(ErrorCode::kInvalidArgument, "simulated API server: default namespace '" + ns +
                                                    "': " + created.status().message);
    }
  }
  // The classes every API server creates at its start.
  for (const auto& [name, value, what] :
       {std::tuple{"system-node-critical", 2000001000,
                   "Used for system critical pods that must not be moved from their current node."},
        std::tuple{"system-cluster-critical", 2000000000,
                   "Used for system critical pods that must run in the cluster, but can be moved "
                   "to another node if necessary."}}) {
    auto created = impl->store.Create(
        hami::kube::kPriorityClasses, "",
        json{{"metadata", {{"name", name}}}, {"value", value}, {"description", what}});
    if (!created.ok() && created.status().reason != "AlreadyExists") {
      return Error(ErrorCode::kInternal, "simulated API server: PriorityClass " +
                                             std::string(name) + ": " + created.status().message);
    }
  }
  if (!options.tls_cert_file.empty()) {
    for (const std::string& file : {options.tls_cert_file, options.tls_key_file}) {
      if (access(file.c_str(), R_OK) != 0) return Error::FromErrno("simulated API server: " + file);
    }
    auto ssl = std::make_unique<httplib::SSLServer>(options.tls_cert_file.c_str(),
                                                    options.tls_key_file.c_str());
    if (!ssl->is_valid()) {
      return Error(ErrorCode::kInvalidArgument,
                   "simulated API server: certificate " + options.tls_cert_file + " and key " +
                       options.tls_key_file + " do not make a TLS server (not PEM, or not a pair)");
    }
    impl->http = std::move(ssl);
    impl->tls = true;
  } else {
    impl->http = std::make_unique<httplib::Server>();
  }
  httplib::Server& http = *impl->http;
  Impl* self = impl.get();
  const size_t threads = size_t(options.threads);
  http.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http.set_tcp_nodelay(true);
  http.set_keep_alive_max_count(kKeepAliveMaxCount);
  http.set_payload_max_length(kMaxBodyBytes);
  // A write blocked on a client that does not read gives up after this. Longer than
  // httplib's 5 s, so that a watcher that stops reading is ended by its queue overflowing
  // (410 Expired, what a client can act on) rather than by a cut connection.
  http.set_write_timeout(kWriteTimeoutSeconds, 0);
  auto handler = [self](const httplib::Request& req, httplib::Response& res) {
    self->Handle(req, res);
  };
  http.Get(".*", handler);
  http.Post(".*", handler);
  http.Put(".*", handler);
  http.Patch(".*", handler);
  http.Delete(".*", handler);
  http.Options(".*", handler);
  http.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
        res.body.clear();
        SendStatus(res, InternalError("the request handler failed"));
      });
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request&, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        const int code = res.status;
        ApiStatus s;
        s.code = code;
        if (code == 413) {
          s.reason = "RequestEntityTooLarge";
          s.message = "Request entity too large: limit is " + std::to_string(kMaxBodyBytes);
        } else if (code >= 500) {
          s.reason = "InternalError";
          s.message = "an error on the server has prevented the request from succeeding";
        } else {
          s.reason = "BadRequest";
          s.message = "the request could not be read (HTTP " + std::to_string(code) + ")";
        }
        SendStatus(res, s);
        return httplib::Server::HandlerResponse::Handled;
      }));
  if (options.port == 0) {
    impl->port = http.bind_to_any_port(options.host);
    if (impl->port <= 0) {
      return Error(ErrorCode::kIo, "simulated API server: cannot bind " + options.host + ":0");
    }
  } else {
    if (!http.bind_to_port(options.host, options.port)) {
      return Error(ErrorCode::kIo, "simulated API server: cannot bind " + options.host + ":" +
                                       std::to_string(options.port));
    }
    impl->port = options.port;
  }
  impl->thread = std::thread([self] { self->http->listen_after_bind(); });
  const auto deadline = Clock::now() + std::chrono::seconds(10);
  while (!http.is_running()) {
    if (Clock::now() > deadline) {
      http.stop();
      impl->thread.join();
      return Error(ErrorCode::kTimeout, "simulated API server: the listener did not start");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return std::unique_ptr<ApiServer>(new ApiServer(std::move(impl)));
}

void ApiServer::Stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.stop_mu);
    if (s.stopped) return;
    s.stopped = true;
    s.stopping = true;
  }
  s.stop_cv.notify_all();
  s.store.CloseWatchers();
  {
    // Closed watchers end their streams with the final chunk at once (before the listener
    // stops: cpp-httplib drops the final chunk of a stream still running then); a client too
    // slow to take it is not waited for.
    std::unique_lock lock(s.stop_mu);
    s.stop_cv.wait_for(lock, kStopWatchGrace, [&s] { return s.watches_open.load() == 0; });
  }
  s.http->stop();
  // Idle keep-alive connections would hold their threads for the keep-alive timeout.
  for (int fd : ConnectionSockets(s.port)) shutdown(fd, SHUT_RDWR);
  if (s.thread.joinable()) s.thread.join();
}

int ApiServer::port() const { return impl_->port; }

std::string ApiServer::url() const {
  std::string host = impl_->options.host;
  if (host.empty() || host == "0.0.0.0") host = "127.0.0.1";
  if (host == "::") host = "::1";
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return std::string(impl_->tls ? "https" : "http") + "://" + host + ":" +
         std::to_string(impl_->port);
}

Status ApiServer::WriteKubeconfig(const std::string& path) const {
  std::string cluster = "    server: " + url() + "\n";
  if (impl_->tls) {
    auto cert = ReadFileToString(impl_->options.tls_cert_file);
    if (!cert.ok()) return std::move(cert).error().Context("kubeconfig " + path);
    cluster += "    certificate-authority-data: " + Base64(*cert) + "\n";
  }
  const std::string text =
      "apiVersion: v1\n"
      "kind: Config\n"
      "clusters:\n"
      "- name: hami-sim\n"
      "  cluster:\n" +
      cluster +
      "users:\n"
      "- name: hami-sim\n" +
      // Over HTTPS, kubectl asks for a username when the user has no credential at all; the
      // server accepts any bearer token.
      std::string(impl_->tls ? "  user:\n    token: hami-sim\n" : "  user: {}\n") +
      "contexts:\n"
      "- name: hami-sim\n"
      "  context:\n"
      "    cluster: hami-sim\n"
      "    user: hami-sim\n"
      "current-context: hami-sim\n"
      "preferences: {}\n";
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  {
    auto fd = OpenRegularFile(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (!fd.ok()) return std::move(fd).error().Context("kubeconfig " + path);
    if (Status w = WriteAll(fd->get(), text); !w.ok()) {
      unlink(tmp.c_str());
      return std::move(w).error().Context("kubeconfig " + path);
    }
    if (fsync(fd->get()) != 0) {
      Error e = Error::FromErrno("kubeconfig " + path + ": fsync " + tmp);
      unlink(tmp.c_str());
      return e;
    }
  }
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    Error e = Error::FromErrno("kubeconfig " + path + ": rename " + tmp);
    unlink(tmp.c_str());
    return e;
  }
  return OkStatus();
}

void ApiServer::SetFaults(const Faults& faults) {
  std::lock_guard lock(impl_->faults_mu);
  impl_->faults = faults;
  impl_->fault_rng.seed(faults.seed);
}

Faults ApiServer::faults() const {
  std::lock_guard lock(impl_->faults_mu);
  return impl_->faults;
}

Result<json> ApiServer::CreateObject(const Resource& r, const json& obj) {
  std::string ns;
  if (r.namespaced) {
    ns = "default";
    if (obj.is_object() && obj.contains("metadata") && obj["metadata"].is_object()) {
      auto it = obj["metadata"].find("namespace");
      if (it != obj["metadata"].end() && it->is_string()) ns = it->get<std::string>();
    }
  }
  auto admitted = impl_->AdmitCreate(r, ns, obj, "", WriteMode::kCommit);
  if (!admitted.ok()) return ToError(admitted.status());
  auto created = impl_->store.Create(r, ns, std::move(*admitted));
  if (!created.ok()) return ToError(created.status());
  return TypedObject(r, **created);
}

Result<json> ApiServer::GetObject(const Resource& r, std::string_view ns,
                                  std::string_view name) const {
  auto o = impl_->store.Get(r, ns, name);
  if (!o.ok()) return ToError(o.status());
  return TypedObject(r, **o);
}

Status ApiServer::DeleteObject(const Resource& r, std::string_view ns, std::string_view name) {
  auto o = impl_->store.Delete(r, ns, name, {});
  if (!o.ok()) return ToError(o.status());
  return OkStatus();
}

std::vector<json> ApiServer::ListObjects(const Resource& r, std::string_view ns) const {
  std::vector<json> out;
  auto page = impl_->store.List(r, ns, nullptr, 0, "");
  if (!page.ok()) return out;
  out.reserve(page->items.size());
  for (const ObjectPtr& o : page->items) out.push_back(TypedObject(r, *o));
  return out;
}

int64_t ApiServer::resource_version() const { return impl_->store.resource_version(); }

ApiServer::Stats ApiServer::stats() const {
  Stats s;
  s.requests = impl_->requests.load();
  s.watches_open = impl_->watches_open.load();
  s.faults_injected = impl_->faults_injected.load();
  s.watches_overflowed = impl_->store.watches_overflowed();
  return s;
}

}  // namespace hami::sim::kube
