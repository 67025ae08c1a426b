// Real clients that nobody here wrote, against `hami sim apiserver`: kubectl 1.32 (through
// /usr/bin/kubectl, the version dispatcher) and the official Python client (Debian's
// python3-kubernetes under /usr/bin/python3). Each test starts its own server on a free port
// with its own kubeconfig, discovery cache and HOME, and stops it with SIGTERM.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/temp_dir.h"
#include "support/subprocess.h"

namespace hami::testing {
namespace {

using nlohmann::json;
using ::testing::ContainsRegex;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kCommandTimeoutMs = 30000;

struct Outcome {
  int status;
  std::string out;  // stdout and stderr, merged
};

std::ostream& operator<<(std::ostream& os, const Outcome& o) {
  return os << "exit " << o.status << ", output:\n" << o.out;
}

std::string Hami() { return std::string(HAMI_BIN_DIR) + "/hami"; }

std::optional<std::string> FindKubectl() {
  for (const char* path : {"/usr/bin/kubectl", "/usr/local/bin/kubectl"}) {
    if (access(path, X_OK) == 0) return path;
  }
  return std::nullopt;
}

// Runs `argv` with stderr merged into stdout (the shell execs the program: same PID).
Outcome RunMerged(const std::vector<std::string>& argv,
                  const std::map<std::string, std::string>& env) {
  std::vector<std::string> sh = {"/bin/sh", "-c", "exec \"$0\" \"$@\" 2>&1"};
  sh.insert(sh.end(), argv.begin(), argv.end());
  Subprocess p(sh, env);
  std::string out = p.ReadAll(kCommandTimeoutMs);
  return {p.Wait(kCommandTimeoutMs), out};
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The columns of a kubectl table line, split on runs of two or more spaces (kubectl pads
// columns with at least three; single spaces occur inside headers like "NOMINATED NODE").
std::vector<std::string> Columns(const std::string& line) {
  std::vector<std::string> cols;
  size_t i = 0;
  while (i < line.size()) {
    size_t gap = line.find("  ", i);
    std::string col = line.substr(i, gap == std::string::npos ? std::string::npos : gap - i);
    if (!col.empty()) cols.push_back(col);
    if (gap == std::string::npos) break;
    i = line.find_first_not_of(' ', gap);
    if (i == std::string::npos) break;
  }
  return cols;
}

// One `hami sim apiserver` with its own directory (kubeconfig, kubectl cache, HOME).
class SimApiServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(dir_.ok());
    StartServer({});
  }

  void TearDown() override {
    if (server_ == nullptr) return;
    server_->Kill(SIGTERM);
    EXPECT_EQ(server_->Wait(20000), 0) << "hami sim apiserver did not stop cleanly at SIGTERM";
  }

  void StartServer(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {
        Hami(), "sim", "apiserver", "--port", "0", "--kubeconfig-out", Kubeconfig()};
    argv.insert(argv.end(), extra.begin(), extra.end());
    server_ = std::make_unique<Subprocess>(argv, std::map<std::string, std::string>{});
    std::optional<std::string> line = server_->WaitForLine("apiserver: ", 20000);
    ASSERT_TRUE(line.has_value()) << "hami sim apiserver printed no 'apiserver: URL' line";
    url_ = line->substr(std::string("apiserver: ").size());
    ASSERT_THAT(url_, ContainsRegex("^https?://[^:]+:[0-9]+$"));
  }

  // The server has to be restarted with other flags: stop the one SetUp started.
  void RestartServer(const std::vector<std::string>& extra) {
    server_->Kill(SIGTERM);
    ASSERT_EQ(server_->Wait(20000), 0);
    server_.reset();
    StartServer(extra);
  }

  std::string Kubeconfig() const { return dir_.File("kubeconfig"); }

  std::map<std::string, std::string> ClientEnv() const {
    return {{"KUBECONFIG", Kubeconfig()},
            {"KUBECACHEDIR", dir_.File("kube-cache")},
            {"HOME", dir_.path()}};
  }

  std::vector<std::string> KubectlArgv(const std::vector<std::string>& args) const {
    std::vector<std::string> argv = {kubectl_.value_or("kubectl"), "--cache-dir",
                                     dir_.File("kube-cache")};
    argv.insert(argv.end(), args.begin(), args.end());
    return argv;
  }

  Outcome RunKubectl(const std::vector<std::string>& args) const {
    return RunMerged(KubectlArgv(args), ClientEnv());
  }

  // kubectl `args` must succeed; returns its output.
  std::string KubectlOk(const std::vector<std::string>& args) const {
    Outcome o = RunKubectl(args);
    EXPECT_EQ(o.status, 0) << "kubectl " << ::testing::PrintToString(args) << ": " << o;
    return o.out;
  }

  std::string Write(const std::string& name, const std::string& text) const {
    std::string path = dir_.File(name);
    std::ofstream(path) << text;
    return path;
  }

  void RequireKubectl() {
    kubectl_ = FindKubectl();
    if (!kubectl_) GTEST_SKIP() << "kubectl is not installed (scripts/setup.sh installs it)";
  }

  Outcome Python(const std::string& check) const {
    return RunMerged(
        {"/usr/bin/python3", std::string(HAMI_KUBE_TEST_DIR) + "/python_client_checks.py", check},
        ClientEnv());
  }

  TempDir dir_{"hami-kube-clients"};
  std::unique_ptr<Subprocess> server_;
  std::string url_;
  std::optional<std::string> kubectl_;
};

std::string PodYaml(const std::string& name, const std::string& ns,
                    const std::map<std::string, std::string>& labels) {
  std::string yaml =
      "apiVersion: v1\nkind: Pod\nmetadata:\n  name: " + name + "\n  namespace: " + ns + "\n";
  if (!labels.empty()) {
    yaml += "  labels:\n";
    for (const auto& [k, v] : labels) yaml += "    " + k + ": \"" + v + "\"\n";
  }
  yaml +=
      "spec:\n  containers:\n  - name: main\n    image: busybox:1.36\n"
      "    resources:\n      limits:\n        nvidia.com/gpu: 1\n";
  return yaml;
}

std::string BindingJson(const std::string& pod, const std::string& node) {
  return json({{"apiVersion", "v1"},
               {"kind", "Binding"},
               {"metadata", {{"name", pod}}},
               {"target", {{"apiVersion", "v1"}, {"kind", "Node"}, {"name", node}}}})
      .dump();
}

class Kubectl : public SimApiServerTest {
 protected:
  void SetUp() override {
    RequireKubectl();
    if (IsSkipped()) return;
    SimApiServerTest::SetUp();
  }

