#include "kube/patch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

namespace hami::kube {
namespace {

using nlohmann::json;
using ::testing::HasSubstr;

json J(const char* text) { return json::parse(text); }

// ---- Merge patch (RFC 7386) ----

TEST(MergePatch, FollowsTheRfcExamples) {
  struct Case {
    const char* target;
    const char* patch;
    const char* result;
  };
  for (const Case& c : {
           Case{R"({"a":"b"})", R"({"a":"c"})", R"({"a":"c"})"},
           Case{R"({"a":"b"})", R"({"b":"c"})", R"({"a":"b","b":"c"})"},
           Case{R"({"a":"b"})", R"({"a":null})", R"({})"},
           Case{R"({"a":"b","b":"c"})", R"({"a":null})", R"({"b":"c"})"},
           Case{R"({"a":["b"]})", R"({"a":"c"})", R"({"a":"c"})"},
           Case{R"({"a":"c"})", R"({"a":["b"]})", R"({"a":["b"]})"},
           Case{R"({"a":{"b":"c"}})", R"({"a":{"b":"d","c":null}})", R"({"a":{"b":"d"}})"},
           Case{R"({"a":[{"b":"c"}]})", R"({"a":[1]})", R"({"a":[1]})"},
           Case{R"(["a","b"])", R"(["c","d"])", R"(["c","d"])"},
           Case{R"({"a":"b"})", R"(["c"])", R"(["c"])"},
           Case{R"({"a":"foo"})", R"(null)", R"(null)"},
           Case{R"({"a":"foo"})", R"("bar")", R"("bar")"},
           Case{R"({"e":null})", R"({"a":1})", R"({"e":null,"a":1})"},
           Case{R"([1,2])", R"({"a":"b","c":null})", R"({"a":"b"})"},
           Case{R"({})", R"({"a":{"bb":{"ccc":null}}})", R"({"a":{"bb":{}}})"},
       }) {
    EXPECT_EQ(ApplyMergePatch(J(c.target), J(c.patch)), J(c.result))
        << c.target << " + " << c.patch;
  }
}

TEST(MergePatch, AnnotatesAndLabelsAsKubectlSends) {
  json pod = J(R"({"metadata":{"name":"p","labels":{"app":"x","old":"y"},
                   "annotations":{"hami.io/vgpu-node":"n1"}},"spec":{"nodeName":"n1"}})");
  json out = ApplyMergePatch(pod, J(R"({"metadata":{"labels":{"old":null,"new":"z"},
                 "annotations":{"hami.io/bind-phase":"allocating"}}})"));
  EXPECT_EQ(out["metadata"]["labels"], J(R"({"app":"x","new":"z"})"));
  EXPECT_EQ(out["metadata"]["annotations"],
            J(R"({"hami.io/vgpu-node":"n1","hami.io/bind-phase":"allocating"})"));
  EXPECT_EQ(out["spec"], pod["spec"]);
}

// ---- JSON patch (RFC 6902) ----

Result<json> Patch(const char* target, const char* patch) {
  return ApplyJsonPatch(J(target), J(patch));
}

json MustPatch(const char* target, const char* patch) {
  auto r = Patch(target, patch);
  EXPECT_TRUE(r.ok()) << patch << ": " << r.error().message();
  return r.ok() ? *r : json();
}

void ExpectPatchError(const char* target, const char* patch, std::string_view why) {
  auto r = Patch(target, patch);
  ASSERT_FALSE(r.ok()) << patch << " gave " << r->dump();
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr(why)) << patch;
}

