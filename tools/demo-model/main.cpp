// flashtier-demo-model --out DIR [--hidden N] [--layers N] [--experts N] [--top-k N] [--seed S] [--fp32]
//                      [--vocab N]
#include <filesystem>
#include <iostream>
#include <string>

#include "shared/core/error.h"
#include "tools/demo-model/demo_model.h"

int main(int argc, char** argv) {
  ft::demo::DemoOptions o;
  auto num = [&](int& i) { return std::stoll(argv[++i]); };
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      const bool has = i + 1 < argc;
      if (a == "--out" && has) o.out_dir = argv[++i];
      else if (a == "--hidden" && has) o.hidden = num(i);
      else if (a == "--layers" && has) o.layers = num(i);
      else if (a == "--experts" && has) o.experts = num(i);
      else if (a == "--top-k" && has) o.top_k = num(i);
      else if (a == "--merges" && has) o.merges = num(i);
      else if (a == "--seed" && has) o.seed = static_cast<uint64_t>(num(i));
      else if (a == "--fp32") o.fp32 = true;
      else if (a == "--vocab" && has) o.vocab = num(i);
      else if (a == "--tokenizer-only") o.tokenizer_only = true;
      else {
        std::cerr << "usage: flashtier-demo-model --out DIR [--hidden N] [--layers N] [--experts N] [--top-k N]"
                     " [--merges N] [--seed S] [--fp32] [--vocab N]\n"
                     "         (--vocab 154880: GLM-5.3-Flash's vocabulary size, special tokens at their real ids)\n"
                     "       flashtier-demo-model --out DIR --tokenizer-only --vocab N   (tokenizer files only)\n";
        return 2;
      }
    }
    if (o.out_dir.empty()) throw ft::Error("--out DIR is required");
    if (o.hidden % 64 != 0 || o.hidden < 64) throw ft::Error("--hidden must be a positive multiple of 64");
    std::filesystem::create_directories(o.out_dir);
    const ft::demo::DemoVocab v = ft::demo::write_demo_tokenizer(o);
    const int64_t vocab = v.model_vocab;
    if (o.tokenizer_only) {
      std::cout << "tokenizer (vocab " << vocab << ") written to " << o.out_dir << "\n";
      return 0;
    }
    ft::demo::write_demo_weights(o, vocab, v.eos_ids);
    std::cout << "demo model written to " << o.out_dir << " (vocab " << vocab << ", hidden " << o.hidden << ", "
              << o.layers << " layers, " << o.experts << " experts)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "flashtier-demo-model: " << e.what() << "\n";
    return 2;
  }
}
