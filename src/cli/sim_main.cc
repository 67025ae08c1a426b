// hami-sim: the simulated GPU's command (`hami sim` runs it): profiles, options, live state,
// and the simulated Kubernetes API server and kube-scheduler (cli/sim_cmd.cc).
#include <CLI/CLI.hpp>
#include <string>
#include <string_view>

#include "cli/commands.h"

int main(int argc, char** argv) {
  // Started by `hami sim`, argv[0] is "hami sim", and the help says so.
  const bool from_hami = argc > 0 && std::string_view(argv[0]) == "hami sim";
  CLI::App app{"The simulated GPU: list its profiles (default), options and live state",
               from_hami ? "hami sim" : "hami-sim"};
  hami::cli::ConfigureSimCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