TEST(JsonPatch, FollowsTheRfcExamples) {
  EXPECT_EQ(MustPatch(R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux"}])"),
            J(R"({"baz":"qux","foo":"bar"})"));
  EXPECT_EQ(
      MustPatch(R"({"foo":["bar","baz"]})", R"([{"op":"add","path":"/foo/1","value":"qux"}])"),
      J(R"({"foo":["bar","qux","baz"]})"));
  EXPECT_EQ(MustPatch(R"({"baz":"qux","foo":"bar"})", R"([{"op":"remove","path":"/baz"}])"),
            J(R"({"foo":"bar"})"));
  EXPECT_EQ(MustPatch(R"({"foo":["bar","qux","baz"]})", R"([{"op":"remove","path":"/foo/1"}])"),
            J(R"({"foo":["bar","baz"]})"));
  EXPECT_EQ(MustPatch(R"({"baz":"qux","foo":"bar"})",
                      R"([{"op":"replace","path":"/baz","value":"boo"}])"),
            J(R"({"baz":"boo","foo":"bar"})"));
  EXPECT_EQ(MustPatch(R"({"foo":{"bar":"baz","waldo":"fred"},"qux":{"corge":"grault"}})",
                      R"([{"op":"move","from":"/foo/waldo","path":"/qux/thud"}])"),
            J(R"({"foo":{"bar":"baz"},"qux":{"corge":"grault","thud":"fred"}})"));
  EXPECT_EQ(MustPatch(R"({"foo":["all","grass","cows","eat"]})",
                      R"([{"op":"move","from":"/foo/1","path":"/foo/3"}])"),
            J(R"({"foo":["all","cows","eat","grass"]})"));
  EXPECT_EQ(MustPatch(R"({"baz":"qux","foo":["a",2,"c"]})",
                      R"([{"op":"test","path":"/baz","value":"qux"},
                          {"op":"test","path":"/foo/1","value":2}])"),
            J(R"({"baz":"qux","foo":["a",2,"c"]})"));
  ExpectPatchError(R"({"baz":"qux"})", R"([{"op":"test","path":"/baz","value":"bar"}])",
                   "testing value /baz failed");
  EXPECT_EQ(
      MustPatch(R"({"foo":"bar"})", R"([{"op":"add","path":"/child","value":{"grandchild":{}}}])"),
      J(R"({"foo":"bar","child":{"grandchild":{}}})"));
  EXPECT_EQ(
      MustPatch(R"({"foo":"bar"})", R"([{"op":"add","path":"/baz","value":"qux","xyz":123}])"),
      J(R"({"foo":"bar","baz":"qux"})"));
  ExpectPatchError(R"({"foo":"bar"})", R"([{"op":"add","path":"/baz/bat","value":"qux"}])",
                   "path \"/baz/bat\" does not exist (no /baz)");
  EXPECT_EQ(MustPatch(R"({"/":9,"~1":10})", R"([{"op":"test","path":"/~01","value":10}])"),
            J(R"({"/":9,"~1":10})"));
  ExpectPatchError(R"({"/":9,"~1":10})", R"([{"op":"test","path":"/~01","value":"10"}])",
                   "testing value /~01 failed");
  EXPECT_EQ(
      MustPatch(R"({"foo":["bar"]})", R"([{"op":"add","path":"/foo/-","value":["abc","def"]}])"),
      J(R"({"foo":["bar",["abc","def"]]})"));
}

TEST(JsonPatch, UnescapesAnnotationKeysInPointers) {
  json out = MustPatch(R"({"metadata":{"annotations":{"a/b~c":"old"}}})",
                       R"([{"op":"add","path":"/metadata/annotations/hami.io~1x","value":"1"},
                           {"op":"replace","path":"/metadata/annotations/a~1b~0c","value":"new"}])");
  EXPECT_EQ(out, J(R"({"metadata":{"annotations":{"hami.io/x":"1","a/b~c":"new"}}})"));
}

TEST(JsonPatch, FailedTestNamesThePathAsKubectlPrintsIt) {
  auto r = Patch(R"({"metadata":{"labels":{"probe":"a"}}})",
                 R"([{"op":"test","path":"/metadata/labels/probe","value":"b"},
                     {"op":"replace","path":"/metadata/labels/probe","value":"c"}])");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message(),
            "JSON patch operation 0 (test): testing value /metadata/labels/probe failed");
}

TEST(JsonPatch, TestComparesNumbersByValueAndContainersDeeply) {
  MustPatch(R"({"a":1,"b":{"x":[1,{"y":null}]}})",
            R"([{"op":"test","path":"/a","value":1.0},
                {"op":"test","path":"/b","value":{"x":[1,{"y":null}]}},
                {"op":"test","path":"","value":{"b":{"x":[1,{"y":null}]},"a":1}}])");
  ExpectPatchError(R"({"b":[1,2]})", R"([{"op":"test","path":"/b","value":[2,1]}])",
                   "testing value /b failed");
}

TEST(JsonPatch, RootPathAndSpecialTokens) {
  EXPECT_EQ(MustPatch(R"({"a":1})", R"([{"op":"replace","path":"","value":[1]}])"), J("[1]"));
  EXPECT_EQ(MustPatch(R"({"a":1})", R"([{"op":"add","path":"","value":{"b":2}}])"),
            J(R"({"b":2})"));
  EXPECT_EQ(MustPatch(R"({"a":1})", R"([{"op":"add","path":"/-","value":2}])"),
            J(R"({"a":1,"-":2})"));
  EXPECT_EQ(MustPatch(R"({"a":1})", R"([{"op":"add","path":"/","value":2}])"),
            J(R"({"a":1,"":2})"));
  EXPECT_EQ(MustPatch(R"({"a":null})", R"([{"op":"test","path":"/a","value":null}])"),
            J(R"({"a":null})"));
  EXPECT_EQ(MustPatch(R"({"a":[1,2]})", R"([{"op":"add","path":"/a/2","value":3}])"),
            J(R"({"a":[1,2,3]})"));
}

