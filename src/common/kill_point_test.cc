#include "common/kill_point.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

namespace hami {
namespace {

TEST(KillPoints, EveryRowHasAUniqueNameAnOwnerAndAPlaceAndIsFoundByItsName) {
  ASSERT_FALSE(KillPoints().empty());
  std::set<std::string> names;
  for (const KillPointInfo& p : KillPoints()) {
    SCOPED_TRACE(p.name);
    EXPECT_TRUE(names.insert(p.name).second) << "listed twice";
    EXPECT_NE(std::string_view(p.doc), "");
    EXPECT_EQ(&KillPointInfoOf(p.id), &p);
    EXPECT_EQ(KillPointFromName(p.name), p.id);
    EXPECT_EQ(std::string_view(KillPointName(p.id)), p.name);
    if (p.owner == KillPointOwner::kRegion) {
      EXPECT_EQ(std::string_view(p.name).substr(0, 7), "region.") << "region points say so";
    }
  }
}

TEST(KillPoints, ANameNotListedIsNotFound) {
  for (std::string_view name : {"", "region", "region.reserve", "region.reserve.begun ",
                                "REGION.RESERVE.BEGUN", "region.reserve.begun:1"}) {
    EXPECT_EQ(KillPointFromName(name), std::nullopt) << "'" << name << "'";
  }
}

TEST(KillPoints, ParsingForAnOwnerTakesOnlyItsPointsAndNamesWhatItRefuses) {
  auto sim = ParseKillPoint("device-lock-held", KillPointOwner::kSim, "HAMI_SIM_KILL_POINT");
  ASSERT_TRUE(sim.ok()) << sim.error().message();
  EXPECT_EQ(*sim, KillPointId::kSimDeviceLockHeld);
  for (std::string_view bad : {"region.reserve.begun", "device-lock", ""}) {
    auto r = ParseKillPoint(bad, KillPointOwner::kSim, "HAMI_SIM_KILL_POINT");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_EQ(r.error().message(), "HAMI_SIM_KILL_POINT='" + std::string(bad) +
                                       "': not a kill point of the sim (device-lock-held)");
  }
  EXPECT_TRUE(ParseKillPoint("region.reserve.begun", KillPointOwner::kRegion, "X").ok());
}

TEST(KillPoints, OwnersHaveNames) {
  EXPECT_STREQ(KillPointOwnerName(KillPointOwner::kRegion), "region");
  EXPECT_STREQ(KillPointOwnerName(KillPointOwner::kSim), "sim");
}

// Runs `reach` in a child whose HAMI_KILL_POINT is `value` (unset when null); returns its
// wait status. The child's stderr goes to `err` when given.
int InChild(const char* value, void (*reach)(), int err_fd = -1) {
  pid_t pid = fork();
  if (pid == 0) {
    if (value == nullptr) {
      unsetenv("HAMI_KILL_POINT");
    } else {
      setenv("HAMI_KILL_POINT", value, 1);
    }
    if (err_fd >= 0) dup2(err_fd, STDERR_FILENO);
    reach();
    _exit(0);
  }
  int status = 0;
  EXPECT_EQ(waitpid(pid, &status, 0), pid);
  return status;
}

void ReachReserveBegunThreeTimes() {
  for (int i = 0; i < 3; ++i) KillPoint(KillPointId::kRegionReserveBegun);
}

bool KilledBySigkill(int status) { return WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL; }

TEST(KillPoint, KillsAtTheNamedPointOnTheNthVisitOnly) {
  EXPECT_TRUE(KilledBySigkill(InChild("region.reserve.begun", ReachReserveBegunThreeTimes)));
  EXPECT_TRUE(KilledBySigkill(InChild("region.reserve.begun:3", ReachReserveBegunThreeTimes)));
  int status = InChild("region.reserve.begun:4", ReachReserveBegunThreeTimes);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "visited only three times";
  status = InChild("region.release.begun", ReachReserveBegunThreeTimes);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "another point";
  status = InChild(nullptr, ReachReserveBegunThreeTimes);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "nothing armed";
}

TEST(KillPoint, AValueNamingNoPointEndsTheProcessSayingSo) {
  for (const char* bad : {"region.reserve.begn", "region.reserve.begun:0", "region.reserve.begun:",
                          "region.reserve.begun:x", "region.reserve.begun:-1"}) {
    SCOPED_TRACE(bad);
    int err[2];
    ASSERT_EQ(pipe2(err, O_CLOEXEC), 0);
    const int status = InChild(bad, ReachReserveBegunThreeTimes, err[1]);
    close(err[1]);
    std::string said;
    char buf[512];
    for (ssize_t n; (n = read(err[0], buf, sizeof(buf))) > 0;) said.append(buf, size_t(n));
    close(err[0]);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << status;
    EXPECT_NE(said.find(std::string("HAMI_KILL_POINT='") + bad + "'"), std::string::npos) << said;
  }
}

}  // namespace
}  // namespace hami
