#include "inventory/inventory.h"

#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <map>
#include <string_view>

#include "common/file.h"
#include "common/parse.h"
#include "common/visible_devices.h"
#include "inventory/nvml_library.h"

namespace hami::inventory {

namespace {

// The CUDA driver, dlopen()ed; closed on destruction (unless opened with RTLD_NODELETE).
class Library {
 public:
  explicit Library(const std::string& name, int extra_flags = 0)
      : handle_(dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | extra_flags)) {}
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (handle_ != nullptr) dlclose(handle_);
  }
  bool ok() const { return handle_ != nullptr; }

  // The function `name`, typed as its declaration `F` (decltype(&::fn)); nullptr when absent.
  template <typename F>
  F Get(const char* name) const {
    return reinterpret_cast<F>(dlsym(handle_, name));
  }

 private:
  void* handle_;
};

// /sys/bus/pci/devices/<dddd:bb:dd.0>/numa_node, or -1.
int SysfsNumaNode(const std::string& sysfs_root, const nvmlPciInfo_t& pci) {
  char name[32];
  std::snprintf(name, sizeof(name), "%04x:%02x:%02x.0", pci.domain & 0xffffu, pci.bus & 0xffu,
                pci.device & 0xffu);
  auto text = ReadFileToString(sysfs_root + "/bus/pci/devices/" + name + "/numa_node", 64,
                               Symlinks::kFollow);
  if (!text.ok()) return -1;
  std::string_view v = *text;
  while (!v.empty() && (v.back() == '\n' || v.back() == ' ')) v.remove_suffix(1);
  auto node = ParseInt64(v, "numa_node");
  return node.ok() && *node >= 0 && *node < 1024 ? int(*node) : -1;
}

// SM counts by UUID from the CUDA driver at `path`; empty when it cannot answer.
std::map<std::string, int> CudaSmCounts(const std::string& path) {
  std::map<std::string, int> out;
  // Kept loaded: an initialized driver may have started threads that run its code.
  Library lib(path, RTLD_NODELETE);
  if (!lib.ok()) return out;
  auto init = lib.Get<decltype(&::cuInit)>("cuInit");
  auto count = lib.Get<decltype(&::cuDeviceGetCount)>("cuDeviceGetCount");
  auto get = lib.Get<decltype(&::cuDeviceGet)>("cuDeviceGet");
  auto uuid = lib.Get<decltype(&::cuDeviceGetUuid_v2)>("cuDeviceGetUuid_v2");
  if (uuid == nullptr) uuid = lib.Get<decltype(&::cuDeviceGetUuid_v2)>("cuDeviceGetUuid");
  auto attribute = lib.Get<decltype(&::cuDeviceGetAttribute)>("cuDeviceGetAttribute");
  int n = 0;
  if (init == nullptr || count == nullptr || get == nullptr || uuid == nullptr ||
      attribute == nullptr || init(0) != CUDA_SUCCESS || count(&n) != CUDA_SUCCESS) {
    return out;
  }
  for (int i = 0; i < n; ++i) {
    CUdevice dev;
    CUuuid u{};
    int sms = 0;
    if (get(&dev, i) != CUDA_SUCCESS || uuid(&u, dev) != CUDA_SUCCESS ||
        attribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev) != CUDA_SUCCESS) {
      continue;
    }
    out[GpuUuidText(u.bytes)] = sms;
  }
  return out;
}

