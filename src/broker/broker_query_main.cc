// hami_broker_query: a test helper that asks a broker for its own PID, as libvgpu.so would,
// and prints what it learned on one line:
//   pid=<getpid()> host_pid=<answer>                    (exit 0)
//   pid=<getpid()> failure=<name> errno=<n> frame_error=<name>   (exit 1)
// With --hold it then waits for its stdin to close before exiting, so a test can inspect the
// process (e.g. find its PID from outside a PID namespace) while it is still alive.
//
// usage: hami_broker_query --socket PATH [--trusted-uid N] [--allow-writable-mount] [--hold]
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "broker/client.h"

int main(int argc, char** argv) {
  hami::broker::ClientOptions o;
  bool hold = false;
  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--socket" && i + 1 < argc) {
      o.socket_path = argv[++i];
    } else if (arg == "--trusted-uid" && i + 1 < argc) {
      o.trusted_uid = uid_t(std::strtoul(argv[++i], nullptr, 10));
    } else if (arg == "--allow-writable-mount") {
      o.require_read_only_mount = false;
    } else if (arg == "--hold") {
      hold = true;
    } else {
      std::fprintf(stderr, "hami_broker_query: unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  const hami::broker::ClientResult r = hami::broker::QueryHostPid(o);
  if (r.failure == hami::broker::ClientFailure::kNone) {
    std::printf("pid=%d host_pid=%d\n", int(getpid()), int(r.pid));
  } else {
    std::printf("pid=%d failure=%s errno=%d frame_error=%s\n", int(getpid()),
                hami::broker::ClientFailureName(r.failure), r.sys_errno,
                hami::broker::FrameErrorName(r.frame_error));
  }
  std::fflush(stdout);
  if (hold) {
    char c;
    while (read(0, &c, 1) > 0) {
    }
  }
  return r.failure == hami::broker::ClientFailure::kNone ? 0 : 1;
}
