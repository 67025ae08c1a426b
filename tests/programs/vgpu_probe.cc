// vgpu_probe: a CUDA and NVML program for tests of what libvgpu.so shows a container. It
// runs the commands given as arguments (separated by ";"), then, with `serve FIFO`, reads
// one command per line from FIFO until end of file. Every command prints exactly one line
// on stdout, "COMMAND key=value ...", so that a test can drive it step by step.
//
// Some commands also call the driver's own libcuda.so.1 / libnvidia-ml.so.1 directly, found
// in their symbol tables past any preloaded wrapper: what the driver alone answers.
//
//   init                cuInit(0)                                 init r=CURESULT
//   nvml-init           nvmlInit_v2()                             nvml-init r=NVMLRETURN
//   devices             CUDA's and NVML's device lists by UUID:   devices cuda=U,U nvml=U,U
//                       nvml1= by the unversioned calls, index= nvmlDeviceGetIndex of each,
//                       past_end= nvmlDeviceGetHandleByIndex_v2 one past the count
//   context N           retain ordinal N's primary context and make it current
//   alloc BYTES         cuMemAlloc_v2, kept until free-all        alloc r=CURESULT
//   alloc-loop BYTES N  N tries of alloc                          alloc-loop ok=SUCCEEDED
//   free-all            frees what alloc kept                     free-all r=CURESULT
//   meminfo             cuMemGetInfo_v2, cuDeviceTotalMem_v2 and nvmlDeviceGetMemoryInfo(_v2)
//                       of the current device (its NVML handle by index)
//   processes N         every running-process query on NVML device N: KIND=R:PID/USED,...
//   hidden UUID         the driver's own handle of that device, given to the intercepted
//                       calls (and its UUID, serial and PCI bus id to the handle lookups):
//                       hidden visible=0|1 processes=R ... index=R by_uuid=R by_serial=R ...
//   nulls               calls with NULL outputs: NAME=INTERCEPTED/DRIVER
//
// Exit status: 0 at the end of the commands; 2 for a malformed command.
#include <cuda.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "common/parse.h"
#include "common/visible_devices.h"
#include "nvml/nvml.h"
#include "vgpu/libc_symbols.h"

namespace {

// The driver's own definition of `name` (bypassing any preloaded wrapper), or null.
template <typename Fn>
Fn Raw(const char* soname, const char* name) {
  return reinterpret_cast<Fn>(hami::vgpu::FindVersionedSymbol(soname, name, nullptr));
}
#define HAMI_RAW_CUDA(name) Raw<decltype(&::name)>("libcuda.so.1", #name)
#define HAMI_RAW_NVML(name) Raw<decltype(&::name)>("libnvidia-ml.so.1", #name)

std::vector<CUdeviceptr> g_held;
bool g_cuda_init = false;

std::string Uuid(nvmlDevice_t h) {
  char buf[96] = {};
  if (nvmlDeviceGetUUID(h, buf, sizeof(buf)) != NVML_SUCCESS) return "?";
  return buf;
}

std::string CudaUuid(CUdevice dev) {
  CUuuid u{};
  if (cuDeviceGetUuid_v2(&u, dev) != CUDA_SUCCESS) return "?";
  return hami::GpuUuidText(u.bytes);
}

std::string Join(const std::vector<std::string>& items) {
  if (items.empty()) return "-";
  std::string out;
  for (const std::string& s : items) out += (out.empty() ? "" : ",") + s;
  return out;
}

// A running-process list as "R:PID/USED,PID/USED" (or "R:-"), asking for the count first.
template <typename Info, typename Query>
std::string ProcessList(Query query) {
  unsigned int n = 0;
  nvmlReturn_t r = query(&n, static_cast<Info*>(nullptr));
  std::vector<Info> infos;
  for (int attempt = 0; r == NVML_ERROR_INSUFFICIENT_SIZE && attempt < 8; ++attempt) {
    infos.resize(n + 4);
    n = unsigned(infos.size());
    r = query(&n, infos.data());
  }
  std::vector<std::string> items;
  if (r == NVML_SUCCESS) {
    for (unsigned i = 0; i < n; ++i) {
      items.push_back(std::to_string(infos[i].pid) + "/" + std::to_string(infos[i].usedGpuMemory));
    }
  }
  return std::to_string(int(r)) + ":" + Join(items);
}

std::string DetailList(nvmlDevice_t h, unsigned int mode) {
  return ProcessList<nvmlProcessDetail_v1_t>([&](unsigned* n, nvmlProcessDetail_v1_t* a) {
    nvmlProcessDetailList_t list{};
    list.version = nvmlProcessDetailList_v1;
    list.mode = mode;
    list.numProcArrayEntries = *n;
    list.procArray = a;
    nvmlReturn_t r = nvmlDeviceGetRunningProcessDetailList(h, &list);
    *n = list.numProcArrayEntries;
    return r;
  });
}

#define HAMI_PROCESS_LIST(fn, info, h) \
  ProcessList<info>([&](unsigned* n, info* a) { return fn(h, n, a); })

void Processes(unsigned index) {
  nvmlDevice_t h = nullptr;
  nvmlReturn_t r = nvmlDeviceGetHandleByIndex_v2(index, &h);
  if (r != NVML_SUCCESS) {
    std::printf("processes handle=%d\n", int(r));
    return;
  }
  std::printf(
      "processes v3=%s v2=%s v1=%s graphics=%s graphics_v2=%s graphics_v1=%s mps=%s mps_v2=%s "
      "mps_v1=%s detail=%s detail_graphics=%s\n",
      HAMI_PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v3, nvmlProcessInfo_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetComputeRunningProcesses, nvmlProcessInfo_v1_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v3, nvmlProcessInfo_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses_v2, nvmlProcessInfo_v2_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetGraphicsRunningProcesses, nvmlProcessInfo_v1_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v3, nvmlProcessInfo_t, h).c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses_v2, nvmlProcessInfo_v2_t, h)
          .c_str(),
      HAMI_PROCESS_LIST(nvmlDeviceGetMPSComputeRunningProcesses, nvmlProcessInfo_v1_t, h).c_str(),
      DetailList(h, NVML_PROCESS_MODE_COMPUTE).c_str(),
      DetailList(h, NVML_PROCESS_MODE_GRAPHICS).c_str());
}

