#include "inventory/health.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string_view>
#include <utility>

#include "common/parse.h"
#include "common/strings.h"
#include "inventory/nvml_library.h"
#include "log/log.h"
#include "nvml/nvml.h"

namespace hami::inventory {

namespace {

constexpr unsigned long long kWatchedEvents =
    nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError | nvmlEventTypeSingleBitEccError;

// Parses one variable's comma-separated list into `ids`; true when it says "all" / "xids".
bool ParseXidList(const char* value, const char* variable, std::set<uint64_t>* ids,
                  std::vector<std::string>* warnings) {
  if (value == nullptr) return false;
  for (std::string_view item : SplitString(value, ',', true)) {
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (item.empty()) continue;
    std::string lower(item);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (lower == "all" || lower == "xids") return true;
    auto id = ParseUint64(item, variable);
    if (!id.ok()) {
      warnings->push_back(std::string(variable) + ": ignoring '" + std::string(item) +
                          "', not an Xid");
      continue;
    }
    ids->insert(*id);
  }
  return false;
}

std::string JoinIds(const std::set<uint64_t>& ids) {
  std::string s;
  for (uint64_t id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
  return s.empty() ? "none" : s;
}

}  // namespace

// ---- XidPolicy ----

XidPolicy::XidPolicy(const char* disable, const char* enable) {
  disable_all_ = ParseXidList(disable, "DP_DISABLE_HEALTHCHECKS", &disabled_, &warnings_);
  enable_all_ = ParseXidList(enable, "DP_ENABLE_HEALTHCHECKS", &enabled_, &warnings_);
  for (uint64_t id : ApplicationXids()) disabled_.insert(id);
  for (uint64_t id : enabled_) disabled_.erase(id);
}

XidPolicy XidPolicy::FromEnvironment() {
  return XidPolicy(std::getenv("DP_DISABLE_HEALTHCHECKS"), std::getenv("DP_ENABLE_HEALTHCHECKS"));
}

const std::vector<uint64_t>& XidPolicy::ApplicationXids() {
  static const std::vector<uint64_t> ids = {13, 31, 43, 45, 68, 109};
  return ids;
}

bool XidPolicy::Ignores(uint64_t xid) const {
  if (enable_all_ || enabled_.contains(xid)) return false;
  return disable_all_ || disabled_.contains(xid);
}

std::string XidPolicy::Describe() const {
  if (all_disabled()) return "health checks disabled (DP_DISABLE_HEALTHCHECKS)";
  if (enable_all_) return "ignored Xids: none";
  if (disable_all_) return "ignored Xids: all but " + JoinIds(enabled_);
  return "ignored Xids: " + JoinIds(disabled_);
}

// ---- HealthWatcher ----

struct HealthWatcher::Nvml {
  explicit Nvml(NvmlLibrary library) : lib(std::move(library)) {}
  ~Nvml() {  // before the library closes
    if (set != nullptr) fn().nvmlEventSetFree(set);
    if (initialized) fn().nvmlShutdown();
  }
  const NvmlFunctions& fn() const { return lib.fn(); }
  bool HasEventApi() const {
    return lib
        .FirstMissing({"nvmlDeviceGetSupportedEventTypes", "nvmlEventSetCreate",
                       "nvmlDeviceRegisterEvents", "nvmlEventSetWait_v2", "nvmlEventSetFree"})
        .empty();
  }

