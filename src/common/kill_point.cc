#include "common/kill_point.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hami {
namespace {

constexpr KillPointInfo kPoints[] = {
#define HAMI_KILL_POINT_ROW(id, name, owner, doc) \
  {KillPointId::id, name, KillPointOwner::owner, doc},
#include "common/kill_points.def"
#undef HAMI_KILL_POINT_ROW
};

constexpr bool InEnumOrder() {
  for (size_t i = 0; i < std::size(kPoints); ++i) {
    if (size_t(kPoints[i].id) != i) return false;
  }
  return true;
}
static_assert(InEnumOrder(), "the table is expanded from the list in order");

constexpr bool NamesUnique() {
  for (size_t i = 0; i < std::size(kPoints); ++i) {
    for (size_t j = i + 1; j < std::size(kPoints); ++j) {
      if (std::string_view(kPoints[i].name) == kPoints[j].name) return false;
    }
  }
  return true;
}
static_assert(NamesUnique(), "kill_points.def: two rows share a name");

// What HAMI_KILL_POINT asks for, parsed once.
struct Armed {
  enum class State { kNone, kArmed, kBad } state = State::kNone;
  KillPointId id{};
  unsigned long nth = 1;
};

Armed Parse(const char* value) {
  Armed a;
  if (value == nullptr || value[0] == '\0') return a;
  std::string_view v = value;
  a.state = Armed::State::kBad;
  if (const size_t colon = v.rfind(':'); colon != std::string_view::npos) {
    const std::string_view count = v.substr(colon + 1);
    if (count.empty() || count.size() > 9) return a;
    unsigned long n = 0;
    for (char c : count) {
      if (c < '0' || c > '9') return a;
      n = n * 10 + unsigned(c - '0');
    }
    if (n == 0) return a;
    a.nth = n;
    v = v.substr(0, colon);
  }
  const std::optional<KillPointId> id = KillPointFromName(v);
  if (!id) return a;
  a.id = *id;
  a.state = Armed::State::kArmed;
  return a;
}

std::atomic<unsigned long> g_hits{0};

}  // namespace

std::span<const KillPointInfo> KillPoints() { return kPoints; }

const KillPointInfo& KillPointInfoOf(KillPointId id) { return kPoints[size_t(id)]; }

std::optional<KillPointId> KillPointFromName(std::string_view name) {
  for (const KillPointInfo& p : kPoints) {
    if (name == p.name) return p.id;
  }
  return std::nullopt;
}

Result<KillPointId> ParseKillPoint(std::string_view name, KillPointOwner owner,
                                   std::string_view variable) {
  const std::optional<KillPointId> id = KillPointFromName(name);
  if (id && KillPointInfoOf(*id).owner == owner) return *id;
  std::string known;
  for (const KillPointInfo& p : kPoints) {
    if (p.owner == owner) known += (known.empty() ? "" : ", ") + std::string(p.name);
  }
  return Error(ErrorCode::kInvalidArgument, std::string(variable) + "='" + std::string(name) +
                                                "': not a kill point of the " +
                                                KillPointOwnerName(owner) + " (" + known + ")");
}

const char* KillPointOwnerName(KillPointOwner owner) {
  switch (owner) {
    case KillPointOwner::kRegion:
      return "region";
    case KillPointOwner::kSim:
      return "sim";
  }
  return "unknown";
}

void KillPoint(KillPointId id) {
  static const char* const value = std::getenv("HAMI_KILL_POINT");
  static const Armed armed = Parse(value);
  if (armed.state == Armed::State::kNone) return;
  if (armed.state == Armed::State::kBad) {
    char line[512];
    const int n = std::snprintf(line, sizeof(line),
                                "HAMI_KILL_POINT='%.200s': not <name> or <name>:<n> (n from 1) "
                                "of a point in common/kill_points.def\n",
                                value);
    if (n > 0) (void)!write(STDERR_FILENO, line, std::min(size_t(n), sizeof(line) - 1));
    _exit(2);
  }
  if (armed.id != id) return;
  if (g_hits.fetch_add(1, std::memory_order_relaxed) + 1 == armed.nth) raise(SIGKILL);
}

}  // namespace hami
