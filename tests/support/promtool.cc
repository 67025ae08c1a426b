#include "support/promtool.h"

#include <fcntl.h>

#include <sstream>

#include "common/file.h"
#include "common/temp_dir.h"
#include "support/subprocess.h"

namespace hami::testing {

PromtoolReport PromtoolCheckMetrics(const std::string& exposition) {
  PromtoolReport report;
  Ran found = RunCommand({"/bin/sh", "-c", "command -v promtool"});
  if (found.code != 0) return report;
  report.available = true;
  TempDir dir("hami-promtool");
  const std::string file = dir.File("metrics.txt");
  auto fd = OpenRegularFile(file, O_WRONLY | O_CREAT | O_TRUNC);
  if (!fd.ok() || !WriteAll(fd->get(), exposition).ok()) return report;
  Ran lint = RunCommand({"/bin/sh", "-c", "promtool check metrics < \"$0\" 2>&1", file});
  report.code = lint.code;
  std::istringstream lines(lint.out);
  for (std::string line; std::getline(lines, line);) {
    if (!line.empty()) report.findings.push_back(line);
  }
  return report;
}

}  // namespace hami::testing
