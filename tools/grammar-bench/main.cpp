// flashtier-grammar-bench: what constrained decoding costs per step. For three constraints (a
// flat JSON Schema, a nested one with arrays, an enforced GLM tool call) it walks sequences with
// random allowed tokens (a random model, i.e. no repetition beyond what the grammar forces) and
// times the allowed-token mask (TokenConstraint::mask) and its application to a logit row
// (apply_constraint), at a vocabulary of --vocab ids (synthetic, BPE-shaped). With --model DIR it
// also times the CPU backend's decode step on that model, the step the mask is added to.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "shared/engine/cpu_engine.h"
#include "shared/engine/local_experts.h"
#include "shared/engine/weights.h"
#include "shared/grammar/constraint.h"
#include "shared/grammar/matcher.h"
#include "shared/text/tokenizer.h"
#include "tools/grammar-bench/synthetic_vocab.h"

namespace {

using clock_type = std::chrono::steady_clock;
double us_since(clock_type::time_point t) { return std::chrono::duration<double, std::micro>(clock_type::now() - t).count(); }

struct Case {
  const char* name;
  ft::grammar::ConstraintSource src;
};

std::vector<Case> cases() {
  using K = ft::grammar::ConstraintSource::Kind;
  std::vector<Case> v(3);
  v[0].name = "flat object (string, integer range, enum, boolean)";
  v[0].src.kind = K::JsonSchema;
  v[0].src.text = R"({"type":"object","properties":{"name":{"type":"string","maxLength":24},"age":{"type":"integer","minimum":0,"maximum":130},
    "role":{"enum":["admin","user","guest"]},"active":{"type":"boolean"}},"required":["name","age","role","active"]})";
  v[1].name = "nested (array of objects, pattern, number, anyOf)";
  v[1].src.kind = K::JsonSchema;
  v[1].src.text = R"({"type":"object","properties":{"order":{"type":"string","pattern":"^[A-Z]{3}-[0-9]{4}$"},
    "items":{"type":"array","minItems":1,"maxItems":4,"items":{"type":"object","properties":{"sku":{"type":"string","maxLength":12},
    "qty":{"type":"integer","minimum":1,"maximum":99},"price":{"type":"number","minimum":0,"maximum":10000}},"required":["sku","qty","price"]}},
    "note":{"anyOf":[{"type":"string","maxLength":40},{"type":"null"}]}},"required":["order","items","note"]})";
  v[2].name = "GLM tool call (named function, 3 typed arguments)";
  v[2].src.kind = K::ToolCalls;
  v[2].src.tools.tools_json = R"([{"type":"function","function":{"name":"search_flights","parameters":{"type":"object","properties":{
    "origin":{"type":"string","maxLength":20},"destination":{"type":"string","maxLength":20},"passengers":{"type":"integer","minimum":1,"maximum":9},
    "date":{"type":"string","format":"date"}},"required":["origin","destination","date"]}}}])";
  v[2].src.tools.function = "search_flights";
  v[2].src.tools.single_call = true;
  return v;
}

double pct(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, size_t(p * double(v.size())))];
}

// Mean decode step of the CPU backend on a model, optionally with a regex constraint over the
// model's tokenizer (a new automaton state every step, so no mask comes from the cache).
double decode_step_ms(const ft::ModelWeights& w, const std::string& dir, int steps, bool constrained) {
  ft::LocalExperts experts(w);
  ft::CpuEngine eng(w, &experts, 1);
  ft::SequenceSpec spec;
  spec.sampling.temperature = 0;
  spec.max_tokens = 64 + steps;
  if (constrained) {
    const auto tok = ft::text::Tokenizer::from_file(dir + "/tokenizer.json");
    const auto vocab = ft::grammar::Vocabulary::from_tokenizer(tok, size_t(w.cfg.vocab_size));
    ft::grammar::ConstraintSource src;
    src.kind = ft::grammar::ConstraintSource::Kind::Regex;
    src.text = "[a-z ]{0,2000}";
    ft::ConstraintOptions o;
    o.vocab_size = size_t(w.cfg.vocab_size);
    spec.constraint = std::make_shared<ft::TokenConstraint>(o, ft::grammar::make_matcher(ft::grammar::compile_constraint(src), vocab));
  }
  const uint64_t seq = eng.open(spec);
  std::vector<int32_t> prompt(16);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t(i * 7 + 3);
  std::vector<ft::StepResult> res;
  ft::StepItem it;
  it.seq = seq;
  it.tokens = prompt;
  it.sample = true;
  eng.step(std::span<const ft::StepItem>(&it, 1), res);
  int32_t tok = res[0].token;
  const auto t0 = clock_type::now();
  for (int i = 0; i < steps; ++i) {
    it.tokens = std::span<const int32_t>(&tok, 1);
    it.prompt = false;
    eng.step(std::span<const ft::StepItem>(&it, 1), res);
    tok = res[0].token;
  }
  const double ms = us_since(t0) / 1000.0 / steps;
  eng.close(seq);
  return ms;
}

}  // namespace

