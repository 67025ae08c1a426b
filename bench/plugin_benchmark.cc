// hami_bench_plugin: the device plugin's Allocate, one pod after another, as the kubelet calls
// it. The simulated API server and the simulated kubelet run in this process; the real
// hami-device-plugin (build/bin) runs as a child process on the simulated GPU (h100-80g:2,
// deviceSplitCount 10: 20 replicas), so that its memory and its time are its own.
//
// The plugin reaches the API server through a pass-through TCP proxy in this process, which
// timestamps every request: from its first byte reaching the proxy to the last byte of its
// response leaving the proxy for the plugin. For each RPC, the union of those intervals inside
// the RPC is its API time; the RPC's latency less its API time is the plugin's own work (gRPC
// both ways, finding the pod, deciding, the container directory and the limits file with their
// fsyncs, decoding the API's answers, the client's rate limiter).
//
// 1. Start: the API server, the proxy, the kubelet, the plugin; wait until the kubelet has the
//    plugin's replicas and the Node carries the plugin's inventory annotation.
// 2. Paced: P pods in sequence. Each is created as hami-scheduler leaves it (bind-phase
//    allocating, bind-time, vgpu-node, vgpu-devices-to-allocate: 3000 MiB and 30 cores of one
//    GPU, alternating between the node's two GPUs; the node lock hami.io/mutex.lock naming it);
//    then GetPreferredAllocation and Allocate for its one container and one replica, as the
//    kubelet's device manager does, each timed. The node stays full: once every replica is
//    held, the oldest pod is deleted (outside the timing) before the next one comes. Before
//    each pod the benchmark waits until the plugin's API client, whose rate limiter is given
//    50 requests/s and a burst of 100 (--kube-qps, --kube-burst: the binary's defaults), has
//    the tokens for the pod's requests again, so that the figures hold no client-side
//    throttling. The benchmark's copy of that bucket takes a token at the start of every
//    request the proxy sees, those between the timed calls included (a request the plugin
//    sends after answering Allocate costs a token too).
//    Every answer is checked: the response's memory limit, bind-phase success, the lock gone.
// 3. Back to back: B more pods without that wait, as a node that receives pods faster than its
//    plugin's client may send requests. Reported beside the paced figures, without a goal.
// 4. Memory and CPU: the plugin's VmRSS and VmHWM (/proc/<pid>/status) after the start and
//    after the run; its CPU time (its threads' run time) over the paced phase, per pod.
// 5. The limits file's share: after each paced pod, PublishLimitsFile (write, fsync, rename,
//    fsync of the directory) with that pod's variables, timed in this process beside the
//    plugin's limits files (the same filesystem, at the same moments of the run).
// A table on stdout and the same figures as JSON (<this binary's dir>/plugin.json, or --json).
// Goals are reported (meets: yes/no), never enforced: the exit status is 0 when every phase
// ran (or the run was skipped: the plugin needs root), 1 otherwise, 2 on bad flags.
//
// usage: hami_bench_plugin [--quick] [--pods N] [--burst N] [--json PATH]
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/parse.h"
#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "harness.h"
#include "kube/annotations.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "limits/limits_file.h"
#include "sim/kube/api_server.h"
#include "sim/kubelet/kubelet.h"
#include "support/subprocess.h"

