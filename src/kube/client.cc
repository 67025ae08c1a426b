#include "kube/client.h"

#include <sys/stat.h>

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "kube/http.h"
#include "kube/objects.h"

namespace hami::kube {
namespace {

using internal::HttpResponse;
using internal::TransportOutcome;
using json = nlohmann::json;

std::string_view ReasonPhrase(long status) {
  switch (status) {
    case 200:
      return "OK";
    case 201:
      return "Created";
    case 202:
      return "Accepted";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 406:
      return "Not Acceptable";
    case 409:
      return "Conflict";
    case 410:
      return "Gone";
    case 413:
      return "Request Entity Too Large";
    case 415:
      return "Unsupported Media Type";
    case 422:
      return "Unprocessable Entity";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 501:
      return "Not Implemented";
    case 502:
      return "Bad Gateway";
    case 503:
      return "Service Unavailable";
    case 504:
      return "Gateway Timeout";
    default:
      return "";
  }
}

std::string StatusText(long status) {
  std::string s = std::to_string(status);
  std::string_view phrase = ReasonPhrase(status);
  if (!phrase.empty()) s += " " + std::string(phrase);
  return s;
}

ErrorCode CodeForStatus(long status) {
  switch (status) {
    case 404:
      return ErrorCode::kNotFound;
    case 409:
      return ErrorCode::kConflict;
    case 410:
      return ErrorCode::kExpired;
    case 400:
    case 422:
      return ErrorCode::kInvalidArgument;
    case 401:
    case 403:
      return ErrorCode::kPermission;
    case 405:
    case 415:
    case 501:
      return ErrorCode::kUnsupported;
    default:
      break;
  }
  if (status == 429 || status >= 500) return ErrorCode::kUnavailable;
  if (status >= 400) return ErrorCode::kInvalidArgument;
  return ErrorCode::kUnsupported;  // 1xx/3xx: nothing here follows redirects
}

// A printable, bounded excerpt of a body that is not a Status.
std::string Excerpt(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 200)) out += (uint8_t(c) < 0x20 || uint8_t(c) == 0x7f) ? ' ' : c;
  while (!out.empty() && out.back() == ' ') out.pop_back();
  if (body.size() > 200) out += "...";
  return out;
}

// "Status.message" of an error body, or an excerpt of whatever it was.
std::string ErrorDetail(std::string_view body) {
  json j = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    auto m = j.find("message");
    if (m != j.end() && m->is_string()) return m->get<std::string>();
  }
  return Excerpt(body);
}

// True for a Retry-After of delta-seconds; the HTTP-date form is not used by the API server.
std::optional<std::chrono::seconds> ParseRetryAfter(std::string_view v) {
  if (v.empty() || v.size() > 9) return std::nullopt;
  int64_t s = 0;
  for (char c : v) {
    if (c < '0' || c > '9') return std::nullopt;
    s = s * 10 + (c - '0');
  }
  return std::chrono::seconds(s);
}

bool IsSuccess(long status) { return status >= 200 && status < 300; }

// The bearer token: fixed, or from a file re-read when it changes.
class TokenSource {
 public:
  TokenSource(std::string fixed, std::string file, Clock* clock)
      : fixed_(std::move(fixed)), file_(std::move(file)), clock_(clock) {}

  Status Init() {
    if (file_.empty()) return OkStatus();
    std::lock_guard lock(mu_);
    Status s = ReloadLocked();
    if (!s.ok() && fixed_.empty()) return s;
    last_check_ = clock_->Now();
    return OkStatus();
  }

  bool has_file() const { return !file_.empty(); }

  std::string Get() {
    if (file_.empty()) return fixed_;
    std::lock_guard lock(mu_);
    Clock::TimePoint now = clock_->Now();
    if (now - last_check_ >= std::chrono::seconds(1)) {
      last_check_ = now;
      (void)ReloadLocked();  // on failure the last good token stays in use
    }
    return current_.empty() ? fixed_ : current_;
  }

  // After a 401: re-reads the file now. True when the token changed.
  bool Refresh() {
    if (file_.empty()) return false;
    std::lock_guard lock(mu_);
    std::string before = current_;
    identity_ = {};
    last_check_ = clock_->Now();
    (void)ReloadLocked();
    return current_ != before;
  }

 private:
  struct Identity {
    ino_t ino = 0;
    off_t size = -1;
    int64_t mtime_ns = -1;
    bool operator==(const Identity&) const = default;
  };

