// EXL3 loader: per-tensor K and codebook, legacy signs, unaligned data, clear errors for
// malformed linears, quantization_config, the engine's dense equivalent, and synthetic models.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/engine/linear_source.h"
#include "shared/engine/weights.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/expert_forward.h"
#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/quant_config.h"
#include "shared/exl3/reference.h"
#include "shared/exl3/trellis.h"
#include "shared/model/config.h"
#include "tests/exl3/golden.h"
#include "tools/exl3/stream_writer.h"
#include "tools/exl3/synthetic_model.h"

namespace ft::exl3 {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("exl3_loader_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int& counter() {
    static int c = 0;
    return c;
  }
  std::string str() const { return path.string(); }
};

std::vector<uint8_t> f16s(const std::vector<float>& v) {
  std::vector<uint8_t> b(2 * v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    const uint16_t h = f32_to_f16(v[i]);
    std::memcpy(&b[2 * i], &h, 2);
  }
  return b;
}

std::vector<uint8_t> i32(uint32_t v) {
  std::vector<uint8_t> b(4);
  std::memcpy(b.data(), &v, 4);
  return b;
}

std::vector<uint8_t> random_bytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng());
  return b;
}

// A model file holding one linear "lin" (in 128 → out 256, K = 3) built from parts.
struct LinearParts {
  std::vector<int64_t> trellis_shape = {8, 16, 48};
  int64_t suh = 128, svh = 256;
  bool legacy = false, mcg = false, mul1 = false, bias = false, misalign = false;
  uint32_t mul1_value = kMul1Mult;
};

std::string write_linear(const TempDir& dir, const LinearParts& p) {
  StreamWriter w;
  if (p.misalign) w.add_bytes("pad", DType::U8, {3}, {1, 2, 3});  // pushes every later tensor off alignment
  int64_t tn = 2;
  for (int64_t d : p.trellis_shape) tn *= d;
  w.add_bytes("lin.trellis", DType::I16, p.trellis_shape, random_bytes(static_cast<size_t>(tn), 9));
  if (p.legacy) {
    w.add_bytes("lin.su", DType::I16, {p.suh / 16}, random_bytes(static_cast<size_t>(p.suh / 8), 10));
    w.add_bytes("lin.sv", DType::I16, {p.svh / 16}, random_bytes(static_cast<size_t>(p.svh / 8), 11));
  } else {
    w.add_bytes("lin.suh", DType::F16, {p.suh}, f16s(std::vector<float>(p.suh, 0.5f)));
    w.add_bytes("lin.svh", DType::F16, {p.svh}, f16s(std::vector<float>(p.svh, -0.25f)));
  }
  if (p.bias) w.add_bytes("lin.bias", DType::F16, {p.svh}, f16s(std::vector<float>(p.svh, 0.125f)));
  if (p.mcg) w.add_bytes("lin.mcg", DType::I32, {}, i32(kMcgMult));
  if (p.mul1) w.add_bytes("lin.mul1", DType::I32, {}, i32(p.mul1_value));
  w.write(dir.str(), 1ull << 30);
  return dir.str();
}

