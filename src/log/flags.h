// `--v` and `--log-level` on a daemon's command line (log.h says what they mean), the same
// two flags on every daemon and on each `hami sim` component.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

#include "common/result.h"
#include "log/log.h"

namespace hami::log {

struct Flags {
  int verbosity = 0;
  std::string level = "info";
};

// Adds the two flags to `app`; their values land in `flags` when it parses.
void AddFlags(CLI::App& app, Flags& flags);

// Checks what was given and configures the process's logger for `component`. An error
// names the flag and the value.
Status ApplyFlags(const Flags& flags, std::string_view component);

}  // namespace hami::log
