// The Kubernetes REST client every hami-cpp component uses (libcurl, JSON with nlohmann-json).
//
// Objects are nlohmann::json as the API sends them; kube/objects.h has typed views of the
// fields the components read. Every error names the verb, the object (kind namespace/name),
// the HTTP status and the API's Status.message, and its code says what happened:
//   404 -> kNotFound, 409 -> kConflict (AlreadyExists or a stale resourceVersion),
//   410 -> kExpired, 400/422 -> kInvalidArgument, 401/403 -> kPermission,
//   429/5xx/connection errors after the retries -> kUnavailable, deadline -> kTimeout, and a
//   request ended by its stop token -> kTimeout ("list pods: stopped by the caller").
//
//   Other codes: 405/415/501 -> kUnsupported, other 4xx -> kInvalidArgument, other 5xx ->
//   kUnavailable; a TLS failure (untrusted server, refused client certificate) -> kPermission; a
//   2xx body that is not JSON -> kCorrupt. For example:
//   update pods default/x: 409 Conflict: Operation cannot be fulfilled on pods "x": the object
//   has been modified; please apply your changes to the latest version and try again
//
// Retries (up to ClientOptions::max_retries after the first attempt, each attempt rate-limited
// and subject to request_timeout). A request is retried only when repeating it is safe:
//   - 429 Too Many Requests, and 503 with a Retry-After header: every verb (the server says it
//     did not act on the request);
//   - no connection could be made (refused, unresolvable, connect timeout): every verb (nothing
//     was sent);
//   - 500, 502, 503, 504, and a connection that broke after the request was sent: only
//     idempotent requests, where a repeat cannot do more than the first attempt did: GET (get,
//     list, the start of a watch), PUT (update: conditional on metadata.resourceVersion when set,
//     so a repeat of an applied update gets 409 rather than clobbering), DELETE (a repeat of an
//     applied delete gets 404 kNotFound), and merge or strategic merge PATCH (applying one twice
//     equals applying it once). Never POST (create, binding: a repeat could create twice or
//     answer 409 for our own first attempt) or JSON patch (`add` to "-", `move` are not
//     idempotent);
//   - never after request_timeout passed (kTimeout at once: the server may still be working).
// The wait before a retry is the Retry-After header's seconds when present (honoured as given),
// else jittered exponential backoff: retry_base * 2^n, capped at retry_cap, uniformly drawn from
// its upper half. A 401 with a token file re-reads the file and, when the token changed,
// repeats the request once without counting it as a retry.
//
// Authentication: a client certificate and key, and/or a bearer token (a token file is checked
// for changes (inode, size, mtime) at most once a second, and at once on a 401).
//
// Thread safety: a Client is used from any number of threads at once. Requests share one
// rate limiter (QPS and burst, as client-go's flags) and reuse connections (a pool of libcurl
// handles, each keeping its connections alive).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <stop_token>
#include <string>
#include <string_view>

#include "common/result.h"
#include "kube/config.h"
#include "kube/rate_limiter.h"
#include "kube/resource.h"