TEST(JsonPatch, MoveAndCopyWithinTheDocument) {
  EXPECT_EQ(MustPatch(R"({"a":{"b":1}})", R"([{"op":"copy","from":"/a","path":"/a/c"}])"),
            J(R"({"a":{"b":1,"c":{"b":1}}})"));
  EXPECT_EQ(MustPatch(R"({"a":{"b":1}})", R"([{"op":"move","from":"/a","path":"/a"}])"),
            J(R"({"a":{"b":1}})"));
  EXPECT_EQ(MustPatch(R"({"a":{"b":{"c":1}}})", R"([{"op":"move","from":"/a/b","path":"/a"}])"),
            J(R"({"a":{"c":1}})"));
  EXPECT_EQ(MustPatch(R"({"a":[1,2,3]})", R"([{"op":"move","from":"/a/0","path":"/a/-"}])"),
            J(R"({"a":[2,3,1]})"));
}

TEST(JsonPatch, RejectsMalformedPatchesNamingTheOperationAndField) {
  ExpectPatchError("{}", R"({"op":"add"})",
                   "the patch must be an array of operations, not an object");
  ExpectPatchError("{}", R"([1])", "JSON patch operation 0 (?): an operation must be an object");
  ExpectPatchError("{}", R"([{"op":"test","path":"","value":{}},{"path":"/a"}])",
                   "JSON patch operation 1 (?): missing \"op\"");
  ExpectPatchError("{}", R"([{"op":1,"path":"/a"}])", "\"op\" must be a string");
  ExpectPatchError("{}", R"([{"op":"merge","path":"/a"}])",
                   "operation 0 (merge): unknown op \"merge\"");
  ExpectPatchError("{}", R"([{"op":"add","value":1}])", "operation 0 (add): missing \"path\"");
  ExpectPatchError("{}", R"([{"op":"add","path":5,"value":1}])",
                   "\"path\" must be a string, not a number");
  ExpectPatchError("{}", R"([{"op":"add","path":true,"value":1}])",
                   "\"path\" must be a string, not a boolean");
  ExpectPatchError("{}", R"([{"op":"add","path":"a","value":1}])",
                   "path \"a\" must be empty or begin with '/'");
  ExpectPatchError("{}", R"([{"op":"add","path":"/a~2","value":1}])",
                   "path \"/a~2\": '~' must be followed by 0 or 1");
  ExpectPatchError("{}", R"([{"op":"add","path":"/a~","value":1}])", "'~' must be followed");
  for (const char* op : {"add", "replace", "test"}) {
    std::string patch = std::string(R"([{"op":")") + op + R"(","path":"/a"}])";
    ExpectPatchError(R"({"a":1})", patch.c_str(), std::string(op) + "): missing \"value\"");
  }
  ExpectPatchError(R"({"a":1})", R"([{"op":"move","path":"/b"}])",
                   "operation 0 (move): missing \"from\"");
  ExpectPatchError(R"({"a":1})", R"([{"op":"copy","path":"/b","from":["/a"]}])",
                   "operation 0 (copy): \"from\" must be a string, not an array");
}

TEST(JsonPatch, RejectsPathsThatDoNotExist) {
  ExpectPatchError(R"({"a":1})", R"([{"op":"remove","path":"/b"}])",
                   "operation 0 (remove): path \"/b\" does not exist (no /b)");
  ExpectPatchError(R"({"a":1})", R"([{"op":"replace","path":"/b","value":2}])",
                   "path \"/b\" does not exist");
  ExpectPatchError(R"({"a":1})", R"([{"op":"test","path":"/b","value":1}])",
                   "path \"/b\" does not exist");
  ExpectPatchError(R"({"a":1})", R"([{"op":"move","from":"/b","path":"/c"}])",
                   "path \"/b\" does not exist");
  ExpectPatchError(R"({"a":1})", R"([{"op":"copy","from":"/b","path":"/c"}])",
                   "path \"/b\" does not exist");
  ExpectPatchError(R"({"a":1})", R"([{"op":"move","from":"/b","path":"/b"}])",
                   "path \"/b\" does not exist");
  ExpectPatchError(R"({"a":{"b":1}})", R"([{"op":"add","path":"/x/y/z","value":1}])",
                   "path \"/x/y/z\" does not exist (no /x)");
}

TEST(JsonPatch, RejectsBadArrayIndices) {
  const char* doc = R"({"a":[1,2]})";
  ExpectPatchError(doc, R"([{"op":"add","path":"/a/3","value":0}])",
                   "path \"/a/3\": index 3 is out of range (the array has 2 elements)");
  ExpectPatchError(doc, R"([{"op":"remove","path":"/a/2"}])", "index 2 is out of range");
  ExpectPatchError(doc, R"([{"op":"replace","path":"/a/2","value":0}])", "index 2 is out of range");
  ExpectPatchError(R"({"a":[]})", R"([{"op":"remove","path":"/a/0"}])",
                   "index 0 is out of range (the array has 0 elements)");
  ExpectPatchError(doc, R"([{"op":"add","path":"/a/01","value":0}])",
                   "\"01\" is not an array index");
  ExpectPatchError(doc, R"([{"op":"add","path":"/a/x","value":0}])", "\"x\" is not an array index");
  ExpectPatchError(doc, R"([{"op":"add","path":"/a/-1","value":0}])",
                   "\"-1\" is not an array index");
  ExpectPatchError(doc, R"([{"op":"add","path":"/a/99999999999999999999","value":0}])",
                   "is not an array index");
  ExpectPatchError(doc, R"([{"op":"remove","path":"/a/-"}])", "path \"/a/-\" does not exist");
  ExpectPatchError(doc, R"([{"op":"replace","path":"/a/-/b","value":0}])", "does not exist");
}

TEST(JsonPatch, RejectsDescendingIntoScalarsRemovingTheRootAndMovingIntoAChild) {
  ExpectPatchError(R"({"a":"s"})", R"([{"op":"add","path":"/a/b","value":0}])",
                   "path \"/a/b\": /a is a string, not an object or array");
  ExpectPatchError(R"({"a":"s"})", R"([{"op":"remove","path":"/a/b"}])", "/a is a string");
  ExpectPatchError(R"({"a":{"b":3}})", R"([{"op":"test","path":"/a/b/c","value":0}])",
                   "/a/b is a number");
  ExpectPatchError(R"(5)", R"([{"op":"add","path":"/a","value":0}])", "the document is a number");
  ExpectPatchError(R"({"a":1})", R"([{"op":"remove","path":""}])",
                   "cannot remove the whole document");
  ExpectPatchError(R"({"a":{"b":1}})", R"([{"op":"move","from":"/a","path":"/a/b/c"}])",
                   "cannot move \"/a\" into its own child \"/a/b/c\"");
  ExpectPatchError(R"({"a":{"b":1}})", R"([{"op":"move","from":"","path":"/x"}])",
                   "into its own child");
}

TEST(JsonPatch, LaterOperationsSeeEarlierOnesAndAnyFailureFailsThePatch) {
  const json target = J(R"({"metadata":{"annotations":{}}})");
  auto ok = ApplyJsonPatch(target, J(R"([
      {"op":"add","path":"/metadata/annotations/hami.io~1a","value":"1"},
      {"op":"test","path":"/metadata/annotations/hami.io~1a","value":"1"},
      {"op":"copy","from":"/metadata/annotations/hami.io~1a","path":"/metadata/annotations/b"}])"));
  ASSERT_TRUE(ok.ok()) << ok.error().message();
  EXPECT_EQ((*ok)["metadata"]["annotations"], J(R"({"hami.io/a":"1","b":"1"})"));
  auto bad = ApplyJsonPatch(target, J(R"([
      {"op":"add","path":"/metadata/annotations/a","value":"1"},
      {"op":"remove","path":"/metadata/annotations/zz"}])"));
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.error().message(), HasSubstr("operation 1 (remove)"));
  EXPECT_EQ(target, J(R"({"metadata":{"annotations":{}}})"));
}

