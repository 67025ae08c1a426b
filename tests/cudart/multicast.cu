// A multicast object over two GPUs on NVLink switches, made as a client of the driver's
// multicast API makes one: the runtime's contexts on both devices, then cuMulticastCreate,
// cuMulticastAddDevice, memory from cuMemCreate bound on each device, the object mapped and a
// copy written through it to both, unbound, unmapped and released.
//
//   multicast [--past SIZE] [--deadline SECONDS]
//
// Steps, in order:
//
//   ready     a context on devices 0 and 1 (cudaFree(0) on each)
//   created   the object (two devices, 4 granules each) with both devices added
//   bound     4 granules of cuMemCreate memory on each device, bound to the object; then an
//             allocation of SIZE (default 1 GiB) on device 0, answering what the memory
//             allows, and released at once when it succeeded
//   written   the object mapped read-write for both devices; a pattern copied through it is
//             read back from each device's memory
//   unbound   device 1's memory unbound, unmapped and released; a copy through the object
//             is refused now that device 1 has no memory under it
//   released  the object unmapped and released, and device 0's memory too
//
// At every step the program prints
//
//   multicast step=NAME pid=PID failed=K holds0=BYTES holds1=BYTES ... free0=F total0=T
//             free1=F total1=T
//
// with the status of every call (0: success), what it checked (1: as expected), how many of
// its checks have failed so far, the memory it created and still holds on each device, and
// what cudaMemGetInfo says on each; then `hold step=NAME`, and it reads a line from its
// stdin before going on (at the end of stdin it no longer waits), so that a caller can
// compare the books while it holds its memory. It ends with `done failed=K` and exits 0 only
// when every check passed. Past the deadline (default 60 s) it exits 124.
#include <cuda.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program_io.h"

namespace {

using hami::cudart::ParseSize;

int g_failed = 0;  // checks failed so far

void Deadline(int) {
  const char msg[] = "multicast: deadline passed\n";
  (void)!write(STDOUT_FILENO, msg, sizeof(msg) - 1);
  _exit(124);
}

// A call's status, counted as a failure unless it is `want`.
int Expect(int rc, int want = 0) {
  if (rc != want) ++g_failed;
  return rc;
}

// A check: 1 when it held.
int Ok(bool held) {
  if (!held) ++g_failed;
  return held ? 1 : 0;
}

class Line {
 public:
  explicit Line(const char* step) : step_(step) {
    text_ = std::string("multicast step=") + step + " pid=" + std::to_string(getpid());
  }
  Line& Add(const char* key, long long v) {
    text_ += " " + std::string(key) + "=" + std::to_string(v);
    return *this;
  }
  // Prints it with what it holds and what each device shows free, then holds.
  void Reach(size_t holds0, size_t holds1) {
    Add("holds0", static_cast<long long>(holds0)).Add("holds1", static_cast<long long>(holds1));
    for (int d = 0; d < 2; ++d) {
      size_t free_bytes = 0, total_bytes = 0;
      int rc = int(cudaSetDevice(d));
      if (rc == 0) rc = int(cudaMemGetInfo(&free_bytes, &total_bytes));
      Expect(rc);
      const std::string n = std::to_string(d);
      Add(("free" + n).c_str(), static_cast<long long>(free_bytes));
      Add(("total" + n).c_str(), static_cast<long long>(total_bytes));
    }
    Expect(int(cudaSetDevice(0)));
    Add("failed", g_failed);
    std::printf("%s\n", text_.c_str());
    Hold();
  }

 private:
  void Hold() {
    static bool ended = false;
    std::printf("hold step=%s\n", step_);
    char c = 0;
    while (!ended) {
      if (read(STDIN_FILENO, &c, 1) != 1) {
        ended = true;
      } else if (c == '\n') {
        break;
      }
    }
  }

