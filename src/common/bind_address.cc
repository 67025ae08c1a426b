#include "common/bind_address.h"

#include <charconv>

#include "common/quote.h"

namespace hami {

Result<std::pair<std::string, int>> ParseBindAddress(std::string_view text, std::string_view flag) {
  auto fail = [&](std::string_view why) {
    return Error(ErrorCode::kInvalidArgument,
                 std::string(flag) + ": " + QuoteInput(text) + ": " + std::string(why));
  };
  std::string host;
  std::string_view port_text;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    if (close == std::string_view::npos || close + 1 >= text.size() || text[close + 1] != ':') {
      return fail("expected [address]:port");
    }
    host = std::string(text.substr(1, close - 1));
    port_text = text.substr(close + 2);
  } else {
    const size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return fail("expected host:port or :port");
    host = std::string(text.substr(0, colon));
    if (host.find(':') != std::string::npos) return fail("an IPv6 address needs brackets");
    port_text = text.substr(colon + 1);
  }
  if (host.empty()) host = "0.0.0.0";
  int port = -1;
  auto [ptr, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
  if (port_text.empty() || ec != std::errc() || ptr != port_text.data() + port_text.size() ||
      port < 0 || port > 65535) {
    return fail("the port is not a number in 0..65535");
  }
  return std::pair<std::string, int>(host, port);
}

}  // namespace hami
