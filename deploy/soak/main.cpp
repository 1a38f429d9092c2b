// flashtier-soak --port N [--minutes M (30)] [--streams S (8)] [--launcher-pid PID] [--model NAME]
// Keeps S streaming chat requests in flight against the gateway on 127.0.0.1:N for M minutes
// (random lengths 8-256 tokens, sampled), and checks every answer: 200, an SSE body that ends
// with its last chunk and [DONE], and some text (a 200 stream with no text at all is a
// "silent-empty" answer). With --launcher-pid (flashtier-local) it samples the resident memory
// of each service every minute. Prints a line per minute and a summary; exit 1 when any answer
// failed or was silent-empty.
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "deploy/local/http_exchange.h"
#include "deploy/local/proc_info.h"

namespace {

using Clock = std::chrono::steady_clock;

struct Counters {
  std::atomic<long> ok{0}, failed{0}, silent_empty{0}, tokens{0};
};

// Classifies one streamed answer; returns "" when it is fine, else what was wrong.
std::string judge(const ft::local::HttpExchange& ex, long* completion_tokens) {
  if (!ex.connected) return "no connection";
  if (!ex.closed) return "no end within 120 s";
  if (ex.status() != 200) return "status " + std::to_string(ex.status()) + ": " + ex.raw.substr(0, 160);
  bool complete = false;
  const std::string body = ex.body(&complete);
  if (!complete) return "cut: no last chunk";
  if (body.size() < 14 || body.compare(body.size() - 14, 14, "data: [DONE]\n\n") != 0) return "no [DONE]";
  if (body.find("data: {\"error\"") != std::string::npos) return "error event: " + body.substr(body.find("data: {\"error\""), 160);
  const size_t u = body.rfind("\"completion_tokens\":");
  *completion_tokens = u == std::string::npos ? 0 : std::atol(body.c_str() + u + 20);
  const bool text = body.find("\"content\":\"") != std::string::npos || body.find("\"reasoning_content\":\"") != std::string::npos;
  return text ? "" : "silent-empty";
}

}  // namespace

int main(int argc, char** argv) {
  int port = 0, streams = 8;
  double minutes = 30;
  pid_t launcher = -1;
  std::string model = "model";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--port") port = std::atoi(v.c_str());
    else if (a == "--minutes") minutes = std::atof(v.c_str());
    else if (a == "--streams") streams = std::atoi(v.c_str());
    else if (a == "--launcher-pid") launcher = std::atoi(v.c_str());
    else if (a == "--model") model = v;
    else port = 0;
  }
  if (port <= 0 || streams <= 0 || minutes <= 0) {
    std::fputs("usage: flashtier-soak --port N [--minutes M] [--streams S] [--launcher-pid PID] [--model NAME]\n", stderr);
    return 2;
  }
  Counters c;
  std::mutex log_mu;
  std::map<std::string, long> first_failures;  // kind of failure -> count
  const auto until = Clock::now() + std::chrono::duration<double, std::ratio<60>>(minutes);
  std::vector<std::thread> clients;
  for (int s = 0; s < streams; ++s) {
    clients.emplace_back([&, s] {
      std::mt19937 rng(1234 + s);
      while (Clock::now() < until) {
        const int max_tokens = 8 + static_cast<int>(rng() % 249);
        const std::string body = "{\"model\":\"" + model + "\",\"stream\":true,\"stream_options\":{\"include_usage\":true}," +
                                 "\"max_tokens\":" + std::to_string(max_tokens) + ",\"temperature\":0.8,\"seed\":" +
                                 std::to_string(rng() % 100000) +
                                 ",\"messages\":[{\"role\":\"user\",\"content\":\"Tell me about number " +
                                 std::to_string(rng() % 1000) + "\"}]}";
        const auto ex = ft::local::http_exchange(port, "POST", "/v1/chat/completions", body, std::chrono::seconds(120));
        long tokens = 0;
        const std::string why = judge(ex, &tokens);
        if (why.empty()) {
          ++c.ok;
          c.tokens += tokens;
        } else {
          (why == "silent-empty" ? c.silent_empty : c.failed)++;
          std::lock_guard lk(log_mu);
          if (first_failures[why.substr(0, 40)]++ < 3) std::fprintf(stderr, "soak: stream %d: %s\n", s, why.c_str());
        }
      }
    });
  }
  // Resident memory of each service, by name, first sample and latest.
  std::map<std::string, std::pair<long, long>> rss;
  auto sample = [&] {
    std::string line;
    if (launcher <= 0) return line;
    for (const auto& p : ft::local::children_of(launcher)) {
      const std::string name = p.argv0.substr(p.argv0.rfind('/') + 1);
      const long kib = ft::local::rss_kib(p.pid);
      if (kib < 0) continue;
      auto it = rss.try_emplace(name, kib, kib).first;
      it->second.second = kib;
      line += " " + name + "=" + std::to_string(kib / 1024) + "MiB";
    }
    return line;
  };
  const auto t0 = Clock::now();
  std::printf("soak: start, %d streams for %.1f min;%s\n", streams, minutes, sample().c_str());
  std::fflush(stdout);
  while (Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const long secs = std::chrono::duration_cast<std::chrono::seconds>(Clock::now() - t0).count();
    if (secs % 60 == 0 || Clock::now() >= until) {
      std::printf("soak: %4ld s: %ld ok, %ld failed, %ld silent-empty, %ld tokens;%s\n", secs, c.ok.load(), c.failed.load(),
                  c.silent_empty.load(), c.tokens.load(), sample().c_str());
      std::fflush(stdout);
    }
  }
  for (auto& t : clients) t.join();
  std::string growth;
  for (const auto& [name, r] : rss)
    growth += " " + name + " " + std::to_string(r.first / 1024) + "->" + std::to_string(r.second / 1024) + " MiB";
  std::printf("soak: done: %ld answers ok, %ld failed, %ld silent-empty, %ld tokens; RSS%s\n", c.ok.load(), c.failed.load(),
              c.silent_empty.load(), c.tokens.load(), growth.empty() ? " not sampled" : growth.c_str());
  return c.failed.load() || c.silent_empty.load() ? 1 : 0;
}
