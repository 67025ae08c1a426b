// hami inspect: one shared region — its policy, its usage, every process holding a slot —
// and whether it is consistent (Region::Check).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.h"
#include "cli/region_finder.h"
#include "cli/region_report.h"
#include "common/parse.h"
#include "inventory/nvml_sampler.h"
#include "limits/vocabulary.h"
#include "node/paths.h"
#include "region/crosscheck.h"

namespace hami::cli {

namespace {

using nlohmann::json;

// Exit statuses (the --help text lists them).
constexpr int kExitConsistent = 0;
constexpr int kExitNotRepaired = 1;
constexpr int kExitUnusable = 2;
constexpr int kExitInconsistent = 3;
constexpr int kExitNotCrossChecked = 4;

struct InspectOptions {
  std::string path;
  std::string hook_path = node::kDefaultHookPath;
  bool json = false;
  bool repair = false;
  std::string nvml_library = "libnvidia-ml.so.1";
  bool no_nvml = false;
  std::string tolerance = "64m";
};

// The NVML cross-check, run now from the host: what NVML shows each live slot's host PID
// holding on each of the region's devices (by UUID) against the slot's books. Adds a
// "crosscheck" object to `report` (run or why not) and an inconsistency for each gap the
// region does not already record for that slot and device.
void CrossCheckNow(const region::Region& r, const InspectOptions& o, json& report) {
  json& out = report["crosscheck"];
  if (o.no_nvml) {
    out = {{"run", false}, {"reason", "--no-nvml"}};
    return;
  }
  auto tolerance = ParseSize(o.tolerance, "--tolerance");
  if (!tolerance.ok()) {
    out = {{"run", false}, {"reason", tolerance.error().message()}};
    return;
  }
  auto sampler = inventory::NvmlSampler::Open(o.nvml_library);
  if (!sampler.ok()) {
    out = {{"run", false}, {"reason", sampler.error().message()}};
    return;
  }
  const inventory::NodeSample sample = (*sampler)->Sample();
  if (!sample.ok) {
    out = {{"run", false}, {"reason", sample.error}};
    return;
  }
  const region::PolicyView policy = r.Policy();
  const std::vector<region::SlotView> slots = r.Slots();
  json devices = json::array();
  json unchecked = json::array();
  for (int d = 0; d < policy.device_count; ++d) {
    const std::string& uuid = policy.uuid[size_t(d)];
    auto gpu = std::find_if(
        sample.gpus.begin(), sample.gpus.end(),
        [&](const inventory::GpuSample& g) { return !uuid.empty() && g.uuid == uuid; });
    if (gpu == sample.gpus.end()) {  // not on this host (or a region without UUIDs)
      unchecked.push_back(
          {{"index", d},
           {"reason", uuid.empty() ? std::string("the region records no UUID for it")
                                   : "NVML lists no GPU " + Printable(uuid)}});
      continue;
    }
    std::vector<region::NvmlProcessUse> uses;
    for (const inventory::GpuProcess& p : gpu->processes)
      uses.push_back({pid_t(p.pid), p.used_bytes});
    const region::DeviceCrossCheck check = region::CrossCheckDevice(d, slots, uses, *tolerance);
    devices.push_back({{"index", d},
                       {"unaccounted_bytes", check.TotalGap()},
                       {"unchecked_processes", check.unchecked}});
    for (const region::AccountingGap& g : check.gaps) {
      const bool recorded = std::any_of(
          report["inconsistencies"].begin(), report["inconsistencies"].end(), [&](const json& i) {
            return i["kind"] == "unaccounted" && i["slot"] == g.slot && i["device"] == d;
          });
      if (recorded) continue;
      report["inconsistencies"].push_back(
          {{"kind", "unaccounted"},
           {"device", d},
           {"slot", g.slot},
           {"message", "device " + std::to_string(d) + ": host pid " + std::to_string(g.host_pid) +
                           " (pid " + std::to_string(g.pid) + ") holds " +
                           FormatBytes(g.nvml_bytes) + " as NVML counts it now but its books say " +
                           FormatBytes(g.accounted_bytes) + ": " + FormatBytes(g.gap_bytes) + " (" +
                           std::to_string(g.gap_bytes) +
                           " bytes) unaccounted (memory allocated past libvgpu: edited counters, "
                           "a driver loaded with dlmopen, a static binary or raw ioctls)"}});
    }
  }
  out = {{"run", true},
         {"nvml_library", o.nvml_library},
         {"devices", devices},
         {"unchecked_devices", unchecked}};
}

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

