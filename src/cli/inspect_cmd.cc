// hami inspect: one shared region — its policy, its usage, every process holding a slot —
// and whether it is consistent (Region::Check).
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/region_report.h"
#include "common/parse.h"
#include "node/paths.h"

namespace hami::cli {

namespace {

using nlohmann::json;

// Exit statuses (the --help text lists them).
constexpr int kExitConsistent = 0;
constexpr int kExitNotRepaired = 1;
constexpr int kExitUnusable = 2;
constexpr int kExitInconsistent = 3;

struct InspectOptions {
  std::string path;
  bool json = false;
  bool repair = false;
};

std::string Str(const json& j) { return Printable(j.get<std::string>()); }

std::string Who(const json& j) {
  std::string s = "pid " + std::to_string(j["pid"].get<int>());
  if (j.contains("comm")) s += " (" + Str(j["comm"]) + ")";
  return s + " at " + j["time"].get<std::string>();
}

// How the processes learned their host PIDs: the region's counts, then one line for each
// process whose tiers failed (the reason of every tier that was tried and gave no PID).
void PrintIdentity(const json& j) {
  if (!j.contains("identity")) return;
  auto counts = [](const json& obj) {
    std::string text;
    for (const auto& [name, n] : obj.items()) {
      if (!text.empty()) text += ", ";
      text += name + " " + std::to_string(n.get<uint64_t>());
    }
    return text.empty() ? std::string("none") : text;
  };
  std::printf("\nidentity: %s; tier failures: %s\n", counts(j["identity"]["by_source"]).c_str(),
              counts(j["identity"]["tier_failures"]).c_str());
  for (const json& s : j["slots"]) {
    if (!s.contains("identity_detail")) continue;
    const json& detail = s["identity_detail"];
    std::string reasons;
    for (const auto& [tier, reason] : detail["tier_reasons"].items()) {
      if (reason.get<std::string>() == "disabled") continue;
      if (!reasons.empty()) reasons += ", ";
      reasons += tier + " " + reason.get<std::string>();
    }
    if (reasons.empty()) continue;
    std::printf("  slot %d (pid %d): %s after %u attempt(s), latest %.1f ms: %s\n",
                s["index"].get<int>(), s["pid"].get<int>(), Str(s["identity"]).c_str(),
                detail["attempts"].get<unsigned>(), detail["duration_us"].get<double>() / 1000.0,
                reasons.c_str());
  }
}

void PrintText(const json& j) {
  const json& pol = j["policy"];
  std::printf("file     %s (opened %s)\n", Str(j["file"]).c_str(), Str(j["access"]).c_str());
  std::printf("layout   %d.%d, fingerprint %s\n", j["layout"]["major"].get<int>(),
              j["layout"]["minor"].get<int>(), Str(j["layout"]["fingerprint"]).c_str());
  json creator = j["creator"]["created"];
  creator["pid"] = j["creator"]["pid"];
  creator["comm"] = j["creator"]["comm"];
  std::printf("creator  %s\n", Who(creator).c_str());
  int priority = pol["priority"].get<int>();
  std::printf(
      "policy   %d device(s), generation %llu, priority %d (%s), core policy %s, "
      "utilization switch %s, oversubscribe %s, paused %s\n",
      pol["device_count"].get<int>(),
      static_cast<unsigned long long>(pol["generation"].get<uint64_t>()), priority,
      priority == 0   ? "high"
      : priority == 1 ? "low"
                      : "invalid",
      Str(pol["core_policy"]).c_str(),
      pol["utilization_switch"].get<uint32_t>() != 0 ? "on" : "off",
      pol["oversubscribe"].get<bool>() ? "on" : "off", pol["paused"].get<bool>() ? "yes" : "no");
  std::printf("stamped  by %s\n", Who(pol["stamped"]).c_str());
  std::printf("changed  %s\n",
              pol["changed"].is_null() ? "never" : ("by " + Who(pol["changed"])).c_str());

  std::printf("\n%-6s %-42s %-14s %s\n", "DEVICE", "UUID", "MEMORY LIMIT", "SM LIMIT");
  for (const json& d : j["devices"]) {
    std::string uuid = Str(d["uuid"]);
    std::printf("%-6d %-42s %-14s %s\n", d["index"].get<int>(), uuid.empty() ? "-" : uuid.c_str(),
                FormatLimit(d["memory_limit_bytes"].get<uint64_t>()).c_str(),
                FormatSmLimit(d["sm_limit_percent"].get<uint32_t>()).c_str());
  }

  std::printf("\n%-6s %-26s %-12s %-9s %s\n", "DEVICE", "USED / LIMIT", "PEAK", "REJECTED",
              "SM UTIL");
  for (const json& d : j["devices"]) {
    std::string used = FormatBytes(d["used_bytes"].get<uint64_t>()) + " / " +
                       FormatLimit(d["memory_limit_bytes"].get<uint64_t>());
    std::printf("%-6d %-26s %-12s %-9llu %u%%\n", d["index"].get<int>(), used.c_str(),
                FormatBytes(d["peak_bytes"].get<uint64_t>()).c_str(),
                static_cast<unsigned long long>(d["rejected"].get<uint64_t>()),
                d["sm_util_percent"].get<uint32_t>());
    std::string kinds;
    for (int k = 0; k < region::kUsageKinds; ++k) {
      const char* kind = region::UsageKindName(region::UsageKind(k));
      if (!d["usage_bytes"].contains(kind)) continue;
      if (!kinds.empty()) kinds += ", ";
      kinds += std::string(kind) + " " + FormatBytes(d["usage_bytes"][kind].get<uint64_t>());
    }
    std::printf("       by kind: %s\n", kinds.c_str());
    const json& lim = d["limiter"];
    if (Str(lim["mode"]) != "off") {
      std::printf(
          "       compute: limiter %s%s, measured %.1f%%, rate %.0f waves/s, waited %llu ms\n",
          Str(lim["mode"]).c_str(),
          Str(lim["mode"]) == "open-loop" ? " (DEGRADED: a process has no host PID)" : "",
          lim["measured_percent"].get<double>(), lim["rate_waves_per_s"].get<double>(),
          static_cast<unsigned long long>(lim["waited_ms"].get<uint64_t>()));
    }
  }

  std::printf("\n");
  if (j["slots"].empty()) {
    std::printf("(no process holds a slot)\n");
  } else {
    std::printf("%-5s %-9s %-5s %-8s %-8s %-14s %-9s %-16s %-20s %s\n", "SLOT", "STATE", "ALIVE",
                "PID", "HOST PID", "IDENTITY", "STATUS", "COMM", "REGISTERED", "MEMORY");
    for (const json& s : j["slots"]) {
      int host_pid = s["host_pid"].get<int>();
      std::string memory;
      int d = 0;
      for (const json& bytes : s["used_bytes"]) {
        if (!memory.empty()) memory += ", ";
        memory += std::to_string(d++) + ": " + FormatBytes(bytes.get<uint64_t>());
      }
      std::printf("%-5d %-9s %-5s %-8d %-8s %-14s %-9s %-16s %-20s %s\n", s["index"].get<int>(),
                  Str(s["state"]).c_str(), s["alive"].get<bool>() ? "yes" : "no",
                  s["pid"].get<int>(), host_pid == 0 ? "-" : std::to_string(host_pid).c_str(),
                  Str(s["identity"]).c_str(), Str(s["status"]).c_str(), Str(s["comm"]).c_str(),
                  Str(s["registered"]["time"]).c_str(), memory.empty() ? "-" : memory.c_str());
    }
  }

  PrintIdentity(j);

  if (j.contains("repair")) {
    const json& r = j["repair"];
    if (r.contains("error")) {
      std::printf("\nrepair: not done: %s\n", Str(r["error"]).c_str());
    } else {
      std::printf("\nrepair: reclaimed %d dead slot(s)\n", r["reclaimed"].get<int>());
    }
  }
  const json& bad = j["inconsistencies"];
  if (bad.empty()) {
    std::printf("\ncheck: consistent\n");
  } else {
    std::printf("\ncheck: %zu inconsistenc%s\n", bad.size(), bad.size() == 1 ? "y" : "ies");
    for (const json& i : bad) std::printf("  %s\n", Str(i["message"]).c_str());
  }
}

int Inspect(const InspectOptions& o) {
  auto opened = OpenExistingRegion(o.path, RegionAccess::kReadWriteElseReadOnly);
  if (!opened.ok()) {
    std::fprintf(stderr, "hami inspect: %s\n", opened.error().message().c_str());
    return kExitUnusable;
  }
  // Reclaim first, so that what is printed is what stands afterwards.
  json repair;
  bool not_repaired = false;
  if (o.repair) {
    if (opened->access == region::Access::kReadOnly) {
      not_repaired = true;
      repair = {{"reclaimed", 0},
                {"error", o.path + " could only be opened read-only; nothing was reclaimed"}};
    } else {
      repair = {{"reclaimed", opened->region->SweepDead()}};
    }
  }
  json report = DescribeRegion(*opened);
  if (o.repair) report["repair"] = repair;
  if (o.json) {
    std::printf("%s\n", DumpJson(report).c_str());
  } else {
    PrintText(report);
  }
  if (not_repaired) return kExitNotRepaired;
  return report["inconsistencies"].empty() ? kExitConsistent : kExitInconsistent;
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  static InspectOptions options;
  CLI::App* inspect = app.add_subcommand(
      "inspect",
      "Show a shared region: its policy, per-device usage and every process holding a slot, "
      "then check it.\n"
      "Exit status: 0 consistent; 1 --repair was asked but the region could only be opened "
      "read-only; 2 the region cannot be opened or fails validation; 3 inconsistencies found "
      "(a dead owner's slot, slots that do not add up to a device's total, usage above a "
      "limit).");
  inspect
      ->add_option("REGION", options.path,
                   std::string("the region file (e.g. ") + node::kDefaultSharedCache + ")")
      ->required();
  inspect->add_flag("--json", options.json, "print one JSON object instead of text");
  inspect->add_flag("--repair", options.repair,
                    "first reclaim the slots of dead processes (returning their memory) and "
                    "say how many");
  inspect->callback([] { std::exit(Inspect(options)); });
}

}  // namespace hami::cli
