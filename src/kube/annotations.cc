#include "kube/annotations.h"

#include <chrono>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "common/quote.h"
#include "common/strings.h"

namespace hami::kube {
namespace {

using nlohmann::json;
using std::chrono::seconds;

// The length of the valid UTF-8 sequence at s[i], or 0 when it is not one.
size_t Utf8Length(std::string_view s, size_t i) {
  auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = byte(i);
  if (c < 0x80) return 1;
  size_t n;
  uint32_t cp;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
    cp = c & 0x1f;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    cp = c & 0x0f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    cp = c & 0x07;
  } else {
    return 0;
  }
  if (s.size() - i < n) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((byte(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (byte(i + k) & 0x3f);
  }
  if ((n == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) ||
      (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) {
    return 0;
  }
  return n;
}

bool IsControl(unsigned char c) { return c < 0x20 || c == 0x7f; }

// Why `s` is no good as a name or id inside an annotation, or empty when it is fine.
std::string_view TextProblem(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (IsControl(static_cast<unsigned char>(s[i]))) return "contains a control character";
    size_t n = Utf8Length(s, i);
    if (n == 0) return "is not valid UTF-8";
    i += n;
  }
  return {};
}

// The text as an error message shows it: non-printable bytes as \xNN, at most 80 bytes.
std::string Quote(std::string_view text) { return QuoteInput(text, 80); }

Error Bad(std::string_view annotation, std::string_view detail) {
  std::string msg(annotation);
  msg += ": ";
  msg += detail;
  return Error(ErrorCode::kInvalidArgument, std::move(msg));
}

// Decimal digits (a leading '-' when `allow_negative`) within int32; nullopt otherwise.
std::optional<int32_t> ParseInt32(std::string_view s, bool allow_negative) {
  bool negative = false;
  size_t i = 0;
  if (allow_negative && !s.empty() && s[0] == '-') {
    negative = true;
    i = 1;
  }
  if (i == s.size()) return std::nullopt;
  int64_t v = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9') return std::nullopt;
    v = v * 10 + (s[i] - '0');
    if (v > int64_t{std::numeric_limits<int32_t>::max()} + 1) return std::nullopt;
  }
  if (negative) v = -v;
  if (v > std::numeric_limits<int32_t>::max() || v < std::numeric_limits<int32_t>::min()) {
    return std::nullopt;
  }
  return static_cast<int32_t>(v);
}

// Go's strconv.ParseBool.
std::optional<bool> ParseGoBool(std::string_view s) {
  for (std::string_view t : {"1", "t", "T", "TRUE", "true", "True"}) {
    if (s == t) return true;
  }
  for (std::string_view f : {"0", "f", "F", "FALSE", "false", "False"}) {
    if (s == f) return false;
  }
  return std::nullopt;
}

// Seconds and nanoseconds since the epoch as a WallTime, when it can hold them.
std::optional<WallTime> ToWallTime(int64_t unix_seconds, int64_t nanos) {
  constexpr int64_t kMax =
      std::chrono::duration_cast<seconds>(WallTime::duration::max()).count() - 1;
  constexpr int64_t kMin =
      std::chrono::duration_cast<seconds>(WallTime::duration::min()).count() + 1;
  if (unix_seconds > kMax || unix_seconds < kMin) return std::nullopt;
  return WallTime{} + std::chrono::duration_cast<WallTime::duration>(
                          seconds(unix_seconds) + std::chrono::nanoseconds(nanos));
}

// ---- node inventory ----

void AppendJsonString(std::string_view s, std::string* out) {
  *out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '"' || c == '\\') {
      *out += '\\';
      *out += static_cast<char>(c);
      ++i;
    } else if (c < 0x20) {
      *out += "\\u00";
      *out += HexEncode(std::span<const uint8_t>(&c, 1));
      ++i;
    } else if (size_t n = Utf8Length(s, i); n != 0) {
      out->append(s.substr(i, n));
      i += n;
    } else {
      *out += "\xef\xbf\xbd";  // U+FFFD for a byte that is not UTF-8, as Go writes it
      ++i;
    }
  }
  *out += '"';
}

class InventoryField {
 public:
  InventoryField(size_t device, std::string_view field) : device_(device), field_(field) {}
  Error Fail(std::string_view problem) const {
    return Bad(kNodeRegisterAnnotation, "device " + std::to_string(device_) + " " +
                                            std::string(field_) + ": " + std::string(problem));
  }

