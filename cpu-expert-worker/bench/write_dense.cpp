// A model folder with only routed experts (bf16, random), streamed to disk tensor by tensor: the
// cpu-expert-worker reads nothing else, so this is enough to benchmark dense experts at real widths.
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cpu-expert-worker/bench/bench.h"

namespace ft::cew::bench {

int write_dense_main(int argc, char** argv) {
  std::string out;
  int64_t D = 4096, I = 2048, E = 32, L = 1, K = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--out") out = v;
    else if (a == "--hidden") D = std::stoll(v);
    else if (a == "--inter") I = std::stoll(v);
    else if (a == "--experts") E = std::stoll(v);
    else if (a == "--layers") L = std::stoll(v);
    else if (a == "--top-k") K = std::stoll(v);
  }
  if (out.empty()) {
    std::fprintf(stderr, "write-dense-model: --out DIR is required\n");
    return 2;
  }
  std::filesystem::create_directories(out);
  nlohmann::ordered_json text = {{"model_type", "glm5_next_text"},
                                 {"hidden_size", D},
                                 {"moe_intermediate_size", I},
                                 {"num_hidden_layers", L},
                                 {"n_routed_experts", E},
                                 {"num_experts_per_tok", K},
                                 {"layer_types", std::vector<std::string>(L, "linear_attention")},
                                 {"mlp_layer_types", std::vector<std::string>(L, "sparse")},
                                 {"indexer_types", std::vector<std::string>(L, "full")}};
  nlohmann::ordered_json cfg = {{"architectures", {"Glm5NextForConditionalGeneration"}},
                                {"model_type", "glm5_next"},
                                {"text_config", text}};
  std::ofstream(out + "/config.json") << cfg.dump(2);

  struct T {
    std::string name;
    int64_t rows, cols;
  };
  std::vector<T> tensors;
  for (int64_t l = 0; l < L; ++l)
    for (int64_t e = 0; e < E; ++e) {
      const std::string p = "model.language_model.layers." + std::to_string(l) + ".mlp.experts." + std::to_string(e) + ".";
      tensors.push_back({p + "gate_proj.weight", I, D});
      tensors.push_back({p + "up_proj.weight", I, D});
      tensors.push_back({p + "down_proj.weight", D, I});
    }
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t off = 0;
  for (const T& t : tensors) {
    const uint64_t n = static_cast<uint64_t>(t.rows * t.cols) * 2;
    header[t.name] = {{"dtype", "BF16"}, {"shape", {t.rows, t.cols}}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  std::string h = header.dump();
  h.resize((h.size() + 7) / 8 * 8, ' ');
  std::ofstream f(out + "/model.safetensors", std::ios::binary);
  const uint64_t hn = h.size();
  f.write(reinterpret_cast<const char*>(&hn), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  uint64_t s = 0x9E3779B97F4A7C15ull;
  std::vector<uint16_t> buf;
  for (const T& t : tensors) {
    buf.resize(static_cast<size_t>(t.rows * t.cols));
    // Random bf16 of magnitude ~2^-6 … 2^-4 with random signs: finite, SwiGLU-friendly.
    for (uint16_t& v : buf) {
      s ^= s << 13, s ^= s >> 7, s ^= s << 17;
      v = static_cast<uint16_t>((s & 0x8000u) | ((121u + (s >> 20) % 3) << 7) | ((s >> 32) & 0x7Fu));
    }
    f.write(reinterpret_cast<const char*>(buf.data()), static_cast<std::streamsize>(buf.size() * 2));
  }
  if (!f) {
    std::fprintf(stderr, "write-dense-model: cannot write %s\n", out.c_str());
    return 1;
  }
  std::printf("wrote %s: %lld layers x %lld experts of %lld x %lld (bf16), %.2f GB\n", out.c_str(),
              static_cast<long long>(L), static_cast<long long>(E), static_cast<long long>(D),
              static_cast<long long>(I), static_cast<double>(off) / 1e9);
  return 0;
}

}  // namespace ft::cew::bench