// Reads device `index`; a failed required query makes it unhealthy with the reason.
Device ReadDevice(const NvmlLibrary& lib, unsigned index, const Options& options) {
  const NvmlFunctions& n = lib.fn();
  Device d;
  d.index = int(index);
  auto failed = [&](const char* call, nvmlReturn_t r) {
    if (!d.healthy) return;
    d.healthy = false;
    d.health_reason = std::string(call) + ": " + lib.Why(r);
  };
  nvmlDevice_t h = nullptr;
  if (nvmlReturn_t r = n.nvmlDeviceGetHandleByIndex_v2(index, &h); r != NVML_SUCCESS) {
    failed("nvmlDeviceGetHandleByIndex_v2", r);
    return d;
  }
  char text[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
  if (nvmlReturn_t r = n.nvmlDeviceGetUUID(h, text, sizeof(text)); r == NVML_SUCCESS) {
    d.uuid = text;
  } else {
    failed("nvmlDeviceGetUUID", r);
  }
  char name[NVML_DEVICE_NAME_V2_BUFFER_SIZE] = {};
  if (nvmlReturn_t r = n.nvmlDeviceGetName(h, name, sizeof(name)); r == NVML_SUCCESS) {
    d.name = name;
  } else {
    failed("nvmlDeviceGetName", r);
  }
  nvmlMemory_t memory{};
  if (nvmlReturn_t r = n.nvmlDeviceGetMemoryInfo(h, &memory); r == NVML_SUCCESS) {
    d.memory_bytes = memory.total;
  } else {
    failed("nvmlDeviceGetMemoryInfo", r);
  }
  if (nvmlReturn_t r = n.nvmlDeviceGetCudaComputeCapability(h, &d.cc_major, &d.cc_minor);
      r != NVML_SUCCESS) {
    failed("nvmlDeviceGetCudaComputeCapability", r);
  }
  nvmlPciInfo_t pci{};
  bool have_pci = false;
  if (nvmlReturn_t r = n.nvmlDeviceGetPciInfo_v3(h, &pci); r == NVML_SUCCESS) {
    pci.busId[sizeof(pci.busId) - 1] = '\0';
    d.pci_bus_id = pci.busId;
    have_pci = true;
  } else {
    failed("nvmlDeviceGetPciInfo_v3", r);
  }
  unsigned node = 0;
  if (n.nvmlDeviceGetNumaNodeId != nullptr && n.nvmlDeviceGetNumaNodeId(h, &node) == NVML_SUCCESS &&
      node < 1024) {
    d.numa_node = int(node);
  } else if (have_pci) {
    d.numa_node = SysfsNumaNode(options.sysfs_root, pci);
  }
  if (n.nvmlDeviceGetMigMode != nullptr) {
    unsigned current = 0, pending = 0;
    nvmlReturn_t r = n.nvmlDeviceGetMigMode(h, &current, &pending);
    if (r == NVML_SUCCESS) {
      d.mig_mode = current == NVML_DEVICE_MIG_ENABLE ? MigMode::kEnabled : MigMode::kDisabled;
    } else if (r != NVML_ERROR_NOT_SUPPORTED) {
      failed("nvmlDeviceGetMigMode", r);
    }
  }
  return d;
}

}  // namespace

const char* MigModeName(MigMode mode) {
  switch (mode) {
    case MigMode::kUnsupported:
      return "unsupported";
    case MigMode::kDisabled:
      return "disabled";
    case MigMode::kEnabled:
      return "enabled";
  }
  return "?";
}

Result<Inventory> ReadInventory(const Options& options) {
  // Kept loaded, as the driver is: what NVML's constructors allocated is reachable only
  // from its own data, and unloading it would drop that on every reading.
  auto lib = NvmlLibrary::Open(options.nvml_library, Unload::kNever);
  if (!lib.ok()) {
    return Error(ErrorCode::kNotFound,
                 "cannot open " + options.nvml_library + ": " + lib.error().message());
  }
  Inventory inv;
  inv.nvml_library = lib->Path();
  const std::string& where = inv.nvml_library.empty() ? options.nvml_library : inv.nvml_library;
  if (std::string missing = lib->FirstMissing(
          {"nvmlInit_v2", "nvmlShutdown", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
           "nvmlDeviceGetUUID", "nvmlDeviceGetName", "nvmlDeviceGetMemoryInfo",
           "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetCudaComputeCapability"});
      !missing.empty()) {
    return Error(ErrorCode::kIncompatible, where + " has no " + missing);
  }
  const NvmlFunctions& n = lib->fn();
  if (nvmlReturn_t r = n.nvmlInit_v2(); r != NVML_SUCCESS) {
    return Error(ErrorCode::kUnavailable, where + ": nvmlInit_v2: " + lib->Why(r));
  }
  struct Shutdown {
    const NvmlFunctions& n;
    ~Shutdown() { n.nvmlShutdown(); }
  } shutdown{n};
  if (n.nvmlSystemGetDriverVersion != nullptr) {
    char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
    if (n.nvmlSystemGetDriverVersion(version, sizeof(version)) == NVML_SUCCESS) {
      inv.driver_version = version;
    }
  }
  unsigned count = 0;
  if (nvmlReturn_t r = n.nvmlDeviceGetCount_v2(&count); r != NVML_SUCCESS) {
    return Error(ErrorCode::kUnavailable, where + ": nvmlDeviceGetCount_v2: " + lib->Why(r));
  }
  for (unsigned i = 0; i < count; ++i) inv.devices.push_back(ReadDevice(*lib, i, options));
  if (!options.cuda_library.empty() && !inv.devices.empty()) {
    std::map<std::string, int> sms = CudaSmCounts(options.cuda_library);
    for (Device& d : inv.devices) {
      if (auto it = sms.find(d.uuid); it != sms.end()) d.sm_count = it->second;
    }
  }
  return inv;
}

std::vector<std::string> Uuids(const Inventory& inventory) {
  std::vector<std::string> out;
  out.reserve(inventory.devices.size());
  for (const Device& d : inventory.devices) out.push_back(d.uuid);
  return out;
}

}  // namespace hami::inventory
