// The two sets of books a real-client test compares: the simulated driver's state file (what
// each process uses on each device) and, under libvgpu, the region `hami run` names on its
// output ("region <path>usage.cache").
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <regex>
#include <string>

#include "region/region.h"
#include "sim/state.h"

namespace hami::cudart {

// Opens whichever of the two is not open yet. The region is mapped read-only; mapped, it stays
// readable after `hami run` removes the file at its end.
inline void OpenBooks(const std::string& state_path, bool libvgpu, const std::string& out,
                      std::unique_ptr<sim::SharedState>* state,
                      std::unique_ptr<region::Region>* reg) {
  if (*state == nullptr) {
    auto opened = sim::SharedState::OpenExisting(state_path);
    ASSERT_TRUE(opened.ok()) << opened.error().message();
    *state = std::move(opened).value();
  }
  if (libvgpu && *reg == nullptr) {
    std::smatch m;
    ASSERT_TRUE(std::regex_search(out, m, std::regex("region (\\S+usage\\.cache)"))) << out;
    auto opened = region::Region::Open(m[1].str(), nullptr, region::Create::kNever, nullptr,
                                       region::Access::kReadOnly);
    ASSERT_TRUE(opened.ok()) << opened.error().message();
    *reg = std::move(opened).value();
  }
}

}  // namespace hami::cudart
