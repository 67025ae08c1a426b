// For the DRA stand-in's tests: a device as the node's DRA driver publishes it (docs/dra.md),
// written here by hand rather than taken from src/dra, so that the simulator is checked
// against the documented shape and not against the driver's own code.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace hami::sim::kube::testing {

// hami-gpu-<index>: `memory` and 100 cores, shareable, with the driver's request policies.
inline nlohmann::json DraGpu(int index, const std::string& memory = "8000Mi") {
  return {
      {"name", "hami-gpu-" + std::to_string(index)},
      {"allowMultipleAllocations", true},
      {"attributes",
       {{"type", {{"string", "hami-gpu"}}},
        {"index", {{"int", index}}},
        {"uuid", {{"string", "GPU-" + std::to_string(index)}}}}},
      {"capacity",
       {{"memory",
         {{"value", memory},
          {"requestPolicy",
           {{"default", memory},
            {"validRange", {{"min", "1Mi"}, {"max", memory}, {"step", "1Mi"}}}}}}},
        {"cores",
         {{"value", "100"},
          {"requestPolicy",
           {{"default", "0"}, {"validRange", {{"min", "0"}, {"max", "100"}, {"step", "1"}}}}}}}}}};
}

}  // namespace hami::sim::kube::testing
