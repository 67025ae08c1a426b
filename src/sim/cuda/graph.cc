// Graphs: explicit construction, stream capture, instantiation and launch.
//
// A graph is a list of nodes in insertion order (a valid topological order: a node's
// dependencies exist before it). An executable graph is a copy of that list. Launching it
// runs the nodes in order on the stream: kernels occupy the device as launches do, copies
// and sets move bytes, a memory-allocation node makes its memory resident (charging the
// device the first time) and a free node returns it to the graph pool, where it stays
// reserved until cuDeviceGraphMemTrim. A launch fails while an allocation of the previous
// launch is still live, unless the graph was instantiated with
// CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH: such an executable graph starts with one
// free node per allocation node (a free node that names its allocation), run before the
// check.
#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "common/clock.h"
#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

uint64_t RoundUp(uint64_t v, uint64_t to) { return (v + to - 1) / to * to; }

CUresult CheckDeps(CUgraph g, const CUgraphNode* deps, size_t n) {
  if (n > 0 && deps == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    if (!D().Live(deps[i], HandleKind::kGraphNode) || deps[i]->graph != g) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

// Common part of every cuGraphAdd*Node: validates, then appends `node`.
CUresult AddNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                 CUgraphNode_st* node) {
  std::unique_ptr<CUgraphNode_st> owned(node);
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDeps(g, deps, n); r != CUDA_SUCCESS) return r;
  node->graph = g;
  node->deps.assign(deps, deps + n);
  g->nodes.push_back(owned.release());
  D().Register(node, HandleKind::kGraphNode);
  *out = node;
  return CUDA_SUCCESS;
}

CUresult AddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n, CUfunction f,
                       const unsigned grid[3], const unsigned block[3], unsigned smem) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(f, HandleKind::kFunction)) return CUDA_ERROR_INVALID_VALUE;
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kKernel;
  node->func = f;
  std::copy(grid, grid + 3, node->grid);
  std::copy(block, block + 3, node->block);
  node->shared_mem = smem;
  return AddNode(out, g, deps, n, node);
}

void DestroyGraphLocked(CUgraph g) {
  Driver& d = D();
  for (CUgraphNode_st* n : g->nodes) {
    d.Unregister(n);
    delete n;
  }
  d.Unregister(g);
  delete g;
  PruneGraphAllocsLocked();
}

// True when a live executable graph was instantiated from the graph that owns `alloc`.
bool AllocInstantiated(const GraphAlloc* alloc) {
  for (auto& [h, kind] : D().handles) {
    if (kind != HandleKind::kGraphExec) continue;
    for (const CUgraphNode_st& n : static_cast<const CUgraphExec_st*>(h)->nodes) {
      if (n.kind == NodeKind::kMemAlloc && n.alloc.get() == alloc) return true;
    }
  }
  return false;
}

