#include "inventory/nvml_sampler.h"

#include <utility>

#include "inventory/nvml_library.h"
#include "nvml/nvml.h"

namespace hami::inventory {

struct NvmlSampler::Nvml {
  explicit Nvml(NvmlLibrary library) : lib(std::move(library)) {}
  ~Nvml() {  // before the library closes
    if (initialized) lib.fn().nvmlShutdown();
  }

  NvmlLibrary lib;
  bool initialized = false;
};

namespace {

// NVML's running-process query: grows the buffer until it fits.
template <typename F>
nvmlReturn_t Processes(F fn, nvmlDevice_t dev, std::vector<nvmlProcessInfo_t>& out) {
  unsigned int count = 0;
  out.clear();
  nvmlReturn_t r = fn(dev, &count, nullptr);
  for (int attempt = 0; attempt < 4 && r == NVML_ERROR_INSUFFICIENT_SIZE; ++attempt) {
    out.resize(count + 8);
    count = unsigned(out.size());
    r = fn(dev, &count, out.data());
  }
  if (r != NVML_SUCCESS) {
    out.clear();
    return r;
  }
  out.resize(count);
  return r;
}

}  // namespace

NvmlSampler::NvmlSampler(std::unique_ptr<Nvml> nvml) : nvml_(std::move(nvml)) {}
NvmlSampler::~NvmlSampler() = default;

Result<std::unique_ptr<NvmlSampler>> NvmlSampler::Open(const std::string& library) {
  auto lib = NvmlLibrary::Open(library, Unload::kOnClose);
  if (!lib.ok()) {
    return Error(ErrorCode::kNotFound, "NVML library " + library + ": " + lib.error().message());
  }
  auto n = std::make_unique<Nvml>(std::move(lib).value());
  if (std::string missing = n->lib.FirstMissing(
          {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
           "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo"});
      !missing.empty()) {
    return Error(ErrorCode::kIncompatible, "NVML library " + library + ": lacks " + missing);
  }
  const NvmlFunctions& f = n->lib.fn();
  if (nvmlReturn_t r = f.nvmlInit_v2(); r != NVML_SUCCESS) {
    return Error(ErrorCode::kUnavailable, "nvmlInit_v2: " + n->lib.Why(r));
  }
  n->initialized = true;
  unsigned int count = 0;
  if (nvmlReturn_t r = f.nvmlDeviceGetCount_v2(&count); r != NVML_SUCCESS) {
    return Error(ErrorCode::kUnavailable, "nvmlDeviceGetCount_v2: " + n->lib.Why(r));
  }
  return std::unique_ptr<NvmlSampler>(new NvmlSampler(std::move(n)));
}

NodeSample NvmlSampler::Sample() {
  const NvmlLibrary& lib = nvml_->lib;
  const NvmlFunctions& n = lib.fn();
  NodeSample out;
  unsigned int count = 0;
  if (nvmlReturn_t r = n.nvmlDeviceGetCount_v2(&count); r != NVML_SUCCESS) {
    out.error = "nvmlDeviceGetCount_v2: " + lib.Why(r);
    return out;
  }
  out.ok = true;
  uint64_t newest_us = last_util_timestamp_us_;
  std::vector<nvmlProcessInfo_t> procs;
  std::vector<nvmlProcessUtilizationSample_t> util;
  for (unsigned int i = 0; i < count; ++i) {
    GpuSample g;
    g.index = int(i);
    auto fail = [&](const char* what, nvmlReturn_t r) {
      if (g.ok) g.error = std::string(what) + ": " + lib.Why(r);
      g.ok = false;
    };
    nvmlDevice_t dev = nullptr;
    if (nvmlReturn_t r = n.nvmlDeviceGetHandleByIndex_v2(i, &dev); r != NVML_SUCCESS) {
      fail("nvmlDeviceGetHandleByIndex_v2", r);
      out.gpus.push_back(std::move(g));
      continue;
    }
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t r = n.nvmlDeviceGetUUID(dev, buf, sizeof(buf)); r == NVML_SUCCESS) {
      g.uuid = buf;
    } else {
      fail("nvmlDeviceGetUUID", r);
    }
    char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
    if (nvmlReturn_t r = n.nvmlDeviceGetName(dev, name, sizeof(name)); r == NVML_SUCCESS) {
      g.name = name;
    } else {
      fail("nvmlDeviceGetName", r);
    }
    nvmlMemory_t mem{};
    if (nvmlReturn_t r = n.nvmlDeviceGetMemoryInfo(dev, &mem); r == NVML_SUCCESS) {
      g.memory_used_bytes = mem.used;
      g.memory_total_bytes = mem.total;
    } else {
      fail("nvmlDeviceGetMemoryInfo", r);
    }
    if (n.nvmlDeviceGetUtilizationRates != nullptr) {
      nvmlUtilization_t u{};
      if (nvmlReturn_t r = n.nvmlDeviceGetUtilizationRates(dev, &u); r == NVML_SUCCESS) {
        g.utilization = u.gpu / 100.0;
        g.memory_utilization = u.memory / 100.0;
      } else if (r != NVML_ERROR_NOT_SUPPORTED) {
        fail("nvmlDeviceGetUtilizationRates", r);
      }
    }
    auto add = [&](auto fn, const char* what) {
      if (fn == nullptr) return;
      nvmlReturn_t r = Processes(fn, dev, procs);
      if (r != NVML_SUCCESS) {
        if (r != NVML_ERROR_NOT_SUPPORTED) fail(what, r);
        return;
      }
      for (const nvmlProcessInfo_t& p : procs) {
        bool seen = false;
        for (const GpuProcess& q : g.processes) seen = seen || q.pid == p.pid;
        if (seen) continue;
        uint64_t bytes =
            p.usedGpuMemory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)
                ? 0
                : p.usedGpuMemory;
        g.processes.push_back(GpuProcess{p.pid, bytes});
      }
    };
    add(n.nvmlDeviceGetComputeRunningProcesses_v3, "nvmlDeviceGetComputeRunningProcesses_v3");
    add(n.nvmlDeviceGetGraphicsRunningProcesses_v3, "nvmlDeviceGetGraphicsRunningProcesses_v3");
    if (n.nvmlDeviceGetProcessUtilization != nullptr && !g.processes.empty()) {
      unsigned int samples = unsigned(g.processes.size() + 8);
      util.assign(samples, nvmlProcessUtilizationSample_t{});
      nvmlReturn_t r =
          n.nvmlDeviceGetProcessUtilization(dev, util.data(), &samples, last_util_timestamp_us_);
      if (r == NVML_SUCCESS) {
        for (unsigned int s = 0; s < samples && s < util.size(); ++s) {
          g.process_sm_percent[util[s].pid] += util[s].smUtil;
          newest_us = std::max<uint64_t>(newest_us, util[s].timeStamp);
        }
      }
      // NOT_FOUND (no sample since the last one) and the rest: no per-process figures.
    }
    out.gpus.push_back(std::move(g));
  }
  last_util_timestamp_us_ = newest_us;
  return out;
}

}  // namespace hami::inventory
