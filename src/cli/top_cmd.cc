// hami top: a live view of shared regions, like nvidia-smi for a container: per device the
// memory used against its limit, the SM limit and the monitor's observed utilization, and
// the processes holding slots. Regions are only read (opened read-only).
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/region_finder.h"
#include "cli/region_report.h"
#include "common/clock.h"
#include "common/exit_status.h"
#include "common/parse.h"
#include "limits/vocabulary.h"
#include "node/paths.h"

namespace hami::cli {

namespace {

using nlohmann::json;

constexpr const char* kDefaultRegion = node::kDefaultSharedCache;
constexpr const char* kRegionVariable = limits::KeyName(limits::Key::kSharedCache);
constexpr char kClearScreen[] = "\x1b[H\x1b[2J";
// Region files are looked for at most this many levels below a directory
// (DIR/a/b/c/usage.cache is 4 levels down).
constexpr int kMaxDepth = 4;
constexpr int kBarWidth = 25;

struct TopOptions {
  std::string target;
  std::string hook_path = node::kDefaultHookPath;
  std::string interval = "1";
  bool once = false;
  bool json = false;
};

std::string Str(const json& j) { return Printable(j.get<std::string>()); }

// Decimal seconds ("1", "0.5"); no signs, spaces, exponents or hex.
Result<int64_t> ParseInterval(const std::string& text) {
  bool decimal = !text.empty() && text.find_first_not_of("0123456789.") == std::string::npos &&
                 text.find('.') == text.rfind('.');
  errno = 0;
  char* end = nullptr;
  double seconds = std::strtod(text.c_str(), &end);
  if (!decimal || end != text.c_str() + text.size() || errno != 0 || !std::isfinite(seconds) ||
      seconds <= 0 || seconds > 86400) {
    return Error(ErrorCode::kInvalidArgument,
                 "--interval '" + text + "': not a number of seconds above 0 (at most 86400)");
  }
  return std::max<int64_t>(1, int64_t(seconds * 1e9));
}

// Every file under `dir`, at most kMaxDepth levels down, whose name ends in ".cache";
// sorted. Directories reached through symbolic links are not entered.
std::vector<std::string> FindRegionFiles(const std::string& dir, json* skipped) {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec);
  for (; !ec && it != fs::recursive_directory_iterator(); it.increment(ec)) {
    std::error_code type_ec;
    fs::file_status st = it->symlink_status(type_ec);
    if (fs::is_directory(st)) {
      if (it.depth() + 1 >= kMaxDepth) it.disable_recursion_pending();
      continue;
    }
    std::string name = it->path().filename().string();
    if (name.ends_with(".cache")) files.push_back(it->path().string());
  }
  if (ec) {
    skipped->push_back({{"file", dir}, {"error", "walking " + dir + ": " + ec.message()}});
  }
  std::sort(files.begin(), files.end());
  return files;
}

// One frame: every region the source names, described, and the files skipped.
json Collect(const std::string& source) {
  json frame = {{"source", source},
                {"time", FormatRealtime(RealtimeNs())},
                {"regions", json::array()},
                {"skipped", json::array()}};
  std::vector<std::string> files;
  struct stat st;
  if (stat(source.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    files = FindRegionFiles(source, &frame["skipped"]);
  } else {
    files.push_back(source);
  }
  for (const std::string& file : files) {
    auto opened = OpenExistingRegion(file, RegionAccess::kReadOnly);
    if (!opened.ok()) {
      frame["skipped"].push_back({{"file", file}, {"error", opened.error().message()}});
      continue;
    }
    frame["regions"].push_back(DescribeRegion(*opened));
  }
  return frame;
}

std::string Bar(uint64_t used, uint64_t limit) {
  if (limit == 0) return "[" + std::string(kBarWidth, ' ') + "]    -";
  uint64_t shown = std::min(used, limit);
  int fill = int(double(shown) * kBarWidth / double(limit));
  if (used > 0 && fill == 0) fill = 1;
  char pct[16];
  std::snprintf(pct, sizeof(pct), " %3d%%", int(double(used) * 100 / double(limit)));
  return "[" + std::string(size_t(fill), '#') + std::string(size_t(kBarWidth - fill), ' ') + "]" +
         pct;
}

void Appendf(std::string* out, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void Appendf(std::string* out, const char* fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  if (n > 0) out->append(buf, std::min(size_t(n), sizeof(buf) - 1));
}

void RenderRegion(const json& r, std::string* out) {
  const json& pol = r["policy"];
  Appendf(out, "\n%s  generation %llu, priority %d, core policy %s%s\n", Str(r["file"]).c_str(),
          static_cast<unsigned long long>(pol["generation"].get<uint64_t>()),
          pol["priority"].get<int>(), Str(pol["core_policy"]).c_str(),
          pol["paused"].get<bool>() ? ", PAUSED" : "");
  Appendf(out, "%-4s %-26s %-*s %-10s %s\n", "GPU", "MEMORY USED / LIMIT", kBarWidth + 7, "USAGE",
          "SM LIMIT", "SM UTIL");
  for (const json& d : r["devices"]) {
    uint64_t used = d["used_bytes"].get<uint64_t>();
    uint64_t limit = d["memory_limit_bytes"].get<uint64_t>();
    std::string memory = FormatBytes(used) + " / " + FormatLimit(limit);
    const std::string mode = d["limiter"]["mode"].get<std::string>();
    Appendf(out, "%-4d %-26s %-*s %-10s %u%%%s\n", d["index"].get<int>(), memory.c_str(),
            kBarWidth + 7, Bar(used, limit).c_str(),
            FormatSmLimit(d["sm_limit_percent"].get<uint32_t>()).c_str(),
            d["sm_util_percent"].get<uint32_t>(),
            mode == "open-loop" ? "  limiter open-loop (DEGRADED: a process has no host PID)"
            : mode == "off"     ? ""
                                : ("  limiter " + mode).c_str());
  }
  // Memory outside the device budget: spilled to host memory (CUDA_OVERSUBSCRIBE) against the
  // host budget, and memory mapped from other processes.
  const json& outside = r["outside_budget"];
  const uint64_t spilled = outside["spilled_bytes"].get<uint64_t>();
  const uint64_t imported = outside["imported_bytes"].get<uint64_t>();
  if (pol["oversubscribe"].get<bool>() || spilled != 0 || imported != 0) {
    const uint64_t host_limit = outside["host_limit_bytes"].get<uint64_t>();
    const std::string memory = FormatBytes(spilled) + " / " + FormatBytes(host_limit);
    Appendf(out, "%-4s %-26s %-*s spilled to host memory; %s imported\n", "HOST", memory.c_str(),
            kBarWidth + 7, host_limit == 0 ? "" : Bar(spilled, host_limit).c_str(),
            FormatBytes(imported).c_str());
  }
  if (r["slots"].empty()) {
    out->append("(no processes)\n");
  } else {
    Appendf(out, "%-4s %-8s %-8s %-16s %-9s %-14s %-5s %-12s %s\n", "GPU", "PID", "HOST PID",
            "COMM", "STATUS", "IDENTITY", "OWNER", "MEMORY", "SM UTIL");
    for (const json& s : r["slots"]) {
      int host_pid = s["host_pid"].get<int>();
      std::string host = host_pid == 0 ? "-" : std::to_string(host_pid);
      auto row = [&](const std::string& gpu, uint64_t bytes, uint32_t sm) {
        Appendf(out, "%-4s %-8d %-8s %-16s %-9s %-14s %-5s %-12s %u%%\n", gpu.c_str(),
                s["pid"].get<int>(), host.c_str(), Str(s["comm"]).c_str(), Str(s["status"]).c_str(),
                Str(s["identity"]).c_str(), s["alive"].get<bool>() ? "alive" : "dead",
                FormatBytes(bytes).c_str(), sm);
      };
      // One row per device the process uses, as nvidia-smi lists them.
      bool any = false;
      for (size_t d = 0; d < s["used_bytes"].size(); ++d) {
        uint64_t bytes = s["used_bytes"][d].get<uint64_t>();
        uint32_t sm = s["sm_util_percent"][d].get<uint32_t>();
        if (bytes == 0 && sm == 0) continue;
        any = true;
        row(std::to_string(d), bytes, sm);
      }
      if (!any) row("-", 0, 0);
      // What the process holds outside the device budget, on a row of its own.
      const uint64_t host_bytes = s["spilled_bytes"].get<uint64_t>();
      const uint64_t mapped = s["imported_bytes"].get<uint64_t>();
      if (host_bytes != 0) row("host", host_bytes, 0);
      if (mapped != 0) row("imp", mapped, 0);
    }
  }
  for (const json& i : r["inconsistencies"]) Appendf(out, "! %s\n", Str(i["message"]).c_str());
}

std::string Render(const json& frame) {
  std::string out;
  size_t n = frame["regions"].size();
  Appendf(&out, "hami top  %s  %s: %zu region%s\n", Str(frame["time"]).c_str(),
          Str(frame["source"]).c_str(), n, n == 1 ? "" : "s");
  for (const json& s : frame["skipped"]) Appendf(&out, "skipped: %s\n", Str(s["error"]).c_str());
  for (const json& r : frame["regions"]) RenderRegion(r, &out);
  return out;
}

int Top(const TopOptions& o) {
  auto interval_ns = ParseInterval(o.interval);
  if (!interval_ns.ok()) {
    std::fprintf(stderr, "hami top: %s\n", interval_ns.error().message().c_str());
    return ExitStatusOf(interval_ns.error());
  }
  std::string source = o.target;
  std::string named_by;  // where the caller's region came from, when no path was given
  if (source.empty()) {
    std::string problem;
    std::optional<CallerRegion> mine = FindCallerRegion(&problem);
    if (!mine) {
      std::fputs(
          NoRegionGivenMessage("hami top", problem, ListVisibleRegions(o.hook_path), o.hook_path)
              .c_str(),
          stderr);
      return kExitUsage;
    }
    source = mine->path;
    named_by = " (" + mine->source + ")";
  }
  struct stat st;
  if (stat(source.c_str(), &st) != 0) {
    std::fprintf(stderr, "hami top: %s%s: %s (give a region file or a directory holding them)\n",
                 source.c_str(), named_by.c_str(), std::strerror(errno));
    return kExitUsage;
  }
  for (;;) {
    json frame = Collect(source);
    if (o.json) {
      std::printf("%s\n", DumpJson(frame, o.once ? 2 : -1).c_str());
    } else {
      std::string text = o.once ? Render(frame) : kClearScreen + Render(frame);
      std::fwrite(text.data(), 1, text.size(), stdout);
    }
    std::fflush(stdout);
    if (o.once) return frame["regions"].empty() ? 1 : 0;
    SleepForNs(*interval_ns);
  }
}

}  // namespace

void AddTopCommand(CLI::App& app) {
  static TopOptions options;
  CLI::App* top = app.add_subcommand(
      "top",
      "Watch shared regions live, like nvidia-smi for a container: memory used against each "
      "limit, SM limits and utilization, and the processes holding slots.\n"
      "Looks in REGION, or in every file named *.cache at most 4 levels below DIR (files "
      "that fail validation are skipped, saying why). Without one: the region your "
      "environment names ($" +
          std::string(kRegionVariable) + ", from " + node::kLimitsFilePath +
          " or the environment, as libvgpu reads it); when it names none, the regions this host "
          "shows (" +
          kDefaultRegion +
          ", hami run's, the device plugin's containers with their pods) are listed and none is "
          "read.\nExit status (--once): 0 a region was shown; 1 none was; 2 bad arguments, "
          "nothing at the path, or no region given and none named by the environment.");
  top->add_option("REGION|DIR", options.target, "a region file or a directory holding them");
  top->add_option("--hook-path", options.hook_path,
                  std::string("the device plugin's hook path, whose vgpu/containers are listed "
                              "when no region is given (default ") +
                      node::kDefaultHookPath + ")")
      ->type_name("DIR");
  top->add_option("--interval", options.interval, "seconds between refreshes (default 1)")
      ->type_name("SECONDS");
  top->add_flag("--once", options.once, "print one frame and exit, without terminal escape codes");
  top->add_flag("--json", options.json,
                "print JSON: one object per frame (indented with --once, else one per line)");
  top->callback([] { std::exit(Top(options)); });
}

}  // namespace hami::cli
