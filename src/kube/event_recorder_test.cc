#include "kube/event_recorder.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>

#include "common/unique_fd.h"
#include "kube/client.h"
#include "kube/objects.h"
#include "kube/resource.h"
#include "kube/time.h"
#include "sim/kube/api_server.h"
#include "support/kube_control.h"

namespace hami::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using sim::kube::ApiServer;
using SteadyClock = std::chrono::steady_clock;
using control_test::Ms;
using control_test::StartServer;

std::unique_ptr<Client> Connect(const std::string& url) {
  ClientOptions options;
  options.qps = 0;
  options.max_retries = 0;
  options.request_timeout = 2s;
  options.connect_timeout = 1s;
  return control_test::ConnectTo(url, "event_recorder_test", options);
}

json MakePod(ApiServer& server, const std::string& name) {
  json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", name}, {"namespace", "default"}}},
              {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox"}}}}}}};
  auto created = server.CreateObject(kPods, pod);
  EXPECT_TRUE(created.ok()) << created.error().message();
  return created.ok() ? *created : json();
}

json Events(Client& client, const std::string& ns) {
  auto list = client.List(kEvents, ns, {});
  EXPECT_TRUE(list.ok()) << list.error().message();
  return list.ok() ? (*list)["items"] : json::array();
}

EventRecorderOptions Options() {
  EventRecorderOptions o;
  o.component = "hami-scheduler";
  o.instance = "scheduler-0";
  return o;
}

TEST(EventRecorder, CreatesAnEventWithTheInvolvedObjectAndSource) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(server->url());
  ASSERT_TRUE(client);
  json pod = MakePod(*server, "p1");
  EventRecorder recorder(*client, Options());
  auto before = std::chrono::system_clock::now();
  recorder.Record(ReferenceToObject(kPods, pod), EventType::kWarning, "FailedScheduling",
                  "0/3 nodes have a free GPU");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));

  json events = Events(*client, "default");
  ASSERT_EQ(events.size(), 1u) << events.dump();
  const json& e = events[0];
  std::string name = e["metadata"]["name"];
  EXPECT_EQ(name.rfind("p1.", 0), 0u) << name;
  EXPECT_EQ(name.find_first_not_of("0123456789abcdef", 3), std::string::npos) << name;
  EXPECT_EQ(e["metadata"]["namespace"], "default");
  EXPECT_EQ(e["involvedObject"]["kind"], "Pod");
  EXPECT_EQ(e["involvedObject"]["namespace"], "default");
  EXPECT_EQ(e["involvedObject"]["name"], "p1");
  EXPECT_EQ(e["involvedObject"]["uid"], pod["metadata"]["uid"]);
  EXPECT_EQ(e["involvedObject"]["apiVersion"], "v1");
  EXPECT_EQ(e["involvedObject"]["resourceVersion"], pod["metadata"]["resourceVersion"]);
  EXPECT_EQ(e["reason"], "FailedScheduling");
  EXPECT_EQ(e["message"], "0/3 nodes have a free GPU");
  EXPECT_EQ(e["type"], "Warning");
  EXPECT_EQ(e["source"]["component"], "hami-scheduler");
  EXPECT_EQ(e["reportingComponent"], "hami-scheduler");
  EXPECT_EQ(e["reportingInstance"], "scheduler-0");
  EXPECT_EQ(e["count"], 1);
  auto first = ParseTime(e.value("firstTimestamp", ""));
  ASSERT_TRUE(first.ok()) << e.dump();
  EXPECT_EQ(e["lastTimestamp"], e["firstTimestamp"]);
  EXPECT_GE(*first, std::chrono::floor<std::chrono::seconds>(before));
  EventRecorder::Stats stats = recorder.stats();
  EXPECT_EQ(stats.created, 1u);
  EXPECT_EQ(stats.failed, 0u);
}

TEST(EventRecorder, RepeatsAreAggregatedIntoOneEventByCount) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(server->url());
  ASSERT_TRUE(client);
  ObjectReference ref = ReferenceToObject(kPods, MakePod(*server, "p1"));
  EventRecorder recorder(*client, Options());
  for (int i = 0; i < 3; ++i) {
    recorder.Record(ref, EventType::kNormal, "Allocated", "GPU-0 for container main");
  }
  recorder.Record(ref, EventType::kNormal, "Allocated", "GPU-1 for container main");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));

  json events = Events(*client, "default");
  ASSERT_EQ(events.size(), 2u) << events.dump();
  const json& repeated = events[0]["message"] == "GPU-0 for container main" ? events[0] : events[1];
  const json& other = &repeated == &events[0] ? events[1] : events[0];
  EXPECT_EQ(repeated["count"], 3);
  EXPECT_EQ(other["count"], 1);
  auto first = ParseTime(repeated.value("firstTimestamp", ""));
  auto last = ParseTime(repeated.value("lastTimestamp", ""));
  ASSERT_TRUE(first.ok() && last.ok()) << repeated.dump();
  EXPECT_LE(*first, *last);
  EventRecorder::Stats stats = recorder.stats();
  EXPECT_EQ(stats.created, 2u);
  EXPECT_EQ(stats.patched, 2u);
}

