// Drives tests/programs/vgpu_probe, a CUDA and NVML program, as a child process of the test:
// each child starts with its own environment (CUDA_VISIBLE_DEVICES, limits), which a test
// process cannot change once its own first CUDA call has read it. The child inherits
// LD_PRELOAD=libvgpu.so and the simulated driver's library path from the test binary.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "support/subprocess.h"

namespace hami::testing {

// One answer line of the probe: "COMMAND key=value ...". Empty when none came.
struct Answer {
  std::string command;
  std::map<std::string, std::string> fields;
  std::string line;

  bool ok() const { return !command.empty(); }
  std::string Get(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? "" : it->second;
  }
  uint64_t U64(const std::string& key) const {
    return std::strtoull(Get(key).c_str(), nullptr, 10);
  }
  int Int(const std::string& key) const { return std::atoi(Get(key).c_str()); }
};

inline Answer ParseAnswer(const std::string& line) {
  Answer a;
  a.line = line;
  std::istringstream in(line);
  in >> a.command;
  for (std::string w; in >> w;) {
    size_t eq = w.find('=');
    if (eq != std::string::npos) a.fields[w.substr(0, eq)] = w.substr(eq + 1);
  }
  return a;
}

// One entry of a probe's process list ("R:PID/USED,PID/USED").
struct ProcessEntry {
  pid_t pid;
  uint64_t used_bytes;
  bool operator==(const ProcessEntry&) const = default;
  bool operator<(const ProcessEntry& o) const { return pid < o.pid; }
};

struct ProcessList {
  int result = -1;
  std::vector<ProcessEntry> entries;
};

inline ProcessList ParseProcessList(const std::string& text) {
  ProcessList out;
  size_t colon = text.find(':');
  if (colon == std::string::npos) return out;
  out.result = std::atoi(text.substr(0, colon).c_str());
  std::string rest = text.substr(colon + 1);
  if (rest == "-") return out;
  std::istringstream in(rest);
  for (std::string item; std::getline(in, item, ',');) {
    size_t slash = item.find('/');
    out.entries.push_back({pid_t(std::atoi(item.substr(0, slash).c_str())),
                           std::strtoull(item.substr(slash + 1).c_str(), nullptr, 10)});
  }
  return out;
}

// A simulated machine and a container region of its own, in a temporary directory.
struct Machine {
  explicit Machine(std::string profile_spec) : profile(std::move(profile_spec)) {}

  // The environment of a process of the container: this machine, this region, and nothing
  // else of what the test process was given (no CUDA_VISIBLE_DEVICES, no limits) unless
  // `extra` sets it.
  std::map<std::string, std::string> Env(
      const std::map<std::string, std::string>& extra = {}) const {
    std::map<std::string, std::string> env = {
        {"HAMI_SIM_STATE", dir.File("sim.state")},
        {"HAMI_SIM_PROFILE", profile},
        {"CUDA_DEVICE_MEMORY_SHARED_CACHE", Region()},
        {"CUDA_VISIBLE_DEVICES", ""},
        {"CUDA_DEVICE_MEMORY_LIMIT", ""},
    };
    for (int i = 0; i < 16; ++i) env["CUDA_DEVICE_MEMORY_LIMIT_" + std::to_string(i)] = "";
    for (const auto& [k, v] : extra) env[k] = v;
    return env;
  }
  std::string Region() const { return dir.File("usage.cache"); }

  TempDir dir{"hami-vgpu-views"};
  std::string profile;
};

// A running vgpu_probe that takes one command at a time.
class Probe {
 public:
  // `prefix` runs before the program (a wrapper such as `unshare --pid --fork`).
  explicit Probe(const std::map<std::string, std::string>& env,
                 const std::vector<std::string>& prefix = {}) {
    std::string fifo = dir_.File("commands");
    if (mkfifo(fifo.c_str(), 0600) == 0) {
      // Read-write: opening does not wait for the child, and the child never sees end of
      // file until the test is done with it.
      fifo_.Reset(open(fifo.c_str(), O_RDWR | O_CLOEXEC));
    }
    std::vector<std::string> argv = prefix;
    for (const std::string& a : {TestProgram("vgpu_probe"), std::string("serve"), fifo}) {
      argv.push_back(a);
    }
    proc_ = std::make_unique<Subprocess>(argv, env);
  }

  // Runs `command` ("context 0", "meminfo") and returns its answer line.
  Answer Do(const std::string& command, int timeout_ms = 20000) {
    std::string line = command + "\n";
    if (!fifo_.valid() || write(fifo_.get(), line.data(), line.size()) != ssize_t(line.size())) {
      return {};
    }
    auto answer = proc_->ReadLine(timeout_ms);
    return answer ? ParseAnswer(*answer) : Answer{};
  }

  pid_t pid() const { return proc_->pid(); }
  // Ends the probe the ordinary way (its exit handlers run); its exit status.
  int Exit() {
    fifo_.Reset();
    return proc_->Wait();
  }
  void Kill() {
    proc_->Kill(SIGKILL);
    proc_->Wait();
  }

 private:
  TempDir dir_{"hami-vgpu-probe"};
  UniqueFd fifo_;
  std::unique_ptr<Subprocess> proc_;
};

}  // namespace hami::testing
