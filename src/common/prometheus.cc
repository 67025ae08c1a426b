#include "common/prometheus.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>

namespace hami::prometheus {

void AppendEscaped(std::string& out, std::string_view v) {
  for (char c : v) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
}

std::string Escape(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  AppendEscaped(out, v);
  return out;
}

void Header(std::string& out, std::string_view name, std::string_view help, std::string_view type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void Number(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
    return;
  }
  if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
    return;
  }
  constexpr double kExactIntegers = 9007199254740992.0;  // 2^53
  char buf[64];
  std::to_chars_result r;
  if (v == std::trunc(v) && std::fabs(v) <= kExactIntegers) {
    r = std::to_chars(buf, buf + sizeof(buf), static_cast<int64_t>(v));
  } else {
    r = std::to_chars(buf, buf + sizeof(buf), v);  // the shortest text that reads back as v
  }
  out.append(buf, r.ptr);
}

void Sample(std::string& out, std::string_view name, std::string_view labels, double v) {
  out += name;
  if (!labels.empty()) {
    out += '{';
    out += labels;
    out += '}';
  }
  out += ' ';
  Number(out, v);
  out += '\n';
}

void Histogram::Observe(double seconds) {
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    if (seconds <= kBuckets[i]) buckets_[i].fetch_add(1, std::memory_order_relaxed);
  }
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(seconds * 1e9), std::memory_order_relaxed);
}

void Histogram::Render(std::string& out, std::string_view name, std::string_view help,
                       std::string_view labels) const {
  Header(out, name, help, "histogram");
  const std::string bucket = std::string(name) + "_bucket";
  const std::string prefix = labels.empty() ? std::string() : std::string(labels) + ",";
  for (size_t i = 0; i < kBuckets.size(); ++i) {
    std::string le = prefix + "le=\"";
    char buf[32];
    std::snprintf(buf, sizeof(buf), "%g", kBuckets[i]);
    le += buf;
    le += '"';
    Sample(out, bucket, le, double(buckets_[i].load(std::memory_order_relaxed)));
  }
  const double count = double(count_.load(std::memory_order_relaxed));
  Sample(out, bucket, prefix + "le=\"+Inf\"", count);
  Sample(out, std::string(name) + "_sum", labels,
         double(sum_ns_.load(std::memory_order_relaxed)) / 1e9);
  Sample(out, std::string(name) + "_count", labels, count);
}

}  // namespace hami::prometheus
