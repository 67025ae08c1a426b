// Result<T>: a value or an Error. The project's one error type.
//
// An Error carries a code (what kind of failure, for callers that branch on it), the errno
// that caused it when there was one, and a text that names the input that was wrong
// ("HAMI_SIM_PROFILE='h100-8g': unknown profile 'h100-8g'"). Boundaries convert an Error to
// their own codes (CUresult, nvmlReturn_t, exit status) in exactly one function each; see
// docs/design.md, "Failure policy".
//
// Allocation. The text lives in an inline buffer of kInlineCapacity bytes, so the interposer's
// paths never allocate:
//   - Error(code, "literal", errno), Error::FromErrno(what, errno), Error::Format(...), copying
//     and moving any of them, Result<T> holding one, and Context() while the text fits never
//     allocate. Such an Error is *bounded*: text that would not fit is cut at a UTF-8 character
//     boundary and ends with kTruncationMarker ("…").
//   - Error(code, std::string, errno) is the daemons' constructor (the caller has allocated
//     already): such an Error is *unbounded*; text longer than the inline buffer moves to the
//     heap, whole, and so does a Context() that outgrows it.
//   - message() returns a const std::string&: for text held inline it makes (once, thread-safe)
//     a heap copy. Code that must not allocate reads text() or c_str() instead.
//
// Thread safety: an Error is a value; const members may be called from any number of threads.
// Async-signal safety: constructing, copying, text() and c_str() are (no locks, no malloc);
// FromErrno is as far as strerrordesc_np is (a table read).
#pragma once

