// The simulated driver's graph family: explicit construction (kernel, memcpy, memset, empty,
// host and memory nodes), instantiation, launch, graph memory and stream capture, failures
// included. Graph memory is device-wide and outlives contexts, so every test gives back what
// it allocated (free, then cuDeviceGraphMemTrim) and asserts deltas only.
#include <cuda.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "cuda_device_fixture.h"
#include "support/enum_values.h"

// Exported by the simulated libcuda.so.1; cuda.h declares these ABIs for the driver's own
// build only (plain names map to their successors).
extern "C" {
CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* exec, CUgraph graph, CUgraphNode* error_node,
                                       char* log, size_t log_size);
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream stream, CUstreamCaptureStatus* status,
                                           cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                           size_t* num_deps);
}

namespace hami::testing {
namespace {

constexpr char kModuleImage[] = "hami-sim-module\nkernel busy\n";

// A host function that appends its tag to a log, so tests see what ran and in which order.
struct HostTag {
  std::vector<int>* log;
  int tag;
};
void CUDA_CB AppendTag(void* data) {
  auto* t = static_cast<HostTag*>(data);
  t->log->push_back(t->tag);
}

// A host function that records whether an event had completed when it ran.
struct EventProbe {
  CUevent event;
  CUresult seen = CUDA_ERROR_UNKNOWN;
};
void CUDA_CB QueryEvent(void* data) {
  auto* probe = static_cast<EventProbe*>(data);
  probe->seen = cuEventQuery(probe->event);
}

// The device fixture plus the "busy" kernel of a manifest module.
class SimGraphTest : public SimDeviceTest {
 protected:
  void SetUp() override {
    SimDeviceTest::SetUp();
    ASSERT_EQ(cuModuleLoadData(&module_, kModuleImage), CUDA_SUCCESS);
    ASSERT_EQ(cuModuleGetFunction(&kernel_, module_, "busy"), CUDA_SUCCESS);
  }
  void TearDown() override {
    EXPECT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
    SimDeviceTest::TearDown();
  }

  static CUgraph NewGraph() {
    CUgraph g = nullptr;
    EXPECT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
    return g;
  }
  static CUgraphExec Instantiate(CUgraph g, unsigned long long flags = 0) {
    CUgraphExec e = nullptr;
    EXPECT_EQ(cuGraphInstantiateWithFlags(&e, g, flags), CUDA_SUCCESS);
    return e;
  }
  // Launches on the test's stream and waits for it.
  CUresult LaunchAndWait(CUgraphExec e) {
    if (CUresult r = cuGraphLaunch(e, stream_); r != CUDA_SUCCESS) return r;
    return cuStreamSynchronize(stream_);
  }
  static std::vector<CUgraphNodeType> NodeTypes(CUgraph g) {
    size_t n = 0;
    EXPECT_EQ(cuGraphGetNodes(g, nullptr, &n), CUDA_SUCCESS);
    std::vector<CUgraphNode> nodes(n);
    EXPECT_EQ(cuGraphGetNodes(g, nodes.data(), &n), CUDA_SUCCESS);
    std::vector<CUgraphNodeType> types;
    for (CUgraphNode node : nodes) {
      CUgraphNodeType t;
      EXPECT_EQ(cuGraphNodeGetType(node, &t), CUDA_SUCCESS);
      types.push_back(t);
    }
    return types;
  }

  static CUgraphNode AddMemset8(CUgraph g, CUdeviceptr dst, uint8_t value, size_t bytes,
                                std::vector<CUgraphNode> deps = {}) {
    CUDA_MEMSET_NODE_PARAMS p{};
    p.dst = dst;
    p.value = value;
    p.elementSize = 1;
    p.width = bytes;
    p.height = 1;
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddMemsetNode(&n, g, deps.data(), deps.size(), &p, nullptr), CUDA_SUCCESS);
    return n;
  }
  static CUgraphNode AddDownload(CUgraph g, void* dst, CUdeviceptr src, size_t bytes,
                                 std::vector<CUgraphNode> deps = {}) {
    CUDA_MEMCPY3D p{};
    p.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    p.srcDevice = src;
    p.dstMemoryType = CU_MEMORYTYPE_HOST;
    p.dstHost = dst;
    p.WidthInBytes = bytes;
    p.Height = 1;
    p.Depth = 1;
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddMemcpyNode(&n, g, deps.data(), deps.size(), &p, nullptr), CUDA_SUCCESS);
    return n;
  }
  static CUgraphNode AddHost(CUgraph g, HostTag* tag, std::vector<CUgraphNode> deps = {}) {
    CUDA_HOST_NODE_PARAMS p{};
    p.fn = AppendTag;
    p.userData = tag;
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddHostNode(&n, g, deps.data(), deps.size(), &p), CUDA_SUCCESS);
    return n;
  }
  CUgraphNode AddKernel(CUgraph g, std::vector<CUgraphNode> deps = {}) {
    CUDA_KERNEL_NODE_PARAMS p{};
    p.func = kernel_;
    p.gridDimX = 4096;
    p.gridDimY = p.gridDimZ = 1;
    p.blockDimX = 256;
    p.blockDimY = p.blockDimZ = 1;
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, deps.data(), deps.size(), &p), CUDA_SUCCESS);
    return n;
  }

  CUmodule module_ = nullptr;
  CUfunction kernel_ = nullptr;
};