  Status ReloadLocked() {
    struct stat st;
    if (::stat(file_.c_str(), &st) != 0) return Error::FromErrno("token file " + file_);
    Identity id{st.st_ino, st.st_size,
                int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec};
    if (id == identity_ && !current_.empty()) return OkStatus();
    std::string token = HAMI_TRY(ReadTokenFile(file_));
    current_ = std::move(token);
    identity_ = id;
    return OkStatus();
  }

  const std::string fixed_;
  const std::string file_;
  Clock* const clock_;
  std::mutex mu_;
  std::string current_;
  Identity identity_;
  Clock::TimePoint last_check_{};
};

class Query {
 public:
  Query& Add(std::string_view key, std::string_view value) {
    if (value.empty()) return *this;
    text_ += text_.empty() ? '?' : '&';
    text_ += key;
    text_ += '=';
    text_ += internal::UrlEncode(value);
    return *this;
  }
  const std::string& str() const { return text_; }

 private:
  std::string text_;
};

}  // namespace

std::string DescribeObject(const Resource& r, std::string_view ns, std::string_view name) {
  std::string s = r.QualifiedName();
  if (name.empty()) {
    if (r.namespaced && !ns.empty()) s += " in " + std::string(ns);
    return s;
  }
  s += ' ';
  if (r.namespaced && !ns.empty()) s += std::string(ns) + "/";
  s += name;
  return s;
}

// One logical request, for the retry loop.
struct Call {
  std::string verb;  // "get", "update", ... for messages
  std::string what;  // DescribeObject(...), with "/subresource" when there is one
  std::string_view method;
  std::string path;  // path and query
  std::string body;
  std::string_view content_type;
  bool idempotent = false;
};

struct Client::Impl {
  Impl(Config c, ClientOptions o)
      : config(std::move(c)),
        options(std::move(o)),
        clock(options.clock != nullptr ? options.clock : Clock::Steady()),
        limiter(options.qps, options.burst, clock),
        http(internal::TlsOptions{config.ca_pem, config.client_cert_pem, config.client_key_pem,
                                  config.insecure_skip_tls_verify},
             options.user_agent, options.connect_timeout),
        token(config.bearer_token, config.bearer_token_file, clock),
        rng(std::random_device{}()) {}

  Config config;
  ClientOptions options;
  Clock* clock;
  RateLimiter limiter;
  internal::HttpTransport http;
  TokenSource token;
  std::mutex rng_mu;
  std::mt19937_64 rng;

  std::string_view Ns(const Resource& r, std::string_view ns) const {
    if (!r.namespaced) return {};
    return ns.empty() ? std::string_view(config.default_namespace) : ns;
  }

  internal::HttpRequest Request(const Call& call, std::chrono::milliseconds timeout) {
    internal::HttpRequest req;
    req.method = call.method;
    req.url = config.server + call.path;
    req.headers.push_back("Accept: application/json");
    if (!call.content_type.empty()) {
      req.headers.push_back("Content-Type: " + std::string(call.content_type));
    }
    std::string t = token.Get();
    if (!t.empty()) req.headers.push_back("Authorization: Bearer " + t);
    req.body = call.body;
    req.timeout = timeout;
    return req;
  }

  std::chrono::nanoseconds Backoff(int retry) {
    using std::chrono::nanoseconds;
    double d =
        double(nanoseconds(options.retry_base).count()) * double(int64_t(1) << std::min(retry, 30));
    d = std::min(d, double(nanoseconds(options.retry_cap).count()));
    std::lock_guard lock(rng_mu);
    std::uniform_real_distribution<double> half(0.5, 1.0);
    return nanoseconds(int64_t(d * half(rng)));
  }

  Error HttpError(const Call& call, const HttpResponse& resp) const {
    std::string msg = call.verb + " " + call.what + ": " + StatusText(resp.status);
    std::string detail = ErrorDetail(resp.body);
    if (!detail.empty()) msg += ": " + detail;
    return Error(CodeForStatus(resp.status), std::move(msg));
  }

  static Error Stopped(const Call& call) {
    return Error(ErrorCode::kTimeout, call.verb + " " + call.what + ": stopped by the caller");
  }

