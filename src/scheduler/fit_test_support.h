// Builders of fit's inputs for the scheduler's unit tests: GPUs, nodes, requests, policies.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "scheduler/fit.h"
#include "scheduler/policy.h"

namespace hami::scheduler::fit_testing {

inline kube::NodeDevice Gpu(int index, int32_t mem = 16384, int32_t count = 10,
                            std::string type = "NVIDIA-A100", int32_t numa = 0) {
  kube::NodeDevice d;
  d.id = "GPU-" + std::to_string(index);
  d.index = index;
  d.count = count;
  d.devmem_mib = mem;
  d.devcore = 100;
  d.type = std::move(type);
  d.numa = numa;
  d.mode = "hami-core";
  d.health = true;
  return d;
}

inline NodeGpus Node(int gpus) {
  NodeGpus n;
  n.name = "node-1";
  for (int i = 0; i < gpus; ++i) n.gpus.push_back({Gpu(i), {}, false});
  return n;
}

inline ContainerRequest Req(int32_t count, int32_t mem_mib, int32_t cores = 0) {
  ContainerRequest c;
  c.name = "main";
  c.count = count;
  c.mem_mib = mem_mib;
  c.cores = cores;
  return c;
}

inline PodRequest Pod(std::vector<ContainerRequest> containers,
                      std::vector<ContainerRequest> init = {}) {
  PodRequest p;
  p.containers = std::move(containers);
  p.init_containers = std::move(init);
  return p;
}

inline PodPolicy Policy(std::string_view gpu = "spread", NodePolicy node = NodePolicy::kBinpack) {
  PodPolicy p;
  auto g = ParseGpuPolicy(gpu, "test");
  EXPECT_TRUE(g.ok()) << g.error().message();
  p.gpu = *g;
  p.node = node;
  return p;
}

}  // namespace hami::scheduler::fit_testing