  void CreatePods(const std::vector<std::string>& manifests) {
    std::string all;
    for (const std::string& m : manifests) all += "---\n" + m;
    KubectlOk({"create", "-f", Write("pods.yaml", all)});
  }

  std::string Jsonpath(const std::string& object, const std::string& path) {
    return KubectlOk({"get", object, "-o", "jsonpath={" + path + "}"});
  }
};

TEST_F(Kubectl, VersionReportsTheSimulatedServer) {
  std::string out = KubectlOk({"version", "-o", "json"});
  json v = json::parse(out, nullptr, false);
  ASSERT_FALSE(v.is_discarded()) << out;
  EXPECT_EQ(v["serverVersion"]["major"], "1");
  EXPECT_EQ(v["serverVersion"]["minor"], "32");
  EXPECT_EQ(v["serverVersion"]["gitVersion"], "v1.32.4-hami-sim");
}

TEST_F(Kubectl, ApplyCreatesThenConfiguresThenLeavesUnchangedAPodAndANode) {
  std::string pod = Write("pod.yaml", PodYaml("web", "default", {{"app", "web"}}));
  EXPECT_THAT(KubectlOk({"apply", "-f", pod}), HasSubstr("pod/web created"));
  Write("pod.yaml", PodYaml("web", "default", {{"app", "web"}, {"tier", "gpu"}}));
  EXPECT_THAT(KubectlOk({"apply", "-f", pod}), HasSubstr("pod/web configured"));
  EXPECT_THAT(KubectlOk({"apply", "-f", pod}), HasSubstr("pod/web unchanged"));
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.labels.tier"), "gpu");
  EXPECT_EQ(Jsonpath("pod/web", ".spec.containers[0].resources.limits.nvidia\\.com/gpu"), "1");

  std::string node_yaml =
      "apiVersion: v1\nkind: Node\nmetadata:\n  name: gpu-node-1\n  labels:\n"
      "    gpu: \"on\"\n";
  std::string node = Write("node.yaml", node_yaml);
  EXPECT_THAT(KubectlOk({"apply", "-f", node}), HasSubstr("node/gpu-node-1 created"));
  Write("node.yaml", node_yaml +
                         "  annotations:\n    hami.io/node-handshake: Requesting_2026-03-01 "
                         "12:00:00\n");
  EXPECT_THAT(KubectlOk({"apply", "-f", node}), HasSubstr("node/gpu-node-1 configured"));
  EXPECT_THAT(KubectlOk({"apply", "-f", node}), HasSubstr("node/gpu-node-1 unchanged"));
}

TEST_F(Kubectl, GetNodesAsJsonListsEveryNode) {
  for (const char* name : {"node-a", "node-b"}) {
    Write("node.yaml", std::string("apiVersion: v1\nkind: Node\nmetadata:\n  name: ") + name +
                           "\n  labels:\n    zone: z1\n");
    KubectlOk({"create", "-f", dir_.File("node.yaml")});
  }
  std::string out = KubectlOk({"get", "nodes", "-o", "json"});
  json list = json::parse(out, nullptr, false);
  ASSERT_FALSE(list.is_discarded()) << out;
  ASSERT_EQ(list["items"].size(), 2u) << out;
  std::vector<std::string> names;
  for (const json& node : list["items"]) {
    EXPECT_EQ(node["kind"], "Node");
    EXPECT_EQ(node["apiVersion"], "v1");
    EXPECT_EQ(node["metadata"]["labels"]["zone"], "z1");
    EXPECT_FALSE(node["metadata"]["uid"].get<std::string>().empty());
    names.push_back(node["metadata"]["name"]);
  }
  EXPECT_THAT(names, ElementsAre("node-a", "node-b"));
}

TEST_F(Kubectl, GetPodsPrintsKubectlsColumns) {
  CreatePods({PodYaml("web", "default", {}), PodYaml("sys", "kube-system", {})});

  std::vector<std::string> lines = Lines(KubectlOk({"get", "pods"}));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(Columns(lines[0]), ElementsAre("NAME", "READY", "STATUS", "RESTARTS", "AGE"));
  std::vector<std::string> row = Columns(lines[1]);
  ASSERT_EQ(row.size(), 5u) << lines[1];
  EXPECT_THAT(row, ElementsAre("web", "0/1", "Pending", "0", ::testing::MatchesRegex("[0-9]+s")));

  lines = Lines(KubectlOk({"get", "pods", "-A"}));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_THAT(Columns(lines[0]),
              ElementsAre("NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE"));
  EXPECT_THAT(Columns(lines[1]), ElementsAre("default", "web", "0/1", "Pending", "0",
                                             ::testing::MatchesRegex("[0-9]+s")));
  EXPECT_EQ(Columns(lines[2])[0], "kube-system");
  EXPECT_EQ(Columns(lines[2])[1], "sys");

  lines = Lines(KubectlOk({"get", "pods", "-o", "wide"}));
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_THAT(Columns(lines[0]), ElementsAre("NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP",
                                             "NODE", "NOMINATED NODE", "READINESS GATES"));
  EXPECT_THAT(Columns(lines[1]), ElementsAre("web", "0/1", "Pending", "0", ::testing::_, "<none>",
                                             "<none>", "<none>", "<none>"));
}

TEST_F(Kubectl, AnnotateOverwriteAndRemove) {
  CreatePods({PodYaml("web", "default", {})});
  EXPECT_THAT(KubectlOk({"annotate", "pod", "web", "hami.io/bind-phase=allocating"}),
              HasSubstr("pod/web annotated"));
  Outcome again = RunKubectl({"annotate", "pod", "web", "hami.io/bind-phase=success"});
  EXPECT_NE(again.status, 0) << again;
  EXPECT_THAT(again.out, HasSubstr("already has a value (allocating)"));
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.annotations.hami\\.io/bind-phase"), "allocating");

  KubectlOk({"annotate", "--overwrite", "pod", "web", "hami.io/bind-phase=success"});
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.annotations.hami\\.io/bind-phase"), "success");

  EXPECT_THAT(KubectlOk({"annotate", "pod", "web", "hami.io/bind-phase-"}),
              HasSubstr("pod/web annotated"));
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.annotations.hami\\.io/bind-phase"), "");
}

TEST_F(Kubectl, LabelThenSelectByLabel) {
  CreatePods({PodYaml("a", "default", {{"app", "x"}}), PodYaml("b", "default", {{"app", "y"}})});
  EXPECT_THAT(KubectlOk({"label", "pod", "a", "tier=gpu"}), HasSubstr("pod/a labeled"));
  EXPECT_EQ(KubectlOk({"get", "pods", "-l", "tier=gpu", "-o", "name"}), "pod/a\n");
  EXPECT_EQ(KubectlOk({"get", "pods", "-l", "tier!=gpu", "-o", "name"}), "pod/b\n");
  EXPECT_EQ(KubectlOk({"get", "pods", "-l", "app in (x,y),!tier", "-o", "name"}), "pod/b\n");
}

TEST_F(Kubectl, PatchMergeThenJsonPatchWithAFailingTest) {
  CreatePods({PodYaml("web", "default", {})});
  EXPECT_THAT(
      KubectlOk(
          {"patch", "pod", "web", "--type", "merge", "-p",
           R"({"metadata":{"labels":{"probe":"one"},"annotations":{"hami.io/vgpu-node":"n1"}}})"}),
      HasSubstr("pod/web patched"));
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.labels.probe"), "one");
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.annotations.hami\\.io/vgpu-node"), "n1");

  Outcome failed =
      RunKubectl({"patch", "pod", "web", "--type", "json", "-p",
                  R"([{"op":"test","path":"/metadata/labels/probe","value":"two"},)"
                  R"({"op":"replace","path":"/metadata/labels/probe","value":"three"}])"});
  EXPECT_NE(failed.status, 0) << failed;
  // 422 Invalid, which kubectl prints without "Error from server".
  EXPECT_THAT(failed.out, HasSubstr("The request is invalid"));
  EXPECT_THAT(failed.out, HasSubstr("/metadata/labels/probe"));
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.labels.probe"), "one");

  KubectlOk({"patch", "pod", "web", "--type", "json", "-p",
             R"([{"op":"test","path":"/metadata/labels/probe","value":"one"},)"
             R"({"op":"replace","path":"/metadata/labels/probe","value":"three"}])"});
  EXPECT_EQ(Jsonpath("pod/web", ".metadata.labels.probe"), "three");
}

TEST_F(Kubectl, WatchSeesChangesMadeByAnotherKubectl) {
  CreatePods({PodYaml("first", "default", {})});
  Subprocess watcher(KubectlArgv({"get", "pods", "--watch", "-o", "name"}), ClientEnv());
  EXPECT_EQ(watcher.ReadLine(kCommandTimeoutMs), "pod/first");  // the initial list

  CreatePods({PodYaml("second", "default", {})});
  EXPECT_EQ(watcher.ReadLine(kCommandTimeoutMs), "pod/second");
  KubectlOk({"label", "pod", "first", "seen=yes"});
  EXPECT_EQ(watcher.ReadLine(kCommandTimeoutMs), "pod/first");
  KubectlOk({"delete", "pod", "second"});
  EXPECT_EQ(watcher.ReadLine(kCommandTimeoutMs), "pod/second");

  watcher.Kill(SIGTERM);
  EXPECT_NE(watcher.Wait(kCommandTimeoutMs), -1);
}

TEST_F(Kubectl, CreateRawBindingSetsTheNodeOnce) {
  CreatePods({PodYaml("web", "default", {})});
  std::string path = "/api/v1/namespaces/default/pods/web/binding";
  KubectlOk({"create", "--raw", path, "-f", Write("binding.json", BindingJson("web", "node-a"))});
  EXPECT_EQ(Jsonpath("pod/web", ".spec.nodeName"), "node-a");

  Outcome again = RunKubectl(
      {"create", "--raw", path, "-f", Write("binding.json", BindingJson("web", "node-b"))});
  EXPECT_NE(again.status, 0) << again;
  EXPECT_THAT(again.out, HasSubstr("Conflict"));
  EXPECT_EQ(Jsonpath("pod/web", ".spec.nodeName"), "node-a");
}

TEST_F(Kubectl, DeleteThenNotFound) {
  CreatePods({PodYaml("web", "default", {})});
  EXPECT_THAT(KubectlOk({"delete", "pod", "web"}), HasSubstr("pod \"web\" deleted"));
  Outcome again = RunKubectl({"delete", "pod", "web"});
  EXPECT_NE(again.status, 0) << again;
  EXPECT_THAT(again.out, HasSubstr("Error from server (NotFound): pods \"web\" not found"));
  Outcome get = RunKubectl({"get", "pod", "web"});
  EXPECT_NE(get.status, 0) << get;
  EXPECT_THAT(get.out, HasSubstr("NotFound"));
}

TEST_F(Kubectl, FieldAndLabelSelectorsPickPods) {
  CreatePods({PodYaml("bound", "default", {{"gpu", "yes"}}),
              PodYaml("pending", "default", {{"gpu", "yes"}}),
              PodYaml("plain", "default", {{"gpu", "no"}})});
  KubectlOk({"create", "--raw", "/api/v1/namespaces/default/pods/bound/binding", "-f",
             Write("binding.json", BindingJson("bound", "node-a"))});

  EXPECT_EQ(KubectlOk({"get", "pods", "--field-selector", "spec.nodeName=node-a", "-o", "name"}),
            "pod/bound\n");
  EXPECT_EQ(KubectlOk({"get", "pods", "--field-selector", "spec.nodeName=", "-o", "name"}),
            "pod/pending\npod/plain\n");
  EXPECT_EQ(KubectlOk({"get", "pods", "-l", "gpu=yes", "--field-selector", "spec.nodeName=", "-o",
                       "name"}),
            "pod/pending\n");
  EXPECT_EQ(KubectlOk({"get", "pods", "-A", "--field-selector",
                       "metadata.namespace=default,status.phase=Pending", "-o", "name"}),
            "pod/bound\npod/pending\npod/plain\n");
  Outcome bogus = RunKubectl({"get", "pods", "--field-selector", "bogus=1"});
  EXPECT_NE(bogus.status, 0) << bogus;
  EXPECT_THAT(bogus.out, HasSubstr("field label not supported: bogus"));
}

class PythonClient : public SimApiServerTest {
 protected:
  void SetUp() override {
    if (access("/usr/bin/python3", X_OK) != 0) GTEST_SKIP() << "/usr/bin/python3 is absent";
    SimApiServerTest::SetUp();
  }

