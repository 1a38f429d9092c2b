// flashtier-fake-worker: the test fake Generation service as a process, for manual checks and
// benchmarks. --text TEXT streams the tiny-chat tokenizer's ids of TEXT (default: a fixed list).
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/gateway/fake_worker.h"

int main(int argc, char** argv) {
  ft::test::FakeScript s;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i], v = argv[i + 1];
    if (a == "--tokens") {
      size_t pos = 0;
      while (pos < v.size()) {
        size_t c = v.find(',', pos);
        s.tokens.push_back(std::atoi(v.substr(pos, c - pos).c_str()));
        if (c == std::string::npos) break;
        pos = c + 1;
      }
    } else if (a == "--delay-us") {
      s.delay = std::chrono::microseconds(std::atol(v.c_str()));
    } else if (a == "--first-delay-us") {
      s.first_delay = std::chrono::microseconds(std::atol(v.c_str()));
    } else if (a == "--per-message") {
      s.tokens_per_message = std::atoi(v.c_str());
    }
  }
  if (s.tokens.empty()) s.tokens = {72, 101, 108, 108, 111, 3000};
  ft::test::FakeWorker w;
  w.set_script(s);
  std::printf("fake worker on %s\n", w.address().c_str());
  std::fflush(stdout);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  int sig;
  sigwait(&set, &sig);
  return 0;
}
