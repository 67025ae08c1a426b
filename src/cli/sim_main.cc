// hami-sim: the simulated GPU's command (`hami sim` runs it): profiles, options, live state,
// and the simulated Kubernetes API server and kube-scheduler (cli/sim_cmd.cc).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "cli/commands.h"
#include "common/exit_status.h"
#include "log/flags.h"

int main(int argc, char** argv) {
  // Started by `hami sim`, argv[0] is "hami sim", and the help says so.
  const bool from_hami = argc > 0 && std::string_view(argv[0]) == "hami sim";
  CLI::App app{"The simulated GPU: list its profiles (default), options and live state",
               from_hami ? "hami sim" : "hami-sim"};
  // --v and --log-level are hami-sim's own and may follow any subcommand (fallthrough, set
  // before the subcommands are added, which inherit it); the component that runs names itself
  // in its lines after its subcommands: hami-sim-apiserver, hami-sim-cluster-up, ...
  app.fallthrough();
  hami::log::Flags log_flags;
  hami::log::AddFlags(app, log_flags);
  hami::cli::ConfigureSimCommand(app);
  app.parse_complete_callback([&app, &log_flags] {
    std::string component = "hami-sim";
    for (const CLI::App* sub = &app; !sub->get_subcommands().empty();) {
      sub = sub->get_subcommands().front();
      component += "-" + sub->get_name();
    }
    if (auto logging = hami::log::ApplyFlags(log_flags, component); !logging.ok()) {
      std::fprintf(stderr, "hami sim: %s\n", logging.error().message().c_str());
      std::exit(hami::kExitUsage);
    }
    if (log_flags.verbosity != 0 || log_flags.level != "info") {
      hami::cli::SetSimLogArgs(
          {"--v=" + std::to_string(log_flags.verbosity), "--log-level=" + log_flags.level});
    }
  });
  CLI11_PARSE(app, argc, argv);
  return 0;
}
