// A CUDA runtime program, built with nvcc against the shared and the static runtime, that
// runs the cases its arguments name, in order, and prints one line per case:
//
//   <case> key=value key=value ...
//
// Every runtime call's status is printed (0 is cudaSuccess); the tests (cudart_test.cc,
// cudart_vgpu_test.cc) check them. Kernels run no code on the simulated GPU: what a case
// checks is status codes, bytes moved by copies and sets, device time and memory in use.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <thread>
#include <vector>

namespace {

__global__ void Touch(int* p) {
  if (p != nullptr) p[threadIdx.x] = int(threadIdx.x);
}

__device__ int g_table[256];
__constant__ float g_coefficients[16];

// One case's output line.
class Line {
 public:
  explicit Line(const char* name) { text_ = name; }
  ~Line() { std::printf("%s\n", text_.c_str()); }
  Line& Add(const char* key, long long v) {
    text_ += " " + std::string(key) + "=" + std::to_string(v);
    return *this;
  }
  Line& Add(const char* key, const std::string& v) {
    text_ += " " + std::string(key) + "=" + v;
    return *this;
  }
  Line& Ms(const char* key, float ms) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s=%.6f", key, double(ms));
    text_ += buf;
    return *this;
  }

 private:
  std::string text_;
};

// The next argument when it is a number (the next case's name is not), else `dflt`.
long long Arg(std::vector<std::string>& args, long long dflt) {
  if (args.empty()) return dflt;
  char* end = nullptr;
  long long v = std::strtoll(args.front().c_str(), &end, 0);
  if (end == args.front().c_str() || *end != '\0') return dflt;
  args.erase(args.begin());
  return v;
}

std::vector<unsigned char> Pattern(size_t n, unsigned seed) {
  std::vector<unsigned char> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<unsigned char>((i * 131 + seed) & 0xff);
  return v;
}

std::string Uuid(const cudaUUID_t& u) {
  char buf[64];
  const auto* b = reinterpret_cast<const unsigned char*>(u.bytes);
  std::snprintf(buf, sizeof(buf),
                "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
                b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
                b[14], b[15]);
  return buf;
}

// One wave of 1024-thread blocks on an H100 is 132 SMs x 2 blocks: a lead kernel of 5000
// waves keeps the device busy for 100 ms at the default 20 us per wave, so the launches
// queued behind it start exactly where the event after it says.
constexpr unsigned kLeadGrid = 132u * 2u * 5000u;

void Devices() {
  int n = -1;
  int driver = 0, runtime = 0;
  Line("versions")
      .Add("driver_err", cudaDriverGetVersion(&driver))
      .Add("driver", driver)
      .Add("runtime_err", cudaRuntimeGetVersion(&runtime))
      .Add("runtime", runtime);
  cudaError_t e = cudaGetDeviceCount(&n);
  Line("count").Add("err", e).Add("n", n);
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    cudaError_t pe = cudaGetDeviceProperties(&p, i);
    int clusters = 0;
    cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, i);
    std::string name = p.name;
    for (char& c : name) {
      if (c == ' ') c = '_';
    }
    Line("device")
        .Add("index", i)
        .Add("err", pe)
        .Add("name", name)
        .Add("total", static_cast<long long>(p.totalGlobalMem))
        .Add("sms", p.multiProcessorCount)
        .Add("cc", std::to_string(p.major) + "." + std::to_string(p.minor))
        .Add("uuid", Uuid(p.uuid))
        .Add("pci_bus", p.pciBusID)
        .Add("warp", p.warpSize)
        .Add("clusters", clusters);
  }
}

void MemInfo(const char* name = "meminfo") {
  size_t free_bytes = 0, total = 0;
  cudaError_t e = cudaMemGetInfo(&free_bytes, &total);
  Line(name)
      .Add("err", e)
      .Add("free", static_cast<long long>(free_bytes))
      .Add("total", static_cast<long long>(total));
}

