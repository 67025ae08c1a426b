#include "kube/informer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "kube/client.h"
#include "kube/resource.h"
#include "sim/kube/api_server.h"
#include "support/kube_control.h"

namespace hami::kube {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using sim::kube::ApiServer;
using sim::kube::ApiServerOptions;
using sim::kube::Faults;
using SteadyClock = std::chrono::steady_clock;
using control_test::Ms;
using control_test::StartServer;
using control_test::WaitUntil;

std::unique_ptr<Client> Connect(const ApiServer& server) {
  ClientOptions options;
  options.qps = 0;
  options.max_retries = 1;
  options.retry_base = 10ms;
  return control_test::ConnectTo(server.url(), "informer_test", options);
}

json ConfigMap(const std::string& name, const std::string& value, const std::string& app = "x") {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", {{"name", name}, {"namespace", "default"}, {"labels", {{"app", app}}}}},
          {"data", {{"v", value}}}};
}

std::string Rv(const json& object) { return object["metadata"].value("resourceVersion", ""); }

// What a handler saw, one line per call: "add KEY RV", "update KEY OLDRV->NEWRV",
// "delete KEY RV".
class EventLog {
 public:
  ResourceEventHandler Handler() {
    return {[this](const ObjectPtr& o) { Push("add " + ObjectKey(*o) + " " + Rv(*o)); },
            [this](const ObjectPtr& old_o, const ObjectPtr& new_o) {
              Push("update " + ObjectKey(*new_o) + " " + Rv(*old_o) + "->" + Rv(*new_o));
            },
            [this](const ObjectPtr& o) { Push("delete " + ObjectKey(*o) + " " + Rv(*o)); }};
  }

  bool WaitForCount(size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return lines_.size() >= n; });
  }
  bool WaitForLine(const std::string& prefix, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] {
      return std::any_of(lines_.begin(), lines_.end(),
                         [&](const std::string& l) { return l.rfind(prefix, 0) == 0; });
    });
  }
  std::vector<std::string> lines() {
    std::lock_guard lock(mu_);
    return lines_;
  }

 private:
  void Push(std::string line) {
    {
      std::lock_guard lock(mu_);
      lines_.push_back(std::move(line));
    }
    cv_.notify_all();
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> lines_;
};

// The store's keys and resourceVersions, to compare with the server's.
std::map<std::string, std::string> StoreState(const Store& store) {
  std::map<std::string, std::string> state;
  for (const ObjectPtr& o : store.List()) state[ObjectKey(*o)] = Rv(*o);
  return state;
}

std::map<std::string, std::string> ServerState(Client& client, const Resource& r) {
  std::map<std::string, std::string> state;
  auto list = client.ListAll(r, "default", {});
  EXPECT_TRUE(list.ok()) << list.error().message();
  if (!list.ok()) return state;
  for (const json& item : (*list)["items"]) state[ObjectKey(item)] = Rv(item);
  return state;
}

InformerOptions FastOptions() {
  InformerOptions o;
  o.backoff_base = 20ms;
  o.backoff_cap = 200ms;
  return o;
}

TEST(Informer, InitialSyncSeesEveryObjectAcrossListPages) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  constexpr int kObjects = 5000;
  for (int i = 0; i < kObjects; ++i) {
    auto created = server->CreateObject(kConfigMaps, ConfigMap("cm-" + std::to_string(i), "v"));
    ASSERT_TRUE(created.ok()) << created.error().message();
  }
  uint64_t requests_before = server->stats().requests;

  InformerOptions options = FastOptions();
  options.list_page_size = 500;
  EventLog log;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, options);
  informer.AddHandler(log.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 60s));

  EXPECT_EQ(informer.store().size(), size_t(kObjects));
  ASSERT_TRUE(log.WaitForCount(kObjects, 10s));  // the adds run before HasSynced turns true
  std::vector<std::string> lines = log.lines();
  EXPECT_EQ(lines.size(), size_t(kObjects));
  EXPECT_TRUE(std::all_of(lines.begin(), lines.end(),
                          [](const std::string& l) { return l.rfind("add default/cm-", 0) == 0; }));
  EXPECT_GE(server->stats().requests - requests_before, uint64_t(kObjects / 500));  // pages
  EXPECT_EQ(StoreState(informer.store()), ServerState(*client, kConfigMaps));
  EXPECT_EQ(informer.stats().lists, 1u);
  ObjectPtr one = informer.store().Get("default", "cm-42");
  ASSERT_NE(one, nullptr);
  EXPECT_EQ((*one)["data"]["v"], "v");
  EXPECT_EQ((*one)["kind"], "ConfigMap");  // list items get their kind back
}

