// Fuzzes what the kube-scheduler stand-in reads from outside: the KubeSchedulerConfiguration
// file (as YAML) and the extenders' answers (as JSON, decoded as a filter result, a priority
// list and a binding result). Nothing crashes, every rejection is kInvalidArgument or
// kUnsupported naming its input, and every accepted configuration holds what validation promises.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "sim/kube/scheduler_standin.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void CheckConfig(std::string_view text) {
  auto c = hami::sim::kube::ParseSchedulerConfig(text, "fuzz.yaml");
  if (!c.ok()) {
    Check(c.error().code() == hami::ErrorCode::kInvalidArgument ||
          c.error().code() == hami::ErrorCode::kUnsupported ||
          c.error().code() == hami::ErrorCode::kNotFound ||
          c.error().code() == hami::ErrorCode::kIo ||
          c.error().code() == hami::ErrorCode::kPermission);
    Check(c.error().message().rfind("KubeSchedulerConfiguration fuzz.yaml: ", 0) == 0);
    return;
  }
  Check(c->percentage_of_nodes_to_score >= 0 && c->percentage_of_nodes_to_score <= 100);
  Check(c->pod_initial_backoff.count() > 0 && c->pod_initial_backoff <= c->pod_max_backoff);
  int binders = 0;
  for (const auto& e : c->extenders) {
    Check(!e.url_prefix.empty());
    Check(e.prioritize_verb.empty() || e.weight > 0);
    Check(e.http_timeout.count() > 0);
    if (!e.bind_verb.empty()) ++binders;
  }
  Check(binders <= 1);
}

void CheckAnswers(std::string_view text) {
  const nlohmann::json body = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (body.is_discarded()) return;
  auto filter = hami::sim::kube::ParseExtenderFilterResult(body);
  if (!filter.ok()) Check(filter.error().code() == hami::ErrorCode::kInvalidArgument);
  auto priorities = hami::sim::kube::ParseHostPriorityList(body);
  if (!priorities.ok()) Check(priorities.error().code() == hami::ErrorCode::kInvalidArgument);
  auto bind = hami::sim::kube::ParseExtenderBindingResultError(body);
  if (!bind.ok()) Check(bind.error().code() == hami::ErrorCode::kInvalidArgument);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  CheckConfig(text);
  CheckAnswers(text);
  auto d = hami::sim::kube::ParseGoDuration(text, "fuzz");
  if (!d.ok()) Check(d.error().code() == hami::ErrorCode::kInvalidArgument);
  return 0;
}
