// exl3-synth: writes a synthetic GLM-5.3-Flash checkpoint in EXL3 form (random trellis bits) for
// benchmarks. Real widths by default; --small gives the tiny widths used by tests.
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include "shared/core/error.h"
#include "tools/exl3/synthetic_model.h"

namespace {

int usage() {
  std::cerr << "usage: exl3-synth --out DIR [--layers N] [--dense-layers N] [--k K] [--other-k K] [--head-bits K]\n"
               "                  [--codebook mul1|mcg|3inst] [--experts E] [--vocab V] [--seed S] [--shard-gb G] [--small]\n"
               "  Writes config.json and safetensors of a glm5_next model whose quantized linears are random\n"
               "  EXL3 tensors (GLM-5.3-Flash widths: hidden 4096, 288 experts of 2048, ...). --k sets the\n"
               "  routed experts' bits (default 3), --other-k the attention/shared/dense bits (default 4).\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  ft::exl3::SynthOptions o;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      auto next = [&]() -> std::string {
        if (i + 1 >= argc) throw ft::Error("exl3-synth: " + a + " needs a value");
        return argv[++i];
      };
      if (a == "--out") o.out_dir = next();
      else if (a == "--layers") o.layers = std::stoi(next());
      else if (a == "--dense-layers") o.dense_layers = std::stoi(next());
      else if (a == "--k") o.expert_k = std::stoi(next());
      else if (a == "--other-k") o.other_k = std::stoi(next());
      else if (a == "--head-bits") o.head_bits = std::stoi(next());
      else if (a == "--experts") o.experts = std::stoll(next());
      else if (a == "--vocab") o.vocab = std::stoll(next());
      else if (a == "--seed") o.seed = std::stoull(next());
      else if (a == "--shard-gb") o.shard_bytes = static_cast<uint64_t>(std::stod(next()) * (1ull << 30));
      else if (a == "--codebook") {
        const std::string c = next();
        if (c == "mul1") o.codebook = ft::exl3::Codebook::Mul1;
        else if (c == "mcg") o.codebook = ft::exl3::Codebook::Mcg;
        else if (c == "3inst") o.codebook = ft::exl3::Codebook::Inst3;
        else throw ft::Error("exl3-synth: unknown codebook " + c);
      } else if (a == "--small") {
        o.vocab = 512, o.hidden = 256, o.inter = 384, o.moe_inter = 128, o.experts = 16, o.experts_per_tok = 4;
        o.linear_heads = 2, o.heads = 2, o.q_lora = 128, o.kv_lora = 128, o.qk_nope = 128, o.v_head_dim = 128;
        o.index_heads = 8, o.index_head_dim = 64, o.index_kpool = 4, o.index_topk = 16;
      } else if (a == "-h" || a == "--help") {
        usage();
        return 0;
      } else {
        std::cerr << "exl3-synth: unknown argument " << a << "\n";
        return usage();
      }
    }
    if (o.out_dir.empty()) return usage();
    std::filesystem::create_directories(o.out_dir);
    const uint64_t bytes = ft::exl3::write_synthetic_model(o);
    std::cout << "exl3-synth: wrote " << o.out_dir << " (" << bytes / 1e9 << " GB, " << o.layers << " layers, experts K="
              << o.expert_k << ")\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
}
