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
#include "common/strings.h"
#include "sim/cuda/model.h"

namespace hami::sim {

namespace {

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
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
  }
  auto* node = new CUgraphNode_st{};
  node->kind = NodeKind::kKernel;
  node->func = func;
  std::copy(grid, grid + 3, node->grid);
  std::copy(block, block + 3, node->block);
  node->shared_mem = smem;
  return AddNode(out, g, deps, n, node);
}

// Drops `count` references to `o`; the last one runs its destructor with the driver
// unlocked.
void ReleaseUserObjectLocked(ApiLock& api, CUuserObject_st* o, unsigned count) {
  o->refs -= std::min(o->refs, count);
  if (o->refs > 0) return;
  D().Unregister(o);
  CUhostFn destroy = o->destroy;
  void* ptr = o->ptr;
  delete o;
  api.lock().unlock();
  destroy(ptr);
  api.lock().lock();
}

void ReleaseUserObjectsLocked(ApiLock& api, std::map<CUuserObject_st*, unsigned> held) {
  for (auto& [o, count] : held) {
    if (D().Live(o, HandleKind::kUserObject)) ReleaseUserObjectLocked(api, o, count);
  }
}

void DestroyGraphLocked(ApiLock& api, CUgraph g) {
  Driver& d = D();
  for (CUgraphNode_st* n : g->nodes) {
    d.Unregister(n);
    delete n;
  }
  std::map<CUuserObject_st*, unsigned> held = std::move(g->user_objects);
  d.Unregister(g);
  delete g;
  PruneGraphAllocsLocked();
  ReleaseUserObjectsLocked(api, std::move(held));
}

// The nodes of `g` in an order that respects every dependency, insertion order among the
// ready ones; CUDA_ERROR_INVALID_VALUE when the dependencies form a cycle.
CUresult TopologicalOrder(CUgraph g, std::vector<CUgraphNode_st*>* out) {
  std::map<CUgraphNode_st*, size_t> waiting;
  for (CUgraphNode_st* n : g->nodes) waiting[n] = n->deps.size();
  out->clear();
  std::vector<bool> done(g->nodes.size(), false);
  while (out->size() < g->nodes.size()) {
    bool progressed = false;
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      CUgraphNode_st* n = g->nodes[i];
      if (done[i] || waiting[n] != 0) continue;
      done[i] = true;
      progressed = true;
      out->push_back(n);
      for (CUgraphNode_st* m : g->nodes) {
        waiting[m] -= size_t(std::count(m->deps.begin(), m->deps.end(), n));
      }
    }
    if (!progressed) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
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
  std::vector<CUgraphNode_st*> order;
  if (CUresult r = TopologicalOrder(g, &order); r != CUDA_SUCCESS) return r;
  auto e = std::make_unique<CUgraphExec_st>();
  e->ctx = ctx;
  e->flags = flags;
  for (CUgraphNode_st* n : order) {
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
    e->nodes.back().origin = n;
    e->nodes.back().deps_count = n->deps.size();
    e->nodes.back().deps.clear();
  }
  // The executable graph holds references of its own to the graph's user objects.
  for (auto& [o, count] : g->user_objects) o->refs += count;
  e->user_objects = g->user_objects;
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
    if (!n.enabled) continue;
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
      case NodeKind::kEventRecord:
        if (D().Live(n.event, HandleKind::kEvent)) {
          SetEventTime(n.event, std::max(MonotonicNs(), StreamTail(s)));
        }
        break;
      case NodeKind::kEventWait: {
        int64_t t;
        if (D().Live(n.event, HandleKind::kEvent) && EventTime(n.event, &t)) {
          s->tail_ns = std::max(s->tail_ns, t);
        }
        break;
      }
      case NodeKind::kMemAlloc:
      case NodeKind::kEmpty:
        break;
    }
    if (r != CUDA_SUCCESS) return r;
  }
  return CUDA_SUCCESS;
}

