// Test setup for code that runs on the simulated GPU in-process: a private state file in a
// fresh temporary directory, so tests never share a machine with other test processes.
// Call SimEnv::Setup() before the first cuInit/nvmlInit of the process (the fixtures do).
#pragma once

#include <ftw.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

namespace hami::testing {

class SimEnv {
 public:
  // Makes /tmp/hami-test-XXXXXX and removes it, with everything in it, when the process that
  // made it exits normally (a fork child that exits never removes its parent's).
  static std::string NewDir() {
    char dir[] = "/tmp/hami-test-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    Made& made = MadeDirs();
    std::lock_guard l(made.mu);
    made.dirs.emplace_back(dir);
    return dir;
  }

  // Sets HAMI_SIM_STATE to a new file in a new temp dir (once per process) and applies
  // `profile` unless HAMI_SIM_PROFILE is already set. Returns the state path.
  static const std::string& Setup(const char* profile = "h100-80g:2") {
    static const std::string path = [profile] {
      std::string p = NewDir() + "/sim.state";
      setenv("HAMI_SIM_STATE", p.c_str(), 1);
      setenv("HAMI_SIM_PROFILE", profile, 0);
      return p;
    }();
    return path;
  }

  // A fresh state path (in a new temp dir) for child processes.
  static std::string NewStatePath() { return NewDir() + "/sim.state"; }

 private:
  struct Made {
    std::mutex mu;
    std::vector<std::string> dirs;
    pid_t owner = getpid();
    ~Made() {
      if (getpid() != owner) return;
      for (const std::string& d : dirs) {
        nftw(
            d.c_str(),
            [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
            FTW_DEPTH | FTW_PHYS);
      }
    }
  };
  static Made& MadeDirs() {
    static Made made;
    return made;
  }
};

}  // namespace hami::testing
