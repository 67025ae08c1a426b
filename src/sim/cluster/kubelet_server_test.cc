// The kubelet server's /exec: the request as the kubelet reads it, the container it picks, and
// over HTTP against a fake CRI runtime on a Unix socket, the 302 to the runtime's URL and each
// refusal's status and text.
#include "sim/cluster/kubelet_server.h"

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <httplib.h>

#include <map>
#include <mutex>

#include "common/temp_dir.h"
#include "sim/cluster/cri_config.h"

namespace hami::sim::cluster {
namespace {

using Params = std::vector<std::pair<std::string, std::string>>;

TEST(ParseKubeletExec, ReadsThePathTheCommandInOrderAndTheFlagsAsTheKubeletDoes) {
  KubeletParsed p = ParseKubeletExec("/exec/default/web/main", {{"command", "sh"},
                                                                {"command", "-c"},
                                                                {"command", "exit 7"},
                                                                {"input", "1"},
                                                                {"output", "1"},
                                                                {"error", "true"},
                                                                {"tty", "0"}});
  ASSERT_TRUE(p.request.has_value()) << p.refusal.message;
  EXPECT_EQ(p.request->ns, "default");
  EXPECT_EQ(p.request->pod, "web");
  EXPECT_EQ(p.request->uid, "");
  EXPECT_EQ(p.request->container, "main");
  EXPECT_EQ(p.request->command, (std::vector<std::string>{"sh", "-c", "exit 7"}));
  EXPECT_TRUE(p.request->stdin);
  EXPECT_TRUE(p.request->stdout);
  EXPECT_FALSE(p.request->stderr) << "only \"1\" is true";
  EXPECT_FALSE(p.request->tty);

  p = ParseKubeletExec("/exec/ns/pod/uid-1/c", {{"command", "true"}, {"output", "1"}});
  ASSERT_TRUE(p.request.has_value());
  EXPECT_EQ(p.request->uid, "uid-1");
  EXPECT_EQ(p.request->container, "c");
}

TEST(ParseKubeletExec, TtyDropsStderr) {
  KubeletParsed p = ParseKubeletExec(
      "/exec/ns/pod/c", {{"command", "sh"}, {"output", "1"}, {"error", "1"}, {"tty", "1"}});
  ASSERT_TRUE(p.request.has_value());
  EXPECT_TRUE(p.request->tty);
  EXPECT_FALSE(p.request->stderr);
}

TEST(ParseKubeletExec, RefusesOtherPathsNoStreamsAndNoCommand) {
  for (const char* path : {"/exec/ns/pod", "/exec/ns//c", "/logs/ns/pod/c", "/exec/a/b/c/d/e"}) {
    KubeletParsed p = ParseKubeletExec(path, {{"command", "x"}, {"output", "1"}});
    EXPECT_FALSE(p.request.has_value()) << path;
    EXPECT_EQ(p.refusal.status, 404) << path;
  }
  KubeletParsed p = ParseKubeletExec("/exec/ns/pod/c", {{"command", "x"}});
  ASSERT_FALSE(p.request.has_value());
  EXPECT_EQ(p.refusal.status, 400);
  EXPECT_EQ(p.refusal.message, "you must specify at least 1 of stdin, stdout, stderr");
  p = ParseKubeletExec("/exec/ns/pod/c", {{"output", "1"}});
  ASSERT_FALSE(p.request.has_value());
  EXPECT_EQ(p.refusal.status, 400);
}

TEST(PickRunningContainer, TakesTheNewestRunningOne) {
  std::vector<cri::v1::Container> listed(3);
  listed[0].set_id("old");
  listed[0].set_state(cri::v1::CONTAINER_RUNNING);
  listed[0].set_created_at(1);
  listed[1].set_id("new");
  listed[1].set_state(cri::v1::CONTAINER_RUNNING);
  listed[1].set_created_at(3);
  listed[2].set_id("exited");
  listed[2].set_state(cri::v1::CONTAINER_EXITED);
  listed[2].set_created_at(9);
  EXPECT_EQ(PickRunningContainer(listed), "new");
  EXPECT_EQ(PickRunningContainer({listed[2]}), "");
}

// A runtime with one running container "c1" of pod default/web, container main; Exec of "c1"
// answers a URL naming the request, any other ID NOT_FOUND.
class FakeRuntime final : public cri::v1::RuntimeService::Service {
 public:
  grpc::Status ListContainers(grpc::ServerContext*, const cri::v1::ListContainersRequest* request,
                              cri::v1::ListContainersResponse* response) override {
    std::lock_guard l(mu_);
    last_filter_ = request->filter();
    const auto& labels = request->filter().label_selector();
    auto label = [&](const char* k) {
      auto it = labels.find(k);
      return it == labels.end() ? std::string() : it->second;
    };
    if (label(kPodNamespaceLabel) == "default" && label(kPodNameLabel) == "web" &&
        label(kContainerNameLabel) == "main") {
      cri::v1::Container* c = response->add_containers();
      c->set_id(exec_fails_ ? "gone" : "c1");
      c->set_state(cri::v1::CONTAINER_RUNNING);
    }
    return grpc::Status::OK;
  }
  grpc::Status Exec(grpc::ServerContext*, const cri::v1::ExecRequest* request,
                    cri::v1::ExecResponse* response) override {
    if (request->container_id() != "c1") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "container \"gone\" not found");
    }
    std::string url = "http://127.0.0.1:1/exec/token?";
    for (const std::string& a : request->cmd()) url += "cmd=" + a + "&";
    url += std::string("stdin=") + (request->stdin() ? "1" : "0") +
           "&stdout=" + (request->stdout() ? "1" : "0") +
           "&stderr=" + (request->stderr() ? "1" : "0") + "&tty=" + (request->tty() ? "1" : "0");
    response->set_url(url);
    return grpc::Status::OK;
  }
  cri::v1::ContainerFilter last_filter() {
    std::lock_guard l(mu_);
    return last_filter_;
  }
  void set_exec_fails(bool v) {
    std::lock_guard l(mu_);
    exec_fails_ = v;
  }