  const char* step_;
  std::string text_;
};

CUmemAllocationProp DeviceProp(int device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

// Read-write access to [va, va + size) for devices 0 and the `devices` - 1 after it.
int Access(CUdeviceptr va, size_t size, int devices) {
  CUmemAccessDesc desc[2] = {};
  for (int d = 0; d < devices; ++d) {
    desc[d].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    desc[d].location.id = d;
    desc[d].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  return int(cuMemSetAccess(va, size, desc, size_t(devices)));
}

// Reserves a range, maps `h` there and grants `devices` access; *va is the range.
int Map(CUmemGenericAllocationHandle h, size_t size, int devices, CUdeviceptr* va) {
  int rc = int(cuMemAddressReserve(va, size, 0, 0, 0));
  if (rc == 0) rc = int(cuMemMap(*va, size, 0, h, 0));
  if (rc == 0) rc = Access(*va, size, devices);
  return rc;
}

int Unmap(CUdeviceptr va, size_t size) {
  const int rc = int(cuMemUnmap(va, size));
  return rc != 0 ? rc : int(cuMemAddressFree(va, size));
}

// Whether the `n` bytes at device address `p` equal `want`.
bool Reads(CUdeviceptr p, const std::vector<unsigned char>& want) {
  std::vector<unsigned char> got(want.size(), 0);
  if (cudaMemcpy(got.data(), reinterpret_cast<void*>(p), got.size(), cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    return false;
  }
  return got == want;
}

int Run(size_t past_bytes) {
  Line ready("ready");
  ready.Add("setup", Expect(int(cudaSetDevice(1)) | int(cudaFree(nullptr)) | int(cudaSetDevice(0)) |
                            int(cudaFree(nullptr))));
  int supported[2] = {0, 0};
  for (int d = 0; d < 2; ++d) {
    Expect(int(cuDeviceGetAttribute(&supported[d], CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED, d)));
  }
  ready.Add("supported", Ok(supported[0] == 1 && supported[1] == 1));
  ready.Reach(0, 0);

  CUmulticastObjectProp prop{};
  prop.numDevices = 2;
  size_t gran = 0;
  Line created("created");
  created.Add(
      "granularity",
      Expect(int(cuMulticastGetGranularity(&gran, &prop, CU_MULTICAST_GRANULARITY_MINIMUM))));
  const size_t size = 4 * gran;
  prop.size = size;
  CUmemGenericAllocationHandle mc = 0;
  created.Add("create", Expect(int(cuMulticastCreate(&mc, &prop))));
  created.Add("add", Expect(int(cuMulticastAddDevice(mc, 0)) | int(cuMulticastAddDevice(mc, 1))));
  created.Add("size", static_cast<long long>(size));
  created.Reach(0, 0);

  CUmemGenericAllocationHandle a = 0, b = 0;
  CUmemAllocationProp prop0 = DeviceProp(0), prop1 = DeviceProp(1);
  Line bound("bound");
  bound.Add("memory",
            Expect(int(cuMemCreate(&a, size, &prop0, 0)) | int(cuMemCreate(&b, size, &prop1, 0))));
  bound.Add("bind", Expect(int(cuMulticastBindMem(mc, 0, a, 0, size, 0)) |
                           int(cuMulticastBindMem(mc, 0, b, 0, size, 0))));
  CUmemGenericAllocationHandle extra = 0;
  const int past = int(cuMemCreate(&extra, past_bytes, &prop0, 0));
  if (past == 0) Expect(int(cuMemRelease(extra)));
  bound.Add("past", past).Add("bytes", static_cast<long long>(past_bytes));
  bound.Reach(size, size);

  CUdeviceptr mc_va = 0, a_va = 0, b_va = 0;
  std::vector<unsigned char> data(size);
  for (size_t i = 0; i < size; ++i) data[i] = static_cast<unsigned char>(i * 13 + 5);
  Line written("written");
  written.Add("map",
              Expect(Map(mc, size, 2, &mc_va) | Map(a, size, 1, &a_va) | Map(b, size, 2, &b_va)));
  written.Add("write", Expect(int(cuMemcpyHtoD(mc_va, data.data(), size))));
  written.Add("reach0", Ok(Reads(a_va, data))).Add("reach1", Ok(Reads(b_va, data)));
  written.Reach(size, size);

  Line unbound("unbound");
  unbound.Add("unbind", Expect(int(cuMulticastUnbind(mc, 1, 0, size))));
  unbound.Add("release", Expect(Unmap(b_va, size) | int(cuMemRelease(b))));
  unbound.Add("refused", Ok(cuMemcpyHtoD(mc_va, data.data(), 64) == CUDA_ERROR_INVALID_VALUE));
  unbound.Reach(size, 0);

  Line released("released");
  released.Add("release", Expect(Unmap(mc_va, size) | int(cuMemRelease(mc)) | Unmap(a_va, size) |
                                 int(cuMemRelease(a))));
  released.Reach(0, 0);

  std::printf("done failed=%d\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  size_t past = size_t(1) << 30;
  unsigned deadline = 60;
  bool usage = false;
  for (int i = 1; i < argc; i += 2) {
    if (i + 1 < argc && std::strcmp(argv[i], "--past") == 0) {
      past = ParseSize(argv[i + 1]);
    } else if (i + 1 < argc && std::strcmp(argv[i], "--deadline") == 0) {
      deadline = unsigned(std::atoi(argv[i + 1]));
    } else {
      usage = true;
    }
  }
  if (usage || past == 0 || deadline == 0) {
    std::fprintf(stderr, "usage: %s [--past SIZE] [--deadline SECONDS]\n", argv[0]);
    return 2;
  }
  signal(SIGALRM, Deadline);
  alarm(deadline);
  return Run(past);
}
