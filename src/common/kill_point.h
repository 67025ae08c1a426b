// Named kill points for crash tests, listed once in common/kill_points.def.
//
// HAMI_KILL_POINT(kRegionReserveBegun) marks a place where a test may SIGKILL the process.
// Only code compiled with HAMI_KILL_POINTS (the *_testing library variants that test programs
// link) contains the check; elsewhere the macro expands to nothing but still names a listed
// point, so a point that is not in the list fails the build in every configuration.
//
// In a HAMI_KILL_POINTS build, HAMI_KILL_POINT=<name> kills the process the first time it
// reaches the point, HAMI_KILL_POINT=<name>:<n> the n-th time. A value naming no listed point,
// or with an <n> that is not a whole number from 1, ends the process at its first kill point
// with exit status 2 and a line on stderr naming the value: a misspelled point never passes
// silently for one that was never reached.
//
// The simulated GPU arms its own points through HAMI_SIM_KILL_POINT (sim/options.h) and
// checks them itself; it uses the same list and names.
//
// Thread safety: everything here may be called from any thread. KillPoint() allocates
// nothing and reads the environment once.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/result.h"

namespace hami {

// Whose code a kill point is in, and so which test walks it.
enum class KillPointOwner : uint8_t { kRegion, kSim };

enum class KillPointId : uint8_t {
#define HAMI_KILL_POINT_ROW(id, name, owner, doc) id,
#include "common/kill_points.def"
#undef HAMI_KILL_POINT_ROW
};

struct KillPointInfo {
  KillPointId id;
  const char* name;  // "region.reserve.begun"
  KillPointOwner owner;
  const char* doc;  // where the process dies
};

// Every listed point, in the list's order.
std::span<const KillPointInfo> KillPoints();

const KillPointInfo& KillPointInfoOf(KillPointId id);
inline const char* KillPointName(KillPointId id) { return KillPointInfoOf(id).name; }

// The point named exactly `name`; nullopt for a name that is not listed.
std::optional<KillPointId> KillPointFromName(std::string_view name);

// The point of `owner` named `name`, for a variable that arms one: an error (kInvalidArgument)
// naming `variable`, the value and the points `owner` has when there is no such point.
Result<KillPointId> ParseKillPoint(std::string_view name, KillPointOwner owner,
                                   std::string_view variable);

// "kRegion" -> "region", "kSim" -> "sim".
const char* KillPointOwnerName(KillPointOwner owner);

// SIGKILLs the process when `id` is the point HAMI_KILL_POINT arms and this is the n-th time
// it is reached (counted across threads). Call it through HAMI_KILL_POINT.
void KillPoint(KillPointId id);

}  // namespace hami

#ifdef HAMI_KILL_POINTS
#define HAMI_KILL_POINT(enumerator) ::hami::KillPoint(::hami::KillPointId::enumerator)
#define HAMI_KILL_POINT_AT(id) ::hami::KillPoint(id)
#else
#define HAMI_KILL_POINT(enumerator) static_cast<void>(::hami::KillPointId::enumerator)
#define HAMI_KILL_POINT_AT(id) static_cast<void>(id)
#endif