 private:
  size_t device_;
  std::string_view field_;
};

Status CheckText(const InventoryField& f, std::string_view s) {
  std::string_view problem = TextProblem(s);
  if (!problem.empty()) return f.Fail(Quote(s) + " " + std::string(problem));
  return OkStatus();
}

Status JsonString(const json& obj, std::string_view key, size_t device, std::string* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return OkStatus();
  InventoryField f(device, key);
  if (!it->is_string()) return f.Fail("expected a string, got " + std::string(it->type_name()));
  *out = it->get_ref<const std::string&>();
  return CheckText(f, *out);
}

Status JsonInt(const json& obj, std::string_view key, size_t device, bool allow_negative,
               int32_t* out) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return OkStatus();
  InventoryField f(device, key);
  if (!it->is_number_integer()) {
    return f.Fail("expected an integer, got " + (it->is_number() ? it->dump() : it->type_name()));
  }
  int64_t min = allow_negative ? std::numeric_limits<int32_t>::min() : 0;
  bool fits =
      it->is_number_unsigned()
          ? it->get<uint64_t>() <= uint64_t{std::numeric_limits<int32_t>::max()}
          : it->get<int64_t>() >= min && it->get<int64_t>() <= std::numeric_limits<int32_t>::max();
  if (!fits) {
    return f.Fail(it->dump() + (allow_negative ? " is out of range" : " is negative or too large"));
  }
  *out = static_cast<int32_t>(it->get<int64_t>());
  return OkStatus();
}

Result<std::vector<NodeDevice>> DecodeInventoryJson(std::string_view value) {
  json doc;
  try {
    doc = json::parse(value);
  } catch (const json::exception& e) {
    return Bad(kNodeRegisterAnnotation, std::string("not valid JSON: ") + e.what());
  }
  if (!doc.is_array()) {
    return Bad(kNodeRegisterAnnotation,
               "expected a JSON array of devices, got " + std::string(doc.type_name()));
  }
  std::vector<NodeDevice> devices;
  devices.reserve(doc.size());
  for (size_t i = 0; i < doc.size(); ++i) {
    const json& d = doc[i];
    if (!d.is_object()) {
      return Bad(kNodeRegisterAnnotation,
                 "device " + std::to_string(i) + ": expected an object, got " + d.type_name());
    }
    NodeDevice dev;
    HAMI_TRY(JsonString(d, "id", i, &dev.id));
    HAMI_TRY(JsonInt(d, "index", i, false, &dev.index));
    HAMI_TRY(JsonInt(d, "count", i, false, &dev.count));
    HAMI_TRY(JsonInt(d, "devmem", i, false, &dev.devmem_mib));
    HAMI_TRY(JsonInt(d, "devcore", i, false, &dev.devcore));
    HAMI_TRY(JsonString(d, "type", i, &dev.type));
    HAMI_TRY(JsonInt(d, "numa", i, true, &dev.numa));
    HAMI_TRY(JsonString(d, "mode", i, &dev.mode));
    if (auto it = d.find("health"); it != d.end() && !it->is_null()) {
      if (!it->is_boolean()) {
        return InventoryField(i, "health")
            .Fail("expected a boolean, got " + std::string(it->type_name()));
      }
      dev.health = it->get<bool>();
    }
    if (dev.id.empty()) return InventoryField(i, "id").Fail("is missing");
    devices.push_back(std::move(dev));
  }
  return devices;
}

