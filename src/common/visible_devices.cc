#include "common/visible_devices.h"

#include <algorithm>
#include <cstdio>

namespace hami {

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   const std::vector<std::string>& uuids) {
  VisibleDevices out;
  if (!value) {
    for (size_t i = 0; i < uuids.size(); ++i) out.physical.push_back(int(i));
    return out;
  }
  std::string_view rest = *value;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view tok = rest.substr(0, comma);
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    while (!tok.empty() && (tok.front() == ' ' || tok.front() == '\t')) tok.remove_prefix(1);
    while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t')) tok.remove_suffix(1);
    int found = -1;
    if (tok.size() > 4 && tok.substr(0, 4) == "GPU-") {
      for (size_t i = 0; i < uuids.size(); ++i) {
        if (uuids[i].compare(0, tok.size(), tok) == 0) {
          found = found == -1 ? int(i) : -2;  // -2: the prefix is ambiguous
        }
      }
    } else if (!tok.empty() && tok.size() <= 3 &&
               tok.find_first_not_of("0123456789") == std::string_view::npos) {
      int idx = 0;
      for (char c : tok) idx = idx * 10 + (c - '0');
      if (idx < int(uuids.size())) found = idx;
    }
    if (found < 0 ||
        std::find(out.physical.begin(), out.physical.end(), found) != out.physical.end()) {
      out.stopped_at = std::string(tok);
      break;
    }
    out.physical.push_back(found);
  }
  return out;
}

std::string GpuUuidText(const void* bytes16) {
  const auto* b = static_cast<const unsigned char*>(bytes16);
  char buf[48];
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

}  // namespace hami