// The driver's handle of the device with `uuid`, whatever the container sees.
nvmlDevice_t RawHandle(const std::string& uuid) {
  auto by_uuid = HAMI_RAW_NVML(nvmlDeviceGetHandleByUUID);
  nvmlDevice_t h = nullptr;
  if (by_uuid == nullptr || by_uuid(uuid.c_str(), &h) != NVML_SUCCESS) return nullptr;
  return h;
}

void Hidden(const std::string& uuid) {
  nvmlDevice_t h = RawHandle(uuid);
  if (h == nullptr) {
    std::printf("hidden handle=none\n");
    return;
  }
  nvmlProcessInfo_t infos[4];
  nvmlProcessInfo_v1_t infos1[4];
  nvmlProcessDetailList_t list{};
  list.version = nvmlProcessDetailList_v1;
  list.mode = NVML_PROCESS_MODE_COMPUTE;
  bool visible = false;
  unsigned n = 0;
  if (nvmlDeviceGetCount_v2(&n) == NVML_SUCCESS) {
    for (unsigned i = 0; i < n; ++i) {
      nvmlDevice_t v;
      if (nvmlDeviceGetHandleByIndex_v2(i, &v) == NVML_SUCCESS && v == h) visible = true;
    }
  }
  unsigned c3 = 4, c1 = 4, cg = 4, cm = 4, index = 0;
  nvmlReturn_t r3 = nvmlDeviceGetComputeRunningProcesses_v3(h, &c3, infos);
  nvmlReturn_t r1 = nvmlDeviceGetComputeRunningProcesses(h, &c1, infos1);
  nvmlReturn_t rg = nvmlDeviceGetGraphicsRunningProcesses_v3(h, &cg, infos);
  nvmlReturn_t rm = nvmlDeviceGetMPSComputeRunningProcesses_v3(h, &cm, infos);
  nvmlReturn_t rd = nvmlDeviceGetRunningProcessDetailList(h, &list);
  nvmlReturn_t ri = nvmlDeviceGetIndex(h, &index);
  nvmlDevice_t found = nullptr;
  nvmlReturn_t ru = nvmlDeviceGetHandleByUUID(uuid.c_str(), &found);
  char serial[64] = {};
  nvmlReturn_t rs = nvmlDeviceGetSerial(h, serial, sizeof(serial));
  if (rs == NVML_SUCCESS) rs = nvmlDeviceGetHandleBySerial(serial, &found);
  nvmlPciInfo_t pci{};
  nvmlReturn_t rp = nvmlDeviceGetPciInfo_v3(h, &pci);
  if (rp == NVML_SUCCESS) rp = nvmlDeviceGetHandleByPciBusId_v2(pci.busId, &found);
  std::printf(
      "hidden visible=%d processes=%d processes_v1=%d graphics=%d mps=%d detail=%d index=%d "
      "by_uuid=%d by_serial=%d by_pci=%d\n",
      int(visible), int(r3), int(r1), int(rg), int(rm), int(rd), int(ri), int(ru), int(rs),
      int(rp));
}