Result<std::vector<NodeDevice>> DecodeInventoryLegacy(std::string_view value) {
  std::vector<std::string_view> entries = SplitString(value, ':', false);
  if (entries.size() > 1 && entries.back().empty()) entries.pop_back();
  std::vector<NodeDevice> devices;
  devices.reserve(entries.size());
  for (size_t i = 0; i < entries.size(); ++i) {
    std::string_view entry = entries[i];
    auto where = [&] { return "legacy entry " + std::to_string(i) + " " + Quote(entry) + ": "; };
    if (entry.empty()) return Bad(kNodeRegisterAnnotation, where() + "is empty");
    std::vector<std::string_view> f = SplitString(entry, ',', false);
    if (f.size() != 7) {
      std::string problem = where() + "expected 7 comma-separated fields " +
                            "(id,count,devmem,devcore,type,numa,health), got " +
                            std::to_string(f.size());
      if (f.size() > 7) problem += " (a ',' in the id or type is ambiguous)";
      return Bad(kNodeRegisterAnnotation, problem);
    }
    NodeDevice dev;
    auto text = [&](std::string_view name, std::string_view s, std::string* out) -> Status {
      std::string_view problem = TextProblem(s);
      if (!problem.empty()) {
        return Bad(kNodeRegisterAnnotation,
                   where() + std::string(name) + " " + std::string(problem));
      }
      *out = s;
      return OkStatus();
    };
    auto number = [&](std::string_view name, std::string_view s, bool allow_negative,
                      int32_t* out) -> Status {
      std::optional<int32_t> v = ParseInt32(s, allow_negative);
      if (!v) {
        return Bad(kNodeRegisterAnnotation,
                   where() + std::string(name) + " " + Quote(s) +
                       (allow_negative ? " is not an int32" : " is not a non-negative int32"));
      }
      *out = *v;
      return OkStatus();
    };
    if (f[0].empty()) return Bad(kNodeRegisterAnnotation, where() + "id is empty");
    HAMI_TRY(text("id", f[0], &dev.id));
    HAMI_TRY(number("count", f[1], false, &dev.count));
    HAMI_TRY(number("devmem", f[2], false, &dev.devmem_mib));
    HAMI_TRY(number("devcore", f[3], false, &dev.devcore));
    HAMI_TRY(text("type", f[4], &dev.type));
    HAMI_TRY(number("numa", f[5], true, &dev.numa));
    std::optional<bool> health = ParseGoBool(f[6]);
    if (!health) {
      return Bad(kNodeRegisterAnnotation, where() + "health " + Quote(f[6]) + " is not a boolean");
    }
    dev.health = *health;
    devices.push_back(std::move(dev));
  }
  return devices;
}

// ---- handshake ----

// A cursor over the handshake's text.
struct Scanner {
  std::string_view s;
  size_t pos = 0;

  bool Done() const { return pos == s.size(); }
  bool Eat(char c) {
    if (pos < s.size() && s[pos] == c) {
      ++pos;
      return true;
    }
    return false;
  }
  bool Eat(std::string_view t) {
    if (s.substr(pos).starts_with(t)) {
      pos += t.size();
      return true;
    }
    return false;
  }
  // Exactly n digits.
  std::optional<int> Fixed(size_t n) {
    if (s.size() - pos < n) return std::nullopt;
    int v = 0;
    for (size_t i = 0; i < n; ++i) {
      char c = s[pos + i];
      if (c < '0' || c > '9') return std::nullopt;
      v = v * 10 + (c - '0');
    }
    pos += n;
    return v;
  }
  // One or more characters satisfying `ok`; the span, or empty.
  template <typename F>
  std::string_view Span(F&& ok) {
    size_t begin = pos;
    while (pos < s.size() && ok(s[pos])) ++pos;
    return s.substr(begin, pos - begin);
  }
};

bool IsDigitChar(char c) { return c >= '0' && c <= '9'; }

Error BadHandshake(std::string_view value, std::string_view problem) {
  return Bad(kNodeHandshakeAnnotation, Quote(value) + ": " + std::string(problem));
}

// ---- pod devices ----

Error BadDevice(std::string_view annotation, size_t container, size_t device,
                std::string_view entry, std::string_view problem) {
  return Bad(annotation, "container " + std::to_string(container) + " device " +
                             std::to_string(device) + " " + Quote(entry) + ": " +
                             std::string(problem));
}

// Why `s` cannot be a pod-device uuid or type, or empty.
std::string_view DeviceTextProblem(std::string_view s) {
  if (s.empty()) return "is empty";
  if (s.find_first_of(",:;") != std::string_view::npos) return "contains ',', ':' or ';'";
  return TextProblem(s);
}

Result<ContainerDevice> DecodeDevice(std::string_view entry, std::string_view annotation,
                                     size_t container, size_t device) {
  if (entry.empty()) return BadDevice(annotation, container, device, entry, "empty device entry");
  const std::vector<std::string_view> f = SplitString(entry, ',', false);
  if (f.size() != 4) {
    return BadDevice(annotation, container, device, entry,
                     "expected 4 comma-separated fields (uuid,type,memMiB,cores), got " +
                         std::to_string(f.size()));
  }
  ContainerDevice d;
  if (std::string_view p = DeviceTextProblem(f[0]); !p.empty()) {
    return BadDevice(annotation, container, device, entry, "uuid " + std::string(p));
  }
  if (std::string_view p = DeviceTextProblem(f[1]); !p.empty()) {
    return BadDevice(annotation, container, device, entry, "type " + std::string(p));
  }
  std::optional<int32_t> mem = ParseInt32(f[2], false);
  if (!mem) {
    return BadDevice(annotation, container, device, entry,
                     "memory " + Quote(f[2]) + " is not a non-negative int32 (MiB)");
  }
  std::optional<int32_t> cores = ParseInt32(f[3], false);
  if (!cores) {
    return BadDevice(annotation, container, device, entry,
                     "cores " + Quote(f[3]) + " is not a non-negative int32 (percent)");
  }
  d.uuid = f[0];
  d.type = f[1];
  d.mem_mib = *mem;
  d.cores = *cores;
  return d;
}

