// Named kill points for crash tests. HAMI_KILL_POINT("region.reserve.locked") marks a
// place where a test may SIGKILL the process; only builds compiled with HAMI_KILL_POINTS
// (the *_testing library variants that test programs link) contain them. Production builds
// expand the macro to nothing.
//
// In a test build, HAMI_KILL_POINT=<name> kills the process the first time it reaches the
// point, HAMI_KILL_POINT=<name>:<n> the n-th time.
#pragma once

#ifdef HAMI_KILL_POINTS
namespace hami {
void KillPoint(const char* name);
}  // namespace hami
#define HAMI_KILL_POINT(name) ::hami::KillPoint(name)
#else
#define HAMI_KILL_POINT(name) ((void)(name))
#endif