// Calls with NULL outputs, intercepted and straight to the driver: NAME=INTERCEPTED/RAW.
void Nulls() {
  std::ostringstream out;
  out << "nulls";
  auto pair = [&](const char* name, int mine, int raw) {
    out << " " << name << "=" << mine << "/" << raw;
  };
  size_t f = 0, t = 0;
  auto cu_meminfo = HAMI_RAW_CUDA(cuMemGetInfo_v2);
  auto cu_total = HAMI_RAW_CUDA(cuDeviceTotalMem_v2);
  auto cu_alloc = HAMI_RAW_CUDA(cuMemAlloc_v2);
  if (cu_meminfo == nullptr || cu_total == nullptr || cu_alloc == nullptr) {
    std::printf("nulls raw=none\n");
    return;
  }
  pair("cuMemGetInfo_v2.free", cuMemGetInfo_v2(nullptr, &t), cu_meminfo(nullptr, &t));
  pair("cuMemGetInfo_v2.total", cuMemGetInfo_v2(&f, nullptr), cu_meminfo(&f, nullptr));
  pair("cuMemGetInfo_v2.both", cuMemGetInfo_v2(nullptr, nullptr), cu_meminfo(nullptr, nullptr));
  pair("cuDeviceTotalMem_v2", cuDeviceTotalMem_v2(nullptr, 0), cu_total(nullptr, 0));
  pair("cuMemAlloc_v2", cuMemAlloc_v2(nullptr, 1 << 20), cu_alloc(nullptr, 1 << 20));
  CUdeviceptr p = 0;
  CUresult zero = cuMemAlloc_v2(&p, 0);
  if (zero == CUDA_SUCCESS) cuMemFree_v2(p);
  CUresult raw_zero = cu_alloc(&p, 0);
  if (raw_zero == CUDA_SUCCESS) HAMI_RAW_CUDA(cuMemFree_v2)(p);
  pair("cuMemAlloc_v2.zero", zero, raw_zero);

  nvmlDevice_t h = nullptr;
  nvmlDeviceGetHandleByIndex_v2(0, &h);
  pair("nvmlDeviceGetMemoryInfo", nvmlDeviceGetMemoryInfo(h, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetMemoryInfo)(h, nullptr));
  pair("nvmlDeviceGetMemoryInfo_v2", nvmlDeviceGetMemoryInfo_v2(h, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetMemoryInfo_v2)(h, nullptr));
  pair("nvmlDeviceGetMemoryInfo.device", nvmlDeviceGetMemoryInfo(nullptr, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetMemoryInfo)(nullptr, nullptr));
  pair("nvmlDeviceGetCount_v2", nvmlDeviceGetCount_v2(nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetCount_v2)(nullptr));
  pair("nvmlDeviceGetCount", nvmlDeviceGetCount(nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetCount)(nullptr));
  pair("nvmlDeviceGetHandleByIndex_v2", nvmlDeviceGetHandleByIndex_v2(0, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetHandleByIndex_v2)(0, nullptr));
  pair("nvmlDeviceGetIndex", nvmlDeviceGetIndex(h, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetIndex)(h, nullptr));
  nvmlDevice_t found;
  pair("nvmlDeviceGetHandleByUUID", nvmlDeviceGetHandleByUUID(nullptr, &found),
       HAMI_RAW_NVML(nvmlDeviceGetHandleByUUID)(nullptr, &found));
  pair("nvmlDeviceGetComputeRunningProcesses_v3",
       nvmlDeviceGetComputeRunningProcesses_v3(h, nullptr, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses_v3)(h, nullptr, nullptr));
  pair("nvmlDeviceGetComputeRunningProcesses_v2",
       nvmlDeviceGetComputeRunningProcesses_v2(h, nullptr, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses_v2)(h, nullptr, nullptr));
  pair("nvmlDeviceGetComputeRunningProcesses",
       nvmlDeviceGetComputeRunningProcesses(h, nullptr, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses)(h, nullptr, nullptr));
  pair("nvmlDeviceGetGraphicsRunningProcesses_v3",
       nvmlDeviceGetGraphicsRunningProcesses_v3(h, nullptr, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetGraphicsRunningProcesses_v3)(h, nullptr, nullptr));
  pair("nvmlDeviceGetMPSComputeRunningProcesses_v3",
       nvmlDeviceGetMPSComputeRunningProcesses_v3(h, nullptr, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetMPSComputeRunningProcesses_v3)(h, nullptr, nullptr));
  unsigned n = 4;
  pair("nvmlDeviceGetComputeRunningProcesses_v3.device",
       nvmlDeviceGetComputeRunningProcesses_v3(nullptr, &n, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetComputeRunningProcesses_v3)(nullptr, &n, nullptr));
  pair("nvmlDeviceGetRunningProcessDetailList", nvmlDeviceGetRunningProcessDetailList(h, nullptr),
       HAMI_RAW_NVML(nvmlDeviceGetRunningProcessDetailList)(h, nullptr));
  nvmlProcessDetailList_t wrong{};
  wrong.version = 0;
  pair("nvmlDeviceGetRunningProcessDetailList.version",
       nvmlDeviceGetRunningProcessDetailList(h, &wrong),
       HAMI_RAW_NVML(nvmlDeviceGetRunningProcessDetailList)(h, &wrong));
  std::printf("%s\n", out.str().c_str());
}

