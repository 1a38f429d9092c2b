#include "cpu-expert-worker/options.h"

#include "shared/core/error.h"

namespace ft::cew {

const char* const kUsage =
    "usage: flashtier-cpu-expert-worker --model DIR [options]\n"
    "  --model DIR            model folder (config.json + safetensors); its routed experts are served\n"
    "  --listen HOST:PORT     gRPC ExpertTier address (default 127.0.0.1:50071, loopback; port 0 picks one; none: off)\n"
    "  --segment NAME         shared-memory segment for the experts (default flashtier-experts)\n"
    "  --ring NAME            shared-memory request ring for co-located gpu-workers\n"
    "                         (default flashtier-experts-ring; none: off)\n"
    "  --threads N            compute threads (default or 0: physical cores - 1)\n"
    "  --ring-channels N      gpu-workers the ring can serve at once (default 8)\n"
    "  --ring-max-tokens N    tokens per ring request; larger batches are split (default 256)\n"
    "  --spin-us N            busy-poll the ring this long after a request before sleeping (default 2000)\n"
    "  --rebuild              rebuild the segment even if a valid one exists\n"
    "  --ready-file PATH      write a JSON line (ports, names, attach/build times) once serving\n"
    "  --remove-segment       remove the segment and the ring named by --segment/--ring, then exit\n"
    "SIGTERM/SIGINT stop the worker and keep the segment, so the next start re-attaches in milliseconds.\n";

WorkerOptions parse_options(int argc, char** argv, bool* help) {
  WorkerOptions o;
  *help = false;
  auto number = [](const std::string& flag, const std::string& v, long lo, long hi) {
    size_t pos = 0;
    long n = 0;
    try {
      n = std::stol(v, &pos);
    } catch (const std::exception&) {
      pos = 0;
    }
    if (pos != v.size() || n < lo || n > hi)
      throw Error(flag + " needs a number in " + std::to_string(lo) + ".." + std::to_string(hi) + ", got '" + v + "'");
    return n;
  };
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      *help = true;
      return o;
    }
    if (a == "--rebuild") {
      o.rebuild = true;
      continue;
    }
    if (a == "--remove-segment") {
      o.remove_segment = true;
      continue;
    }
    if (i + 1 >= argc) throw Error("unknown flag or missing value: " + a);
    const std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--listen") o.listen = v;
    else if (a == "--segment") o.segment = v;
    else if (a == "--ring") o.ring = v;
    else if (a == "--threads") o.threads = static_cast<int>(number(a, v, 0, 4096));  // 0: the default (compose passes THREADS=0)
    else if (a == "--ring-channels") o.ring_channels = static_cast<unsigned>(number(a, v, 1, 1024));
    else if (a == "--ring-max-tokens") o.ring_max_tokens = static_cast<unsigned>(number(a, v, 1, 1 << 20));
    else if (a == "--spin-us") o.spin_us = static_cast<unsigned>(number(a, v, 0, 10'000'000));
    else if (a == "--ready-file") o.ready_file = v;
    else throw Error("unknown flag " + a);
  }
  if (o.model.empty() && !o.remove_segment) throw Error("--model DIR is required");
  return o;
}

}  // namespace ft::cew
