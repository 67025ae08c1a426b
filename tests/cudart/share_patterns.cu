// Device memory shared between two processes, and the growth patterns of two allocators built
// on virtual memory management, done as real clients do them through the CUDA runtime and
// driver:
//
//   share_patterns CASE [--deadline SECONDS]
//
//   ipc         A cudaMalloc's and fills memory and hands B a cudaIpcMemHandle over a socket;
//               B opens it, reads A's bytes, writes its own over half of them and closes it.
//   vmm-fd      A makes a VMM allocation that may be exported as a POSIX file descriptor,
//               maps and fills it and passes the descriptor to B (SCM_RIGHTS); B imports it,
//               maps it at an address of its own, sets access, reads and writes. B lets go
//               first; then, with a second allocation, A lets go first while B still maps it.
//   expandable  one process grows a segment as an allocator with expandable segments does:
//               a large address range reserved once, chunks of a fixed size (20 MiB rounded
//               up to the granularity) created and mapped at the end of what is mapped,
//               the last ones unmapped and released to shrink it, grown again, then grown
//               chunk by chunk until the memory refuses one. It finds the driver's functions
//               through the runtime (cudaGetDriverEntryPointByVersion), not by linking them.
//   vmm-pool    one process grows a pool as a bump allocator over VMM does: one large range
//               reserved when first needed, each shortfall rounded up to the granularity,
//               created and mapped at the end, its handle released at once (the mapping
//               keeps the memory), nothing unmapped until the end, where one call unmaps the
//               whole pool.
//
// The two-process cases run A (role creator) and B (role importer) as children of a launcher
// (this program again). At every step each process prints
//
//   <case> step=NAME role=ROLE pid=PID failed=K holds=BYTES ... free=F total=T
//
// with the status of every call (0: success), what it checked (1: as expected), how many of
// its checks have failed so far, the device memory it created and still holds, and what
// cudaMemGetInfo says, read once every process has finished the step. Then it waits at a
// hold: the launcher (or the one process) prints `hold step=NAME` and reads a line from its
// stdin before anyone goes on, so that a caller can inspect the processes while they hold
// their memory; at the end of stdin it no longer waits. The run ends with
// `done case=CASE failed=K` and exits 0 only when every process passed every check. Past the
// deadline (default 60 s) it kills what it started and exits 124, so a hang fails instead of
// blocking.
#include <cuda.h>
#include <cuda_runtime.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "program_io.h"

