#pragma once
// Command line of flashtier-cpu-expert-worker.
#include <string>

#include "shared/core/cpu_relax.h"

namespace ft::cew {

struct WorkerOptions {
  std::string model;
  std::string listen = "127.0.0.1:50071";   // loopback by default; "none": no gRPC
  std::string segment = "flashtier-experts";
  std::string ring = "flashtier-experts-ring";  // "none": no shared-memory ring
  int threads = 0;                          // 0: one per physical core minus one
  unsigned ring_channels = 8;
  unsigned ring_max_tokens = 256;
  unsigned spin_us = static_cast<unsigned>(kTierSpin.count());
  bool rebuild = false;
  bool remove_segment = false;
  std::string ready_file;
};

extern const char* const kUsage;

// Throws ft::Error with a message for bad flags; sets help when --help was given.
WorkerOptions parse_options(int argc, char** argv, bool* help);

}  // namespace ft::cew