// ---- construction, instantiation, launch ----

class GraphTest : public SimGraphTest {};

TEST_F(GraphTest, CreateAndDestroyRejectBadArguments) {
  CUgraph g = nullptr;
  EXPECT_EQ(cuGraphCreate(&g, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphCreate(nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuGraphCreate(&g, 0), CUDA_SUCCESS);
  EXPECT_TRUE(NodeTypes(g).empty());
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(GraphTest, MemsetAndCopyNodesTakeEffectAtEachLaunchOnly) {
  CUdeviceptr dev = 0;
  ASSERT_EQ(cuMemAlloc_v2(&dev, 256), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(dev, 0, 256), CUDA_SUCCESS);
  std::vector<uint8_t> out(256, 0);
  CUgraph g = NewGraph();
  CUgraphNode set = AddMemset8(g, dev + 16, 0x5a, 100);
  AddDownload(g, out.data(), dev, 256, {set});
  EXPECT_EQ(NodeTypes(g),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEMCPY}));
  CUgraphExec e = Instantiate(g);
  EXPECT_EQ(Download(dev, 256), std::vector<uint8_t>(256, 0));  // instantiating runs nothing

  std::vector<uint8_t> want(256, 0);
  std::memset(want.data() + 16, 0x5a, 100);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(out, want);
  ASSERT_EQ(cuMemsetD8_v2(dev, 0, 256), CUDA_SUCCESS);
  std::fill(out.begin(), out.end(), 0);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(out, want);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(dev), CUDA_SUCCESS);
}