TEST(Informer, UpdatesAndDeletesArriveInOrderWithOldAndNewStates) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  EventLog log;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, FastOptions());
  informer.AddHandler(log.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 10s));

  auto a1 = client->Create(kConfigMaps, "default", ConfigMap("a", "1"));
  ASSERT_TRUE(a1.ok()) << a1.error().message();
  json next = *a1;
  next["data"]["v"] = "2";
  auto a2 = client->Update(kConfigMaps, next);
  ASSERT_TRUE(a2.ok()) << a2.error().message();
  next = *a2;
  next["data"]["v"] = "3";
  auto a3 = client->Update(kConfigMaps, next);
  ASSERT_TRUE(a3.ok()) << a3.error().message();
  ASSERT_TRUE(client->Delete(kConfigMaps, "default", "a").ok());
  auto b = client->Create(kConfigMaps, "default", ConfigMap("b", "1"));
  ASSERT_TRUE(b.ok()) << b.error().message();

  ASSERT_TRUE(log.WaitForCount(5, 10s));
  std::vector<std::string> lines = log.lines();
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0], "add default/a " + Rv(*a1));
  EXPECT_EQ(lines[1], "update default/a " + Rv(*a1) + "->" + Rv(*a2));
  EXPECT_EQ(lines[2], "update default/a " + Rv(*a2) + "->" + Rv(*a3));
  EXPECT_EQ(lines[3].rfind("delete default/a ", 0), 0u) << lines[3];
  EXPECT_EQ(lines[4], "add default/b " + Rv(*b));
  EXPECT_EQ(informer.store().Get("default", "a"), nullptr);
  ASSERT_NE(informer.store().Get("default", "b"), nullptr);
  EXPECT_EQ(informer.last_resource_version(), Rv(*b));
}

TEST(Informer, WatchCutAfterEveryFewEventsResumesWithoutDuplicatesOrLosses) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  for (int i = 0; i < 10; ++i) {
    ASSERT_TRUE(
        server->CreateObject(kConfigMaps, ConfigMap("seed-" + std::to_string(i), "0")).ok());
  }
  Faults faults;
  faults.cut_watch_after_events = 3;
  server->SetFaults(faults);

  EventLog log;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, FastOptions());
  informer.AddHandler(log.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 10s));
  ASSERT_TRUE(log.WaitForCount(10, 5s));

  std::vector<std::string> expected;  // the lines each write must produce, once each
  std::map<std::string, json> live;
  for (int i = 0; i < 30; ++i) {
    std::string name = "c-" + std::to_string(i);
    auto created = client->Create(kConfigMaps, "default", ConfigMap(name, "0"));
    ASSERT_TRUE(created.ok()) << created.error().message();
    expected.push_back("add default/" + name + " " + Rv(*created));
    live[name] = *created;
  }
  for (int i = 0; i < 30; ++i) {
    std::string name = "c-" + std::to_string(i);
    json next = live[name];
    next["data"]["v"] = "1";
    auto updated = client->Update(kConfigMaps, next);
    ASSERT_TRUE(updated.ok()) << updated.error().message();
    expected.push_back("update default/" + name + " " + Rv(live[name]) + "->" + Rv(*updated));
    live[name] = *updated;
  }
  std::vector<std::string> deleted;
  for (int i = 0; i < 15; ++i) {
    std::string name = "c-" + std::to_string(i);
    ASSERT_TRUE(client->Delete(kConfigMaps, "default", name).ok());
    deleted.push_back("delete default/" + name + " ");
  }

  ASSERT_TRUE(log.WaitForCount(10 + expected.size() + deleted.size(), 30s))
      << log.lines().size() << " events";
  std::vector<std::string> lines = log.lines();
  std::vector<std::string> after_sync(lines.begin() + 10, lines.end());
  ASSERT_EQ(after_sync.size(), expected.size() + deleted.size());
  std::vector<std::string> changes(after_sync.begin(),
                                   after_sync.begin() + std::ptrdiff_t(expected.size()));
  EXPECT_EQ(changes, expected);  // in order, each once
  for (size_t i = 0; i < deleted.size(); ++i) {
    EXPECT_EQ(after_sync[expected.size() + i].rfind(deleted[i], 0), 0u)
        << after_sync[expected.size() + i];
  }
  EXPECT_EQ(StoreState(informer.store()), ServerState(*client, kConfigMaps));
  Informer::Stats stats = informer.stats();
  EXPECT_GE(stats.watch_restarts, 10u);  // 75 events, 3 per stream
  EXPECT_EQ(stats.relists, 0u);          // resumed from the last version, never listed again
}

