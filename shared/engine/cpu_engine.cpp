#include "shared/engine/cpu_engine.h"

#include "shared/sampling/logprobs.h"

namespace ft {

CpuEngine::CpuEngine(const ModelWeights& w, ExpertBackend* experts, int max_sequences)
    : ref_(w, experts), max_sequences_(max_sequences) {}

uint64_t CpuEngine::open(const SequenceSpec& spec) {
  if (static_cast<int>(seqs_.size()) >= max_sequences_)
    throw EngineFull("all " + std::to_string(max_sequences_) + " sequence slots are in use");
  if (spec.top_logprobs < 0 || spec.top_logprobs > 20) throw Error("top_logprobs must be in [0, 20]");
  auto s = std::make_unique<Seq>(Seq{spec, ref_.new_state(), Sampler(spec.sampling), {}});
  const uint64_t id = next_++;
  seqs_.emplace(id, std::move(s));
  return id;
}

void CpuEngine::close(uint64_t seq) { seqs_.erase(seq); }

void CpuEngine::step(std::span<const StepItem> items, std::vector<StepResult>& results) {
  std::vector<ForwardItem> fwd;
  fwd.reserve(items.size());
  for (const StepItem& it : items) {
    auto s = seqs_.find(it.seq);
    if (s == seqs_.end()) throw Error("step: sequence " + std::to_string(it.seq) + " is not open");
    fwd.push_back({&s->second->state, it.tokens, it.logits == LogitsWanted::All, {}});
  }
  ref_.forward(fwd);
  results.assign(items.size(), {});
  const int64_t V = config().vocab_size;
  for (size_t i = 0; i < items.size(); ++i) {
    const StepItem& it = items[i];
    Seq& s = *seqs_.at(it.seq);
    if (it.prompt) s.history.add_prompt(it.tokens);
    StepResult& r = results[i];
    if (it.logits != LogitsWanted::None) r.logits = fwd[i].logits;
    if (!it.sample) continue;
    // The last row's logits: sampling modifies them in place, so work on a copy.
    std::vector<float> last(fwd[i].logits.end() - V, fwd[i].logits.end());
    std::vector<float> raw;
    if (s.spec.logprobs || s.spec.top_logprobs > 0) raw = last;
    r.token = s.sampler.sample(last, s.history);
    if (!raw.empty()) {
      TokenLogprobs lp = token_logprobs(raw, r.token, s.spec.top_logprobs);
      r.logprob = lp.chosen;
      r.top = std::move(lp.top);
    }
    s.history.add_generated(r.token);
  }
}

EngineStats CpuEngine::stats() const {
  EngineStats st;
  st.backend = "cpu";
  uint64_t state = 0;
  for (const auto& [id, s] : seqs_) state += s->state.bytes();
  st.memory = {{"sequence_state", state}};
  return st;
}

}  // namespace ft