int main(int argc, char** argv) {
  size_t vocab = 154880;
  int runs = 20;
  std::string model;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--vocab") vocab = std::stoul(argv[i + 1]);
    else if (a == "--runs") runs = std::stoi(argv[i + 1]);
    else if (a == "--model") model = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: flashtier-grammar-bench [--vocab N] [--runs N] [--model DIR]\n");
      return 2;
    }
  }
  auto t0 = clock_type::now();
  const auto v = ft::grammar::synthetic_vocab(vocab, 1);
  std::printf("vocabulary: %zu ids, trie %zu nodes, built in %.0f ms\n", v->size(), v->trie().size(), us_since(t0) / 1000);
  std::printf("| constraint | compile | steps | mask mean | p50 | p99 | max | first step | cache hits | apply to logits |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|---|\n");
  std::vector<float> logits(vocab);
  for (const Case& c : cases()) {
    t0 = clock_type::now();
    const ft::grammar::Grammar g = ft::grammar::compile_constraint(c.src);
    const double compile_us = us_since(t0);
    std::vector<double> mask_us, apply_us, first_us;
    uint64_t masks = 0, hits = 0;
    std::mt19937_64 rng(7);
    for (int r = 0; r < runs; ++r) {
      auto m = std::make_shared<ft::grammar::Matcher>(ft::grammar::Pda::compile(g), v);
      ft::ConstraintOptions o;
      o.vocab_size = vocab;
      o.end_ids = {int32_t(v->added_ids("<|endoftext|>")[0])};
      ft::TokenConstraint tc(o, m);
      std::vector<uint32_t> words(tc.words());
      for (int step = 0; step < 400; ++step) {
        auto t = clock_type::now();
        tc.mask(words);
        const double us = us_since(t);
        mask_us.push_back(us);
        if (step == 0) first_us.push_back(us);
        std::vector<int32_t> allowed;
        for (size_t id = 0; id < vocab; ++id)
          if ((words[id >> 5] >> (id & 31)) & 1) allowed.push_back(int32_t(id));
        std::fill(logits.begin(), logits.end(), 0.0f);
        t = clock_type::now();
        ft::apply_mask(logits, words);
        apply_us.push_back(us_since(t));
        const int32_t tok = allowed[rng() % allowed.size()];
        if (tok == o.end_ids[0]) break;
        tc.accept(tok);
      }
      masks += m->stats().masks;
      hits += m->stats().mask_cache_hits;
    }
    double mean = 0;
    for (double x : mask_us) mean += x;
    mean /= double(mask_us.size());
    double amean = 0;
    for (double x : apply_us) amean += x;
    amean /= double(apply_us.size());
    std::printf("| %s | %.0f µs | %zu | %.1f µs | %.1f µs | %.1f µs | %.0f µs | %.0f µs | %.0f%% | %.1f µs |\n", c.name, compile_us,
                mask_us.size(), mean, pct(mask_us, 0.5), pct(mask_us, 0.99), pct(mask_us, 1.0), pct(first_us, 0.5),
                100.0 * double(hits) / double(std::max<uint64_t>(masks, 1)), amean);
  }
  if (!model.empty()) {
    const ft::ModelWeights w = ft::load_model(model);
    decode_step_ms(w, model, 8, false);  // warm-up
    // Alternating rounds, the best of each: the machine's other load hits both alike.
    double plain = 1e9, constrained = 1e9;
    for (int r = 0; r < 6; ++r) {
      plain = std::min(plain, decode_step_ms(w, model, 64, false));
      constrained = std::min(constrained, decode_step_ms(w, model, 64, true));
    }
    std::printf("CPU backend decode step (%s, vocab %lld, batch 1): %.3f ms; with a regex constraint: %.3f ms (%+.1f%%)\n",
                model.c_str(), static_cast<long long>(w.cfg.vocab_size), plain, constrained, 100.0 * (constrained / plain - 1.0));
  }
  return 0;
}
