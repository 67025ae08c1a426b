// hami run: runs a command against the GPU — the real one when a driver is present, the
// simulated one otherwise or when asked (--sim).
#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/paths.h"
#include "sim/profiles.h"

namespace hami::cli {

namespace {

// True when the loader finds a libcuda.so.1 that is not the simulated one and it reports
// at least one device.
bool RealDriverPresent(const std::string& sim_dir) {
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) return false;
  bool real = true;
  link_map* map = nullptr;
  if (dlinfo(h, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr) {
    char resolved[4096];
    std::string path = realpath(map->l_name, resolved) != nullptr ? resolved : map->l_name;
    if (!sim_dir.empty() && path.rfind(sim_dir + "/", 0) == 0) real = false;
  }
  if (real) {
    using InitFn = int (*)(unsigned);
    using CountFn = int (*)(int*);
    auto init = reinterpret_cast<InitFn>(dlsym(h, "cuInit"));
    auto count = reinterpret_cast<CountFn>(dlsym(h, "cuDeviceGetCount"));
    int n = 0;
    real = init != nullptr && count != nullptr && init(0) == 0 && count(&n) == 0 && n > 0;
  }
  dlclose(h);
  return real;
}

struct RunOptions {
  std::string sim_profile;
  std::string sim_state;
  bool quiet = false;
};

[[noreturn]] void Run(const RunOptions& o, std::vector<std::string> cmd) {
  if (cmd.empty()) {
    std::fprintf(stderr, "hami run: no command given (usage: hami run [--sim PROFILE] -- CMD)\n");
    std::exit(2);
  }
  std::string sim_dir = SimLibraryDir();
  bool use_sim = !o.sim_profile.empty() || !RealDriverPresent(sim_dir);
  if (use_sim) {
    if (sim_dir.empty()) {
      std::fprintf(stderr,
                   "hami run: no NVIDIA driver found and no simulated GPU next to this hami "
                   "(looked for lib/sim/libcuda.so.1; set HAMI_SIM_LIBDIR)\n");
      std::exit(1);
    }
    if (!o.sim_profile.empty()) {
      auto devices = sim::ParseProfileSpec(o.sim_profile, "", "--sim");
      if (!devices.ok()) {
        std::fprintf(stderr, "hami run: %s\n", devices.error().message().c_str());
        std::exit(2);
      }
      setenv("HAMI_SIM_PROFILE", o.sim_profile.c_str(), 1);
    }
    if (!o.sim_state.empty()) setenv("HAMI_SIM_STATE", o.sim_state.c_str(), 1);
    const char* old = std::getenv("LD_LIBRARY_PATH");
    std::string path = sim_dir + (old != nullptr && *old != '\0' ? ":" + std::string(old) : "");
    setenv("LD_LIBRARY_PATH", path.c_str(), 1);
    if (!o.quiet) {
      const char* profile = std::getenv("HAMI_SIM_PROFILE");
      const char* state = std::getenv("HAMI_SIM_STATE");
      std::fprintf(stderr, "hami: running on the simulated GPU (%s, state %s)\n",
                   profile != nullptr ? profile : std::string(sim::kDefaultProfileSpec).c_str(),
                   state != nullptr ? state : "/tmp/hami-sim.state");
    }
  }
  std::vector<char*> argv;
  for (std::string& a : cmd) argv.push_back(a.data());
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  std::fprintf(stderr, "hami run: cannot run '%s': %s\n", argv[0], std::strerror(errno));
  std::exit(127);
}

}  // namespace

void AddRunCommand(CLI::App& app) {
  static RunOptions options;
  CLI::App* run = app.add_subcommand(
      "run", "Run a command on the GPU: the real one when present, else the simulated one");
  run->add_option("--sim", options.sim_profile,
                  "use the simulated GPU with these devices (e.g. h100-80g:2), even when a real "
                  "driver is present");
  run->add_option("--sim-state", options.sim_state, "the simulated machine's state file");
  run->add_flag("-q,--quiet", options.quiet, "do not say which GPU the command runs on");
  static std::vector<std::string> command;
  run->add_option("command", command, "the command and its arguments (put them after --)")
      ->required();
  run->prefix_command();
  run->callback([run] {
    std::vector<std::string> cmd = command;
    for (const std::string& extra : run->remaining()) cmd.push_back(extra);
    Run(options, cmd);
  });
}

}  // namespace hami::cli
