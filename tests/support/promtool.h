// promtool's lint of a Prometheus text exposition, for the tests that check metrics with the
// real tool (Debian package prometheus).
#pragma once

#include <string>
#include <vector>

namespace hami::testing {

struct PromtoolReport {
  bool available = false;  // promtool is installed; nothing else is set without it
  // `promtool check metrics`'s exit status: 0 clean, 3 lint findings only (the text parsed),
  // anything else a text it could not parse or a failure to run it.
  int code = -1;
  std::vector<std::string> findings;  // its output, one entry per non-empty line
};

// Runs `promtool check metrics` on `exposition`.
PromtoolReport PromtoolCheckMetrics(const std::string& exposition);

}  // namespace hami::testing
