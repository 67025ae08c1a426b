// CriClient against a fake runtime of the test's own on a real Unix socket: each failure
// becomes an Error naming the call and its subject, ImageStatus without an image is
// kNotFound, ContainerPid reads the verbose info's "pid" and refuses what is not one.
#include "sim/cri/client.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "common/temp_dir.h"

namespace hami::sim::cri {
namespace {

class FakeRuntime final : public v1::RuntimeService::Service {
 public:
  grpc::Status Version(grpc::ServerContext*, const v1::VersionRequest*,
                       v1::VersionResponse* response) override {
    response->set_runtime_name("fake");
    response->set_runtime_api_version("v1");
    return grpc::Status::OK;
  }
  grpc::Status CreateContainer(grpc::ServerContext*, const v1::CreateContainerRequest*,
                               v1::CreateContainerResponse*) override {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "mount source /x does not exist");
  }
  grpc::Status ContainerStatus(grpc::ServerContext*, const v1::ContainerStatusRequest* request,
                               v1::ContainerStatusResponse* response) override {
    const std::string& id = request->container_id();
    if (id == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "container \"missing\" not found");
    }
    response->mutable_status()->set_id(id);
    response->mutable_status()->set_state(id == "exited" ? v1::CONTAINER_EXITED
                                                         : v1::CONTAINER_RUNNING);
    if (id == "good") (*response->mutable_info())["info"] = R"({"pid": 4242, "sandboxID": "s"})";
    if (id == "badjson") (*response->mutable_info())["info"] = "{";
    if (id == "zero") (*response->mutable_info())["info"] = R"({"pid": 0})";
    return grpc::Status::OK;
  }
  // The URL names what was asked, so a test sees every field arrive.
  grpc::Status Exec(grpc::ServerContext*, const v1::ExecRequest* request,
                    v1::ExecResponse* response) override {
    if (request->container_id() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "container \"missing\" not found");
    }
    std::string url = "http://127.0.0.1:1/exec/" + request->container_id() + "?";
    for (const std::string& a : request->cmd()) url += "cmd=" + a + "&";
    url += std::string("tty=") + (request->tty() ? "1" : "0") +
           "&stdin=" + (request->stdin() ? "1" : "0") +
           "&stdout=" + (request->stdout() ? "1" : "0") +
           "&stderr=" + (request->stderr() ? "1" : "0");
    response->set_url(url);
    return grpc::Status::OK;
  }
};

class FakeImages final : public v1::ImageService::Service {
 public:
  grpc::Status ImageStatus(grpc::ServerContext*, const v1::ImageStatusRequest* request,
                           v1::ImageStatusResponse* response) override {
    if (request->image().image() == "hami.local/sim/base:1") {
      response->mutable_image()->set_id("sha256:abc");
      response->mutable_image()->add_repo_tags("hami.local/sim/base:1");
    }
    return grpc::Status::OK;
  }
};

class CriClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(&runtime_);
    builder.RegisterService(&images_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
  }

  TempDir tmp_{"hami-cri-client"};
  std::string socket_ = tmp_.File("cri.sock");
  FakeRuntime runtime_;
  FakeImages images_;
  std::unique_ptr<grpc::Server> server_;
};

TEST_F(CriClientTest, AnswersComeBackTyped) {
  CriClient cri(socket_);
  Result<v1::VersionResponse> v = cri.Version(5000, true);
  ASSERT_TRUE(v.ok()) << v.error().message();
  EXPECT_EQ(v->runtime_name(), "fake");
  Result<v1::Image> image = cri.ImageStatus("hami.local/sim/base:1");
  ASSERT_TRUE(image.ok()) << image.error().message();
  EXPECT_EQ(image->id(), "sha256:abc");
  Result<pid_t> pid = cri.ContainerPid("good");
  ASSERT_TRUE(pid.ok()) << pid.error().message();
  EXPECT_EQ(*pid, 4242);
}