// ---- Strategic merge patch ----

json Smp(const json& target, const char* patch) {
  auto r = ApplyStrategicMergePatch(target, J(patch));
  EXPECT_TRUE(r.ok()) << patch << ": " << r.error().message();
  return r.ok() ? *r : json();
}

void ExpectSmpError(const json& target, const char* patch, std::string_view why) {
  auto r = ApplyStrategicMergePatch(target, J(patch));
  ASSERT_FALSE(r.ok()) << patch << " gave " << r->dump();
  EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
  EXPECT_THAT(r.error().message(), HasSubstr(why)) << patch;
}

// True when no object anywhere in `j` has a key starting with '$'.
bool NoDirectives(const json& j) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (!it.key().empty() && it.key()[0] == '$') return false;
      if (!NoDirectives(*it)) return false;
    }
  } else if (j.is_array()) {
    for (const json& e : j) {
      if (!NoDirectives(e)) return false;
    }
  }
  return true;
}

const json kPod = J(R"({
  "apiVersion":"v1","kind":"Pod",
  "metadata":{"name":"p","namespace":"default","resourceVersion":"7",
              "labels":{"app":"web"},"annotations":{"a":"1"},"finalizers":["f1","f2"]},
  "spec":{
    "containers":[
      {"name":"main","image":"busybox:1.35",
       "resources":{"limits":{"nvidia.com/gpu":"1","nvidia.com/gpumem":"3000"}},
       "env":[{"name":"A","value":"1"},{"name":"B","value":"2"}],
       "ports":[{"containerPort":80,"protocol":"TCP"}],
       "volumeMounts":[{"mountPath":"/data","name":"d"}],
       "args":["x","y"]},
      {"name":"side","image":"sidecar:1"}],
    "tolerations":[{"key":"t1","operator":"Exists"}],
    "volumes":[{"name":"d","emptyDir":{}}]},
  "status":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False"}]}})");

