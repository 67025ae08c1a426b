// Prometheus text exposition (format 0.0.4): the writing helpers every hami-cpp daemon's
// /metrics uses, and a fixed-bucket histogram.
//
// Thread safety: the free functions keep no state; Histogram may be observed and rendered from
// any thread (lock-free).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>

namespace hami::prometheus {

// The Content-Type of a text exposition.
inline constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// A label value as the exposition format escapes it (backslash, double quote, newline).
std::string Escape(std::string_view v);
// Appends `v` escaped to `out` (no allocation beyond out's growth).
void AppendEscaped(std::string& out, std::string_view v);
// "# HELP name help\n# TYPE name type\n".
void Header(std::string& out, std::string_view name, std::string_view help, std::string_view type);
// A number as people read it and Prometheus parses it back exactly: the shortest text that
// reads back as `v` (0.4, never 0.40000000000000002); integers up to 2^53 without exponent;
// NaN, +Inf and -Inf as the exposition format spells them.
void Number(std::string& out, double v);
// "name{labels} value\n" ("name value\n" when `labels` is empty); `labels` is already escaped.
void Sample(std::string& out, std::string_view name, std::string_view labels, double v);

// A histogram with fixed buckets (seconds, 100 us to 10 s); lock-free observation.
class Histogram {
 public:
  static constexpr std::array<double, 14> kBuckets = {
      0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 10};
  void Observe(double seconds);
  // HELP, TYPE, the buckets, _sum and _count; `labels` (escaped, may be empty) go on every line.
  void Render(std::string& out, std::string_view name, std::string_view help,
              std::string_view labels = {}) const;
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }

 private:
  std::array<std::atomic<uint64_t>, kBuckets.size()> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace hami::prometheus
