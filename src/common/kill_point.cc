#include "common/kill_point.h"

#include <signal.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>

namespace hami {

namespace {

struct Target {
  std::string name;
  long nth = 1;
};

const Target& Configured() {
  static const Target target = [] {
    Target t;
    const char* env = std::getenv("HAMI_KILL_POINT");
    if (env == nullptr) return t;
    std::string v = env;
    size_t colon = v.rfind(':');
    if (colon != std::string::npos) {
      t.nth = std::max(1L, std::strtol(v.c_str() + colon + 1, nullptr, 10));
      v.resize(colon);
    }
    t.name = v;
    return t;
  }();
  return target;
}

std::atomic<long> g_hits{0};

}  // namespace

void KillPoint(const char* name) {
  const Target& t = Configured();
  if (t.name.empty() || t.name != name) return;
  if (g_hits.fetch_add(1) + 1 == t.nth) raise(SIGKILL);
}

}  // namespace hami