TEST(StrategicMergePatch, KubectlApplyChangesTheImageAndKeepsContainerResources) {
  json out = Smp(kPod, R"({
    "metadata":{"annotations":{"kubectl.kubernetes.io/last-applied-configuration":"{}"}},
    "spec":{"$setElementOrder/containers":[{"name":"main"},{"name":"side"}],
            "containers":[{"image":"busybox:1.36","name":"main"}]}})");
  const json& main = out["spec"]["containers"][0];
  EXPECT_EQ(main["name"], "main");
  EXPECT_EQ(main["image"], "busybox:1.36");
  EXPECT_EQ(main["resources"], kPod["spec"]["containers"][0]["resources"]);
  EXPECT_EQ(main["env"], kPod["spec"]["containers"][0]["env"]);
  EXPECT_EQ(out["spec"]["containers"][1], kPod["spec"]["containers"][1]);
  EXPECT_EQ(out["metadata"]["annotations"]["a"], "1");
  EXPECT_EQ(out["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"],
            "{}");
  EXPECT_TRUE(NoDirectives(out)) << out.dump();
  json expected = kPod;
  expected["spec"]["containers"][0]["image"] = "busybox:1.36";
  expected["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"] = "{}";
  EXPECT_EQ(out, expected);
}

TEST(StrategicMergePatch, ServicePortsMergeByPortAndWebhooksByName) {
  const json service = json::parse(R"({"spec":{"ports":[
      {"name":"http","port":443,"protocol":"TCP","targetPort":9443},
      {"name":"metrics","port":9395,"protocol":"TCP","targetPort":9395}]}})");
  json out = Smp(service, R"({"spec":{"$setElementOrder/ports":[{"port":443},{"port":9396}],
      "ports":[{"name":"metrics","port":9396},{"$patch":"delete","port":9395}]}})");
  EXPECT_EQ(out["spec"]["ports"],
            json::parse(R"([{"name":"http","port":443,"protocol":"TCP","targetPort":9443},
                            {"name":"metrics","port":9396}])"));
  const json hooks = json::parse(R"({"webhooks":[{"name":"a.b.c","clientConfig":{"url":"u"},
      "rules":[{"scope":"*"}]}]})");
  out = Smp(hooks, R"({"$setElementOrder/webhooks":[{"name":"a.b.c"}],
      "webhooks":[{"name":"a.b.c","rules":[{"operations":["CREATE"]}]}]})");
  EXPECT_EQ(out["webhooks"][0]["clientConfig"]["url"], "u");
  EXPECT_EQ(out["webhooks"][0]["rules"], json::parse(R"([{"operations":["CREATE"]}])"));
}

TEST(StrategicMergePatch, MapsMergeAndNullDeletesAsInAMergePatch) {
  json out = Smp(kPod, R"({"metadata":{"resourceVersion":"7","labels":{"app":null,"tier":"x"},
                                      "annotations":{"hami.io/vgpu-node":"n1"}}})");
  EXPECT_EQ(out["metadata"]["labels"], J(R"({"tier":"x"})"));
  EXPECT_EQ(out["metadata"]["annotations"], J(R"({"a":"1","hami.io/vgpu-node":"n1"})"));
  EXPECT_EQ(out["spec"], kPod["spec"]);
  EXPECT_EQ(Smp(kPod, R"({"status":null})").contains("status"), false);
  EXPECT_EQ(Smp(kPod, "{}"), kPod);
}

