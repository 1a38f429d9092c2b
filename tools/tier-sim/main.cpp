// flashtier-tier-sim: the VRAM expert cache's hit rate on a routing trace, without a GPU.
//   flashtier-tier-sim [--cache-gb G --expert-mb M | --slots N] [--layers 42] [--experts 288]
//                      [--top-k 8] [--tokens 20000] [--batch 1] [--zipf 0.8] [--locality 0.3]
//                      [--seed 1] [--trace FILE] [--write-trace FILE] [--warmup 1000]
//                      [--admit-per-step 32] [--gate on|off] [--age-every N] [--window 0]
//                      [--popularity-seed S] [--write-stats FILE] [--stats FILE]
// --write-stats: the trace's pick counts per (layer, expert) as a routing-statistics file (what
// the gpu-worker's --expert-stats reads); --stats: warm-start the cache from such a file.
// Replays a recorded trace (--trace) or the synthetic generator, `batch` tokens per step (each
// step pins what it uses), with the engine's upkeep (tiers::admit_step: at most
// --admit-per-step copies a step, 0 for no limit; the frequency gate on or off), and prints the
// hit rate, the misses per step — what the zero-copy and CPU tiers must serve — and the copies
// per step, after a warm-up.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "gpu-worker/tiers/expert_cache.h"
#include "gpu-worker/tiers/routing_trace.h"

using namespace ft::tiers;

int main(int argc, char** argv) {
  TraceShape shape;
  SyntheticTraceOptions o;
  double cache_gb = 0, expert_mb = 0;
  int slots = -1, tokens = 20000, batch = 1, warmup = 1000, admit_per_step = 32;
  CachePolicy policy;
  std::string trace, write, write_stats, stats;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--cache-gb") cache_gb = std::stod(v);
    else if (a == "--expert-mb") expert_mb = std::stod(v);
    else if (a == "--slots") slots = std::stoi(v);
    else if (a == "--layers") shape.layers = std::stoi(v);
    else if (a == "--experts") shape.experts = std::stoi(v);
    else if (a == "--top-k") shape.top_k = std::stoi(v);
    else if (a == "--tokens") tokens = std::stoi(v);
    else if (a == "--batch") batch = std::max(1, std::stoi(v));
    else if (a == "--zipf") o.zipf_s = std::stod(v);
    else if (a == "--locality") o.locality = std::stod(v);
    else if (a == "--seed") o.seed = std::stoull(v);
    else if (a == "--popularity-seed") o.popularity_seed = std::stoull(v);
    else if (a == "--trace") trace = v;
    else if (a == "--write-trace") write = v;
    else if (a == "--warmup") warmup = std::stoi(v);
    else if (a == "--admit-per-step") admit_per_step = std::stoi(v);
    else if (a == "--gate") policy.frequency_gate = v != "off";
    else if (a == "--age-every") policy.age_every = std::stoi(v);
    else if (a == "--window") policy.window = std::stod(v);
    else if (a == "--write-stats") write_stats = v;
    else if (a == "--stats") stats = v;
    else {
      std::fprintf(stderr, "unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  try {
    std::vector<TokenRoute> toks;
    if (!trace.empty()) {
      toks = read_trace(trace, &shape);
    } else {
      SyntheticTrace g(shape, o);
      for (int i = 0; i < tokens; ++i) toks.push_back(g.next());
    }
    if (!write.empty()) write_trace(write, shape, toks);
    if (slots < 0) slots = expert_mb > 0 ? static_cast<int>(cache_gb * 1024 / expert_mb) : 0;
    if (!write_stats.empty()) {
      std::vector<std::vector<uint64_t>> counts(static_cast<size_t>(shape.layers),
                                                std::vector<uint64_t>(static_cast<size_t>(shape.experts), 0));
      for (const TokenRoute& r : toks)
        for (int l = 0; l < shape.layers; ++l)
          for (int e : r[l]) ++counts[l][e];
      write_routing_stats(write_stats, counts);
    }
    ExpertCache c(shape.layers, shape.experts, slots, policy);
    if (!stats.empty()) c.warm_start(read_routing_stats(stats, shape.layers, shape.experts));
    uint64_t hits = 0, total = 0, steps = 0, copies = 0;
    int first_layer = 0;
    for (size_t t = 0; t < toks.size(); t += static_cast<size_t>(batch)) {
      c.begin_step(true);
      const bool count = static_cast<int>(t) >= warmup;
      std::vector<std::vector<int32_t>> used(static_cast<size_t>(shape.layers));
      for (int l = 0; l < shape.layers; ++l) {
        std::vector<int32_t>& u = used[static_cast<size_t>(l)];
        for (size_t b = t; b < std::min(toks.size(), t + static_cast<size_t>(batch)); ++b)
          u.insert(u.end(), toks[b][l].begin(), toks[b][l].end());
        std::sort(u.begin(), u.end());
        u.erase(std::unique(u.begin(), u.end()), u.end());
        if (count)
          for (int32_t e : u) hits += c.slot_of(l, e).has_value(), ++total;
      }
      const size_t n = admit_step(c, used, admit_per_step > 0 ? admit_per_step : 1 << 30, &first_layer).size();
      c.end_step();
      if (count) ++steps, copies += n;
    }
    std::printf("| slots | layers × experts | batch | zipf | locality | admit / step | gate | hit rate | misses / step | copies / step |\n"
                "|---|---|---|---|---|---|---|---|---|---|\n| %d | %d × %d | %d | %s | %s | %d | %s | %.3f | %.1f | %.2f |\n",
                slots, shape.layers, shape.experts, batch, trace.empty() ? std::to_string(o.zipf_s).c_str() : "trace",
                trace.empty() ? std::to_string(o.locality).c_str() : "trace", admit_per_step,
                policy.frequency_gate ? "on" : "off", total ? static_cast<double>(hits) / total : 0.0,
                steps ? static_cast<double>(total - hits) / steps : 0.0,
                steps ? static_cast<double>(copies) / steps : 0.0);
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashtier-tier-sim: %s\n", e.what());
    return 1;
  }
}