TEST(EventRecorder, ARepeatOfADeletedEventCreatesItAgainWithTheRunningCount) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(server->url());
  ASSERT_TRUE(client);
  ObjectReference ref = ReferenceToObject(kPods, MakePod(*server, "p1"));
  EventRecorder recorder(*client, Options());
  recorder.Record(ref, EventType::kNormal, "Bound", "to node-1");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));
  json events = Events(*client, "default");
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(
      client->Delete(kEvents, "default", events[0]["metadata"]["name"].get<std::string>()).ok());

  recorder.Record(ref, EventType::kNormal, "Bound", "to node-1");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));
  events = Events(*client, "default");
  ASSERT_EQ(events.size(), 1u) << events.dump();
  EXPECT_EQ(events[0]["count"], 2);
}

TEST(EventRecorder, EventsAboutClusterScopedObjectsGoToTheDefaultNamespace) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(server->url());
  ASSERT_TRUE(client);
  json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "node-1"}}}};
  auto created = server->CreateObject(kNodes, node);
  ASSERT_TRUE(created.ok()) << created.error().message();
  EventRecorder recorder(*client, Options());
  recorder.Record(ReferenceToObject(kNodes, *created), EventType::kNormal, "Registered", "4 GPUs");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));
  json events = Events(*client, "default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["involvedObject"]["kind"], "Node");
  EXPECT_EQ(events[0]["involvedObject"]["name"], "node-1");
  EXPECT_FALSE(events[0]["involvedObject"].contains("namespace"));
}

// A server that accepts connections (the kernel does, into the backlog) and never answers.
struct HungServer {
  UniqueFd fd;
  std::string url;
  HungServer() {
    fd.Reset(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (!fd.valid() || bind(fd.get(), reinterpret_cast<sockaddr*>(&addr), len) != 0 ||
        listen(fd.get(), 128) != 0 ||
        getsockname(fd.get(), reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen: " << std::strerror(errno);
      return;
    }
    url = "http://127.0.0.1:" + std::to_string(ntohs(addr.sin_port));
  }
};

TEST(EventRecorder, RecordNeverBlocksOnAHungServerAndAFullQueueDrops) {
  HungServer hung;
  ASSERT_FALSE(hung.url.empty());
  auto client = Connect(hung.url);
  ASSERT_TRUE(client);
  EventRecorderOptions options = Options();
  options.queue_capacity = 16;
  ObjectReference ref{.api_version = "v1",
                      .kind = "Pod",
                      .ns = "default",
                      .name = "p1",
                      .uid = "uid-1",
                      .resource_version = "7",
                      .field_path = ""};
  auto recorder = std::make_unique<EventRecorder>(*client, options);
  auto start = SteadyClock::now();
  for (int i = 0; i < 2000; ++i) {
    recorder->Record(ref, EventType::kWarning, "Failed", "attempt " + std::to_string(i));
  }
  EXPECT_LT(Ms(SteadyClock::now() - start), Ms(500ms));
  EventRecorder::Stats stats = recorder->stats();
  EXPECT_EQ(stats.recorded + stats.dropped, 2000u);
  EXPECT_LE(stats.recorded, 16u + 1u);  // the queue, and the one the sender is stuck on
  EXPECT_GE(stats.dropped, 2000u - 17u);
  EXPECT_FALSE(recorder->Flush(SteadyClock::now() + 100ms));

  // Destruction waits only for the request in flight (the client's request timeout).
  auto destroy_start = SteadyClock::now();
  recorder.reset();
  EXPECT_LT(Ms(SteadyClock::now() - destroy_start), Ms(3s));
}

TEST(EventRecorder, FailedRequestsAreCountedAndTheRecorderKeepsWorking) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(server->url());
  ASSERT_TRUE(client);
  ObjectReference ref = ReferenceToObject(kPods, MakePod(*server, "p1"));
  EventRecorder recorder(*client, Options());
  sim::kube::Faults faults;
  faults.rate_500 = 1.0;
  server->SetFaults(faults);
  recorder.Record(ref, EventType::kWarning, "Failed", "lost");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));
  EXPECT_EQ(recorder.stats().failed, 1u);

  server->SetFaults({});
  recorder.Record(ref, EventType::kWarning, "Failed", "kept");
  ASSERT_TRUE(recorder.Flush(SteadyClock::now() + 10s));
  json events = Events(*client, "default");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0]["message"], "kept");
}

}  // namespace
}  // namespace hami::kube