void Memcpy(size_t bytes) {
  std::vector<unsigned char> in = Pattern(bytes, 7), out(bytes, 0), zeros(bytes, 0xee);
  unsigned char *a = nullptr, *b = nullptr;
  Line l("memcpy");
  l.Add("bytes", static_cast<long long>(bytes));
  l.Add("malloc", cudaMalloc(&a, bytes)).Add("malloc2", cudaMalloc(&b, bytes));
  l.Add("h2d", cudaMemcpy(a, in.data(), bytes, cudaMemcpyHostToDevice));
  l.Add("d2d", cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice));
  l.Add("d2h", cudaMemcpy(out.data(), b, bytes, cudaMemcpyDeviceToHost));
  l.Add("match", in == out ? 1 : 0);
  l.Add("memset", cudaMemset(b, 0xee, bytes));
  l.Add("d2h2", cudaMemcpy(out.data(), b, bytes, cudaMemcpyDeviceToHost));
  l.Add("set_match", out == zeros ? 1 : 0);
  int table[256];
  for (int i = 0; i < 256; ++i) table[i] = i * 3;
  int back[256] = {};
  l.Add("to_symbol", cudaMemcpyToSymbol(g_table, table, sizeof(table)));
  l.Add("from_symbol", cudaMemcpyFromSymbol(back, g_table, sizeof(back)));
  l.Add("symbol_match", std::memcmp(table, back, sizeof(table)) == 0 ? 1 : 0);
  size_t symbol_size = 0;
  l.Add("symbol_size_err", cudaGetSymbolSize(&symbol_size, g_coefficients));
  l.Add("symbol_size", static_cast<long long>(symbol_size));
  l.Add("free", cudaFree(a)).Add("free2", cudaFree(b));
}

// Device time of `count` launches of `grid` x `block`, queued behind a lead kernel.
void Launch(unsigned grid, unsigned block, int count) {
  cudaStream_t s;
  cudaEvent_t start, end;
  Line l("launch");
  l.Add("stream", cudaStreamCreate(&s));
  l.Add("events", cudaEventCreate(&start) | cudaEventCreate(&end));
  Touch<<<kLeadGrid, 1024, 0, s>>>(nullptr);
  l.Add("lead", cudaGetLastError());
  l.Add("record", cudaEventRecord(start, s));
  for (int i = 0; i < count; ++i) Touch<<<grid, block, 0, s>>>(nullptr);
  l.Add("launches", cudaGetLastError());
  l.Add("record2", cudaEventRecord(end, s));
  l.Add("sync", cudaEventSynchronize(end));
  float ms = -1;
  l.Add("elapsed", cudaEventElapsedTime(&ms, start, end)).Ms("ms", ms);
  l.Add("device_sync", cudaDeviceSynchronize());
  cudaFuncAttributes attrs{};
  l.Add("func_attributes", cudaFuncGetAttributes(&attrs, Touch));
  l.Add("max_threads", attrs.maxThreadsPerBlock);
  int blocks = 0;
  l.Add("occupancy", cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, Touch, 256, 0));
  l.Add("blocks_per_sm", blocks);
  Touch<<<1, 2048>>>(nullptr);  // too many threads per block
  l.Add("bad_launch", cudaGetLastError());
  l.Add("destroy", cudaEventDestroy(start) | cudaEventDestroy(end) | cudaStreamDestroy(s));
}

void Managed() {
  const size_t bytes = 1 << 20;
  unsigned char* m = nullptr;
  Line l("managed");
  l.Add("alloc", cudaMallocManaged(&m, bytes));
  std::vector<unsigned char> in = Pattern(bytes, 3), out(bytes, 0);
  std::memcpy(m, in.data(), bytes);  // managed memory is host-accessible
  cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
  l.Add("prefetch", cudaMemPrefetchAsync(m, bytes, dev, 0, nullptr));
  l.Add("advise", cudaMemAdvise(m, bytes, cudaMemAdviseSetReadMostly, dev));
  int read_mostly = -1;
  l.Add("range_attr", cudaMemRangeGetAttribute(&read_mostly, sizeof(read_mostly),
                                               cudaMemRangeAttributeReadMostly, m, bytes));
  l.Add("read_mostly", read_mostly);
  l.Add("sync", cudaDeviceSynchronize());
  l.Add("d2h", cudaMemcpy(out.data(), m, bytes, cudaMemcpyDefault));
  l.Add("match", in == out ? 1 : 0);
  cudaPointerAttributes pa{};
  l.Add("attributes", cudaPointerGetAttributes(&pa, m));
  l.Add("type", pa.type);
  l.Add("free", cudaFree(m));
}

