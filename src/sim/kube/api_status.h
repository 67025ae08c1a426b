// The failures of the simulated API server, as the Kubernetes API reports them: a `Status`
// object with an HTTP code, a machine-readable reason and a message in the API server's own
// words (research/kubectl-protocol.md, section 8). The store and the HTTP layer return
// ApiResult<T>; the HTTP layer turns an ApiStatus into a response body in one place
// (ToStatusJson), the in-process API into a hami::Error in another (ToError).
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include "common/result.h"
#include "kube/resource.h"

namespace hami::sim::kube {

struct ApiStatus {
  int code = 500;               // HTTP status
  std::string reason;           // "NotFound", "AlreadyExists", "Conflict", ...
  std::string message;          // what kubectl prints after "Error from server (Reason): "
  std::string name;             // details.name: the object, when one is concerned
  std::string kind;             // details.kind: the resource ("pods"), or the Kind for Invalid
  std::string group;            // details.group ("" for the core group: omitted)
  int retry_after_seconds = 0;  // > 0: details.retryAfterSeconds and the Retry-After header
  // Invalid: the field and what is wrong with it, as details.causes[0] (kubectl prints "The
  // Kind "name" is invalid: field: what" from it).
  std::string cause_field;
  std::string cause_message;
};

// The Status object: {"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure",...}.
nlohmann::json ToStatusJson(const ApiStatus& s);
// The nearest hami::Error (404 kNotFound, 409 kConflict, 410 kExpired, 400/422 kInvalidArgument,
// 429/5xx kUnavailable, ...), its message "<code> <reason>: <message>".
Error ToError(const ApiStatus& s);

// Constructors, each with the API server's message. `r` names the resource in the message
// ("pods", "leases.coordination.k8s.io") and in the details.
ApiStatus NotFound(const hami::kube::Resource& r, std::string_view name);
ApiStatus AlreadyExists(const hami::kube::Resource& r, std::string_view name);
// "Operation cannot be fulfilled on pods "x": <why>"
ApiStatus Conflict(const hami::kube::Resource& r, std::string_view name, std::string_view why);
// The optimistic-concurrency conflict: "...: the object has been modified; please apply your
// changes to the latest version and try again".
ApiStatus ModifiedConflict(const hami::kube::Resource& r, std::string_view name);
// 422 "Pod "x" is invalid: <field>: <what>"; details.kind is the Kind.
ApiStatus Invalid(const hami::kube::Resource& r, std::string_view name, std::string_view field,
                  std::string_view what);
ApiStatus BadRequest(std::string message);
ApiStatus Expired(std::string message);  // 410
ApiStatus MethodNotAllowed(std::string_view method);
ApiStatus UnsupportedMediaType(std::string message);
ApiStatus TooManyRequests(int retry_after_seconds);
ApiStatus InternalError(std::string message);
ApiStatus Forbidden(const hami::kube::Resource& r, std::string_view name, std::string_view why);
// A path the server does not serve: "the server could not find the requested resource".
ApiStatus PathNotFound();

// A value or an ApiStatus.
template <typename T>
class [[nodiscard]] ApiResult {
 public:
  ApiResult(T value) : v_(std::in_place_index<0>, std::move(value)) {}  // NOLINT: implicit
  ApiResult(ApiStatus status)                                           // NOLINT: implicit
      : v_(std::in_place_index<1>, std::move(status)) {}

  bool ok() const { return v_.index() == 0; }
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  const ApiStatus& status() const& { return std::get<1>(v_); }
  ApiStatus&& status() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, ApiStatus> v_;
};

}  // namespace hami::sim::kube
