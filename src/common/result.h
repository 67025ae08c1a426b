// Result<T>: a value or an Error. The project's one error type.
//
// An Error carries a code (what kind of failure, for callers that branch on it), the errno
// that caused it when there was one, and a message that names the input that was wrong
// ("HAMI_SIM_PROFILE='h100-8g': unknown profile 'h100-8g'"). Boundaries convert an Error to
// their own codes (CUresult, nvmlReturn_t, exit status) in exactly one function each.
#pragma once

#include <cerrno>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace hami {

enum class ErrorCode {
  kInvalidArgument,  // outside input is malformed or out of range
  kNotFound,         // a named thing does not exist
  kIo,               // a system call failed (see sys_errno)
  kCorrupt,          // data that should be ours fails validation
  kIncompatible,     // valid data of another version, size or configuration
  kBusy,             // in use by someone else
  kPermission,       // ownership or mode is unsafe or not allowed
  kUnsupported,      // a valid request this build does not handle
  kInternal,         // a bug: an invariant does not hold
  kConflict,         // the object changed since it was read, or already exists (HTTP 409)
  kExpired,          // a version is too old to resume from (HTTP 410): start again
  kUnavailable,      // the peer is overloaded or down (429, 5xx, refused) and retries ran out
  kTimeout,          // no answer within the deadline
};

class Error {
 public:
  Error(ErrorCode code, std::string message, int sys_errno = 0)
      : code_(code), sys_errno_(sys_errno), message_(std::move(message)) {}

  // An Error from errno after a failed system call: "open /x: No such file or directory".
  static Error FromErrno(std::string_view what, int err = errno) {
    std::string msg(what);
    msg += ": ";
    msg += std::strerror(err);
    return Error(ErrorCode::kIo, std::move(msg), err);
  }

  ErrorCode code() const { return code_; }
  int sys_errno() const { return sys_errno_; }
  const std::string& message() const { return message_; }

  // Adds outer context: "opening state file /tmp/x: <inner message>".
  Error&& Context(std::string_view outer) && {
    message_.insert(0, ": ");
    message_.insert(0, outer);
    return std::move(*this);
  }

 private:
  ErrorCode code_;
  int sys_errno_;
  std::string message_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::in_place_index<0>, std::move(value)) {}      // NOLINT: implicit
  Result(Error error) : v_(std::in_place_index<1>, std::move(error)) {}  // NOLINT: implicit

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  const Error& error() const& { return std::get<1>(v_); }
  Error&& error() && { return std::get<1>(std::move(v_)); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  void value() const {}
  const Error& error() const& { return error_; }
  Error&& error() && { return std::move(error_); }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

using Status = Result<void>;

inline Status OkStatus() { return Status(); }

}  // namespace hami

// Evaluates a Result; on error returns it from the enclosing function, otherwise yields the
// value. Usage: `auto fd = HAMI_TRY(OpenFile(path));` or `HAMI_TRY(WriteAll(fd, data));`
#define HAMI_TRY(expr)                            \
  ({                                              \
    auto hami_try_result_ = (expr);               \
    if (!hami_try_result_.ok()) {                 \
      return std::move(hami_try_result_).error(); \
    }                                             \
    std::move(hami_try_result_).value();          \
  })