Result<ContainerDevices> DecodeContainer(std::string_view text, std::string_view annotation,
                                         size_t container) {
  ContainerDevices devices;
  if (text.empty()) return devices;
  if (text.back() == ':') text.remove_suffix(1);
  size_t device = 0;
  for (std::string_view entry : SplitString(text, ':', false)) {
    devices.push_back(HAMI_TRY(DecodeDevice(entry, annotation, container, device++)));
  }
  return devices;
}

// ---- node lock ----

// Why `s` cannot be the lock holder's namespace or pod name, or empty.
std::string_view NameProblem(std::string_view s) {
  if (s.empty()) return "is empty";
  for (char c : s) {
    if (c == ',') return "contains ','";
    if (c == ' ' || c == '\t' || IsControl(static_cast<unsigned char>(c))) {
      return "contains whitespace or a control character";
    }
  }
  return {};
}

}  // namespace

// ---- node inventory ----

std::string EncodeNodeInventory(const std::vector<NodeDevice>& devices) {
  std::string out = "[";
  for (size_t i = 0; i < devices.size(); ++i) {
    const NodeDevice& d = devices[i];
    if (i != 0) out += ',';
    out += '{';
    bool first = true;
    auto key = [&](const char* name) {
      if (!first) out += ',';
      first = false;
      out += '"';
      out += name;
      out += "\":";
    };
    auto str = [&](const char* name, const std::string& v) {
      if (v.empty()) return;
      key(name);
      AppendJsonString(v, &out);
    };
    auto num = [&](const char* name, int32_t v) {
      if (v == 0) return;
      key(name);
      out += std::to_string(v);
    };
    str("id", d.id);
    num("index", d.index);
    num("count", d.count);
    num("devmem", d.devmem_mib);
    num("devcore", d.devcore);
    str("type", d.type);
    num("numa", d.numa);
    str("mode", d.mode);
    if (d.health) {
      key("health");
      out += "true";
    }
    out += '}';
  }
  out += ']';
  return out;
}

Result<std::vector<NodeDevice>> DecodeNodeInventory(std::string_view value) {
  size_t first = value.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) {
    return Bad(kNodeRegisterAnnotation, "is empty (a node without devices is '[]')");
  }
  if (value[first] == '[' || value[first] == '{') return DecodeInventoryJson(value);
  return DecodeInventoryLegacy(value);
}

// ---- handshake ----

std::string_view HandshakeStateName(HandshakeState state) {
  switch (state) {
    case HandshakeState::kRequesting:
      return "Requesting";
    case HandshakeState::kReported:
      return "Reported";
    case HandshakeState::kDeleted:
      return "Deleted";
  }
  return "Requesting";
}

std::string EncodeHandshake(HandshakeState state, WallTime time) {
  const auto s = std::chrono::floor<seconds>(time);
  const auto day = std::chrono::floor<std::chrono::days>(s);
  const std::chrono::year_month_day ymd{day};
  const std::chrono::hh_mm_ss hms{s - day};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "_%04d-%02u-%02u %02d:%02d:%02d", static_cast<int>(ymd.year()),
                static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
                static_cast<int>(hms.hours().count()), static_cast<int>(hms.minutes().count()),
                static_cast<int>(hms.seconds().count()));
  std::string out(HandshakeStateName(state));
  out += buf;
  return out;
}

