/* The sandbox ("pause") program of the simulated nodes' pods: the first process of a pod's
 * sandbox, which holds its namespaces while the pod's containers come and go. It waits for
 * signals and does nothing else: it reaps every child that ends (as PID 1 it inherits the
 * orphans of its PID namespace) and exits 0 on SIGTERM or SIGINT.
 *
 * Linked statically (the pause image holds this file alone). As PID 1 of a PID namespace it
 * gets only the signals it handles or blocks; it blocks the three it waits for, so each is
 * queued for sigwaitinfo instead of being dropped. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char** argv) {
  (void)argv;
  if (argc > 1) {
    fputs("pause: takes no arguments; it waits for SIGTERM or SIGINT\n", stderr);
    return 2;
  }
  sigset_t waited;
  sigemptyset(&waited);
  sigaddset(&waited, SIGTERM);
  sigaddset(&waited, SIGINT);
  sigaddset(&waited, SIGCHLD);
  if (sigprocmask(SIG_BLOCK, &waited, NULL) != 0) {
    perror("pause: sigprocmask");
    return 1;
  }
  for (;;) {
    siginfo_t info;
    int sig = sigwaitinfo(&waited, &info);
    if (sig < 0) {
      if (errno == EINTR) continue;
      perror("pause: sigwaitinfo");
      return 1;
    }
    if (sig == SIGCHLD) {
      while (waitpid(-1, NULL, WNOHANG) > 0) {
      }
      continue;
    }
    return 0; /* SIGTERM or SIGINT */
  }
}