CUresult Instantiate(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  auto e = std::make_unique<CUgraphExec_st>();
  e->ctx = ctx;
  for (CUgraphNode_st* n : g->nodes) {
    if (n->kind == NodeKind::kKernel && !D().Live(n->func, HandleKind::kFunction)) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    // A graph with memory nodes has at most one executable graph at a time.
    if (n->kind == NodeKind::kMemAlloc && AllocInstantiated(n->alloc.get())) {
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (n->kind == NodeKind::kMemAlloc &&
        (flags & CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH)) {
      CUgraphNode_st auto_free{};
      auto_free.kind = NodeKind::kMemFree;
      auto_free.free_ptr = CUdeviceptr(n->alloc->base);
      auto_free.alloc = n->alloc;
      e->nodes.insert(e->nodes.begin(), auto_free);
    }
    e->nodes.push_back(*n);
    e->nodes.back().deps.clear();
  }
  g->instantiated += 1;
  D().Register(e.get(), HandleKind::kGraphExec);
  *out = e.release();
  return CUDA_SUCCESS;
}

// An auto-free node of CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH (see the top).
bool IsAutoFree(const CUgraphNode_st& n) { return n.kind == NodeKind::kMemFree && n.alloc; }

CUresult GraphLaunch(CUgraphExec e, CUstream stream, bool ptsz) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture != nullptr) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  size_t first = 0;
  for (; first < e->nodes.size() && IsAutoFree(e->nodes[first]); ++first) {
    GraphFreeLocked(uintptr_t(e->nodes[first].free_ptr));
  }
  for (CUgraphNode_st& n : e->nodes) {
    if (n.kind == NodeKind::kMemAlloc && n.alloc->in_use) return CUDA_ERROR_INVALID_VALUE;
  }
  // Memory first: a launch that cannot get its memory fails before running anything.
  std::vector<GraphAlloc*> charged;
  for (CUgraphNode_st& n : e->nodes) {
    if (n.kind != NodeKind::kMemAlloc) continue;
    bool was_resident = n.alloc->resident;
    if (CUresult r = GraphAllocLaunchLocked(n.alloc.get()); r != CUDA_SUCCESS) {
      for (GraphAlloc* a : charged) {
        D().Uncharge(a->device, a->charge);
        a->resident = false;
        a->in_use = false;
      }
      return r;
    }
    if (!was_resident) charged.push_back(n.alloc.get());
  }
  uint64_t exec_id = reinterpret_cast<uintptr_t>(e);
  for (size_t i = first; i < e->nodes.size(); ++i) {
    CUgraphNode_st& n = e->nodes[i];
    CUresult r = CUDA_SUCCESS;
    switch (n.kind) {
      case NodeKind::kKernel:
        if (!D().Live(n.func, HandleKind::kFunction)) return CUDA_ERROR_INVALID_VALUE;
        r = LaunchLocked(api, n.func, n.grid, n.block, n.shared_mem, s, false);
        // Launching may have waited (full queue) with the driver unlocked.
        if (!D().Live(e, HandleKind::kGraphExec) || reinterpret_cast<uintptr_t>(e) != exec_id) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        break;
      case NodeKind::kMemcpy:
        r = Copy3DLocked(n.copy);
        break;
      case NodeKind::kMemset:
        r = MemsetLocked(uintptr_t(n.memset.dst), n.memset.pitch, n.memset.value,
                         n.memset.elementSize, n.memset.width, n.memset.height);
        break;
      case NodeKind::kMemFree:
        GraphFreeLocked(uintptr_t(n.free_ptr));
        if (Allocation* a = D().FindAllocation(uintptr_t(n.free_ptr), 1);
            a != nullptr && a->kind != AllocKind::kGraph) {
          r = FreeLocked(uintptr_t(n.free_ptr), true);
        }
        break;
      case NodeKind::kHost: {
        // Runs when the stream reaches it; on the legacy stream that includes the work of
        // every blocking stream of the context.
        WaitUnlocked(api, StreamTail(s));
        uint64_t stream_id = s->id;
        CUhostFn fn = n.host_fn;
        void* data = n.host_data;
        api.lock().unlock();
        fn(data);
        api.lock().lock();
        // The driver was unlocked: the exec or the stream may be gone.
        if (!D().Live(e, HandleKind::kGraphExec) || !D().Live(s, HandleKind::kStream) ||
            s->id != stream_id) {
          return CUDA_ERROR_INVALID_VALUE;
        }
        break;
      }
      case NodeKind::kMemAlloc:
      case NodeKind::kEmpty:
      case NodeKind::kEventRecord:
        break;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode, bool ptsz) {
  if (int(mode) < 0 || int(mode) > 2) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (s->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  auto* g = new CUgraph_st{};
  D().Register(g, HandleKind::kGraph);
  s->capture = g;
  s->capture_mode = mode;
  s->capture_id = D().next_id++;
  s->capture_invalidated = false;
  s->capture_deps.clear();
  return CUDA_SUCCESS;
}

CUresult EndCapture(CUstream stream, CUgraph* out, bool ptsz) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  CUgraph g = s->capture;
  s->capture = nullptr;
  s->capture_deps.clear();
  if (s->capture_invalidated) {
    DestroyGraphLocked(g);
    *out = nullptr;
    return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  }
  *out = g;
  return CUDA_SUCCESS;
}

CUresult CaptureInfo(CUstream stream, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                     const CUgraphNode** deps, size_t* num_deps, bool ptsz) {
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  CUstreamCaptureStatus st = s->capture == nullptr    ? CU_STREAM_CAPTURE_STATUS_NONE
                             : s->capture_invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                                      : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  if (status != nullptr) *status = st;
  if (id != nullptr && s->capture != nullptr) *id = s->capture_id;
  if (graph != nullptr) *graph = s->capture;
  if (deps != nullptr) *deps = s->capture_deps.empty() ? nullptr : s->capture_deps.data();
  if (num_deps != nullptr) *num_deps = s->capture_deps.size();
  return CUDA_SUCCESS;
}

// The launch shape of a kernel node (what a graph launch will run).
template <typename Params>
CUresult KernelNodeParams(CUgraphNode node, Params* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(node, HandleKind::kGraphNode) || node->kind != NodeKind::kKernel) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *p = {};
  p->func = node->func;
  p->gridDimX = node->grid[0];
  p->gridDimY = node->grid[1];
  p->gridDimZ = node->grid[2];
  p->blockDimX = node->block[0];
  p->blockDimY = node->block[1];
  p->blockDimZ = node->block[2];
  p->sharedMemBytes = node->shared_mem;
  return CUDA_SUCCESS;
}

}  // namespace