  // Runs one check of python_client_checks.py; it exits 77 when /usr/bin/python3 cannot import
  // the kubernetes module (scripts/setup.sh installs python3-kubernetes).
  void Check(const std::string& check) {
    Outcome o = Python(check);
    if (o.status == 77) GTEST_SKIP() << o.out;
    EXPECT_EQ(o.status, 0) << o;
    EXPECT_THAT(o.out, HasSubstr("ok " + check)) << o;
  }
};

TEST_F(PythonClient, ListsWithLabelSelectorAndPagination) {
  Check("list_with_label_selector_and_pagination");
}

TEST_F(PythonClient, WatchSeesAddedModifiedDeletedInOrder) {
  Check("watch_sees_added_modified_deleted_in_order");
}

TEST_F(PythonClient, PatchWithStaleResourceVersionIsRefusedWith409) {
  Check("stale_resource_version_patch_refused_with_409");
}

TEST_F(PythonClient, ReadsAndBindsAPod) { Check("read_and_bind_pod"); }

TEST_F(PythonClient, ServesPriorityClassesAndResolvesAPodsPriority) {
  Check("priority_classes_and_pod_priority");
}

TEST_F(PythonClient, ReadsAndWritesTheDraKindsThroughDiscovery) {
  Check("dra_resources_through_the_dynamic_client");
}

TEST_F(PythonClient, WatchFromATooOldResourceVersionRaises410) {
  ASSERT_NO_FATAL_FAILURE(RestartServer({"--watch-window", "5"}));
  Check("too_old_resource_version_raises_410");
}

TEST_F(PythonClient, Injected429ReachesTheClientAndTheResetClearsIt) {
  Check("injected_429_reaches_the_client");
}

}  // namespace
}  // namespace hami::testing