Result<Handshake> DecodeHandshake(std::string_view value) {
  Scanner sc{value};
  Handshake h;
  if (sc.Eat("Requesting")) {
    h.state = HandshakeState::kRequesting;
  } else if (sc.Eat("Reported")) {
    h.state = HandshakeState::kReported;
  } else if (sc.Eat("Deleted")) {
    h.state = HandshakeState::kDeleted;
  } else {
    return BadHandshake(value, "expected Requesting_, Reported_ or Deleted_ and a time");
  }
  if (!sc.Eat('_') && !sc.Eat(' ')) {
    return BadHandshake(value, "expected '_' or ' ' after the state");
  }
  std::optional<int> year = sc.Fixed(4);
  char sep = sc.pos < value.size() ? value[sc.pos] : '\0';
  if (!year || (sep != '-' && sep != '.') || !sc.Eat(sep)) {
    return BadHandshake(value, "expected a date YYYY-MM-DD after the state");
  }
  std::optional<int> month = sc.Fixed(2);
  if (!month || !sc.Eat(sep)) return BadHandshake(value, "expected a date YYYY-MM-DD");
  std::optional<int> mday = sc.Fixed(2);
  if (!mday || !sc.Eat(' ')) return BadHandshake(value, "expected 'YYYY-MM-DD HH:MM:SS'");
  std::optional<int> hour = sc.Fixed(2);
  std::optional<int> minute = hour && sc.Eat(':') ? sc.Fixed(2) : std::nullopt;
  std::optional<int> second = minute && sc.Eat(':') ? sc.Fixed(2) : std::nullopt;
  if (!second) return BadHandshake(value, "expected a time HH:MM:SS after the date");
  const std::chrono::year_month_day ymd{std::chrono::year(*year),
                                        std::chrono::month(static_cast<unsigned>(*month)),
                                        std::chrono::day(static_cast<unsigned>(*mday))};
  if (!ymd.ok()) return BadHandshake(value, "the date does not exist");
  if (*hour > 23 || *minute > 59 || *second > 59) {
    return BadHandshake(value, "the time of day is out of range");
  }
  int64_t nanos = 0;
  if (sc.Eat('.')) {
    std::string_view frac = sc.Span(IsDigitChar);
    if (frac.empty()) return BadHandshake(value, "expected digits after '.' in the seconds");
    for (size_t i = 0; i < 9; ++i) nanos = nanos * 10 + (i < frac.size() ? frac[i] - '0' : 0);
  }
  int64_t offset_seconds = 0;
  if (sc.Eat(' ')) {  // Go's time.String(): " -0700 MST" and maybe " m=+0.5"
    char sign = sc.pos < value.size() ? value[sc.pos] : '\0';
    std::optional<int> oh, om;
    if ((sign == '+' || sign == '-') && sc.Eat(sign)) {
      oh = sc.Fixed(2);
      om = oh ? sc.Fixed(2) : std::nullopt;
    }
    if (!om || *oh > 23 || *om > 59) {
      return BadHandshake(value, "expected a zone offset like +0800 after the time");
    }
    offset_seconds = (sign == '-' ? -1 : 1) * (*oh * 3600 + *om * 60);
    if (sc.Eat(' ')) {
      std::string_view zone = sc.Span([](char c) {
        return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || IsDigitChar(c) || c == '+' ||
               c == '-';
      });
      if (zone.empty()) return BadHandshake(value, "expected a zone name after the offset");
      if (sc.Eat(' ')) {
        bool ok = sc.Eat("m=") && (sc.Eat('+') || sc.Eat('-')) && !sc.Span(IsDigitChar).empty();
        if (ok && sc.Eat('.')) ok = !sc.Span(IsDigitChar).empty();
        if (!ok) return BadHandshake(value, "expected a monotonic reading m=+S.F after the zone");
      }
    }
  }
  if (!sc.Done()) return BadHandshake(value, "unexpected text after the time");
  int64_t unix_seconds = std::chrono::sys_days(ymd).time_since_epoch().count() * 86400 +
                         *hour * 3600 + *minute * 60 + *second - offset_seconds;
  std::optional<WallTime> t = ToWallTime(unix_seconds, nanos);
  if (!t) return BadHandshake(value, "the year is out of range");
  h.time = *t;
  return h;
}

// ---- pod devices ----

Result<std::string> EncodePodDevices(const PodDevices& pod, std::string_view annotation) {
  std::string out;
  for (size_t c = 0; c < pod.size(); ++c) {
    for (size_t i = 0; i < pod[c].size(); ++i) {
      const ContainerDevice& d = pod[c][i];
      auto where = [&] {
        return "container " + std::to_string(c) + " device " + std::to_string(i) + " ";
      };
      if (std::string_view p = DeviceTextProblem(d.uuid); !p.empty()) {
        return Bad(annotation, where() + "uuid " + Quote(d.uuid) + " " + std::string(p));
      }
      if (std::string_view p = DeviceTextProblem(d.type); !p.empty()) {
        return Bad(annotation, where() + "type " + Quote(d.type) + " " + std::string(p));
      }
      if (d.mem_mib < 0 || d.cores < 0) {
        return Bad(annotation, where() + "has a negative memory or core count");
      }
      out += d.uuid;
      out += ',';
      out += d.type;
      out += ',';
      out += std::to_string(d.mem_mib);
      out += ',';
      out += std::to_string(d.cores);
      out += ':';
    }
    out += ';';
  }
  return out;
}