void expect_error(const LinearParts& p, const std::string& needle) {
  TempDir d;
  const TensorStore st = TensorStore::open(write_linear(d, p));
  try {
    load_exl3_linear(st, "lin");
    FAIL() << "expected ft::Error containing " << needle;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(Exl3Loader, ReadsKCodebookAndScales) {
  TempDir d;
  LinearParts p;
  p.mul1 = true;
  p.bias = true;
  const TensorStore st = TensorStore::open(write_linear(d, p));
  const Exl3Linear q = load_exl3_linear(st, "lin");
  EXPECT_EQ(q.K, 3);
  EXPECT_EQ(q.codebook, Codebook::Mul1);
  EXPECT_EQ(q.in_p, 128);
  EXPECT_EQ(q.out_p, 256);
  EXPECT_EQ(q.suh[5], 0.5f);
  EXPECT_EQ(q.svh[7], -0.25f);
  ASSERT_EQ(q.bias.size(), 256u);
  EXPECT_EQ(q.bias[3], 0.125f);
}

TEST(Exl3Loader, LegacySignBits) {
  TempDir d;
  LinearParts p;
  p.legacy = true;
  const TensorStore st = TensorStore::open(write_linear(d, p));
  const Exl3Linear q = load_exl3_linear(st, "lin");
  const std::vector<uint8_t> su = random_bytes(16, 10);  // what write_linear stored
  for (int i = 0; i < 128; ++i) {
    const uint16_t word = static_cast<uint16_t>(su[2 * (i / 16)] | su[2 * (i / 16) + 1] << 8);
    EXPECT_EQ(q.suh[i], (word >> (i % 16)) & 1 ? -1.0f : 1.0f) << i;
  }
  EXPECT_EQ(q.codebook, Codebook::Inst3);
}

TEST(Exl3Loader, UnalignedDataDecodesLikeAligned) {
  TempDir d1, d2;
  LinearParts p;
  p.mcg = true;
  const TensorStore a = TensorStore::open(write_linear(d1, p));
  p.misalign = true;
  const TensorStore u = TensorStore::open(write_linear(d2, p));
  const Exl3Linear qa = load_exl3_linear(a, "lin"), qu = load_exl3_linear(u, "lin");
  ASSERT_NE(reinterpret_cast<uintptr_t>(qu.trellis) % 2, 0u) << "the test meant to misalign the trellis";
  EXPECT_EQ(qu.codebook, Codebook::Mcg);
  std::vector<uint16_t> wa(128 * 256), wu(128 * 256);
  decode_trellis_f16(qa.trellis, 128, 256, 3, Codebook::Mcg, wa.data());
  decode_trellis_f16(qu.trellis, 128, 256, 3, Codebook::Mcg, wu.data());
  EXPECT_EQ(wa, wu);
  EXPECT_EQ(qa.suh, qu.suh);
}

TEST(Exl3Loader, ClearErrors) {
  {
    LinearParts p;
    p.trellis_shape = {8, 16, 144};
    expect_error(p, "K = 9 is outside 1..8");
  }
  {
    LinearParts p;
    p.trellis_shape = {8, 16, 40};
    expect_error(p, "lin.trellis has shape [8, 16, 40]");
  }
  {
    LinearParts p;
    p.trellis_shape = {4, 16, 48};
    p.suh = 64;
    expect_error(p, "not multiples of 128");
  }
  {
    LinearParts p;
    p.suh = 256;
    expect_error(p, "lin.suh has shape [256], expected [128]");
  }
  {
    LinearParts p;
    p.mcg = p.mul1 = true;
    expect_error(p, "both .mcg and .mul1");
  }
  {
    LinearParts p;
    p.mul1 = true;
    p.mul1_value = 12345;
    expect_error(p, "lin.mul1: codebook marker value 12345");
  }
  {
    TempDir d;
    StreamWriter w;
    w.add_bytes("lin.trellis", DType::I16, {8, 16, 48}, random_bytes(8 * 16 * 96, 1));
    w.add_bytes("lin.suh", DType::F16, {128}, f16s(std::vector<float>(128, 1.0f)));
    w.write(d.str(), 1ull << 30);
    const TensorStore st = TensorStore::open(d.str());
    try {
      load_exl3_linear(st, "lin");
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("neither lin.svh nor lin.sv"), std::string::npos) << e.what();
    }
  }
  {
    TempDir d;
    const TensorStore st = TensorStore::open(write_linear(d, LinearParts{}));
    try {
      load_exl3_linear(st, "lin", 300, 128);
      FAIL();
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("expected in 128 → 128, out 300 → 384"), std::string::npos) << e.what();
    }
  }
}

