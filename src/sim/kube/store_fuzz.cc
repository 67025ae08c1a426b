// Fuzzes the simulated API server's store with arbitrary request bodies: the first byte picks
// the write (create of each kind, PUT, PUT of /status, merge, strategic, JSON and apply
// patches of a seeded pod, create-on-update of a lease, creates of the workload, service,
// secret, RBAC and webhook-configuration kinds), the rest is the body. Nothing crashes
// or throws; every write that succeeds moves the cluster's resourceVersion by one (or not at
// all when it changes nothing) and shows up in a watch; the stored object carries its name and
// that resourceVersion.
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "kube/patch.h"
#include "kube/resource.h"
#include "sim/kube/store.h"

namespace {

using hami::kube::Resource;
using hami::sim::kube::ApiResult;
using hami::sim::kube::Store;
using hami::sim::kube::Subresource;
using nlohmann::json;

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckStored(const hami::sim::kube::StoredObject& o) {
  const json& m = o.object().at("metadata");
  Check(m.at("name").is_string() && !m.at("name").get<std::string>().empty());
  Check(m.at("resourceVersion") == std::to_string(o.rv()));
  Check(!o.Json().empty());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1 || size > 64 * 1024) return 0;
  const uint8_t op = data[0] % 21;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  json body = json::parse(text, nullptr, false);
  if (body.is_discarded()) return 0;

  Store store(Store::Options{});
  Check(store.Create(hami::kube::kNamespaces, "", {{"metadata", {{"name", "default"}}}}).ok());
  const json pod = {{"metadata", {{"name", "p"}, {"labels", {{"app", "web"}}}}},
                    {"spec", {{"containers", {{{"name", "main"}, {"image", "busybox:1.36"}}}}}}};
  Check(store.Create(hami::kube::kPods, "default", pod).ok());
  const int64_t before = store.resource_version();
  auto watch = store.Watch(hami::kube::kPods, "", before);
  Check(watch.ok());

  auto put = [&](const json*) -> ApiResult<json> { return body; };
  auto patched = [&](auto apply) {
    return [&, apply](const json* current) -> ApiResult<json> {
      if (current == nullptr) return body;
      auto r = apply(*current);
      if (!r.ok()) return hami::sim::kube::BadRequest(r.error().message());
      return std::move(*r);
    };
  };
  auto merge = [&](const json& c) -> hami::Result<json> {
    return hami::kube::ApplyMergePatch(c, body);
  };
  auto strategic = [&](const json& c) { return hami::kube::ApplyStrategicMergePatch(c, body); };
  auto json_patch = [&](const json& c) { return hami::kube::ApplyJsonPatch(c, body); };

  const Resource* resource = &hami::kube::kPods;
  bool ok = false;
  hami::sim::kube::ObjectPtr stored;
  auto take = [&](auto result) {
    ok = result.ok();
    if (ok) stored = result->object;
  };
  auto take_object = [&](auto result) {
    ok = result.ok();
    if (ok) stored = *result;
  };
  switch (op) {
    case 0:
      take_object(store.Create(hami::kube::kPods, "default", body));
      break;
    case 1:
      resource = &hami::kube::kNodes;
      take_object(store.Create(*resource, "", body));
      break;
    case 2:
      resource = &hami::kube::kConfigMaps;
      take_object(store.Create(*resource, "default", body));
      break;
    case 3:
      resource = &hami::kube::kNamespaces;
      take_object(store.Create(*resource, "", body));
      break;
    case 4:
      take(store.Update(*resource, "default", "p", Subresource::kNone, put, false));
      break;
    case 5:
      take(store.Update(*resource, "default", "p", Subresource::kStatus, put, false));
      break;
    case 6:
      take(store.Update(*resource, "default", "p", Subresource::kNone, patched(merge), false));
      break;
    case 7:
      take(store.Update(*resource, "default", "p", Subresource::kNone, patched(strategic), false));
      break;
    case 8:
      take(store.Update(*resource, "default", "p", Subresource::kNone, patched(json_patch), false));
      break;
    case 9:
      take(store.Update(*resource, "default", "q", Subresource::kNone, patched(strategic), true));
      break;
    case 10:
      resource = &hami::kube::kEvents;
      take_object(store.Create(*resource, "default", body));
      break;
    case 11:
      resource = &hami::kube::kLeases;
      take(store.Update(*resource, "default", "l", Subresource::kNone, put, true));
      break;
    default: {
      static const Resource* const kMore[] = {&hami::kube::kServiceAccounts,
                                              &hami::kube::kSecrets,
                                              &hami::kube::kServices,
                                              &hami::kube::kDeployments,
                                              &hami::kube::kDaemonSets,
                                              &hami::kube::kClusterRoles,
                                              &hami::kube::kClusterRoleBindings,
                                              &hami::kube::kRoleBindings,
                                              &hami::kube::kMutatingWebhookConfigurations};
      resource = kMore[op - 12];
      take_object(store.Create(*resource, resource->namespaced ? "default" : "", body));
      break;
    }
  }
  const int64_t after = store.resource_version();
  Check(after == before || after == before + 1);
  Check(ok || after == before);
  if (ok) {
    CheckStored(*stored);
    auto again = store.Get(*resource, stored->object()["metadata"].value("namespace", ""),
                           stored->object()["metadata"]["name"].get<std::string>());
    Check(again.ok() && (*again)->rv() == stored->rv());
  }
  const size_t changes = watch->watcher->Take().size();
  Check(changes <= size_t(after - before));
  if (resource == &hami::kube::kPods) Check(changes == size_t(after - before));
  return 0;
}
