// The subcommands of `hami`. Each Add* function registers one subcommand on the app;
// main() runs the parsed one.
#pragma once

#include <CLI/CLI.hpp>

namespace hami::cli {

void AddSimCommand(CLI::App& app);
void AddRunCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddInspectCommand(CLI::App& app);
void AddTopCommand(CLI::App& app);
void AddRegionCommand(CLI::App& app);
void AddEnvCommand(CLI::App& app);
void AddBrokerCommand(CLI::App& app);

}  // namespace hami::cli