  // Waits `d` on the clock. On the steady clock the wait ends early when `stop` is requested; a
  // test's clock (ClientOptions::clock) sleeps as it does. False when `stop` was requested.
  bool Pause(std::chrono::nanoseconds d, const std::stop_token& stop) {
    if (d > std::chrono::nanoseconds::zero() && stop.stop_possible() && clock == Clock::Steady()) {
      std::mutex mu;
      std::condition_variable_any cv;
      std::unique_lock lock(mu);
      cv.wait_for(lock, stop, d, [] { return false; });
    } else {
      clock->SleepFor(d);
    }
    return !stop.stop_requested();
  }

  Error TransportError(const Call& call, const HttpResponse& resp) const {
    if (resp.outcome == TransportOutcome::kStopped) return Stopped(call);
    ErrorCode code = ErrorCode::kUnavailable;
    std::string msg = call.verb + " " + call.what + ": ";
    if (resp.outcome == TransportOutcome::kTimeout) {
      code = ErrorCode::kTimeout;
      msg += "no answer within the deadline: ";
    } else if (resp.outcome == TransportOutcome::kTlsFailed) {
      code = ErrorCode::kPermission;
      msg += "TLS with " + config.server + " (" + config.source + "): ";
    } else {
      msg += config.server + ": ";
    }
    return Error(code, msg + resp.transport_error);
  }

  // What to do after one attempt.
  enum class Next { kDone, kRetry, kFail };
  Next Decide(const Call& call, const HttpResponse& resp) const {
    switch (resp.outcome) {
      case TransportOutcome::kOk:
        break;
      case TransportOutcome::kConnectFailed:
        return Next::kRetry;
      case TransportOutcome::kBroken:
        return call.idempotent ? Next::kRetry : Next::kFail;
      default:
        return Next::kFail;
    }
    if (IsSuccess(resp.status)) return Next::kDone;
    if (resp.status == 429) return Next::kRetry;
    if (resp.status == 503 && ParseRetryAfter(resp.retry_after)) return Next::kRetry;
    if (resp.status == 500 || resp.status == 502 || resp.status == 503 || resp.status == 504) {
      return call.idempotent ? Next::kRetry : Next::kFail;
    }
    return Next::kFail;
  }

  Error Failure(const Call& call, const HttpResponse& resp) const {
    return resp.outcome == TransportOutcome::kOk ? HttpError(call, resp)
                                                 : TransportError(call, resp);
  }

  // Runs `attempt` (one rate-limited try) with the retry policy above. `attempt` returns the
  // response of one try. A stop request ends the waits for the limiter and between retries at
  // once (Stopped).
  template <typename Attempt>
  Result<HttpResponse> WithRetries(const Call& call, Attempt&& attempt,
                                   const std::stop_token& stop) {
    bool refreshed_token = false;
    for (int retry = 0;; ++retry) {
      if (!Pause(limiter.Reserve(), stop)) return Stopped(call);
      HttpResponse resp = attempt();
      if (resp.outcome == TransportOutcome::kOk && resp.status == 401 && !refreshed_token &&
          token.has_file()) {
        refreshed_token = true;
        if (token.Refresh()) {
          --retry;
          continue;
        }
      }
      Next next = Decide(call, resp);
      if (next == Next::kDone) return resp;
      if (next == Next::kFail) return Failure(call, resp);
      if (retry >= options.max_retries) {
        Error e = Failure(call, resp);
        if (e.code() != ErrorCode::kTimeout) {
          return Error(ErrorCode::kUnavailable,
                       e.message() + " (gave up after " + std::to_string(retry + 1) + " attempts)");
        }
        return e;
      }
      std::optional<std::chrono::seconds> after = ParseRetryAfter(resp.retry_after);
      std::chrono::nanoseconds wait =
          resp.outcome == TransportOutcome::kOk && after ? *after : Backoff(retry);
      if (!Pause(wait, stop)) return Stopped(call);
    }
  }

  Result<json> Execute(const Call& call, const std::stop_token& stop = {}) {
    HttpResponse resp = HAMI_TRY(WithRetries(
        call, [&] { return http.Perform(Request(call, options.request_timeout), stop); }, stop));
    if (resp.body.empty()) return json::object();
    json j = json::parse(resp.body, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      return Error(ErrorCode::kCorrupt, call.verb + " " + call.what + ": " +
                                            StatusText(resp.status) +
                                            ": the response is not JSON: " + Excerpt(resp.body));
    }
    return j;
  }

