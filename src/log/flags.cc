#include "log/flags.h"

namespace hami::log {

void AddFlags(CLI::App& app, Flags& flags) {
  app.add_option("--v", flags.verbosity,
                 "log verbosity, as klog's -v: 0 starts, stops and changes; 2 steady-state "
                 "detail; 4 debug (each bind, each allocation); 5 trace")
      ->capture_default_str();
  app.add_option("--log-level", flags.level,
                 "lowest severity logged: error, warn, info, debug (= info with --v=4), trace "
                 "(--v=5)")
      ->capture_default_str();
}

Status ApplyFlags(const Flags& flags, std::string_view component) {
  if (flags.verbosity < 0 || flags.verbosity > kMaxVerbosity) {
    return Error(ErrorCode::kInvalidArgument, "--v=" + std::to_string(flags.verbosity) +
                                                  ": must be from 0 to " +
                                                  std::to_string(kMaxVerbosity));
  }
  Level level = HAMI_TRY(ParseLevel(flags.level));
  Settings settings;
  settings.component = std::string(component);
  settings.level = level;
  settings.verbosity = flags.verbosity;
  Configure(settings);
  return OkStatus();
}

}  // namespace hami::log
