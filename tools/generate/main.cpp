// flashtier-generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]
// Greedy generation with the in-process reference engine: the engine alone, no services.
// Prints the continuation and prefill/decode speed.
#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>

#include "shared/core/error.h"
#include "shared/engine/reference_engine.h"
#include "shared/sampling/sampler.h"
#include "shared/text/tokenizer.h"

namespace {

int usage() {
  std::cerr << "usage: flashtier-generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [--max-tokens N]\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, prompt, prompt_ids;
  int max_tokens = 32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    if (a == "--model") model = argv[++i];
    else if (a == "--prompt") prompt = argv[++i];
    else if (a == "--prompt-ids") prompt_ids = argv[++i];
    else if (a == "--max-tokens") max_tokens = std::stoi(argv[++i]);
    else return usage();
  }
  if (model.empty() || (prompt.empty() == prompt_ids.empty())) return usage();
  try {
    const ft::ModelWeights w = ft::load_model(model);
    std::optional<ft::text::Tokenizer> tok;
    if (std::filesystem::exists(model + "/tokenizer.json")) tok = ft::text::Tokenizer::from_file(model + "/tokenizer.json");
    std::vector<int32_t> ids;
    if (!prompt.empty()) {
      if (!tok) throw ft::Error(model + ": no tokenizer.json, use --prompt-ids");
      ids = tok->encode(prompt);
    } else {
      std::stringstream ss(prompt_ids);
      for (std::string t; std::getline(ss, t, ',');) ids.push_back(std::stoi(t));
    }
    if (ids.empty()) throw ft::Error("empty prompt");
    ft::ReferenceEngine eng(w);
    ft::SequenceState s = eng.new_state();
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    auto logits = eng.prefill(s, ids, false);
    const double pre = std::chrono::duration<double>(clock::now() - t0).count();
    std::vector<int32_t> out;
    t0 = clock::now();
    for (int i = 0; i < max_tokens; ++i) {
      out.push_back(ft::argmax(logits));
      if (i + 1 < max_tokens) logits = eng.decode(s, out.back());
    }
    const double dec = std::chrono::duration<double>(clock::now() - t0).count();
    std::cout << "prompt tokens: " << ids.size() << "\ngenerated ids:";
    for (int32_t t : out) std::cout << ' ' << t;
    std::cout << "\n";
    if (tok) std::cout << "generated text: " << tok->decode(out) << "\n";
    std::cout << "prefill " << ids.size() / std::max(pre, 1e-9) << " tok/s, decode "
              << std::max(max_tokens - 1, 0) / std::max(dec, 1e-9) << " tok/s\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "flashtier-generate: " << e.what() << "\n";
    return 2;
  }
}