  static std::string Serialize(const json& j) {
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

Result<std::unique_ptr<Client>> Client::Create(Config config, ClientOptions options) {
  std::string source = config.source.empty() ? config.server : config.source;
  if (config.server.rfind("http://", 0) != 0 && config.server.rfind("https://", 0) != 0) {
    return Error(ErrorCode::kInvalidArgument,
                 source + ": server \"" + config.server + "\" is not an http:// or https:// URL");
  }
  while (!config.server.empty() && config.server.back() == '/') config.server.pop_back();
  if (config.client_cert_pem.empty() != config.client_key_pem.empty()) {
    return Error(ErrorCode::kInvalidArgument,
                 source + ": a client certificate needs both the certificate and the key");
  }
  auto impl = std::make_unique<Impl>(std::move(config), std::move(options));
  Status s = impl->token.Init();
  if (!s.ok()) return std::move(s).error().Context(source);
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const Config& Client::config() const { return impl_->config; }

Result<json> Client::Get(const Resource& r, std::string_view ns, std::string_view name) {
  ns = impl_->Ns(r, ns);
  Call call{"get", DescribeObject(r, ns, name), "GET", ObjectPath(r, ns, name), "", "", true};
  return impl_->Execute(call);
}

Result<json> Client::List(const Resource& r, std::string_view ns, const ListOptions& o,
                          std::stop_token stop) {
  Query q;
  q.Add("labelSelector", o.label_selector)
      .Add("fieldSelector", o.field_selector)
      .Add("limit", o.limit > 0 ? std::to_string(o.limit) : "")
      .Add("continue", o.continue_token)
      .Add("resourceVersion", o.resource_version);
  Call call{"list", DescribeObject(r, ns, ""), "GET", CollectionPath(r, ns) + q.str(), "", "",
            true};
  if (stop.stop_requested()) return Impl::Stopped(call);
  return impl_->Execute(call, stop);
}

Result<json> Client::ListAll(const Resource& r, std::string_view ns, const ListOptions& options,
                             std::stop_token stop) {
  for (int round = 0;; ++round) {
    ListOptions page_options = options;
    json all = HAMI_TRY(List(r, ns, page_options, stop));
    if (!all.is_object()) {
      return Error(ErrorCode::kCorrupt, "list " + DescribeObject(r, ns, "") + ": not a List");
    }
    json& items = all["items"];
    if (items.is_null()) items = json::array();
    if (!items.is_array()) {
      return Error(ErrorCode::kCorrupt,
                   "list " + DescribeObject(r, ns, "") + ": items is not an array");
    }
    bool restart = false;
    for (;;) {
      json& meta = all["metadata"];
      if (!meta.is_object()) meta = json::object();
      auto cont = meta.find("continue");
      if (cont == meta.end() || !cont->is_string() || cont->get<std::string>().empty()) break;
      page_options.continue_token = cont->get<std::string>();
      page_options.resource_version.clear();  // the API refuses both with a continue token
      auto page = List(r, ns, page_options, stop);
      if (!page.ok()) {
        if (page.error().code() == ErrorCode::kExpired && round == 0) {
          restart = true;
          break;
        }
        return std::move(page).error();
      }
      if (!page->is_object() || !(*page)["items"].is_array()) {
        if (page->is_object() && (*page)["items"].is_null()) {
          (*page)["items"] = json::array();
        } else {
          return Error(ErrorCode::kCorrupt,
                       "list " + DescribeObject(r, ns, "") + ": a page's items is not an array");
        }
      }
      for (json& item : (*page)["items"]) items.push_back(std::move(item));
      json page_meta = (*page)["metadata"];
      meta.erase("continue");
      if (page_meta.is_object() && page_meta.contains("continue")) {
        meta["continue"] = page_meta["continue"];
      }
    }
    if (restart) continue;
    all["metadata"].erase("continue");
    all["metadata"].erase("remainingItemCount");
    return all;
  }
}

Result<json> Client::Create(const Resource& r, std::string_view ns, const json& obj) {
  ns = impl_->Ns(r, ns.empty() ? MetadataString(obj, "namespace") : ns);
  std::string_view name = MetadataString(obj, "name");
  if (name.empty()) name = MetadataString(obj, "generateName");
  Call call{"create",
            DescribeObject(r, ns, name),
            "POST",
            CollectionPath(r, ns),
            Impl::Serialize(obj),
            "application/json",
            false};
  return impl_->Execute(call);
}

Result<json> Client::CreateSubresource(const Resource& r, std::string_view ns,
                                       std::string_view name, std::string_view subresource,
                                       const json& body) {
  ns = impl_->Ns(r, ns);
  Call call{"create",
            DescribeObject(r, ns, name) + " " + std::string(subresource),
            "POST",
            ObjectPath(r, ns, name, subresource),
            Impl::Serialize(body),
            "application/json",
            false};
  return impl_->Execute(call);
}

Result<json> Client::Update(const Resource& r, const json& obj, std::string_view subresource) {
  std::string_view name = MetadataString(obj, "name");
  std::string_view ns = impl_->Ns(r, MetadataString(obj, "namespace"));
  std::string what = DescribeObject(r, ns, name);
  if (!subresource.empty()) what += " " + std::string(subresource);
  if (name.empty()) {
    return Error(ErrorCode::kInvalidArgument, "update " + what + ": metadata.name is missing");
  }
  Call call{
      "update",           what, "PUT", ObjectPath(r, ns, name, subresource), Impl::Serialize(obj),
      "application/json", true};
  return impl_->Execute(call);
}

Result<json> Client::Patch(const Resource& r, std::string_view ns, std::string_view name,
                           PatchType type, const json& patch, std::string_view subresource) {
  ns = impl_->Ns(r, ns);
  std::string what = DescribeObject(r, ns, name);
  if (!subresource.empty()) what += " " + std::string(subresource);
  std::string_view content_type;
  switch (type) {
    case PatchType::kMerge:
      content_type = "application/merge-patch+json";
      break;
    case PatchType::kJson:
      content_type = "application/json-patch+json";
      break;
    case PatchType::kStrategic:
      content_type = "application/strategic-merge-patch+json";
      break;
  }
  Call call{"patch",
            what,
            "PATCH",
            ObjectPath(r, ns, name, subresource),
            Impl::Serialize(patch),
            content_type,
            type != PatchType::kJson};
  return impl_->Execute(call);
}

Result<json> Client::Delete(const Resource& r, std::string_view ns, std::string_view name,
                            std::string_view precondition_resource_version) {
  ns = impl_->Ns(r, ns);
  std::string body;
  std::string_view content_type;
  if (!precondition_resource_version.empty()) {
    json options = {{"kind", "DeleteOptions"},
                    {"apiVersion", "v1"},
                    {"preconditions", {{"resourceVersion", precondition_resource_version}}}};
    body = Impl::Serialize(options);
    content_type = "application/json";
  }
  Call call{
      "delete", DescribeObject(r, ns, name), "DELETE", ObjectPath(r, ns, name), body, content_type,
      true};
  return impl_->Execute(call);
}

namespace {

// Splits a watch stream into lines and parses each into a WatchEvent.
class WatchDecoder {
 public:
  WatchDecoder(std::string prefix, const std::function<bool(WatchEvent&&)>& on_event)
      : prefix_(std::move(prefix)), on_event_(on_event) {}

  // False when the stream must end (handler said stop, garbage, an ERROR event).
  bool Feed(std::string_view data) {
    buffer_.append(data);
    size_t start = 0;
    for (;;) {
      size_t nl = buffer_.find('\n', start);
      if (nl == std::string::npos) break;
      std::string_view line(buffer_.data() + start, nl - start);
      start = nl + 1;
      if (!Line(line)) {
        buffer_.clear();
        return false;
      }
    }
    buffer_.erase(0, start);
    if (buffer_.size() > kMaxEventBytes) {
      error_ = Error(ErrorCode::kCorrupt, prefix_ + ": event " + std::to_string(events_ + 1) +
                                              ": longer than " + std::to_string(kMaxEventBytes) +
                                              " bytes");
      return false;
    }
    return true;
  }

  // At a clean end of the stream: a last event without its newline.
  bool Finish() {
    std::string rest = std::move(buffer_);
    buffer_.clear();
    return Line(rest);
  }

  bool handler_stopped() const { return handler_stopped_; }
  const std::optional<Error>& error() const { return error_; }

 private:
  static constexpr size_t kMaxEventBytes = size_t(64) << 20;

  Error Corrupt(std::string_view why, std::string_view line) {
    return Error(ErrorCode::kCorrupt, prefix_ + ": event " + std::to_string(events_ + 1) + ": " +
                                          std::string(why) + ": " + Excerpt(line));
  }

  bool Line(std::string_view line) {
    if (line.find_first_not_of(" \t\r") == line.npos) return true;
    json j = json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded()) {
      error_ = Corrupt("not JSON", line);
      return false;
    }
    if (!j.is_object() || !j.contains("type") || !j["type"].is_string()) {
      error_ = Corrupt("not a watch event (no \"type\")", line);
      return false;
    }
    std::string type = j["type"].get<std::string>();
    WatchEvent ev;
    if (type == "ADDED") {
      ev.type = WatchEventType::kAdded;
    } else if (type == "MODIFIED") {
      ev.type = WatchEventType::kModified;
    } else if (type == "DELETED") {
      ev.type = WatchEventType::kDeleted;
    } else if (type == "BOOKMARK") {
      ev.type = WatchEventType::kBookmark;
    } else if (type == "ERROR") {
      ev.type = WatchEventType::kError;
    } else {
      error_ = Corrupt("unknown event type \"" + Excerpt(type) + "\"", line);
      return false;
    }
    auto obj = j.find("object");
    if (obj == j.end() || !obj->is_object()) {
      error_ = Corrupt("no \"object\" in the event", line);
      return false;
    }
    ev.object = std::move(*obj);
    ++events_;
    if (ev.type == WatchEventType::kError) {
      error_ = StatusError(ev.object);
      (void)on_event_(std::move(ev));
      return false;
    }
    if (!on_event_(std::move(ev))) {
      handler_stopped_ = true;
      return false;
    }
    return true;
  }

  Error StatusError(const json& status) const {
    long code = 0;
    if (auto c = status.find("code"); c != status.end() && c->is_number_integer()) {
      code = c->get<long>();
    }
    std::string msg = prefix_ + ": ERROR event";
    if (code != 0) msg += ": " + StatusText(code);
    if (auto m = status.find("message"); m != status.end() && m->is_string()) {
      msg += ": " + m->get<std::string>();
    }
    return Error(code != 0 ? CodeForStatus(code) : ErrorCode::kUnavailable, std::move(msg));
  }

  const std::string prefix_;
  const std::function<bool(WatchEvent&&)>& on_event_;
  std::string buffer_;
  int64_t events_ = 0;
  bool handler_stopped_ = false;
  std::optional<Error> error_;
};

}  // namespace

Result<WatchEnd> Client::Watch(const Resource& r, std::string_view ns, const WatchOptions& o,
                               const std::function<bool(WatchEvent&&)>& on_event,
                               std::stop_token stop) {
  Query q;
  q.Add("watch", "true")
      .Add("labelSelector", o.label_selector)
      .Add("fieldSelector", o.field_selector)
      .Add("resourceVersion", o.resource_version)
      .Add("allowWatchBookmarks", o.allow_bookmarks ? "true" : "")
      .Add("timeoutSeconds", o.timeout_seconds > 0 ? std::to_string(o.timeout_seconds) : "");
  Call call{"watch", DescribeObject(r, ns, ""), "GET", CollectionPath(r, ns) + q.str(), "", "",
            true};
  std::chrono::milliseconds deadline{0};
  if (o.timeout_seconds > 0)
    deadline = std::chrono::seconds(o.timeout_seconds) + kWatchTimeoutMargin;

  std::optional<WatchDecoder> decoder;
  TransportOutcome stream_outcome = TransportOutcome::kOk;
  auto attempt = [&] {
    decoder.emplace(call.verb + " " + call.what, on_event);
    HttpResponse resp = impl_->http.Stream(
        impl_->Request(call, deadline), [&](std::string_view data) { return decoder->Feed(data); },
        stop);
    stream_outcome = resp.outcome;
    // Once the stream began (a 2xx status arrived), or the caller stopped it, how it ended is
    // the stream's outcome, never a reason to retry.
    if (IsSuccess(resp.status) || resp.outcome == TransportOutcome::kStopped) {
      resp.outcome = TransportOutcome::kOk;
      if (!IsSuccess(resp.status)) resp.status = 200;
    }
    return resp;
  };
  if (stop.stop_requested()) return WatchEnd::kStopped;
  Result<HttpResponse> resp = impl_->WithRetries(call, attempt, stop);
  if (decoder && decoder->error()) return *decoder->error();
  if (!resp.ok()) {
    if (stop.stop_requested()) return WatchEnd::kStopped;
    return std::move(resp).error();
  }
  if (decoder->handler_stopped() || stream_outcome == TransportOutcome::kStopped) {
    return WatchEnd::kStopped;
  }
  // A broken connection leaves a partial event behind: it is dropped, never parsed.
  if (stream_outcome == TransportOutcome::kOk && !decoder->Finish()) {
    if (decoder->error()) return *decoder->error();
    return WatchEnd::kStopped;
  }
  return WatchEnd::kServerClosed;
}

}  // namespace hami::kube