Result<PodDevices> DecodePodDevices(std::string_view value, std::string_view annotation) {
  PodDevices pod;
  if (value.empty()) return pod;
  if (value.back() == ';') value.remove_suffix(1);
  size_t container = 0;
  for (std::string_view text : SplitString(value, ';', false)) {
    pod.push_back(HAMI_TRY(DecodeContainer(text, annotation, container++)));
  }
  return pod;
}

// ---- node lock ----

Result<std::string> EncodeNodeLock(const NodeLock& lock) {
  std::string out = FormatTime(lock.time);
  if (lock.ns.empty() && lock.pod.empty()) return out;
  if (std::string_view p = NameProblem(lock.ns); !p.empty()) {
    return Bad(kNodeLockAnnotation, "namespace " + Quote(lock.ns) + " " + std::string(p));
  }
  if (std::string_view p = NameProblem(lock.pod); !p.empty()) {
    return Bad(kNodeLockAnnotation, "pod " + Quote(lock.pod) + " " + std::string(p));
  }
  out += ',';
  out += lock.ns;
  out += ',';
  out += lock.pod;
  return out;
}

Result<NodeLock> DecodeNodeLock(std::string_view value) {
  std::vector<std::string_view> f = SplitString(value, ',', false);
  if (f.size() != 1 && f.size() != 3) {
    return Bad(kNodeLockAnnotation, Quote(value) +
                                        ": expected '<RFC 3339 time>,<namespace>,<pod>' or a "
                                        "bare time, got " +
                                        std::to_string(f.size()) + " comma-separated fields");
  }
  Result<WallTime> t = ParseTime(f[0]);
  if (!t.ok()) return Bad(kNodeLockAnnotation, t.error().message());
  NodeLock lock;
  lock.time = *t;
  if (f.size() == 1) return lock;
  if (std::string_view p = NameProblem(f[1]); !p.empty()) {
    return Bad(kNodeLockAnnotation, Quote(value) + ": namespace " + std::string(p));
  }
  if (std::string_view p = NameProblem(f[2]); !p.empty()) {
    return Bad(kNodeLockAnnotation, Quote(value) + ": pod " + std::string(p));
  }
  lock.ns = f[1];
  lock.pod = f[2];
  return lock;
}

// ---- bind phase and times ----

std::string_view EncodeBindPhase(BindPhase phase) {
  switch (phase) {
    case BindPhase::kAllocating:
      return "allocating";
    case BindPhase::kSuccess:
      return "success";
    case BindPhase::kFailed:
      return "failed";
  }
  return "failed";
}

Result<BindPhase> DecodeBindPhase(std::string_view value) {
  for (BindPhase p : {BindPhase::kAllocating, BindPhase::kSuccess, BindPhase::kFailed}) {
    if (value == EncodeBindPhase(p)) return p;
  }
  return Bad(kBindPhaseAnnotation,
             "unknown phase " + Quote(value) + " (expected allocating, success or failed)");
}

std::string EncodeUnixSeconds(WallTime time) {
  int64_t s = std::chrono::floor<seconds>(time).time_since_epoch().count();
  return std::to_string(s < 0 ? 0 : s);
}

Result<WallTime> DecodeUnixSeconds(std::string_view value, std::string_view annotation) {
  if (value.empty()) return Bad(annotation, "is empty (expected Unix seconds)");
  int64_t v = 0;
  for (char c : value) {
    if (c < '0' || c > '9') {
      return Bad(annotation, Quote(value) + ": expected Unix seconds (decimal digits only)");
    }
    if (v > std::numeric_limits<int64_t>::max() / 10 - 1) {
      return Bad(annotation, Quote(value) + ": out of range");
    }
    v = v * 10 + (c - '0');
  }
  std::optional<WallTime> t = ToWallTime(v, 0);
  if (!t) return Bad(annotation, Quote(value) + ": out of range");
  return *t;
}

}  // namespace hami::kube
