// hami env: the configuration libvgpu.so would resolve in this environment — every variable
// of its options table, the value it takes and where that came from (limits file,
// environment, default) — and everything malformed, exactly as the library would read it.
// `hami env --markdown` prints the options table for docs/configuration.md.
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/region_report.h"
#include "common/parse.h"
#include "node/paths.h"
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
  std::string limits_file;  // empty: node::kLimitsFilePath, as the library reads it
  bool json = false;
  bool markdown = false;
};

// One printed row: a variable, its value as given (none for a default) and what it means.
struct Row {
  std::string name;
  std::optional<std::string> value;
  Source source = Source::kDefault;
  bool closed = false;  // the value could not be read; the limit is held closed
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

// The first device whose limit comes from the all-devices variable `name`, or -1 when every
// device has its own.
int DeviceWithoutOwn(const Config& c, std::string_view name) {
  std::string prefix = std::string(name) + "_";
  for (int d = 0; d < vgpu::kMaxDevices; ++d) {
    if (FindSetting(c, prefix + std::to_string(d)) == nullptr) return d;
  }
  return -1;
}

// What the configuration holds for row `row` of the options table. `device` is the device of
// a per-device variable.
void Describe(size_t row, const Config& c, int device, Row* out) {
  const OptionInfo& info = vgpu::OptionTable()[row];
  if (info.scope == vgpu::OptionScope::kAllDevices) {
    device = DeviceWithoutOwn(c, info.name);
    if (device < 0) {
      out->resolved = "applies to no device: each has its own";
      return;
    }
  }
  vgpu::OptionValue v = vgpu::DescribeOption(c, row, device);
  out->resolved = out->closed ? "could not be read; held closed: " + v.text : std::move(v.text);
  if (v.number_key != nullptr) out->extra[v.number_key] = v.number;
}

// Every row of the options table; a per-device row becomes one row per device that has its
// own variable, or a single row saying none does.
std::vector<Row> Rows(const Config& c) {
  std::vector<Row> rows;
  std::span<const OptionInfo> table = vgpu::OptionTable();
  for (size_t i = 0; i < table.size(); ++i) {
    const OptionInfo& info = table[i];
    if (info.scope != vgpu::OptionScope::kPerDevice) {
      Row row;
      row.name = info.name;
      if (const Setting* s = FindSetting(c, info.name)) {
        row.value = s->value;
        row.source = s->source;
        row.closed = s->closed;
      }
      Describe(i, c, -1, &row);
      rows.push_back(std::move(row));
      continue;
    }
    std::string_view prefix = PerDevicePrefix(info.name);
    bool any = false;
    for (int d = 0; d < vgpu::kMaxDevices; ++d) {
      const Setting* s = FindSetting(c, std::string(prefix) + std::to_string(d));
      if (s == nullptr) continue;
      Row row;
      row.name = s->name;
      row.value = s->value;
      row.source = s->source;
      row.closed = s->closed;
      Describe(i, c, d, &row);
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
  if (!r.closed.empty()) {
    std::printf("\nlimits that could not be read, held closed (%zu):\n", r.closed.size());
    for (const std::string& c : r.closed) std::printf("  %s\n", Printable(c).c_str());
  }
  // The summary counts every finding the exit status counts: a limit held closed is a problem.
  const size_t problems = r.problems.size() + r.closed.size();
  if (problems == 0) {
    std::printf("\nproblems: none\n");
  } else {
    std::printf("\nproblems (%zu):\n", problems);
    if (!r.closed.empty()) {
      std::printf("  %zu limit(s) held closed, listed above\n", r.closed.size());
    }
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
    if (row.closed) o["closed"] = true;
    o.update(row.extra);
    options.push_back(std::move(o));
  }
  return {{"limits_file",
           {{"path", file.path}, {"present", file.present}, {"entries", file.entries.size()}}},
          {"options", std::move(options)},
          {"closed", r.closed},
          {"problems", r.problems},
          {"notes", r.notes}};
}

// The options table as Markdown, one row per row of vgpu/options.def: docs/configuration.md
// holds exactly this between its "generated" markers (a test compares them).
std::string OptionsMarkdown() {
  auto cell = [](std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  };
  std::string out = "| variable | default | meaning |\n| --- | --- | --- |\n";
  for (const OptionInfo& o : vgpu::OptionTable()) {
    out += "| `" + cell(o.name) + "` | `" + cell(o.default_text) + "` | " + cell(o.doc) + " |\n";
  }
  return out;
}

int Env(const EnvOptions& o) {
  if (o.markdown) {
    std::fputs(OptionsMarkdown().c_str(), stdout);
    return kExitClean;
  }
  const std::string path = o.limits_file.empty() ? node::kLimitsFilePath : o.limits_file;
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
  return r.problems.empty() && r.closed.empty() ? kExitClean : kExitProblems;
}

}  // namespace

void AddEnvCommand(CLI::App& app) {
  static EnvOptions options;
  CLI::App* env = app.add_subcommand(
      "env",
      std::string("Show the configuration libvgpu.so resolves in this environment: every "
                  "variable it reads, its value, and where that came from (the limits file ") +
          node::kLimitsFilePath +
          ", the environment, or the default), then every malformed line or value and the "
          "notes the library would log.\n"
          "Exit status: 0 no problems; 1 a problem was found (a malformed limits-file line, "
          "a malformed value, an unreadable limits file, or a --limits-file that does not "
          "exist). A memory or SM limit that could not be read is held closed (a zero memory "
          "budget, a 1% compute share), as libvgpu.so holds it, and listed as such.");
  env->add_option("--limits-file", options.limits_file,
                  std::string("read this limits file instead of ") + node::kLimitsFilePath +
                      " (to check a file before deploying it)");
  env->add_flag("--json", options.json, "print one JSON object instead of text");
  env->add_flag("--markdown", options.markdown,
                "print the table of every variable (name, default, meaning) as Markdown: the "
                "table of docs/configuration.md is this output");
  env->callback([] { std::exit(Env(options)); });
}

}  // namespace hami::cli
