// What a container printed, read from the newest log file the simulated kubelet keeps for it
// (<pods dir>/<namespace>_<pod>_<uid>/<container>/<restart>.log), in the CRI log format
// containerd writes: "<time> <stream> <F|P> <text>" per line, P for a part of a longer line.
// The text comes back as the program printed it: prefixes dropped, parts joined.
#pragma once

#include <string>

namespace hami::testing {

// "" when there is no log file (yet).
std::string ReadContainerLog(const std::string& pods_dir, const std::string& ns,
                             const std::string& pod, const std::string& container);

// The text of one CRI-format log.
std::string CriLogText(const std::string& cri);

}  // namespace hami::testing
