// A graph with memory nodes, made as real clients make one: cudaMallocAsync and cudaFreeAsync
// captured from a stream into a graph, instantiated, launched several times, its memory
// trimmed with cudaDeviceGraphMemTrim, destroyed.
//
//   graph_memory [--past SIZE] [--deadline SECONDS]
//
// Steps, in order (each graph's allocation is of whole 2 MiB granules):
//
//   ready          the primary context and a stream
//   captured       graph A captured: allocate 64 MiB, set it, free it
//   instantiated   A instantiated
//   launched       A launched once
//   relaunched     A launched three more times
//   trimmed        the device's graph memory trimmed
//   regrown        A launched again
//   outlived       graph B (allocate 32 MiB and set it, no free) captured, instantiated and
//                  launched: its allocation outlives the launch, and its bytes are read back
//   freed-outside  B's allocation freed by cudaFreeAsync on the stream, outside any graph
//   larger         graph D (allocate 384 MiB, set it, free it) captured, instantiated and
//                  launched: a budget of 512 MiB holds it only once the graph memory that A
//                  and B reserve, unused now, is trimmed
//   past           graph C (allocate SIZE, default 1 GiB, and free it) launched, answering
//                  what the memory allows
//   destroyed      every executable graph and graph destroyed
//
// At every step the program prints
//
//   graph step=NAME pid=PID failed=K holds=BYTES used=U reserved=R ... free=F total=T
//
// with the status of every call (0: success), what it checked (1: as expected), how many of
// its checks have failed so far, the device memory it holds (the graph memory the device
// reports reserved: cudaGraphMemAttrReservedMemCurrent, with what is in use beside it) and
// what cudaMemGetInfo says; then `hold step=NAME`, and it reads a line from its stdin before
// going on (at the end of stdin it no longer waits), so that a caller can inspect it while it
// holds its memory. It ends with `done failed=K` and exits 0 only when every check passed.
// Past the deadline (default 60 s) it exits 124, so a hang fails instead of blocking.
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

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kFreedBytes = 64 * kMiB;     // graph A's allocation, freed by the graph
constexpr size_t kOutlivesBytes = 32 * kMiB;  // graph B's, freed outside it
constexpr size_t kLargerBytes = 384 * kMiB;   // graph D's, freed by the graph
constexpr unsigned char kByte = 0x5a;

int g_failed = 0;  // checks failed so far

