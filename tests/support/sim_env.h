// Test setup for code that runs on the simulated GPU in-process: a private state file in a
// fresh temporary directory, so tests never share a machine with other test processes.
// Call SimEnv::Setup() before the first cuInit/nvmlInit of the process (the fixtures do).
#pragma once

#include <cstdlib>
#include <string>

namespace hami::testing {

class SimEnv {
 public:
  // Sets HAMI_SIM_STATE to a new file in a new temp dir (once per process) and applies
  // `profile` unless HAMI_SIM_PROFILE is already set. Returns the state path.
  static const std::string& Setup(const char* profile = "h100-80g:2") {
    static const std::string path = [profile] {
      char dir[] = "/tmp/hami-test-XXXXXX";
      if (mkdtemp(dir) == nullptr) std::abort();
      std::string p = std::string(dir) + "/sim.state";
      setenv("HAMI_SIM_STATE", p.c_str(), 1);
      setenv("HAMI_SIM_PROFILE", profile, 0);
      return p;
    }();
    return path;
  }

  // A fresh state path (in a new temp dir) for child processes.
  static std::string NewStatePath() {
    char dir[] = "/tmp/hami-test-XXXXXX";
    if (mkdtemp(dir) == nullptr) std::abort();
    return std::string(dir) + "/sim.state";
  }
};

}  // namespace hami::testing
