// hami broker: runs the host-PID broker (serve), or asks one for this process's PID exactly as
// libvgpu.so would (query). docs/broker.md.
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/signalfd.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "broker/client.h"
#include "broker/server.h"
#include "cli/commands.h"
#include "common/clock.h"
#include "common/parse.h"
#include "common/unique_fd.h"

namespace hami::cli {

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitUsage = 2;

struct ServeOptions {
  std::string socket = broker::kDefaultSocketPath;
  std::string max_active = "512";
  std::string max_per_uid = "0";  // 0: a quarter of max_active
  std::string timeout_ms = "1000";
  std::string report_every = "60";  // seconds; 0: only at exit
};

struct QueryOptions {
  std::string socket = broker::kClientSocketPath;
  std::string trusted_uid = "0";
  bool allow_writable_mount = false;
  std::string timeout_ms = std::to_string(broker::kClientTimeoutNs / 1'000'000);
};

// A key=value value: as is when it has no space, quote, backslash or '=', else quoted.
std::string Value(const std::string& v) {
  if (!v.empty() && v.find_first_of(" \t\"\\=") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out + "\"";
}

// One structured line on stdout, flushed at once.
void Log(const std::string& fields) {
  std::printf("broker %s\n", fields.c_str());
  std::fflush(stdout);
}

// Parses `text` as an integer from `min` to `max` for the option `flag`.
Result<uint64_t> ParseRange(const std::string& text, const char* flag, uint64_t min, uint64_t max) {
  auto n = ParseUint64(text, flag);
  if (!n.ok()) return std::move(n).error();
  if (*n < min || *n > max) {
    return Error(ErrorCode::kInvalidArgument, std::string(flag) + " " + text + ": not from " +
                                                  std::to_string(min) + " to " +
                                                  std::to_string(max));
  }
  return *n;
}

int Usage(const char* command, const Error& e) {
  std::fprintf(stderr, "hami broker %s: %s\n", command, e.message().c_str());
  return kExitUsage;
}

int Serve(const ServeOptions& o) {
  auto max_active = ParseRange(o.max_active, "--max-active", 1, 65536);
  if (!max_active.ok()) return Usage("serve", max_active.error());
  auto max_per_uid = ParseRange(o.max_per_uid, "--max-per-uid", 0, *max_active);
  if (!max_per_uid.ok()) return Usage("serve", max_per_uid.error());
  auto timeout_ms = ParseRange(o.timeout_ms, "--timeout-ms", 1, 3'600'000);
  if (!timeout_ms.ok()) return Usage("serve", timeout_ms.error());
  auto report_s = ParseRange(o.report_every, "--report-every", 0, 86'400);
  if (!report_s.ok()) return Usage("serve", report_s.error());

  // SIGINT and SIGTERM are blocked before the serving thread starts (it inherits the mask)
  // and read from a signalfd: no handler ever runs.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  if (int err = pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr); err != 0) {
    std::fprintf(stderr, "hami broker serve: pthread_sigmask: %s\n", std::strerror(err));
    return kExitFailed;
  }
  UniqueFd signals(signalfd(-1, &stop_signals, SFD_CLOEXEC));
  if (!signals.valid()) {
    std::fprintf(stderr, "hami broker serve: signalfd: %s\n", std::strerror(errno));
    return kExitFailed;
  }

  broker::ServerOptions so;
  so.socket_path = o.socket;
  so.max_active = int(*max_active);
  so.max_per_uid = int(*max_per_uid);
  so.transaction_timeout_ns = int64_t(*timeout_ms) * 1'000'000;
  auto started = broker::Server::Start(so);
  if (!started.ok()) {
    std::fprintf(stderr, "hami broker serve: %s\n", started.error().message().c_str());
    return kExitFailed;
  }
  std::unique_ptr<broker::Server> server = std::move(started).value();
  Log("event=start socket=" + Value(server->path()) + " lock=" + Value(server->lock_path()) +
      " max_active=" + std::to_string(*max_active) +
      " max_per_uid=" + std::to_string(server->max_per_uid()) +
      " timeout_ms=" + std::to_string(*timeout_ms) + " pid=" + std::to_string(getpid()));

  const int64_t report_ns = int64_t(*report_s) * 1'000'000'000;
  int64_t next_report_ns = MonotonicNs() + report_ns;
  for (;;) {
    int timeout = -1;
    if (report_ns > 0) {
      const int64_t left_ns = next_report_ns - MonotonicNs();
      timeout = left_ns <= 0 ? 0 : int((left_ns + 999'999) / 1'000'000);
    }
    pollfd fds[2] = {{signals.get(), POLLIN, 0}, {server->done_fd(), POLLIN, 0}};
    const int n = poll(fds, 2, timeout);
    if (n < 0 && errno != EINTR) {
      std::fprintf(stderr, "hami broker serve: poll: %s\n", std::strerror(errno));
      server->Stop();
      return kExitFailed;
    }
    if (n > 0 && (fds[0].revents & POLLIN) != 0) {
      signalfd_siginfo info{};
      const ssize_t got = read(signals.get(), &info, sizeof(info));
      const int sig = got == ssize_t(sizeof(info)) ? int(info.ssi_signo) : SIGTERM;
      server->Stop();
      Log(std::string("event=stop signal=") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " " +
          server->Counters().ToKeyValues());
      return 0;
    }
    if (n > 0 && (fds[1].revents & POLLIN) != 0) {
      const Status status = server->Wait();
      server->Stop();
      const std::string message = status.ok() ? "serving ended" : status.error().message();
      Log("event=failed error=" + Value(message) + " " + server->Counters().ToKeyValues());
      std::fprintf(stderr, "hami broker serve: %s\n", message.c_str());
      return kExitFailed;
    }
    if (report_ns > 0 && MonotonicNs() >= next_report_ns) {
      Log("event=counters " + server->Counters().ToKeyValues());
      next_report_ns += report_ns;
    }
  }
}

int Query(const QueryOptions& o) {
  auto uid = ParseRange(o.trusted_uid, "--trusted-uid", 0, 0xFFFFFFFEu);
  if (!uid.ok()) return Usage("query", uid.error());
  auto timeout_ms = ParseRange(o.timeout_ms, "--timeout-ms", 1, 3'600'000);
  if (!timeout_ms.ok()) return Usage("query", timeout_ms.error());
  broker::ClientOptions co;
  co.socket_path = o.socket.c_str();
  co.trusted_uid = uid_t(*uid);
  co.require_read_only_mount = !o.allow_writable_mount;
  co.timeout_ns = int64_t(*timeout_ms) * 1'000'000;
  const broker::ClientResult r = broker::QueryHostPid(co);
  if (r.failure == broker::ClientFailure::kNone) {
    std::printf("host_pid=%d\n", int(r.pid));
    return 0;
  }
  std::printf("failure=%s errno=%d frame_error=%s\n", broker::ClientFailureName(r.failure),
              r.sys_errno, broker::FrameErrorName(r.frame_error));
  std::fprintf(stderr, "hami broker query: no PID from %s: %s%s%s\n", o.socket.c_str(),
               broker::ClientFailureName(r.failure), r.sys_errno != 0 ? ": " : "",
               r.sys_errno != 0 ? std::strerror(r.sys_errno) : "");
  return kExitFailed;
}

}  // namespace

void AddBrokerCommand(CLI::App& app) {
  static ServeOptions serve_options;
  static QueryOptions query_options;
  CLI::App* broker = app.add_subcommand(
      "broker", "The host-PID broker: tells each connecting process its own host PID");
  broker->require_subcommand(1);

  CLI::App* serve = broker->add_subcommand(
      "serve",
      "Serve the broker until SIGINT or SIGTERM, logging key=value lines on stdout (start, "
      "counters every --report-every seconds, stop).\n"
      "The socket's directory is made 0711, a lock file beside the socket keeps a second "
      "broker out, and the socket is removed at exit (docs/broker.md).\n"
      "Exit status: 0 stopped by a signal; 1 could not start, or serving failed; 2 bad "
      "arguments.");
  serve
      ->add_option("--socket", serve_options.socket,
                   std::string("the socket path (default ") + broker::kDefaultSocketPath +
                       ", which needs root)")
      ->type_name("PATH");
  serve
      ->add_option("--max-active", serve_options.max_active,
                   "connections waiting for their request at once; a newer one takes the "
                   "oldest one's place (default 512)")
      ->type_name("N");
  serve
      ->add_option("--max-per-uid", serve_options.max_per_uid,
                   "of those, at most N of one peer UID, 1 to --max-active; a newer one takes "
                   "its UID's oldest one's place (default 0: a quarter of --max-active)")
      ->type_name("N");
  serve
      ->add_option("--timeout-ms", serve_options.timeout_ms,
                   "one transaction's deadline, from accept (default 1000)")
      ->type_name("MS");
  serve
      ->add_option("--report-every", serve_options.report_every,
                   "seconds between counter lines; 0: only at exit (default 60)")
      ->type_name("SECONDS");
  serve->callback([] { std::exit(Serve(serve_options)); });

  CLI::App* query = broker->add_subcommand(
      "query",
      "Ask a broker for this process's PID with libvgpu.so's checks, and print host_pid=N or "
      "failure=NAME.\n"
      "Exit status: 0 a PID was trusted; 1 none was; 2 bad arguments.");
  query
      ->add_option("--socket", query_options.socket,
                   std::string("the socket path (default ") + broker::kClientSocketPath +
                       ", the workload's view)")
      ->type_name("PATH");
  query
      ->add_option("--trusted-uid", query_options.trusted_uid,
                   "the UID that must own the directory and socket and be the peer (default 0)")
      ->type_name("UID");
  query->add_flag("--allow-writable-mount", query_options.allow_writable_mount,
                  "do not require the directory's mount to be read-only");
  query
      ->add_option("--timeout-ms", query_options.timeout_ms,
                   "the whole transaction's deadline (default 500)")
      ->type_name("MS");
  query->callback([] { std::exit(Query(query_options)); });
}

}  // namespace hami::cli
