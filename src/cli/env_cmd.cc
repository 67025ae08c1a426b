// hami env: the configuration libvgpu.so would resolve in this environment — every variable
// of its options table, the value it takes and where that came from (limits file,
// environment, default) — and everything malformed, exactly as the library would read it.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/region_report.h"
#include "common/parse.h"
#include "vgpu/config.h"

namespace hami::cli {

namespace {

using nlohmann::json;
using vgpu::Config;
using vgpu::OptionInfo;
using vgpu::Setting;
using vgpu::Source;

// Exit statuses (the --help text lists them).
constexpr int kExitClean = 0;
constexpr int kExitProblems = 1;

struct EnvOptions {
  std::string limits_file;  // empty: vgpu::kLimitsFilePath, as the library reads it
  bool json = false;
};

// One printed row: a variable, its value as given (none for a default) and what it means.
struct Row {
  std::string name;
  std::optional<std::string> value;
  Source source = Source::kDefault;
  std::string resolved;
  json extra = json::object();  // "bytes" or "percent" for the limits
};

const Setting* FindSetting(const Config& c, std::string_view name) {
  for (const Setting& s : c.settings) {
    if (s.name == name) return &s;
  }
  return nullptr;
}

std::string_view PerDevicePrefix(std::string_view row_name) {
  return row_name.ends_with("<i>") ? row_name.substr(0, row_name.size() - 3) : std::string_view();
}

void DescribeMemory(uint64_t bytes, Row* row) {
  row->resolved =
      bytes == 0 ? "unlimited" : FormatBytes(bytes) + ", " + std::to_string(bytes) + " bytes";
  row->extra["bytes"] = bytes;
}

void DescribeSm(uint32_t percent, Row* row) {
  row->resolved = FormatSmLimit(percent);
  row->extra["percent"] = percent;
}

// The first device whose limit comes from the all-devices variable `name`, or -1 when every
// device has its own.
int DeviceWithoutOwn(const Config& c, std::string_view name) {
  std::string prefix = std::string(name) + "_";
  for (int d = 0; d < vgpu::kMaxDevices; ++d) {
    if (FindSetting(c, prefix + std::to_string(d)) == nullptr) return d;
  }
  return -1;
}

// What the configuration holds for the variable `name` of table row `info`. `device` is the
// device of a per-device variable.
void Describe(const OptionInfo& info, const Config& c, int device, Row* row) {
  std::string_view name = info.name;
  static constexpr const char* kLogLevels[] = {"off", "errors", "errors and warnings", "info",
                                               "debug"};
  if (name == "CUDA_DEVICE_MEMORY_LIMIT" || name == "CUDA_DEVICE_SM_LIMIT") {
    int d = DeviceWithoutOwn(c, name);
    if (d < 0) {
      row->resolved = "applies to no device: each has its own";
    } else if (name == "CUDA_DEVICE_MEMORY_LIMIT") {
      DescribeMemory(c.memory_limit[size_t(d)], row);
    } else {
      DescribeSm(c.sm_limit[size_t(d)], row);
    }
  } else if (name == "CUDA_DEVICE_MEMORY_LIMIT_<i>") {
    DescribeMemory(c.memory_limit[size_t(device)], row);
  } else if (name == "CUDA_DEVICE_SM_LIMIT_<i>") {
    DescribeSm(c.sm_limit[size_t(device)], row);
  } else if (name == "CUDA_DEVICE_MEMORY_SHARED_CACHE") {
    row->resolved = c.shared_cache;
  } else if (name == "GPU_CORE_UTILIZATION_POLICY") {
    using region::layout::CorePolicy;
    row->resolved = c.core_policy == CorePolicy::kForce     ? "force"
                    : c.core_policy == CorePolicy::kDisable ? "disable"
                                                            : "default";
  } else if (name == "CUDA_TASK_PRIORITY") {
    row->resolved = c.priority == 0 ? "0 (high)" : "1 (low)";
  } else if (name == "LIBCUDA_LOG_LEVEL") {
    row->resolved = std::to_string(c.log_level) + " (" +
                    (c.log_level >= 0 && c.log_level <= 4 ? kLogLevels[c.log_level] : "?") + ")";
  } else if (name == "CUDA_OVERSUBSCRIBE") {
    row->resolved = c.oversubscribe ? "on" : "off";
  } else if (name == "LIBVGPU_HOSTPID_BROKER") {
    row->resolved = c.hostpid_broker ? "on" : "off";
  } else if (name == "LIBVGPU_HOST_PROCFS") {
    row->resolved = c.host_procfs.empty() ? "unset (not used)" : c.host_procfs;
  } else if (name == "HAMI_IDENTITY_TIERS") {
    row->resolved = vgpu::IdentityTiersText(c.identity_tiers);
  } else if (name == "HAMI_IDENTITY_PROBE_WAIT_MS") {
    row->resolved = std::to_string(c.probe_wait_ms) + " ms";
  } else if (name == "HAMI_IDENTITY_PROBE_LOCK") {
    row->resolved = c.probe_lock;
  } else if (name == "CUDA_VISIBLE_DEVICES") {
    row->resolved = !c.visible_devices           ? "all devices"
                    : c.visible_devices->empty() ? "no device"
                                                 : *c.visible_devices;
  } else {
    row->resolved = row->value.value_or(info.default_text);
  }
}

// Every row of the options table; a per-device row becomes one row per device that has its
// own variable, or a single row saying none does.
std::vector<Row> Rows(const Config& c) {
  std::vector<Row> rows;
  for (const OptionInfo& info : vgpu::OptionTable()) {
    std::string_view prefix = PerDevicePrefix(info.name);
    if (prefix.empty()) {
      Row row;
      row.name = info.name;
      if (const Setting* s = FindSetting(c, info.name)) {
        row.value = s->value;
        row.source = s->source;
      }
      Describe(info, c, -1, &row);
      rows.push_back(std::move(row));
      continue;
    }
    bool any = false;
    for (int d = 0; d < vgpu::kMaxDevices; ++d) {
      const Setting* s = FindSetting(c, std::string(prefix) + std::to_string(d));
      if (s == nullptr) continue;
      Row row;
      row.name = s->name;
      row.value = s->value;
      row.source = s->source;
      Describe(info, c, d, &row);
      rows.push_back(std::move(row));
      any = true;
    }
    if (!any) {
      Row row;
      row.name = info.name;
      row.resolved = std::string("each device uses ") + info.default_text;
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

void PrintText(const vgpu::LimitsFile& file, const vgpu::Resolution& r,
               const std::vector<Row>& rows) {
  std::string state = file.present ? std::to_string(file.entries.size()) + " entries" : "absent";
  std::printf("limits file  %s (%s)\n\n", Printable(file.path).c_str(), state.c_str());
  std::printf("%-32s %-12s %s\n", "VARIABLE", "SOURCE", "VALUE");
  for (const Row& row : rows) {
    std::string shown = row.resolved;
    if (row.value && *row.value != row.resolved) shown = *row.value + " (" + row.resolved + ")";
    std::printf("%-32s %-12s %s\n", row.name.c_str(), vgpu::SourceName(row.source),
                Printable(shown).c_str());
  }
  if (r.problems.empty()) {
    std::printf("\nproblems: none\n");
  } else {
    std::printf("\nproblems (%zu):\n", r.problems.size());
    for (const std::string& p : r.problems) std::printf("  %s\n", Printable(p).c_str());
  }
  if (!r.notes.empty()) {
    std::printf("\nnotes (%zu):\n", r.notes.size());
    for (const std::string& n : r.notes) std::printf("  %s\n", Printable(n).c_str());
  }
}

json ToJson(const vgpu::LimitsFile& file, const vgpu::Resolution& r, const std::vector<Row>& rows) {
  json options = json::array();
  for (const Row& row : rows) {
    json o = {{"name", row.name},
              {"value", row.value ? json(*row.value) : json(nullptr)},
              {"source", vgpu::SourceName(row.source)},
              {"resolved", row.resolved}};
    o.update(row.extra);
    options.push_back(std::move(o));
  }
  return {{"limits_file",
           {{"path", file.path}, {"present", file.present}, {"entries", file.entries.size()}}},
          {"options", std::move(options)},
          {"problems", r.problems},
          {"notes", r.notes}};
}

int Env(const EnvOptions& o) {
  const std::string path = o.limits_file.empty() ? vgpu::kLimitsFilePath : o.limits_file;
  vgpu::LimitsFile file = vgpu::ReadLimitsFile(path);
  vgpu::Resolution r =
      vgpu::ResolveConfig(file, [](const char* name) { return std::getenv(name); });
  if (!o.limits_file.empty() && !file.present) {
    // The library quietly reads a missing file as none; a file named to be checked must exist.
    struct stat st;
    if (lstat(path.c_str(), &st) != 0) {
      r.problems.push_back(path + ": " + std::strerror(errno));
    } else if (S_ISREG(st.st_mode) && st.st_size == 0) {
      r.notes.push_back(path + " is empty: libvgpu reads an empty file as no limits file");
    }
  }
  std::vector<Row> rows = Rows(r.config);
  if (o.json) {
    std::printf("%s\n", DumpJson(ToJson(file, r, rows)).c_str());
  } else {
    PrintText(file, r, rows);
  }
  return r.problems.empty() ? kExitClean : kExitProblems;
}

}  // namespace

void AddEnvCommand(CLI::App& app) {
  static EnvOptions options;
  CLI::App* env = app.add_subcommand(
      "env",
      std::string("Show the configuration libvgpu.so resolves in this environment: every "
                  "variable it reads, its value, and where that came from (the limits file ") +
          vgpu::kLimitsFilePath +
          ", the environment, or the default), then every malformed line or value and the "
          "notes the library would log.\n"
          "Exit status: 0 no problems; 1 a problem was found (a malformed limits-file line, "
          "a malformed value, an unreadable limits file, or a --limits-file that does not "
          "exist).");
  env->add_option("--limits-file", options.limits_file,
                  std::string("read this limits file instead of ") + vgpu::kLimitsFilePath +
                      " (to check a file before deploying it)");
  env->add_flag("--json", options.json, "print one JSON object instead of text");
  env->callback([] { std::exit(Env(options)); });
}

}  // namespace hami::cli