// The fixture mixes K and codebooks per tensor (fixtures/README.md).
TEST(Exl3Loader, MixedKAndCodebooksInOneModel) {
  const TensorStore st = TensorStore::open(test::fixture("glm5-tiny-exl3/model"));
  struct Want {
    const char* name;
    int K;
    Codebook cb;
  };
  for (const Want& w : {Want{"lm_head", 6, Codebook::Mul1},
                        Want{"model.language_model.layers.0.mlp.down_proj", 4, Codebook::Mcg},
                        Want{"model.language_model.layers.0.self_attn.q_proj", 5, Codebook::Inst3},
                        Want{"model.language_model.layers.2.mlp.experts.3.up_proj", 2, Codebook::Mul1},
                        Want{"model.language_model.layers.3.mlp.experts.3.up_proj", 4, Codebook::Mul1}}) {
    const Exl3Linear q = load_exl3_linear(st, w.name);
    EXPECT_EQ(q.K, w.K) << w.name;
    EXPECT_EQ(q.codebook, w.cb) << w.name;
  }
  const ModelConfig cfg = load_config(test::fixture("glm5-tiny-exl3/model"));
  const auto qc = parse_quant_config(cfg.quantization_config_json, cfg.source);
  ASSERT_TRUE(qc.has_value());
  EXPECT_EQ(qc->head_bits, 6);
  EXPECT_EQ(qc->codebook, Codebook::Mul1);
  EXPECT_DOUBLE_EQ(qc->bits, 3.29);
}

TEST(Exl3Loader, QuantConfig) {
  EXPECT_FALSE(parse_quant_config("", "c.json").has_value());
  const auto q = parse_quant_config(R"({"quant_method":"exl3","version":"1.4.1","bits":3.05,"head_bits":16})", "c.json");
  ASSERT_TRUE(q.has_value());
  EXPECT_EQ(q->head_bits, 16);
  EXPECT_FALSE(q->codebook.has_value());  // pre-2025-10-12 conversions carry no codebook key
  try {
    parse_quant_config(R"({"quant_method":"fp8"})", "c.json");
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("c.json: quantization_config.quant_method is \"fp8\""), std::string::npos);
  }
  EXPECT_THROW(parse_quant_config(R"({"quant_method":"exl3","codebook":"qtip"})", "c.json"), Error);
  EXPECT_THROW(parse_quant_config(R"({"quant_method":"exl3","head_bits":12})", "c.json"), Error);
}

// The engine's hook: an EXL3 linear comes back as its exact dense equivalent, unpadded.
TEST(Exl3Loader, EngineDenseEquivalent) {
  const TensorStore st = TensorStore::open(test::fixture("glm5-tiny-exl3/model"));
  const std::string name = "model.language_model.layers.3.self_attn.kv_a_proj_with_mqa";
  const DenseLinear l = load_linear(st, name, 128, 256);
  const Exl3Linear q = load_exl3_linear(st, name);
  const std::vector<float> weff = effective_weight(q);
  ASSERT_EQ(l.w.size(), 128u * 256u);
  for (int64_t k = 0; k < 128; k += 17)
    for (int64_t i = 0; i < 256; i += 13) EXPECT_EQ(l.w[k * 256 + i], weff[i * 128 + k]);
  EXPECT_THROW(load_linear(st, name, 300, 256), Error);  // 300 pads to 384, the tensor holds 128

  TempDir d;
  LinearParts p;
  p.bias = true;
  const TensorStore sb = TensorStore::open(write_linear(d, p));
  EXPECT_THROW(load_linear(sb, "lin", 256, 128, false), Error);
  const DenseLinear lb = load_linear(sb, "lin", 200, 128, true);
  EXPECT_EQ(lb.bias.size(), 200u);
}

