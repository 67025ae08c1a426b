// The priority feedback loop: every --feedback-interval the monitor looks at every container's
// shared region on the node and decides which containers are paused and which have their
// utilization switch on (HAMi's monitor does the same every 5 s over HAMi-core's regions).
//
// The rule, exactly (DecideFeedback implements it; RunFeedbackPass applies it):
// 1. Recent kernels. A launch raises the region's recent_kernel to kRecentKernelOnLaunch (2,
//    region.h). Each pass decays it: 0 stays 0, any other value v becomes min(v, 2) - 1. A
//    container is *active* while its decayed value is > 0, that is in the pass that follows a
//    launch (the launch's batch: libvgpu notes a thread's first launch and every 256th).
// 2. GPUs. A container is on the GPUs its policy's UUID list names (the first device_count,
//    empty ones ignored); two containers *share* a GPU when their lists have a UUID in common.
// 3. A container *competes* on its GPUs while it is active and not paused (after this pass).
// 4. Pausing. A container is paused exactly when it shares a GPU with a competing container
//    of strictly higher priority (a lower CUDA_TASK_PRIORITY number: 0 high, 1 low). Priorities
//    are decided from the highest down, so a paused container never pauses another. When no
//    such container remains, it is unpaused.
// 5. The utilization switch is on exactly when the container shares a GPU with another
//    competing container of the same or higher priority; otherwise off. So a container alone
//    on its GPUs (or beside paused ones, or beside lower-priority ones, which are paused while
//    it is active) runs unthrottled unless its core policy is force: the SM limit in force is
//    the limit under force, under default only while the switch is on, never under disable
//    (Region::SmLimitInForce).
// 6. Writes. paused and utilization_switch are written (SetPaused, SetUtilizationSwitch, which
//    bump the policy generation and wake paused launches) only when the decision differs from
//    the region's value; recent_kernel only when its decay changes it, by a compare-and-swap
//    that retries on a launch's new value (Region::UpdateRecentKernel), so a launch that lands
//    during the pass is never lost. The loop owns both fields: an operator's `hami region set
//    --paused/--utilization-switch` holds only until the next pass.
//
// Thread safety: DecideFeedback is pure. RunFeedbackPass may run concurrently with the
// containers' processes (that is its job), but two passes over the same regions must not run
// at the same time (one monitor per node: cleanup.h's lock).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "region/region.h"

namespace hami::monitor {

// The decay of rule 1: 0 -> 0, v -> min(v, kRecentKernelOnLaunch) - 1.
uint32_t DecayRecentKernel(uint32_t recent_kernel);

// One container as the loop sees it before the pass.
struct FeedbackInput {
  int32_t priority = 1;
  region::CorePolicy core_policy = region::CorePolicy::kDefault;
  uint32_t recent_kernel = 0;        // before this pass's decay
  std::vector<std::string> devices;  // GPU UUIDs (empty strings are ignored)
  bool paused = false;               // the region's values now
  bool utilization_switch = false;
};

// What the pass decides for it.
struct FeedbackDecision {
  uint32_t recent_kernel = 0;  // DecayRecentKernel(input.recent_kernel)
  bool active = false;         // recent_kernel > 0
  bool paused = false;
  bool utilization_switch = false;
  // The core policy with the new switch: whether a compute limit set on the container is in
  // force (force, or default with the switch on).
  bool sm_limit_applies = false;
};

// Rules 1-5 over every container of the node; decisions[i] is for containers[i].
std::vector<FeedbackDecision> DecideFeedback(std::span<const FeedbackInput> containers);

struct FeedbackStats {
  int regions = 0;
  int active = 0;
  int paused = 0;       // containers paused after the pass
  int switched_on = 0;  // containers with the utilization switch on after the pass
  int writes = 0;       // paused or utilization_switch values changed by the pass
  int errors = 0;       // regions refused a change (a read-only handle); left as they were
};

// One pass (rules 1-6) over `regions`: one writable region per container (read-only ones are
// not passed; HAMi-core's randomly named regions of the same container are not either).
// Never null. Logs nothing.
FeedbackStats RunFeedbackPass(std::span<region::Region* const> regions);

}  // namespace hami::monitor
