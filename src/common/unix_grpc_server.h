// A gRPC server on one Unix socket, as both kubelet plugins serve (the device plugin's
// DevicePlugin service, the DRA driver's DRA, health and registration services): no TLS, one
// absolute socket path, the socket file owned by the server for as long as it runs.
//
// Start():
//   - refuses a path that is not absolute (kInvalidArgument naming it), and one whose
//     directory is missing (the errno, naming the directory) or is not a directory;
//   - removes a stale socket at the path (a previous run's); anything else there (a file, a
//     directory, a symlink) is refused, naming the path: it is never removed;
//   - binds, registers `services` and starts; gRPC's failure to bind is kIo naming the target;
//   - records the device and inode of the socket it bound.
// Stop(grace_ms) (idempotent, run by the destructor): runs `before_shutdown` (a streaming
// service's "end your streams", since gRPC waits for open streams and tells them nothing),
// shuts down with a deadline of `grace_ms` (calls still running then are cancelled), and
// removes the socket file only while it is still the one Start() bound (gRPC itself also
// unlinks the path it listened on when it shuts down, whatever is there then).
//
// Thread safety: Stop() and the accessors may be called from any thread.
// Lifetime: every service outlives the server.
#pragma once

#include <grpcpp/grpcpp.h>
#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "common/mutex.h"
#include "common/result.h"
#include "common/thread_annotations.h"

namespace hami {

// "unix:<path>", for grpc::CreateChannel and ServerBuilder.
std::string UnixGrpcTarget(std::string_view socket_path);

class UnixGrpcServer {
 public:
  static Result<std::unique_ptr<UnixGrpcServer>> Start(const std::string& socket_path,
                                                       const std::vector<grpc::Service*>& services,
                                                       std::function<void()> before_shutdown = {});
  ~UnixGrpcServer();
  UnixGrpcServer(const UnixGrpcServer&) = delete;
  UnixGrpcServer& operator=(const UnixGrpcServer&) = delete;

  void Stop(int64_t grace_ms = 1000);
  const std::string& path() const { return path_; }
  // Whether the path still names the socket Start() bound (false once it was removed or
  // replaced).
  bool SocketIntact() const;

 private:
  UnixGrpcServer(std::string path, std::unique_ptr<grpc::Server> server, dev_t dev, ino_t ino,
                 std::function<void()> before_shutdown);

  const std::string path_;
  const dev_t dev_;
  const ino_t ino_;
  const std::function<void()> before_shutdown_;
  Mutex mu_;
  std::unique_ptr<grpc::Server> server_ GUARDED_BY(mu_);
};

}  // namespace hami