void Pitch() {
  const size_t width = 1000, height = 64;
  void* d = nullptr;
  size_t pitch = 0;
  Line l("pitch");
  l.Add("alloc", cudaMallocPitch(&d, &pitch, width, height));
  l.Add("pitch", static_cast<long long>(pitch));
  std::vector<unsigned char> in = Pattern(width * height, 11), out(width * height, 0);
  l.Add("h2d", cudaMemcpy2D(d, pitch, in.data(), width, width, height, cudaMemcpyHostToDevice));
  l.Add("d2h", cudaMemcpy2D(out.data(), width, d, pitch, width, height, cudaMemcpyDeviceToHost));
  l.Add("match", in == out ? 1 : 0);
  l.Add("free", cudaFree(d));
}

void Async() {
  const size_t bytes = 64 << 20;
  cudaStream_t s;
  Line l("async");
  l.Add("stream", cudaStreamCreate(&s));
  void* p = nullptr;
  l.Add("alloc", cudaMallocAsync(&p, bytes, s));
  l.Add("memset", cudaMemsetAsync(p, 1, bytes, s));
  cudaMemPool_t pool;
  l.Add("default_pool", cudaDeviceGetDefaultMemPool(&pool, 0));
  unsigned long long used = 0, reserved = 0;
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  l.Add("used", static_cast<long long>(used)).Add("reserved", static_cast<long long>(reserved));
  l.Add("free", cudaFreeAsync(p, s));
  l.Add("sync", cudaStreamSynchronize(s));
  cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
  l.Add("reserved_after_sync", static_cast<long long>(reserved));
  cudaMemPoolProps props{};
  props.allocType = cudaMemAllocationTypePinned;
  props.location.type = cudaMemLocationTypeDevice;
  props.location.id = 0;
  cudaMemPool_t mine;
  l.Add("create_pool", cudaMemPoolCreate(&mine, &props));
  unsigned long long keep = 1ull << 30;
  l.Add("threshold", cudaMemPoolSetAttribute(mine, cudaMemPoolAttrReleaseThreshold, &keep));
  l.Add("pool_alloc", cudaMallocFromPoolAsync(&p, bytes, mine, s));
  l.Add("pool_free", cudaFreeAsync(p, s));
  l.Add("sync2", cudaStreamSynchronize(s));
  cudaMemPoolGetAttribute(mine, cudaMemPoolAttrReservedMemCurrent, &reserved);
  l.Add("pool_reserved", static_cast<long long>(reserved));
  l.Add("trim", cudaMemPoolTrimTo(mine, 0));
  cudaMemPoolGetAttribute(mine, cudaMemPoolAttrReservedMemCurrent, &reserved);
  l.Add("pool_reserved_trimmed", static_cast<long long>(reserved));
  l.Add("destroy_pool", cudaMemPoolDestroy(mine));
  l.Add("destroy", cudaStreamDestroy(s));
}