  const json& outside = j["outside_budget"];
  if (pol["oversubscribe"].get<bool>() || outside["spilled_bytes"].get<uint64_t>() != 0 ||
      outside["imported_bytes"].get<uint64_t>() != 0) {
    std::printf(
        "\noutside the device budget: %s served from host memory of a %s host budget (peak "
        "%s, %llu refused); %s mapped from other processes\n",
        FormatBytes(outside["spilled_bytes"].get<uint64_t>()).c_str(),
        FormatBytes(outside["host_limit_bytes"].get<uint64_t>()).c_str(),
        FormatBytes(outside["spilled_peak_bytes"].get<uint64_t>()).c_str(),
        static_cast<unsigned long long>(outside["spill_rejected"].get<uint64_t>()),
        FormatBytes(outside["imported_bytes"].get<uint64_t>()).c_str());
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
      if (const uint64_t spilled = s["spilled_bytes"].get<uint64_t>(); spilled != 0) {
        memory += ", host: " + FormatBytes(spilled);
      }
      if (const uint64_t imported = s["imported_bytes"].get<uint64_t>(); imported != 0) {
        memory += ", imported: " + FormatBytes(imported);
      }
      std::printf("%-5d %-9s %-5s %-8d %-8s %-14s %-9s %-16s %-20s %s\n", s["index"].get<int>(),
                  Str(s["state"]).c_str(), s["alive"].get<bool>() ? "yes" : "no",
                  s["pid"].get<int>(), host_pid == 0 ? "-" : std::to_string(host_pid).c_str(),
                  Str(s["identity"]).c_str(), Str(s["status"]).c_str(), Str(s["comm"]).c_str(),
                  Str(s["registered"]["time"]).c_str(), memory.empty() ? "-" : memory.c_str());
    }
  }

  PrintIdentity(j);

  const json& cc = j["crosscheck"];
  std::string not_checked;  // what the NVML cross-check did not cover; empty when it covered all
  if (cc["run"].get<bool>()) {
    std::printf("\ncross-check: NVML (%s) against the books of %zu of %d device(s)\n",
                Str(cc["nvml_library"]).c_str(), cc["devices"].size(),
                pol["device_count"].get<int>());
    for (const json& u : cc["unchecked_devices"]) {
      std::printf("  device %d not checked: %s\n", u["index"].get<int>(), Str(u["reason"]).c_str());
      not_checked +=
          (not_checked.empty() ? "device " : ", ") + std::to_string(u["index"].get<int>());
    }
  } else {
    std::printf("\ncross-check: not made: %s\n", Str(cc["reason"]).c_str());
    not_checked = "any device";
  }

  if (j.contains("repair")) {
    const json& r = j["repair"];
    if (r.contains("error")) {
      std::printf("\nrepair: not done: %s\n", Str(r["error"]).c_str());
    } else {
      std::printf("\nrepair: reclaimed %d dead slot(s)\n", r["reclaimed"].get<int>());
    }
  }
  const json& bad = j["inconsistencies"];
  if (bad.empty() && not_checked.empty()) {
    std::printf(
        "\ncheck: consistent (the region's own records, and NVML's view of every device)\n");
  } else if (bad.empty()) {
    std::printf(
        "\ncheck: the region's own records are consistent; NVML's view was not checked for %s, "
        "so that part is unknown\n",
        not_checked.c_str());
  } else {
    std::printf("\ncheck: %zu inconsistenc%s\n", bad.size(), bad.size() == 1 ? "y" : "ies");
    for (const json& i : bad) std::printf("  %s\n", Str(i["message"]).c_str());
  }
}

