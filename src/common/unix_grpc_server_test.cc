#include "common/unix_grpc_server.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>

#include "common/temp_dir.h"
#include "common/unique_fd.h"
#include "draapi/registration.grpc.pb.h"

namespace hami {
namespace {

using ::testing::HasSubstr;

bool IsSocket(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

// A socket file at `path` that nobody listens on any more, as a killed server leaves it.
bool MakeStaleSocket(const std::string& path) {
  UniqueFd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return false;
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  return bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
}

// A service to serve (gRPC refuses to serve none): the kubelet's registration service, whose
// GetInfo answers a fixed name.
class Probe final : public ::pluginregistration::Registration::Service {
 public:
  grpc::Status GetInfo(grpc::ServerContext*, const ::pluginregistration::InfoRequest*,
                       ::pluginregistration::PluginInfo* info) override {
    info->set_name("probe");
    return grpc::Status::OK;
  }
};

Result<std::unique_ptr<UnixGrpcServer>> Serve(const std::string& path,
                                              std::function<void()> before_shutdown = {}) {
  static Probe probe;  // outlives every server
  return UnixGrpcServer::Start(path, {&probe}, std::move(before_shutdown));
}

// Whether a GetInfo call on the socket at `path` is answered by the probe.
bool Answers(const std::string& path) {
  auto stub = ::pluginregistration::Registration::NewStub(
      grpc::CreateChannel(UnixGrpcTarget(path), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  ::pluginregistration::PluginInfo info;
  return stub->GetInfo(&ctx, {}, &info).ok() && info.name() == "probe";
}

TEST(UnixGrpcServer, RefusesARelativePathNamingIt) {
  auto server = UnixGrpcServer::Start("run/x.sock", {});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(server.error().message(), HasSubstr("'run/x.sock' is not an absolute path"));
}

TEST(UnixGrpcServer, RefusesAMissingDirectoryNamingIt) {
  TempDir dir("hami-ugs");
  ASSERT_TRUE(dir.ok());
  auto server = UnixGrpcServer::Start(dir.File("no/such/x.sock"), {});
  ASSERT_FALSE(server.ok());
  EXPECT_THAT(server.error().message(), HasSubstr("gRPC socket directory " + dir.File("no/such/")));
  EXPECT_EQ(server.error().sys_errno(), ENOENT);
}

TEST(UnixGrpcServer, RefusesADirectoryThatIsAFile) {
  TempDir dir("hami-ugs");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(std::ofstream(dir.File("f")) << "x");
  auto server = UnixGrpcServer::Start(dir.File("f/x.sock"), {});
  ASSERT_FALSE(server.ok());
  // stat("<dir>/f/") fails with ENOTDIR: a file is no directory.
  EXPECT_THAT(server.error().message(), HasSubstr("gRPC socket directory " + dir.File("f/")));
}

TEST(UnixGrpcServer, RefusesAndKeepsAFileThatIsNotASocket) {
  TempDir dir("hami-ugs");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("plain");
  ASSERT_TRUE(std::ofstream(path) << "keep me");
  auto server = UnixGrpcServer::Start(path, {});
  ASSERT_FALSE(server.ok());
  EXPECT_EQ(server.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(server.error().message(), HasSubstr(path + " exists and is not a socket"));
  std::ifstream in(path);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(text, "keep me");
}

TEST(UnixGrpcServer, ReplacesAStaleSocketAndServesOnIt) {
  TempDir dir("hami-ugs");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("x.sock");
  ASSERT_TRUE(MakeStaleSocket(path));
  EXPECT_FALSE(Answers(path)) << "nobody listens on the stale socket";
  auto server = Serve(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  EXPECT_EQ((*server)->path(), path);
  EXPECT_TRUE((*server)->SocketIntact());
  EXPECT_TRUE(Answers(path));
}

TEST(UnixGrpcServer, StopRunsTheHookThenRemovesItsSocketOnce) {
  TempDir dir("hami-ugs");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("x.sock");
  int hook_calls = 0;
  bool socket_there_at_hook = false;
  auto server = Serve(path, [&] {
    ++hook_calls;
    socket_there_at_hook = IsSocket(path);
  });
  ASSERT_TRUE(server.ok()) << server.error().message();
  (*server)->Stop();
  EXPECT_EQ(hook_calls, 1);
  EXPECT_TRUE(socket_there_at_hook) << "the hook runs before the shutdown";
  EXPECT_FALSE(IsSocket(path));
  EXPECT_FALSE(Answers(path));
  (*server)->Stop();
  server->reset();  // the destructor stops again: nothing left to do
  EXPECT_EQ(hook_calls, 1);
}

TEST(UnixGrpcServer, SocketIntactSaysWhetherThePathIsStillTheSocketItBound) {
  TempDir dir("hami-ugs");
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.File("x.sock");
  auto server = Serve(path);
  ASSERT_TRUE(server.ok()) << server.error().message();
  EXPECT_TRUE((*server)->SocketIntact());
  ASSERT_EQ(unlink(path.c_str()), 0);
  EXPECT_FALSE((*server)->SocketIntact());
  ASSERT_TRUE(MakeStaleSocket(path));  // another server's socket, now
  EXPECT_FALSE((*server)->SocketIntact());
  (*server)->Stop();  // gRPC unlinks the path it listened on itself; Stop adds no removal
}

}  // namespace
}  // namespace hami