void Graph() {
  const size_t bytes = 1 << 16;
  std::vector<unsigned char> in = Pattern(bytes, 5), out(bytes, 0);
  unsigned char* d = nullptr;
  cudaStream_t s;
  Line l("graph");
  l.Add("malloc", cudaMalloc(&d, bytes)).Add("stream", cudaStreamCreate(&s));
  l.Add("begin", cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  l.Add("is_capturing", cudaStreamIsCapturing(s, &status)).Add("status", status);
  cudaMemcpyAsync(d, in.data(), bytes, cudaMemcpyHostToDevice, s);
  Touch<<<4, 128, 0, s>>>(reinterpret_cast<int*>(d));
  cudaMemsetAsync(d + bytes / 2, 0x5a, bytes / 2, s);
  cudaMemcpyAsync(out.data(), d, bytes, cudaMemcpyDeviceToHost, s);
  cudaGraph_t g = nullptr;
  l.Add("end", cudaStreamEndCapture(s, &g));
  size_t nodes = 0;
  l.Add("get_nodes", cudaGraphGetNodes(g, nullptr, &nodes))
      .Add("nodes", static_cast<long long>(nodes));
  l.Add("copied_before_launch", out == in ? 1 : 0);
  cudaGraphExec_t e = nullptr;
  l.Add("instantiate", cudaGraphInstantiate(&e, g, 0));
  l.Add("launch", cudaGraphLaunch(e, s));
  l.Add("sync", cudaStreamSynchronize(s));
  std::vector<unsigned char> expect = in;
  std::memset(expect.data() + bytes / 2, 0x5a, bytes / 2);
  l.Add("match", out == expect ? 1 : 0);
  l.Add("relaunch", cudaGraphLaunch(e, s)).Add("sync2", cudaStreamSynchronize(s));
  l.Add("destroy", cudaGraphExecDestroy(e) | cudaGraphDestroy(g) | cudaStreamDestroy(s));
  l.Add("free", cudaFree(d));
}

void Host() {
  const size_t bytes = 1 << 20;
  unsigned char *h = nullptr, *mapped = nullptr, *d = nullptr;
  cudaStream_t s;
  Line l("host");
  l.Add("alloc", cudaMallocHost(&h, bytes));
  l.Add("host_alloc", cudaHostAlloc(&mapped, bytes, cudaHostAllocMapped));
  void* dev_view = nullptr;
  l.Add("device_pointer", cudaHostGetDevicePointer(&dev_view, mapped, 0));
  l.Add("same_address", dev_view == mapped ? 1 : 0);
  l.Add("malloc", cudaMalloc(&d, bytes)).Add("stream", cudaStreamCreate(&s));
  std::vector<unsigned char> in = Pattern(bytes, 9);
  std::memcpy(h, in.data(), bytes);
  l.Add("h2d", cudaMemcpyAsync(d, h, bytes, cudaMemcpyHostToDevice, s));
  l.Add("d2h", cudaMemcpyAsync(mapped, d, bytes, cudaMemcpyDeviceToHost, s));
  l.Add("sync", cudaStreamSynchronize(s));
  l.Add("match", std::memcmp(mapped, in.data(), bytes) == 0 ? 1 : 0);
  l.Add("free", cudaFreeHost(h) | cudaFreeHost(mapped) | cudaFree(d) | cudaStreamDestroy(s));
}

void Events() {
  cudaEvent_t a, b, untimed;
  Line l("events");
  l.Add("create", cudaEventCreate(&a) | cudaEventCreate(&b));
  l.Add("create_untimed", cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming));
  l.Add("query_unrecorded", cudaEventQuery(a));
  Touch<<<kLeadGrid, 1024>>>(nullptr);
  l.Add("record", cudaEventRecord(a));
  Touch<<<132 * 2, 1024>>>(nullptr);  // one wave
  l.Add("record2", cudaEventRecord(b)).Add("record3", cudaEventRecord(untimed));
  l.Add("sync", cudaEventSynchronize(b));
  l.Add("query", cudaEventQuery(b));
  float ms = -1;
  l.Add("elapsed", cudaEventElapsedTime(&ms, a, b)).Ms("ms", ms);
  l.Add("elapsed_untimed", cudaEventElapsedTime(&ms, a, untimed));
  cudaGetLastError();  // that failure was the point: not the next case's
  l.Add("destroy", cudaEventDestroy(a) | cudaEventDestroy(b) | cudaEventDestroy(untimed));
}

