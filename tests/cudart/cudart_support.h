// Running the nvcc-built CUDA runtime clients (cudart_client.cu, cudart_libs.cu) and reading
// what they print: one line per case, `<case> key=value ...`.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "support/subprocess.h"

namespace hami::testing {

// Why the programs cannot run here, or "" when they can.
inline std::string CudartSkipReason() {
#ifdef HAMI_CUDART_SANITIZER_SKIP
  return HAMI_CUDART_SANITIZER_SKIP;
#endif
  if (std::string(HAMI_NVCC).empty()) {
    return "nvcc was not found when the build was configured (looked in the CUDA toolkit's "
           "bin, /usr/local/cuda/bin and PATH): the CUDA runtime clients were not built";
  }
  return "";
}

inline std::string CudartProgram(const std::string& name) { return TestProgram(name); }

// Starts `argv` (a program of CudartProgram and its arguments), stdout and stderr together, on
// the simulated GPU `profile` with the state file `state` and 64 MiB contexts: alone (the
// simulator's libraries found by LD_LIBRARY_PATH), or with `memory` set under `hami run --sim
// profile --memory memory`. Variables of the calling environment that would change what the
// program sees are cleared.
inline std::unique_ptr<Subprocess> StartOnSim(const std::vector<std::string>& argv,
                                              const std::string& state, const std::string& profile,
                                              const std::string& memory = "") {
  std::vector<std::string> command = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  std::map<std::string, std::string> env = {{"HAMI_SIM_STATE", state},
                                            {"HAMI_SIM_PROFILE", profile},
                                            {"HAMI_SIM_CONTEXT_SIZE", "64m"},
                                            {"LD_PRELOAD", ""},
                                            {"CUDA_VISIBLE_DEVICES", ""},
                                            {"CUDA_DEVICE_MEMORY_LIMIT", ""},
                                            {"CUDA_DEVICE_MEMORY_SHARED_CACHE", ""},
                                            {"CUDA_MODULE_LOADING", ""}};
  if (!memory.empty()) {
    command.insert(command.end(), {std::string(HAMI_BIN_DIR) + "/hami", "run", "--sim", profile,
                                   "--memory", memory, "--"});
    env["LD_LIBRARY_PATH"] = "";
  } else {
    env["LD_LIBRARY_PATH"] = HAMI_SIM_LIB_DIR;
  }
  command.insert(command.end(), argv.begin(), argv.end());
  return std::make_unique<Subprocess>(command, env);
}

// Why the multi-process NCCL program cannot run here, or empty.
inline std::string NcclRanksSkipReason() {
  if (std::string reason = CudartSkipReason(); !reason.empty()) return reason;
  if (access(CudartProgram("nccl_ranks").c_str(), X_OK) != 0) {
    return "NCCL (nccl.h and libnccl) was not found when the build was configured: nccl_ranks "
           "was not built";
  }
#ifdef HAMI_SANITIZER_RUNTIME
  return "sanitized build: nccl_ranks is built by nvcc without a sanitizer runtime";
#else
  return "";
#endif
}

struct CudartRun {
  int status = -1;
  std::string out;
};

// The fields of the `nth` line (from 0) that starts with "<name> ".
inline std::map<std::string, std::string> CaseFields(const std::string& out,
                                                     const std::string& name, int nth = 0) {
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(name + " ", 0) != 0 || nth-- > 0) continue;
    std::map<std::string, std::string> fields;
    std::istringstream words(line.substr(name.size() + 1));
    for (std::string w; words >> w;) {
      size_t eq = w.find('=');
      if (eq != std::string::npos) fields[w.substr(0, eq)] = w.substr(eq + 1);
    }
    return fields;
  }
  return {};
}

// A field as a number; fails the test (and gives -1) when the case or field is missing.
inline long long Field(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  EXPECT_NE(it, fields.end()) << "no field " << key;
  return it == fields.end() ? -1 : std::strtoll(it->second.c_str(), nullptr, 10);
}

inline double FieldMs(const std::map<std::string, std::string>& fields, const std::string& key) {
  auto it = fields.find(key);
  EXPECT_NE(it, fields.end()) << "no field " << key;
  return it == fields.end() ? -1 : std::strtod(it->second.c_str(), nullptr);
}

// Expects every listed field to be 0 (cudaSuccess, or the library's success status).
inline void ExpectSucceeded(const std::map<std::string, std::string>& fields,
                            const std::vector<std::string>& keys, const std::string& what) {
  ASSERT_FALSE(fields.empty()) << what << ": the case printed nothing";
  for (const std::string& k : keys) EXPECT_EQ(Field(fields, k), 0) << what << ": " << k;
}

}  // namespace hami::testing