TEST(StrategicMergePatch, KeyedListsMergeByTheirKeysKeepingPlacesAndAppendingNewOnes) {
  json out = Smp(kPod, R"({"spec":{"containers":[
      {"name":"side","image":"sidecar:2"},
      {"name":"main","env":[{"name":"B","value":"20"},{"name":"C","value":"3"},{"name":"A","value":null}],
       "ports":[{"containerPort":80,"name":"http"},{"containerPort":443}],
       "volumeMounts":[{"mountPath":"/data","readOnly":true}]},
      {"name":"new","image":"n:1"}]}})");
  const json& c = out["spec"]["containers"];
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0]["name"], "main");
  EXPECT_EQ(c[1], J(R"({"name":"side","image":"sidecar:2"})"));
  EXPECT_EQ(c[2], J(R"({"name":"new","image":"n:1"})"));
  EXPECT_EQ(c[0]["env"], J(R"([{"name":"A"},{"name":"B","value":"20"},{"name":"C","value":"3"}])"));
  EXPECT_EQ(c[0]["ports"],
            J(R"([{"containerPort":80,"protocol":"TCP","name":"http"},{"containerPort":443}])"));
  EXPECT_EQ(c[0]["volumeMounts"], J(R"([{"mountPath":"/data","name":"d","readOnly":true}])"));
  EXPECT_EQ(c[0]["resources"], kPod["spec"]["containers"][0]["resources"]);
}

TEST(StrategicMergePatch, ConditionsAddressesTaintsAndOwnerReferencesMergeByTheirKeys) {
  const json node = J(R"({"metadata":{"ownerReferences":[{"uid":"u1","name":"a"}]},
    "spec":{"taints":[{"key":"k1","effect":"NoSchedule"}]},
    "status":{"conditions":[{"type":"Ready","status":"True"},{"type":"MemoryPressure","status":"False"}],
              "addresses":[{"type":"InternalIP","address":"10.0.0.1"}]}})");
  json out = Smp(node, R"({"metadata":{"ownerReferences":[{"uid":"u2","name":"b"}]},
    "spec":{"taints":[{"key":"k1","effect":"NoExecute"}]},
    "status":{"conditions":[{"type":"Ready","status":"False"}],
              "addresses":[{"type":"Hostname","address":"n1"}]}})");
  EXPECT_EQ(out["metadata"]["ownerReferences"],
            J(R"([{"uid":"u1","name":"a"},{"uid":"u2","name":"b"}])"));
  EXPECT_EQ(out["spec"]["taints"], J(R"([{"key":"k1","effect":"NoExecute"}])"));
  EXPECT_EQ(out["status"]["conditions"],
            J(R"([{"type":"Ready","status":"False"},{"type":"MemoryPressure","status":"False"}])"));
  EXPECT_EQ(
      out["status"]["addresses"],
      J(R"([{"type":"InternalIP","address":"10.0.0.1"},{"type":"Hostname","address":"n1"}])"));
}

TEST(StrategicMergePatch, OtherListsAreReplaced) {
  json out = Smp(kPod, R"({"spec":{"tolerations":[{"key":"t2","value":null}],
                                   "containers":[{"name":"main","args":["z"]}]}})");
  EXPECT_EQ(out["spec"]["tolerations"], J(R"([{"key":"t2"}])"));  // nulls in objects dropped
  EXPECT_EQ(Smp(kPod, R"({"spec":{"x":[null,1,[{"a":null}]]}})")["spec"]["x"],
            J(R"([null,1,[{}]])"));
  EXPECT_EQ(out["spec"]["containers"][0]["args"], J(R"(["z"])"));
}

TEST(StrategicMergePatch, FinalizersMergeAsAUnionAndDeleteFromPrimitiveListRemoves) {
  json out = Smp(kPod, R"({"metadata":{"finalizers":["f2","f3"]}})");
  EXPECT_EQ(out["metadata"]["finalizers"], J(R"(["f1","f2","f3"])"));
  out = Smp(kPod, R"({"metadata":{"$deleteFromPrimitiveList/finalizers":["f1","zz"],
                                  "finalizers":["f4"]}})");
  EXPECT_EQ(out["metadata"]["finalizers"], J(R"(["f2","f4"])"));
  EXPECT_TRUE(NoDirectives(out));
  // A list that does not exist has nothing to delete.
  out =
      Smp(J(R"({"metadata":{}})"), R"({"metadata":{"$deleteFromPrimitiveList/finalizers":["a"]}})");
  EXPECT_EQ(out, J(R"({"metadata":{}})"));
}