void Devices() {
  std::vector<std::string> cuda, nvml, nvml1, index;
  int count = 0;
  if (cuDeviceGetCount(&count) == CUDA_SUCCESS) {
    for (int i = 0; i < count; ++i) cuda.push_back(CudaUuid(CUdevice(i)));
  }
  unsigned n = 0;
  nvmlReturn_t r = nvmlDeviceGetCount_v2(&n);
  for (unsigned i = 0; r == NVML_SUCCESS && i < n; ++i) {
    nvmlDevice_t h;
    unsigned idx = 0;
    if (nvmlDeviceGetHandleByIndex_v2(i, &h) != NVML_SUCCESS) {
      nvml.push_back("?");
      continue;
    }
    nvml.push_back(Uuid(h));
    index.push_back(nvmlDeviceGetIndex(h, &idx) == NVML_SUCCESS ? std::to_string(idx) : "?");
  }
  unsigned n1 = 0;
  nvmlReturn_t r1 = nvmlDeviceGetCount(&n1);
  for (unsigned i = 0; r1 == NVML_SUCCESS && i < n1; ++i) {
    nvmlDevice_t h;
    nvml1.push_back(nvmlDeviceGetHandleByIndex(i, &h) == NVML_SUCCESS ? Uuid(h) : "?");
  }
  nvmlDevice_t past;
  std::printf("devices cuda=%s nvml=%s nvml1=%s index=%s past_end=%d\n", Join(cuda).c_str(),
              Join(nvml).c_str(), Join(nvml1).c_str(), Join(index).c_str(),
              int(nvmlDeviceGetHandleByIndex_v2(n, &past)));
}

void MemInfo() {
  CUdevice dev = -1;
  CUresult r_dev = cuCtxGetDevice(&dev);
  size_t free = 0, total = 0;
  CUresult r = cuMemGetInfo_v2(&free, &total);
  size_t device_total = 0;
  CUresult r_total = r_dev == CUDA_SUCCESS ? cuDeviceTotalMem_v2(&device_total, dev) : r_dev;
  nvmlDevice_t h = nullptr;
  nvmlMemory_t m{};
  nvmlMemory_v2_t m2{};
  m2.version = nvmlMemory_v2;
  nvmlReturn_t rn = r_dev == CUDA_SUCCESS ? nvmlDeviceGetHandleByIndex_v2(unsigned(dev), &h)
                                          : NVML_ERROR_INVALID_ARGUMENT;
  nvmlReturn_t rm = rn == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo(h, &m) : rn;
  nvmlReturn_t rm2 = rn == NVML_SUCCESS ? nvmlDeviceGetMemoryInfo_v2(h, &m2) : rn;
  std::printf(
      "meminfo device=%d uuid=%s cu=%d cu_free=%zu cu_total=%zu device_total_r=%d "
      "device_total=%zu nvml=%d nvml_total=%llu nvml_free=%llu nvml_used=%llu nvml2=%d "
      "nvml2_total=%llu nvml2_reserved=%llu nvml2_free=%llu nvml2_used=%llu\n",
      int(dev), h != nullptr ? Uuid(h).c_str() : "-", int(r), free, total, int(r_total),
      device_total, int(rm), m.total, m.free, m.used, int(rm2), m2.total, m2.reserved, m2.free,
      m2.used);
}