void Threads(int n) {
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t) {
    threads.emplace_back([&ok, t] {
      const size_t bytes = 1 << 20;
      std::vector<unsigned char> in = Pattern(bytes, unsigned(t)), out(bytes, 0);
      unsigned char* d = nullptr;
      cudaStream_t s;
      bool good = cudaStreamCreate(&s) == cudaSuccess && cudaMalloc(&d, bytes) == cudaSuccess;
      for (int i = 0; good && i < 20; ++i) {
        good = cudaMemcpyAsync(d, in.data(), bytes, cudaMemcpyHostToDevice, s) == cudaSuccess;
        Touch<<<64, 256, 0, s>>>(reinterpret_cast<int*>(d));
        good = good && cudaGetLastError() == cudaSuccess;
        good =
            good && cudaMemcpyAsync(out.data(), d, bytes, cudaMemcpyDeviceToHost, s) == cudaSuccess;
        good = good && cudaStreamSynchronize(s) == cudaSuccess && in == out;
      }
      good = good && cudaFree(d) == cudaSuccess && cudaStreamDestroy(s) == cudaSuccess;
      if (good) ok.fetch_add(1);
    });
  }
  for (std::thread& t : threads) t.join();
  Line("threads").Add("n", n).Add("ok", ok.load()).Add("sync", cudaDeviceSynchronize());
}

void SetDevice(int device) {
  Line l("set_device");
  l.Add("set", cudaSetDevice(device));
  int current = -1;
  l.Add("get", cudaGetDevice(&current)).Add("current", current);
  void* p = nullptr;
  l.Add("malloc", cudaMalloc(&p, 32 << 20));
  cudaPointerAttributes pa{};
  l.Add("attributes", cudaPointerGetAttributes(&pa, p)).Add("pointer_device", pa.device);
  Touch<<<1, 32>>>(nullptr);
  l.Add("launch", cudaGetLastError()).Add("sync", cudaDeviceSynchronize());
  size_t free_bytes = 0, total = 0;
  l.Add("meminfo", cudaMemGetInfo(&free_bytes, &total));
  l.Add("used", static_cast<long long>(total - free_bytes));
  l.Add("free", cudaFree(p));
}

// Past the budget, then on with what fits.
void Overcommit(size_t big) {
  Line l("overcommit");
  void* p = nullptr;
  l.Add("big", cudaMalloc(&p, big));
  l.Add("last", cudaGetLastError()).Add("cleared", cudaGetLastError());
  void* q = nullptr;
  l.Add("small", cudaMalloc(&q, 64 << 20));
  std::vector<unsigned char> in = Pattern(1 << 20, 1), out(1 << 20, 0);
  l.Add("h2d", cudaMemcpy(q, in.data(), in.size(), cudaMemcpyHostToDevice));
  l.Add("d2h", cudaMemcpy(out.data(), q, out.size(), cudaMemcpyDeviceToHost));
  l.Add("match", in == out ? 1 : 0);
  Touch<<<1, 32>>>(nullptr);
  l.Add("launch", cudaGetLastError()).Add("sync", cudaDeviceSynchronize());
  l.Add("free", cudaFree(q));
}

// Fills what cudaMemGetInfo says is free, then asks for `bytes` more: past the budget, which
// oversubscription serves from host memory. What it got must work as device memory (copies both
// ways and device to device, a set) and free as device memory does; freed, the device's memory
// is the device's again.
void Spill(size_t bytes) {
  Line l("spill");
  size_t free_bytes = 0, total = 0;
  l.Add("info", cudaMemGetInfo(&free_bytes, &total));
  void* fill = nullptr;
  l.Add("fill", cudaMalloc(&fill, free_bytes));
  void* p = nullptr;
  l.Add("past", cudaMalloc(&p, bytes));
  if (p == nullptr) {
    cudaGetLastError();
    l.Add("free_fill", cudaFree(fill));
    return;
  }
  std::vector<unsigned char> in = Pattern(bytes, 5), out(bytes, 0);
  l.Add("h2d", cudaMemcpy(p, in.data(), bytes, cudaMemcpyHostToDevice));
  l.Add("d2h", cudaMemcpy(out.data(), p, bytes, cudaMemcpyDeviceToHost));
  l.Add("match", in == out ? 1 : 0);
  const size_t part = bytes < (1u << 20) ? bytes : (1u << 20);
  std::vector<unsigned char> back(part, 0);
  l.Add("d2d", cudaMemcpy(fill, p, part, cudaMemcpyDeviceToDevice));
  l.Add("d2h_fill", cudaMemcpy(back.data(), fill, part, cudaMemcpyDeviceToHost));
  l.Add("d2d_match", std::memcmp(back.data(), in.data(), part) == 0 ? 1 : 0);
  l.Add("memset", cudaMemset(p, 0x3c, part));
  l.Add("d2h_set", cudaMemcpy(back.data(), p, part, cudaMemcpyDeviceToHost));
  l.Add("set_match", back == std::vector<unsigned char>(part, 0x3c) ? 1 : 0);
  size_t free_after = 0;
  l.Add("info_after", cudaMemGetInfo(&free_after, &total));
  l.Add("free_after", static_cast<long long>(free_after));
  l.Add("free", cudaFree(p)).Add("free_fill", cudaFree(fill));
  void* again = nullptr;
  l.Add("again", cudaMalloc(&again, bytes));
  l.Add("free_again", cudaFree(again));
}

