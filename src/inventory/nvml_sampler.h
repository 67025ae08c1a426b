// The monitor's view of the GPUs through NVML: one sample of every device (memory, utilization,
// the processes holding memory and their SM utilization), taken on the sampling tick and
// cached, so that a scrape never calls NVML.
//
// NVML is opened through the one loader (nvml_library.h), initialized once by Open, and shut
// down and closed by the destructor.
//
// Thread safety: Sample() from one thread at a time; the NodeSample it returns is a plain value.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/result.h"

namespace hami::inventory {

struct GpuProcess {
  uint32_t pid = 0;         // host PID, as NVML lists it
  uint64_t used_bytes = 0;  // 0 when NVML does not know (NVML_VALUE_NOT_AVAILABLE)
};

struct GpuSample {
  int index = -1;
  std::string uuid;
  std::string name;
  // False when a query failed; `error` names it ("nvmlDeviceGetMemoryInfo: GPU is lost").
  bool ok = true;
  std::string error;
  uint64_t memory_used_bytes = 0;
  uint64_t memory_total_bytes = 0;
  double utilization = 0;             // kernels ran this share of the last period (0..1)
  double memory_utilization = 0;      // memory controller busy share (0..1)
  std::vector<GpuProcess> processes;  // compute, then graphics ones not already listed
  std::map<uint32_t, uint32_t> process_sm_percent;  // host PID -> SM utilization, percent
};

struct NodeSample {
  bool ok = false;    // false: no sample (NVML could not be opened or read)
  std::string error;  // why, when !ok
  std::vector<GpuSample> gpus;
};

class NvmlSampler {
 public:
  // Opens `library` (a soname is searched, a path opened as is) and initializes NVML. Fails:
  // kNotFound (the loader's message), kIncompatible (a required function missing),
  // kUnavailable (nvmlInit_v2 or nvmlDeviceGetCount_v2 failed, with NVML's message).
  static Result<std::unique_ptr<NvmlSampler>> Open(const std::string& library);
  ~NvmlSampler();
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  // Every device now. A device whose queries fail is listed with ok = false; the sample is
  // ok unless the device count itself cannot be read.
  NodeSample Sample();

 private:
  struct Nvml;
  explicit NvmlSampler(std::unique_ptr<Nvml> nvml);
  std::unique_ptr<Nvml> nvml_;
  uint64_t last_util_timestamp_us_ = 0;
};

}  // namespace hami::inventory