// Runs one command; false for a malformed one.
bool Run(std::vector<std::string> words) {
  if (words.empty()) return true;
  const std::string& cmd = words[0];
  auto arg = [&](size_t i) -> std::string { return i < words.size() ? words[i] : ""; };
  auto size = [&](size_t i) -> uint64_t {
    auto v = hami::ParseSize(arg(i), cmd);
    return v.ok() ? *v : 0;
  };
  if (cmd == "init") {
    CUresult r = cuInit(0);
    g_cuda_init = r == CUDA_SUCCESS;
    std::printf("init r=%d\n", int(r));
  } else if (cmd == "nvml-init") {
    std::printf("nvml-init r=%d\n", int(nvmlInit_v2()));
  } else if (cmd == "devices") {
    Devices();
  } else if (cmd == "context") {
    CUresult r = g_cuda_init ? CUDA_SUCCESS : cuInit(0);
    g_cuda_init = r == CUDA_SUCCESS;
    CUdevice dev;
    CUcontext ctx;
    if (r == CUDA_SUCCESS) r = cuDeviceGet(&dev, std::atoi(arg(1).c_str()));
    if (r == CUDA_SUCCESS) r = cuDevicePrimaryCtxRetain(&ctx, dev);
    if (r == CUDA_SUCCESS) r = cuCtxSetCurrent(ctx);
    std::printf("context device=%s r=%d\n", arg(1).c_str(), int(r));
  } else if (cmd == "alloc") {
    CUdeviceptr p;
    CUresult r = cuMemAlloc_v2(&p, size(1));
    if (r == CUDA_SUCCESS) g_held.push_back(p);
    std::printf("alloc r=%d\n", int(r));
  } else if (cmd == "alloc-loop") {
    uint64_t bytes = size(1);
    int n = std::atoi(arg(2).c_str()), ok = 0;
    for (int i = 0; i < n; ++i) {
      CUdeviceptr p;
      if (cuMemAlloc_v2(&p, bytes) == CUDA_SUCCESS) {
        g_held.push_back(p);
        ++ok;
      }
    }
    std::printf("alloc-loop ok=%d\n", ok);
  } else if (cmd == "free-all") {
    CUresult r = CUDA_SUCCESS;
    for (CUdeviceptr p : g_held) {
      if (CUresult e = cuMemFree_v2(p); e != CUDA_SUCCESS) r = e;
    }
    g_held.clear();
    std::printf("free-all r=%d\n", int(r));
  } else if (cmd == "meminfo") {
    MemInfo();
  } else if (cmd == "processes") {
    Processes(unsigned(std::atoi(arg(1).c_str())));
  } else if (cmd == "hidden") {
    Hidden(arg(1));
  } else if (cmd == "nulls") {
    Nulls();
  } else if (cmd == "pid") {
    std::printf("pid pid=%d\n", int(getpid()));
  } else {
    std::fprintf(stderr, "vgpu_probe: unknown command '%s'\n", cmd.c_str());
    return false;
  }
  std::fflush(stdout);
  return true;
}

std::vector<std::string> Words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  return words;
}

}  // namespace

int main(int argc, char** argv) {
  // Arguments: commands separated by ";" ("context 0 ; meminfo"), then maybe `serve FIFO`.
  std::vector<std::string> words;
  for (int i = 1; i <= argc; ++i) {
    std::string a = i < argc ? argv[i] : ";";
    if (a == "serve" && i + 1 < argc) {
      if (!Run(words)) return 2;
      words.clear();
      FILE* in = std::fopen(argv[i + 1], "re");
      if (in == nullptr) {
        std::perror(argv[i + 1]);
        return 2;
      }
      char* line = nullptr;
      size_t cap = 0;
      while (getline(&line, &cap, in) > 0) {
        if (!Run(Words(line))) return 2;
      }
      std::free(line);
      std::fclose(in);
      return 0;
    }
    if (a == ";") {
      if (!Run(words)) return 2;
      words.clear();
    } else {
      words.push_back(a);
    }
  }
  return 0;
}
