// Segment build / re-attach times and expert compute throughput on a real model folder: random
// routing (top-k distinct experts per token), cycling through the MoE layers so weights come from
// memory, not cache.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cpu-expert-worker/bench/bench.h"
#include "cpu-expert-worker/expert_engine.h"
#include "cpu-expert-worker/fingerprint.h"
#include "cpu-expert-worker/segment_builder.h"
#include "shared/exl3/thread_pool.h"
#include "shared/model/config.h"

namespace ft::cew::bench {

using clk = std::chrono::steady_clock;

int compute_main(int argc, char** argv) {
  std::string model, segment = "ft-bench-seg-" + std::to_string(getpid());
  int threads = exl3::default_threads(1), iters = 50;
  bool keep = false;
  std::vector<int> token_counts = {1, 8, 32};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return std::string(i + 1 < argc ? argv[++i] : ""); };
    if (a == "--model") model = next();
    else if (a == "--segment") segment = next();
    else if (a == "--threads") threads = std::stoi(next());
    else if (a == "--iters") iters = std::stoi(next());
    else if (a == "--keep") keep = true;
    else if (a == "--tokens") {
      token_counts.clear();
      std::stringstream ss(next());
      for (std::string t; std::getline(ss, t, ',');) token_counts.push_back(std::stoi(t));
    }
  }
  if (model.empty()) {
    std::fprintf(stderr, "compute: --model DIR is required\n");
    return 2;
  }
  const ModelConfig cfg = load_config(model);
  auto t0 = clk::now();
  const std::string fp = model_fingerprint(model);
  const double fp_ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
  SegmentOptions so;
  so.name = segment;
  so.threads = threads;
  OpenedSegment first = open_or_build_segment(model, cfg, fp, so);
  const double gb = static_cast<double>(first.segment.header().data_bytes) / 1e9;
  std::printf("segment %s: %.3f GB of experts, %s in %.3f s (%.2f GB/s); fingerprint %.2f ms\n", segment.c_str(), gb,
              first.reattached ? "re-attached" : "built", first.seconds,
              first.reattached ? 0.0 : gb / std::max(first.seconds, 1e-9), fp_ms);
  t0 = clk::now();
  OpenedSegment seg = open_or_build_segment(model, cfg, model_fingerprint(model), so);
  const double attach_ms = std::chrono::duration<double, std::milli>(clk::now() - t0).count();
  std::printf("re-attach (fingerprint + open + validate): %.3f ms, reattached=%d\n", attach_ms, seg.reattached);
  first = OpenedSegment();

  SegmentExperts eng(seg.segment, static_cast<float>(cfg.swiglu_limit), threads);
  const auto& info = eng.info();
  const int k = static_cast<int>(info.top_k);
  std::printf("engine: %d threads, %s; %zu MoE layers x %u experts, top-%d, hidden %u, expert inter %u\n",
              eng.threads(), eng.kernels().c_str(), info.moe_layers.size(), info.n_experts, k, info.hidden,
              info.intermediate);
  std::printf("%8s %12s %12s %14s %12s %12s\n", "tokens", "p50 ms", "mean ms", "experts/call", "weight GB/s",
              "tokens/s");
  std::mt19937 rng(7);
  std::vector<int32_t> all(info.n_experts);
  std::iota(all.begin(), all.end(), 0);
  for (int T : token_counts) {
    std::vector<float> x(static_cast<size_t>(T) * info.hidden), out(x.size());
    std::normal_distribution<float> nd;
    for (float& v : x) v = nd(rng);
    std::vector<int32_t> ids(static_cast<size_t>(T) * k);
    std::vector<float> w(ids.size(), 1.0f / static_cast<float>(k));
    std::vector<double> us;
    double bytes = 0, experts = 0, total_s = 0;
    for (int it = -3; it < iters; ++it) {
      const uint32_t layer = info.moe_layers[static_cast<size_t>(it + 3) % info.moe_layers.size()];
      std::set<int32_t> used;
      for (int t = 0; t < T; ++t) {
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + k);
        std::copy(all.begin(), all.begin() + k, ids.begin() + t * k);
        used.insert(all.begin(), all.begin() + k);
      }
      ipc::ExpertBatch b{layer, static_cast<uint32_t>(T), static_cast<uint32_t>(k), info.hidden, x.data(), ids.data(),
                         w.data()};
      const auto s0 = clk::now();
      eng.compute(b, out.data());
      const double s = std::chrono::duration<double>(clk::now() - s0).count();
      if (it < 0) continue;  // warm-up
      us.push_back(s * 1e6);
      total_s += s;
      experts += static_cast<double>(used.size());
      const int moe = seg.segment.moe_index(layer);
      for (int32_t e : used) bytes += static_cast<double>(seg.segment.block(moe, static_cast<uint32_t>(e)).bytes);
    }
    const Percentiles p = percentiles(us);
    std::printf("%8d %12.3f %12.3f %14.1f %12.2f %12.0f\n", T, p.p50 / 1e3, p.mean / 1e3, experts / iters,
                bytes / total_s / 1e9, T * static_cast<double>(iters) / total_s);
  }
  if (!keep) ipc::ShmMapping::remove(segment);
  return 0;
}

}  // namespace ft::cew::bench