void Deadline(int) {
  const char msg[] = "graph_memory: deadline passed\n";
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

// The device's graph memory attribute `attr`.
long long GraphMem(cudaGraphMemAttributeType attr) {
  unsigned long long v = 0;
  if (Expect(cudaDeviceGetGraphMemAttribute(0, attr, &v)) != 0) return -1;
  return static_cast<long long>(v);
}

// One step's line.
class Line {
 public:
  explicit Line(const char* step) : step_(step) {
    text_ = std::string("graph step=") + step + " pid=" + std::to_string(getpid());
  }
  Line& Add(const char* key, long long v) {
    text_ += " " + std::string(key) + "=" + std::to_string(v);
    return *this;
  }
  // Prints it with what the device's graph memory holds and shows free, then holds.
  void Reach() {
    const long long reserved = GraphMem(cudaGraphMemAttrReservedMemCurrent);
    Add("holds", reserved).Add("reserved", reserved);
    Add("used", GraphMem(cudaGraphMemAttrUsedMemCurrent));
    size_t free_bytes = 0, total_bytes = 0;
    Add("info", Expect(cudaMemGetInfo(&free_bytes, &total_bytes))).Add("failed", g_failed);
    std::printf("%s free=%zu total=%zu\n", text_.c_str(), free_bytes, total_bytes);
    Hold();
  }

 private:
  // Prints the hold and waits for a line on stdin (not after its end).
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

// Captures a graph from `s`: an allocation of `bytes` set to kByte, freed by the graph when
// `free_it`. *ptr is the allocation's address (fixed when it is captured).
int Capture(cudaStream_t s, size_t bytes, bool free_it, cudaGraph_t* g, void** ptr) {
  int rc = int(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  if (rc != 0) return rc;
  rc = int(cudaMallocAsync(ptr, bytes, s));
  if (rc == 0) rc = int(cudaMemsetAsync(*ptr, kByte, bytes, s));
  if (rc == 0 && free_it) rc = int(cudaFreeAsync(*ptr, s));
  const int end = int(cudaStreamEndCapture(s, g));
  return rc != 0 ? rc : end;
}

size_t Nodes(cudaGraph_t g) {
  size_t n = 0;
  return cudaGraphGetNodes(g, nullptr, &n) == cudaSuccess ? n : 0;
}

// Whether the `n` bytes at `p` all hold kByte.
bool Holds(const void* p, size_t n) {
  std::vector<unsigned char> host(n, static_cast<unsigned char>(~kByte));
  if (cudaMemcpy(host.data(), p, n, cudaMemcpyDeviceToHost) != cudaSuccess) return false;
  for (unsigned char b : host) {
    if (b != kByte) return false;
  }
  return true;
}

int Launch(cudaGraphExec_t e, cudaStream_t s) {
  const int rc = int(cudaGraphLaunch(e, s));
  return rc != 0 ? rc : int(cudaStreamSynchronize(s));
}

int Run(size_t past_bytes) {
  cudaStream_t s = nullptr;
  Line ready("ready");
  ready.Add("setup", Expect(int(cudaSetDevice(0)) | int(cudaFree(nullptr)) |
                            int(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking))));
  ready.Reach();

  cudaGraph_t a = nullptr;
  void* a_ptr = nullptr;
  Line captured("captured");
  captured.Add("capture", Expect(Capture(s, kFreedBytes, true, &a, &a_ptr)));
  captured.Add("nodes", static_cast<long long>(Nodes(a))).Add("three", Ok(Nodes(a) == 3));
  captured.Reach();

  cudaGraphExec_t a_exec = nullptr;
  Line instantiated("instantiated");
  instantiated.Add("instantiate", Expect(cudaGraphInstantiate(&a_exec, a, 0)));
  instantiated.Reach();

  Line launched("launched");
  launched.Add("launch", Expect(Launch(a_exec, s)));
  launched.Reach();

  Line relaunched("relaunched");
  int launches = 0;
  for (int i = 0; i < 3; ++i) launches |= Launch(a_exec, s);
  relaunched.Add("launches", Expect(launches));
  relaunched.Reach();

  Line trimmed("trimmed");
  trimmed.Add("trim", Expect(cudaDeviceGraphMemTrim(0)));
  trimmed.Reach();

  Line regrown("regrown");
  regrown.Add("launch", Expect(Launch(a_exec, s)));
  regrown.Reach();

  cudaGraph_t b = nullptr;
  cudaGraphExec_t b_exec = nullptr;
  void* b_ptr = nullptr;
  Line outlived("outlived");
  outlived.Add("capture", Expect(Capture(s, kOutlivesBytes, false, &b, &b_ptr)));
  outlived.Add("nodes", static_cast<long long>(Nodes(b)));
  outlived.Add("instantiate", Expect(cudaGraphInstantiate(&b_exec, b, 0)));
  outlived.Add("launch", Expect(Launch(b_exec, s)));
  outlived.Add("intact", Ok(Holds(b_ptr, kOutlivesBytes)));
  outlived.Reach();

  Line freed("freed-outside");
  freed.Add("free", Expect(int(cudaFreeAsync(b_ptr, s)) | int(cudaStreamSynchronize(s))));
  freed.Reach();

  cudaGraph_t d = nullptr;
  cudaGraphExec_t d_exec = nullptr;
  void* d_ptr = nullptr;
  Line larger("larger");
  larger.Add("capture", Expect(Capture(s, kLargerBytes, true, &d, &d_ptr)));
  larger.Add("instantiate", Expect(cudaGraphInstantiate(&d_exec, d, 0)));
  larger.Add("launch", Expect(Launch(d_exec, s)));
  larger.Reach();

  cudaGraph_t c = nullptr;
  cudaGraphExec_t c_exec = nullptr;
  void* c_ptr = nullptr;
  Line past("past");
  past.Add("capture", Expect(Capture(s, past_bytes, true, &c, &c_ptr)));
  past.Add("instantiate", Expect(cudaGraphInstantiate(&c_exec, c, 0)));
  past.Add("past", Launch(c_exec, s));  // what the memory allows: the caller judges it
  past.Add("bytes", static_cast<long long>(past_bytes));
  past.Reach();

  Line destroyed("destroyed");
  destroyed.Add("destroy", Expect(int(cudaGraphExecDestroy(a_exec)) | int(cudaGraphDestroy(a)) |
                                  int(cudaGraphExecDestroy(b_exec)) | int(cudaGraphDestroy(b)) |
                                  int(cudaGraphExecDestroy(c_exec)) | int(cudaGraphDestroy(c)) |
                                  int(cudaGraphExecDestroy(d_exec)) | int(cudaGraphDestroy(d))));
  destroyed.Reach();

  Expect(cudaStreamDestroy(s));
  std::printf("done failed=%d\n", g_failed);
  return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  size_t past = 1024 * kMiB;
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
