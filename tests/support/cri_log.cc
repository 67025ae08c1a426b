#include "support/cri_log.h"

#include <sstream>

#include "common/file.h"
#include "support/subprocess.h"

namespace hami::testing {

std::string CriLogText(const std::string& cri) {
  std::string out;
  std::istringstream lines(cri);
  for (std::string line; std::getline(lines, line);) {
    // Past the time, the stream and the tag.
    size_t at = 0;
    for (int field = 0; field < 3 && at != std::string::npos; ++field) {
      at = line.find(' ', at);
      if (at != std::string::npos) ++at;
    }
    if (at == std::string::npos || at < 2) continue;
    const bool full = line[at - 2] == 'F';
    out += line.substr(at) + (full ? "\n" : "");
  }
  return out;
}

std::string ReadContainerLog(const std::string& pods_dir, const std::string& ns,
                             const std::string& pod, const std::string& container) {
  Ran found =
      RunCommand({"/bin/sh", "-c", "ls \"$0\"/\"$1\"_\"$2\"_*/\"$3\"/*.log | sort -V | tail -n 1",
                  pods_dir, ns, pod, container});
  const std::string file = found.out.substr(0, found.out.find('\n'));
  if (file.empty()) return "";
  auto text = ReadFileToString(file, 1 << 20);
  return text.ok() ? CriLogText(*text) : std::string();
}

}  // namespace hami::testing