 private:
  std::mutex mu_;
  cri::v1::ContainerFilter last_filter_;
  bool exec_fails_ = false;
};

class KubeletServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(tmp_.ok());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("unix:" + socket_, grpc::InsecureServerCredentials());
    builder.RegisterService(&runtime_);
    grpc_ = builder.BuildAndStart();
    ASSERT_NE(grpc_, nullptr);
    auto server = KubeletServer::Start(cri_, "node-t");
    ASSERT_TRUE(server.ok()) << server.error().message();
    server_ = std::move(server).value();
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (grpc_) grpc_->Shutdown();
  }
  httplib::Result Post(const std::string& path) {
    httplib::Client http("127.0.0.1", server_->port());
    return http.Post(path);
  }

  TempDir tmp_{"hami-kubelet-server"};
  std::string socket_ = tmp_.File("cri.sock");
  FakeRuntime runtime_;
  std::unique_ptr<grpc::Server> grpc_;
  cri::CriClient cri_{socket_};
  std::unique_ptr<KubeletServer> server_;
};

TEST_F(KubeletServerTest, ExecRedirectsToTheRuntimesStreamingUrl) {
  auto res = Post("/exec/default/web/main?command=cat&command=/overrideEnv&output=1&error=1");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  EXPECT_EQ(res->status, 302);
  EXPECT_EQ(
      res->get_header_value("Location"),
      "http://127.0.0.1:1/exec/token?cmd=cat&cmd=/overrideEnv&stdin=0&stdout=1&stderr=1&tty=0");
  const cri::v1::ContainerFilter f = runtime_.last_filter();
  EXPECT_EQ(f.state().state(), cri::v1::CONTAINER_RUNNING);
  EXPECT_EQ(f.label_selector().at(kPodNamespaceLabel), "default");
  EXPECT_EQ(f.label_selector().at(kPodNameLabel), "web");
  EXPECT_EQ(f.label_selector().at(kContainerNameLabel), "main");
  EXPECT_EQ(f.label_selector().count(kPodUidLabel), 0u);

  httplib::Client http("127.0.0.1", server_->port());
  auto health = http.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_EQ(health->body, "ok");
}

TEST_F(KubeletServerTest, AContainerThatDoesNotRunIsNotFoundAsTheKubeletSaysIt) {
  auto res = Post("/exec/default/web/sidecar?command=true&output=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 500);
  EXPECT_EQ(res->body, "container not found (\"sidecar\")");
}

TEST_F(KubeletServerTest, ARuntimeRefusalComesBackWithItsMessage) {
  runtime_.set_exec_fails(true);
  auto res = Post("/exec/default/web/main?command=true&output=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
  EXPECT_NE(res->body.find("container \"gone\" not found"), std::string::npos) << res->body;
}

TEST_F(KubeletServerTest, RefusalsAreTextWithTheKubeletsStatus) {
  auto res = Post("/exec/default/web/main?command=true");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  EXPECT_EQ(res->body, "you must specify at least 1 of stdin, stdout, stderr");
  res = Post("/exec/default/web?command=true&output=1");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 404);
}

}  // namespace
}  // namespace hami::sim::cluster
