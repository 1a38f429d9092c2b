// flashtier-bench-engine: the CUDA engine on a synthetic bf16-sized (fp16 operands) model at the
// real widths and depth — 45 layers, vocab 154,880, 8 routed experts per MoE layer with top-8
// routing, so every token does exactly the real model's routed work — against bounds measured in
// the same run:
//   decode: step time at batch 1/2/4/8 vs the HBM read bound (bytes every step must read ÷ the
//           measured read bandwidth);
//   prefill: tokens/s for 512/2048/8192-token prompts and the linear layers' TFLOP/s;
//   where the time goes: per-op-group times of one profiled step.
// Flags: --layers N --experts N --context N --steps N --batches 1,2,4,8 --prefill 512,2048,8192
//        --quick (12 layers, fewer sizes). Prints markdown tables; the last one is the summary.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gpu-worker/backends/cuda/engine/cuda_engine.h"
#include "gpu-worker/backends/cuda/engine/op_profile.h"
#include "tools/bench-cuda/profile_table.h"
#include "gpu-worker/backends/cuda/engine/sequence_pool.h"
#include "gpu-worker/backends/cuda/engine/synthetic_model.h"
#include "tools/bench-cuda/bench_util.h"
#include "tools/bench-cuda/hbm_probe.h"

using namespace ft;
using namespace ft::cuda;

namespace {

using bench::median;
using bench::parse_list;
using bench::print_profile;

double now_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 g(seed);
  std::uniform_int_distribution<int32_t> d(0, static_cast<int32_t>(vocab - 1));
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int32_t& t : v) t = d(g);
  return v;
}

// Feeds a prompt in steps of at most `chunk` tokens; returns the sampled token.
int32_t prefill(Engine& e, uint64_t s, const std::vector<int32_t>& p, int64_t chunk) {
  std::vector<StepResult> r;
  for (size_t at = 0; at < p.size(); at += static_cast<size_t>(chunk)) {
    const size_t n = std::min(static_cast<size_t>(chunk), p.size() - at);
    StepItem it;
    it.seq = s;
    it.tokens = std::span<const int32_t>(p).subspan(at, n);
    it.sample = at + n == p.size();
    e.step(std::span<const StepItem>(&it, 1), r);
  }
  return r[0].token;
}


}  // namespace