namespace hami::bench {
namespace {

// The plugin's API client rate limit, passed to it (--kube-qps, --kube-burst: its defaults)
// and modelled by the paced phase.
constexpr int kPluginQps = 50;
constexpr int kPluginBurst = 100;

using nlohmann::json;

constexpr char kProgram[] = "hami_bench_plugin";
constexpr char kNode[] = "bench-gpu-node";
constexpr char kResource[] = "nvidia.com/gpu";
constexpr char kProfile[] = "h100-80g:2";
constexpr int kPodMemMiB = 3000;
constexpr int kPodCores = 30;

// The goals.
constexpr double kGoalOwnP99Ms = 10;
constexpr double kGoalPreferP99Ms = 10;  // the whole RPC, as the kubelet waits for it
constexpr double kGoalPeakRssMiB = 50;
constexpr int kGoalPods = 200;

constexpr char kUsage[] =
    "usage: hami_bench_plugin [--quick] [--pods N] [--burst N] [--json PATH]\n"
    "  --quick        a short run: 20 paced pods, 5 back to back\n"
    "  --pods N       pods allocated one after another, paced to the plugin's API client\n"
    "                 rate limit (default 200)\n"
    "  --burst N      pods allocated back to back afterwards, without pacing (default 20;\n"
    "                 0: none)\n"
    "  --json PATH    where to write the JSON (default: plugin.json beside this binary)\n";

struct Options : CommonOptions {
  int pods = 200;
  int burst = 20;
};

// The thread count of `pid` (Threads: in /proc/<pid>/status), 0 when unreadable.
int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return 0;
}

// The CPU time of `pid` in nanoseconds, its threads that ended included: utime + stime from
// /proc/<pid>/stat (clock ticks). The threads' own schedstat is finer but forgets a thread
// once it ends, so a phase in which one ended would measure less than nothing. -1 when
// unreadable.
int64_t CpuNs(pid_t pid) {
  const std::string proc = "/proc/" + std::to_string(pid);
  std::ifstream in(proc + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t close = text.rfind(')');  // the command may hold spaces
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  int64_t utime = -1, stime = -1;
  // Fields 3.. after the command: state is 3, utime 14, stime 15.
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoll(field);
    if (i == 15) stime = std::stoll(field);
  }
  if (utime < 0 || stime < 0) return -1;
  return (utime + stime) * (1'000'000'000 / sysconf(_SC_CLK_TCK));
}

// The 1-minute load average, from /proc/loadavg (-1 when unreadable).
double LoadAverage() {
  std::ifstream in("/proc/loadavg");
  double v = -1;
  in >> v;
  return v;
}

// ---- the timing proxy ------------------------------------------------------------------------

// One request the plugin sent, as the proxy saw it.
struct ApiSpan {
  int64_t start_ns = 0;  // its first byte reached the proxy
  int64_t end_ns = 0;    // the last byte of its response left the proxy for the plugin
  std::string kind;      // "GET node", "LIST pods", "PATCH pod", ...
};

// "GET /api/v1/namespaces/default/pods/p HTTP/1.1" -> "GET pod"; a collection GET is "LIST
// pods", a watch "WATCH pods"; a subresource follows a slash ("PATCH pod/status"). Bytes that
// do not start a request line (a body sent after "100 Continue") give "".
std::string ClassifyRequest(std::string_view head) {
  head = head.substr(0, head.find_first_of("\r\n"));
  const size_t sp = head.find(' ');
  if (sp == std::string_view::npos) return "";
  const std::string_view method = head.substr(0, sp);
  static const char* kMethods[] = {"GET", "POST", "PUT", "PATCH", "DELETE", "HEAD"};
  if (std::none_of(std::begin(kMethods), std::end(kMethods),
                   [&](const char* m) { return method == m; })) {
    return "";
  }
  std::string_view target = head.substr(sp + 1);
  target = target.substr(0, target.find(' '));
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query = q == std::string_view::npos ? "" : target.substr(q + 1);
  std::vector<std::string_view> segs;
  for (size_t at = 0; at < path.size();) {
    const size_t slash = path.find('/', at);
    const size_t end = slash == std::string_view::npos ? path.size() : slash;
    if (end > at) segs.push_back(path.substr(at, end - at));
    at = end + 1;
  }
  size_t i = 0;
  if (!segs.empty() && segs[0] == "api") i = 2;
  if (!segs.empty() && segs[0] == "apis") i = 3;
  if (i + 2 < segs.size() && segs[i] == "namespaces") i += 2;
  if (i >= segs.size()) return std::string(method) + " " + std::string(path);
  std::string resource(segs[i]);
  if (i + 1 >= segs.size()) {
    const bool watch = query.find("watch=true") != std::string_view::npos ||
                       query.find("watch=1") != std::string_view::npos;
    if (method == "GET") return (watch ? "WATCH " : "LIST ") + resource;
    return std::string(method) + " " + resource;
  }
  std::string singular = resource;
  if (singular.size() > 1 && singular.back() == 's') singular.pop_back();
  std::string kind = std::string(method) + " " + singular;
  if (i + 2 < segs.size()) kind += "/" + std::string(segs[i + 2]);
  return kind;
}

// A pass-through TCP proxy on 127.0.0.1 in front of the API server, one thread polling every
// connection. Each connection is HTTP/1.1 request then response: bytes from the plugin after
// response bytes (or first) begin a request; response bytes extend it.
class TimingProxy {
 public:
  static Result<std::unique_ptr<TimingProxy>> Start(int upstream_port) {
    std::unique_ptr<TimingProxy> p(new TimingProxy(upstream_port));
    p->listen_ = UniqueFd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!p->listen_.valid()) return Error::FromErrno("proxy socket");
    const int one = 1;
    setsockopt(p->listen_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(p->listen_.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(p->listen_.get(), 64) != 0) {
      return Error::FromErrno("proxy bind/listen");
    }
    socklen_t len = sizeof(addr);
    getsockname(p->listen_.get(), reinterpret_cast<sockaddr*>(&addr), &len);
    p->port_ = ntohs(addr.sin_port);
    p->wake_ = UniqueFd(eventfd(0, EFD_CLOEXEC));
    if (!p->wake_.valid()) return Error::FromErrno("proxy eventfd");
    p->thread_ = std::thread([raw = p.get()] { raw->Loop(); });
    return p;
  }
  ~TimingProxy() {
    const uint64_t one = 1;
    if (write(wake_.get(), &one, sizeof(one)) < 0) {
      // The loop also ends when the listening socket fails; nothing else to do.
    }
    if (thread_.joinable()) thread_.join();
  }
  TimingProxy(const TimingProxy&) = delete;
  TimingProxy& operator=(const TimingProxy&) = delete;

  int port() const { return port_; }

  // The requests begun within [from_ns, to_ns], with their responses so far, in start order.
  std::vector<ApiSpan> Spans(int64_t from_ns, int64_t to_ns) const {
    std::lock_guard lock(mu_);
    std::vector<ApiSpan> out;
    auto take = [&](const ApiSpan& s) {
      if (s.start_ns >= from_ns && s.start_ns <= to_ns) out.push_back(s);
    };
    for (const ApiSpan& s : done_) take(s);
    for (const auto& c : conns_) {
      if (c->state == Conn::kResponse || c->state == Conn::kRequest) take(c->open);
    }
    std::sort(out.begin(), out.end(),
              [](const ApiSpan& a, const ApiSpan& b) { return a.start_ns < b.start_ns; });
    return out;
  }
  // Requests begun since the start.
  uint64_t requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }
  // The start times of the requests after the first `from` (in the order they began).
  std::vector<int64_t> StartsFrom(uint64_t from) const {
    std::lock_guard lock(mu_);
    if (from >= starts_.size()) return {};
    return std::vector<int64_t>(starts_.begin() + ptrdiff_t(from), starts_.end());
  }
  std::string error() const {
    std::lock_guard lock(mu_);
    return error_;
  }

 private:
  struct Conn {
    UniqueFd client, upstream;
    enum State { kIdle, kRequest, kResponse } state = kIdle;
    ApiSpan open;
  };

  explicit TimingProxy(int upstream_port) : upstream_port_(upstream_port) {}

  static bool WriteAll(int fd, const char* data, size_t n) {
    while (n > 0) {
      const ssize_t w = write(fd, data, n);
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) return false;
      data += w;
      n -= size_t(w);
    }
    return true;
  }