#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
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
  // Bytes of text held without allocating (sizeof(Error) is 256 on LP64).
  static constexpr size_t kInlineCapacity = 223;
  // Ends a bounded text that was cut: U+2026 HORIZONTAL ELLIPSIS, 3 bytes of UTF-8.
  static constexpr std::string_view kTruncationMarker = "\xe2\x80\xa6";

  // From a literal (or any char array; its text is copied): bounded, never allocates.
  template <size_t N>
  Error(ErrorCode code, const char (&literal)[N], int sys_errno = 0) noexcept  // NOLINT
      : code_(code), sys_errno_(sys_errno), bounded_(true) {
    SetInline(std::string_view(literal, strnlen(literal, N)));
  }

  // From a composed text (daemons): unbounded, keeps the whole text.
  Error(ErrorCode code, std::string message, int sys_errno = 0)
      : code_(code), sys_errno_(sys_errno), bounded_(false) {
    if (message.size() <= kInlineCapacity) {
      SetInline(message);
    } else {
      long_ = std::make_unique<std::string>(std::move(message));
    }
  }

  // An Error from errno after a failed system call: "open /x: No such file or directory".
  // Bounded; never allocates.
  static Error FromErrno(std::string_view what, int err = errno) noexcept {
    Error e(ErrorCode::kIo, "", err);
    const char* desc = strerrordesc_np(err);
    char unknown[32];
    if (desc == nullptr) {
      std::snprintf(unknown, sizeof(unknown), "Unknown error %d", err);
      desc = unknown;
    }
    e.SetInline(what, ": ", desc);
    return e;
  }

  // printf into the inline buffer: bounded, never allocates (as far as vsnprintf does not for
  // the conversions used: integers and strings). For the interposer's details (paths, values).
  static Error Format(ErrorCode code, int sys_errno, const char* fmt, ...) noexcept
      __attribute__((format(printf, 3, 4))) {
    Error e(code, "", sys_errno);
    va_list args;
    va_start(args, fmt);
    int n = std::vsnprintf(e.inline_, sizeof(e.inline_), fmt, args);
    va_end(args);
    if (n < 0) n = 0;
    if (size_t(n) > kInlineCapacity) {
      e.size_ = uint16_t(kInlineCapacity);
      e.MarkTruncated();
    } else {
      e.size_ = uint16_t(n);
    }
    return e;
  }

  Error(const Error& other)
      : code_(other.code_),
        sys_errno_(other.sys_errno_),
        size_(other.size_),
        bounded_(other.bounded_),
        truncated_(other.truncated_) {
    std::memcpy(inline_, other.inline_, size_t(size_) + 1);
    if (other.long_) long_ = std::make_unique<std::string>(*other.long_);
  }
  Error(Error&& other) noexcept
      : code_(other.code_),
        sys_errno_(other.sys_errno_),
        size_(other.size_),
        bounded_(other.bounded_),
        truncated_(other.truncated_),
        long_(std::move(other.long_)) {
    std::memcpy(inline_, other.inline_, size_t(size_) + 1);
    cache_.store(other.cache_.exchange(nullptr, std::memory_order_acq_rel),
                 std::memory_order_relaxed);
  }
  Error& operator=(const Error& other) {
    if (this != &other) {
      Error copy(other);
      *this = std::move(copy);
    }
    return *this;
  }
  Error& operator=(Error&& other) noexcept {
    if (this != &other) {
      code_ = other.code_;
      sys_errno_ = other.sys_errno_;
      size_ = other.size_;
      bounded_ = other.bounded_;
      truncated_ = other.truncated_;
      std::memcpy(inline_, other.inline_, size_t(size_) + 1);
      long_ = std::move(other.long_);
      DropCache();
      cache_.store(other.cache_.exchange(nullptr, std::memory_order_acq_rel),
                   std::memory_order_relaxed);
    }
    return *this;
  }
  ~Error() { DropCache(); }

  ErrorCode code() const { return code_; }
  int sys_errno() const { return sys_errno_; }

  // The composed text ("outer: inner: what: strerror"). Never allocates.
  std::string_view text() const {
    return long_ ? std::string_view(*long_) : std::string_view(inline_, size_);
  }
  // The same text, NUL-terminated (for raw_log's "%s"). Never allocates.
  const char* c_str() const { return long_ ? long_->c_str() : inline_; }
  // The same text as a std::string; allocates once for text held inline (see above).
  const std::string& message() const {
    if (long_) return *long_;
    std::string* s = cache_.load(std::memory_order_acquire);
    if (s != nullptr) return *s;
    auto* fresh = new std::string(inline_, size_);
    if (cache_.compare_exchange_strong(s, fresh, std::memory_order_acq_rel)) return *fresh;
    delete fresh;
    return *s;
  }
  // True when a bounded text was cut (it ends with kTruncationMarker).
  bool truncated() const { return truncated_; }

  // Adds outer context: "opening state file /tmp/x: <inner text>". Never allocates while the
  // result fits the inline buffer; beyond it a bounded Error is cut, an unbounded one moves
  // its text to the heap.
  Error&& Context(std::string_view outer) && {
    DropCache();
    if (long_) {
      long_->insert(0, ": ");
      long_->insert(0, outer);
      return std::move(*this);
    }
    size_t total = outer.size() + 2 + size_;
    if (total <= kInlineCapacity) {
      std::memmove(inline_ + outer.size() + 2, inline_, size_t(size_) + 1);
      std::memcpy(inline_, outer.data(), outer.size());
      std::memcpy(inline_ + outer.size(), ": ", 2);
      size_ = uint16_t(total);
    } else if (!bounded_) {
      auto s = std::make_unique<std::string>();
      s->reserve(total);
      s->append(outer).append(": ").append(inline_, size_);
      long_ = std::move(s);
    } else {
      char inner[kInlineCapacity + 1];
      std::memcpy(inner, inline_, size_t(size_) + 1);
      SetInline(outer, ": ", std::string_view(inner, size_));
    }
    return std::move(*this);
  }

 private:
  // Composes up to three pieces into the inline buffer, cutting at kInlineCapacity.
  void SetInline(std::string_view a, std::string_view b = {}, std::string_view c = {}) noexcept {
    size_t used = 0;
    bool cut = false;
    for (std::string_view piece : {a, b, c}) {
      size_t room = kInlineCapacity - used;
      size_t n = piece.size() <= room ? piece.size() : room;
      if (n < piece.size()) cut = true;
      if (n != 0) std::memcpy(inline_ + used, piece.data(), n);  // an empty view's data() may be null
      used += n;
    }
    size_ = uint16_t(used);
    inline_[used] = '\0';
    if (cut) MarkTruncated();
  }

  // Replaces the end of a full inline buffer by the marker, at a UTF-8 character boundary.
  void MarkTruncated() noexcept {
    size_t keep = kInlineCapacity - kTruncationMarker.size();
    while (keep > 0 && (static_cast<unsigned char>(inline_[keep]) & 0xC0) == 0x80) --keep;
    std::memcpy(inline_ + keep, kTruncationMarker.data(), kTruncationMarker.size());
    size_ = uint16_t(keep + kTruncationMarker.size());
    inline_[size_] = '\0';
    truncated_ = true;
  }

  void DropCache() noexcept { delete cache_.exchange(nullptr, std::memory_order_acq_rel); }

  ErrorCode code_;
  int sys_errno_;
  uint16_t size_ = 0;       // bytes of text in inline_ (when long_ is null)
  bool bounded_;            // text never leaves inline_ (cut instead)
  bool truncated_ = false;  // inline_'s text was cut
  char inline_[kInlineCapacity + 1];
  std::unique_ptr<std::string> long_;          // an unbounded Error's text beyond inline_
  mutable std::atomic<std::string*> cache_{};  // message()'s copy of inline_ (owned)
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
