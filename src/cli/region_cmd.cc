// hami region set: the operator's explicit change of a region's limits and of its
// processes' status. Every argument is checked (against the region too) before anything is
// changed; running processes see the change at their next reservation.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "cli/commands.h"
#include "cli/region_report.h"
#include "common/parse.h"

namespace hami::cli {

namespace {

using region::CorePolicy;
using region::SlotStatus;

struct SetOptions {
  std::string command = "hami region set";  // how messages name the command
  // How messages name a slot argument: the flag of `region set`, SLOT for suspend and resume.
  std::string suspend_label = "--suspend";
  std::string resume_label = "--resume";
  // `hami suspend|resume REGION all`: every slot holding a process, with this status.
  std::optional<region::SlotStatus> all_slots;
  std::string path;
  std::vector<std::string> memory_limits;  // DEV=SIZE
  std::vector<std::string> sm_limits;      // DEV=PCT
  std::string priority;
  std::string core_policy;
  std::vector<std::string> suspend;  // SLOT
  std::vector<std::string> resume;   // SLOT
  std::string paused;                // on|off
  std::string utilization_switch;    // on|off
  CLI::Option* priority_option = nullptr;
  CLI::Option* core_policy_option = nullptr;
  CLI::Option* paused_option = nullptr;
  CLI::Option* switch_option = nullptr;
};

// One argument, parsed; `flag` and `arg` name it in messages.
struct DeviceValue {
  std::string flag, arg;
  int device;
  uint64_t value;
};
struct SlotChange {
  std::string flag, arg;
  int slot;
  SlotStatus status;
};

struct Plan {
  std::vector<DeviceValue> memory_limits;
  std::vector<DeviceValue> sm_limits;
  std::optional<int32_t> priority;
  std::optional<CorePolicy> core_policy;
  std::vector<SlotChange> statuses;
  std::optional<bool> paused;
  std::optional<bool> utilization_switch;
  bool empty() const {
    return memory_limits.empty() && sm_limits.empty() && !priority && !core_policy &&
           statuses.empty() && !paused && !utilization_switch;
  }
};

std::string Quoted(const std::string& flag, const std::string& arg) {
  return flag + " '" + arg + "': ";
}

// The reason a strict parser gave, without its "what='text': " prefix.
std::string Reason(const Error& e, std::string_view what, std::string_view text) {
  std::string prefix = std::string(what) + "='" + std::string(text) + "': ";
  const std::string& m = e.message();
  return m.rfind(prefix, 0) == 0 ? m.substr(prefix.size()) : m;
}

// Parses DEV=VALUE arguments of `flag`; `parse` turns VALUE into a number or an Error.
template <typename ParseValue>
void ParseDeviceValues(const std::string& flag, const std::vector<std::string>& args,
                       const char* value_form, ParseValue parse, std::vector<DeviceValue>* out,
                       std::vector<std::string>* errors) {
  std::set<int> seen;
  for (const std::string& arg : args) {
    size_t eq = arg.find('=');
    if (eq == std::string::npos) {
      errors->push_back(Quoted(flag, arg) + "expected DEV=" + value_form);
      continue;
    }
    std::string dev_text = arg.substr(0, eq);
    std::string value_text = arg.substr(eq + 1);
    auto dev = ParseUint64(dev_text, "DEV");
    if (!dev.ok()) {
      errors->push_back(Quoted(flag, arg) +
                        "device index: " + Reason(dev.error(), "DEV", dev_text));
      continue;
    }
    if (*dev >= uint64_t(region::kMaxDevices)) {
      errors->push_back(Quoted(flag, arg) + "no device " + dev_text + " (a region has at most " +
                        std::to_string(region::kMaxDevices) + ")");
      continue;
    }
    Result<uint64_t> value = parse(value_text);
    if (!value.ok()) {
      errors->push_back(Quoted(flag, arg) + value.error().message());
      continue;
    }
    if (!seen.insert(int(*dev)).second) {
      errors->push_back(Quoted(flag, arg) + "device " + dev_text + " is given twice");
      continue;
    }
    out->push_back({flag, arg, int(*dev), *value});
  }
}

void ParseSlots(const std::string& flag, const std::vector<std::string>& args, SlotStatus status,
                std::set<int>* seen, std::vector<SlotChange>* out,
                std::vector<std::string>* errors) {
  for (const std::string& arg : args) {
    auto slot = ParseUint64(arg, "SLOT");
    if (!slot.ok()) {
      errors->push_back(Quoted(flag, arg) + Reason(slot.error(), "SLOT", arg));
      continue;
    }
    if (*slot >= uint64_t(region::kMaxSlots)) {
      errors->push_back(Quoted(flag, arg) + "no such slot (slots are 0 to " +
                        std::to_string(region::kMaxSlots - 1) + ")");
      continue;
    }
    if (!seen->insert(int(*slot)).second) {
      errors->push_back(Quoted(flag, arg) + "slot " + arg +
                        " is given twice (to --suspend or --resume)");
      continue;
    }
    out->push_back({flag, arg, int(*slot), status});
  }
}

// Checks every argument's syntax; appends one message per bad argument.
Plan ParseArguments(const SetOptions& o, std::vector<std::string>* errors) {
  Plan plan;
  ParseDeviceValues(
      "--memory-limit", o.memory_limits, "SIZE",
      [](const std::string& text) -> Result<uint64_t> {
        auto v = ParseSize(text, "SIZE");
        if (!v.ok()) return Error(ErrorCode::kInvalidArgument, Reason(v.error(), "SIZE", text));
        return v;
      },
      &plan.memory_limits, errors);
  ParseDeviceValues(
      "--sm-limit", o.sm_limits, "PCT",
      [](const std::string& text) -> Result<uint64_t> {
        auto v = ParseUint64(text, "PCT");
        if (!v.ok()) return Error(ErrorCode::kInvalidArgument, Reason(v.error(), "PCT", text));
        if (*v > 100) {
          return Error(ErrorCode::kInvalidArgument, text + " is not a percentage (0 to 100)");
        }
        return v;
      },
      &plan.sm_limits, errors);
  if (o.priority_option != nullptr && o.priority_option->count() > 0) {
    if (o.priority == "0" || o.priority == "1") {
      plan.priority = o.priority == "0" ? 0 : 1;
    } else {
      errors->push_back(Quoted("--priority", o.priority) + "expected 0 (high) or 1 (low)");
    }
  }
  if (o.core_policy_option != nullptr && o.core_policy_option->count() > 0) {
    bool known = false;
    for (CorePolicy c : {CorePolicy::kDefault, CorePolicy::kForce, CorePolicy::kDisable}) {
      if (o.core_policy == region::CorePolicyName(c)) {
        plan.core_policy = c;
        known = true;
      }
    }
    if (!known) {
      errors->push_back(Quoted("--core-policy", o.core_policy) +
                        "expected default, force or disable");
    }
  }
  std::set<int> slots;
  auto on_off = [errors](const char* flag, CLI::Option* opt, const std::string& v,
                         std::optional<bool>* out) {
    if (opt == nullptr || opt->count() == 0) return;
    if (v == "on") {
      *out = true;
    } else if (v == "off") {
      *out = false;
    } else {
      errors->push_back(Quoted(flag, v) + "expected on or off");
    }
  };
  on_off("--paused", o.paused_option, o.paused, &plan.paused);
  on_off("--utilization-switch", o.switch_option, o.utilization_switch, &plan.utilization_switch);
  ParseSlots(o.suspend_label, o.suspend, SlotStatus::kSuspended, &slots, &plan.statuses, errors);
  ParseSlots(o.resume_label, o.resume, SlotStatus::kRunning, &slots, &plan.statuses, errors);
  return plan;
}

// Checks the parsed arguments against the region itself.
void CheckAgainst(const region::Region& r, const Plan& plan, std::vector<std::string>* errors) {
  int devices = r.device_count();
  for (const auto* list : {&plan.memory_limits, &plan.sm_limits}) {
    for (const DeviceValue& v : *list) {
      if (v.device >= devices) {
        errors->push_back(Quoted(v.flag, v.arg) + "the region has no device " +
                          std::to_string(v.device) + " (it has " + std::to_string(devices) + ")");
      }
    }
  }
  std::set<int> held;
  for (const region::SlotView& s : r.Slots()) held.insert(s.index);
  for (const SlotChange& c : plan.statuses) {
    if (held.count(c.slot) == 0) {
      errors->push_back(Quoted(c.flag, c.arg) + "slot " + c.arg + " holds no process");
    }
  }
}

const char* PriorityName(int32_t priority) {
  return priority == 0 ? "high" : priority == 1 ? "low" : "invalid";
}

// Prints one change and makes it unless the value already stands.
template <typename Apply>
Status Change(const std::string& field, const std::string& before, const std::string& after,
              bool same, Apply apply) {
  if (same) {
    std::printf("  %s: %s (unchanged)\n", field.c_str(), after.c_str());
    return OkStatus();
  }
  HAMI_TRY(apply());
  std::printf("  %s: %s -> %s\n", field.c_str(), before.c_str(), after.c_str());
  return OkStatus();
}

Status Apply(region::Region& r, const Plan& plan) {
  const region::PolicyView before = r.Policy();
  std::printf("%s:\n", r.path().c_str());
  for (const DeviceValue& v : plan.memory_limits) {
    uint64_t old = before.memory_limit[size_t(v.device)];
    HAMI_TRY(Change("memory_limit[" + std::to_string(v.device) + "]", FormatLimit(old),
                    FormatLimit(v.value), old == v.value,
                    [&] { return r.SetMemoryLimit(v.device, v.value); }));
    const region::DeviceSnapshot snap = r.Snapshot(v.device);
    const uint64_t used = snap.used_bytes;
    if (!snap.consistent) {
      std::printf(
          "    note: device %d's usage could not be read (a write never finished and its lock "
          "is held: hami inspect says by whom)\n",
          v.device);
    } else if (v.value != 0 && used > v.value) {
      std::printf(
          "    note: %s in use on device %d, above the new limit; its reservations fail "
          "until usage drops below it\n",
          FormatBytes(used).c_str(), v.device);
    }
  }
  for (const DeviceValue& v : plan.sm_limits) {
    uint32_t old = before.sm_limit[size_t(v.device)];
    HAMI_TRY(Change("sm_limit[" + std::to_string(v.device) + "]", FormatSmLimit(old),
                    FormatSmLimit(uint32_t(v.value)), old == v.value,
                    [&] { return r.SetSmLimit(v.device, uint32_t(v.value)); }));
  }
  if (plan.priority) {
    auto name = [](int32_t p) { return std::to_string(p) + " (" + PriorityName(p) + ")"; };
    HAMI_TRY(Change("priority", name(before.priority), name(*plan.priority),
                    before.priority == *plan.priority,
                    [&] { return r.SetPriority(*plan.priority); }));
  }
  if (plan.core_policy) {
    HAMI_TRY(Change("core_policy", region::CorePolicyName(before.core_policy),
                    region::CorePolicyName(*plan.core_policy),
                    before.core_policy == *plan.core_policy,
                    [&] { return r.SetCorePolicy(*plan.core_policy); }));
  }
  auto on_off = [](bool b) { return std::string(b ? "on" : "off"); };
  if (plan.paused) {
    HAMI_TRY(Change("paused", on_off(before.paused), on_off(*plan.paused),
                    before.paused == *plan.paused, [&] { return r.SetPaused(*plan.paused); }));
  }
  if (plan.utilization_switch) {
    const bool was = before.utilization_switch != 0;
    HAMI_TRY(Change("utilization_switch", on_off(was), on_off(*plan.utilization_switch),
                    was == *plan.utilization_switch,
                    [&] { return r.SetUtilizationSwitch(*plan.utilization_switch); }));
  }
  if (!plan.statuses.empty()) {
    std::vector<region::SlotView> slots = r.Slots();
    for (const SlotChange& c : plan.statuses) {
      const region::SlotView* view = nullptr;
      for (const region::SlotView& s : slots) {
        if (s.index == c.slot) view = &s;
      }
      SlotStatus old = view != nullptr ? view->status : SlotStatus::kRunning;
      std::string field = "slot " + std::to_string(c.slot);
      if (view != nullptr) {
        field += " (pid " + std::to_string(view->pid) + ", " + Printable(view->comm) + ")";
      }
      HAMI_TRY(Change(field, region::SlotStatusName(old), region::SlotStatusName(c.status),
                      old == c.status, [&] { return r.SetSlotStatus(c.slot, c.status); }));
    }
  }
  std::printf("generation %llu -> %llu\n", static_cast<unsigned long long>(before.generation),
              static_cast<unsigned long long>(r.Policy().generation));
  return OkStatus();
}

int Set(SetOptions o) {
  const char* cmd = o.command.c_str();
  std::vector<std::string> errors;
  auto opened = OpenExistingRegion(o.path, RegionAccess::kReadWrite);
  if (opened.ok() && o.all_slots) {
    std::vector<std::string>& into = *o.all_slots == SlotStatus::kSuspended ? o.suspend : o.resume;
    for (const region::SlotView& s : opened->region->Slots()) {
      into.push_back(std::to_string(s.index));
    }
    if (into.empty()) {
      std::printf("%s: no process holds a slot; nothing to change\n",
                  opened->region->path().c_str());
      return 0;
    }
  }
  Plan plan = ParseArguments(o, &errors);
  // Nothing asked for at all (`all` of suspend or resume asks, even of a region that could
  // not be opened).
  if (errors.empty() && plan.empty() && !o.all_slots) {
    errors.push_back(
        "nothing to change: give --memory-limit, --sm-limit, --priority, --core-policy, "
        "--paused, --utilization-switch, --suspend or --resume");
  }
  if (!opened.ok()) {
    errors.push_back(opened.error().message());
  } else {
    CheckAgainst(*opened->region, plan, &errors);
  }
  if (!errors.empty()) {
    for (const std::string& e : errors) std::fprintf(stderr, "%s: %s\n", cmd, e.c_str());
    std::fprintf(stderr, "%s: nothing was changed\n", cmd);
    return 2;
  }
  Status applied = Apply(*opened->region, plan);
  std::fflush(stdout);
  if (!applied.ok()) {
    std::fprintf(stderr, "%s: %s\n%s: stopped; only the changes listed above were made\n", cmd,
                 applied.error().message().c_str(), cmd);
    return 1;
  }
  return 0;
}

}  // namespace

void AddRegionCommand(CLI::App& app) {
  static SetOptions options;
  CLI::App* region = app.add_subcommand("region", "Change a shared region");
  region->require_subcommand(1);
  CLI::App* set = region->add_subcommand(
      "set",
      "Change a region's limits or suspend and resume its processes; prints each change "
      "(old -> new). Every argument is checked first: when any is bad, nothing changes.\n"
      "Running processes see new limits at their next reservation.\n"
      "Exit status: 0 changed; 1 a change failed midway (those listed were made); 2 a bad "
      "argument or region, nothing changed.");
  set->add_option("REGION", options.path, "the region file")->required();
  auto repeatable = [](CLI::Option* opt) {
    opt->expected(1)->allow_extra_args(false)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  };
  repeatable(set->add_option("--memory-limit", options.memory_limits,
                             "device DEV's memory limit: bytes or k/m/g/t units, 0 = unlimited "
                             "(repeatable)")
                 ->type_name("DEV=SIZE"));
  repeatable(set->add_option("--sm-limit", options.sm_limits,
                             "device DEV's SM limit in percent, 0 or 100 = unlimited (repeatable)")
                 ->type_name("DEV=PCT"));
  options.priority_option =
      set->add_option("--priority", options.priority, "task priority: 0 high, 1 low")
          ->type_name("0|1");
  options.core_policy_option =
      set->add_option("--core-policy", options.core_policy, "the SM limiter's policy")
          ->type_name("default|force|disable");
  options.paused_option =
      set->add_option("--paused", options.paused,
                      "pause (on) or resume (off) every launch of the region's processes")
          ->type_name("on|off");
  options.switch_option = set->add_option("--utilization-switch", options.utilization_switch,
                                          "the switch the default core policy limits by")
                              ->type_name("on|off");
  repeatable(set->add_option("--suspend", options.suspend,
                             "suspend the process holding SLOT (see hami inspect; repeatable)")
                 ->type_name("SLOT"));
  repeatable(
      set->add_option("--resume", options.resume, "resume the process holding SLOT (repeatable)")
          ->type_name("SLOT"));
  set->callback([] { std::exit(Set(options)); });

  // hami suspend|resume REGION SLOT...|all: region set --suspend/--resume under its own name.
  for (const char* verb : {"suspend", "resume"}) {
    static SetOptions verb_options[2];
    static std::vector<std::string> slots[2];
    const int k = std::string_view(verb) == "suspend" ? 0 : 1;
    CLI::App* cmd = app.add_subcommand(
        verb, std::string(k == 0 ? "Suspend processes of a region: their launches and allocations "
                                   "wait (no CPU) until resumed"
                                 : "Resume suspended processes of a region") +
                  " (slots as hami inspect lists them, or all: every process holding a slot).\n"
                  "Exit status: 0 changed (or all, and no process holds a slot); 1 a change "
                  "failed midway (those listed were made); 2 a bad argument or region, nothing "
                  "changed.");
    cmd->add_option("REGION", verb_options[k].path, "the region file")->required();
    cmd->add_option("SLOT", slots[k], "slots to change, or all")->required();
    cmd->callback([k, verb] {
      SetOptions& o = verb_options[k];
      o.command = std::string("hami ") + verb;
      o.suspend_label = o.resume_label = "SLOT";
      const SlotStatus status = k == 0 ? SlotStatus::kSuspended : SlotStatus::kRunning;
      if (std::find(slots[k].begin(), slots[k].end(), "all") != slots[k].end()) {
        if (slots[k].size() != 1) {
          std::fprintf(stderr,
                       "%s: SLOT 'all' stands alone: give all, or slot numbers\n%s: nothing was "
                       "changed\n",
                       o.command.c_str(), o.command.c_str());
          std::exit(2);
        }
        o.all_slots = status;
      } else {
        (k == 0 ? o.suspend : o.resume) = slots[k];
      }
      std::exit(Set(o));
    });
  }
}

}  // namespace hami::cli