CUresult BeginCapture(CUstream stream, CUstreamCaptureMode mode, bool ptsz) {
  if (EnumValue(mode) < 0 || EnumValue(mode) > 2) return CUDA_ERROR_INVALID_VALUE;
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
    DestroyGraphLocked(api, g);
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
  DestroyGraphLocked(api, g);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddKernelNode_v2(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                         size_t n, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const unsigned grid[3] = {p->gridDimX, p->gridDimY, p->gridDimZ};
  const unsigned block[3] = {p->blockDimX, p->blockDimY, p->blockDimZ};
  // A kernel (p->kern) runs in p->ctx, or in the current context.
  CUfunction f = p->func != nullptr ? p->func : reinterpret_cast<CUfunction>(p->kern);
  if (p->func == nullptr && p->ctx != nullptr) {
    if (CUresult r = cuCtxPushCurrent_v2(p->ctx); r != CUDA_SUCCESS) return r;
    CUresult r = AddKernelNode(out, g, deps, n, f, grid, block, p->sharedMemBytes);
    CUcontext popped;
    cuCtxPopCurrent_v2(&popped);
    return r;
  }
  return AddKernelNode(out, g, deps, n, f, grid, block, p->sharedMemBytes);
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
    case NodeKind::kEventWait:
      *type = CU_GRAPH_NODE_TYPE_WAIT_EVENT;
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
  std::map<CUuserObject_st*, unsigned> held = std::move(e->user_objects);
  delete e;
  PruneGraphAllocsLocked();
  ReleaseUserObjectsLocked(api, std::move(held));
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

// ---- edges ----

static CUresult CheckEdges(CUgraph g, const CUgraphNode* from, const CUgraphNode* to, size_t n) {
  if (n > 0 && (from == nullptr || to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  for (size_t i = 0; i < n; ++i) {
    for (CUgraphNode node : {from[i], to[i]}) {
      if (!D().Live(node, HandleKind::kGraphNode) || node->graph != g) {
        return CUDA_ERROR_INVALID_VALUE;
      }
    }
    if (from[i] == to[i]) return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

// Edge data (ports, programmatic edges) is accepted and every edge kept as a full dependency.
static CUresult AddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                size_t n) {
  ApiLock api;
  if (CUresult r = CheckEdges(g, from, to, n); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < n; ++i) {
    auto& deps = to[i]->deps;
    if (std::find(deps.begin(), deps.end(), from[i]) != deps.end()) return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < n; ++i) to[i]->deps.push_back(from[i]);
  return CUDA_SUCCESS;
}

static CUresult RemoveDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                   size_t n) {
  ApiLock api;
  if (CUresult r = CheckEdges(g, from, to, n); r != CUDA_SUCCESS) return r;
  for (size_t i = 0; i < n; ++i) {
    auto& deps = to[i]->deps;
    if (std::find(deps.begin(), deps.end(), from[i]) == deps.end()) return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t i = 0; i < n; ++i) std::erase(to[i]->deps, from[i]);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphAddDependencies(CUgraph g, const CUgraphNode* from, const CUgraphNode* to,
                                        size_t n) {
  return AddDependencies(g, from, to, n);
}
CUresult CUDAAPI cuGraphAddDependencies_v2(CUgraph g, const CUgraphNode* from,
                                           const CUgraphNode* to, const CUgraphEdgeData*,
                                           size_t n) {
  return AddDependencies(g, from, to, n);
}
CUresult CUDAAPI cuGraphRemoveDependencies(CUgraph g, const CUgraphNode* from,
                                           const CUgraphNode* to, size_t n) {
  return RemoveDependencies(g, from, to, n);
}
CUresult CUDAAPI cuGraphRemoveDependencies_v2(CUgraph g, const CUgraphNode* from,
                                              const CUgraphNode* to, const CUgraphEdgeData*,
                                              size_t n) {
  return RemoveDependencies(g, from, to, n);
}

// Copies up to *count entries of `list` (with default edge data) and sets *count to its
// size; only the count when `out` is null.
static CUresult ListNodes(const std::vector<CUgraphNode>& list, CUgraphNode* out,
                          CUgraphEdgeData* edges, size_t* count) {
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (out != nullptr) {
    size_t k = std::min(*count, list.size());
    for (size_t i = 0; i < k; ++i) {
      out[i] = list[i];
      if (edges != nullptr) edges[i] = CUgraphEdgeData{};
    }
    for (size_t i = k; i < *count; ++i) out[i] = nullptr;
  }
  *count = list.size();
  return CUDA_SUCCESS;
}

static CUresult GetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, CUgraphEdgeData* edges,
                         size_t* count) {
  if (count == nullptr || (from == nullptr) != (to == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> froms, tos;
  for (CUgraphNode_st* n : g->nodes) {
    for (CUgraphNode_st* d : n->deps) {
      froms.push_back(d);
      tos.push_back(n);
    }
  }
  size_t k = *count;
  if (CUresult r = ListNodes(froms, from, edges, &k); r != CUDA_SUCCESS) return r;
  return ListNodes(tos, to, nullptr, count);
}

CUresult CUDAAPI cuGraphGetEdges(CUgraph g, CUgraphNode* from, CUgraphNode* to, size_t* n) {
  return GetEdges(g, from, to, nullptr, n);
}
CUresult CUDAAPI cuGraphGetEdges_v2(CUgraph g, CUgraphNode* from, CUgraphNode* to,
                                    CUgraphEdgeData* edges, size_t* n) {
  return GetEdges(g, from, to, edges, n);
}

static CUresult NodeDependencies(CUgraphNode node, CUgraphNode* out, CUgraphEdgeData* edges,
                                 size_t* count, bool dependents) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(node, HandleKind::kGraphNode)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> list;
  if (dependents) {
    for (CUgraphNode_st* n : node->graph->nodes) {
      if (std::find(n->deps.begin(), n->deps.end(), node) != n->deps.end()) list.push_back(n);
    }
  } else {
    list.assign(node->deps.begin(), node->deps.end());
  }
  return ListNodes(list, out, edges, count);
}

CUresult CUDAAPI cuGraphNodeGetDependencies(CUgraphNode node, CUgraphNode* deps, size_t* n) {
  return NodeDependencies(node, deps, nullptr, n, false);
}
CUresult CUDAAPI cuGraphNodeGetDependencies_v2(CUgraphNode node, CUgraphNode* deps,
                                               CUgraphEdgeData* edges, size_t* n) {
  return NodeDependencies(node, deps, edges, n, false);
}
CUresult CUDAAPI cuGraphNodeGetDependentNodes(CUgraphNode node, CUgraphNode* out, size_t* n) {
  return NodeDependencies(node, out, nullptr, n, true);
}
CUresult CUDAAPI cuGraphNodeGetDependentNodes_v2(CUgraphNode node, CUgraphNode* out,
                                                 CUgraphEdgeData* edges, size_t* n) {
  return NodeDependencies(node, out, edges, n, true);
}

CUresult CUDAAPI cuGraphGetRootNodes(CUgraph g, CUgraphNode* roots, size_t* n) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph)) return CUDA_ERROR_INVALID_VALUE;
  std::vector<CUgraphNode> list;
  for (CUgraphNode_st* node : g->nodes) {
    if (node->deps.empty()) list.push_back(node);
  }
  return ListNodes(list, roots, nullptr, n);
}

CUresult CUDAAPI cuGraphDestroyNode(CUgraphNode node) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(node, HandleKind::kGraphNode)) return CUDA_ERROR_INVALID_VALUE;
  CUgraph_st* g = node->graph;
  std::erase(g->nodes, node);
  for (CUgraphNode_st* n : g->nodes) std::erase(n->deps, node);
  D().Unregister(node);
  delete node;
  PruneGraphAllocsLocked();
  return CUDA_SUCCESS;
}

