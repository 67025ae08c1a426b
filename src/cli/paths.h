// Where hami's own files are, relative to the running `hami` binary: build/bin/hami finds
// build/lib/sim and build/bench; an installed /usr/local/bin/hami finds
// /usr/local/lib/hami/sim and /usr/local/share/hami.
#pragma once

#include <string>

namespace hami::cli {

// `hami run` keeps its region in a directory of its own, <kRunDirParent>/<kRunDirPrefix>-XXXXXX
// (common/temp_dir.h), removed when the command ends; `hami top` lists them.
inline constexpr char kRunDirParent[] = "/tmp";
inline constexpr char kRunDirPrefix[] = "hami-run";

// The directory holding the simulated libcuda.so.1 and libnvidia-ml.so.1: $HAMI_SIM_LIBDIR,
// else the first of <exe>/../lib/sim and <exe>/../lib/hami/sim that has libcuda.so.1.
// Empty when none does.
std::string SimLibraryDir();

// The directory holding benchmark binaries (<exe>/../bench), empty when absent.
std::string BenchDir();

// hami-sim, the simulated GPU's own command, beside this hami: <exe>/hami-sim (whether or not
// it exists).
std::string SimToolPath();

// A directory of shared files: <exe>/../share/hami/<name> when it exists (an installed hami,
// cmake/HamiInstall.cmake), else `built` (the source tree this binary was built from).
std::string ShareDir(const std::string& name, const std::string& built);

}  // namespace hami::cli
