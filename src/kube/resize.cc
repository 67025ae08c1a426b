#include "kube/resize.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/parse.h"

namespace hami::kube {

namespace {

Error Bad(std::string_view annotation, std::string_view value, const std::string& why) {
  return Error(ErrorCode::kInvalidArgument,
               std::string(annotation) + ": '" + std::string(value.substr(0, 120)) + "': " + why);
}

// A plain decimal integer in [0, 2^31-1]; nullopt otherwise.
std::optional<int32_t> Count(std::string_view s) {
  if (s.empty() || s.size() > 10) return std::nullopt;
  int64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  if (v > INT32_MAX) return std::nullopt;
  return int32_t(v);
}

}  // namespace

Result<ResizeRequest> DecodeResizeRequest(std::string_view value) {
  auto bad = [&](const std::string& why) { return Bad(kResizeAnnotation, value, why); };
  for (char c : value) {
    if (c == ' ' || c == '\t' || static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
      return bad("holds a space or a control character; expected CONTAINER:gpumem=MiB,gpucores=N");
    }
  }
  const size_t colon = value.find(':');
  if (colon == std::string_view::npos) {
    return bad("no ':' after the container's name; expected CONTAINER:gpumem=MiB,gpucores=N");
  }
  ResizeRequest r;
  r.container = std::string(value.substr(0, colon));
  if (r.container.empty()) return bad("the container's name is empty");
  std::string_view rest = value.substr(colon + 1);
  if (rest.empty()) return bad("names neither gpumem nor gpucores");
  while (!rest.empty()) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (comma != std::string_view::npos && rest.empty()) return bad("ends with ','");
    const size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      return bad("'" + std::string(item) + "': expected gpumem=MiB or gpucores=N");
    }
    const std::string_view key = item.substr(0, eq), v = item.substr(eq + 1);
    std::optional<int32_t>* slot = key == "gpumem"     ? &r.mem_mib
                                   : key == "gpucores" ? &r.cores
                                                       : nullptr;
    if (slot == nullptr) {
      return bad("'" + std::string(key) + "' is not gpumem or gpucores");
    }
    if (slot->has_value()) return bad(std::string(key) + " is given twice");
    std::optional<int32_t> n = Count(v);
    if (!n) {
      return bad(std::string(key) + "='" + std::string(v) + "' is not a whole number" +
                 (key == "gpumem" ? " of MiB (no unit: write 4096 for 4 GiB)" : " of percent"));
    }
    if (key == "gpumem" && *n == 0) return bad("gpumem=0 would be no limit; give MiB >= 1");
    if (key == "gpucores" && *n > 100) {
      return bad("gpucores=" + std::string(v) + " is out of range 0..100");
    }
    *slot = n;
  }
  return r;
}

std::string EncodeResizeRequest(const ResizeRequest& request) {
  std::string out = request.container + ":";
  if (request.mem_mib) out += "gpumem=" + std::to_string(*request.mem_mib);
  if (request.cores) {
    out += std::string(request.mem_mib ? "," : "") + "gpucores=" + std::to_string(*request.cores);
  }
  return out;
}

std::string_view ResizePhaseName(ResizePhase phase) {
  switch (phase) {
    case ResizePhase::kAccepted:
      return "accepted";
    case ResizePhase::kApplied:
      return "applied";
    case ResizePhase::kRefused:
      return "refused";
  }
  return "?";
}

std::string EncodeResizeStatus(const ResizeStatus& status) {
  nlohmann::json j = {{"request", status.request},
                      {"phase", std::string(ResizePhaseName(status.phase))},
                      {"reason", status.reason}};
  if (!status.previous.empty()) j["previous"] = status.previous;
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

Result<ResizeStatus> DecodeResizeStatus(std::string_view value) {
  auto bad = [&](const std::string& why) { return Bad(kResizeStatusAnnotation, value, why); };
  nlohmann::json j = nlohmann::json::parse(value, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  ResizeStatus s;
  for (const char* key : {"request", "phase", "reason", "previous"}) {
    auto it = j.find(key);
    if (it == j.end()) {
      if (std::string_view(key) == "previous") continue;
      return bad(std::string(key) + ": missing");
    }
    if (!it->is_string()) return bad(std::string(key) + ": expected a string");
  }
  s.request = j["request"].get<std::string>();
  s.reason = j["reason"].get<std::string>();
  if (j.contains("previous")) s.previous = j["previous"].get<std::string>();
  const std::string phase = j["phase"].get<std::string>();
  if (phase == "accepted") {
    s.phase = ResizePhase::kAccepted;
  } else if (phase == "applied") {
    s.phase = ResizePhase::kApplied;
  } else if (phase == "refused") {
    s.phase = ResizePhase::kRefused;
  } else {
    return bad("phase: '" + phase + "' is not accepted, applied or refused");
  }
  return s;
}

PodDevices LargerOfEach(const PodDevices& now, const PodDevices& previous) {
  if (now.size() != previous.size()) return now;
  PodDevices out = now;
  for (size_t c = 0; c < now.size(); ++c) {
    if (now[c].size() != previous[c].size()) return now;
    for (size_t d = 0; d < now[c].size(); ++d) {
      if (now[c][d].uuid != previous[c][d].uuid) return now;
      out[c][d].mem_mib = std::max(now[c][d].mem_mib, previous[c][d].mem_mib);
      out[c][d].cores = std::max(now[c][d].cores, previous[c][d].cores);
    }
  }
  return out;
}

}  // namespace hami::kube
