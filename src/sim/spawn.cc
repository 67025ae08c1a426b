#include "sim/spawn.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>

namespace hami::sim {

Result<pid_t> SpawnInSession(const std::vector<std::string>& argv,
                             const std::vector<std::string>& env, int out_fd) {
  if (argv.empty()) return Error(ErrorCode::kInvalidArgument, "starting a program: no argv");
  std::vector<std::string> env_copy = env, argv_copy = argv;
  std::vector<char*> envp, args;
  for (std::string& s : env_copy) envp.push_back(s.data());
  envp.push_back(nullptr);
  for (std::string& s : argv_copy) args.push_back(s.data());
  args.push_back(nullptr);

  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 1);
  posix_spawn_file_actions_adddup2(&fa, out_fd, 2);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigfillset(&defaults);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSID | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int err = posix_spawn(&pid, args[0], &fa, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  if (err != 0) return Error::FromErrno("starting " + argv[0], err);
  return pid;
}

}  // namespace hami::sim