// ---- capture dependencies ----

CUresult CUDAAPI cuStreamGetCaptureInfo_ptsz(CUstream s, CUstreamCaptureStatus* status,
                                             cuuint64_t* id) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CaptureInfo(s, status, id, nullptr, nullptr, nullptr, true);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v2_ptsz(CUstream s, CUstreamCaptureStatus* status,
                                                cuuint64_t* id, CUgraph* graph,
                                                const CUgraphNode** deps, size_t* num) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return CaptureInfo(s, status, id, graph, deps, num, true);
}
CUresult CUDAAPI cuStreamGetCaptureInfo_v3_ptsz(CUstream s, CUstreamCaptureStatus* status,
                                                cuuint64_t* id, CUgraph* graph,
                                                const CUgraphNode** deps,
                                                const CUgraphEdgeData** edges, size_t* num) {
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (edges != nullptr) *edges = nullptr;
  return CaptureInfo(s, status, id, graph, deps, num, true);
}

static CUresult UpdateCaptureDependencies(CUstream stream, CUgraphNode* deps, size_t n,
                                          unsigned flags, bool ptsz) {
  if ((n > 0 && deps == nullptr) || (flags != CU_STREAM_ADD_CAPTURE_DEPENDENCIES &&
                                     flags != CU_STREAM_SET_CAPTURE_DEPENDENCIES)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  CUstream_st* s;
  if (CUresult r = ResolveStream(stream, ptsz, &s); r != CUDA_SUCCESS) return r;
  if (s->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  if (CUresult r = CheckDeps(s->capture, deps, n); r != CUDA_SUCCESS) return r;
  if (flags == CU_STREAM_SET_CAPTURE_DEPENDENCIES) s->capture_deps.clear();
  for (size_t i = 0; i < n; ++i) {
    if (std::find(s->capture_deps.begin(), s->capture_deps.end(), deps[i]) ==
        s->capture_deps.end()) {
      s->capture_deps.push_back(deps[i]);
    }
  }
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamUpdateCaptureDependencies(CUstream s, CUgraphNode* deps, size_t n,
                                                   unsigned int flags) {
  return UpdateCaptureDependencies(s, deps, n, flags, false);
}
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_ptsz(CUstream s, CUgraphNode* deps, size_t n,
                                                        unsigned int flags) {
  return UpdateCaptureDependencies(s, deps, n, flags, true);
}
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2(CUstream s, CUgraphNode* deps,
                                                      const CUgraphEdgeData*, size_t n,
                                                      unsigned int flags) {
  return UpdateCaptureDependencies(s, deps, n, flags, false);
}
CUresult CUDAAPI cuStreamUpdateCaptureDependencies_v2_ptsz(CUstream s, CUgraphNode* deps,
                                                           const CUgraphEdgeData*, size_t n,
                                                           unsigned int flags) {
  return UpdateCaptureDependencies(s, deps, n, flags, true);
}

// ---- node parameters ----

static CUresult NodeOf(CUgraphNode node, NodeKind kind) {
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(node, HandleKind::kGraphNode) || node->kind != kind)
    return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}

// The node of `e` instantiated from `node`, or null.
static CUgraphNode_st* ExecNode(CUgraphExec e, CUgraphNode node) {
  if (!D().Live(e, HandleKind::kGraphExec)) return nullptr;
  for (CUgraphNode_st& n : e->nodes) {
    if (n.origin == node) return &n;
  }
  return nullptr;
}

static CUresult SetKernelParams(CUgraphNode_st* n, const CUDA_KERNEL_NODE_PARAMS& p) {
  CUfunction f = p.func != nullptr ? p.func : reinterpret_cast<CUfunction>(p.kern);
  CUfunc_st* func;
  if (CUresult r = FunctionForCallLocked(f, &func); r != CUDA_SUCCESS) {
    return r == CUDA_ERROR_INVALID_HANDLE ? CUDA_ERROR_INVALID_VALUE : r;
  }
  n->func = func;
  n->grid[0] = p.gridDimX;
  n->grid[1] = p.gridDimY;
  n->grid[2] = p.gridDimZ;
  n->block[0] = p.blockDimX;
  n->block[1] = p.blockDimY;
  n->block[2] = p.blockDimZ;
  n->shared_mem = p.sharedMemBytes;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetParams_v2(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kKernel); r != CUDA_SUCCESS) return r;
  return SetKernelParams(node, *p);
}

CUresult CUDAAPI cuGraphExecKernelNodeSetParams_v2(CUgraphExec e, CUgraphNode node,
                                                   const CUDA_KERNEL_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kKernel); r != CUDA_SUCCESS) return r;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return SetKernelParams(n, *p);
}

