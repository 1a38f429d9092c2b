// flashtier-pause: does nothing until SIGTERM/SIGINT, then exits 0. It is the process of the
// compose stack's holder containers: `shm-holder` owns the IPC namespace (and so the /dev/shm
// holding the expert segment) that both workers join, `http-front` owns the network namespace
// whose published port the gateway replicas share (SO_REUSEPORT). Neither restarts with the
// services, so a worker's restart finds the segment and a gateway's restart the port.
// (`sleep infinity` as PID 1 would ignore SIGTERM and make every `docker stop` wait 10 s.)
#include <signal.h>
#include <unistd.h>

#include <cstdio>

int main() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  int sig = 0;
  std::fprintf(stderr, "flashtier-pause: holding (pid %d) until SIGTERM\n", static_cast<int>(getpid()));
  sigwait(&set, &sig);
  std::fprintf(stderr, "flashtier-pause: signal %d: exiting\n", sig);
  return 0;
}
