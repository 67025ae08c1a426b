#include "common/visible_devices.h"

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "common/strings.h"

namespace hami {

VisibleDevices ParseVisibleDevices(std::optional<std::string_view> value,
                                   const std::vector<std::string>& uuids) {
  VisibleDevices out;
  if (!value) {
    for (size_t i = 0; i < uuids.size(); ++i) out.physical.push_back(int(i));
    return out;
  }
  // A trailing comma ends the list; an empty entry before it is an unknown device.
  std::vector<std::string_view> entries = SplitString(*value, ',', false);
  if (entries.back().empty()) entries.pop_back();
  for (std::string_view tok : entries) {
    while (!tok.empty() && (tok.front() == ' ' || tok.front() == '\t')) tok.remove_prefix(1);
    while (!tok.empty() && (tok.back() == ' ' || tok.back() == '\t')) tok.remove_suffix(1);
    int found = -1;
    if (tok.size() > 4 && tok.substr(0, 4) == "GPU-") {
      for (size_t i = 0; i < uuids.size(); ++i) {
        if (uuids[i].compare(0, tok.size(), tok) == 0) {
          found = found == -1 ? int(i) : -2;  // -2: the prefix is ambiguous
        }
      }
    } else if (!tok.empty() && tok.find_first_not_of("0123456789") == std::string_view::npos) {
      // Any number of digits ("0001" is index 1); a value past the last device stops the
      // scan before it can overflow.
      size_t idx = 0;
      for (char c : tok) {
        idx = idx * 10 + size_t(c - '0');
        if (idx >= uuids.size()) break;
      }
      if (idx < uuids.size()) found = int(idx);
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
  const std::span<const uint8_t> b(static_cast<const uint8_t*>(bytes16), 16);
  return "GPU-" + HexEncode(b.subspan(0, 4)) + "-" + HexEncode(b.subspan(4, 2)) + "-" +
         HexEncode(b.subspan(6, 2)) + "-" + HexEncode(b.subspan(8, 2)) + "-" +
         HexEncode(b.subspan(10, 6));
}

}  // namespace hami