// Makes its context and says "ready", waits for its standard input to close, allocates
// `step` bytes at a time until `total` or a failure and says what it holds, then holds it
// while another process holds a lock on `lock_file` (a shared flock waits for it).
void Hold(size_t total, size_t step, const std::string& lock_file) {
  Line("ready").Add("init", cudaFree(nullptr));
  std::fflush(stdout);
  char c;
  while (read(0, &c, 1) > 0) {
  }
  size_t held = 0;
  cudaError_t last = cudaSuccess;
  std::vector<void*> blocks;
  while (held + step <= total) {
    void* p = nullptr;
    last = cudaMalloc(&p, step);
    if (last != cudaSuccess) break;
    blocks.push_back(p);
    held += step;
  }
  cudaGetLastError();
  Line("hold").Add("held", static_cast<long long>(held)).Add("last", last);
  std::fflush(stdout);
  int fd = open(lock_file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    flock(fd, LOCK_SH);
    close(fd);
  }
  for (void* p : blocks) cudaFree(p);
}

// Memory in use before and after the first launch (a module is loaded lazily, at its first
// use, unless CUDA_MODULE_LOADING=EAGER).
void Loading() {
  Line l("loading");
  l.Add("init", cudaFree(nullptr));
  size_t free_bytes = 0, total = 0;
  cudaMemGetInfo(&free_bytes, &total);
  l.Add("before", static_cast<long long>(total - free_bytes));
  Touch<<<1, 32>>>(nullptr);
  l.Add("launch", cudaGetLastError()).Add("sync", cudaDeviceSynchronize());
  cudaMemGetInfo(&free_bytes, &total);
  l.Add("after", static_cast<long long>(total - free_bytes));
}

void Reset() { Line("reset").Add("err", cudaDeviceReset()); }

// The calling thread's CPU time, ns: what a benchmark of call overhead counts.
long long ThreadCpuNs() {
  timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

// For hami_bench_hook: CPU ns per cudaMalloc+cudaFree pair of `bytes` (`count` pairs, the
// lowest of `rounds` rounds).
void TimeAlloc(int count, size_t bytes, int rounds) {
  void* warm = nullptr;
  cudaMalloc(&warm, bytes);
  cudaFree(warm);
  long long best = -1;
  int err = 0;
  for (int r = 0; r < rounds; ++r) {
    long long start = ThreadCpuNs();
    for (int i = 0; i < count; ++i) {
      void* p = nullptr;
      err |= cudaMalloc(&p, bytes) | cudaFree(p);
    }
    long long ns = (ThreadCpuNs() - start) / count;
    if (best < 0 || ns < best) best = ns;
  }
  Line("time_alloc").Add("err", err).Add("ns", best);
}

// For hami_bench_hook: CPU ns per <<<>>> launch to a stream (`count` launches, synchronized
// every 1024, the lowest of `rounds` rounds).
void TimeLaunch(int count, int rounds) {
  cudaStream_t s;
  int err = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
  Touch<<<1, 32, 0, s>>>(nullptr);
  err |= cudaStreamSynchronize(s);
  long long best = -1;
  for (int r = 0; r < rounds; ++r) {
    long long start = ThreadCpuNs();
    for (int i = 0; i < count; ++i) {
      Touch<<<1, 32, 0, s>>>(nullptr);
      if ((i + 1) % 1024 == 0) err |= cudaStreamSynchronize(s);
    }
    err |= cudaStreamSynchronize(s);
    long long ns = (ThreadCpuNs() - start) / count;
    if (best < 0 || ns < best) best = ns;
  }
  err |= cudaGetLastError() | cudaStreamDestroy(s);
  Line("time_launch").Add("err", err).Add("ns", best);
}

}  // namespace