TEST(StrategicMergePatch, PatchDeleteInAListRemovesTheElementWithThatKey) {
  json out = Smp(kPod, R"({"spec":{"containers":[{"$patch":"delete","name":"side"},
                                                 {"$patch":"delete","name":"absent"}]}})");
  ASSERT_EQ(out["spec"]["containers"].size(), 1u);
  EXPECT_EQ(out["spec"]["containers"][0], kPod["spec"]["containers"][0]);
}

TEST(StrategicMergePatch, PatchReplaceInAListReplacesTheList) {
  json out =
      Smp(kPod, R"({"spec":{"containers":[{"name":"only","image":"o:1"},{"$patch":"replace"}]}})");
  EXPECT_EQ(out["spec"]["containers"], J(R"([{"name":"only","image":"o:1"}])"));
  out = Smp(kPod, R"({"metadata":{"finalizers":[{"$patch":"replace"},"g"]}})");
  EXPECT_EQ(out["metadata"]["finalizers"], J(R"(["g"])"));
}

TEST(StrategicMergePatch, PatchReplaceAndDeleteInAnObject) {
  json out = Smp(kPod, R"({"metadata":{"labels":{"$patch":"replace","only":"1","gone":null}}})");
  EXPECT_EQ(out["metadata"]["labels"], J(R"({"only":"1"})"));
  out = Smp(kPod, R"({"metadata":{"annotations":{"$patch":"delete"}}})");
  EXPECT_FALSE(out["metadata"].contains("annotations"));
  EXPECT_EQ(out["metadata"]["labels"], kPod["metadata"]["labels"]);
}

TEST(StrategicMergePatch, RetainKeysDropsUnlistedFields) {
  const json target =
      J(R"({"spec":{"strategy":{"type":"RollingUpdate","rollingUpdate":{"x":1}}}})");
  json out = Smp(target, R"({"spec":{"strategy":{"$retainKeys":["type"],"type":"Recreate"}}})");
  EXPECT_EQ(out, J(R"({"spec":{"strategy":{"type":"Recreate"}}})"));
}

TEST(StrategicMergePatch, SetElementOrderReordersWhatItNamesInTheirPlaces) {
  const json target = J(R"({"spec":{"containers":[{"name":"a"},{"name":"b"},{"name":"c"}]},
                             "metadata":{"finalizers":["x","y","z"]}})");
  json out = Smp(target, R"({"spec":{"$setElementOrder/containers":[{"name":"c"},{"name":"a"}]}})");
  EXPECT_EQ(out["spec"]["containers"], J(R"([{"name":"c"},{"name":"b"},{"name":"a"}])"));
  out = Smp(target,
            R"({"spec":{"$setElementOrder/containers":[{"name":"d"},{"name":"b"},{"name":"a"}],
                                 "containers":[{"name":"d"}]}})");
  EXPECT_EQ(out["spec"]["containers"],
            J(R"([{"name":"d"},{"name":"b"},{"name":"c"},{"name":"a"}])"));
  out = Smp(target, R"({"metadata":{"$setElementOrder/finalizers":["z","x"]}})");
  EXPECT_EQ(out["metadata"]["finalizers"], J(R"(["z","y","x"])"));
  // An order for a list that is replaced, or that does not exist, is dropped.
  out = Smp(target, R"({"spec":{"$setElementOrder/tolerations":[{"key":"a"}],
                                 "$setElementOrder/volumes":[{"name":"v"}]}})");
  EXPECT_EQ(out, target);
}

TEST(StrategicMergePatch, ValuesTheTargetLacksAreTakenWithDirectivesApplied) {
  json out = Smp(J(R"({"metadata":{"name":"p"}})"), R"({"spec":{
      "$setElementOrder/containers":[{"name":"a"}],
      "containers":[{"name":"a","env":[{"name":"E","value":"1"},{"$patch":"delete","name":"F"}],
                     "resources":{"limits":{"x":"1","y":null}}}]}})");
  EXPECT_EQ(out, J(R"({"metadata":{"name":"p"},"spec":{"containers":[
      {"name":"a","env":[{"name":"E","value":"1"}],"resources":{"limits":{"x":"1"}}}]}})"));
  EXPECT_TRUE(NoDirectives(out));
}

TEST(StrategicMergePatch, AValueOfAnotherTypeIsReplaced) {
  json out = Smp(J(R"({"a":"s","b":{"c":1},"spec":{"containers":{"x":1}}})"),
                 R"({"a":{"x":null,"y":1},"b":[1],"spec":{"containers":[{"name":"m"}]}})");
  EXPECT_EQ(out, J(R"({"a":{"y":1},"b":[1],"spec":{"containers":[{"name":"m"}]}})"));
  EXPECT_EQ(Smp(J("[1]"), R"({"a":1})"), J(R"({"a":1})"));
}

