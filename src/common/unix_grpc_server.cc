#include "common/unix_grpc_server.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <exception>
#include <utility>

namespace hami {

std::string UnixGrpcTarget(std::string_view socket_path) {
  return "unix:" + std::string(socket_path);
}

Result<std::unique_ptr<UnixGrpcServer>> UnixGrpcServer::Start(
    const std::string& socket_path, const std::vector<grpc::Service*>& services,
    std::function<void()> before_shutdown) {
  if (socket_path.empty() || socket_path[0] != '/') {
    return Error(ErrorCode::kInvalidArgument,
                 "gRPC socket path '" + socket_path + "' is not an absolute path");
  }
  const std::string dir = socket_path.substr(0, socket_path.rfind('/') + 1);
  struct stat st {};
  if (stat(dir.c_str(), &st) != 0) return Error::FromErrno("gRPC socket directory " + dir);
  if (!S_ISDIR(st.st_mode)) {
    return Error(ErrorCode::kInvalidArgument,
                 "gRPC socket directory " + dir + " is not a directory");
  }
  if (lstat(socket_path.c_str(), &st) == 0) {
    if (!S_ISSOCK(st.st_mode)) {
      return Error(ErrorCode::kInvalidArgument,
                   "gRPC socket path " + socket_path + " exists and is not a socket");
    }
    if (unlink(socket_path.c_str()) != 0 && errno != ENOENT) {
      return Error::FromErrno("removing the stale socket " + socket_path);
    }
  } else if (errno != ENOENT) {
    return Error::FromErrno("gRPC socket path " + socket_path);
  }

  const std::string target = UnixGrpcTarget(socket_path);
  std::unique_ptr<grpc::Server> server;
  try {
    grpc::ServerBuilder builder;
    builder.AddListeningPort(target, grpc::InsecureServerCredentials());
    for (grpc::Service* s : services) builder.RegisterService(s);
    server = builder.BuildAndStart();
  } catch (const std::exception& e) {
    return Error(ErrorCode::kInternal, "serving gRPC on " + target + ": " + e.what());
  }
  if (!server) {
    return Error(ErrorCode::kIo, "serving gRPC on " + target +
                                     " failed (gRPC could not bind it; see its log line)");
  }
  if (lstat(socket_path.c_str(), &st) != 0) {
    const int err = errno;
    server->Shutdown();
    return Error::FromErrno("gRPC socket " + socket_path + " after bind", err);
  }
  return std::unique_ptr<UnixGrpcServer>(new UnixGrpcServer(
      socket_path, std::move(server), st.st_dev, st.st_ino, std::move(before_shutdown)));
}

UnixGrpcServer::UnixGrpcServer(std::string path, std::unique_ptr<grpc::Server> server, dev_t dev,
                               ino_t ino, std::function<void()> before_shutdown)
    : path_(std::move(path)),
      dev_(dev),
      ino_(ino),
      before_shutdown_(std::move(before_shutdown)),
      server_(std::move(server)) {}

UnixGrpcServer::~UnixGrpcServer() { Stop(); }

bool UnixGrpcServer::SocketIntact() const {
  struct stat st {};
  return lstat(path_.c_str(), &st) == 0 && st.st_dev == dev_ && st.st_ino == ino_;
}

void UnixGrpcServer::Stop(int64_t grace_ms) {
  std::unique_ptr<grpc::Server> server;
  {
    MutexLock lock(&mu_);
    server = std::move(server_);
  }
  if (!server) return;
  const bool ours = SocketIntact();
  if (before_shutdown_) before_shutdown_();
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(grace_ms));
  server->Wait();
  if (ours && SocketIntact()) unlink(path_.c_str());
}

}  // namespace hami