  NvmlLibrary lib;
  bool initialized = false;
  nvmlEventSet_t set = nullptr;
  std::vector<std::pair<nvmlDevice_t, std::string>> devices;  // watched, with their UUIDs
};

Result<std::unique_ptr<HealthWatcher>> HealthWatcher::Start(HealthOptions options) {
  for (const std::string& w : options.xids.warnings()) {
    HAMI_LOG(kWarn, "event=health_config warning=\"%s\"", w.c_str());
  }
  if (options.xids.all_disabled()) {
    HAMI_LOG(kInfo, "event=health_disabled reason=DP_DISABLE_HEALTHCHECKS");
    return std::unique_ptr<HealthWatcher>(new HealthWatcher(std::move(options), nullptr));
  }
  auto lib = NvmlLibrary::Open(options.nvml_library, Unload::kOnClose);
  if (!lib.ok()) {
    return Error(ErrorCode::kNotFound,
                 "cannot open " + options.nvml_library + ": " + lib.error().message());
  }
  auto n = std::make_unique<Nvml>(std::move(lib).value());
  if (std::string missing =
          n->lib.FirstMissing({"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2",
                               "nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetUUID"});
      !missing.empty()) {
    return Error(ErrorCode::kIncompatible, options.nvml_library + " has no " + missing);
  }
  const NvmlFunctions& f = n->fn();
  if (nvmlReturn_t r = f.nvmlInit_v2(); r != NVML_SUCCESS) {
    return Error(ErrorCode::kUnavailable, options.nvml_library + ": nvmlInit_v2: " + n->lib.Why(r));
  }
  n->initialized = true;
  unsigned count = 0;
  if (nvmlReturn_t r = f.nvmlDeviceGetCount_v2(&count); r != NVML_SUCCESS) {
    return Error(ErrorCode::kUnavailable,
                 options.nvml_library + ": nvmlDeviceGetCount_v2: " + n->lib.Why(r));
  }
  const bool events = n->HasEventApi();
  if (events) {
    if (nvmlReturn_t r = f.nvmlEventSetCreate(&n->set); r != NVML_SUCCESS) {
      return Error(ErrorCode::kUnavailable,
                   options.nvml_library + ": nvmlEventSetCreate: " + n->lib.Why(r));
    }
  } else {
    HAMI_LOG(kWarn, "event=health_unwatched reason=\"%s has no NVML event API\" devices=all",
             options.nvml_library.c_str());
  }

  HealthMap health;
  std::vector<std::string> unwatched;
  std::vector<HealthChange> initial;
  for (unsigned i = 0; i < count; ++i) {
    nvmlDevice_t h = nullptr;
    char uuid[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (f.nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS ||
        f.nvmlDeviceGetUUID(h, uuid, sizeof(uuid)) != NVML_SUCCESS) {
      // Not identifiable: the inventory reports it (it has no UUID to offer).
      continue;
    }
    const std::string id = uuid;
    if (!options.uuids.empty() &&
        std::find(options.uuids.begin(), options.uuids.end(), id) == options.uuids.end()) {
      continue;
    }
    health[id] = true;
    if (!events) {
      unwatched.push_back(id);
      continue;
    }
    unsigned long long supported = 0;
    nvmlReturn_t r = f.nvmlDeviceGetSupportedEventTypes(h, &supported);
    if (r == NVML_SUCCESS) r = f.nvmlDeviceRegisterEvents(h, kWatchedEvents & supported, n->set);
    if (r == NVML_ERROR_NOT_SUPPORTED) {
      HAMI_LOG(kWarn,
               "event=health_unwatched device=%s reason=\"event registration not supported\"",
               id.c_str());
      unwatched.push_back(id);
      continue;
    }
    if (r != NVML_SUCCESS) {
      health[id] = false;
      initial.push_back({id, false, "nvmlDeviceRegisterEvents: " + n->lib.Why(r)});
      continue;
    }
    n->devices.emplace_back(h, id);
  }
  HAMI_LOG(kInfo, "event=health_start watched=%zu unwatched=%zu policy=\"%s\"", n->devices.size(),
           unwatched.size(), options.xids.Describe().c_str());

  auto w = std::unique_ptr<HealthWatcher>(new HealthWatcher(std::move(options), std::move(n)));
  w->health_ = std::move(health);
  w->unwatched_ = std::move(unwatched);
  w->initial_ = std::move(initial);
  if (!w->nvml_->devices.empty() || !w->initial_.empty()) {
    w->thread_ = std::jthread([p = w.get()](std::stop_token stop) { p->Run(stop); });
  }
  return w;
}

HealthWatcher::HealthWatcher(HealthOptions options, std::unique_ptr<Nvml> nvml)
    : options_(std::move(options)), nvml_(std::move(nvml)) {}

HealthWatcher::~HealthWatcher() { Stop(); }

void HealthWatcher::Stop() {
  if (stopped_) return;
  stopped_ = true;
  if (thread_.joinable()) {
    thread_.request_stop();
    thread_.join();
  }
  nvml_.reset();
}

HealthMap HealthWatcher::health() const {
  std::lock_guard<std::mutex> l(mu_);
  return health_;
}

std::vector<std::string> HealthWatcher::unwatched() const { return unwatched_; }

bool HealthWatcher::MarkUnhealthy(const std::string& uuid) {
  std::lock_guard<std::mutex> l(mu_);
  auto it = health_.find(uuid);
  if (it == health_.end() || !it->second) return false;
  it->second = false;
  return true;
}

void HealthWatcher::Run(std::stop_token stop) {
  const std::function<void(const HealthChange&)> report = [this](const HealthChange& c) {
    HAMI_LOG(kWarn, "event=device_unhealthy device=%s reason=\"%s\"", c.uuid.c_str(),
             c.reason.c_str());
    if (options_.on_change) options_.on_change(c);
  };
  for (const HealthChange& c : initial_) report(c);
  const Nvml& n = *nvml_;
  if (n.devices.empty()) return;
  const unsigned timeout_ms = unsigned(std::max<int64_t>(1, options_.wait_timeout.count()));
  while (!stop.stop_requested()) {
    nvmlEventData_t e{};
    const nvmlReturn_t r = n.fn().nvmlEventSetWait_v2(n.set, &e, timeout_ms);
    if (r == NVML_ERROR_TIMEOUT) continue;
    if (r != NVML_SUCCESS) {
      const std::string reason = "nvmlEventSetWait_v2: " + n.lib.Why(r);
      for (const auto& [h, uuid] : n.devices) {
        if (MarkUnhealthy(uuid)) report({uuid, false, reason});
      }
      // Every GPU is already unhealthy and stays so: nothing more to watch.
      return;
    }
    Handle(e, report);
    {
      std::lock_guard<std::mutex> l(mu_);
      ++events_handled_;
    }
    cv_.notify_all();
  }
}

void HealthWatcher::Handle(const nvmlEventData_t& e,
                           const std::function<void(const HealthChange&)>& report) {
  const Nvml& n = *nvml_;
  if (e.eventType != nvmlEventTypeXidCriticalError) {
    HAMI_LOG(kInfo, "event=nvml_event_skipped type=0x%llx data=%llu",
             static_cast<unsigned long long>(e.eventType),
             static_cast<unsigned long long>(e.eventData));
    return;
  }
  auto it = std::find_if(n.devices.begin(), n.devices.end(),
                         [&](const auto& d) { return d.first == e.device; });
  if (it == n.devices.end()) return;  // not a GPU this watcher watches
  if (options_.xids.Ignores(e.eventData)) {
    HAMI_LOG(kInfo, "event=xid_ignored device=%s xid=%llu", it->second.c_str(),
             static_cast<unsigned long long>(e.eventData));
    return;
  }
  if (MarkUnhealthy(it->second)) report({it->second, false, "Xid " + std::to_string(e.eventData)});
}

uint64_t HealthWatcher::events_handled() const {
  std::lock_guard<std::mutex> l(mu_);
  return events_handled_;
}

bool HealthWatcher::WaitForEvents(uint64_t count, std::chrono::milliseconds timeout) const {
  std::unique_lock<std::mutex> l(mu_);
  return cv_.wait_for(l, timeout, [&] { return events_handled_ >= count; });
}

}  // namespace hami::inventory
