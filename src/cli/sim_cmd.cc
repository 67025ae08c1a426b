// hami sim: the simulated GPU's profiles, options and live state.
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "common/clock.h"
#include "common/parse.h"
#include "sim/options.h"
#include "sim/profiles.h"
#include "sim/state.h"

namespace hami::cli {

namespace {

using sim::DeviceProfile;

void PrintProfiles(bool json) {
  if (json) {
    nlohmann::json out = nlohmann::json::array();
    for (const DeviceProfile& p : sim::Profiles()) {
      out.push_back(
          {{"profile", p.key},
           {"name", p.name},
           {"memory_mib", p.memory_mib},
           {"reserved_mib", p.reserved_mib},
           {"context_mib", p.context_mib},
           {"sm_count", p.sm_count},
           {"max_threads_per_sm", p.max_threads_per_sm},
           {"compute_capability", std::to_string(p.cc_major) + "." + std::to_string(p.cc_minor)}});
    }
    std::printf("%s\n", out.dump(2).c_str());
    return;
  }
  std::printf("%-10s %-24s %10s %5s %8s %4s\n", "PROFILE", "NAME", "MEMORY", "SMs", "THR/SM", "CC");
  for (const DeviceProfile& p : sim::Profiles()) {
    std::printf("%-10s %-24s %6llu MiB %5d %8d %d.%d\n", std::string(p.key).c_str(),
                std::string(p.name).c_str(), static_cast<unsigned long long>(p.memory_mib),
                p.sm_count, p.max_threads_per_sm, p.cc_major, p.cc_minor);
  }
  std::printf(
      "\nChoose with HAMI_SIM_PROFILE=profile[:count][,...] (default %s), or\n"
      "`hami run --sim PROFILE -- CMD`.\n",
      std::string(sim::kDefaultProfileSpec).c_str());
}

void PrintOptions() {
  for (const sim::SimOptionInfo& o : sim::SimOptionTable()) {
    const char* v = std::getenv(o.name);
    std::printf("%-28s %s\n    default: %s%s%s\n", o.name, o.doc, o.default_text,
                v != nullptr ? "    set: " : "", v != nullptr ? v : "");
  }
}

int PrintStatus(const std::string& path, bool json) {
  auto state = sim::SharedState::OpenExisting(path);
  if (!state.ok()) {
    std::fprintf(stderr, "hami sim status: %s\n", state.error().message().c_str());
    return 1;
  }
  sim::SharedState& s = **state;
  s.SweepDead();  // processes that died still hold memory until someone reclaims it
  int64_t now = MonotonicNs();
  nlohmann::json out = {
      {"state", path}, {"profile", s.profile_spec()}, {"devices", nlohmann::json::array()}};
  for (const sim::DeviceSpec& d : s.devices()) {
    sim::BusyWindow w = s.DeviceBusy(d.index, now - 1000000000, now);
    int util = w.covered_ns > 0 ? int(w.busy_ns * 100 / w.covered_ns) : 0;
    nlohmann::json dev = {{"index", d.index},
                          {"name", d.profile->name},
                          {"uuid", d.uuid},
                          {"pci_bus_id", d.pci_bus_id},
                          {"memory_total_bytes", d.total_bytes()},
                          {"memory_reserved_bytes", d.reserved_bytes()},
                          {"memory_used_bytes", s.UsedBytes(d.index)},
                          {"utilization_percent", util},
                          {"processes", nlohmann::json::array()}};
    for (const sim::ProcessView& p : s.Processes(d.index)) {
      dev["processes"].push_back({{"host_pid", p.host_pid},
                                  {"pid", p.ns_pid},
                                  {"name", p.comm},
                                  {"contexts", p.contexts},
                                  {"memory_used_bytes", p.used_bytes}});
    }
    out["devices"].push_back(dev);
  }
  if (json) {
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("simulated machine %s (state %s)\n", s.profile_spec().c_str(), path.c_str());
  std::printf("%-4s %-24s %-41s %-25s %5s\n", "GPU", "NAME", "UUID", "MEMORY USED / TOTAL", "UTIL");
  for (const auto& d : out["devices"]) {
    std::string mem = FormatBytes(d["memory_used_bytes"].get<uint64_t>()) + " / " +
                      FormatBytes(d["memory_total_bytes"].get<uint64_t>() -
                                  d["memory_reserved_bytes"].get<uint64_t>());
    std::printf("%-4d %-24s %-41s %-25s %4d%%\n", d["index"].get<int>(),
                d["name"].get<std::string>().c_str(), d["uuid"].get<std::string>().c_str(),
                mem.c_str(), d["utilization_percent"].get<int>());
  }
  std::printf("\n%-4s %-10s %-10s %-16s %s\n", "GPU", "HOST PID", "PID", "NAME", "MEMORY");
  bool any = false;
  for (const auto& d : out["devices"]) {
    for (const auto& p : d["processes"]) {
      any = true;
      std::printf("%-4d %-10d %-10d %-16s %s\n", d["index"].get<int>(), p["host_pid"].get<int>(),
                  p["pid"].get<int>(), p["name"].get<std::string>().c_str(),
                  FormatBytes(p["memory_used_bytes"].get<uint64_t>()).c_str());
    }
  }
  if (!any) std::printf("(no process holds a context)\n");
  return 0;
}

}  // namespace

void AddSimCommand(CLI::App& app) {
  CLI::App* sim = app.add_subcommand(
      "sim", "The simulated GPU: list its profiles (default), options and live state");
  static bool json = false;
  sim->add_flag("--json", json, "print JSON");
  sim->callback([sim] {
    if (sim->get_subcommands().empty()) PrintProfiles(json);
  });

  CLI::App* profiles = sim->add_subcommand("profiles", "List the device profiles");
  profiles->add_flag("--json", json, "print JSON");
  profiles->callback([] { PrintProfiles(json); });

  sim->add_subcommand("options", "List every HAMI_SIM_* variable, its default and its value")
      ->callback(PrintOptions);

  CLI::App* status = sim->add_subcommand(
      "status", "Show the simulated machine's devices and processes, like nvidia-smi");
  static std::string state_path;
  status->add_option("--state", state_path,
                     "state file (default: $HAMI_SIM_STATE or "
                     "/tmp/hami-sim.state)");
  status->add_flag("--json", json, "print JSON");
  status->callback([] {
    std::string path = state_path;
    if (path.empty()) {
      const char* env = std::getenv("HAMI_SIM_STATE");
      path = env != nullptr && *env != '\0' ? env : "/tmp/hami-sim.state";
    }
    std::exit(PrintStatus(path, json));
  });
}

}  // namespace hami::cli