TEST_F(GraphTest, HostNodesRunOncePerLaunchInDependencyOrder) {
  std::vector<int> log;
  HostTag first{&log, 1}, second{&log, 2};
  CUgraph g = NewGraph();
  CUgraphNode a = AddHost(g, &first);
  CUgraphNode join = nullptr;
  ASSERT_EQ(cuGraphAddEmptyNode(&join, g, &a, 1), CUDA_SUCCESS);
  AddHost(g, &second, {join});
  EXPECT_EQ(NodeTypes(g),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_HOST, CU_GRAPH_NODE_TYPE_EMPTY,
                                          CU_GRAPH_NODE_TYPE_HOST}));
  CUgraphExec e = Instantiate(g);
  EXPECT_TRUE(log.empty());
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(log, (std::vector<int>{1, 2, 1, 2}));

  CUDA_HOST_NODE_PARAMS no_fn{};
  CUgraphNode n = nullptr;
  EXPECT_EQ(cuGraphAddHostNode(&n, g, nullptr, 0, &no_fn), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

// On the legacy stream a host node waits for the blocking streams of the context.
TEST_F(GraphTest, HostNodeOnTheLegacyStreamRunsAfterBlockingStreamsFinish) {
  CUstream blocking = nullptr;
  ASSERT_EQ(cuStreamCreate(&blocking, CU_STREAM_DEFAULT), CUDA_SUCCESS);
  CUevent done = nullptr;
  ASSERT_EQ(cuEventCreate(&done, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
  // About 250 waves: milliseconds of device time.
  ASSERT_EQ(cuLaunchKernel(kernel_, 4096 * 64, 1, 1, 256, 1, 1, 0, blocking, nullptr, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(done, blocking), CUDA_SUCCESS);
  EventProbe probe{done};
  CUgraph g = NewGraph();
  CUDA_HOST_NODE_PARAMS p{};
  p.fn = QueryEvent;
  p.userData = &probe;
  CUgraphNode n = nullptr;
  ASSERT_EQ(cuGraphAddHostNode(&n, g, nullptr, 0, &p), CUDA_SUCCESS);
  CUgraphExec e = Instantiate(g);
  ASSERT_EQ(cuGraphLaunch(e, nullptr), CUDA_SUCCESS);
  ASSERT_EQ(cuCtxSynchronize(), CUDA_SUCCESS);
  EXPECT_EQ(probe.seen, CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(done), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamDestroy_v2(blocking), CUDA_SUCCESS);
}

TEST_F(GraphTest, KernelNodesOccupyTheDeviceWhenLaunched) {
  CUgraph g = NewGraph();
  CUgraphNode k = AddKernel(g);
  AddKernel(g, {k});
  CUgraphExec e = Instantiate(g);
  CUevent start = nullptr, end = nullptr;
  ASSERT_EQ(cuEventCreate(&start, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventCreate(&end, CU_EVENT_DEFAULT), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(start, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuGraphLaunch(e, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventRecord(end, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuEventSynchronize(end), CUDA_SUCCESS);
  float ms = 0;
  ASSERT_EQ(cuEventElapsedTime_v2(&ms, start, end), CUDA_SUCCESS);
  EXPECT_GT(ms, 0.0f);
  EXPECT_EQ(cuEventDestroy_v2(start), CUDA_SUCCESS);
  EXPECT_EQ(cuEventDestroy_v2(end), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(GraphTest, NodesNeedAValidFunctionAndDependenciesOfTheirOwnGraph) {
  CUgraph g = NewGraph(), other = NewGraph();
  CUDA_KERNEL_NODE_PARAMS p{};
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = p.blockDimY = p.blockDimZ = 1;
  CUgraphNode n = nullptr;
  EXPECT_EQ(cuGraphAddKernelNode_v2(&n, g, nullptr, 0, &p), CUDA_ERROR_INVALID_VALUE);
  CUgraphNode foreign = nullptr;
  ASSERT_EQ(cuGraphAddEmptyNode(&foreign, other, nullptr, 0), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphAddEmptyNode(&n, g, &foreign, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddEmptyNode(&n, g, nullptr, 1), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphAddEmptyNode(nullptr, g, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(NodeTypes(g).empty());
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphAddEmptyNode(&n, g, nullptr, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(other), CUDA_SUCCESS);
}

TEST_F(GraphTest, EveryInstantiateEntryPointGivesALaunchableSnapshot) {
  std::vector<int> log;
  HostTag tag{&log, 7};
  CUgraph g = NewGraph();
  AddHost(g, &tag);

  CUgraphExec with_flags = Instantiate(g);
  CUgraphExec v2 = nullptr;
  auto* garbage = reinterpret_cast<CUgraphNode>(uintptr_t(0x1234));
  CUgraphNode error_node = garbage;
  char log_buffer[64];
  std::memset(log_buffer, 'x', sizeof(log_buffer));
  ASSERT_EQ(cuGraphInstantiate_v2(&v2, g, &error_node, log_buffer, sizeof(log_buffer)),
            CUDA_SUCCESS);
  EXPECT_EQ(error_node, nullptr);
  EXPECT_EQ(log_buffer[0], '\0');
  CUgraphExec with_params = nullptr;
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.result_out = CUDA_GRAPH_INSTANTIATE_ERROR;
  ASSERT_EQ(cuGraphInstantiateWithParams(&with_params, g, &params), CUDA_SUCCESS);
  EXPECT_EQ(params.result_out, CUDA_GRAPH_INSTANTIATE_SUCCESS);

  AddHost(g, &tag);  // later edits do not reach executable graphs made before them
  for (CUgraphExec e : {with_flags, v2, with_params}) ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(log, (std::vector<int>{7, 7, 7}));
  for (CUgraphExec e : {with_flags, v2, with_params})
    EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(GraphTest, InstantiateRejectsBadFlagsAndDeadGraphs) {
  CUgraph g = NewGraph();
  CUgraphExec e = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&e, g, 1ull << 20), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphInstantiateWithFlags(&e, g,
                                        CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                            CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH),
            CUDA_ERROR_INVALID_VALUE);  // documented as mutually exclusive
  CUDA_GRAPH_INSTANTIATE_PARAMS params{};
  params.flags = 1ull << 20;
  EXPECT_EQ(cuGraphInstantiateWithParams(&e, g, &params), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(params.result_out, CUDA_GRAPH_INSTANTIATE_ERROR);
  EXPECT_EQ(cuGraphInstantiateWithFlags(nullptr, g, 0), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphInstantiateWithFlags(&e, g, 0), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(GraphTest, ADestroyedExecCannotBeLaunchedOrDestroyedAgain) {
  CUgraph g = NewGraph();
  AddKernel(g);
  CUgraphExec e = Instantiate(g);
  ASSERT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphLaunch(e, stream_), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

// ---- graph memory ----

class GraphMemoryTest : public SimGraphTest {
 protected:
  // An allocation node of `bytes` on device 0; its address is in *dptr.
  static CUgraphNode AddAlloc(CUgraph g, size_t bytes, CUdeviceptr* dptr,
                              std::vector<CUgraphNode> deps = {}) {
    CUDA_MEM_ALLOC_NODE_PARAMS p{};
    p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.poolProps.location.id = 0;
    p.bytesize = bytes;
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddMemAllocNode(&n, g, deps.data(), deps.size(), &p), CUDA_SUCCESS);
    *dptr = p.dptr;
    return n;
  }
  static CUgraphNode AddFree(CUgraph g, CUdeviceptr dptr, std::vector<CUgraphNode> deps) {
    CUgraphNode n = nullptr;
    EXPECT_EQ(cuGraphAddMemFreeNode(&n, g, deps.data(), deps.size(), dptr), CUDA_SUCCESS);
    return n;
  }
  uint64_t Attr(CUgraphMem_attribute attr) const {
    cuuint64_t v = 0;
    EXPECT_EQ(cuDeviceGetGraphMemAttribute(dev_, attr, &v), CUDA_SUCCESS);
    return v;
  }
  uint64_t Used() const { return Attr(CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT); }
  uint64_t Reserved() const { return Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_CURRENT); }
};

TEST_F(GraphMemoryTest, AllocNodeAddressIsFixedAtAddAndChargedAtFirstLaunch) {
  size_t before = FreeBytes();
  uint64_t used0 = Used(), reserved0 = Reserved();
  CUgraph g = NewGraph();
  CUdeviceptr p = 0;
  CUgraphNode alloc = AddAlloc(g, 2 * g_, &p);
  ASSERT_NE(p, 0u);
  std::vector<uint8_t> out(64, 0);
  CUgraphNode set = AddMemset8(g, p, 0x42, 64, {alloc});
  AddDownload(g, out.data(), p, 64, {set});
  CUgraphExec e = Instantiate(g);
  EXPECT_EQ(FreeBytes(), before);  // nothing charged by adding or instantiating
  EXPECT_EQ(Reserved(), reserved0);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);  // not allocated before a launch

  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(out, std::vector<uint8_t>(64, 0x42));
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  EXPECT_EQ(Used() - used0, 2 * g_);
  EXPECT_EQ(Reserved() - reserved0, 2 * g_);
  EXPECT_GE(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), used0 + 2 * g_);
  EXPECT_GE(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), reserved0 + 2 * g_);
  EXPECT_EQ(Download(p, 64), std::vector<uint8_t>(64, 0x42));  // live after the launch

  // Not freed by the graph: relaunching fails until the allocation is freed.
  EXPECT_EQ(cuGraphLaunch(e, stream_), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(Used(), used0);
  EXPECT_EQ(before - FreeBytes(), 2 * g_);  // still reserved for graphs
  ASSERT_EQ(cuDeviceGraphMemTrim(dev_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(Reserved(), reserved0);

  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);  // charged again, at the same address
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  ASSERT_EQ(cuMemFreeAsync(p, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGraphMemTrim(dev_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(GraphMemoryTest, FreedGraphMemoryStaysReservedUntilTrimmed) {
  size_t before = FreeBytes();
  uint64_t used0 = Used(), reserved0 = Reserved();
  CUgraph g = NewGraph();
  CUdeviceptr p = 0;
  CUgraphNode alloc = AddAlloc(g, g_ + 1, &p);
  AddFree(g, p, {AddMemset8(g, p, 1, g_ + 1, {alloc})});
  CUgraphExec e = Instantiate(g);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(Used(), used0);
  EXPECT_EQ(Reserved() - reserved0, 2 * g_);
  EXPECT_EQ(before - FreeBytes(), 2 * g_);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);  // reuses what it reserved
  EXPECT_EQ(before - FreeBytes(), 2 * g_);

  ASSERT_EQ(cuDeviceGraphMemTrim(dev_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(Reserved(), reserved0);
  cuuint64_t zero = 0;
  ASSERT_EQ(cuDeviceSetGraphMemAttribute(dev_, CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH, &zero),
            CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceSetGraphMemAttribute(dev_, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &zero),
            CUDA_SUCCESS);
  EXPECT_EQ(Attr(CU_GRAPH_MEM_ATTR_RESERVED_MEM_HIGH), Reserved());
  EXPECT_EQ(Attr(CU_GRAPH_MEM_ATTR_USED_MEM_HIGH), Used());
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(GraphMemoryTest, MemoryOfADestroyedGraphReturnsOnceNothingCanReachIt) {
  size_t before = FreeBytes();
  CUgraph g = NewGraph();
  CUdeviceptr p = 0;
  AddAlloc(g, g_, &p);  // no free node: the memory outlives the launch
  CUgraphExec e = Instantiate(g);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), g_) << "still allocated: the program may use and free it";
  std::vector<uint8_t> bytes(64, 7);
  EXPECT_EQ(cuMemcpyHtoD_v2(p, bytes.data(), bytes.size()), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before) << "no graph can reach it again, so no trim is needed";
  EXPECT_EQ(cuMemcpyHtoD_v2(p, bytes.data(), bytes.size()), CUDA_ERROR_INVALID_VALUE);
}

TEST_F(GraphMemoryTest, AutoFreeOnLaunchFreesThePreviousLaunchsAllocation) {
  size_t before = FreeBytes();
  CUgraph g = NewGraph();
  CUdeviceptr p = 0;
  AddAlloc(g, g_, &p);
  CUgraphExec e = Instantiate(g, CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  EXPECT_EQ(before - FreeBytes(), g_);
  ASSERT_EQ(cuMemFree_v2(p), CUDA_SUCCESS);
  ASSERT_EQ(cuDeviceGraphMemTrim(dev_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(GraphMemoryTest, AGraphWithMemoryNodesHasOneExecutableGraphAtATime) {
  CUgraph g = NewGraph();
  CUdeviceptr p = 0;
  CUgraphNode alloc = AddAlloc(g, g_, &p);
  AddFree(g, p, {alloc});
  CUgraphExec first = Instantiate(g);
  CUgraphExec second = nullptr;
  EXPECT_EQ(cuGraphInstantiateWithFlags(&second, g, 0), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuGraphExecDestroy(first), CUDA_SUCCESS);
  second = Instantiate(g);
  EXPECT_EQ(cuGraphExecDestroy(second), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(GraphMemoryTest, FreeNodesTakeOnlyAllocationsOfAllocationNodesOnce) {
  CUgraph g = NewGraph();
  CUdeviceptr plain = 0, p = 0;
  ASSERT_EQ(cuMemAlloc_v2(&plain, 4096), CUDA_SUCCESS);
  CUgraphNode n = nullptr;
  EXPECT_EQ(cuGraphAddMemFreeNode(&n, g, nullptr, 0, plain), CUDA_ERROR_INVALID_VALUE);
  int on_stack = 0;
  EXPECT_EQ(cuGraphAddMemFreeNode(&n, g, nullptr, 0, CUdeviceptr(uintptr_t(&on_stack))),
            CUDA_ERROR_INVALID_VALUE);
  CUgraphNode alloc = AddAlloc(g, 4096, &p);
  EXPECT_EQ(cuGraphAddMemFreeNode(&n, g, &alloc, 1, p + 64), CUDA_ERROR_INVALID_VALUE);
  CUgraphNode freed = AddFree(g, p, {alloc});
  EXPECT_EQ(cuGraphAddMemFreeNode(&n, g, &freed, 1, p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(NodeTypes(g), (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                                                        CU_GRAPH_NODE_TYPE_MEM_FREE}));
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(plain), CUDA_SUCCESS);
}

TEST_F(GraphMemoryTest, BadAllocNodesAndQueriesAreRejected) {
  CUgraph g = NewGraph();
  CUDA_MEM_ALLOC_NODE_PARAMS p{};
  p.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  CUgraphNode n = nullptr;
  EXPECT_EQ(cuGraphAddMemAllocNode(&n, g, nullptr, 0, &p), CUDA_ERROR_INVALID_VALUE);  // 0 bytes
  p.bytesize = 4096;
  p.poolProps.location.type = CU_MEM_LOCATION_TYPE_HOST;
  EXPECT_EQ(cuGraphAddMemAllocNode(&n, g, nullptr, 0, &p), CUDA_ERROR_INVALID_VALUE);
  EXPECT_TRUE(NodeTypes(g).empty());

  cuuint64_t v = 0;
  EXPECT_EQ(cuDeviceGetGraphMemAttribute(dev_, UnnamedValue<CUgraphMem_attribute>(99), &v),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuDeviceGetGraphMemAttribute(7, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v),
            CUDA_ERROR_INVALID_DEVICE);
  v = 1;
  EXPECT_EQ(cuDeviceSetGraphMemAttribute(dev_, CU_GRAPH_MEM_ATTR_USED_MEM_HIGH, &v),
            CUDA_ERROR_INVALID_VALUE);  // a high watermark can only be reset to zero
  v = 0;
  EXPECT_EQ(cuDeviceSetGraphMemAttribute(dev_, CU_GRAPH_MEM_ATTR_USED_MEM_CURRENT, &v),
            CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

// ---- stream capture ----

class StreamCaptureTest : public SimGraphTest {
 protected:
  CUstreamCaptureStatus Status(CUstream s) {
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
    EXPECT_EQ(cuStreamIsCapturing(s, &st), CUDA_SUCCESS);
    return st;
  }
};

TEST_F(StreamCaptureTest, CapturedWorkBecomesNodesAndRunsOnlyWhenLaunched) {
  constexpr size_t kBytes = 256;
  CUdeviceptr dev = 0;
  ASSERT_EQ(cuMemAlloc_v2(&dev, kBytes), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8_v2(dev, 0, kBytes), CUDA_SUCCESS);
  auto in = Pattern(kBytes, 3);
  std::vector<uint8_t> out(kBytes, 0);
  std::vector<int> log;
  HostTag tag{&log, 1};
  size_t before = FreeBytes();

  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchKernel(kernel_, 4096, 1, 1, 256, 1, 1, 0, stream_, nullptr, nullptr),
            CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyHtoDAsync_v2(dev, in.data(), kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(dev, 0x77, 16, stream_), CUDA_SUCCESS);
  CUdeviceptr tmp = 0;
  ASSERT_EQ(cuMemAllocAsync(&tmp, 1 << 20, stream_), CUDA_SUCCESS);
  ASSERT_NE(tmp, 0u);
  ASSERT_EQ(cuMemcpyDtoDAsync_v2(tmp, dev, kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemcpyDtoHAsync_v2(out.data(), tmp, kBytes, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuMemFreeAsync(tmp, stream_), CUDA_SUCCESS);
  ASSERT_EQ(cuLaunchHostFunc(stream_, AppendTag, &tag), CUDA_SUCCESS);
  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(stream_, &g), CUDA_SUCCESS);
  ASSERT_NE(g, nullptr);

  // Nothing ran and nothing was charged.
  EXPECT_TRUE(log.empty());
  EXPECT_EQ(out, std::vector<uint8_t>(kBytes, 0));
  EXPECT_EQ(Download(dev, kBytes), std::vector<uint8_t>(kBytes, 0));
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(NodeTypes(g),
            (std::vector<CUgraphNodeType>{CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
                                          CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_MEM_ALLOC,
                                          CU_GRAPH_NODE_TYPE_MEMCPY, CU_GRAPH_NODE_TYPE_MEMCPY,
                                          CU_GRAPH_NODE_TYPE_MEM_FREE, CU_GRAPH_NODE_TYPE_HOST}));

  CUgraphExec e = Instantiate(g);
  ASSERT_EQ(LaunchAndWait(e), CUDA_SUCCESS);
  auto want = in;
  std::memset(want.data(), 0x77, 16);
  EXPECT_EQ(out, want);
  EXPECT_EQ(log, std::vector<int>{1});
  EXPECT_EQ(before - FreeBytes(), g_);  // the captured allocation, reserved after its free
  ASSERT_EQ(cuDeviceGraphMemTrim(dev_), CUDA_SUCCESS);
  EXPECT_EQ(FreeBytes(), before);
  EXPECT_EQ(cuGraphExecDestroy(e), CUDA_SUCCESS);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
  EXPECT_EQ(cuMemFree_v2(dev), CUDA_SUCCESS);
}

TEST_F(StreamCaptureTest, CaptureInfoDescribesTheCaptureInProgress) {
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);
  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL), CUDA_SUCCESS);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_ACTIVE);

  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  CUgraph capturing = nullptr;
  const CUgraphNode* deps = nullptr;
  size_t num_deps = 99;
  ASSERT_EQ(cuStreamGetCaptureInfo_v2(stream_, &st, &id, &capturing, &deps, &num_deps),
            CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_NE(id, 0u);
  EXPECT_NE(capturing, nullptr);
  EXPECT_EQ(num_deps, 0u);

  ASSERT_EQ(cuLaunchKernel(kernel_, 1, 1, 1, 32, 1, 1, 0, stream_, nullptr, nullptr), CUDA_SUCCESS);
  cuuint64_t id_again = 0;
  ASSERT_EQ(cuStreamGetCaptureInfo_v2(stream_, &st, &id_again, nullptr, &deps, &num_deps),
            CUDA_SUCCESS);
  EXPECT_EQ(id_again, id);
  ASSERT_EQ(num_deps, 1u);
  CUgraphNodeType type;
  ASSERT_EQ(cuGraphNodeGetType(deps[0], &type), CUDA_SUCCESS);
  EXPECT_EQ(type, CU_GRAPH_NODE_TYPE_KERNEL);
  // The current entry point (cuStreamGetCaptureInfo_v3) agrees.
  ASSERT_EQ(cuStreamGetCaptureInfo(stream_, &st, &id_again, nullptr, nullptr, nullptr, nullptr),
            CUDA_SUCCESS);
  EXPECT_EQ(st, CU_STREAM_CAPTURE_STATUS_ACTIVE);
  EXPECT_EQ(id_again, id);

  CUgraph g = nullptr;
  ASSERT_EQ(cuStreamEndCapture(stream_, &g), CUDA_SUCCESS);
  EXPECT_EQ(g, capturing);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

TEST_F(StreamCaptureTest, CaptureOfTheLegacyStreamIsUnsupported) {
  EXPECT_EQ(cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(cuStreamBeginCapture_v2(CU_STREAM_LEGACY, CU_STREAM_CAPTURE_MODE_RELAXED),
            CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(Status(nullptr), CU_STREAM_CAPTURE_STATUS_NONE);
}

TEST_F(StreamCaptureTest, SynchronizeDuringCaptureInvalidatesIt) {
  CUdeviceptr dev = 0;
  ASSERT_EQ(cuMemAlloc_v2(&dev, 64), CUDA_SUCCESS);
  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  ASSERT_EQ(cuMemsetD8Async(dev, 1, 64, stream_), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph g = reinterpret_cast<CUgraph>(uintptr_t(0x1234));
  EXPECT_EQ(cuStreamEndCapture(stream_, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_NONE);
  EXPECT_EQ(cuStreamSynchronize(stream_), CUDA_SUCCESS);  // an ordinary stream again
  EXPECT_EQ(cuMemFree_v2(dev), CUDA_SUCCESS);
}

TEST_F(StreamCaptureTest, QueryDuringCaptureInvalidatesIt) {
  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(cuStreamQuery(stream_), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_INVALIDATED);
  CUgraph g = nullptr;
  EXPECT_EQ(cuStreamEndCapture(stream_, &g), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
}

TEST_F(StreamCaptureTest, CaptureCannotBeEndedWithoutBeginOrBegunTwice) {
  CUgraph g = nullptr;
  EXPECT_NE(cuStreamEndCapture(stream_, &g), CUDA_SUCCESS);
  EXPECT_EQ(g, nullptr);
  ASSERT_EQ(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_NE(cuStreamBeginCapture_v2(stream_, CU_STREAM_CAPTURE_MODE_GLOBAL), CUDA_SUCCESS);
  EXPECT_EQ(Status(stream_), CU_STREAM_CAPTURE_STATUS_ACTIVE);  // the first one goes on
  EXPECT_EQ(cuStreamEndCapture(stream_, nullptr), CUDA_ERROR_INVALID_VALUE);
  ASSERT_EQ(cuStreamEndCapture(stream_, &g), CUDA_SUCCESS);
  EXPECT_TRUE(NodeTypes(g).empty());
  EXPECT_EQ(cuGraphDestroy(g), CUDA_SUCCESS);
}

}  // namespace
}  // namespace hami::testing
