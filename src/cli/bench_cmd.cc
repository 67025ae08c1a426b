// hami bench: runs the benchmark programs installed beside hami (build/bench/hami_bench_*).
#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/paths.h"

namespace hami::cli {

namespace {

constexpr std::string_view kPrefix = "hami_bench_";

std::vector<std::string> ListBenchmarks(const std::string& dir) {
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) == 0) out.push_back(name.substr(kPrefix.size()));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

int RunOne(const std::string& dir, const std::string& name, const std::vector<std::string>& args) {
  std::string path = dir + "/" + std::string(kPrefix) + name;
  std::printf("== hami bench %s\n", name.c_str());
  std::fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    std::vector<char*> argv{path.data()};
    std::vector<std::string> copy = args;
    for (std::string& a : copy) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(path.c_str(), argv.data());
    std::fprintf(stderr, "hami bench: cannot run %s\n", path.c_str());
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}

}  // namespace

void AddBenchCommand(CLI::App& app) {
  static bool list = false;
  CLI::App* bench = app.add_subcommand(
      "bench",
      "Run benchmarks (all, or those named); what follows the names (from the first option, "
      "or after --) goes to each benchmark: hami bench init --workers 1,4");
  bench->add_flag("--list", list, "list the benchmarks");
  bench->prefix_command();  // everything from the first name on is ours to split
  bench->callback([bench] {
    // Leading words are benchmark names; the rest (from the first option, or after a "--")
    // is passed to each benchmark as it was written.
    std::vector<std::string> words = bench->remaining();
    std::vector<std::string> names, args;
    size_t i = 0;
    for (; i < words.size() && !words[i].empty() && words[i][0] != '-'; ++i) {
      names.push_back(words[i]);
    }
    if (i < words.size() && words[i] == "--") ++i;
    args.assign(words.begin() + std::ptrdiff_t(i), words.end());
    std::string dir = BenchDir();
    std::vector<std::string> all = ListBenchmarks(dir);
    if (all.empty()) {
      std::fprintf(stderr, "hami bench: no benchmarks found beside hami (%s)\n",
                   dir.empty() ? "no bench directory" : dir.c_str());
      std::exit(1);
    }
    if (list) {
      for (const std::string& n : all) std::printf("%s\n", n.c_str());
      std::exit(0);
    }
    for (const std::string& n : names) {
      if (std::find(all.begin(), all.end(), n) == all.end()) {
        std::fprintf(stderr, "hami bench: unknown benchmark '%s' (see hami bench --list)\n",
                     n.c_str());
        std::exit(2);
      }
    }
    int rc = 0;
    for (const std::string& n : names.empty() ? all : names) rc |= RunOne(dir, n, args);
    std::exit(rc);
  });
}

}  // namespace hami::cli