namespace hami::kube {

struct ClientOptions {
  double qps = 5;  // client-go's defaults; <= 0 disables the limiter
  int burst = 10;
  std::chrono::milliseconds request_timeout{30000};  // one attempt of a non-watch request
  std::chrono::milliseconds connect_timeout{5000};
  int max_retries = 5;  // after the first attempt, on 429, 5xx and connection errors
  std::chrono::milliseconds retry_base{100};   // jittered exponential backoff between tries;
  std::chrono::milliseconds retry_cap{10000};  // a Retry-After header takes precedence
  std::string user_agent = "hami-cpp";
  // Time for the rate limiter, retry waits and the token file check; nullptr: the steady clock.
  // Not owned; must outlive the Client. Tests pass a FakeClock so that waits take no time.
  Clock* clock = nullptr;
};

struct ListOptions {
  std::string label_selector;  // "a=b,c in (d,e)"
  std::string field_selector;  // "spec.nodeName=node-1"
  int64_t limit = 0;           // page size; 0: no limit
  std::string continue_token;
  std::string resource_version;
};

enum class PatchType {
  kMerge,      // application/merge-patch+json (RFC 7386)
  kJson,       // application/json-patch+json (RFC 6902), e.g. with a `test` op
  kStrategic,  // application/strategic-merge-patch+json
};

enum class WatchEventType { kAdded, kModified, kDeleted, kBookmark, kError };

struct WatchEvent {
  WatchEventType type;
  nlohmann::json object;  // for kError, the Status object the server sent
};

struct WatchOptions {
  std::string label_selector;
  std::string field_selector;
  std::string resource_version;  // resume after this version; empty: from now (synthetic ADDED)
  bool allow_bookmarks = true;
  int timeout_seconds = 0;  // the server ends the stream after this; 0: server default
};

// A watch has no request timeout, only the connect timeout, and with timeout_seconds > 0 a
// deadline of timeout_seconds plus this margin (for a server that does not end the stream).
inline constexpr std::chrono::seconds kWatchTimeoutMargin{30};

// What ended a watch stream that had no transport error.
enum class WatchEnd {
  kStopped,      // the stop token was requested, or the handler returned false
  kServerClosed  // the server ended the stream (timeoutSeconds, restart), or the connection
                 // broke or passed the deadline after the stream began: resume from the last
                 // version seen
};

// Namespaces: for a namespaced resource, Get, Create, CreateSubresource, Update, Patch and Delete
// use config().default_namespace when `ns` (or the object's metadata.namespace) is empty; List,
// ListAll and Watch with an empty `ns` cover all namespaces. `ns` is ignored for cluster-scoped
// resources.
class Client {
 public:
  // Fails (naming config.source) when the token file cannot be read and there is no fixed token,
  // or a client certificate comes without its key.
  static Result<std::unique_ptr<Client>> Create(Config config, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const;

  Result<nlohmann::json> Get(const Resource& r, std::string_view ns, std::string_view name);

  // One page: the List object (items, metadata.resourceVersion, metadata.continue). A stop
  // request ends the request at once, whether it is waiting for the rate limiter, in flight
  // (the transfer is aborted) or between retries: kTimeout, "list ...: stopped by the caller".
  // (On a ClientOptions::clock other than the steady clock the waits are that clock's sleeps.)
  Result<nlohmann::json> List(const Resource& r, std::string_view ns, const ListOptions& options,
                              std::stop_token stop = {});
  // Every page, following `continue`: a List whose items are all the pages' items and whose
  // metadata.resourceVersion is the first page's (the consistent snapshot). A 410 on a later
  // page (the snapshot expired) restarts from the first page once. `stop` as for List, for
  // every page.
  Result<nlohmann::json> ListAll(const Resource& r, std::string_view ns, const ListOptions& options,
                                 std::stop_token stop = {});

  // POST to the collection; returns the stored object.
  Result<nlohmann::json> Create(const Resource& r, std::string_view ns, const nlohmann::json& obj);
  // POST to an object's subresource: "binding" for pods/binding. Returns the server's answer
  // (a Status for binding).
  Result<nlohmann::json> CreateSubresource(const Resource& r, std::string_view ns,
                                           std::string_view name, std::string_view subresource,
                                           const nlohmann::json& body);
  // PUT of obj (name and namespace from obj.metadata). With metadata.resourceVersion set the
  // update is conditional: a stale version gives kConflict. `subresource` "status" for
  // pods/status, nodes/status.
  Result<nlohmann::json> Update(const Resource& r, const nlohmann::json& obj,
                                std::string_view subresource = {});
  Result<nlohmann::json> Patch(const Resource& r, std::string_view ns, std::string_view name,
                               PatchType type, const nlohmann::json& patch,
                               std::string_view subresource = {});
  // DELETE; with `precondition_resource_version` not empty, only that version is deleted
  // (kConflict otherwise). Returns the deleted object as the server answered it.
  Result<nlohmann::json> Delete(const Resource& r, std::string_view ns, std::string_view name,
                                std::string_view precondition_resource_version = {});

  // One watch stream: calls `on_event` for each event in order, from the calling thread (never
  // from inside libcurl, so the handler may call this Client), until the handler returns false,
  // `stop` is requested (ends at once, also while waiting to retry), or the server closes the
  // stream. Events are newline-delimited JSON, tolerated split across chunks or several to a chunk
  // (blank lines are skipped; a last event without its newline is accepted). An ERROR event is
  // handed to the handler, then ends the watch with the error its Status code maps to: a 410 in it
  // (or as the HTTP status) returns kExpired. A line that is not a watch event (not JSON, no known
  // `type`, no `object`) ends the stream with kCorrupt: it is never handed on. Before the stream
  // begins, errors are retried as for a GET. Reconnecting is the caller's (kube/informer.h does
  // it).
  Result<WatchEnd> Watch(const Resource& r, std::string_view ns, const WatchOptions& options,
                         const std::function<bool(WatchEvent&&)>& on_event,
                         std::stop_token stop = {});

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "pods default/x", "nodes node-1", "leases.coordination.k8s.io kube-system/hami": how errors
// and logs name an object. With an empty name it names the collection: "pods in default",
// "pods" (all namespaces), "nodes".
std::string DescribeObject(const Resource& r, std::string_view ns, std::string_view name);

}  // namespace hami::kube
