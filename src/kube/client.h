// The Kubernetes REST client every hami-cpp component uses (libcurl, JSON with nlohmann-json).
//
// Objects are nlohmann::json as the API sends them; kube/objects.h has typed views of the
// fields the components read. Every error names the verb, the object (kind namespace/name),
// the HTTP status and the API's Status.message, and its code says what happened:
//   404 -> kNotFound, 409 -> kConflict (AlreadyExists or a stale resourceVersion),
//   410 -> kExpired, 400/422 -> kInvalidArgument, 401/403 -> kPermission,
//   429/5xx/connection errors after the retries -> kUnavailable, deadline -> kTimeout.
//
// Thread safety: a Client is used from any number of threads at once. Requests share one
// rate limiter (QPS and burst, as client-go's flags) and reuse connections.
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

// What ended a watch stream that had no transport error.
enum class WatchEnd {
  kStopped,      // the stop token was requested, or the handler returned false
  kServerClosed  // the server ended the stream (timeoutSeconds, restart): resume from the last
                 // version seen
};

class Client {
 public:
  static Result<std::unique_ptr<Client>> Create(Config config, ClientOptions options = {});
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const Config& config() const;

  Result<nlohmann::json> Get(const Resource& r, std::string_view ns, std::string_view name);

  // One page: the List object (items, metadata.resourceVersion, metadata.continue).
  Result<nlohmann::json> List(const Resource& r, std::string_view ns, const ListOptions& options);
  // Every page, following `continue`: a List whose items are all the pages' items and whose
  // metadata.resourceVersion is the first page's (the consistent snapshot). A 410 on a later
  // page (the snapshot expired) restarts from the first page once.
  Result<nlohmann::json> ListAll(const Resource& r, std::string_view ns,
                                 const ListOptions& options);

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

  // One watch stream: calls `on_event` for each event in order, from the calling thread, until
  // the handler returns false, `stop` is requested (ends within 100 ms), or the server closes
  // the stream. An ERROR event is handed to the handler; a 410 in it (or as the HTTP status)
  // returns kExpired. A line that is not a watch event ends the stream with kCorrupt: it is
  // never handed on. Reconnecting is the caller's (kube/informer.h does it).
  Result<WatchEnd> Watch(const Resource& r, std::string_view ns, const WatchOptions& options,
                         const std::function<bool(WatchEvent&&)>& on_event,
                         std::stop_token stop = {});

 private:
  struct Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// "pods default/x", "nodes node-1", "leases.coordination.k8s.io kube-system/hami": how errors
// and logs name an object.
std::string DescribeObject(const Resource& r, std::string_view ns, std::string_view name);

}  // namespace hami::kube