TEST(Informer, ForcedGoneRelistsAndReportsADeleteFromTheGapWithTheLastKnownState) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  std::map<std::string, std::string> created_rv;
  for (const char* name : {"a", "b", "c"}) {
    auto created = client->Create(kConfigMaps, "default", ConfigMap(name, "0"));
    ASSERT_TRUE(created.ok()) << created.error().message();
    created_rv[name] = Rv(*created);
  }
  // Every watch is refused with 410, so the informer can only learn of changes by listing.
  Faults faults;
  faults.force_gone_watches = 1000000;
  server->SetFaults(faults);

  EventLog log;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, FastOptions());
  informer.AddHandler(log.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 10s));
  ASSERT_TRUE(log.WaitForCount(3, 5s));

  ASSERT_TRUE(client->Delete(kConfigMaps, "default", "b").ok());
  ASSERT_TRUE(log.WaitForLine("delete default/b", 10s));
  std::vector<std::string> lines = log.lines();
  EXPECT_NE(std::find(lines.begin(), lines.end(), "delete default/b " + created_rv["b"]),
            lines.end());  // the state the informer last had
  EXPECT_EQ(informer.store().Get("default", "b"), nullptr);
  Informer::Stats stats = informer.stats();
  EXPECT_GE(stats.relists, 1u);
  EXPECT_GE(stats.watch_failures, 1u);
  EXPECT_EQ(stats.events, 0u);  // no watch ever delivered anything

  server->SetFaults({});
  auto d = client->Create(kConfigMaps, "default", ConfigMap("d", "0"));
  ASSERT_TRUE(d.ok()) << d.error().message();
  ASSERT_TRUE(log.WaitForLine("add default/d " + Rv(*d), 10s));
  EXPECT_EQ(StoreState(informer.store()), ServerState(*client, kConfigMaps));
}

TEST(Informer, HandlerAddedAfterSyncGetsTheExistingObjectsFirst) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  for (int i = 0; i < 20; ++i) {
    ASSERT_TRUE(server->CreateObject(kConfigMaps, ConfigMap("o-" + std::to_string(i), "0")).ok());
  }
  EventLog early;
  EventLog late;  // added after the sync
  Informer informer(*client, kConfigMaps, {.ns = "default"}, FastOptions());
  informer.AddHandler(early.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 10s));

  informer.AddHandler(late.Handler());
  ASSERT_TRUE(late.WaitForCount(20, 5s));
  auto x = client->Create(kConfigMaps, "default", ConfigMap("x", "0"));
  ASSERT_TRUE(x.ok()) << x.error().message();
  ASSERT_TRUE(late.WaitForCount(21, 5s));
  ASSERT_TRUE(early.WaitForCount(21, 5s));

  std::vector<std::string> lines = late.lines();
  std::set<std::string> synthetic(lines.begin(), lines.begin() + 20);
  std::set<std::string> existing;
  for (const ObjectPtr& o : informer.store().List()) {
    if (ObjectKey(*o) != "default/x") existing.insert("add " + ObjectKey(*o) + " " + Rv(*o));
  }
  EXPECT_EQ(synthetic, existing);
  EXPECT_EQ(lines[20], "add default/x " + Rv(*x));
  EXPECT_EQ(lines.size(), 21u);
}

TEST(Informer, ResyncDeliversEveryObjectAsAnUpdateToItself) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  for (const char* name : {"a", "b", "c"}) {
    ASSERT_TRUE(server->CreateObject(kConfigMaps, ConfigMap(name, "0")).ok());
  }
  InformerOptions options = FastOptions();
  options.resync_period = 100ms;
  std::mutex mu;
  std::condition_variable cv;
  std::map<std::string, int> resynced;
  int other_updates = 0;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, options);
  informer.AddHandler({.on_update = [&](const ObjectPtr& old_o, const ObjectPtr& new_o) {
    std::lock_guard lock(mu);
    if (old_o == new_o) {
      ++resynced[ObjectKey(*new_o)];
    } else {
      ++other_updates;
    }
    cv.notify_all();
  }});
  informer.Start();
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, 10s, [&] {
    return resynced.size() == 3 &&
           std::all_of(resynced.begin(), resynced.end(), [](auto& kv) { return kv.second >= 2; });
  }));
  EXPECT_EQ(other_updates, 0);
  EXPECT_GE(informer.stats().resyncs, 2u);
}

