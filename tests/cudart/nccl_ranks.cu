// Multi-process NCCL, the shape of vLLM's tensor parallelism and of torchrun: one process per
// GPU, each calling ncclCommInitRank with a unique id that rank 0 makes and hands over through
// a file, then the collectives and point-to-point calls, then ncclCommDestroy.
//
//   nccl_ranks run N IDFILE [--past SIZE] [--deadline SECONDS] [--kill-rank R]
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
//
// With --kill-rank R a peer dies in the middle of an all-reduce. Every rank runs a first
// all-reduce to its end (NCCL connects the peers there and they map each other's buffers),
// prints `rank r=R ... warm=S sync=S` and waits at a hold: the launcher prints `hold
// step=warm` and reads a line from its stdin (at its end it no longer waits). Then rank R
// enqueues a second all-reduce, prints `rank-killing r=R all_reduce=S` and SIGKILLs itself,
// while the others enqueue the same all-reduce and watch it for at most 10 s through
// cudaStreamQuery and ncclCommGetAsyncError. Each prints `rank-after r=R all_reduce=S
// outcome=O query=Q async=A waited_ms=T`: completed (the stream finished, no asynchronous
// error), error (NCCL reported one, or the stream failed) or pending (neither within 10 s).
// Once every survivor has printed it and the launcher has reaped rank R (`rank-killed r=R
// pid=P signal=K`), the launcher waits out the interval at which a view reclaims what dead
// processes left (libvgpu's is 100 ms) and lets the survivors call cudaMemGetInfo: each
// prints `rank-swept r=R info=S free=F total=T async=A`, and the launcher holds again (`hold
// step=swept`) while they still hold their communicators and what they imported from rank R.
// Then each survivor calls ncclCommAbort, frees its buffers and prints `rank-end r=R
// barrier=B abort=S freed=S`. The launcher ends with `ranks n=N failed=K killed=R` and exits 0
// only when rank R died of SIGKILL and every other rank exited 0. --past does not apply.
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

using hami::cudart::ParseSize;
using hami::cudart::ReadAll;
using hami::cudart::WriteAll;

std::vector<pid_t> g_ranks;

constexpr int kWatchMs = 10 * 1000;  // how long a survivor watches the all-reduce
// Past the interval at which a view reclaims the slots of dead processes (libvgpu's
// region::kSweepIntervalNs, 100 ms).
constexpr long kPastSweepIntervalNs = 200 * 1000 * 1000;