int Inspect(InspectOptions o) {
  std::string named_by;  // where the caller's region came from, when no path was given
  if (o.path.empty()) {
    std::string problem;
    std::optional<CallerRegion> mine = FindCallerRegion(&problem);
    if (!mine) {
      std::fputs(NoRegionGivenMessage("hami inspect", problem, ListVisibleRegions(o.hook_path),
                                      o.hook_path)
                     .c_str(),
                 stderr);
      return kExitUnusable;
    }
    o.path = mine->path;
    named_by = " (" + mine->source + ")";
  }
  auto opened = OpenExistingRegion(o.path, RegionAccess::kReadWriteElseReadOnly);
  if (!opened.ok()) {
    std::fprintf(stderr, "hami inspect: %s%s\n", opened.error().message().c_str(),
                 named_by.c_str());
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
  CrossCheckNow(*opened->region, o, report);
  if (o.repair) report["repair"] = repair;
  if (o.json) {
    std::printf("%s\n", DumpJson(report).c_str());
  } else {
    PrintText(report);
  }
  if (not_repaired) return kExitNotRepaired;
  if (!report["inconsistencies"].empty()) return kExitInconsistent;
  const json& cc = report["crosscheck"];
  const bool cross_checked = cc["run"].get<bool>() && cc["unchecked_devices"].empty();
  return cross_checked || o.no_nvml ? kExitConsistent : kExitNotCrossChecked;
}

}  // namespace

void AddInspectCommand(CLI::App& app) {
  static InspectOptions options;
  CLI::App* inspect = app.add_subcommand(
      "inspect",
      "Show a shared region: its policy, per-device usage and every process holding a slot, "
      "then check it.\n"
      "Without REGION: the region your environment names (" +
          std::string(limits::KeyName(limits::Key::kSharedCache)) + ", from " +
          node::kLimitsFilePath +
          " or the environment, as libvgpu reads it); when it names none, the regions this host "
          "shows are listed, with owner and pod, and none is read.\n"
          "Exit status: 0 consistent (with --no-nvml: the region's own records); 1 --repair was "
          "asked but the region could only be opened read-only; 2 the region cannot be opened or "
          "fails validation, or no REGION was given and the environment names none (the regions "
          "this host shows are listed); 3 inconsistencies found (a dead owner's slot, slots that "
          "do not add up to a device's total, usage above a limit, a policy conflict, a wedged "
          "lock, "
          "device memory NVML shows a process holding past its books); 4 no inconsistency found, "
          "but the NVML cross-check could not be made for every device (NVML could not be opened "
          "or "
          "sampled, or does not list a device's UUID): that part is unknown.\n"
          "The NVML cross-check runs now when NVML can be opened (the host's PIDs are the slots'), "
          "besides what libvgpu's own check recorded in the region.");
  inspect->add_option("REGION", options.path,
                      std::string("the region file (e.g. ") + node::kDefaultSharedCache +
                          "); default: the one your environment names");
  inspect
      ->add_option("--hook-path", options.hook_path,
                   std::string("the device plugin's hook path, whose vgpu/containers are listed "
                               "when no region is given (default ") +
                       node::kDefaultHookPath + ")")
      ->type_name("DIR");
  inspect->add_flag("--json", options.json, "print one JSON object instead of text");
  inspect->add_option("--nvml-library", options.nvml_library,
                      "the NVML library for the cross-check (a soname is searched)");
  inspect->add_flag("--no-nvml", options.no_nvml, "do not run the NVML cross-check now");
  inspect->add_option("--tolerance", options.tolerance,
                      "how much more NVML may show for a process than its books (bytes or "
                      "k/m/g/t units)");
  inspect->add_flag("--repair", options.repair,
                    "first reclaim the slots of dead processes (returning their memory) and "
                    "say how many");
  inspect->callback([] { std::exit(Inspect(options)); });
}

}  // namespace hami::cli
