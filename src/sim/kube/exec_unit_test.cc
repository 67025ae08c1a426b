// pods/exec's decisions without a network: the request's options, the container as the
// registry picks it, the kubelet's address, the kubelet's request target, the route an upgrade
// takes, and the HTTP parsers of the kubelet's and the runtime's answers.
#include <gtest/gtest.h>

#include "sim/kube/exec.h"

namespace hami::sim::kube {
namespace {

using nlohmann::json;

TEST(ParseExecOptions, ReadsKubectlsQuery) {
  auto o = ParseExecOptions({{"command", "sh"},
                             {"command", "-c"},
                             {"command", "exit 7"},
                             {"container", "main"},
                             {"stdin", "true"},
                             {"stdout", "true"},
                             {"stderr", "1"},
                             {"tty", "false"}});
  ASSERT_TRUE(o.ok()) << o.status().message;
  EXPECT_EQ(o->command, (std::vector<std::string>{"sh", "-c", "exit 7"}));
  EXPECT_EQ(o->container, "main");
  EXPECT_TRUE(o->stdin);
  EXPECT_TRUE(o->stdout);
  EXPECT_TRUE(o->stderr);
  EXPECT_FALSE(o->tty);
}

TEST(ParseExecOptions, RefusesABadBooleanNoCommandAndNoStream) {
  auto bad = ParseExecOptions({{"command", "x"}, {"stdout", "yes"}});
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code, 400);
  EXPECT_EQ(bad.status().message, "stdout: invalid boolean \"yes\"");
  auto none = ParseExecOptions({{"stdout", "true"}});
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code, 400);
  auto quiet = ParseExecOptions({{"command", "x"}});
  ASSERT_FALSE(quiet.ok());
  EXPECT_EQ(quiet.status().message, "you must specify at least 1 of stdin, stdout, stderr");
}

json Pod(std::vector<std::string> containers, std::vector<std::string> init = {}) {
  json spec = {{"containers", json::array()}};
  for (const std::string& c : containers) spec["containers"].push_back({{"name", c}});
  if (!init.empty()) {
    spec["initContainers"] = json::array();
    for (const std::string& c : init) spec["initContainers"].push_back({{"name", c}});
  }
  return {{"metadata", {{"name", "p"}}}, {"spec", spec}};
}

TEST(ExecContainer, DefaultsToTheOnlyContainerAndNamesTheChoicesOtherwise) {
  auto only = ExecContainer(Pod({"main"}), "p", "");
  ASSERT_TRUE(only.ok());
  EXPECT_EQ(*only, "main");
  auto several = ExecContainer(Pod({"a", "b"}), "p", "");
  ASSERT_FALSE(several.ok());
  EXPECT_EQ(several.status().code, 400);
  EXPECT_EQ(several.status().reason, "BadRequest");
  EXPECT_EQ(several.status().message,
            "a container name must be specified for pod p, choose one of: [a b]");
  auto with_init = ExecContainer(Pod({"a", "b"}, {"setup"}), "p", "");
  ASSERT_FALSE(with_init.ok());
  EXPECT_EQ(with_init.status().message,
            "a container name must be specified for pod p, choose one of: [a b] or one of the "
            "init containers: [setup]");
}

TEST(ExecContainer, AcceptsAnyOfThePodsContainersAndRefusesOthers) {
  EXPECT_TRUE(ExecContainer(Pod({"a", "b"}, {"setup"}), "p", "b").ok());
  EXPECT_TRUE(ExecContainer(Pod({"a", "b"}, {"setup"}), "p", "setup").ok());
  auto bad = ExecContainer(Pod({"main"}), "p", "nosuch");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code, 400);
  EXPECT_EQ(bad.status().message, "container nosuch is not valid for pod p");
}

TEST(KubeletEndpointOf, TakesTheInternalIpAndThePublishedPort) {
  json node = {{"metadata", {{"name", "node-1"}}},
               {"status",
                {{"addresses", json::array({{{"type", "Hostname"}, {"address", "node-1"}},
                                            {{"type", "InternalIP"}, {"address", "127.0.0.1"}}})},
                 {"daemonEndpoints", {{"kubeletEndpoint", {{"Port", 41234}}}}}}}};
  auto e = KubeletEndpointOf(node);
  ASSERT_TRUE(e.ok()) << e.error().message();
  EXPECT_EQ(e->host, "127.0.0.1");
  EXPECT_EQ(e->port, 41234);

  node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] = 0;
  e = KubeletEndpointOf(node);
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().message(),
            "node \"node-1\" publishes no kubelet port "
            "(status.daemonEndpoints.kubeletEndpoint.Port is 0)");
  node["status"].erase("daemonEndpoints");
  e = KubeletEndpointOf(node);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("is not set"), std::string::npos);
  node["status"].erase("addresses");
  e = KubeletEndpointOf(node);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.error().message().find("node \"node-1\" has no address"), std::string::npos);
}

