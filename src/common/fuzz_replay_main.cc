// Replays a libFuzzer corpus without libFuzzer: every file named on the command line (or
// found in a directory named there) is fed once to LLVMFuzzerTestOneInput. The plain test
// run uses it so every input that ever crashed a parser keeps being checked.
#include <dirent.h>
#include <sys/stat.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "common/file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

void Collect(const std::string& path, std::vector<std::string>* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;
  if (!S_ISDIR(st.st_mode)) {
    out->push_back(path);
    return;
  }
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    Collect(path + "/" + name, out);
  }
  closedir(dir);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  if (files.empty()) {
    std::fprintf(stderr, "fuzz replay: no corpus files found\n");
    return 1;
  }
  for (const std::string& f : files) {
    auto data = hami::ReadFileToString(f, 16 << 20);
    if (!data.ok()) {
      std::fprintf(stderr, "fuzz replay: %s\n", data.error().message().c_str());
      return 1;
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(data->data()), data->size());
  }
  std::printf("fuzz replay: %zu inputs ok\n", files.size());
  return 0;
}