// A synthetic model at small widths loads in the reference engine, and its experts pack and run.
TEST(Exl3Synthetic, LoadsAndRuns) {
  TempDir d;
  SynthOptions o;
  o.out_dir = d.str();
  o.layers = 4;
  o.dense_layers = 1;
  o.vocab = 512, o.hidden = 256, o.inter = 384, o.moe_inter = 128, o.experts = 4, o.experts_per_tok = 2;
  o.linear_heads = 2, o.heads = 2, o.q_lora = 128, o.kv_lora = 128, o.qk_nope = 128, o.v_head_dim = 128;
  o.index_heads = 2, o.index_head_dim = 64, o.index_kpool = 4, o.index_topk = 16;
  o.expert_k = 2;
  o.shard_bytes = 1 << 20;  // several shards and an index
  write_synthetic_model(o);
  EXPECT_TRUE(fs::exists(d.path / "model.safetensors.index.json"));
  const ModelWeights m = load_model(d.str());
  EXPECT_EQ(m.layers.size(), 4u);
  const TensorStore st = TensorStore::open(d.str());
  const ExpertGeometry g = expert_geometry(st, 2, 3, 256, 128);
  EXPECT_EQ(g.K[0], 2);
  EXPECT_EQ(g.codebook[2], Codebook::Mul1);
  const ExpertBlockHeader h = plan_expert_block(g);
  std::vector<uint8_t> raw(h.block_bytes + 64);
  uint8_t* blk = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;
  pack_expert_from_store(st, 2, 3, 256, 128, blk);
  ThreadPool pool(2, false);
  std::vector<float> x(256, 0.3f), y(256), want(256);
  expert_forward(blk, x.data(), 1, y.data(), pool, 10.0f);
  const Exl3Linear gq = load_exl3_linear(st, expert_proj_name(st, 2, 3, kGate));
  const Exl3Linear uq = load_exl3_linear(st, expert_proj_name(st, 2, 3, kUp));
  const Exl3Linear dq = load_exl3_linear(st, expert_proj_name(st, 2, 3, kDown));
  expert_forward_reference(gq, uq, dq, 256, 128, 10.0f, x.data(), 1, want.data());
  double e = 0, r = 0;
  for (int i = 0; i < 256; ++i) e += (y[i] - want[i]) * (y[i] - want[i]), r += want[i] * want[i];
  EXPECT_GT(r, 0);
  EXPECT_LT(std::sqrt(e / r), 5e-6);
}

// Widths that are not multiples of 128 are stored padded (exl3-format §7): inputs are zero-extended,
// padded outputs dropped, and gate/up's padded columns feed down's padded inputs.
TEST(Exl3Synthetic, PaddedWidths) {
  TempDir d;
  SynthOptions o;
  o.out_dir = d.str();
  o.layers = 1;
  o.vocab = 300, o.hidden = 200, o.inter = 300, o.moe_inter = 150, o.experts = 2, o.experts_per_tok = 1;
  o.linear_heads = 1, o.heads = 1, o.q_lora = 64, o.kv_lora = 64, o.qk_nope = 64, o.v_head_dim = 64;
  o.index_heads = 1, o.index_head_dim = 64, o.index_kpool = 4, o.index_topk = 16;
  write_synthetic_model(o);
  const TensorStore st = TensorStore::open(d.str());
  const Exl3Linear g = load_exl3_linear(st, expert_proj_name(st, 0, 1, kGate), 150, 200);
  EXPECT_EQ(g.in_p, 256);
  EXPECT_EQ(g.out_p, 256);
  const ExpertBlockHeader h = plan_expert_block(expert_geometry(st, 0, 1, 200, 150));
  std::vector<uint8_t> raw(h.block_bytes + 64);
  uint8_t* blk = raw.data() + (64 - reinterpret_cast<uintptr_t>(raw.data()) % 64) % 64;
  pack_expert_from_store(st, 0, 1, 200, 150, blk);
  ThreadPool pool(2, false);
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(3 * 200), y(3 * 200), want(3 * 200);
  for (float& v : x) v = nd(rng);
  for (SimdPath p : {SimdPath::Scalar, SimdPath::Avx2, SimdPath::Avx512, SimdPath::Avx512Fp16}) {
    if (!simd_supported(p)) continue;
    expert_forward(blk, x.data(), 3, y.data(), pool, 10.0f, p);
    const Exl3Linear u = load_exl3_linear(st, expert_proj_name(st, 0, 1, kUp));
    const Exl3Linear dn = load_exl3_linear(st, expert_proj_name(st, 0, 1, kDown));
    expert_forward_reference(g, u, dn, 200, 150, 10.0f, x.data(), 3, want.data());
    double e = 0, r = 0;
    for (size_t i = 0; i < y.size(); ++i) e += (y[i] - want[i]) * (y[i] - want[i]), r += want[i] * want[i];
    EXPECT_GT(r, 0);
    EXPECT_LT(std::sqrt(e / r), 5e-6) << simd_name(p);
  }
}

}  // namespace
}  // namespace ft::exl3
