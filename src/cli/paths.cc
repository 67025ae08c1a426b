#include "cli/paths.h"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

#include "common/proc.h"

namespace hami::cli {

namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

}  // namespace

std::string SimLibraryDir() {
  if (const char* env = std::getenv("HAMI_SIM_LIBDIR"); env != nullptr && *env != '\0') {
    return env;
  }
  std::string exe = ExecutableDir();
  for (const std::string& dir : {exe + "/../lib/sim", exe + "/../lib/hami/sim"}) {
    if (Exists(dir + "/libcuda.so.1")) {
      char real[PATH_MAX];
      return realpath(dir.c_str(), real) != nullptr ? std::string(real) : dir;
    }
  }
  return "";
}

std::string BenchDir() {
  std::string dir = ExecutableDir() + "/../bench";
  char real[PATH_MAX];
  if (!Exists(dir) || realpath(dir.c_str(), real) == nullptr) return "";
  return real;
}

std::string SimToolPath() { return ExecutableDir() + "/hami-sim"; }

std::string ShareDir(const std::string& name, const std::string& built) {
  std::string dir = ExecutableDir() + "/../share/hami/" + name;
  char real[PATH_MAX];
  if (Exists(dir) && realpath(dir.c_str(), real) != nullptr) return real;
  return built;
}

}  // namespace hami::cli
