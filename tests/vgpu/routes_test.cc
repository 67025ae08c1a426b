// The interposition routes, walked over the hook lists themselves: every listed function is
// reached as libvgpu's wrapper by direct relocation, dlsym (RTLD_DEFAULT, RTLD_NEXT, a
// dlopen handle), and — for the driver — cuGetProcAddress and cuGetProcAddress_v2 asked for
// that ABI's own version and flavour and for the newest; every function not listed passes
// through untouched; dlvsym follows glibc; lookups from a library constructor, from many
// threads and along RTLD_NEXT chains behave.
#include <cuda.h>
#include <dlfcn.h>
#include <gmock/gmock.h>

#include <atomic>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "nvml/nvml.h"
#include "route_probe_lib.h"
#include "support/subprocess.h"
#include "vgpu/hooks.h"
#include "vgpu_fixture.h"

namespace hami::testing {
namespace {

struct Abi {
  std::string base;
  int version;
  int flavor;
};

// Every driver ABI the toolkit defines, by exported name.
const std::map<std::string, Abi>& Abis() {
  static const auto* abis = [] {
    auto* m = new std::map<std::string, Abi>;
#define HAMI_CUDA_API(base, version, flavor, name) (*m)[#name] = Abi{#base, version, flavor};
#include "cuda_api_table.inc"
#undef HAMI_CUDA_API
    return m;
  }();
  return *abis;
}

// The ABI cuGetProcAddress gives for `base` at `version` in the given flavour.
std::string NewestAbi(const std::string& base, int version, int flavor) {
  std::string best;
  int best_version = -1;
  for (const auto& [name, abi] : Abis()) {
    if (abi.base == base && abi.flavor == flavor && abi.version <= version &&
        abi.version > best_version) {
      best = name;
      best_version = abi.version;
    }
  }
  return best;
}

struct Hook {
  const char* name;
  bool cuda;
  void* direct;
  vgpu::Policy policy;
};

void PrintTo(const Hook& h, std::ostream* os) { *os << h.name; }

const Hook kHooks[] = {
#define HAMI_CUDA_HOOK(name, policy, version) \
  {#name, true, reinterpret_cast<void*>(&::name), vgpu::Policy::policy},
#include "vgpu/hooks/cuda_hooks.def"
#undef HAMI_CUDA_HOOK
#define HAMI_NVML_HOOK(name, policy) \
  {#name, false, reinterpret_cast<void*>(&::name), vgpu::Policy::policy},
#include "vgpu/hooks/nvml_hooks.def"
#undef HAMI_NVML_HOOK
};

const Hook* FindListed(const std::string& name) {
  for (const Hook& h : kHooks) {
    if (name == h.name) return &h;
  }
  return nullptr;
}

bool IsHook(const std::string& name) { return FindListed(name) != nullptr; }

// What a hook answers without the real library, by its row's policy: initialization says
// what the library's own loader would, everything else "not initialized".
int MissingDriverCode(const Hook& h) {
  const bool init = h.policy == vgpu::Policy::kInit;
  if (h.cuda) return init ? CUDA_ERROR_NO_DEVICE : CUDA_ERROR_NOT_INITIALIZED;
  return init ? NVML_ERROR_LIBRARY_NOT_FOUND : NVML_ERROR_UNINITIALIZED;
}

// Where an address is: "libvgpu:<symbol>", "sim:<symbol>" or the object's file name.
std::string Where(void* p) {
  if (p == nullptr) return "null";
  Dl_info info{};
  if (dladdr(p, &info) == 0 || info.dli_fname == nullptr) return "unknown";
  std::string file = info.dli_fname;
  std::string sym = info.dli_sname != nullptr ? info.dli_sname : "?";
  if (file.find("libvgpu.so") != std::string::npos) return "libvgpu:" + sym;
  if (file.find("/sim/") != std::string::npos) return "sim:" + sym;
  return file + ":" + sym;
}

std::string Wrapper(const std::string& name) { return "libvgpu:" + name; }

class RouteTest : public VgpuTest, public ::testing::WithParamInterface<Hook> {};

TEST_P(RouteTest, EveryRouteGivesTheWrapper) {
  const Hook& h = GetParam();
  EXPECT_EQ(Where(h.direct), Wrapper(h.name)) << "direct relocation";
  EXPECT_EQ(Where(dlsym(RTLD_DEFAULT, h.name)), Wrapper(h.name)) << "dlsym(RTLD_DEFAULT)";
  EXPECT_EQ(Where(dlsym(RTLD_NEXT, h.name)), Wrapper(h.name)) << "dlsym(RTLD_NEXT)";
  void* lib = dlopen(h.cuda ? "libcuda.so.1" : "libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr);
  EXPECT_EQ(Where(dlsym(lib, h.name)), Wrapper(h.name)) << "dlsym on a dlopen handle";
  dlclose(lib);
  if (!h.cuda) return;

  const Abi& abi = Abis().at(h.name);
  const cuuint64_t flags = abi.flavor == 1 ? CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM
                                           : CU_GET_PROC_ADDRESS_LEGACY_STREAM;
  // Asked for the version that introduced this ABI: this ABI's wrapper, old ones included.
  const std::string at_own = NewestAbi(abi.base, abi.version, abi.flavor);
  ASSERT_FALSE(at_own.empty());
  void* p = nullptr;
  ASSERT_EQ(cuGetProcAddress(abi.base.c_str(), &p, abi.version, flags), CUDA_SUCCESS);
  EXPECT_EQ(Where(p), Wrapper(at_own))
      << "cuGetProcAddress(" << abi.base << ", " << abi.version << ")";
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  p = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2(abi.base.c_str(), &p, abi.version, flags, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(Where(p), Wrapper(at_own)) << "cuGetProcAddress_v2";
  // Asked for the newest: the newest ABI, wrapped when it is listed.
  const std::string newest = NewestAbi(abi.base, CUDA_VERSION, abi.flavor);
  p = nullptr;
  ASSERT_EQ(cuGetProcAddress_v2(abi.base.c_str(), &p, CUDA_VERSION, flags, &status), CUDA_SUCCESS);
  EXPECT_EQ(Where(p), IsHook(newest) ? Wrapper(newest) : "sim:" + newest);
}

INSTANTIATE_TEST_SUITE_P(EveryHook, RouteTest, ::testing::ValuesIn(kHooks),
                         [](const ::testing::TestParamInfo<Hook>& p) {
                           return std::string(p.param.name);
                         });

using PassThroughTest = VgpuTest;

TEST_F(PassThroughTest, EveryDriverFunctionNotListedIsTheDriversOwn) {
  int checked = 0;
  for (const auto& [name, abi] : Abis()) {
    if (IsHook(name)) continue;
    void* p = dlsym(RTLD_DEFAULT, name.c_str());
    EXPECT_EQ(Where(p), "sim:" + name) << "dlsym";
    ++checked;
  }
  EXPECT_GT(checked, 400);
  void* p = nullptr;
  ASSERT_EQ(cuGetProcAddress("cuDeviceGetName", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT),
            CUDA_SUCCESS);
  EXPECT_EQ(Where(p), "sim:cuDeviceGetName");
  EXPECT_EQ(Where(dlsym(RTLD_DEFAULT, "nvmlDeviceGetName")), "sim:nvmlDeviceGetName");
}

TEST_F(PassThroughTest, NamesOutsideTheDriverAreNeverCaptured) {
  // Runtime, cuDNN and cuBLAS names are not the driver's: what glibc says (none here).
  for (const char* name : {"cudaMalloc", "cudnnCreate", "cublasCreate_v2", "cuda_hooks"}) {
    EXPECT_EQ(dlsym(RTLD_DEFAULT, name), nullptr) << name;
  }
  EXPECT_EQ(Where(dlsym(RTLD_DEFAULT, "malloc")).find("libvgpu"), std::string::npos);
  EXPECT_EQ(dlsym(RTLD_DEFAULT, "cuNoSuchFunction"), nullptr);
  void* p = reinterpret_cast<void*>(1);
  CUdriverProcAddressQueryResult status;
  EXPECT_EQ(cuGetProcAddress_v2("cuNoSuchFunction", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT,
                                &status),
            CUDA_ERROR_NOT_FOUND);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
}

TEST_F(PassThroughTest, DlvsymFollowsTheLibrarysVersions) {
  void* lib = dlopen(HAMI_VERSIONED_DRIVER, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  EXPECT_EQ(Where(dlvsym(lib, "cuMemGetInfo_v2", "HAMI_TEST_1")), Wrapper("cuMemGetInfo_v2"));
  EXPECT_EQ(dlvsym(lib, "cuMemGetInfo_v2", "NO_SUCH_VERSION"), nullptr);
  void* own = dlvsym(lib, "cuDeviceGetName", "HAMI_TEST_1");
  ASSERT_NE(own, nullptr);
  EXPECT_NE(Where(own).find("versioned_driver"), std::string::npos) << "not listed: its own";
  // The simulated driver's symbols carry no version, so no versioned lookup finds them.
  EXPECT_EQ(dlvsym(RTLD_DEFAULT, "cuMemGetInfo_v2", "HAMI_TEST_1"), nullptr);
  dlclose(lib);
}

TEST_F(PassThroughTest, LookupsFromALibraryConstructorGetTheWrappers) {
  const RouteProbe* probe = hami_route_probe();
  EXPECT_EQ(probe->init_result, CUDA_SUCCESS);
  EXPECT_EQ(Where(probe->dlsym_default), Wrapper("cuMemAlloc_v2"));
  EXPECT_EQ(Where(probe->dlsym_next), Wrapper("cuMemFree_v2"));
  EXPECT_EQ(Where(probe->dlopen_handle), Wrapper("cuMemGetInfo_v2"));
  EXPECT_EQ(Where(probe->get_proc_address), Wrapper("cuGetProcAddress_v2"));
  EXPECT_EQ(Where(probe->proc_address_alloc), Wrapper("cuMemAlloc_v2"));
  // And what they found holds the limit.
  auto alloc = reinterpret_cast<decltype(&cuMemAlloc_v2)>(probe->proc_address_alloc);
  auto free_fn = reinterpret_cast<decltype(&cuMemFree_v2)>(probe->dlsym_next);
  CUdeviceptr p = 0;
  EXPECT_EQ(alloc(&p, FreeBytes() + (2u << 20)), CUDA_ERROR_OUT_OF_MEMORY);
  ASSERT_EQ(alloc(&p, 4u << 20), CUDA_SUCCESS);
  EXPECT_EQ(free_fn(p), CUDA_SUCCESS);
}

TEST_F(PassThroughTest, RtldNextIsRelativeToTheCaller) {
  // From the library: nothing defines the probe after it.
  EXPECT_EQ(hami_route_probe_next("hami_route_chain_probe"), nullptr);
  // From the program: the library's definition comes after it.
  void* next = dlsym(RTLD_NEXT, "hami_route_chain_probe");
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(reinterpret_cast<int (*)()>(next)(), 2);
  // Walked many times (as LLVM OpenMP's tool lookup does at start-up): no recursion, the
  // same answers.
  for (int i = 0; i < 100000; ++i) {
    ASSERT_EQ(hami_route_probe_next("hami_route_chain_probe"), nullptr);
    ASSERT_EQ(dlsym(RTLD_NEXT, "hami_route_chain_probe"), next);
    ASSERT_EQ(dlsym(RTLD_NEXT, "ompt_start_tool"), nullptr);
  }
  // A hooked name asked from inside a library: still the wrapper.
  EXPECT_EQ(Where(hami_route_probe_next("cuInit")), Wrapper("cuInit"));
}

TEST(NoDriverTest, CallsFailWithTheDriversOwnCodes) {
  // No libcuda.so.1 or libnvidia-ml.so.1 on the library path: libvgpu finds no driver.
  Subprocess p({TestProgram("vgpu_no_driver")}, {{"LD_LIBRARY_PATH", ""}});
  std::string out = p.ReadAll();
  EXPECT_EQ(p.Wait(), 0) << out;
  EXPECT_THAT(out, ::testing::HasSubstr("cuInit 100\n")) << "CUDA_ERROR_NO_DEVICE";
  EXPECT_THAT(out, ::testing::HasSubstr("cuMemAlloc_v2 3\n")) << "CUDA_ERROR_NOT_INITIALIZED";
  EXPECT_THAT(out, ::testing::HasSubstr("nvmlInit_v2 12\n")) << "NVML_ERROR_LIBRARY_NOT_FOUND";
  EXPECT_THAT(out, ::testing::HasSubstr("nvmlDeviceGetCount_v2 1\n")) << "NVML_ERROR_UNINITIALIZED";
  // Every line is a hook answering what its row's policy says.
  std::istringstream lines(out);
  std::string name;
  int code = 0, seen = 0;
  while (lines >> name >> code) {
    const Hook* h = FindListed(name);
    ASSERT_NE(h, nullptr) << name << " is not in the hook lists";
    EXPECT_EQ(code, MissingDriverCode(*h)) << name;
    ++seen;
  }
  EXPECT_EQ(seen, 6) << out;
}

TEST_F(PassThroughTest, ConcurrentLookupsAgree) {
  const std::string alloc = Wrapper("cuMemAlloc_v2");
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        void* p = nullptr;
        if (t % 2 == 0) {
          p = dlsym(RTLD_DEFAULT, "cuMemAlloc_v2");
        } else {
          cuGetProcAddress("cuMemAlloc", &p, CUDA_VERSION, CU_GET_PROC_ADDRESS_DEFAULT);
        }
        if (Where(p) != alloc) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

// What the CUDA 13 runtime asks cuGetProcAddress_v2 for, for the functions libvgpu hooks:
// every (name, version, flags) request traced (HAMI_SIM_LOG_LEVEL=4) from the nvcc-built
// programs of tests/cudart — the runtime linked shared, static and with the per-thread
// default stream, and cuBLAS, cuRAND, cuSPARSE, cuSOLVER, cuDNN and NCCL. Each gets the ABI
// the driver's table gives at that version and flavour: the wrapper when that ABI is hooked.
struct RuntimeRequest {
  const char* base;
  int version;
  cuuint64_t flags;
};

void PrintTo(const RuntimeRequest& r, std::ostream* os) {
  *os << r.base << "@" << r.version << "/" << r.flags;
}

constexpr cuuint64_t kDefault = CU_GET_PROC_ADDRESS_DEFAULT;
constexpr cuuint64_t kPerThread = CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM;

const RuntimeRequest kRuntimeRequests[] = {
    {"cuArray3DCreate", 3020, kDefault},
    {"cuArrayCreate", 3020, kDefault},
    {"cuArrayDestroy", 2000, kDefault},
    {"cuCtxCreate", 3020, kDefault},
    {"cuCtxCreate", 11040, kDefault},
    {"cuCtxDestroy", 4000, kDefault},
    {"cuCtxSynchronize", 2000, kDefault},
    {"cuCtxSynchronize", 13000, kDefault},
    {"cuDeviceGraphMemTrim", 11040, kDefault},
    {"cuDevicePrimaryCtxRelease", 7000, kDefault},
    {"cuDevicePrimaryCtxReset", 7000, kDefault},
    {"cuDevicePrimaryCtxRetain", 7000, kDefault},
    {"cuDeviceTotalMem", 3020, kDefault},
    {"cuEventSynchronize", 2000, kDefault},
    {"cuGraphExecDestroy", 10000, kDefault},
    {"cuGraphInstantiate", 10000, kDefault},
    {"cuGraphInstantiate", 11000, kDefault},
    {"cuGraphInstantiateWithFlags", 11040, kDefault},
    {"cuGraphInstantiateWithParams", 12000, kDefault},
    {"cuGraphInstantiateWithParams", 12000, kPerThread},
    {"cuGraphLaunch", 10000, kDefault},
    {"cuGraphLaunch", 10000, kPerThread},
    {"cuGraphUpload", 11010, kDefault},
    {"cuGraphUpload", 11010, kPerThread},
    {"cuInit", 2000, kDefault},
    {"cuLaunchCooperativeKernel", 9000, kDefault},
    {"cuLaunchCooperativeKernel", 9000, kPerThread},
    {"cuLaunchKernel", 4000, kDefault},
    {"cuLaunchKernel", 7000, kPerThread},
    {"cuLaunchKernelEx", 11060, kDefault},
    {"cuLaunchKernelEx", 11060, kPerThread},
    {"cuLibraryLoadData", 12000, kDefault},
    {"cuLibraryLoadFromFile", 12000, kDefault},
    {"cuLibraryUnload", 12000, kDefault},
    {"cuMemAlloc", 3020, kDefault},
    {"cuMemAllocAsync", 11020, kDefault},
    {"cuMemAllocAsync", 11020, kPerThread},
    {"cuMemAllocFromPoolAsync", 11020, kDefault},
    {"cuMemAllocFromPoolAsync", 11020, kPerThread},
    {"cuMemAllocManaged", 6000, kDefault},
    {"cuMemAllocPitch", 3020, kDefault},
    {"cuMemCreate", 10020, kDefault},
    {"cuMemFree", 3020, kDefault},
    {"cuMemGetInfo", 3020, kDefault},
    {"cuMemMap", 10020, kDefault},
    {"cuMemPoolCreate", 11020, kDefault},
    {"cuMemPoolDestroy", 11020, kDefault},
    {"cuMemPoolTrimTo", 11020, kDefault},
    {"cuMemRelease", 10020, kDefault},
    {"cuMemRetainAllocationHandle", 11000, kDefault},
    {"cuMemUnmap", 10020, kDefault},
    {"cuMipmappedArrayCreate", 5000, kDefault},
    {"cuMipmappedArrayDestroy", 5000, kDefault},
    {"cuModuleLoad", 2000, kDefault},
    {"cuModuleLoadData", 2000, kDefault},
    {"cuModuleLoadFatBinary", 2000, kDefault},
    {"cuModuleUnload", 2000, kDefault},
    {"cuStreamSynchronize", 2000, kDefault},
    {"cuStreamSynchronize", 7000, kPerThread},
};

class RuntimeRouteTest : public VgpuTest, public ::testing::WithParamInterface<RuntimeRequest> {};

TEST_P(RuntimeRouteTest, TheRuntimesRequestGetsWhatTheDriversTableGivesWrapped) {
  const RuntimeRequest& q = GetParam();
  const int flavor = q.flags == kPerThread ? 1 : 0;
  std::string expected = NewestAbi(q.base, q.version, flavor);
  // Without a per-thread ABI the per-thread request gets the one ABI there is.
  if (expected.empty() && flavor == 1) expected = NewestAbi(q.base, q.version, 0);
  ASSERT_FALSE(expected.empty()) << q.base << "@" << q.version;
  void* p = nullptr;
  CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  ASSERT_EQ(cuGetProcAddress_v2(q.base, &p, q.version, q.flags, &status), CUDA_SUCCESS);
  EXPECT_EQ(status, CU_GET_PROC_ADDRESS_SUCCESS);
  EXPECT_EQ(Where(p), IsHook(expected) ? Wrapper(expected) : "sim:" + expected);
}

INSTANTIATE_TEST_SUITE_P(Cuda13Runtime, RuntimeRouteTest, ::testing::ValuesIn(kRuntimeRequests),
                         [](const ::testing::TestParamInfo<RuntimeRequest>& p) {
                           return std::string(p.param.base) + "_" +
                                  std::to_string(p.param.version) +
                                  (p.param.flags == kPerThread ? "_ptds" : "");
                         });

}  // namespace
}  // namespace hami::testing
