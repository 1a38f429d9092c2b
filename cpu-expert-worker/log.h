#pragma once
// One line per event on stderr, timestamped, whole lines even from several threads.
#include <string>

namespace ft::cew {

void log_line(const std::string& msg);
// Human-readable sizes and durations for progress lines.
std::string fmt_bytes(double bytes);    // "1.23 GB"
std::string fmt_seconds(double s);      // "42 s", "3 min 20 s"

}  // namespace ft::cew
