#include "sim/options.h"

#include <cuda.h>

#include <cstdlib>

#include "common/kill_point.h"
#include "common/parse.h"
#include "sim/device_nodes.h"

namespace hami::sim {

namespace {

template <typename T>
Status InRange(T v, T lo, T hi, const char* name, std::string_view text) {
  if (v < lo || v > hi) {
    return Error(ErrorCode::kInvalidArgument, std::string(name) + "='" + std::string(text) +
                                                  "': must be from " + std::to_string(lo) + " to " +
                                                  std::to_string(hi));
  }
  return OkStatus();
}

#define HAMI_SIM_U64(field, name, lo, hi)            \
  [](SimOptions* o, std::string_view v) -> Status {  \
    uint64_t x = HAMI_TRY(ParseUint64(v, name));     \
    HAMI_TRY(InRange<uint64_t>(x, lo, hi, name, v)); \
    o->field = decltype(o->field)(x);                \
    return OkStatus();                               \
  }

constexpr uint64_t kTenSecondsUs = 10'000'000;
constexpr uint64_t kOneSecondNs = 1'000'000'000;

const SimOptionInfo kOptions[] = {
    {"HAMI_SIM_PROFILE", "h100-80g:2",
     "devices: profile[:count] entries separated by commas (see `hami sim profiles`), or none",
     [](SimOptions* o, std::string_view v) -> Status {
       o->profile_spec = std::string(v);
       return OkStatus();
     }},
    {"HAMI_SIM_NODE", "", "a name that seeds device UUIDs, so simulated nodes can differ",
     [](SimOptions* o, std::string_view v) -> Status {
       o->node = std::string(v);
       return OkStatus();
     }},
    {"HAMI_SIM_STATE", "/tmp/hami-sim.state",
     "the state file every process of the simulated machine shares (memory, processes, time)",
     [](SimOptions* o, std::string_view v) -> Status {
       if (v.empty() || v[0] != '/') {
         return Error(ErrorCode::kInvalidArgument,
                      "HAMI_SIM_STATE='" + std::string(v) + "': must be an absolute path");
       }
       o->state_path = std::string(v);
       return OkStatus();
     }},
    {"HAMI_SIM_DEVICE_NODES", kDefaultDeviceNodesPath,
     "the file listing the GPUs whose device nodes the process has, one UUID a line (a "
     "container's, from the node's toolkit); absent: every GPU",
     [](SimOptions* o, std::string_view v) -> Status {
       if (v.empty() || v[0] != '/') {
         return Error(ErrorCode::kInvalidArgument,
                      "HAMI_SIM_DEVICE_NODES='" + std::string(v) + "': must be an absolute path");
       }
       o->device_nodes_path = std::string(v);
       return OkStatus();
     }},
    {"HAMI_SIM_DRIVER_VERSION", "CUDA_VERSION of the headers",
     "what cuDriverGetVersion reports (e.g. 12040 for 12.4)",
     HAMI_SIM_U64(driver_version, "HAMI_SIM_DRIVER_VERSION", 2000u, 99990u)},
    {"HAMI_SIM_INIT_US", "0", "extra latency of the first cuInit in a process, microseconds",
     HAMI_SIM_U64(init_us, "HAMI_SIM_INIT_US", 0u, kTenSecondsUs)},
    {"HAMI_SIM_CTX_CREATE_US", "0", "latency of creating a context, microseconds",
     HAMI_SIM_U64(ctx_create_us, "HAMI_SIM_CTX_CREATE_US", 0u, kTenSecondsUs)},
    {"HAMI_SIM_CTX_SERIALIZE", "0",
     "1: context creation is serialized across all processes of the machine",
     [](SimOptions* o, std::string_view v) -> Status {
       o->ctx_serialize = HAMI_TRY(ParseBool(v, "HAMI_SIM_CTX_SERIALIZE"));
       return OkStatus();
     }},
    {"HAMI_SIM_NVML_US", "0", "latency of every NVML call, microseconds",
     HAMI_SIM_U64(nvml_us, "HAMI_SIM_NVML_US", 0u, kTenSecondsUs)},
    {"HAMI_SIM_LAUNCH_NS", "3000", "device time of a kernel launch beyond its waves, nanoseconds",
     HAMI_SIM_U64(launch_ns, "HAMI_SIM_LAUNCH_NS", 0u, kOneSecondNs)},
    {"HAMI_SIM_WAVE_NS", "20000",
     "device time of one wave of blocks (all SMs busy once), nanoseconds; kernels of a module "
     "manifest may set their own",
     HAMI_SIM_U64(wave_ns, "HAMI_SIM_WAVE_NS", 1u, 10 * kOneSecondNs)},
    {"HAMI_SIM_QUEUE_DEPTH", "1024",
     "launches a stream may have pending before the next launch call blocks",
     HAMI_SIM_U64(queue_depth, "HAMI_SIM_QUEUE_DEPTH", 1u, 65536u)},
    {"HAMI_SIM_UTIL_WINDOW_MS", "1000",
     "the period nvmlDeviceGetUtilizationRates averages over, milliseconds",
     HAMI_SIM_U64(util_window_ms, "HAMI_SIM_UTIL_WINDOW_MS", 10u, 60000u)},
    {"HAMI_SIM_CONTEXT_SIZE", "the profile's",
     "device memory one context costs (k/m/g suffixes), overriding the profile",
     [](SimOptions* o, std::string_view v) -> Status {
       o->context_bytes = HAMI_TRY(ParseSize(v, "HAMI_SIM_CONTEXT_SIZE"));
       return OkStatus();
     }},
    {"HAMI_SIM_ALLOC_GRANULARITY", "2m",
     "allocation page: large allocations round up to it, small ones share such pages",
     [](SimOptions* o, std::string_view v) -> Status {
       uint64_t g = HAMI_TRY(ParseSize(v, "HAMI_SIM_ALLOC_GRANULARITY"));
       if (g == 0 || (g & (g - 1)) != 0 || g > (1ull << 30)) {
         return Error(ErrorCode::kInvalidArgument,
                      "HAMI_SIM_ALLOC_GRANULARITY='" + std::string(v) +
                          "': must be a power of two from 1 byte to 1g");
       }
       o->alloc_granularity = g;
       return OkStatus();
     }},
    {"HAMI_SIM_LOG_LEVEL", "2", "0 off, 1 errors, 2 warnings, 3 info, 4 debug",
     HAMI_SIM_U64(log_level, "HAMI_SIM_LOG_LEVEL", 0u, 4u)},
    {"HAMI_SIM_KILL_POINT", "",
     "tests only: SIGKILL the process at the named point (e.g. device-lock-held)",
     [](SimOptions* o, std::string_view v) -> Status {
       if (!v.empty()) HAMI_TRY(ParseKillPoint(v, KillPointOwner::kSim, "HAMI_SIM_KILL_POINT"));
       o->kill_point = std::string(v);
       return OkStatus();
     }},
};

#undef HAMI_SIM_U64

}  // namespace

std::span<const SimOptionInfo> SimOptionTable() { return kOptions; }

Result<SimOptions> LoadSimOptions(const GetEnvFn& getenv_fn) {
  SimOptions o;
  o.profile_spec = "h100-80g:2";
  o.state_path = "/tmp/hami-sim.state";
  o.device_nodes_path = kDefaultDeviceNodesPath;
  o.driver_version = CUDA_VERSION;
  o.launch_ns = 3000;
  o.wave_ns = 20000;
  o.queue_depth = 1024;
  o.util_window_ms = 1000;
  o.alloc_granularity = 2ull << 20;
  o.log_level = 2;
  for (const SimOptionInfo& info : kOptions) {
    const char* v = getenv_fn(info.name);
    if (v == nullptr) continue;
    HAMI_TRY(info.apply(&o, v));
  }
  return o;
}

Result<SimOptions> LoadSimOptionsFromEnvironment() {
  return LoadSimOptions([](const char* name) { return std::getenv(name); });
}

}  // namespace hami::sim
