// Fuzzes the three patch kinds with arbitrary bytes as the patch body, applied to a fixed pod:
// nothing crashes, every rejection is kInvalidArgument naming the patch kind, a merge patch is
// idempotent, and a strategic merge patch is idempotent (without $patch) and never stores a
// directive.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string_view>

#include "kube/patch.h"

namespace {

using nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

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

const json& Pod() {
  static const json pod = json::parse(R"({
    "apiVersion":"v1","kind":"Pod",
    "metadata":{"name":"p","namespace":"default","resourceVersion":"7","uid":"u",
                "labels":{"app":"web"},"annotations":{"hami.io/vgpu-node":"n1"},
                "finalizers":["f1"],"ownerReferences":[{"uid":"o1","kind":"ReplicaSet"}]},
    "spec":{"nodeName":"n1","containers":[
      {"name":"main","image":"busybox:1.35","args":["a"],
       "resources":{"limits":{"nvidia.com/gpu":"1"}},
       "env":[{"name":"A","value":"1"}],"ports":[{"containerPort":80}],
       "volumeMounts":[{"mountPath":"/d","name":"d"}]},
      {"name":"side","image":"s:1"}],
      "tolerations":[{"key":"t"}],"volumes":[{"name":"d","emptyDir":{}}]},
    "status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}})");
  return pod;
}

void CheckError(const hami::Error& e, std::string_view kind) {
  Check(e.code() == hami::ErrorCode::kInvalidArgument);
  Check(e.message().find(kind) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  const json patch = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (patch.is_discarded()) return 0;

  const json merged = hami::kube::ApplyMergePatch(Pod(), patch);
  Check(hami::kube::ApplyMergePatch(merged, patch) == merged);

  auto patched = hami::kube::ApplyJsonPatch(Pod(), patch);
  if (!patched.ok()) CheckError(patched.error(), "JSON patch");

  auto strategic = hami::kube::ApplyStrategicMergePatch(Pod(), patch);
  if (!strategic.ok()) {
    CheckError(strategic.error(), "strategic merge patch");
  } else {
    Check(NoDirectives(*strategic));
    // Deleting and re-adding an element in one patch moves it to the end each time.
    if (text.find("$patch") == std::string_view::npos) {
      auto again = hami::kube::ApplyStrategicMergePatch(*strategic, patch);
      Check(again.ok() && *again == *strategic);
    }
  }
  return 0;
}
