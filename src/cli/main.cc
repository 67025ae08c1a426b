// hami: the command line of hami-cpp.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/option_words.h"
#include "cli/paths.h"
#include "cli/version.h"
#include "common/exit_status.h"

namespace {

// `hami sim ARGS` is `hami-sim ARGS`: the simulator's command is its own program, so that
// hami links nothing of the simulator. argv[0] "hami sim" keeps its help saying so.
[[noreturn]] void ExecSimTool(const std::vector<std::string>& args) {
  const std::string tool = hami::cli::SimToolPath();
  std::vector<std::string> words = {"hami sim"};
  words.insert(words.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& w : words) argv.push_back(w.data());
  argv.push_back(nullptr);
  execv(tool.c_str(), argv.data());
  int err = errno;
  std::fprintf(stderr, "hami sim: cannot run %s: %s (it is built and installed beside hami)\n",
               tool.c_str(), std::strerror(err));
  std::exit(err == ENOENT ? 127 : 126);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && std::string(argv[1]) == "sim") {
    ExecSimTool(std::vector<std::string>(argv + 2, argv + argc));
  }
  CLI::App app{
      "hami: share NVIDIA GPUs between processes and containers, each held to its own "
      "memory and compute budget"};
  app.set_version_flag("--version", std::string("hami ") + hami::cli::kVersion + " (CUDA headers " +
                                        hami::cli::kCudaHeaders + ")");
  app.require_subcommand(1);
  // Listed here for --help; `hami sim ...` never reaches the parser (above).
  CLI::App* sim = app.add_subcommand(
      "sim",
      "The simulated GPU: list its profiles (default), options and live state; the simulated "
      "API server and kube-scheduler (runs hami-sim)");
  sim->prefix_command();
  sim->allow_extras();
  sim->set_help_flag();
  sim->callback([sim] { ExecSimTool(sim->remaining()); });
  hami::cli::AddRunCommand(app);
  hami::cli::AddBenchCommand(app);
  hami::cli::AddInspectCommand(app);
  hami::cli::AddTopCommand(app);
  hami::cli::AddRegionCommand(app);
  hami::cli::AddEnvCommand(app);
  hami::cli::AddBrokerCommand(app);
  // `hami run` hands what follows its options to the program it runs, `hami bench` to the
  // benchmarks it runs: a word before that point that looks like an option of the command's
  // own and is not one is refused here, before CLI11 would have passed it on (and run the
  // program without the limit the user meant to set).
  for (const char* command : {"run", "bench"}) {
    if (argc < 2 || std::string(argv[1]) != command) continue;
    std::vector<std::string> words(argv + 2, argv + argc);
    std::string error = hami::cli::CheckOptionWords(*app.get_subcommand(command), words);
    if (!error.empty()) {
      std::fprintf(stderr, "hami %s: %s\n", command, error.c_str());
      return hami::kExitUsage;
    }
  }
  CLI11_PARSE(app, argc, argv);
  return 0;
}