namespace {

using hami::cudart::ReadAll;
using hami::cudart::ReceiveFd;
using hami::cudart::SendFd;
using hami::cudart::WriteAll;

constexpr size_t kMiB = size_t(1) << 20;
constexpr size_t kGiB = size_t(1) << 30;
constexpr size_t kShared = 64 * kMiB;  // what A shares with B
constexpr unsigned char kCreatorByte = 0xa5;
constexpr unsigned char kImporterByte = 0x5b;
constexpr unsigned char kSecondByte = 0xc3;
constexpr int kOutOfMemory = 2;  // CUDA_ERROR_OUT_OF_MEMORY

int g_failed = 0;  // checks this process failed
std::vector<pid_t> g_children;

void Deadline(int) {
  for (pid_t p : g_children) kill(p, SIGKILL);
  const char msg[] = "share_patterns: deadline passed, killed\n";
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

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

// One step's line of one process.
class Line {
 public:
  Line(const char* name, const char* step, const char* role) : step_(step) {
    text_ =
        std::string(name) + " step=" + step + " role=" + role + " pid=" + std::to_string(getpid());
  }
  Line& Add(const char* key, long long v) {
    text_ += " " + std::string(key) + "=" + std::to_string(v);
    return *this;
  }
  const char* step() const { return step_; }
  // Prints it with what this process has failed so far and the memory the device shows free.
  void Print() {
    size_t free_bytes = 0, total_bytes = 0;
    int info = Expect(cudaMemGetInfo(&free_bytes, &total_bytes));
    Add("info", info).Add("failed", g_failed);
    std::printf("%s free=%zu total=%zu\n", text_.c_str(), free_bytes, total_bytes);
  }

 private:
  const char* step_;
  std::string text_;
};

// Where a process waits at the end of a step. Alone, it prints the hold and reads its stdin;
// as a child of the launcher it meets the launcher (and so its peer) once when its work for
// the step is done and again after printing, and the launcher holds in between.
class Steps {
 public:
  static constexpr size_t kRecord = 32;  // a step's name as a child announces it

  Steps() = default;
  Steps(int arrive_fd, int go_fd) : arrive_fd_(arrive_fd), go_fd_(go_fd) {}

  void Reach(Line& line) {
    if (arrive_fd_ < 0) {
      line.Print();
      HoldOnStdin(line.step());
      return;
    }
    Meet(line.step());
    line.Print();
    Meet(line.step());
  }

  // Prints the hold and waits for a line on stdin (not after its end).
  static void HoldOnStdin(const char* step) {
    static bool ended = false;
    std::printf("hold step=%s\n", step);
    while (!ended) {
      char c;
      ssize_t r = read(STDIN_FILENO, &c, 1);
      if (r <= 0) ended = true;
      if (r <= 0 || c == '\n') break;
    }
  }

 private:
  void Meet(const char* step) {
    char record[kRecord] = {};
    std::strncpy(record, step, kRecord - 1);
    char go = 0;
    if (!WriteAll(arrive_fd_, record, kRecord) || !ReadAll(go_fd_, &go, 1)) ++g_failed;
  }

  int arrive_fd_ = -1;
  int go_fd_ = -1;
};

// The driver's VMM functions, typed by their declarations.
struct Driver {
  decltype(&cuMemGetAllocationGranularity) granularity;
  decltype(&cuMemCreate) create;
  decltype(&cuMemRelease) release;
  decltype(&cuMemAddressReserve) reserve;
  decltype(&cuMemAddressFree) address_free;
  decltype(&cuMemMap) map;
  decltype(&cuMemUnmap) unmap;
  decltype(&cuMemSetAccess) set_access;
  decltype(&cuMemExportToShareableHandle) export_handle;
  decltype(&cuMemImportFromShareableHandle) import_handle;
};

// Linked against libcuda.
Driver Linked() {
  return {&cuMemGetAllocationGranularity,
          &cuMemCreate,
          &cuMemRelease,
          &cuMemAddressReserve,
          &cuMemAddressFree,
          &cuMemMap,
          &cuMemUnmap,
          &cuMemSetAccess,
          &cuMemExportToShareableHandle,
          &cuMemImportFromShareableHandle};
}

// Looked up through the runtime, as a program that does not link libcuda finds them; *rc is
// the first lookup that failed (0: none).
template <typename Fn>
void LookUp(const char* name, Fn* fn, int* rc) {
  void* p = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  int r = int(cudaGetDriverEntryPointByVersion(name, &p, 12000, cudaEnableDefault, &found));
  if (r == 0 && found != cudaDriverEntryPointSuccess) r = -1;
  if (*rc == 0) *rc = r;
  *fn = reinterpret_cast<Fn>(p);
}

Driver LookedUp(int* rc) {
  Driver d{};
  *rc = 0;
  LookUp("cuMemGetAllocationGranularity", &d.granularity, rc);
  LookUp("cuMemCreate", &d.create, rc);
  LookUp("cuMemRelease", &d.release, rc);
  LookUp("cuMemAddressReserve", &d.reserve, rc);
  LookUp("cuMemAddressFree", &d.address_free, rc);
  LookUp("cuMemMap", &d.map, rc);
  LookUp("cuMemUnmap", &d.unmap, rc);
  LookUp("cuMemSetAccess", &d.set_access, rc);
  LookUp("cuMemExportToShareableHandle", &d.export_handle, rc);
  LookUp("cuMemImportFromShareableHandle", &d.import_handle, rc);
  return d;
}

CUmemAllocationProp DeviceProp(CUmemAllocationHandleType shareable) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  p.location.id = 0;
  p.requestedHandleTypes = shareable;
  return p;
}

const CUmemAccessDesc kReadWrite = {{CU_MEM_LOCATION_TYPE_DEVICE, 0},
                                    CU_MEM_ACCESS_FLAGS_PROT_READWRITE};

// The primary context of device 0, current on this thread.
int Setup() { return Expect(int(cudaSetDevice(0)) | int(cudaFree(nullptr))); }

// Whether the `n` bytes at `p` all hold `byte`.
bool Holds(uintptr_t p, size_t n, unsigned char byte) {
  std::vector<unsigned char> host(n, static_cast<unsigned char>(~byte));
  if (cudaMemcpy(host.data(), reinterpret_cast<void*>(p), n, cudaMemcpyDeviceToHost) !=
      cudaSuccess) {
    return false;
  }
  for (unsigned char b : host) {
    if (b != byte) return false;
  }
  return true;
}

int Fill(uintptr_t p, size_t n, unsigned char byte) {
  return Expect(int(cudaMemset(reinterpret_cast<void*>(p), byte, n)) |
                int(cudaDeviceSynchronize()));
}

// ---- ipc ----

void IpcCreator(Steps& steps, int sock) {
  Line ready("ipc", "ready", "creator");
  ready.Add("setup", Setup()).Add("holds", 0);
  steps.Reach(ready);

  void* mem = nullptr;
  Line shared("ipc", "shared", "creator");
  shared.Add("alloc", Expect(cudaMalloc(&mem, kShared)));
  const auto p = reinterpret_cast<uintptr_t>(mem);
  shared.Add("fill", Fill(p, kShared, kCreatorByte));
  cudaIpcMemHandle_t handle{};
  shared.Add("export", Expect(cudaIpcGetMemHandle(&handle, mem)));
  char written = 0;
  shared.Add("handed", Ok(WriteAll(sock, &handle, sizeof(handle)) && ReadAll(sock, &written, 1) &&
                          written == 'w'));
  // B wrote over the first half.
  shared.Add("sees_peer", Ok(Holds(p, kShared / 2, kImporterByte) &&
                             Holds(p + kShared / 2, kShared / 2, kCreatorByte)));
  shared.Add("holds", kShared);
  steps.Reach(shared);

  Line closed("ipc", "peer-closed", "creator");
  closed.Add("intact", Ok(Holds(p + kShared / 2, kShared / 2, kCreatorByte))).Add("holds", kShared);
  steps.Reach(closed);

  Line freed("ipc", "freed", "creator");
  freed.Add("release", Expect(cudaFree(mem))).Add("holds", 0);
  steps.Reach(freed);
}

void IpcImporter(Steps& steps, int sock) {
  Line ready("ipc", "ready", "importer");
  ready.Add("setup", Setup()).Add("holds", 0);
  steps.Reach(ready);

  Line shared("ipc", "shared", "importer");
  cudaIpcMemHandle_t handle{};
  shared.Add("received", Ok(ReadAll(sock, &handle, sizeof(handle))));
  // A waits for B from here on: what the device's free memory drops by across the open is
  // what B is charged for it.
  size_t before = 0, after = 0, total = 0;
  Expect(cudaMemGetInfo(&before, &total));
  void* mem = nullptr;
  shared.Add("open", Expect(cudaIpcOpenMemHandle(&mem, handle, cudaIpcMemLazyEnablePeerAccess)));
  Expect(cudaMemGetInfo(&after, &total));
  const auto p = reinterpret_cast<uintptr_t>(mem);
  shared.Add("sees_peer", Ok(Holds(p, kShared, kCreatorByte)));
  shared.Add("write", Fill(p, kShared / 2, kImporterByte));
  shared.Add("told", Ok(WriteAll(sock, "w", 1)));
  shared.Add("charged", (long long)before - (long long)after).Add("holds", 0);
  steps.Reach(shared);

  Line closed("ipc", "peer-closed", "importer");
  closed.Add("close", Expect(cudaIpcCloseMemHandle(mem))).Add("holds", 0);
  steps.Reach(closed);

  Line freed("ipc", "freed", "importer");
  freed.Add("holds", 0);
  steps.Reach(freed);
}

// ---- vmm-fd ----

struct Mapped {
  CUmemGenericAllocationHandle handle = 0;
  CUdeviceptr va = 0;
  size_t size = 0;
};

// Creates `size` bytes on device 0 that may be exported as a descriptor, maps them, fills
// them with `byte` and sends the descriptor over `sock`.
Mapped CreateAndSend(const Driver& d, int sock, size_t size, unsigned char byte, Line& line) {
  const CUmemAllocationProp prop = DeviceProp(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  Mapped m;
  m.size = size;
  line.Add("create", Expect(d.create(&m.handle, size, &prop, 0)));
  line.Add("reserve", Expect(d.reserve(&m.va, size, 0, 0, 0)));
  line.Add("map", Expect(d.map(m.va, size, 0, m.handle, 0)));
  line.Add("access", Expect(d.set_access(m.va, size, &kReadWrite, 1)));
  line.Add("fill", Fill(m.va, size, byte));
  int fd = -1;
  line.Add("export",
           Expect(d.export_handle(&fd, m.handle, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0)));
  line.Add("sent", Ok(fd >= 0 && SendFd(sock, fd, size)));
  if (fd >= 0) close(fd);
  return m;
}

// Receives a descriptor, imports it and maps it at an address of this process's own. A waits
// for B meanwhile: what the device's free memory drops by from the descriptor's arrival on is
// what B is charged for the import (`charged=`).
Mapped ReceiveAndMap(const Driver& d, int sock, Line& line) {
  int fd = -1;
  uint64_t size = 0;
  Mapped m;
  line.Add("received", Ok(ReceiveFd(sock, &fd, &size)));
  size_t before = 0, after = 0, total = 0;
  Expect(cudaMemGetInfo(&before, &total));
  m.size = size_t(size);
  line.Add("import", Expect(d.import_handle(&m.handle, reinterpret_cast<void*>(intptr_t(fd)),
                                            CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)));
  if (fd >= 0) close(fd);
  line.Add("reserve", Expect(d.reserve(&m.va, m.size, 0, 0, 0)));
  line.Add("map", Expect(d.map(m.va, m.size, 0, m.handle, 0)));
  line.Add("access", Expect(d.set_access(m.va, m.size, &kReadWrite, 1)));
  Expect(cudaMemGetInfo(&after, &total));
  line.Add("charged", (long long)before - (long long)after);
  return m;
}

void Unmap(const Driver& d, const Mapped& m, Line& line) {
  line.Add("unmap", Expect(d.unmap(m.va, m.size)));
  line.Add("release", Expect(d.release(m.handle)));
  line.Add("address_free", Expect(d.address_free(m.va, m.size)));
}

bool Signal(int sock, char c) { return WriteAll(sock, &c, 1); }
bool AwaitSignal(int sock, char c) {
  char got = 0;
  return ReadAll(sock, &got, 1) && got == c;
}

void VmmCreator(Steps& steps, int sock) {
  const Driver d = Linked();
  Line ready("vmm-fd", "ready", "creator");
  ready.Add("setup", Setup());
  const CUmemAllocationProp prop = DeviceProp(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  size_t g = 0;
  ready.Add("query", Expect(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)));
  const size_t size = RoundUp(kShared, g == 0 ? kMiB : g);
  ready.Add("size", size).Add("holds", 0);
  steps.Reach(ready);

  Line shared("vmm-fd", "shared", "creator");
  const Mapped first = CreateAndSend(d, sock, size, kCreatorByte, shared);
  shared.Add("peer_wrote", Ok(AwaitSignal(sock, 'w')));
  shared.Add("sees_peer", Ok(Holds(first.va, size / 2, kImporterByte) &&
                             Holds(first.va + size / 2, size / 2, kCreatorByte)));
  shared.Add("holds", size);
  steps.Reach(shared);

  Line peer_released("vmm-fd", "peer-released", "creator");
  peer_released.Add("intact", Ok(Holds(first.va + size / 2, size / 2, kCreatorByte)))
      .Add("holds", size);
  steps.Reach(peer_released);

  Line again("vmm-fd", "shared-again", "creator");
  const Mapped second = CreateAndSend(d, sock, size, kSecondByte, again);
  again.Add("peer_mapped", Ok(AwaitSignal(sock, 'm'))).Add("holds", 2 * size);
  steps.Reach(again);

  // A lets go of the second allocation while B still maps it.
  Line released("vmm-fd", "creator-released", "creator");
  Unmap(d, second, released);
  released.Add("told", Ok(Signal(sock, 'r'))).Add("holds", size);
  steps.Reach(released);

  Line freed("vmm-fd", "freed", "creator");
  Unmap(d, first, freed);
  freed.Add("holds", 0);
  steps.Reach(freed);
}

void VmmImporter(Steps& steps, int sock) {
  const Driver d = Linked();
  Line ready("vmm-fd", "ready", "importer");
  ready.Add("setup", Setup()).Add("holds", 0);
  steps.Reach(ready);

  Line shared("vmm-fd", "shared", "importer");
  const Mapped first = ReceiveAndMap(d, sock, shared);
  shared.Add("sees_peer", Ok(Holds(first.va, first.size, kCreatorByte)));
  shared.Add("write", Fill(first.va, first.size / 2, kImporterByte));
  shared.Add("told", Ok(Signal(sock, 'w')));
  shared.Add("holds", 0);
  steps.Reach(shared);

  Line released("vmm-fd", "peer-released", "importer");
  Unmap(d, first, released);
  released.Add("holds", 0);
  steps.Reach(released);

  Line again("vmm-fd", "shared-again", "importer");
  const Mapped second = ReceiveAndMap(d, sock, again);
  again.Add("sees_peer", Ok(Holds(second.va, second.size, kSecondByte)));
  again.Add("told", Ok(Signal(sock, 'm'))).Add("holds", 0);
  steps.Reach(again);

  // The pages stay while B maps them, though A has let go.
  Line creator_released("vmm-fd", "creator-released", "importer");
  creator_released.Add("creator_gone", Ok(AwaitSignal(sock, 'r')));
  creator_released.Add("still_reads", Ok(Holds(second.va, second.size, kSecondByte)));
  creator_released.Add("holds", 0);
  steps.Reach(creator_released);

  Line freed("vmm-fd", "freed", "importer");
  Unmap(d, second, freed);
  freed.Add("holds", 0);
  steps.Reach(freed);
}

// ---- expandable ----

unsigned char ChunkByte(size_t i) { return static_cast<unsigned char>(0x10 + i); }

void Expandable(Steps& steps) {
  int lookup = 0;
  const Driver d = LookedUp(&lookup);
  Line ready("expandable", "ready", "self");
  ready.Add("lookup", Expect(lookup)).Add("setup", Setup());
  if (lookup != 0) {
    ready.Add("holds", 0);
    steps.Reach(ready);
    return;
  }
  // The allocator asks for shareable handles, so that its segments may be passed on.
  const CUmemAllocationProp prop = DeviceProp(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  size_t g = 0;
  ready.Add("query", Expect(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)));
  ready.Add("granularity", g);
  const size_t chunk = RoundUp(20 * kMiB, g == 0 ? kMiB : g);
  const size_t range = RoundUp(16 * kGiB, chunk);
  CUdeviceptr base = 0;
  ready.Add("reserve", Expect(d.reserve(&base, range, 0, 0, 0))).Add("chunk", chunk);

  std::vector<CUmemGenericAllocationHandle> chunks;
  // Every chunk still holds what was written to it when it was mapped.
  auto intact = [&] {
    bool all = true;
    for (size_t i = 0; i < chunks.size(); ++i) {
      all = all && Holds(base + i * chunk, 1, ChunkByte(i)) &&
            Holds(base + (i + 1) * chunk - 1, 1, ChunkByte(i));
    }
    return Ok(all);
  };
  // Creates one chunk and maps it at the end; cuMemCreate's status. Growing to the limit
  // (not `counted`: the last create is meant to fail) writes only the bytes `intact` reads.
  auto grow = [&](Line& line, bool counted) {
    CUmemGenericAllocationHandle h = 0;
    int create = d.create(&h, chunk, &prop, 0);
    if (counted) Expect(create);
    if (create != 0) return create;
    const CUdeviceptr at = base + chunks.size() * chunk;
    const unsigned char byte = ChunkByte(chunks.size());
    line.Add("map", Expect(d.map(at, chunk, 0, h, 0)));
    line.Add("access", Expect(d.set_access(at, chunk, &kReadWrite, 1)));
    line.Add("fill",
             counted ? Fill(at, chunk, byte) : Fill(at, 1, byte) | Fill(at + chunk - 1, 1, byte));
    chunks.push_back(h);
    return create;
  };
  auto shrink = [&](Line& line) {
    const CUdeviceptr at = base + (chunks.size() - 1) * chunk;
    line.Add("unmap", Expect(d.unmap(at, chunk)));
    line.Add("release", Expect(d.release(chunks.back())));
    chunks.pop_back();
  };
  auto reach = [&](Line& line) {
    line.Add("intact", intact()).Add("chunks", chunks.size());
    line.Add("mapped", chunks.size() * chunk).Add("holds", chunks.size() * chunk);
    steps.Reach(line);
  };
  reach(ready);

  const std::string kSteps[] = {"grow1",   "grow2",   "grow3",   "grow4",  "shrink1",
                                "shrink2", "regrow1", "regrow2", "regrow3"};
  for (const std::string& step : kSteps) {
    Line line("expandable", step.c_str(), "self");
    if (step.rfind("shrink", 0) == 0) {
      shrink(line);
    } else {
      line.Add("create", grow(line, true));
    }
    reach(line);
  }

  // Chunk by chunk until the memory refuses one.
  Line limit("expandable", "limit", "self");
  size_t grown = 0;
  int past = 0;
  while (past == 0 && grown < 4096) {
    Line scratch("expandable", "limit", "self");
    past = grow(scratch, false);
    if (past == 0) ++grown;
  }
  limit.Add("grown", grown).Add("past", Expect(past, kOutOfMemory));
  reach(limit);

  Line freed("expandable", "freed", "self");
  int unmap = 0, release = 0;
  for (size_t i = chunks.size(); i-- > 0;) {
    unmap |= Expect(d.unmap(base + i * chunk, chunk));
    release |= Expect(d.release(chunks[i]));
  }
  chunks.clear();
  freed.Add("unmap", unmap).Add("release", release);
  freed.Add("address_free", Expect(d.address_free(base, range)));
  reach(freed);
}

// ---- vmm-pool ----

void VmmPool(Steps& steps) {
  const Driver d = Linked();
  Line ready("vmm-pool", "ready", "self");
  ready.Add("setup", Setup());
  const CUmemAllocationProp prop = DeviceProp(CU_MEM_HANDLE_TYPE_NONE);
  size_t g = 0;
  ready.Add("query", Expect(d.granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)));
  ready.Add("granularity", g);
  if (g == 0) g = kMiB;

  const size_t range = 32 * kGiB;
  constexpr size_t kAlign = 128;  // each piece's start
  CUdeviceptr base = 0;
  size_t mapped = 0, used = 0;
  struct Piece {
    size_t offset, bytes;
    unsigned char byte;
  };
  std::vector<Piece> pieces;
  // Takes `bytes` from the pool, mapping more when what is mapped does not hold them; the
  // first failing call's status (`want` expected of cuMemCreate).
  auto take = [&](size_t bytes, Line& line, int want) {
    const size_t offset = RoundUp(used, kAlign);
    if (offset + bytes > mapped) {
      const size_t more = RoundUp(offset + bytes - mapped, g);
      CUmemGenericAllocationHandle h = 0;
      int create = Expect(d.create(&h, more, &prop, 0), want);
      line.Add("create", create);
      if (create != 0) return create;
      if (base == 0) line.Add("reserve", Expect(d.reserve(&base, range, 0, 0, 0)));
      line.Add("map", Expect(d.map(base + mapped, more, 0, h, 0)));
      // The mapping keeps the memory: the handle is not needed any more.
      line.Add("release", Expect(d.release(h)));
      line.Add("access", Expect(d.set_access(base + mapped, more, &kReadWrite, 1)));
      mapped += more;
    }
    const auto byte = static_cast<unsigned char>(0x40 + pieces.size());
    line.Add("fill", Fill(base + offset, bytes, byte));
    pieces.push_back({offset, bytes, byte});
    used = offset + bytes;
    return 0;
  };
  auto reach = [&](Line& line) {
    bool all = true;
    for (const Piece& p : pieces) {
      all = all && Holds(base + p.offset, 1, p.byte) &&
            Holds(base + p.offset + p.bytes - 1, 1, p.byte);
    }
    line.Add("intact", Ok(all)).Add("used", used).Add("mapped", mapped).Add("holds", mapped);
    steps.Reach(line);
  };
  reach(ready);

  // The second fits in what the first mapped; the last comes after the pool gave the one
  // before back (its memory stays mapped).
  const struct {
    const char* step;
    size_t bytes;
    bool give_back_last;
  } kRequests[] = {{"take1", kMiB, false},         {"take2", 512 * 1024, false},
                   {"take3", 5 * kMiB + 3, false}, {"take4", 48 * kMiB, false},
                   {"take5", 130 * kMiB, false},   {"take6", 96 * kMiB, true}};
  for (const auto& r : kRequests) {
    Line line("vmm-pool", r.step, "self");
    if (r.give_back_last) {
      used = pieces.back().offset;
      pieces.pop_back();
    }
    take(r.bytes, line, 0);
    reach(line);
  }

  // A piece whose shortfall is more than the memory left: the pool cannot grow.
  Line past("vmm-pool", "past", "self");
  size_t free_bytes = 0, total_bytes = 0;
  Expect(cudaMemGetInfo(&free_bytes, &total_bytes));
  const size_t slack = mapped - RoundUp(used, kAlign);
  past.Add("past", take(slack + RoundUp(free_bytes, g) + g, past, kOutOfMemory));
  reach(past);

  // One call unmaps the whole pool, whatever mappings it is made of.
  Line freed("vmm-pool", "freed", "self");
  freed.Add("unmap", Expect(d.unmap(base, mapped)));
  freed.Add("address_free", Expect(d.address_free(base, range)));
  mapped = used = 0;
  pieces.clear();
  reach(freed);
}

// ---- processes ----

bool TwoProcesses(const std::string& name) { return name == "ipc" || name == "vmm-fd"; }

int Child(const std::string& role, const std::string& name, int sock, int arrive, int go) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Steps steps(arrive, go);
  const bool creator = role == "creator";
  if (name == "ipc") {
    creator ? IpcCreator(steps, sock) : IpcImporter(steps, sock);
  } else {
    creator ? VmmCreator(steps, sock) : VmmImporter(steps, sock);
  }
  return g_failed == 0 ? 0 : 1;
}

