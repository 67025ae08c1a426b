// hami: the command line of hami-cpp.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "cli/commands.h"
#include "cli/version.h"

int main(int argc, char** argv) {
  CLI::App app{
      "hami: share NVIDIA GPUs between processes and containers, each held to its own "
      "memory and compute budget"};
  app.set_version_flag("--version", std::string("hami ") + hami::cli::kVersion + " (CUDA headers " +
                                        hami::cli::kCudaHeaders + ")");
  app.require_subcommand(1);
  hami::cli::AddSimCommand(app);
  hami::cli::AddRunCommand(app);
  hami::cli::AddBenchCommand(app);
  hami::cli::AddInspectCommand(app);
  hami::cli::AddTopCommand(app);
  hami::cli::AddRegionCommand(app);
  hami::cli::AddEnvCommand(app);
  hami::cli::AddBrokerCommand(app);
  CLI11_PARSE(app, argc, argv);
  return 0;
}
