#include "sim/kube/api_status.h"

namespace hami::sim::kube {

using hami::kube::Resource;

namespace {

std::string Quoted(std::string_view s) { return "\"" + std::string(s) + "\""; }

ApiStatus Make(int code, std::string reason, std::string message) {
  ApiStatus s;
  s.code = code;
  s.reason = std::move(reason);
  s.message = std::move(message);
  return s;
}

ApiStatus ForObject(int code, std::string reason, std::string message, const Resource& r,
                    std::string_view name) {
  ApiStatus s = Make(code, std::move(reason), std::move(message));
  s.name = name;
  s.kind = r.plural;
  s.group = r.group;
  return s;
}

}  // namespace

nlohmann::json ToStatusJson(const ApiStatus& s) {
  nlohmann::json j = {
      {"kind", "Status"},    {"apiVersion", "v1"},   {"metadata", nlohmann::json::object()},
      {"status", "Failure"}, {"message", s.message}, {"reason", s.reason},
      {"code", s.code}};
  nlohmann::json details = nlohmann::json::object();
  if (!s.name.empty()) details["name"] = s.name;
  if (!s.group.empty()) details["group"] = s.group;
  if (!s.kind.empty()) details["kind"] = s.kind;
  if (s.retry_after_seconds > 0) details["retryAfterSeconds"] = s.retry_after_seconds;
  if (!s.cause_field.empty()) {
    // The cause's reason as field.ErrorType names it, from the message's first words.
    std::string_view what = s.cause_message;
    std::string reason = "FieldValueInvalid";
    if (what.starts_with("Required value")) reason = "FieldValueRequired";
    if (what.starts_with("Unsupported value")) reason = "FieldValueNotSupported";
    if (what.starts_with("Forbidden")) reason = "FieldValueForbidden";
    if (what.starts_with("Duplicate value")) reason = "FieldValueDuplicate";
    details["causes"] = nlohmann::json::array(
        {{{"reason", reason}, {"message", s.cause_message}, {"field", s.cause_field}}});
  }
  if (!details.empty() || s.code == 404) j["details"] = std::move(details);
  return j;
}

Error ToError(const ApiStatus& s) {
  ErrorCode code = ErrorCode::kInternal;
  switch (s.code) {
    case 400:
    case 405:
    case 415:
    case 422:
      code = ErrorCode::kInvalidArgument;
      break;
    case 403:
      code = ErrorCode::kPermission;
      break;
    case 404:
      code = ErrorCode::kNotFound;
      break;
    case 409:
      code = ErrorCode::kConflict;
      break;
    case 410:
      code = ErrorCode::kExpired;
      break;
    case 429:
    case 500:
    case 503:
      code = ErrorCode::kUnavailable;
      break;
    default:
      break;
  }
  return Error(code, std::to_string(s.code) + " " + s.reason + ": " + s.message);
}

ApiStatus NotFound(const Resource& r, std::string_view name) {
  return ForObject(404, "NotFound", r.QualifiedName() + " " + Quoted(name) + " not found", r, name);
}

ApiStatus AlreadyExists(const Resource& r, std::string_view name) {
  return ForObject(409, "AlreadyExists", r.QualifiedName() + " " + Quoted(name) + " already exists",
                   r, name);
}

ApiStatus Conflict(const Resource& r, std::string_view name, std::string_view why) {
  return ForObject(409, "Conflict",
                   "Operation cannot be fulfilled on " + r.QualifiedName() + " " + Quoted(name) +
                       ": " + std::string(why),
                   r, name);
}

ApiStatus ModifiedConflict(const Resource& r, std::string_view name) {
  return Conflict(r, name,
                  "the object has been modified; please apply your changes to the latest version "
                  "and try again");
}

ApiStatus Invalid(const Resource& r, std::string_view name, std::string_view field,
                  std::string_view what) {
  std::string kind(r.kind);
  if (!r.group.empty()) kind += "." + std::string(r.group);
  ApiStatus s = Make(
      422, "Invalid",
      kind + " " + Quoted(name) + " is invalid: " + std::string(field) + ": " + std::string(what));
  s.name = name;
  s.kind = r.kind;
  s.group = r.group;
  s.cause_field = field;
  s.cause_message = what;
  return s;
}

ApiStatus BadRequest(std::string message) { return Make(400, "BadRequest", std::move(message)); }

ApiStatus Expired(std::string message) { return Make(410, "Expired", std::move(message)); }

ApiStatus MethodNotAllowed(std::string_view method) {
  return Make(405, "MethodNotAllowed",
              "the server does not allow this method on the requested resource (" +
                  std::string(method) + ")");
}

ApiStatus UnsupportedMediaType(std::string message) {
  return Make(415, "UnsupportedMediaType", std::move(message));
}

ApiStatus TooManyRequests(int retry_after_seconds) {
  ApiStatus s = Make(429, "TooManyRequests", "Too many requests, please try again later.");
  s.retry_after_seconds = retry_after_seconds;
  return s;
}

ApiStatus InternalError(std::string message) {
  return Make(500, "InternalError", "Internal error occurred: " + message);
}

ApiStatus Forbidden(const Resource& r, std::string_view name, std::string_view why) {
  return ForObject(403, "Forbidden",
                   r.QualifiedName() + " " + Quoted(name) + " is forbidden: " + std::string(why), r,
                   name);
}

ApiStatus PathNotFound() {
  return Make(404, "NotFound", "the server could not find the requested resource");
}

}  // namespace hami::sim::kube
