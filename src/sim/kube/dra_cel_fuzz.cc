// Fuzzes the CEL subset of device selectors: the first line is the expression, the rest a
// slice's device as JSON (a fixed GPU when it does not parse or is refused). Nothing crashes;
// an expression that compiles evaluates to the same answer twice; every error names the
// expression.
#include <cstdint>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "sim/kube/dra_cel.h"

namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

const char kGpu[] = R"({"name":"hami-gpu-0","allowMultipleAllocations":true,
  "attributes":{"type":{"string":"hami-gpu"},"index":{"int":0},"healthy":{"bool":true},
                "driverVersion":{"version":"550.54.15"}},
  "capacity":{"memory":{"value":"80Gi"},"cores":{"value":"100"}}})";

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  const std::string_view expression = input.substr(0, newline);
  const std::string_view rest =
      newline == std::string_view::npos ? std::string_view() : input.substr(newline + 1);
  using hami::sim::kube::CelDevice;
  using hami::sim::kube::CelDeviceFromSlice;
  const std::string driver = "hami-core-gpu.project-hami.io";
  auto device_json = nlohmann::json::parse(rest, nullptr, false);
  auto device = CelDeviceFromSlice(driver, device_json, "fuzz");
  if (!device.ok()) device = CelDeviceFromSlice(driver, nlohmann::json::parse(kGpu), "fuzz");
  Check(device.ok());
  auto program = hami::sim::kube::CelProgram::Compile(expression);
  if (!program.ok()) {
    Check(program.error().message().rfind("CEL expression '", 0) == 0);
    return 0;
  }
  auto first = program->Evaluate(*device);
  auto second = program->Evaluate(*device);
  Check(first.ok() == second.ok());
  if (first.ok()) {
    Check(*first == *second);
  } else {
    Check(first.error().message().rfind("CEL expression '", 0) == 0);
  }
  return 0;
}
