// Multi-process NCCL, the shape of vLLM's tensor parallelism and of torchrun: one process per
// GPU, each calling ncclCommInitRank with a unique id that rank 0 makes and hands over through
// a file, then the collectives and point-to-point calls, then ncclCommDestroy.
//
//   nccl_ranks run N IDFILE [--past SIZE] [--deadline SECONDS]
//
// starts the N ranks (this program again, one process each, so that each has its own CUDA
// state) and waits for them. Each rank prints `rank r=R ...` with the status of every call
// (0: success) and how long its ncclCommInitRank took (init_ms), then waits at a barrier: when
// every rank is there the launcher prints `barrier ranks=N` and reads its stdin to its end (a
// caller inspects the processes while they hold their memory, then closes it), and the ranks go on
// to destroy their communicators and print `rank-end r=R ...`. With --past, each rank then asks for
// SIZE (bytes, or 512m, 1g) more device memory and prints what the runtime answered (`past=`; 2 is
// cudaErrorMemoryAllocation). The launcher ends with `ranks n=N failed=K` and exits 0 only
// when every rank did; past the deadline (default 60 s) it kills the ranks and exits 124, so
// a hang fails instead of blocking.
#include <cuda_runtime.h>
#include <fcntl.h>
#include <nccl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>
#include <vector>

#include "program_io.h"

namespace {

using hami::cudart::ReadAll;
using hami::cudart::WriteAll;

std::vector<pid_t> g_ranks;

void KillRanks(int) {
  for (pid_t p : g_ranks) kill(p, SIGKILL);
  const char msg[] = "ranks deadline passed: killed\n";
  (void)!write(STDOUT_FILENO, msg, sizeof(msg) - 1);
  _exit(124);
}

// The unique id: rank 0 writes it whole under a temporary name and renames it, then says so
// on `ready_fd`; the launcher starts the other ranks only after that.
int ShareId(ncclUniqueId* id, int rank, const char* path, int ready_fd) {
  if (rank != 0) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    bool ok = fd >= 0 && ReadAll(fd, id, sizeof(*id));
    if (fd >= 0) close(fd);
    return ok ? 0 : -1;
  }
  if (int r = ncclGetUniqueId(id); r != ncclSuccess) return r;
  std::string tmp = std::string(path) + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && WriteAll(fd, id, sizeof(*id));
  if (fd >= 0) close(fd);
  if (!ok || rename(tmp.c_str(), path) != 0) return -1;
  char byte = 'r';
  ok = WriteAll(ready_fd, &byte, 1);
  close(ready_fd);
  return ok ? 0 : -1;
}

int Rank(int rank, int n, const char* id_path, int ready_fd, int arrived_fd, int go_fd,
         size_t past) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  int devices = 0;
  int setup = int(cudaGetDeviceCount(&devices));
  if (devices > 0) setup |= int(cudaSetDevice(rank % devices));
  ncclUniqueId id;
  int shared = ShareId(&id, rank, id_path, ready_fd);
  ncclComm_t comm = nullptr;
  timespec t0{}, t1{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int init = shared == 0 ? int(ncclCommInitRank(&comm, n, id, rank)) : -1;
  clock_gettime(CLOCK_MONOTONIC, &t1);
  const double init_ms =
      double(t1.tv_sec - t0.tv_sec) * 1e3 + double(t1.tv_nsec - t0.tv_nsec) / 1e6;
  const size_t count = 1 << 16;  // floats per rank's part
  float* send = nullptr;
  float* recv = nullptr;
  cudaStream_t stream = nullptr;
  setup |= int(cudaMalloc(&send, count * size_t(n) * sizeof(float))) |
           int(cudaMalloc(&recv, count * size_t(n) * sizeof(float))) |
           int(cudaStreamCreate(&stream));
  int all_reduce = -1, all_gather = -1, reduce_scatter = -1, broadcast = -1, send_recv = -1,
      sync = -1;
  if (init == 0 && setup == 0) {
    all_reduce = ncclAllReduce(send, recv, count, ncclFloat, ncclSum, comm, stream);
    all_gather = ncclAllGather(send, recv, count, ncclFloat, comm, stream);
    reduce_scatter = ncclReduceScatter(send, recv, count, ncclFloat, ncclSum, comm, stream);
    broadcast = ncclBroadcast(send, recv, count, ncclFloat, 0, comm, stream);
    // A ring: each rank sends to the next and receives from the previous.
    send_recv = ncclGroupStart();
    send_recv |= ncclSend(send, count, ncclFloat, (rank + 1) % n, comm, stream);
    send_recv |= ncclRecv(recv, count, ncclFloat, (rank + n - 1) % n, comm, stream);
    send_recv |= ncclGroupEnd();
    sync = int(cudaStreamSynchronize(stream));
  }
  size_t free_bytes = 0, total_bytes = 0;
  int info = int(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf(
      "rank r=%d pid=%d setup=%d id=%d init=%d all_reduce=%d all_gather=%d reduce_scatter=%d "
      "broadcast=%d send_recv=%d sync=%d info=%d free=%zu total=%zu init_ms=%.3f\n",
      rank, int(getpid()), setup, shared, init, all_reduce, all_gather, reduce_scatter, broadcast,
      send_recv, sync, info, free_bytes, total_bytes, init_ms);
  // The barrier: everyone holds its memory until the launcher lets them go.
  char byte = 'a';
  bool barrier = WriteAll(arrived_fd, &byte, 1) && ReadAll(go_fd, &byte, 1);
  int extra = -1;
  if (past > 0) {
    void* more = nullptr;
    extra = int(cudaMalloc(&more, past));
    if (extra == 0) cudaFree(more);
  }
  int freed = int(cudaFree(send)) | int(cudaFree(recv)) | int(cudaStreamDestroy(stream));
  int destroy = comm != nullptr ? int(ncclCommDestroy(comm)) : -1;
  std::printf("rank-end r=%d barrier=%d past=%d freed=%d destroy=%d\n", rank, barrier ? 0 : 1,
              extra, freed, destroy);
  bool ok = setup == 0 && shared == 0 && init == 0 && all_reduce == 0 && all_gather == 0 &&
            reduce_scatter == 0 && broadcast == 0 && send_recv == 0 && sync == 0 && barrier &&
            freed == 0 && destroy == 0;
  return ok ? 0 : 1;
}

pid_t StartRank(const char* self, int rank, int n, const char* id_path, int ready_fd,
                int arrived_fd, int go_fd, size_t past) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // The pipes are close-on-exec but for the ends this rank uses.
  for (int fd : {ready_fd, arrived_fd, go_fd}) {
    if (fd >= 0) fcntl(fd, F_SETFD, 0);
  }
  std::string args[] = {"rank",
                        std::to_string(rank),
                        std::to_string(n),
                        id_path,
                        std::to_string(ready_fd),
                        std::to_string(arrived_fd),
                        std::to_string(go_fd),
                        std::to_string(past)};
  std::vector<char*> argv = {const_cast<char*>(self)};  // as it was started
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::perror("execv");
  _exit(127);
}