pid_t StartChild(const char* self, const char* role, const std::string& name, int sock, int arrive,
                 int go) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  for (int fd : {sock, arrive, go}) fcntl(fd, F_SETFD, 0);
  std::string args[] = {"child",           role, name, std::to_string(sock), std::to_string(arrive),
                        std::to_string(go)};
  std::vector<char*> argv = {const_cast<char*>(self)};
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::perror("execv");
  _exit(127);
}

// Starts A and B, meets them at every step (the second meeting of a step is the hold) and
// waits for them.
int Launch(const char* self, const std::string& name) {
  int sock[2], arrive[2], go_a[2], go_b[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sock) != 0 ||
      pipe2(arrive, O_CLOEXEC) != 0 || pipe2(go_a, O_CLOEXEC) != 0 || pipe2(go_b, O_CLOEXEC) != 0) {
    return 2;
  }
  g_children.push_back(StartChild(self, "creator", name, sock[0], arrive[1], go_a[0]));
  g_children.push_back(StartChild(self, "importer", name, sock[1], arrive[1], go_b[0]));
  for (int fd : {sock[0], sock[1], arrive[1], go_a[0], go_b[0]}) close(fd);
  int failed = 0;
  for (bool holding = false;; holding = !holding) {
    char a[Steps::kRecord], b[Steps::kRecord];
    if (!ReadAll(arrive[0], a, sizeof(a))) break;
    if (!ReadAll(arrive[0], b, sizeof(b)) || std::strncmp(a, b, sizeof(a)) != 0) {
      std::printf("share_patterns: the processes are not at the same step\n");
      for (pid_t p : g_children) kill(p, SIGKILL);
      ++failed;
      break;
    }
    if (holding) Steps::HoldOnStdin(a);
    if (!WriteAll(go_a[1], "g", 1) || !WriteAll(go_b[1], "g", 1)) break;
  }
  close(go_a[1]);
  close(go_b[1]);
  for (pid_t p : g_children) {
    int status = 0;
    if (waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::printf("done case=%s failed=%d\n", name.c_str(), failed);
  return failed == 0 ? 0 : 1;
}

int Alone(const std::string& name) {
  Steps steps;
  if (name == "expandable") {
    Expandable(steps);
  } else {
    VmmPool(steps);
  }
  std::printf("done case=%s failed=%d\n", name.c_str(), g_failed);
  return g_failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  if (argc == 7 && std::strcmp(argv[1], "child") == 0) {
    return Child(argv[2], argv[3], std::atoi(argv[4]), std::atoi(argv[5]), std::atoi(argv[6]));
  }
  const std::string name = argc >= 2 ? argv[1] : "";
  unsigned deadline = 60;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--deadline") == 0) deadline = unsigned(std::atoi(argv[i + 1]));
  }
  const bool known = TwoProcesses(name) || name == "expandable" || name == "vmm-pool";
  if (!known || deadline == 0) {
    std::fprintf(stderr, "usage: %s ipc|vmm-fd|expandable|vmm-pool [--deadline SECONDS]\n",
                 argv[0]);
    return 2;
  }
  signal(SIGALRM, Deadline);
  alarm(deadline);
  return TwoProcesses(name) ? Launch(argv[0], name) : Alone(name);
}
