#include "tools/check/fixture_check.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "gpu-worker/engine/engine_factory.h"
#include "shared/core/error.h"
#include "shared/engine/reference_engine.h"
#include "shared/sampling/logit_compare.h"
#include "shared/sampling/sampler.h"
#include "shared/model/tensor_convert.h"

namespace ft {

namespace {

struct RowCompare {
  double rel_l2 = 0, max_abs = 0;
  bool same_argmax = false;
  bool ref_finite = true;  // a reference row with NaN/inf cannot be compared
  int64_t argmax = 0;
};

RowCompare compare_row(const float* ours, const float* ref, int64_t n) {
  double num = 0, den = 0, mx = 0;
  RowCompare r;
  for (int64_t i = 0; i < n; ++i) {
    r.ref_finite &= std::isfinite(ref[i]);
    const double d = static_cast<double>(ours[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    mx = std::max(mx, std::fabs(d));
  }
  r.rel_l2 = std::sqrt(num) / std::max(std::sqrt(den), 1e-30);
  r.max_abs = mx;
  if (!std::isfinite(r.rel_l2)) r.rel_l2 = r.max_abs = INFINITY;  // our own NaN/inf fails the check
  r.argmax = argmax(std::span<const float>(ours, static_cast<size_t>(n)));
  r.same_argmax = r.argmax == argmax(std::span<const float>(ref, static_cast<size_t>(n)));
  return r;
}

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

// Records case 0's internals during its prefill.
class InternalsRecorder : public ForwardObserver {
 public:
  explicit InternalsRecorder(int64_t stream_size) : stream_size_(stream_size) {}
  void on_layer_out(int64_t layer, size_t, int64_t pos, const float* s) override {
    auto& v = out[layer];
    if (static_cast<int64_t>(v.size()) < (pos + 1) * stream_size_) v.resize((pos + 1) * stream_size_);
    std::copy(s, s + stream_size_, v.begin() + pos * stream_size_);
  }
  void on_routing(int64_t layer, size_t, int64_t pos, const Routing& r) override { routes[layer][pos] = r; }
  void on_selection(int64_t layer, size_t, int64_t pos, const std::vector<int32_t>& s) override {
    sel[layer][pos] = s;
  }
  std::map<int64_t, std::vector<float>> out;
  std::map<int64_t, std::map<int64_t, Routing>> routes;
  std::map<int64_t, std::map<int64_t, std::vector<int32_t>>> sel;

 private:
  int64_t stream_size_;
};

void compare_internals(const TensorStore& ref, const ModelConfig& c, const InternalsRecorder& rec,
                       const FixtureCheckOptions& opts, FixtureCheckResult& res, std::ostream& log) {
  const int64_t HD = c.hc_mult * c.hidden_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "case0.layer" + std::to_string(l) + ".";
    const TensorInfo* out = ref.find(p + "out");
    if (!out) continue;
    std::string line = "  layer " + std::to_string(l);
    bool ok = true;
    const auto want = to_f32(*out);
    const int64_t T = static_cast<int64_t>(want.size()) / HD;
    const auto it = rec.out.find(l);
    double worst = 0;
    std::set<int64_t> nonfinite;  // token rows the reference could not compute (NaN)
    for (int64_t t = 0; t < T && it != rec.out.end(); ++t) {
      const RowCompare rc = compare_row(it->second.data() + t * HD, want.data() + t * HD, HD);
      if (rc.ref_finite)
        worst = std::max(worst, rc.rel_l2);
      else
        nonfinite.insert(t);
    }
    ok &= worst <= opts.max_internal_rel_l2;
    line += " out_rel_l2=" + fmt("%.3e", worst);
    if (!nonfinite.empty()) line += " nonfinite_ref_rows=" + std::to_string(nonfinite.size());
    if (const TensorInfo* ri = ref.find(p + "router_topk_idx")) {
      const auto idx = to_i64(*ri);
      const auto w = to_f32(ref.get(p + "router_topk_w"));
      const int64_t tk = ri->shape.back();
      int64_t bad_sets = 0;
      double werr = 0, tie_margin = INFINITY;
      for (int64_t t = 0; t < ri->shape[0]; ++t) {
        if (nonfinite.count(t)) continue;
        std::map<int64_t, float> want_set;
        for (int64_t k = 0; k < tk; ++k) want_set[idx[t * tk + k]] = w[t * tk + k];
        const auto rt = rec.routes.find(l);
        std::map<int64_t, float> got;
        if (rt != rec.routes.end() && rt->second.count(t)) {
          const Routing& r = rt->second.at(t);
          for (size_t k = 0; k < r.experts.size(); ++k) got[r.experts[k]] = r.weights[k];
        }
        bool same = got.size() == want_set.size();
        for (const auto& [e, wt] : want_set) {
          auto g = got.find(e);
          if (g == got.end()) {
            same = false;
          } else {
            werr = std::max(werr, std::fabs(static_cast<double>(g->second) - wt));
          }
        }
        if (!same && rt != rec.routes.end() && rt->second.count(t))
          tie_margin = std::min(tie_margin, static_cast<double>(rt->second.at(t).margin));
        bad_sets += !same;
      }
      ok &= bad_sets == 0 && werr <= 1e-3;
      line += " router_sets_differ=" + std::to_string(bad_sets) + " router_w_max_abs=" + fmt("%.2e", werr);
      // A differing choice whose margin is at fp32 noise is a near tie, not a wrong router.
      if (bad_sets > 0) line += " (smallest margin of our choice " + fmt("%.1e", tie_margin) + ")";
    }
    if (const TensorInfo* di = ref.find(p + "dsa_topk")) {
      const auto idx = to_i64(*di);
      const int64_t W = di->shape.back();
      int64_t bad = 0;
      for (int64_t t = 0; t < di->shape[0]; ++t) {
        std::set<int64_t> want_set;
        for (int64_t k = 0; k < W; ++k)
          if (idx[t * W + k] >= 0) want_set.insert(idx[t * W + k]);
        std::set<int64_t> got;
        const auto st = rec.sel.find(l);
        if (st != rec.sel.end() && st->second.count(t))
          for (int32_t s : st->second.at(t)) got.insert(s);
        bad += got != want_set;
      }
      ok &= bad == 0;
      line += " dsa_sets_differ=" + std::to_string(bad);
    }
    line += ok ? " ok" : " MISMATCH";
    res.internals_ok &= ok;
    res.internal_lines.push_back(line);
    log << line << "\n";
  }
}



// The engine under test, one sequence at a time.
class Subject {
 public:
  virtual ~Subject() = default;
  virtual void begin(int64_t max_tokens, ForwardObserver* obs) = 0;
  virtual std::vector<float> prefill(const std::vector<int32_t>& ids) = 0;  // [n, V]
  virtual std::vector<float> decode(int32_t token) = 0;                     // [V]
  virtual void end() = 0;
};

class ReferenceSubject final : public Subject {
 public:
  explicit ReferenceSubject(const ModelWeights& w) : eng_(w) {}
  void begin(int64_t, ForwardObserver* obs) override {
    st_ = eng_.new_state();
    obs_ = obs;
  }
  std::vector<float> prefill(const std::vector<int32_t>& ids) override { return eng_.prefill(st_, ids, true, obs_); }
  std::vector<float> decode(int32_t t) override { return eng_.decode(st_, t); }
  void end() override {}

 private:
  ReferenceEngine eng_;
  SequenceState st_;
  ForwardObserver* obs_ = nullptr;
};

// Any Engine (the CUDA engine): logits come back because the items ask for them.
class EngineSubject final : public Subject {
 public:
  explicit EngineSubject(std::unique_ptr<Engine> e) : eng_(std::move(e)) {}
  void begin(int64_t max_tokens, ForwardObserver*) override {
    SequenceSpec spec;
    spec.sampling.temperature = 0;
    spec.max_tokens = max_tokens;
    seq_ = eng_->open(spec);
  }
  std::vector<float> prefill(const std::vector<int32_t>& ids) override {
    return run(ids, true, LogitsWanted::All);
  }
  std::vector<float> decode(int32_t t) override { return run({t}, false, LogitsWanted::Last); }
  void end() override { eng_->close(seq_); }
  Engine& engine() { return *eng_; }

 private:
  std::vector<float> run(const std::vector<int32_t>& ids, bool prompt, LogitsWanted w) {
    StepItem it;
    it.seq = seq_;
    it.tokens = ids;
    it.prompt = prompt;
    it.sample = true;
    it.logits = w;
    std::vector<StepResult> r;
    eng_->step(std::span<const StepItem>(&it, 1), r);
    return std::move(r.at(0).logits);
  }
  std::unique_ptr<Engine> eng_;
  uint64_t seq_ = 0;
};

}  // namespace

void FixtureCheckOptions::set_backend_tolerances() {
  if (backend == "cuda") {
    max_rel_l2 = 3e-3;
    min_top1 = 0.99;
    near_tie_gap = kTensorCoreNearTieGap;
  } else {
    max_rel_l2 = 1e-4;
    min_top1 = 1.0;
    near_tie_gap = 0.0;
  }
}

std::string FixtureCheckResult::summary_line() const {
  char b[320];
  std::snprintf(b, sizeof b,
                "fixture-check: cases=%zu prefill_rel_l2=%.3e decode_rel_l2=%.3e top1=%.4f greedy=%lld/%lld near_ties=%lld",
                cases.size(), prefill_rel_l2, decode_rel_l2, top1, static_cast<long long>(greedy_agree),
                static_cast<long long>(greedy_total), static_cast<long long>(near_ties));
  return b;
}

FixtureCheckResult run_fixture_check(const FixtureCheckOptions& opts, std::ostream& log) {
  const TensorStore ref = TensorStore::open(opts.reference);
  std::unique_ptr<ModelWeights> host;
  std::unique_ptr<Subject> subject;
  ModelConfig cfg;
  if (opts.backend == "cpu") {
    host = std::make_unique<ModelWeights>(load_model(opts.model_dir));
    cfg = host->cfg;
    subject = std::make_unique<ReferenceSubject>(*host);
  } else {
    if (opts.internals) throw Error("--internals is only available with --backend cpu");
    int64_t most = 0, longest = 0;
    for (int64_t ci = 0;; ++ci) {
      const TensorInfo* ids = ref.find("case" + std::to_string(ci) + ".input_ids");
      if (!ids) break;
      const TensorInfo* g = ref.find("case" + std::to_string(ci) + ".generated_ids");
      longest = std::max(longest, ids->numel());
      most = std::max(most, ids->numel() + (g ? g->numel() : 0) + 1);
    }
    LoadOptions lo;
    lo.keep_quantized = true;
    ModelWeights w = load_model(opts.model_dir, lo);
    cfg = w.cfg;
    worker::EngineConfig ec;
    ec.backend = worker::resolve_backend(opts.backend);
    ec.device = opts.device;
    ec.precision = opts.precision;
    ec.vram_budget_bytes = static_cast<uint64_t>(opts.vram_budget_gb * 1073741824.0);
    ec.max_sequences = 1;
    ec.max_tokens_per_step = std::max<int64_t>(longest, 1);
    ec.context_size = std::max<int64_t>(most, 1);
    auto e = worker::make_engine(w, nullptr, ec);
    log << "backend: " << e->stats().backend << "\n";
    subject = std::make_unique<EngineSubject>(std::move(e));
  }
  const int64_t V = cfg.vocab_size;
  FixtureCheckResult res;
  int64_t top1_agree = 0, top1_total = 0;
  using clock = std::chrono::steady_clock;
  for (int64_t ci = 0;; ++ci) {
    const std::string p = "case" + std::to_string(ci) + ".";
    const TensorInfo* ids_t = ref.find(p + "input_ids");
    if (!ids_t) break;
    std::vector<int32_t> ids;
    for (int64_t v : to_i64(*ids_t)) ids.push_back(static_cast<int32_t>(v));
    const TensorInfo& pl_t = ref.get(p + "prefill_logits");
    expect_shape(pl_t, {static_cast<int64_t>(ids.size()), V});
    const auto pl = to_f32(pl_t);
    std::vector<int64_t> gen;
    std::vector<float> dl;
    if (const TensorInfo* g = ref.find(p + "generated_ids")) {
      gen = to_i64(*g);
      const TensorInfo& dl_t = ref.get(p + "decode_logits");
      expect_shape(dl_t, {static_cast<int64_t>(gen.size()), V});
      dl = to_f32(dl_t);
    }
    CaseResult cr;
    cr.prompt_len = static_cast<int64_t>(ids.size());
    cr.decode_steps = static_cast<int64_t>(gen.size());

    InternalsRecorder rec(cfg.hc_mult * cfg.hidden_size);
    const bool record = opts.internals && ci == 0;
    subject->begin(cr.prompt_len + cr.decode_steps + 1, record ? &rec : nullptr);
    auto t0 = clock::now();
    const auto logits = subject->prefill(ids);
    const double pre_s = std::chrono::duration<double>(clock::now() - t0).count();
    cr.prefill_tok_s = static_cast<double>(ids.size()) / std::max(pre_s, 1e-9);
    // Folds one logits row into the case's figures; `next` is the stored greedy token this row
    // predicts (−1 when it predicts none).
    auto account = [&](const float* ours, const float* ref_row, double& rel_l2, int64_t next) {
      const RowCompare rc = compare_row(ours, ref_row, V);
      if (!rc.ref_finite) {
        ++cr.ref_nonfinite_rows;
        return;
      }
      rel_l2 = std::max(rel_l2, rc.rel_l2);
      cr.max_abs = std::max(cr.max_abs, rc.max_abs);
      cr.top1_agree += rc.same_argmax;
      ++cr.top1_total;
      if (next >= 0) {
        const bool agree = rc.argmax == next;
        cr.greedy_agree += agree;
        ++cr.greedy_total;
        if (!agree && top2_gap_over_rms(ref_row, V) < opts.near_tie_gap) ++cr.near_ties;
      }
    };
    if (static_cast<int64_t>(logits.size()) != cr.prompt_len * V)
      throw Error("the engine returned " + std::to_string(logits.size()) + " prefill logits, expected " +
                  std::to_string(cr.prompt_len * V));
    for (int64_t t = 0; t < cr.prompt_len; ++t)
      account(logits.data() + t * V, pl.data() + t * V, cr.prefill_rel_l2,
              t == cr.prompt_len - 1 && !gen.empty() ? gen[0] : -1);
    t0 = clock::now();
    for (size_t i = 0; i < gen.size(); ++i) {
      const auto step = subject->decode(static_cast<int32_t>(gen[i]));
      if (static_cast<int64_t>(step.size()) != V) throw Error("the engine returned a decode row of the wrong size");
      // The last row predicts a token that is not stored.
      account(step.data(), dl.data() + i * V, cr.decode_rel_l2, i + 1 < gen.size() ? gen[i + 1] : -1);
    }
    const double dec_s = std::chrono::duration<double>(clock::now() - t0).count();
    subject->end();
    cr.decode_tok_s = gen.empty() ? 0.0 : static_cast<double>(gen.size()) / std::max(dec_s, 1e-9);
    char line[360];
    std::snprintf(line, sizeof line,
                  "case %lld: prompt=%lld decode=%lld prefill_rel_l2=%.3e decode_rel_l2=%.3e max_abs=%.3e top1=%lld/%lld "
                  "greedy=%lld/%lld near_ties=%lld prefill_tok_s=%.1f decode_tok_s=%.1f",
                  static_cast<long long>(ci), static_cast<long long>(cr.prompt_len),
                  static_cast<long long>(cr.decode_steps), cr.prefill_rel_l2, cr.decode_rel_l2, cr.max_abs,
                  static_cast<long long>(cr.top1_agree), static_cast<long long>(cr.top1_total),
                  static_cast<long long>(cr.greedy_agree), static_cast<long long>(cr.greedy_total),
                  static_cast<long long>(cr.near_ties), cr.prefill_tok_s, cr.decode_tok_s);
    log << line << "\n";
    if (cr.ref_nonfinite_rows > 0)
      log << "  warning: " << cr.ref_nonfinite_rows
          << " reference rows hold NaN/inf (transformers' fully masked attention) and were not compared\n";
    if (cr.near_ties > 0)
      log << "  note: " << cr.near_ties << " greedy disagreement(s) where the reference's top-2 gap is below "
          << opts.near_tie_gap << "·rms (near ties)\n";
    if (record) compare_internals(ref, cfg, rec, opts, res, log);
    res.prefill_rel_l2 = std::max(res.prefill_rel_l2, cr.prefill_rel_l2);
    res.decode_rel_l2 = std::max(res.decode_rel_l2, cr.decode_rel_l2);
    res.greedy_agree += cr.greedy_agree;
    res.greedy_total += cr.greedy_total;
    res.near_ties += cr.near_ties;
    top1_agree += cr.top1_agree;
    top1_total += cr.top1_total;
    res.cases.push_back(cr);
  }
  if (res.cases.empty()) throw Error(opts.reference + ": no case0.input_ids: not a fixture reference file");
  res.top1 = top1_total ? static_cast<double>(top1_agree) / static_cast<double>(top1_total) : 0.0;
  res.passed = res.prefill_rel_l2 <= opts.max_rel_l2 && res.decode_rel_l2 <= opts.max_rel_l2 &&
               res.top1 >= opts.min_top1 && res.greedy_agree + res.near_ties == res.greedy_total &&
               res.internals_ok;
  return res;
}

}  // namespace ft