int Run(const char* self, int n, const char* id_path, size_t past, unsigned deadline) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGALRM, KillRanks);
  alarm(deadline);
  unlink(id_path);
  int ready[2], arrived[2], go[2];
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(arrived, O_CLOEXEC) != 0 || pipe2(go, O_CLOEXEC) != 0) {
    return 2;
  }
  // Rank 0 first; the others once the id is in its file.
  g_ranks.push_back(StartRank(self, 0, n, id_path, ready[1], arrived[1], go[0], past));
  close(ready[1]);
  char byte = 0;
  bool have_id = ReadAll(ready[0], &byte, 1);
  close(ready[0]);
  if (have_id) {
    for (int r = 1; r < n; ++r) {
      g_ranks.push_back(StartRank(self, r, n, id_path, -1, arrived[1], go[0], past));
    }
  }
  close(arrived[1]);
  close(go[0]);
  int at_barrier = 0;
  while (have_id && at_barrier < n && ReadAll(arrived[0], &byte, 1)) ++at_barrier;
  if (at_barrier == n) {
    std::printf("barrier ranks=%d\n", n);
    char sink[256];
    while (read(STDIN_FILENO, sink, sizeof(sink)) > 0) {
    }
  }
  for (int r = 0; r < n; ++r) WriteAll(go[1], "g", 1);
  close(go[1]);
  close(arrived[0]);
  int failed = have_id ? 0 : n;
  for (pid_t p : g_ranks) {
    int status = 0;
    if (waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  std::printf("ranks n=%d failed=%d\n", n, failed);
  return failed == 0 ? 0 : 1;
}

// A size: a number of bytes, or of KiB, MiB or GiB with a k, m or g after it.
size_t ParseSize(const char* text) {
  char* end = nullptr;
  size_t n = std::strtoull(text, &end, 10);
  switch (*end) {
    case 'k':
      return n << 10;
    case 'm':
      return n << 20;
    case 'g':
      return n << 30;
    default:
      return n;
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 9 && std::strcmp(argv[1], "rank") == 0) {
    return Rank(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], std::atoi(argv[5]),
                std::atoi(argv[6]), std::atoi(argv[7]), std::strtoull(argv[8], nullptr, 0));
  }
  if (argc >= 4 && std::strcmp(argv[1], "run") == 0) {
    int n = std::atoi(argv[2]);
    size_t past = 0;
    unsigned deadline = 60;
    for (int i = 4; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--past") == 0) {
        past = ParseSize(argv[i + 1]);
      } else if (std::strcmp(argv[i], "--deadline") == 0) {
        deadline = unsigned(std::atoi(argv[i + 1]));
      }
    }
    if (n >= 1 && n <= 64) return Run(argv[0], n, argv[3], past, deadline);
  }
  std::fprintf(stderr, "usage: %s run N IDFILE [--past SIZE] [--deadline SECONDS]\n", argv[0]);
  return 2;
}