TEST_F(CriClientTest, EachFailureNamesTheCallItsSubjectAndTheRuntimesMessage) {
  CriClient cri(socket_);
  Result<v1::ContainerStatusResponse> status = cri.ContainerStatus("missing");
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(status.error().message(),
            "CRI ContainerStatus (missing): container \"missing\" not found (gRPC NOT_FOUND)");

  v1::ContainerConfig config;
  config.mutable_metadata()->set_name("main");
  Result<std::string> created = cri.CreateContainer("s1", config, {});
  ASSERT_FALSE(created.ok());
  EXPECT_EQ(created.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(created.error().message(),
            "CRI CreateContainer (sandbox s1, container main): mount source /x does not exist "
            "(gRPC INVALID_ARGUMENT)");

  // A call the fake does not implement.
  Status removed = cri.RemovePodSandbox("s1");
  ASSERT_FALSE(removed.ok());
  EXPECT_EQ(removed.error().code(), ErrorCode::kIo);
  EXPECT_NE(removed.error().message().find("(gRPC UNIMPLEMENTED)"), std::string::npos)
      << removed.error().message();
}

TEST_F(CriClientTest, ImageStatusWithoutAnImageIsNotFoundNamingIt) {
  CriClient cri(socket_);
  Result<v1::Image> image = cri.ImageStatus("hami.local/sim/absent:1");
  ASSERT_FALSE(image.ok());
  EXPECT_EQ(image.error().code(), ErrorCode::kNotFound);
  EXPECT_NE(image.error().message().find("image hami.local/sim/absent:1 is not present"),
            std::string::npos)
      << image.error().message();
}

TEST_F(CriClientTest, ContainerPidRefusesWhatIsNotAPositivePid) {
  CriClient cri(socket_);
  for (const char* id : {"noinfo", "badjson", "zero"}) {
    Result<pid_t> pid = cri.ContainerPid(id);
    ASSERT_FALSE(pid.ok()) << id;
    EXPECT_EQ(pid.error().code(), ErrorCode::kIncompatible) << id;
    EXPECT_NE(pid.error().message().find(id), std::string::npos) << pid.error().message();
  }
  Result<pid_t> exited = cri.ContainerPid("exited");
  ASSERT_FALSE(exited.ok());
  EXPECT_EQ(exited.error().code(), ErrorCode::kNotFound);
}

TEST_F(CriClientTest, ExecSendsTheCommandAndStreamFlagsAndAnswersTheUrl) {
  CriClient cri(socket_);
  v1::ExecRequest request;
  request.set_container_id("c1");
  request.add_cmd("sh");
  request.add_cmd("-c");
  request.set_stdin(true);
  request.set_stdout(true);
  Result<std::string> url = cri.Exec(request);
  ASSERT_TRUE(url.ok()) << url.error().message();
  EXPECT_EQ(*url, "http://127.0.0.1:1/exec/c1?cmd=sh&cmd=-c&tty=0&stdin=1&stdout=1&stderr=0");

  request.set_container_id("missing");
  url = cri.Exec(request);
  ASSERT_FALSE(url.ok());
  EXPECT_EQ(url.error().code(), ErrorCode::kNotFound);
  EXPECT_EQ(url.error().message(),
            "CRI Exec (missing): container \"missing\" not found (gRPC NOT_FOUND)");
}

TEST(CriClient, NoRuntimeOnTheSocketIsUnavailableNamingTheSocket) {
  TempDir tmp("hami-cri-client");
  CriClient cri(tmp.File("absent.sock"));
  Result<v1::VersionResponse> v = cri.Version(2000);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kUnavailable);
  EXPECT_NE(v.error().message().find(tmp.File("absent.sock")), std::string::npos)
      << v.error().message();
  // Waiting for it ends at the deadline.
  v = cri.Version(200, true);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error().code(), ErrorCode::kTimeout);
}

TEST(CriError, MapsGrpcCodesToTheProjectsCodes) {
  const std::pair<grpc::StatusCode, ErrorCode> cases[] = {
      {grpc::StatusCode::NOT_FOUND, ErrorCode::kNotFound},
      {grpc::StatusCode::DEADLINE_EXCEEDED, ErrorCode::kTimeout},
      {grpc::StatusCode::UNAVAILABLE, ErrorCode::kUnavailable},
      {grpc::StatusCode::INVALID_ARGUMENT, ErrorCode::kInvalidArgument},
      {grpc::StatusCode::ALREADY_EXISTS, ErrorCode::kConflict},
      {grpc::StatusCode::UNKNOWN, ErrorCode::kIo},
      {grpc::StatusCode::INTERNAL, ErrorCode::kIo},
  };
  for (const auto& [grpc_code, code] : cases) {
    Error e = CriError("StartContainer", "", grpc::Status(grpc_code, "m"));
    EXPECT_EQ(e.code(), code) << e.message();
    EXPECT_EQ(e.message().rfind("CRI StartContainer: m (gRPC ", 0), 0u) << e.message();
  }
}

}  // namespace
}  // namespace hami::sim::cri