TEST(Informer, LabelSelectorKeepsOnlyMatchingObjects) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  ASSERT_TRUE(server->CreateObject(kConfigMaps, ConfigMap("x1", "0", "x")).ok());
  ASSERT_TRUE(server->CreateObject(kConfigMaps, ConfigMap("y1", "0", "y")).ok());
  EventLog log;
  Informer informer(*client, kConfigMaps, {.ns = "default", .label_selector = "app=x"},
                    FastOptions());
  informer.AddHandler(log.Handler());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 10s));
  ASSERT_TRUE(client->Create(kConfigMaps, "default", ConfigMap("y2", "0", "y")).ok());
  ASSERT_TRUE(client->Create(kConfigMaps, "default", ConfigMap("x2", "0", "x")).ok());
  ASSERT_TRUE(log.WaitForLine("add default/x2", 10s));  // events come in order: y2 came first
  std::vector<std::string> keys = informer.store().ListKeys();
  std::sort(keys.begin(), keys.end());
  EXPECT_EQ(keys, (std::vector<std::string>{"default/x1", "default/x2"}));
}

TEST(Informer, StopReturnsPromptlyWhileWatching) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Informer informer(*client, kConfigMaps, {.ns = "default"}, FastOptions());
  informer.Start();
  ASSERT_TRUE(informer.WaitForSync(SteadyClock::now() + 10s));
  ASSERT_TRUE(WaitUntil([&] { return server->stats().watches_open >= 1; }, 5s));
  auto start = SteadyClock::now();
  informer.Stop();
  EXPECT_LT(Ms(SteadyClock::now() - start), Ms(1s));
}

TEST(Informer, StopReturnsPromptlyDuringBackoffAndWaitForSyncGivesUp) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  Faults faults;
  faults.rate_500 = 1.0;
  server->SetFaults(faults);
  InformerOptions options;
  options.backoff_base = 10s;
  options.backoff_cap = 10s;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, options);
  informer.Start();
  ASSERT_TRUE(WaitUntil([&] { return informer.stats().list_failures >= 1; }, 10s));
  EXPECT_FALSE(informer.WaitForSync(SteadyClock::now() + 100ms));
  EXPECT_FALSE(informer.HasSynced());
  auto start = SteadyClock::now();
  informer.Stop();
  EXPECT_LT(Ms(SteadyClock::now() - start), Ms(1s));
}

TEST(Informer, StopReturnsPromptlyWhileTheFirstListHangs) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);  // a request timeout of 30 s
  ASSERT_TRUE(client);
  Faults faults;
  faults.latency = 60s;
  server->SetFaults(faults);
  uint64_t before = server->stats().requests;
  Informer informer(*client, kConfigMaps, {.ns = "default"}, FastOptions());
  informer.Start();
  ASSERT_TRUE(WaitUntil([&] { return server->stats().requests > before; }, 5s));  // in flight
  auto start = SteadyClock::now();
  informer.Stop();
  EXPECT_LT(Ms(SteadyClock::now() - start), Ms(1s));
  EXPECT_FALSE(informer.HasSynced());
  EXPECT_EQ(informer.stats().lists, 0u);
}

TEST(InformerFactory, SharesOneInformerPerResourceAndScope) {
  auto server = StartServer();
  ASSERT_TRUE(server);
  auto client = Connect(*server);
  ASSERT_TRUE(client);
  ASSERT_TRUE(server->CreateObject(kConfigMaps, ConfigMap("a", "0")).ok());
  InformerFactory factory(*client, FastOptions());
  auto cms = factory.Get(kConfigMaps, {.ns = "default"});
  EXPECT_EQ(factory.Get(kConfigMaps, {.ns = "default"}), cms);
  EXPECT_NE(factory.Get(kConfigMaps, {.ns = "default", .label_selector = "app=x"}), cms);
  EXPECT_NE(factory.Get(kConfigMaps, {.ns = "kube-system"}), cms);
  EXPECT_EQ(factory.Get(kNodes, {.ns = "ignored"}), factory.Get(kNodes, {}));

  factory.Start();
  ASSERT_TRUE(factory.WaitForSync(SteadyClock::now() + 10s));
  EXPECT_EQ(cms->store().size(), 1u);
  auto late = factory.Get(kNamespaces);  // made after Start: started at once
  ASSERT_TRUE(late->WaitForSync(SteadyClock::now() + 10s));
  EXPECT_NE(late->store().Get("", "default"), nullptr);
  factory.StopAll();
}

}  // namespace
}  // namespace hami::kube