void KillRanks(int) {
  for (pid_t p : g_ranks) {
    if (p > 0) kill(p, SIGKILL);  // 0: reaped already
  }
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

// A barrier the launcher keeps: says this rank arrived, then waits to be let go.
bool Barrier(int arrived_fd, int go_fd) {
  char byte = 'a';
  return WriteAll(arrived_fd, &byte, 1) && ReadAll(go_fd, &byte, 1);
}

double MsSince(const timespec& t0) {
  timespec t1{};
  clock_gettime(CLOCK_MONOTONIC, &t1);
  return double(t1.tv_sec - t0.tv_sec) * 1e3 + double(t1.tv_nsec - t0.tv_nsec) / 1e6;
}

// What a rank holds once it has a communicator and its buffers.
struct Started {
  int rank;
  int setup;
  int shared;
  int init;
  double init_ms;
  ncclComm_t comm;
  float* send;
  float* recv;
  size_t count;
  cudaStream_t stream;
};

// A rank of a run with --kill-rank (the top says what it does).
int KilledRun(const Started& s, int kill_rank, int arrived_fd, int go_fd) {
  int warm = -1, sync = -1;
  const bool ready = s.setup == 0 && s.init == 0;
  if (ready) {
    warm = ncclAllReduce(s.send, s.recv, s.count, ncclFloat, ncclSum, s.comm, s.stream);
    sync = int(cudaStreamSynchronize(s.stream));
  }
  size_t free_bytes = 0, total_bytes = 0;
  int info = int(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf(
      "rank r=%d pid=%d setup=%d id=%d init=%d warm=%d sync=%d info=%d free=%zu total=%zu "
      "init_ms=%.3f\n",
      s.rank, int(getpid()), s.setup, s.shared, s.init, warm, sync, info, free_bytes, total_bytes,
      s.init_ms);
  bool barrier = Barrier(arrived_fd, go_fd);
  const int all_reduce =
      ready ? int(ncclAllReduce(s.send, s.recv, s.count, ncclFloat, ncclSum, s.comm, s.stream))
            : -1;
  if (s.rank == kill_rank) {
    std::printf("rank-killing r=%d all_reduce=%d\n", s.rank, all_reduce);
    kill(getpid(), SIGKILL);
  }
  // NCCL reports what goes wrong between ranks asynchronously: watch the stream and the
  // communicator's error, as an application that must not block forever does.
  const char* outcome = "pending";
  int query = -1;
  ncclResult_t async = ncclSuccess;
  timespec t0{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (ready) {
    query = int(cudaStreamQuery(s.stream));
    if (ncclCommGetAsyncError(s.comm, &async) != ncclSuccess ||
        (async != ncclSuccess && async != ncclInProgress)) {
      outcome = "error";
      break;
    }
    if (query != int(cudaErrorNotReady)) {
      outcome = query == int(cudaSuccess) ? "completed" : "error";
      break;
    }
    if (MsSince(t0) >= kWatchMs) break;
    usleep(1000);
  }
  std::printf("rank-after r=%d all_reduce=%d outcome=%s query=%d async=%d waited_ms=%.3f\n", s.rank,
              all_reduce, outcome, query, int(async), MsSince(t0));
  // The launcher reaps the killed rank, then lets this one look at the memory.
  barrier = barrier && Barrier(arrived_fd, go_fd);
  info = int(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (ready) ncclCommGetAsyncError(s.comm, &async);
  std::printf("rank-swept r=%d info=%d free=%zu total=%zu async=%d\n", s.rank, info, free_bytes,
              total_bytes, int(async));
  barrier = barrier && Barrier(arrived_fd, go_fd);
  const int abort = s.comm != nullptr ? int(ncclCommAbort(s.comm)) : -1;
  const int freed =
      int(cudaFree(s.send)) | int(cudaFree(s.recv)) | int(cudaStreamDestroy(s.stream));
  std::printf("rank-end r=%d barrier=%d abort=%d freed=%d\n", s.rank, barrier ? 0 : 1, abort,
              freed);
  const bool ok = ready && s.shared == 0 && warm == 0 && sync == 0 && info == 0 && barrier &&
                  abort == 0 && freed == 0;
  return ok ? 0 : 1;
}

int Rank(int rank, int n, const char* id_path, int ready_fd, int arrived_fd, int go_fd, size_t past,
         int kill_rank) {
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
  if (kill_rank >= 0) {
    return KilledRun({rank, setup, shared, init, init_ms, comm, send, recv, count, stream},
                     kill_rank, arrived_fd, go_fd);
  }
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
  bool barrier = Barrier(arrived_fd, go_fd);
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
                int arrived_fd, int go_fd, size_t past, int kill_rank) {
  pid_t pid = fork();
  if (pid != 0) return pid;
  // The pipes are close-on-exec but for the ends this rank uses.
  for (int fd : {ready_fd, arrived_fd, go_fd}) {
    if (fd >= 0) fcntl(fd, F_SETFD, 0);
  }
  signal(SIGPIPE, SIG_DFL);  // the launcher ignores it
  std::string args[] = {"rank",
                        std::to_string(rank),
                        std::to_string(n),
                        id_path,
                        std::to_string(ready_fd),
                        std::to_string(arrived_fd),
                        std::to_string(go_fd),
                        std::to_string(past),
                        std::to_string(kill_rank)};
  std::vector<char*> argv = {const_cast<char*>(self)};  // as it was started
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::perror("execv");
  _exit(127);
}

// Prints a hold and waits for a line on stdin (not after its end).
void Hold(const char* step) {
  static bool ended = false;
  std::printf("hold step=%s\n", step);
  char c = 0;
  while (!ended) {
    if (read(STDIN_FILENO, &c, 1) != 1) {
      ended = true;
    } else if (c == '\n') {
      break;
    }
  }
}

// Waits for `n` ranks to arrive at a barrier; false when they cannot all come.
bool Arrivals(int arrived_fd, int n) {
  char byte = 0;
  int at = 0;
  while (at < n && ReadAll(arrived_fd, &byte, 1)) ++at;
  return at == n;
}

// Lets every rank still running go on: a byte on each one's own pipe, so that a rank
// quick to reach the next barrier cannot take another's.
void LetGo(const std::vector<int>& go_fds) {
  for (int fd : go_fds) {
    if (fd >= 0) WriteAll(fd, "g", 1);
  }
}

// The barriers of a run with --kill-rank after the first (the top says what they are):
// false when the run cannot go on to its end.
bool KilledBarriers(int n, int kill_rank, int arrived_fd, std::vector<int>& go_fds) {
  if (!Arrivals(arrived_fd, n)) return false;
  Hold("warm");
  LetGo(go_fds);
  const pid_t killed = g_ranks[size_t(kill_rank)];
  int status = 0;
  if (waitpid(killed, &status, 0) != killed) return false;
  g_ranks[size_t(kill_rank)] = 0;
  close(go_fds[size_t(kill_rank)]);
  go_fds[size_t(kill_rank)] = -1;
  std::printf("rank-killed r=%d pid=%d signal=%d\n", kill_rank, int(killed),
              WIFSIGNALED(status) ? WTERMSIG(status) : 0);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) return false;
  if (!Arrivals(arrived_fd, n - 1)) return false;
  timespec pause{0, kPastSweepIntervalNs};
  while (nanosleep(&pause, &pause) != 0) {
  }
  LetGo(go_fds);
  if (!Arrivals(arrived_fd, n - 1)) return false;
  Hold("swept");
  LetGo(go_fds);
  return true;
}

int Run(const char* self, int n, const char* id_path, size_t past, unsigned deadline,
        int kill_rank) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  signal(SIGALRM, KillRanks);
  alarm(deadline);
  unlink(id_path);
  // A rank that died must not take the launcher with it when it is let go.
  signal(SIGPIPE, SIG_IGN);
  int ready[2], arrived[2];
  std::vector<int> go_fds(size_t(n), -1);  // the launcher's end of each rank's pipe
  if (pipe2(ready, O_CLOEXEC) != 0 || pipe2(arrived, O_CLOEXEC) != 0) return 2;
  auto start = [&](int r, int ready_fd) {
    int go[2];
    if (pipe2(go, O_CLOEXEC) != 0) return false;
    const pid_t pid = StartRank(self, r, n, id_path, ready_fd, arrived[1], go[0], past, kill_rank);
    close(go[0]);
    go_fds[size_t(r)] = go[1];
    if (pid > 0) g_ranks.push_back(pid);
    return pid > 0;
  };
  // Rank 0 first; the others once the id is in its file.
  bool have_id = start(0, ready[1]);
  close(ready[1]);
  char byte = 0;
  have_id = have_id && ReadAll(ready[0], &byte, 1);
  close(ready[0]);
  for (int r = 1; have_id && r < n; ++r) have_id = start(r, -1);
  close(arrived[1]);
  int failed = have_id ? 0 : n;
  if (kill_rank >= 0) {
    if (have_id && !KilledBarriers(n, kill_rank, arrived[0], go_fds)) ++failed;
  } else if (have_id && Arrivals(arrived[0], n)) {
    std::printf("barrier ranks=%d\n", n);
    char sink[256];
    while (read(STDIN_FILENO, sink, sizeof(sink)) > 0) {
    }
  }
  if (kill_rank < 0) LetGo(go_fds);
  for (int fd : go_fds) {
    if (fd >= 0) close(fd);
  }
  close(arrived[0]);
  for (pid_t p : g_ranks) {
    int status = 0;
    if (p == 0) continue;  // the killed rank, reaped
    if (waitpid(p, &status, 0) != p || !WIFEXITED(status) || WEXITSTATUS(status) != 0) ++failed;
  }
  if (kill_rank >= 0) {
    std::printf("ranks n=%d failed=%d killed=%d\n", n, failed, kill_rank);
  } else {
    std::printf("ranks n=%d failed=%d\n", n, failed);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 10 && std::strcmp(argv[1], "rank") == 0) {
    return Rank(std::atoi(argv[2]), std::atoi(argv[3]), argv[4], std::atoi(argv[5]),
                std::atoi(argv[6]), std::atoi(argv[7]), std::strtoull(argv[8], nullptr, 0),
                std::atoi(argv[9]));
  }
  if (argc >= 4 && std::strcmp(argv[1], "run") == 0) {
    int n = std::atoi(argv[2]);
    size_t past = 0;
    unsigned deadline = 60;
    int kill_rank = -1;
    for (int i = 4; i + 1 < argc; i += 2) {
      if (std::strcmp(argv[i], "--past") == 0) {
        past = ParseSize(argv[i + 1]);
      } else if (std::strcmp(argv[i], "--deadline") == 0) {
        deadline = unsigned(std::atoi(argv[i + 1]));
      } else if (std::strcmp(argv[i], "--kill-rank") == 0) {
        kill_rank = std::atoi(argv[i + 1]);
      }
    }
    // A killed rank leaves at least one survivor.
    const bool kill_ok = kill_rank < 0 || (n >= 2 && kill_rank < n);
    if (n >= 1 && n <= 64 && kill_ok) return Run(argv[0], n, argv[3], past, deadline, kill_rank);
  }
  std::fprintf(stderr,
               "usage: %s run N IDFILE [--past SIZE] [--deadline SECONDS] [--kill-rank R]\n",
               argv[0]);
  return 2;
}