TEST(KubeletExecTarget, IsTheKubeletsPathWithTheFlagsItReads) {
  ExecPlan plan;
  plan.ns = "default";
  plan.pod = "web";
  plan.container = "main";
  plan.options.command = {"sh", "-c", "echo a&b=c /x"};
  plan.options.stdin = true;
  plan.options.stdout = true;
  EXPECT_EQ(KubeletExecTarget(plan),
            "/exec/default/web/main?command=sh&command=-c&command=echo%20a%26b%3Dc%20%2Fx"
            "&input=1&output=1");
  plan.options.stderr = true;
  plan.options.tty = true;
  EXPECT_NE(KubeletExecTarget(plan).find("&output=1&error=1&tty=1"), std::string::npos);
}

UpgradeRequest Upgrade(HeaderList headers) { return {"GET", std::move(headers)}; }

TEST(ChooseExecRoute, TranslatesV5AndProxiesTheRestInTheOrderOffered) {
  EXPECT_EQ(ChooseExecRoute(Upgrade({})), ExecRoute::kNoUpgrade);
  EXPECT_EQ(ChooseExecRoute(Upgrade({{"Upgrade", "websocket"}})), ExecRoute::kNoUpgrade);
  EXPECT_EQ(ChooseExecRoute(Upgrade({{"Connection", "Upgrade"},
                                     {"Upgrade", "websocket"},
                                     {"Sec-WebSocket-Protocol", "v5.channel.k8s.io"}})),
            ExecRoute::kTranslate);
  EXPECT_EQ(ChooseExecRoute(Upgrade({{"connection", "keep-alive, upgrade"},
                                     {"upgrade", "WebSocket"},
                                     {"sec-websocket-protocol", "foo, v5.channel.k8s.io"}})),
            ExecRoute::kTranslate);
  EXPECT_EQ(ChooseExecRoute(
                Upgrade({{"Connection", "Upgrade"},
                         {"Upgrade", "websocket"},
                         {"Sec-WebSocket-Protocol", "v4.channel.k8s.io, v5.channel.k8s.io"}})),
            ExecRoute::kProxy);
  EXPECT_EQ(ChooseExecRoute(Upgrade({{"Connection", "Upgrade"}, {"Upgrade", "websocket"}})),
            ExecRoute::kProxy);
  EXPECT_EQ(ChooseExecRoute(Upgrade({{"Connection", "Upgrade"},
                                     {"Upgrade", "SPDY/3.1"},
                                     {"X-Stream-Protocol-Version", "v4.channel.k8s.io"}})),
            ExecRoute::kProxy);
}

TEST(ParseResponseHead, ReadsTheStatusAndHeaders) {
  auto h = ParseResponseHead(
      "HTTP/1.1 101 Switching Protocols\r\nUpgrade: SPDY/3.1\r\nX-Stream-Protocol-Version: "
      "v4.channel.k8s.io\r\nX-Empty:");
  ASSERT_TRUE(h.ok()) << h.error().message();
  EXPECT_EQ(h->status, 101);
  EXPECT_EQ(h->Header("upgrade"), "SPDY/3.1");
  EXPECT_EQ(h->Header("X-Stream-Protocol-Version"), "v4.channel.k8s.io");
  EXPECT_EQ(h->Header("x-empty"), "");
  EXPECT_TRUE(ParseResponseHead("HTTP/1.0 302").ok());
  for (const char* bad : {"", "HTTP/2 200 OK", "HTTP/1.1 20 OK", "HTTP/1.1 2000 OK",
                          "HTTP/1.1 200 OK\r\nno colon", "SPDY/3.1 200 OK"}) {
    EXPECT_FALSE(ParseResponseHead(bad).ok()) << bad;
  }
}

TEST(DecodeChunked, JoinsChunksAndWaitsForTheLast) {
  auto whole = DecodeChunked("5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\n\r\n");
  ASSERT_TRUE(whole.ok());
  ASSERT_TRUE(whole->has_value());
  EXPECT_EQ(**whole, "hello world");
  auto part = DecodeChunked("5\r\nhel");
  ASSERT_TRUE(part.ok());
  EXPECT_FALSE(part->has_value());
  EXPECT_FALSE(DecodeChunked("zz\r\nhello\r\n").ok());
  EXPECT_FALSE(DecodeChunked("5\r\nhelloXX0\r\n\r\n").ok());
}

}  // namespace
}  // namespace hami::sim::kube