TEST(StrategicMergePatch, RejectsPatchesThatAreNotObjectsAndUnknownDirectives) {
  ExpectSmpError(kPod, "[]", "the patch must be an object, not an array");
  ExpectSmpError(kPod, "null", "the patch must be an object, not null");
  ExpectSmpError(kPod, R"({"metadata":{"$foo":1}})",
                 "strategic merge patch at /metadata: unknown directive \"$foo\"");
  ExpectSmpError(kPod, R"({"data":{"a/b~c":{"$foo":1}}})",
                 "strategic merge patch at /data/a~1b~0c: unknown directive \"$foo\"");
  ExpectSmpError(kPod, R"({"$patch":"delete"})",
                 "at the top level: $patch: delete would delete the whole object");
}

TEST(StrategicMergePatch, RejectsBadPatchDirectives) {
  ExpectSmpError(
      kPod, R"({"metadata":{"labels":{"$patch":"merge"}}})",
      "at /metadata/labels: $patch in an object must be \"replace\" or \"delete\", not \"merge\"");
  ExpectSmpError(
      kPod, R"({"spec":{"containers":[{"$patch":"merge"}]}})",
      "at /spec/containers: element 0: $patch in a list must be \"replace\" or \"delete\"");
  ExpectSmpError(kPod, R"({"spec":{"containers":[{"name":"x"},{"$patch":"delete"}]}})",
                 "at /spec/containers: element 1: $patch: delete without the merge key \"name\"");
  ExpectSmpError(
      kPod, R"({"metadata":{"finalizers":[{"$patch":"delete"}]}})",
      "at /metadata/finalizers: element 0: $patch: delete needs a list that merges by a key");
  ExpectSmpError(
      kPod, R"({"spec":{"tolerations":[{"$patch":"delete","key":"t1"}]}})",
      "at /spec/tolerations: element 0: $patch: delete needs a list that merges by a key");
}

TEST(StrategicMergePatch, RejectsKeyedListElementsWithoutTheirKey) {
  ExpectSmpError(
      kPod, R"({"spec":{"containers":["main"]}})",
      "at /spec/containers: element 0 is a string, but this list merges objects by \"name\"");
  ExpectSmpError(kPod, R"({"spec":{"containers":[{"name":"main","ports":[{"name":"http"}]}]}})",
                 "at /spec/containers/0/ports: element 0 has no merge key \"containerPort\"");
}

TEST(StrategicMergePatch, RejectsObjectsInListsOfValues) {
  ExpectSmpError(kPod, R"({"metadata":{"finalizers":["ok",{"a":1}]}})",
                 "at /metadata/finalizers: element 1 is an object, but this list holds values");
  ExpectSmpError(kPod, R"({"metadata":{"finalizers":[["f1"]]}})",
                 "element 0 is an array, but this list holds values");
}

TEST(StrategicMergePatch, RejectsMalformedListDirectives) {
  ExpectSmpError(kPod, R"({"spec":{"$setElementOrder/containers":{"name":"a"}}})",
                 "at /spec: $setElementOrder/containers must be a list");
  ExpectSmpError(
      kPod, R"({"spec":{"$setElementOrder/containers":[{"image":"a"}]}})",
      "$setElementOrder/containers: element 0 is not an object with the merge key \"name\"");
  ExpectSmpError(kPod, R"({"metadata":{"$deleteFromPrimitiveList/finalizers":"f1"}})",
                 "at /metadata: $deleteFromPrimitiveList/finalizers must be a list");
  ExpectSmpError(kPod, R"({"metadata":{"$deleteFromPrimitiveList/labels":["app"]}})",
                 "$deleteFromPrimitiveList/labels: the field is an object, not a list");
}

TEST(StrategicMergePatch, RejectsMalformedRetainKeys) {
  const json target = J(R"({"spec":{"strategy":{"type":"A"}}})");
  ExpectSmpError(target, R"({"spec":{"strategy":{"$retainKeys":"type"}}})",
                 "at /spec/strategy: $retainKeys must be a list of field names");
  ExpectSmpError(target, R"({"spec":{"strategy":{"$retainKeys":[1]}}})",
                 "$retainKeys must be a list of field names");
  ExpectSmpError(target, R"({"spec":{"strategy":{"$retainKeys":["type"],"other":1}}})",
                 "$retainKeys does not list the patched field \"other\"");
}

}  // namespace
}  // namespace hami::kube
