#include "cpu-expert-worker/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ft::cew {

void log_line(const std::string& msg) {
  static std::mutex mu;
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const int ms = static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm;
  localtime_r(&t, &tm);
  char stamp[32];
  std::snprintf(stamp, sizeof stamp, "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  std::lock_guard<std::mutex> lk(mu);
  std::fprintf(stderr, "[cpu-expert-worker %s] %s\n", stamp, msg.c_str());
  std::fflush(stderr);
}

std::string fmt_bytes(double b) {
  char s[32];
  if (b >= 1e9) std::snprintf(s, sizeof s, "%.2f GB", b / 1e9);
  else if (b >= 1e6) std::snprintf(s, sizeof s, "%.1f MB", b / 1e6);
  else if (b >= 1e3) std::snprintf(s, sizeof s, "%.1f kB", b / 1e3);
  else std::snprintf(s, sizeof s, "%.0f B", b);
  return s;
}

std::string fmt_seconds(double sec) {
  char s[32];
  if (sec < 10) std::snprintf(s, sizeof s, "%.1f s", sec);
  else if (sec < 120) std::snprintf(s, sizeof s, "%.0f s", sec);
  else std::snprintf(s, sizeof s, "%d min %02d s", static_cast<int>(sec) / 60, static_cast<int>(sec) % 60);
  return s;
}

}  // namespace ft::cew