CUresult CUDAAPI cuGraphHostNodeGetParams(CUgraphNode node, CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kHost); r != CUDA_SUCCESS) return r;
  p->fn = node->host_fn;
  p->userData = node->host_data;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphHostNodeSetParams(CUgraphNode node, const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kHost); r != CUDA_SUCCESS) return r;
  node->host_fn = p->fn;
  node->host_data = p->userData;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecHostNodeSetParams(CUgraphExec e, CUgraphNode node,
                                              const CUDA_HOST_NODE_PARAMS* p) {
  if (p == nullptr || p->fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kHost); r != CUDA_SUCCESS) return r;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  n->host_fn = p->fn;
  n->host_data = p->userData;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemcpyNodeGetParams(CUgraphNode node, CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemcpy); r != CUDA_SUCCESS) return r;
  *p = node->copy;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemcpyNodeSetParams(CUgraphNode node, const CUDA_MEMCPY3D* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemcpy); r != CUDA_SUCCESS) return r;
  node->copy = *p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecMemcpyNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                const CUDA_MEMCPY3D* p, CUcontext) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemcpy); r != CUDA_SUCCESS) return r;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  n->copy = *p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemsetNodeGetParams(CUgraphNode node, CUDA_MEMSET_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemset); r != CUDA_SUCCESS) return r;
  *p = node->memset;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemsetNodeSetParams(CUgraphNode node, const CUDA_MEMSET_NODE_PARAMS* p) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemset); r != CUDA_SUCCESS) return r;
  node->memset = *p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecMemsetNodeSetParams(CUgraphExec e, CUgraphNode node,
                                                const CUDA_MEMSET_NODE_PARAMS* p, CUcontext) {
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemset); r != CUDA_SUCCESS) return r;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  n->memset = *p;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphMemFreeNodeGetParams(CUgraphNode node, CUdeviceptr* dptr) {
  if (dptr == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kMemFree); r != CUDA_SUCCESS) return r;
  *dptr = node->free_ptr;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeGetAttribute(CUgraphNode node, CUkernelNodeAttrID attr,
                                               CUkernelNodeAttrValue* value) {
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kKernel); r != CUDA_SUCCESS) return r;
  auto it = node->attributes.find(int(attr));
  *value = it != node->attributes.end() ? it->second : CUkernelNodeAttrValue{};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeSetAttribute(CUgraphNode node, CUkernelNodeAttrID attr,
                                               const CUkernelNodeAttrValue* value) {
  if (value == nullptr || EnumValue(attr) <= 0 || EnumValue(attr) > int(CU_LAUNCH_ATTRIBUTE_MAX)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  if (CUresult r = NodeOf(node, NodeKind::kKernel); r != CUDA_SUCCESS) return r;
  node->attributes[int(attr)] = *value;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphKernelNodeCopyAttributes(CUgraphNode dst, CUgraphNode src) {
  ApiLock api;
  if (CUresult r = NodeOf(dst, NodeKind::kKernel); r != CUDA_SUCCESS) return r;
  if (CUresult r = NodeOf(src, NodeKind::kKernel); r != CUDA_SUCCESS) return r;
  dst->attributes = src->attributes;
  return CUDA_SUCCESS;
}

// ---- executable graphs ----

CUresult CUDAAPI cuGraphNodeSetEnabled(CUgraphExec e, CUgraphNode node, unsigned int enabled) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (n->kind != NodeKind::kKernel && n->kind != NodeKind::kMemcpy &&
      n->kind != NodeKind::kMemset) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  n->enabled = enabled != 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphNodeGetEnabled(CUgraphExec e, CUgraphNode node, unsigned int* enabled) {
  if (enabled == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *enabled = n->enabled ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecGetFlags(CUgraphExec e, cuuint64_t* flags) {
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  *flags = e->flags;
  return CUDA_SUCCESS;
}

// Takes the parameters of `g`'s nodes into `e` when both have the same nodes (kinds, in
// order, and dependencies); memory nodes cannot change.
static CUresult ExecUpdate(CUgraphExec e, CUgraph g, CUgraphExecUpdateResult* result,
                           CUgraphNode* error_node) {
  *result = CU_GRAPH_EXEC_UPDATE_ERROR;
  *error_node = nullptr;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kGraphExec) || !D().Live(g, HandleKind::kGraph)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  std::vector<CUgraphNode_st*> order;
  if (CUresult r = TopologicalOrder(g, &order); r != CUDA_SUCCESS) return r;
  std::vector<CUgraphNode_st*> targets;
  for (CUgraphNode_st& n : e->nodes) {
    if (n.origin != nullptr) targets.push_back(&n);
  }
  if (targets.size() != order.size()) {
    *result = CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
    return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
  }
  for (size_t i = 0; i < order.size(); ++i) {
    const CUgraphNode_st& from = *order[i];
    if (from.kind != targets[i]->kind || from.deps.size() != targets[i]->deps_count) {
      *result = from.kind != targets[i]->kind ? CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED
                                              : CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED;
      *error_node = order[i];
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
    if (from.kind == NodeKind::kMemAlloc || from.kind == NodeKind::kMemFree) {
      *result = CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED;
      *error_node = order[i];
      return CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE;
    }
  }
  for (size_t i = 0; i < order.size(); ++i) {
    CUgraphNode_st& to = *targets[i];
    const CUgraphNode_st& from = *order[i];
    to.func = from.func;
    std::copy(from.grid, from.grid + 3, to.grid);
    std::copy(from.block, from.block + 3, to.block);
    to.shared_mem = from.shared_mem;
    to.copy = from.copy;
    to.memset = from.memset;
    to.host_fn = from.host_fn;
    to.host_data = from.host_data;
    to.event = from.event;
    to.origin = order[i];
  }
  *result = CU_GRAPH_EXEC_UPDATE_SUCCESS;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphExecUpdate(CUgraphExec e, CUgraph g, CUgraphNode* error_node,
                                   CUgraphExecUpdateResult* result) {
  if (error_node == nullptr || result == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return ExecUpdate(e, g, result, error_node);
}

CUresult CUDAAPI cuGraphExecUpdate_v2(CUgraphExec e, CUgraph g, CUgraphExecUpdateResultInfo* info) {
  if (info == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *info = CUgraphExecUpdateResultInfo{};
  return ExecUpdate(e, g, &info->result, &info->errorNode);
}

CUresult CUDAAPI cuGraphUpload_ptsz(CUgraphExec e, CUstream s) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(e, HandleKind::kGraphExec)) return CUDA_ERROR_INVALID_VALUE;
  CUstream_st* st;
  return ResolveStream(s, true, &st);
}

// ---- event nodes ----

static CUresult AddEventNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps, size_t n,
                             CUevent event, NodeKind kind) {
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(event, HandleKind::kEvent)) return CUDA_ERROR_INVALID_VALUE;
  auto* node = new CUgraphNode_st{};
  node->kind = kind;
  node->event = event;
  return AddNode(out, g, deps, n, node);
}

CUresult CUDAAPI cuGraphAddEventRecordNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                           size_t n, CUevent event) {
  return AddEventNode(out, g, deps, n, event, NodeKind::kEventRecord);
}
CUresult CUDAAPI cuGraphAddEventWaitNode(CUgraphNode* out, CUgraph g, const CUgraphNode* deps,
                                         size_t n, CUevent event) {
  return AddEventNode(out, g, deps, n, event, NodeKind::kEventWait);
}

static CUresult EventNodeEvent(CUgraphNode node, NodeKind kind, CUevent* out) {
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = NodeOf(node, kind); r != CUDA_SUCCESS) return r;
  *out = node->event;
  return CUDA_SUCCESS;
}
static CUresult SetEventNodeEvent(CUgraphNode node, NodeKind kind, CUevent event) {
  ApiLock api;
  if (CUresult r = NodeOf(node, kind); r != CUDA_SUCCESS) return r;
  if (!D().Live(event, HandleKind::kEvent)) return CUDA_ERROR_INVALID_VALUE;
  node->event = event;
  return CUDA_SUCCESS;
}
static CUresult SetExecEventNodeEvent(CUgraphExec e, CUgraphNode node, NodeKind kind,
                                      CUevent event) {
  ApiLock api;
  if (CUresult r = NodeOf(node, kind); r != CUDA_SUCCESS) return r;
  if (!D().Live(event, HandleKind::kEvent)) return CUDA_ERROR_INVALID_VALUE;
  CUgraphNode_st* n = ExecNode(e, node);
  if (n == nullptr) return CUDA_ERROR_INVALID_VALUE;
  n->event = event;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphEventRecordNodeGetEvent(CUgraphNode node, CUevent* out) {
  return EventNodeEvent(node, NodeKind::kEventRecord, out);
}
CUresult CUDAAPI cuGraphEventRecordNodeSetEvent(CUgraphNode node, CUevent event) {
  return SetEventNodeEvent(node, NodeKind::kEventRecord, event);
}
CUresult CUDAAPI cuGraphEventWaitNodeGetEvent(CUgraphNode node, CUevent* out) {
  return EventNodeEvent(node, NodeKind::kEventWait, out);
}
CUresult CUDAAPI cuGraphEventWaitNodeSetEvent(CUgraphNode node, CUevent event) {
  return SetEventNodeEvent(node, NodeKind::kEventWait, event);
}
CUresult CUDAAPI cuGraphExecEventRecordNodeSetEvent(CUgraphExec e, CUgraphNode node,
                                                    CUevent event) {
  return SetExecEventNodeEvent(e, node, NodeKind::kEventRecord, event);
}
CUresult CUDAAPI cuGraphExecEventWaitNodeSetEvent(CUgraphExec e, CUgraphNode node, CUevent event) {
  return SetExecEventNodeEvent(e, node, NodeKind::kEventWait, event);
}

// ---- user objects ----

CUresult CUDAAPI cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy,
                                    unsigned int initial, unsigned int flags) {
  if (out == nullptr || destroy == nullptr || initial == 0 ||
      flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  auto* o = new CUuserObject_st{ptr, destroy, initial};
  D().Register(o, HandleKind::kUserObject);
  *out = o;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuUserObjectRetain(CUuserObject o, unsigned int count) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(o, HandleKind::kUserObject)) return CUDA_ERROR_INVALID_VALUE;
  o->refs += count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuUserObjectRelease(CUuserObject o, unsigned int count) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(o, HandleKind::kUserObject) || o->refs < count) return CUDA_ERROR_INVALID_VALUE;
  ReleaseUserObjectLocked(api, o, count);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphRetainUserObject(CUgraph g, CUuserObject o, unsigned int count,
                                         unsigned int flags) {
  if (count == 0 || (flags & ~unsigned(CU_GRAPH_USER_OBJECT_MOVE)) != 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph) || !D().Live(o, HandleKind::kUserObject)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // With MOVE the caller's references become the graph's; otherwise new ones are taken.
  if ((flags & CU_GRAPH_USER_OBJECT_MOVE) == 0) {
    o->refs += count;
  } else if (o->refs < count) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  g->user_objects[o] += count;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuGraphReleaseUserObject(CUgraph g, CUuserObject o, unsigned int count) {
  if (count == 0) return CUDA_ERROR_INVALID_VALUE;
  ApiLock api;
  if (CUresult r = RequireInit(); r != CUDA_SUCCESS) return r;
  if (!D().Live(g, HandleKind::kGraph) || !D().Live(o, HandleKind::kUserObject)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto it = g->user_objects.find(o);
  if (it == g->user_objects.end() || it->second < count) return CUDA_ERROR_INVALID_VALUE;
  it->second -= count;
  if (it->second == 0) g->user_objects.erase(it);
  ReleaseUserObjectLocked(api, o, count);
  return CUDA_SUCCESS;
}

}  // extern "C"