// As sm_worker does for hami_bench_sm: launches back to back on one stream for `ms`
// milliseconds of wall time, printing "ready pid=PID" once launching and "done launches=N"
// after a final synchronization.
int Spin(long long ms, unsigned grid, unsigned block) {
  cudaStream_t s;
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess) {
    std::printf("error stream\n");
    return 1;
  }
  Touch<<<grid, block, 0, s>>>(nullptr);
  if (cudaGetLastError() != cudaSuccess) {
    std::printf("error launch\n");
    return 1;
  }
  std::printf("ready pid=%d\n", int(getpid()));
  std::fflush(stdout);
  timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  long long launches = 1;
  do {
    Touch<<<grid, block, 0, s>>>(nullptr);
    if (cudaGetLastError() != cudaSuccess) {
      std::printf("error launch\n");
      return 1;
    }
    ++launches;
    clock_gettime(CLOCK_MONOTONIC, &now);
  } while ((now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000 < ms);
  if (cudaStreamSynchronize(s) != cudaSuccess) {
    std::printf("error sync\n");
    return 1;
  }
  std::printf("done launches=%lld\n", launches);
  return 0;
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  std::vector<std::string> args(argv + 1, argv + argc);
  // `cudart_client MS [GRID [BLOCK]]`: sm_worker's interface, for hami_bench_sm.
  if (!args.empty() && args.front().find_first_not_of("0123456789") == std::string::npos) {
    long long ms = Arg(args, 0);
    unsigned grid = unsigned(Arg(args, 4096));
    return Spin(ms, grid, unsigned(Arg(args, 256)));
  }
  while (!args.empty()) {
    std::string c = args.front();
    args.erase(args.begin());
    if (c == "devices") {
      Devices();
    } else if (c == "meminfo") {
      MemInfo();
    } else if (c == "memcpy") {
      Memcpy(size_t(Arg(args, 1 << 20)));
    } else if (c == "launch") {
      unsigned grid = unsigned(Arg(args, 264));
      unsigned block = unsigned(Arg(args, 1024));
      Launch(grid, block, int(Arg(args, 1)));
    } else if (c == "managed") {
      Managed();
    } else if (c == "pitch") {
      Pitch();
    } else if (c == "async") {
      Async();
    } else if (c == "graph") {
      Graph();
    } else if (c == "host") {
      Host();
    } else if (c == "events") {
      Events();
    } else if (c == "threads") {
      Threads(int(Arg(args, 4)));
    } else if (c == "set-device") {
      SetDevice(int(Arg(args, 1)));
    } else if (c == "overcommit") {
      Overcommit(size_t(Arg(args, 2ll << 30)));
    } else if (c == "spill") {
      Spill(size_t(Arg(args, 256 << 20)));
    } else if (c == "hold") {
      size_t total = size_t(Arg(args, 1ll << 30));
      size_t step = size_t(Arg(args, 64 << 20));
      std::string lock_file = args.empty() ? "/dev/null" : args.front();
      if (!args.empty()) args.erase(args.begin());
      Hold(total, step, lock_file);
    } else if (c == "loading") {
      Loading();
    } else if (c == "reset") {
      Reset();
    } else if (c == "time-alloc") {
      int count = int(Arg(args, 2000));
      size_t bytes = size_t(Arg(args, 4 << 20));
      TimeAlloc(count, bytes, int(Arg(args, 10)));
    } else if (c == "time-launch") {
      int count = int(Arg(args, 10000));
      TimeLaunch(count, int(Arg(args, 10)));
    } else {
      std::fprintf(stderr, "unknown case '%s'\n", c.c_str());
      return 2;
    }
  }
  return 0;
}