  void Accept() {
    UniqueFd client(accept4(listen_.get(), nullptr, nullptr, SOCK_CLOEXEC));
    if (!client.valid()) return;
    UniqueFd upstream(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(uint16_t(upstream_port_));
    if (!upstream.valid() ||
        connect(upstream.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
      std::lock_guard lock(mu_);
      error_ = std::string("proxy: connecting to the API server: ") + std::strerror(errno);
      return;  // the plugin sees its connection closed
    }
    const int one = 1;
    setsockopt(client.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setsockopt(upstream.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    auto c = std::make_unique<Conn>();
    c->client = std::move(client);
    c->upstream = std::move(upstream);
    std::lock_guard lock(mu_);
    conns_.push_back(std::move(c));
  }

  // Closes connection `i` (under mu_), keeping its last request.
  void CloseLocked(size_t i) {
    Conn& c = *conns_[i];
    if (c.state != Conn::kIdle) done_.push_back(c.open);
    conns_.erase(conns_.begin() + std::ptrdiff_t(i));
  }

  void Loop() {
    std::vector<char> buf(256 * 1024);
    for (;;) {
      std::vector<pollfd> fds = {{listen_.get(), POLLIN, 0}, {wake_.get(), POLLIN, 0}};
      std::vector<Conn*> order;
      {
        std::lock_guard lock(mu_);
        for (const auto& c : conns_) {
          fds.push_back({c->client.get(), POLLIN, 0});
          fds.push_back({c->upstream.get(), POLLIN, 0});
          order.push_back(c.get());
        }
      }
      if (poll(fds.data(), fds.size(), -1) < 0) {
        if (errno == EINTR) continue;
        std::lock_guard lock(mu_);
        error_ = std::string("proxy: poll: ") + std::strerror(errno);
        return;
      }
      if (fds[1].revents != 0) return;
      if (fds[0].revents & POLLIN) Accept();
      std::vector<Conn*> dead;
      for (size_t k = 0; k < order.size(); ++k) {
        Conn* c = order[k];
        for (int side = 0; side < 2; ++side) {
          const pollfd& p = fds[2 + 2 * k + size_t(side)];
          if (p.revents == 0) continue;
          const int from = side == 0 ? c->client.get() : c->upstream.get();
          const int to = side == 0 ? c->upstream.get() : c->client.get();
          const ssize_t n = read(from, buf.data(), buf.size());
          if (n < 0 && errno == EINTR) continue;
          if (n <= 0) {
            dead.push_back(c);
            break;
          }
          if (side == 0) {
            const int64_t now = MonotonicNs();
            std::lock_guard lock(mu_);
            if (c->state != Conn::kRequest) {
              if (c->state == Conn::kResponse) done_.push_back(c->open);
              c->open = {now, now, ClassifyRequest(std::string_view(buf.data(), size_t(n)))};
              c->state = Conn::kRequest;
              if (!c->open.kind.empty()) {
                ++requests_;
                starts_.push_back(now);
              }
            }
          }
          const bool ok = WriteAll(to, buf.data(), size_t(n));
          if (side == 1) {
            const int64_t now = MonotonicNs();
            std::lock_guard lock(mu_);
            if (c->state != Conn::kIdle) {
              c->open.end_ns = now;
              c->state = Conn::kResponse;
            }
          }
          if (!ok) {
            dead.push_back(c);
            break;
          }
        }
      }
      std::lock_guard lock(mu_);
      for (Conn* d : dead) {
        for (size_t i = 0; i < conns_.size(); ++i) {
          if (conns_[i].get() == d) {
            CloseLocked(i);
            break;
          }
        }
      }
    }
  }

  const int upstream_port_;
  int port_ = 0;
  UniqueFd listen_, wake_;
  std::thread thread_;
  mutable std::mutex mu_;
  std::vector<std::unique_ptr<Conn>> conns_;  // guarded by mu_ (the fds used by the loop only)
  std::vector<ApiSpan> done_;
  uint64_t requests_ = 0;
  std::vector<int64_t> starts_;  // of each request counted in requests_
  std::string error_;
};

// What the proxy saw inside one RPC [from_ns, to_ns].
struct Window {
  int64_t api_ns = 0;       // the union of the requests' intervals, clipped to the RPC
  int requests = 0;         // requests begun (continuations not counted)
  int64_t max_idle_ns = 0;  // the longest stretch of the RPC with no request outstanding
  std::vector<ApiSpan> spans;
  // The plugin's own steps: each stretch with no request outstanding, named by the requests
  // around it ("start -> GET node", "LIST pods -> PATCH pod", "PATCH node -> end"), in order.
  std::vector<std::pair<std::string, int64_t>> steps;
};

Window Measure(const TimingProxy& proxy, int64_t from_ns, int64_t to_ns) {
  Window w;
  w.spans = proxy.Spans(from_ns, to_ns);
  // API time: the union of every request's interval; the longest stretch outside it.
  int64_t covered_to = from_ns;
  for (const ApiSpan& s : w.spans) {
    const int64_t a = std::max(s.start_ns, from_ns), b = std::min(s.end_ns, to_ns);
    if (a > covered_to) w.max_idle_ns = std::max(w.max_idle_ns, a - covered_to);
    if (b > covered_to) {
      w.api_ns += b - std::max(a, covered_to);
      covered_to = b;
    }
  }
  w.max_idle_ns = std::max(w.max_idle_ns, to_ns - covered_to);
  // The steps between requests (a continuation belongs to the request before it).
  int64_t previous_end = from_ns;
  std::string before = "start";
  for (const ApiSpan& s : w.spans) {
    const int64_t a = std::max(s.start_ns, from_ns), b = std::min(s.end_ns, to_ns);
    if (!s.kind.empty()) {
      ++w.requests;
      w.steps.emplace_back(before + " -> " + s.kind, std::max<int64_t>(0, a - previous_end));
      before = s.kind;
    }
    previous_end = std::max(previous_end, b);
  }
  w.steps.emplace_back(before + " -> end", std::max<int64_t>(0, to_ns - previous_end));
  return w;
}

// ---- the plugin's client rate limiter, modelled ------------------------------------------------

// hami-device-plugin's API client limits itself with a token bucket of `burst` refilled at
// `qps`. The benchmark keeps a copy of that bucket, taking one token at the start of each
// request the proxy saw, and waits before a paced pod until the copy holds as many tokens as
// the pod before it cost.
class BucketModel {
 public:
  BucketModel(double qps, double burst) : qps_(qps), burst_(burst), tokens_(burst) {}
  double TokensAt(int64_t t) const {
    return std::min(burst_, tokens_ + double(t - at_ns_) / 1e9 * qps_);
  }
  // Requests that begin in order; one a little before the last (the proxy's threads) counts
  // as at the last.
  void Take(double n, int64_t t) {
    t = std::max(t, at_ns_);
    tokens_ = TokensAt(t) - n;
    at_ns_ = t;
  }
  // When the bucket will hold `n` tokens (now or later).
  int64_t When(double n) const {
    if (tokens_ >= n) return at_ns_;
    return at_ns_ + int64_t(std::ceil((n - tokens_) / qps_ * 1e9));
  }

 private:
  double qps_, burst_, tokens_;
  int64_t at_ns_ = 0;
};

// ---- the run ---------------------------------------------------------------------------------

struct PodSample {
  int64_t prefer_ns = 0, prefer_api_ns = 0;
  int64_t allocate_ns = 0, allocate_api_ns = 0;
  int prefer_requests = 0, allocate_requests = 0;
  int64_t allocate_max_idle_ns = 0, prefer_max_idle_ns = 0;
  int64_t start_ns = 0;  // GetPreferredAllocation's start, from the run's start
};

struct PhaseFigures {
  int pods = 0;
  double seconds = 0;
  std::vector<PodSample> samples;
  std::map<std::string, std::vector<int64_t>> request_us;  // Allocate windows, by kind
  // The plugin's own steps (Window::steps) in the order first seen, in microseconds.
  std::vector<std::pair<std::string, std::vector<int64_t>>> allocate_steps_us, prefer_steps_us;
  int64_t cpu_ns = -1;  // the plugin's, over the phase
};

struct Figures {
  std::string skipped;
  std::string error;
  std::string plugin_log_tail;
  int replicas = 0;
  double start_s = 0;
  uint64_t startup_requests = 0;
  uint64_t total_requests = 0;   // every request the proxy saw, start to end
  uint64_t window_requests = 0;  // of which inside the timed RPCs
  PhaseFigures paced, burst;
  int prefer_off_gpu = 0;  // GetPreferredAllocation answers off the scheduler's GPU
  std::vector<int64_t> publish_us;
  int64_t rss_start = 0, hwm_start = 0, rss_end = 0, hwm_end = 0;
  int threads = 0;
  int container_entries = 0;  // under <hook>/vgpu/containers after the run, the plugin's own
};

void Fail(Figures* f, const std::string& phase, const std::string& why) {
  if (f->error.empty()) f->error = phase + ": " + why;
}

std::string Annotation(const json& obj, const std::string& key) {
  const json& ann = obj["metadata"].value("annotations", json::object());
  auto it = ann.find(key);
  return it == ann.end() || !it->is_string() ? std::string() : it->get<std::string>();
}

// "GPU-xxxx-3" -> "GPU-xxxx".
std::string GpuOf(const std::string& replica) { return replica.substr(0, replica.rfind('-')); }

// The last `lines` lines of the file at `path`.
std::string Tail(const std::string& path, size_t lines) {
  std::ifstream in(path);
  std::deque<std::string> last;
  for (std::string line; std::getline(in, line);) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const std::string& l : last) out += "  " + l + "\n";
  return out;
}

class Run {
 public:
  Run(const Options& o, Figures* f) : o_(o), f_(f) {}

  void All() {
    if (!Start()) return;
    f_->rss_start = StatusBytes(plugin_->pid(), "VmRSS");
    f_->hwm_start = StatusBytes(plugin_->pid(), "VmHWM");
    if (!Phase(o_.pods, /*paced=*/true, &f_->paced)) return;
    if (o_.burst > 0 && !Phase(o_.burst, /*paced=*/false, &f_->burst)) return;
    f_->rss_end = StatusBytes(plugin_->pid(), "VmRSS");
    f_->hwm_end = StatusBytes(plugin_->pid(), "VmHWM");
    f_->threads = Threads(plugin_->pid());
    f_->total_requests = proxy_->requests();
    f_->container_entries = CountContainerEntries();
    StopPlugin();
  }

  ~Run() {
    if (plugin_ != nullptr) {
      plugin_->Kill(SIGKILL);
      plugin_->Wait(10000);
    }
    kubelet_.reset();
    proxy_.reset();
    if (api_ != nullptr) api_->Stop();
  }

 private:
  std::string Build(const std::string& rel) const { return SelfDir() + "/../" + rel; }

  bool Start() {
    const int64_t t0 = MonotonicNs();
    // Every piece of the build the run needs, named with its target.
    const std::vector<std::pair<std::string, std::string>> needed = {
        {"bin/hami-device-plugin", "hami-device-plugin"},
        {"lib/libvgpu.so", "vgpu"},
        {"lib/sim/libnvidia-ml.so.1", "hami_sim_nvml"},
        {"lib/sim/libcuda.so.1", "hami_sim_cuda"}};
    for (const auto& [rel, target] : needed) {
      if (access(Build(rel).c_str(), R_OK) != 0) {
        Fail(f_, "start", Build(rel) + " is missing (build the target " + target + ")");
        return false;
      }
    }
    if (!dir_.ok()) {
      Fail(f_, "start", std::string("mkdtemp: ") + std::strerror(errno));
      return false;
    }
    auto api = sim::kube::ApiServer::Start({});
    if (!api.ok()) {
      Fail(f_, "api server", api.error().message());
      return false;
    }
    api_ = std::move(api).value();
    auto proxy = TimingProxy::Start(api_->port());
    if (!proxy.ok()) {
      Fail(f_, "proxy", proxy.error().message());
      return false;
    }
    proxy_ = std::move(proxy).value();
    // The plugin's kubeconfig names the proxy; the benchmark's own client goes straight to
    // the API server (unlimited), so that the proxy sees the plugin's requests only.
    const std::string kubeconfig = dir_.File("kubeconfig");
    const std::string text =
        "apiVersion: v1\nkind: Config\nclusters:\n- name: proxy\n  cluster:\n    server: "
        "http://127.0.0.1:" +
        std::to_string(proxy_->port()) +
        "\nusers:\n- name: proxy\n  user: {}\ncontexts:\n- name: proxy\n  context:\n"
        "    cluster: proxy\n    user: proxy\ncurrent-context: proxy\n";
    if (!WriteTextFile(kubeconfig, text, kProgram)) {
      Fail(f_, "start", "cannot write " + kubeconfig);
      return false;
    }
    kube::Config config;
    config.server = api_->url();
    config.source = "benchmark";
    kube::ClientOptions co;
    co.qps = 0;
    auto client = kube::Client::Create(config, co);
    if (!client.ok()) {
      Fail(f_, "client", client.error().message());
      return false;
    }
    client_ = std::move(client).value();
    if (auto r = api_->CreateObject(kube::kNodes, {{"metadata", {{"name", kNode}}}}); !r.ok()) {
      Fail(f_, "start", r.error().message());
      return false;
    }

    const std::string kubelet_dir = dir_.File("device-plugins");
    if (mkdir(kubelet_dir.c_str(), 0755) != 0) {
      Fail(f_, "start", "mkdir " + kubelet_dir + ": " + std::strerror(errno));
      return false;
    }
    sim::kubelet::KubeletOptions ko;
    ko.dir = kubelet_dir;
    kubelet_ = std::make_unique<sim::kubelet::Kubelet>(ko);
    if (Status s = kubelet_->Start(); !s.ok()) {
      Fail(f_, "kubelet", s.error().message());
      return false;
    }

    // The plugin logs one line per Allocate on stderr: to a file, so the table stays readable.
    log_path_ = dir_.File("plugin.log");
    const std::map<std::string, std::string> env = {{"HAMI_SIM_STATE", dir_.File("sim.state")},
                                                    {"HAMI_SIM_PROFILE", kProfile},
                                                    {"NODE_NAME", kNode},
                                                    {"LIBVGPU_HOSTPID_BROKER", ""},
                                                    {"KUBECONFIG", ""}};
    plugin_ = std::make_unique<testing::Subprocess>(
        std::vector<std::string>{"/bin/sh",
                                 "-c",
                                 "exec \"$@\" 2>\"$0\"",
                                 log_path_,
                                 Build("bin/hami-device-plugin"),
                                 "--kubeconfig",
                                 kubeconfig,
                                 "--kubelet-socket",
                                 kubelet_dir + "/kubelet.sock",
                                 "--hook-path",
                                 dir_.File("hook"),
                                 "--vgpu-library",
                                 Build("lib/libvgpu.so"),
                                 "--nvml-library",
                                 Build("lib/sim/libnvidia-ml.so.1"),
                                 "--cuda-library",
                                 Build("lib/sim/libcuda.so.1"),
                                 "--node-config-file",
                                 dir_.File("no-config.json"),
                                 "--broker-dir",
                                 dir_.File("hostpid"),
                                 "--kube-qps",
                                 std::to_string(kPluginQps),
                                 "--kube-burst",
                                 std::to_string(kPluginBurst)},
        env);
    if (!plugin_->WaitForLine("hami-device-plugin: serving", 60000)) {
      Fail(f_, "start", "hami-device-plugin did not start:\n" + Tail(log_path_, 20));
      return false;
    }
    if (!kubelet_->WaitForRegistrations(1, 30000) ||
        !kubelet_->WaitForDevicesMatching(
            kResource, [](const auto& devices) { return !devices.empty(); }, 30000)) {
      Fail(f_, "start",
           "the plugin did not register with the kubelet: " + kubelet_->last_rejection() + "\n" +
               Tail(log_path_, 20));
      return false;
    }
    for (const sim::kubelet::Device& d : kubelet_->Devices(kResource)) {
      if (!d.healthy()) continue;
      replicas_.push_back(d.id);
      if (std::find(gpus_.begin(), gpus_.end(), GpuOf(d.id)) == gpus_.end()) {
        gpus_.push_back(GpuOf(d.id));
      }
    }
    f_->replicas = int(replicas_.size());
    // The inventory annotation is the plugin's first API write; the run starts after it.
    // (Polled: the in-process store answers at once, and no event reaches this thread.)
    const bool published = testing::PollUntil(
        [&] {
          auto node = api_->GetObject(kube::kNodes, "", kNode);
          return node.ok() && !Annotation(*node, "hami.io/node-nvidia-register").empty();
        },
        30000, 2000);
    if (!published) {
      Fail(f_, "start", "the node's inventory was not published within 30 s");
      return false;
    }
    f_->start_s = double(MonotonicNs() - t0) / 1e9;
    f_->startup_requests = proxy_->requests();
    run_start_ns_ = MonotonicNs();
    bucket_ = std::make_unique<BucketModel>(kPluginQps, kPluginBurst);
    AccountRequests();
    return true;
  }

  // Creates pod `name` as hami-scheduler leaves it after its bind, on `gpu`, and locks the
  // node for it. Returns its UID.
  Result<std::string> CreateScheduledPod(const std::string& name, const std::string& gpu) {
    const std::string devices =
        gpu + ",NVIDIA," + std::to_string(kPodMemMiB) + "," + std::to_string(kPodCores) + ":;";
    const json pod = {{"metadata",
                       {{"name", name},
                        {"namespace", "default"},
                        {"annotations",
                         {{"hami.io/bind-phase", "allocating"},
                          {"hami.io/bind-time",
                           std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                              std::chrono::system_clock::now().time_since_epoch())
                                              .count())},
                          {"hami.io/vgpu-node", kNode},
                          {"hami.io/vgpu-devices-to-allocate", devices},
                          {"hami.io/vgpu-devices-allocated", devices}}}}},
                      {"spec",
                       {{"nodeName", kNode},
                        {"containers",
                         {{{"name", "main"},
                           {"image", "cuda"},
                           {"resources", {{"limits", {{kResource, "1"}}}}}}}}}}};
    json created = HAMI_TRY(api_->CreateObject(kube::kPods, pod));
    const std::string lock =
        HAMI_TRY(kube::EncodeNodeLock({std::chrono::system_clock::now(), "default", name}));
    auto locked = client_->Patch(kube::kNodes, "", kNode, kube::PatchType::kMerge,
                                 {{"metadata", {{"annotations", {{"hami.io/mutex.lock", lock}}}}}});
    if (!locked.ok()) return std::move(locked).error();
    return std::string(kube::MetadataString(created, "uid"));
  }

  // One pod: make room, create it, GetPreferredAllocation and Allocate (timed), check.
  bool OnePod(PhaseFigures* phase, bool paced) {
    const int i = next_pod_++;
    if (live_.size() >= replicas_.size()) {
      const auto& [old_name, old_replica] = live_.front();
      if (Status s = api_->DeleteObject(kube::kPods, "default", old_name); !s.ok()) {
        Fail(f_, "pods", s.error().message());
        return false;
      }
      in_use_.erase(old_replica);
      live_.pop_front();
    }
    const std::string name = "bench-" + std::to_string(i);
    const std::string& gpu = gpus_[size_t(i) % gpus_.size()];
    auto uid = CreateScheduledPod(name, gpu);
    if (!uid.ok()) {
      Fail(f_, "pods", "creating " + name + ": " + uid.error().message());
      return false;
    }
    std::vector<std::string> available;
    for (const std::string& r : replicas_) {
      if (!in_use_.count(r)) available.push_back(r);
    }
    // What a pod costs: every request the plugin began from one pod's start to the next's,
    // those it sends after answering included.
    const uint64_t requests_now = proxy_->requests();
    if (pod_start_requests_ > 0) last_pod_requests_ = requests_now - pod_start_requests_;
    pod_start_requests_ = requests_now;
    if (paced) {
      const double need = double(std::max<uint64_t>(last_pod_requests_, 1)) + 0.25;
      for (;;) {
        AccountRequests();
        const int64_t at = bucket_->When(need);
        if (at <= MonotonicNs()) break;
        SleepUntilNs(at);
      }
    }

    PodSample s;
    sim::kubelet::PreferredRequest pr;
    pr.available_device_ids = available;
    pr.allocation_size = 1;
    const int64_t t0 = MonotonicNs();
    auto preferred = kubelet_->GetPreferredAllocation(kResource, {pr});
    const int64_t t1 = MonotonicNs();
    if (!preferred.ok() || preferred->size() != 1 || (*preferred)[0].size() != 1) {
      Fail(f_, "pods",
           "GetPreferredAllocation for " + name + ": " +
               (preferred.ok() ? std::string("not one replica") : preferred.error().message()));
      return false;
    }
    const std::string replica = (*preferred)[0][0];
    if (GpuOf(replica) != gpu) ++f_->prefer_off_gpu;
    const int64_t t2 = MonotonicNs();
    auto allocated = kubelet_->Allocate(kResource, {{replica}});
    const int64_t t3 = MonotonicNs();
    if (!allocated.ok()) {
      Fail(f_, "pods", "Allocate for " + name + ": " + allocated.error().message());
      return false;
    }
    in_use_.insert(replica);
    live_.emplace_back(name, replica);

    const Window wp = Measure(*proxy_, t0, t1);
    const Window wa = Measure(*proxy_, t2, t3);
    s.prefer_ns = t1 - t0;
    s.prefer_api_ns = wp.api_ns;
    s.prefer_requests = wp.requests;
    s.allocate_ns = t3 - t2;
    s.allocate_api_ns = wa.api_ns;
    s.allocate_requests = wa.requests;
    s.allocate_max_idle_ns = wa.max_idle_ns;
    s.prefer_max_idle_ns = wp.max_idle_ns;
    s.start_ns = t0 - run_start_ns_;
    f_->window_requests += uint64_t(wp.requests + wa.requests);
    phase->samples.push_back(s);
    auto add_steps = [](const Window& w, auto* into) {
      for (const auto& [label, ns] : w.steps) {
        auto it = std::find_if(into->begin(), into->end(),
                               [&](const auto& entry) { return entry.first == label; });
        if (it == into->end()) it = into->insert(into->end(), {label, {}});
        it->second.push_back(ns / 1000);
      }
    };
    add_steps(wa, &phase->allocate_steps_us);
    add_steps(wp, &phase->prefer_steps_us);
    for (const ApiSpan& span : wa.spans) {
      if (!span.kind.empty())
        phase->request_us[span.kind].push_back((span.end_ns - span.start_ns) / 1000);
    }

    // The answer and the handshake's end.
    const auto& envs = (*allocated)[0].envs;
    auto limit = envs.find("CUDA_DEVICE_MEMORY_LIMIT_0");
    if (allocated->size() != 1 || limit == envs.end() ||
        limit->second != std::to_string(kPodMemMiB) + "m") {
      Fail(f_, "pods", "Allocate for " + name + " did not answer the pod's 3000 MiB limit");
      return false;
    }
    auto pod = api_->GetObject(kube::kPods, "default", name);
    auto node = api_->GetObject(kube::kNodes, "", kNode);
    if (!pod.ok() || Annotation(*pod, "hami.io/bind-phase") != "success") {
      Fail(f_, "pods", name + ": bind-phase is not success after Allocate");
      return false;
    }
    if (!node.ok() || !Annotation(*node, "hami.io/mutex.lock").empty()) {
      Fail(f_, "pods", name + ": the node lock was not released");
      return false;
    }
    return !paced || MeasurePublish(envs);
  }

  bool Phase(int pods, bool paced, PhaseFigures* phase) {
    phase->pods = pods;
    const int64_t cpu0 = CpuNs(plugin_->pid());
    const int64_t t0 = MonotonicNs();
    for (int n = 0; n < pods; ++n) {
      if (!OnePod(phase, paced)) {
        f_->plugin_log_tail = Tail(log_path_, 20);
        return false;
      }
    }
    phase->seconds = double(MonotonicNs() - t0) / 1e9;
    const int64_t cpu1 = CpuNs(plugin_->pid());
    if (cpu0 >= 0 && cpu1 >= 0) phase->cpu_ns = cpu1 - cpu0;
    if (std::string e = proxy_->error(); !e.empty()) {
      Fail(f_, "proxy", e);
      return false;
    }
    return true;
  }

  // PublishLimitsFile as the plugin calls it, beside the plugin's limits files (the same
  // filesystem), with the entries of the pod's answer. False on a failure.
  bool MeasurePublish(const std::map<std::string, std::string>& envs) {
    std::vector<limits::Entry> entries;
    for (const auto& [k, v] : envs) {
      if (k != "NVIDIA_VISIBLE_DEVICES") entries.emplace_back(k, v);
    }
    // A new file each time, kept, as the plugin's are (one per container).
    const std::string path = dir_.File("hook/vgpu/containers/bench-publish-" +
                                       std::to_string(f_->publish_us.size()) + "_main.limits");
    const int64_t t0 = MonotonicNs();
    Status s = limits::PublishLimitsFile(path, entries);
    const int64_t t1 = MonotonicNs();
    if (!s.ok()) {
      Fail(f_, "publish", s.error().message());
      return false;
    }
    f_->publish_us.push_back((t1 - t0) / 1000);
    return true;
  }

  // The plugin's entries under <hook>/vgpu/containers (directories and limits files), not the
  // benchmark's own publish-* files.
  int CountContainerEntries() const {
    int n = 0;
    std::error_code ec;
    for (const auto& e :
         std::filesystem::directory_iterator(dir_.File("hook/vgpu/containers"), ec)) {
      if (e.path().filename().string().rfind("bench-publish-", 0) != 0) ++n;
    }
    return n;
  }

  void StopPlugin() {
    plugin_->Kill(SIGTERM);
    const int code = plugin_->Wait(20000);
    if (code != 0) {
      Fail(f_, "stop",
           "hami-device-plugin exited " + std::to_string(code) + " on SIGTERM\n" +
               Tail(log_path_, 20));
    }
    plugin_.reset();
  }

  const Options& o_;
  Figures* f_;
  TempDir dir_{"hami-bench-plugin"};
  std::unique_ptr<sim::kube::ApiServer> api_;
  std::unique_ptr<TimingProxy> proxy_;
  std::unique_ptr<kube::Client> client_;
  std::unique_ptr<sim::kubelet::Kubelet> kubelet_;
  std::unique_ptr<testing::Subprocess> plugin_;
  std::unique_ptr<BucketModel> bucket_;
  std::string log_path_;
  std::vector<std::string> replicas_, gpus_;
  std::set<std::string> in_use_;
  std::deque<std::pair<std::string, std::string>> live_;  // pod name, replica; oldest first
  int next_pod_ = 0;
  int64_t run_start_ns_ = 0;
  // Feeds the bucket model every request the proxy saw since the last call.
  void AccountRequests() {
    for (int64_t t : proxy_->StartsFrom(accounted_requests_)) {
      bucket_->Take(1, t);
      ++accounted_requests_;
    }
  }
  uint64_t accounted_requests_ = 0;
  uint64_t pod_start_requests_ = 0;  // the proxy's count when the last pod began
  uint64_t last_pod_requests_ = 7;   // GetPreferredAllocation 2 + Allocate 5, until measured
};

// Percentiles of one field of the samples, in microseconds.
template <typename F>
Percentiles SampleUs(const std::vector<PodSample>& samples, F field) {
  std::vector<int64_t> v;
  for (const PodSample& s : samples) v.push_back(field(s) / 1000);
  return NearestRank(v);
}

struct PhaseStats {
  Percentiles allocate, allocate_api, allocate_own, prefer, prefer_api, prefer_own, max_idle;
  double allocate_requests = 0, prefer_requests = 0;
};

PhaseStats Stats(const PhaseFigures& p) {
  PhaseStats st;
  const auto& s = p.samples;
  st.allocate = SampleUs(s, [](const PodSample& x) { return x.allocate_ns; });
  st.allocate_api = SampleUs(s, [](const PodSample& x) { return x.allocate_api_ns; });
  st.allocate_own =
      SampleUs(s, [](const PodSample& x) { return x.allocate_ns - x.allocate_api_ns; });
  st.prefer = SampleUs(s, [](const PodSample& x) { return x.prefer_ns; });
  st.prefer_api = SampleUs(s, [](const PodSample& x) { return x.prefer_api_ns; });
  st.prefer_own = SampleUs(s, [](const PodSample& x) { return x.prefer_ns - x.prefer_api_ns; });
  st.max_idle = SampleUs(s, [](const PodSample& x) { return x.allocate_max_idle_ns; });
  for (const PodSample& x : s) {
    st.allocate_requests += x.allocate_requests;
    st.prefer_requests += x.prefer_requests;
  }
  if (!s.empty()) {
    st.allocate_requests /= double(s.size());
    st.prefer_requests /= double(s.size());
  }
  return st;
}

// What the plugin does in one of its steps (Window::steps), as allocator.cc orders them.
std::string StepMeaning(const std::string& step) {
  if (step.rfind("start -> ", 0) == 0) return "gRPC in (and any wait of the client's rate limiter)";
  if (step == "LIST pods -> PATCH pod") return "decide; lock dir, container dir, limits file";
  if (step == "LIST pods -> end") return "decide; gRPC out";
  if (step.size() > 7 && step.compare(step.size() - 7, 7, " -> end") == 0) return "gRPC out";
  return "";
}

std::string MsOf(int64_t us) { return Fixed(double(us) / 1000, 2) + " ms"; }
std::string Triple(const Percentiles& p) {
  return MsOf(p.p50) + " / " + MsOf(p.p99) + " / " + MsOf(p.max);
}
double MiB(int64_t bytes) { return double(bytes) / 1048576.0; }

Json PhaseJson(const PhaseFigures& p, const PhaseStats& st) {
  Json requests = Json::array();
  for (const auto& [kind, us] : p.request_us) {
    const double per_call =
        p.samples.empty() ? 0.0
                          : static_cast<double>(us.size()) / static_cast<double>(p.samples.size());
    requests.push_back(
        {{"kind", kind}, {"per_call", per_call}, {"latency_us", ToJson(NearestRank(us))}});
  }
  auto steps = [](const auto& list) {
    Json out = Json::array();
    for (const auto& [label, us] : list) {
      out.push_back({{"step", label}, {"latency_us", ToJson(NearestRank(us))}});
    }
    return out;
  };
  Json each = {{"start_ms", Json::array()},      {"prefer_us", Json::array()},
               {"prefer_api_us", Json::array()}, {"prefer_longest_idle_us", Json::array()},
               {"allocate_us", Json::array()},   {"allocate_api_us", Json::array()}};
  for (const PodSample& x : p.samples) {
    each["start_ms"].push_back(x.start_ns / 1'000'000);
    each["prefer_us"].push_back(x.prefer_ns / 1000);
    each["prefer_longest_idle_us"].push_back(x.prefer_max_idle_ns / 1000);
    each["prefer_api_us"].push_back(x.prefer_api_ns / 1000);
    each["allocate_us"].push_back(x.allocate_ns / 1000);
    each["allocate_api_us"].push_back(x.allocate_api_ns / 1000);
  }
  return {{"pods", p.pods},
          {"seconds", p.seconds},
          {"pods_per_s", p.seconds > 0 ? p.pods / p.seconds : 0.0},
          {"allocate",
           {{"latency_us", ToJson(st.allocate)},
            {"api_us", ToJson(st.allocate_api)},
            {"own_us", ToJson(st.allocate_own)},
            {"requests_per_call", st.allocate_requests},
            {"longest_idle_us", ToJson(st.max_idle)},
            {"own_steps", steps(p.allocate_steps_us)}}},
          {"prefer",
           {{"latency_us", ToJson(st.prefer)},
            {"api_us", ToJson(st.prefer_api)},
            {"own_us", ToJson(st.prefer_own)},
            {"requests_per_call", st.prefer_requests},
            {"own_steps", steps(p.prefer_steps_us)}}},
          {"allocate_requests", requests},
          {"plugin_cpu_ms_per_pod",
           p.cpu_ns >= 0 && p.pods > 0 ? double(p.cpu_ns) / 1e6 / p.pods : -1.0},
          {"per_pod", each}};
}

int Main(const Options& o) {
  const double load_before = LoadAverage();
  Figures f;
  if (geteuid() != 0) {
    f.skipped =
        "needs root: the plugin prepares the root-owned /tmp/vgpulock (01777) before it answers "
        "Allocate, which fails for another user; running as uid " +
        std::to_string(geteuid());
  }
  std::printf(
      "device plugin: %s (%s), %d pods paced to its API client's rate limit, then %d "
      "back to back\n",
      kProfile, "deviceSplitCount 10", o.pods, o.burst);
  std::fflush(stdout);
  if (f.skipped.empty()) {
    Run run(o, &f);
    run.All();
  }
  const bool ran = f.error.empty() && f.skipped.empty();
  const double load_after = LoadAverage();
  std::printf("machine: %d CPUs, load average %.2f before, %.2f after\n", CpuCount(), load_before,
              load_after);
  const PhaseStats paced = Stats(f.paced), burst = Stats(f.burst);

  if (!f.skipped.empty()) {
    std::printf("\nskipped: %s\n", f.skipped.c_str());
  } else {
    std::vector<std::vector<std::string>> rows = {
        {"figure", "p50 / p99 / max", "detail"},
        {"Allocate RPC", Triple(paced.allocate),
         std::to_string(f.paced.samples.size()) + " pods, paced"},
        {"  API requests in it", Triple(paced.allocate_api),
         Fixed(paced.allocate_requests, 1) + " requests per call (union of their times)"},
    };
    for (const auto& [kind, us] : f.paced.request_us) {
      rows.push_back(
          {"    " + kind, Triple(NearestRank(us)),
           Fixed(double(us.size()) / double(std::max<size_t>(1, f.paced.samples.size())), 1) +
               " per call"});
    }
    auto add_steps = [&](const auto& list) {
      for (const auto& [label, us] : list) {
        rows.push_back({"    " + label, Triple(NearestRank(us)), StepMeaning(label)});
      }
    };
    rows.push_back(
        {"  the plugin's own work", Triple(paced.allocate_own), "RPC less its API time"});
    add_steps(f.paced.allocate_steps_us);
    rows.push_back({"GetPreferredAllocation RPC", Triple(paced.prefer),
                    Fixed(paced.prefer_requests, 1) + " requests per call"});
    rows.push_back({"  the plugin's own work", Triple(paced.prefer_own), "RPC less its API time"});
    add_steps(f.paced.prefer_steps_us);
    rows.push_back({"limits file publish", Triple(NearestRank(f.publish_us)),
                    "write, 2 fsyncs, rename, after each paced pod, same filesystem"});
    if (!f.burst.samples.empty()) {
      rows.push_back({"Allocate RPC, back to back", Triple(burst.allocate),
                      std::to_string(f.burst.samples.size()) + " pods, " +
                          Fixed(f.burst.seconds > 0 ? f.burst.pods / f.burst.seconds : 0, 2) +
                          " pods/s"});
      rows.push_back({"  API requests in it", Triple(burst.allocate_api), ""});
      rows.push_back({"  the rest (own work + client throttling)", Triple(burst.allocate_own),
                      "longest stretch without a request: p50 " + MsOf(burst.max_idle.p50)});
    }
    std::printf("\n");
    PrintTable(rows, 1, 2, TrailingSpaces::kTrim);
    std::vector<std::vector<std::string>> other = {
        {"figure", "value", "detail"},
        {"start to ready", Fixed(f.start_s, 2) + " s",
         std::to_string(f.replicas) +
             " replicas; API requests: " + std::to_string(f.startup_requests)},
        {"paced phase", Fixed(f.paced.seconds, 1) + " s",
         Fixed(f.paced.seconds > 0 ? f.paced.pods / f.paced.seconds : 0, 2) + " pods/s"},
        {"plugin CPU per pod",
         f.paced.cpu_ns >= 0 && f.paced.pods > 0
             ? Fixed(double(f.paced.cpu_ns) / 1e6 / f.paced.pods, 2) + " ms"
             : std::string("?"),
         "its threads' run time over the paced phase"},
        {"plugin RSS after start", Fixed(MiB(f.rss_start), 1) + " MiB",
         "peak " + Fixed(MiB(f.hwm_start), 1) + " MiB"},
        {"plugin RSS after the run", Fixed(MiB(f.rss_end), 1) + " MiB",
         "peak (VmHWM) " + Fixed(MiB(f.hwm_end), 1) + " MiB, " + std::to_string(f.threads) +
             " threads"},
        {"preferred replica off the scheduler's GPU", std::to_string(f.prefer_off_gpu), ""},
        {"entries left in <hook>/vgpu/containers", std::to_string(f.container_entries),
         "directories and limits files, after " +
             std::to_string(f.paced.samples.size() + f.burst.samples.size()) + " pods"},
    };
    std::printf("\n");
    PrintTable(other, 1, 2, TrailingSpaces::kTrim);
  }

  const bool full = o.pods == kGoalPods;
  const std::string cond = std::to_string(kGoalPods) + " pods";
  std::vector<Goal> goals = {
      AtMost("Allocate p99, the plugin's own work", double(paced.allocate_own.p99) / 1000, "ms",
             kGoalOwnP99Ms, ran, cond, full),
      AtMost("GetPreferredAllocation RPC p99", double(paced.prefer.p99) / 1000, "ms",
             kGoalPreferP99Ms, ran, cond, full),
      AtMost("plugin peak RSS (VmHWM)", MiB(f.hwm_end), "MiB", kGoalPeakRssMiB, ran),
  };
  std::vector<Row> goal_rows;
  for (const Goal& g : goals) {
    goal_rows.push_back(
        {g.name, Fixed(g.measured.get<double>(), 2) + " " + g.unit, g.goal, MeetsText(g)});
  }
  std::printf("\n");
  PrintTable(goal_rows);
  if (!f.error.empty()) {
    std::printf("\nfailed: %s\n", f.error.c_str());
    if (!f.plugin_log_tail.empty()) std::printf("plugin log:\n%s", f.plugin_log_tail.c_str());
  }

  Json goals_json = Json::array();
  for (const Goal& g : goals) goals_json.push_back(ToJson(g));
  const Json doc = {
      {"benchmark", "plugin"},
      {"config",
       {{"quick", o.quick},
        {"pods", o.pods},
        {"burst", o.burst},
        {"profile", kProfile},
        {"replicas", f.replicas},
        {"pod_memory_mib", kPodMemMiB},
        {"pod_cores", kPodCores},
        {"plugin_client_qps", kPluginQps},
        {"plugin_client_burst", kPluginBurst}}},
      {"machine",
       {{"cpus", CpuCount()},
        {"load_before", load_before},
        {"load_after", load_after},
        {"euid", geteuid()}}},
      {"skipped", f.skipped},
      {"error", f.error},
      {"start", {{"ready_seconds", f.start_s}, {"api_requests", f.startup_requests}}},
      {"api_requests",
       {{"total", f.total_requests},
        {"in_timed_rpcs", f.window_requests},
        {"at_start", f.startup_requests}}},
      {"paced", PhaseJson(f.paced, paced)},
      {"back_to_back", PhaseJson(f.burst, burst)},
      {"prefer_off_gpu", f.prefer_off_gpu},
      {"limits_publish", {{"latency_us", ToJson(NearestRank(f.publish_us))}}},
      {"memory",
       {{"rss_bytes_after_start", f.rss_start},
        {"peak_rss_bytes_after_start", f.hwm_start},
        {"rss_bytes", f.rss_end},
        {"peak_rss_bytes", f.hwm_end},
        {"threads", f.threads}}},
      {"hook_container_entries", f.container_entries},
      {"goals", goals_json},
  };
  const std::string json_path = o.json_path.empty() ? SelfDir() + "/plugin.json" : o.json_path;
  if (!WriteJson(json_path, doc, kProgram)) return 1;
  std::printf("\njson: %s\n", json_path.c_str());
  return f.error.empty() ? 0 : 1;
}

std::optional<Options> ParseFlags(int argc, char** argv) {
  Options o;
  bool pods_set = false, burst_set = false;
  FlagReader flags(argc, argv, kProgram, kUsage, &o);
  while (flags.Next()) {
    const std::string_view flag = flags.flag();
    std::string_view value;
    int* target = nullptr;
    bool* set = nullptr;
    uint64_t min = 1, max = 10'000;
    if (flag == "--pods") {
      target = &o.pods, set = &pods_set;
    } else if (flag == "--burst") {
      target = &o.burst, set = &burst_set, min = 0, max = 1'000;
    } else {
      flags.PrintUnknown();
      return std::nullopt;
    }
    if (!flags.TakeValue(&value)) return std::nullopt;
    auto n = ParseUint64(value, flag);
    if (!n.ok()) {
      std::fprintf(stderr, "%s: %s\n", kProgram, n.error().message().c_str());
      return std::nullopt;
    }
    if (*n < min || *n > max) {
      std::fprintf(stderr, "%s: %.*s %" PRIu64 " is not from %" PRIu64 " to %" PRIu64 "\n",
                   kProgram, int(flag.size()), flag.data(), *n, min, max);
      return std::nullopt;
    }
    *target = int(*n);
    *set = true;
  }
  if (flags.failed()) return std::nullopt;
  if (o.quick) {
    if (!pods_set) o.pods = 20;
    if (!burst_set) o.burst = 5;
  }
  return o;
}

}  // namespace
}  // namespace hami::bench

int main(int argc, char** argv) {
  return hami::bench::BenchmarkMain(argc, argv, hami::bench::ParseFlags, hami::bench::Main);
}
