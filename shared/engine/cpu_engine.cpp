#include "shared/engine/cpu_engine.h"

#include "shared/sampling/logprobs.h"
#include "shared/sampling/token_constraint.h"

namespace ft {

CpuEngine::CpuEngine(const ModelWeights& w, ExpertBackend* experts, int max_sequences, const PrefixCacheOptions& pc)
    : ref_(w, experts), max_sequences_(max_sequences), pc_(pc), snapshots_(w.cfg, pc.bytes) {}

uint64_t CpuEngine::open(const SequenceSpec& spec) {
  if (static_cast<int>(seqs_.size()) >= max_sequences_)
    throw EngineFull("all " + std::to_string(max_sequences_) + " sequence slots are in use");
  if (spec.top_logprobs < 0 || spec.top_logprobs > 20) throw Error("top_logprobs must be in [0, 20]");
  auto s = std::make_unique<Seq>(Seq{spec, ref_.new_state(), Sampler(spec.sampling), {}, {}});
  const uint64_t id = next_++;
  seqs_.emplace(id, std::move(s));
  return id;
}

void CpuEngine::close(uint64_t seq) { seqs_.erase(seq); }

void CpuEngine::step(std::span<const StepItem> items, std::vector<StepResult>& results) {
  for (const StepItem& it : items)
    if (!seqs_.count(it.seq)) throw Error("step: sequence " + std::to_string(it.seq) + " is not open");
  // With the prefix cache on, a prompt's final chunk runs as two passes — all but its last token,
  // a snapshot there, then the last token — so a later request with the same prompt (a retry,
  // n > 1, one system prompt before different questions…) restores all but the one token it must
  // compute. The reference engine is position-exact: the split changes no bits.
  std::vector<std::vector<float>> head_logits(items.size());
  std::vector<bool> split(items.size(), false);
  {
    std::vector<ForwardItem> head;
    std::vector<size_t> which;
    for (size_t i = 0; i < items.size(); ++i)
      if (pc_.bytes > 0 && items[i].prompt && items[i].sample && items[i].tokens.size() >= 2) {
        split[i] = true;
        which.push_back(i);
        head.push_back({&seqs_.at(items[i].seq)->state, items[i].tokens.first(items[i].tokens.size() - 1),
                        items[i].logits == LogitsWanted::All, {}});
      }
    if (!head.empty()) {
      ref_.forward(head);
      for (size_t k = 0; k < which.size(); ++k) {
        const StepItem& it = items[which[k]];
        const Seq& s = *seqs_.at(it.seq);
        std::vector<int32_t> key = s.tokens;
        key.insert(key.end(), it.tokens.begin(), it.tokens.end() - 1);
        snapshots_.keep(key, s.state);
        head_logits[which[k]] = std::move(head[k].logits);
      }
    }
  }
  std::vector<ForwardItem> fwd;
  fwd.reserve(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    fwd.push_back({&seqs_.at(it.seq)->state, split[i] ? it.tokens.last(1) : it.tokens,
                   it.logits == LogitsWanted::All, {}});
  }
  // Constraint masks depend only on the tokens sampled so far, so they are computed on a helper
  // thread while the forward pass runs; sampling waits for them.
  std::vector<std::vector<uint32_t>> masks(items.size());
  std::vector<uint8_t> masked(items.size(), 0);
  bool masking = false;
  {
    std::vector<size_t> todo;
    for (size_t i = 0; i < items.size(); ++i)
      if (items[i].sample && seqs_.at(items[i].seq)->spec.constraint) todo.push_back(i);
    masking = !todo.empty();
    if (masking)
      helper_.start([&, todo] {
        for (size_t i : todo) {
          TokenConstraint& c = *seqs_.at(items[i].seq)->spec.constraint;
          masks[i].resize(c.words());
          masked[i] = c.mask(masks[i]) ? 1 : 0;
        }
      });
  }
  try {
    ref_.forward(fwd);
  } catch (...) {
    if (masking) {
      try {
        helper_.wait();
      } catch (...) {
      }
    }
    throw;
  }
  if (masking) helper_.wait();
  for (size_t i = 0; i < items.size(); ++i)
    if (split[i] && items[i].logits == LogitsWanted::All)
      fwd[i].logits.insert(fwd[i].logits.begin(), head_logits[i].begin(), head_logits[i].end());
  results.assign(items.size(), {});
  const int64_t V = config().vocab_size;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    Seq& s = *seqs_.at(it.seq);
    if (it.prompt) s.history.add_prompt(it.tokens);
    const int64_t before = static_cast<int64_t>(s.tokens.size());
    s.tokens.insert(s.tokens.end(), it.tokens.begin(), it.tokens.end());
    // Long prefills leave snapshots behind at stride boundaries (a later prompt that shares only
    // the beginning still finds them).
    if (it.prompt && pc_.snapshot_stride > 0 &&
        before / pc_.snapshot_stride != static_cast<int64_t>(s.tokens.size()) / pc_.snapshot_stride)
      snapshots_.keep(s.tokens, s.state);
    StepResult& r = results[i];
    if (it.logits != LogitsWanted::None) r.logits = fwd[i].logits;
    if (!it.sample) continue;
    // The last row's logits: sampling modifies them in place, so work on a copy.
    std::vector<float> last(fwd[i].logits.end() - V, fwd[i].logits.end());
    std::vector<float> raw;
    if (s.spec.logprobs || s.spec.top_logprobs > 0) raw = last;
    // Constraint mask and logit bias before penalties, temperature and the filters; logprobs
    // stay those of the model's raw distribution.
    if (s.spec.constraint) {
      apply_bias(last, *s.spec.constraint);
      if (masked[i]) apply_mask(last, masks[i]);
    }
    r.token = s.sampler.sample(last, s.history);
    if (s.spec.constraint) s.spec.constraint->accept(r.token);
    if (!raw.empty()) {
      TokenLogprobs lp = token_logprobs(raw, r.token, s.spec.top_logprobs);
      r.logprob = lp.chosen;
      r.top = std::move(lp.top);
    }
    s.history.add_generated(r.token);
  }
}

int64_t CpuEngine::restore_prefix(uint64_t seq, std::span<const int32_t> prompt) {
  Seq& s = *seqs_.at(seq);
  if (s.state.n_tokens != 0 || prompt.size() < 2) return 0;
  const int64_t n = snapshots_.restore(prompt, static_cast<int64_t>(prompt.size()) - 1, s.state);
  if (n > 0) {
    s.tokens.assign(prompt.begin(), prompt.begin() + n);
    s.history.add_prompt(prompt.first(static_cast<size_t>(n)));
  }
  return n;
}

void CpuEngine::keep_prefix(uint64_t seq) {
  auto it = seqs_.find(seq);
  if (it != seqs_.end()) snapshots_.keep(it->second->tokens, it->second->state);
}

PrefixCacheStats CpuEngine::prefix_stats() const { return snapshots_.stats(); }

EngineStats CpuEngine::stats() const {
  EngineStats st;
  st.backend = "cpu";
  uint64_t state = 0;
  for (const auto& [id, s] : seqs_) state += s->state.bytes();
  st.memory = {{"sequence_state", state}};
  return st;
}

}  // namespace ft