int main(int argc, char** argv) {
  int64_t layers = 45, experts = 8, context = 1024, steps = 24;
  std::vector<int64_t> batches = {1, 2, 4, 8}, prefills = {512, 2048, 8192};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--layers") layers = std::stoll(next());
    else if (a == "--experts") experts = std::stoll(next());
    else if (a == "--context") context = std::stoll(next());
    else if (a == "--steps") steps = std::stoll(next());
    else if (a == "--batches") batches = parse_list(next());
    else if (a == "--prefill") prefills = parse_list(next());
    else if (a == "--quick") layers = 12, prefills = {512, 2048}, steps = 12;
    else {
      std::fprintf(stderr, "usage: flashtier-bench-engine [--layers N] [--experts N] [--context N] [--steps N]\n"
                           "         [--batches 1,2,4,8] [--prefill 512,2048,8192] [--quick]\n");
      return 2;
    }
  }
  try {
    const double hbm = bench::hbm_read_gbs();
    std::printf("HBM read bandwidth (measured): %.0f GB/s\n", hbm);
    const ModelConfig cfg = synthetic_config("\"n_routed_experts\": " + std::to_string(experts) +
                                             ", \"num_hidden_layers\": " + std::to_string(layers));
    const int64_t max_prefill = bench::max_or(prefills, 0);
    CudaEngineOptions o;
    o.max_sequences = static_cast<int>(bench::max_or(batches, 1));
    o.max_tokens_per_step = std::max<int64_t>(max_prefill, 2048);
    o.context_size = std::max(context + steps + 64, max_prefill + 64);
    o.precision = "fp16";  // the tensor-core path (the product's, for EXL3 checkpoints)
    const double t0 = now_ms();
    CudaEngine eng(synthetic_weights(cfg, 1), nullptr, o);
    std::printf("synthetic model: %lld layers, %lld routed experts top-%lld, vocab %lld; built in %.1f s\n",
                static_cast<long long>(layers), static_cast<long long>(experts),
                static_cast<long long>(cfg.num_experts_per_tok), static_cast<long long>(cfg.vocab_size),
                (now_ms() - t0) / 1e3);
    std::printf("VRAM: %s\n", eng.budget().report().c_str());
    const double weight_bytes = static_cast<double>(eng.budget().used(VramCategory::Weights));
    const double embed_bytes = static_cast<double>(cfg.vocab_size * cfg.hidden_size * 2);
    const double state_bytes = static_cast<double>(SequencePool::slot_bytes(cfg));
    int64_t n_sparse = 0, n_indexer = 0;
    for (int64_t l = 0; l < cfg.num_hidden_layers; ++l) n_sparse += cfg.is_sparse(l), n_indexer += cfg.has_indexer(l);

    // ---- decode
    std::printf("\n### Decode (context %lld, graph replay)\n\n| batch | step ms | tok/s | bytes/step (GB) | HBM bound ms | "
                "of bound |\n|---|---|---|---|---|---|\n",
                static_cast<long long>(context));
    std::vector<std::string> summary;
    for (int64_t B : batches) {
      SequenceSpec spec;
      spec.sampling.temperature = 0;
      spec.max_tokens = context + steps + 8;
      std::vector<uint64_t> seqs;
      std::vector<int32_t> next;
      for (int64_t b = 0; b < B; ++b) {
        seqs.push_back(eng.open(spec));
        next.push_back(prefill(eng, seqs.back(), random_tokens(context, cfg.vocab_size, 100 + b), o.max_tokens_per_step));
      }
      std::vector<StepItem> items(static_cast<size_t>(B));
      std::vector<StepResult> r;
      std::vector<double> ms;
      for (int64_t st = 0; st < steps; ++st) {
        for (int64_t b = 0; b < B; ++b) {
          items[b].seq = seqs[b];
          items[b].tokens = std::span<const int32_t>(&next[b], 1);
          items[b].prompt = false;
          items[b].sample = true;
        }
        const double a = now_ms();
        eng.step(items, r);
        const double t = now_ms() - a;
        if (st >= 3) ms.push_back(t);
        for (int64_t b = 0; b < B; ++b) next[b] = r[b].token;
      }
      const double step = median(ms);
      // What a step must read: every weight except the embedding table, each row's KDA states
      // (read and written) and the latents/indexer keys its attention and selection look at.
      const double ctx = static_cast<double>(context);
      const double sel = std::min(ctx, static_cast<double>(cfg.index_topk + cfg.index_kpool));
      const double cache = static_cast<double>(B) * (n_sparse * sel * cfg.kv_lora_rank * 2 +
                                                     n_indexer * ctx / cfg.index_kpool * cfg.index_head_dim * 4);
      const double bytes = weight_bytes - embed_bytes + B * 2 * state_bytes + cache;
      const double bound = bytes / (hbm * 1e9) * 1e3;
      std::printf("| %lld | %.3f | %.1f | %.2f | %.3f | %.1f%% |\n", static_cast<long long>(B), step, B * 1e3 / step,
                  bytes / 1e9, bound, 100.0 * bound / step);
      char line[200];
      std::snprintf(line, sizeof line, "| decode B=%lld | %.3f ms/step | %.1f%% of HBM bound |", static_cast<long long>(B),
                    step, 100.0 * bound / step);
      summary.push_back(line);
      // How many dependent launches the step is: the latency between them is what the HBM
      // bound does not see.
      const GraphShape gs = eng.decode_graph_shape(static_cast<int>(B));
      if (gs.kernels > 0) {
        std::snprintf(line, sizeof line, "| decode B=%lld graph | %lld kernels, %lld nodes, %lld edges | %.2f us per kernel |",
                      static_cast<long long>(B), static_cast<long long>(gs.kernels), static_cast<long long>(gs.nodes),
                      static_cast<long long>(gs.edges), step * 1e3 / static_cast<double>(gs.kernels));
        summary.push_back(line);
        std::printf("%s\n", line);
      }
      if (B == batches.front() || B == batches.back()) {
        OpProfile prof;
        eng.set_profile(&prof);
        for (int64_t b = 0; b < B; ++b) items[b].tokens = std::span<const int32_t>(&next[b], 1);
        const double a = now_ms();
        eng.step(items, r);
        const double t = now_ms() - a;
        prof.collect();
        eng.set_profile(nullptr);
        print_profile(("decode step, batch " + std::to_string(B) + " (eager, profiled)").c_str(), prof, t);
      }
      for (uint64_t s : seqs) eng.close(s);
    }

    // ---- prefill
    // Linear-layer FLOPs per token: 2 × the parameters every token multiplies (no embedding).
    const double flop_per_tok = 2.0 * (weight_bytes - embed_bytes) / 2.0;
    std::printf("\n### Prefill (one sequence, one step)\n\n| prompt | ms | tok/s | linear TFLOP/s |\n|---|---|---|---|\n");
    for (int64_t P : prefills) {
      SequenceSpec spec;
      spec.sampling.temperature = 0;
      spec.max_tokens = P + 8;
      const auto toks = random_tokens(P, cfg.vocab_size, 7);
      std::vector<double> ms;
      for (int rep = 0; rep < 3; ++rep) {
        const uint64_t s = eng.open(spec);
        const double a = now_ms();
        prefill(eng, s, toks, P);
        ms.push_back(now_ms() - a);
        eng.close(s);
      }
      const double t = median(ms);
      std::printf("| %lld | %.1f | %.0f | %.1f |\n", static_cast<long long>(P), t, P * 1e3 / t,
                  flop_per_tok * P / (t * 1e-3) / 1e12);
      char line[200];
      std::snprintf(line, sizeof line, "| prefill %lld | %.0f tok/s | %.1f TFLOP/s (linears) |", static_cast<long long>(P),
                    P * 1e3 / t, flop_per_tok * P / (t * 1e-3) / 1e12);
      summary.push_back(line);
      if (P == prefills.back() || P == 2048) {
        OpProfile prof;
        eng.set_profile(&prof);
        const uint64_t s = eng.open(spec);
        const double a = now_ms();
        prefill(eng, s, toks, P);
        const double t2 = now_ms() - a;
        prof.collect();
        eng.set_profile(nullptr);
        eng.close(s);
        print_profile(("prefill " + std::to_string(P) + " tokens (profiled)").c_str(), prof, t2);
      }
    }
    std::printf("\n### Summary (HBM %.0f GB/s measured)\n\n| row | result | vs bound |\n|---|---|---|\n", hbm);
    for (const auto& l : summary) std::printf("%s\n", l.c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flashtier-bench-engine: %s\n", e.what());
    return 1;
  }
}
