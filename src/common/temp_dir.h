// TempDir: a new directory under /tmp, removed with everything in it when the object goes.
// For tests, benchmarks and fuzz targets that need real files.
#pragma once

#include <ftw.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>

namespace hami {

class TempDir {
 public:
  // "/tmp/<prefix>-XXXXXX"; path() is empty when the directory could not be made.
  explicit TempDir(std::string_view prefix) {
    std::string tmpl = "/tmp/" + std::string(prefix) + "-XXXXXX";
    if (mkdtemp(tmpl.data()) != nullptr) path_ = std::move(tmpl);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir() {
    if (path_.empty()) return;
    nftw(
        path_.c_str(),
        [](const char* p, const struct stat*, int, struct FTW*) { return ::remove(p); }, 16,
        FTW_DEPTH | FTW_PHYS);
  }

  bool ok() const { return !path_.empty(); }
  const std::string& path() const { return path_; }
  std::string File(std::string_view name) const { return path_ + "/" + std::string(name); }

 private:
  std::string path_;
};

}  // namespace hami