CUgraphNode_st* AppendCaptureNode(CUstream_st* s, NodeKind kind) {
  auto* n = new CUgraphNode_st{};
  n->graph = s->capture;
  n->kind = kind;
  n->deps = s->capture_deps;
  s->capture->nodes.push_back(n);
  D().Register(n, HandleKind::kGraphNode);
  s->capture_deps = {n};
  return n;
}

}  // namespace hami::sim

using namespace hami;       // NOLINT: the exported C API below
using namespace hami::sim;  // NOLINT

extern "C" {

CUresult CUDAAPI cuGraphCreate(CUgraph* phGraph, unsigned int flags) {
  if (phGraph == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto* g = new CUgraph_st{};
  D().Register(g, HandleKind::kGraph);
  *phGraph = g;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphDestroy(CUgraph g) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  DestroyGraphLocked(g);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                         size_t n, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return AddKernelNode(out, g, deps, n, p->func, grid, block, p->sharedMemBytes);
}

CUresult CUDAAPI cuGraphAddKernelNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                      size_t n, const CUDA_KERNEL_NODE_PARAMS_v1* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  return AddKernelNode(out, g, deps, n, p->func, grid, block, p->sharedMemBytes);
}

CUresult CUDAAPI cuGraphAddMemcpyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                      size_t n, const CUDA_MEMCPY3D* copy, CUcontext) {
  if (copy == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kMemcpy;
  node->copy = *copy;
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphAddMemsetNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                      size_t n, const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kMemset;
  node->memset = *p;
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphAddEmptyNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                     size_t n) {
  ApiLock api;
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kEmpty;
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphAddHostNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                                    const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kHost;
  node->host_fn = p->fn;
  node->host_data = p->userData;
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphAddMemAllocNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                        size_t n, CUDA_MEM_ALLOC_NODE_PARAMS* p) {
  if (p == nullptr || p->bytesize == 0 || p->poolProps.allocType != CU_MEM_ALLOCATION_TYPE_PINNED ||
      p->poolProps.location.type != CU_MEM_LOCATION_TYPE_DEVICE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  int physical;
  if (CUresult r = PhysicalDevice(p->poolProps.location.id, &physical); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_INVALID_DEVICE ? CUDA_ERROR_INVALID_VALUE : r;
  }
  CUctx_st* ctx;
  if (CUresult r = RequireContext(&ctx); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = CheckDeps(g, deps, n); r != CUDA_SUCCESS) return r;
  void* mem = mmap(nullptr, p->bytesize, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (mem == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  auto ga = std::make_shared<GraphAlloc>();
  ga->base = reinterpret_cast<uintptr_t>(mem);
  ga->size = p->bytesize;
  ga->device = physical;
  ga->charge = RoundUp(p->bytesize, D().Granularity());
  Allocation a;
  a.base = ga->base;
  a.size = ga->size;
  a.mapped_size = ga->size;
  a.kind = AllocKind::kGraph;
  a.device = physical;
  a.ctx = ctx;
  a.graph_alloc = ga.get();
  D().allocations[a.base] = a;
  D().graph_allocs.push_back(ga);
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kMemAlloc;
  node->alloc = ga;
  p->dptr = CUdeviceptr(ga->base);
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphAddMemFreeNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                       size_t n, CUdeviceptr dptr) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  // Only memory of an allocation node, and only once in a graph.
  Allocation* a = D().FindAllocation(uintptr_t(dptr), 1);
  if (a == nullptr || a->base != uintptr_t(dptr) || a->kind != AllocKind::kGraph) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (D().Live(g, HandleKind::kGraph)) {
    for (const CUgraphNode_st* other : g->nodes) {
      if (other->kind == NodeKind::kMemFree && other->free_ptr == dptr) {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
  }
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kMemFree;
  node->free_ptr = dptr;
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* numNodes) {
  if (numNodes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  if (nodes != nullptr) {
    size_t k = std::min(*numNodes, g->nodes.size());
    std::copy(g->nodes.begin(), g->nodes.begin() + long(k), nodes);
  }
  *numNodes = g->nodes.size();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetParams_v2(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS* p) {
  return KernelNodeParams(node, p);
}

CUresult CUDAAPI cuGraphKernelNodeGetParams(CUgraphNode node, CUDA_KERNEL_NODE_PARAMS_v1* p) {
  return KernelNodeParams(node, p);
}

CUresult CUDAAPI cuGraphMemAllocNodeGetParams(CUgraphNode node,
                                              CUDA_MEM_ALLOC_NODE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(node, HandleKind::kGraphNode) || node->kind != NodeKind::kMemAlloc) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto& visible = D().visible;
  auto ordinal = std::find(visible.begin(), visible.end(), node->alloc->device);
  *params = {};
  params->poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  params->poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  params->poolProps.location.id = int(ordinal - visible.begin());
  params->bytesize = node->alloc->size;
  params->dptr = CUdeviceptr(node->alloc->base);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetType(CUgraphNode node, CUgraphNodeType* type) {
  if (type == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(node, HandleKind::kGraphNode)) return CUDA_ERROR_INVALID_VALUE;
  switch (node->kind) {
    case NodeKind::kKernel:
      *type = CU_GRAPH_NODE_TYPE_KERNEL;
      break;
    case NodeKind::kMemcpy:
      *type = CU_GRAPH_NODE_TYPE_MEMCPY;
      break;
    case NodeKind::kMemset:
      *type = CU_GRAPH_NODE_TYPE_MEMSET;
      break;
    case NodeKind::kEmpty:
      *type = CU_GRAPH_NODE_TYPE_EMPTY;
      break;
    case NodeKind::kMemAlloc:
      *type = CU_GRAPH_NODE_TYPE_MEM_ALLOC;
      break;
    case NodeKind::kMemFree:
      *type = CU_GRAPH_NODE_TYPE_MEM_FREE;
      break;
    case NodeKind::kHost:
      *type = CU_GRAPH_NODE_TYPE_HOST;
      break;
    case NodeKind::kEventRecord:
      *type = CU_GRAPH_NODE_TYPE_EVENT_RECORD;
      break;
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g,
                                             unsigned long long flags) {
  constexpr unsigned long long kMask =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD |
      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  constexpr unsigned long long kExclusive =
      CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH | CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH;
  if ((flags & ~kMask) != 0 || (flags & kExclusive) == kExclusive) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return Instantiate(out, g, flags);
}

CUresult CUDAAPI cuGraphInstantiate(CUgraphExec* out, CUgraph g, CUgraphNode* errorNode,
                                    char* logBuffer, size_t bufferSize) {
  if (errorNode != nullptr) *errorNode = nullptr;
  if (logBuffer != nullptr && bufferSize > 0) logBuffer[0] = '\0';
  return Instantiate(out, g, 0);
}

CUresult CUDAAPI cuGraphInstantiate_v2(CUgraphExec* out, CUgraph g, CUgraphNode* errorNode,
                                       char* logBuffer, size_t bufferSize) {
  return cuGraphInstantiate(out, g, errorNode, logBuffer, bufferSize);
}

CUresult CUDAAPI cuGraphInstantiateWithParams(CUgraphExec* out, CUgraph g,
                                              CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  if (params == nullptr) return CUDA_ERROR_INVALID_VALUE;
  CUresult r = cuGraphInstantiateWithFlags(out, g, params->flags);
  params->hErrNode_out = nullptr;
  params->result_out =
      r == CUDA_SUCCESS ? CUDA_GRAPH_INSTANTIATE_SUCCESS : CUDA_GRAPH_INSTANTIATE_ERROR;
  return r;
}

CUresult CUDAAPI cuGraphInstantiateWithParams_ptsz(CUgraphExec* out, CUgraph g,
                                                   CUDA_GRAPH_INSTANTIATE_PARAMS* params) {
  return cuGraphInstantiateWithParams(out, g, params);
}

CUresult CUDAAPI cuGraphExecDestroy(CUgraphExec e) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  D().Unregister(e);
  delete e;
  PruneGraphAllocsLocked();
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphLaunch(CUgraphExec e, CUstream s) { return GraphLaunch(e, s, false); }
CUresult CUDAAPI cuGraphLaunch_ptsz(CUgraphExec e, CUstream s) { return GraphLaunch(e, s, true); }

CUresult CUDAAPI cuGraphUpload(CUgraphExec e, CUstream s) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* st;
  return ResolveStream(s, false, &st);
}

CUresult CUDAAPI cuStreamBeginCapture(CUstream s) {
  return BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, false);
}
CUresult CUDAAPI cuStreamBeginCapture_ptsz(CUstream s) {
  return BeginCapture(s, CU_STREAM_CAPTURE_MODE_GLOBAL, true);
}
CUresult CUDAAPI cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  return BeginCapture(s, mode, false);
}
CUresult CUDAAPI cuStreamBeginCapture_v2_ptsz(CUstream s, CUstreamCaptureMode mode) {
  return BeginCapture(s, mode, true);
}
CUresult CUDAAPI cuStreamEndCapture(CUstream s, CUgraph* g) { return EndCapture(s, g, false); }
CUresult CUDAAPI cuStreamEndCapture_ptsz(CUstream s, CUgraph* g) { return EndCapture(s, g, true); }

CUresult CUDAAPI cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CaptureInfo(s, status, nullptr, nullptr, nullptr, nullptr, false);
}
CUresult CUDAAPI cuStreamIsCapturing_ptsz(CUstream s, CUstreamCaptureStatus* status) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CaptureInfo(s, status, nullptr, nullptr, nullptr, nullptr, true);
}
CUresult CUDAAPI cuStreamGetCaptureInfo(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CaptureInfo(s, status, id, nullptr, nullptr, nullptr, false);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2(CUstream s, CUstreamCaptureStatus* status,
                                           cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                           size_t* num) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CaptureInfo(s, status, id, graph, deps, num, false);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status,
                                           cuuint64_t* id, CUgraph* graph, const CUgraphNode** deps,
                                           const CUgraphEdgeData** edges, size_t* num) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr) *edges = nullptr;
  return CaptureInfo(s, status, id, graph, deps, num, false);
}

}  // extern "C"
