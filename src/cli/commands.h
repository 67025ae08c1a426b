// The subcommands of `hami`. Each Add* function registers one subcommand on the app;
// main() runs the parsed one.
#pragma once

#include <CLI/CLI.hpp>
#include <string>
#include <vector>

namespace hami::cli {

void AddRunCommand(CLI::App& app);
void AddBenchCommand(CLI::App& app);
void AddInspectCommand(CLI::App& app);
void AddTopCommand(CLI::App& app);
void AddRegionCommand(CLI::App& app);
void AddEnvCommand(CLI::App& app);
void AddBrokerCommand(CLI::App& app);

// The hami-sim program: makes `app` the `sim` command (profiles by default, and its
// subcommands). `hami sim ARGS` runs `hami-sim ARGS` (SimToolPath in cli/paths.h).
void ConfigureSimCommand(CLI::App& app);
// hami-sim's --v and --log-level as words, which `hami sim cluster up` passes on to every
// component it starts; hami-sim's main sets them once parsed.
void SetSimLogArgs(std::vector<std::string> args);

// hami-sim's subcommands that ConfigureSimCommand adds from other files: `sim kube-scheduler`
// (sim_kube_scheduler_cmd.cc), and `sim node` and `sim cluster` (sim_cluster_cmd.cc).
void AddSimKubeSchedulerCommand(CLI::App& sim);
void AddSimClusterCommands(CLI::App& sim);

}  // namespace hami::cli
