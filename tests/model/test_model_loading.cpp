// Whole-model loading: flat and sharded checkpoints, the module spelling of tensor names, and
// errors that name the file and the tensor.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "shared/core/error.h"
#include "shared/engine/reference_engine.h"
#include "shared/model/safetensors_writer.h"
#include "shared/model/tensor_convert.h"
#include "tests/support/test_paths.h"

using namespace ft;
using ::testing::HasSubstr;
namespace fs = std::filesystem;

namespace {

const std::string kTinyA = test::fixture("glm5-tiny-a/model");
const std::string kLM = "model.language_model.";

std::vector<uint8_t> bytes_of(const TensorInfo& t) { return {t.data, t.data + t.nbytes}; }

// Rewrites tiny-a: `rename` maps a text tensor name to a new one ("" drops it); vision is dropped.
void rewrite(const std::string& out_dir, const std::function<std::string(const std::string&)>& rename,
             int shards = 1) {
  const TensorStore st = TensorStore::open(kTinyA);
  std::vector<SafetensorsWriter> w(shards);
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  for (const auto& name : st.names()) {
    if (name.find("visual") != std::string::npos) continue;
    const std::string n = rename(name);
    if (n.empty()) continue;
    const TensorInfo& t = st.get(name);
    const int s = i++ % shards;
    w[s].add_raw(n, t.dtype, t.shape, bytes_of(t));
    index["weight_map"][n] = "model-" + std::to_string(s) + ".safetensors";
  }
  if (shards == 1) {
    w[0].write(out_dir + "/model.safetensors");
  } else {
    for (int s = 0; s < shards; ++s) w[s].write(out_dir + "/model-" + std::to_string(s) + ".safetensors");
    std::ofstream(out_dir + "/model.safetensors.index.json") << index.dump();
  }
  fs::copy_file(kTinyA + "/config.json", out_dir + "/config.json");
}

std::vector<float> case0_logits(const std::string& dir) {
  const ModelWeights w = load_model(dir);
  ReferenceEngine eng(w);
  const TensorStore ref = TensorStore::open(test::fixture("glm5-tiny-a/reference.safetensors"));
  std::vector<int32_t> ids;
  for (int64_t v : to_i64(ref.get("case0.input_ids"))) ids.push_back(static_cast<int32_t>(v));
  SequenceState s = eng.new_state();
  return eng.prefill(s, ids, true);
}

double rel_l2_vs_fixture(const std::vector<float>& got) {
  const TensorStore ref = TensorStore::open(test::fixture("glm5-tiny-a/reference.safetensors"));
  const auto want = to_f32(ref.get("case0.prefill_logits"));
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num / den);
}

std::string load_error(const std::string& dir) {
  try {
    load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(ModelLoading, FlatNamesInShardsWithFlatConfig) {
  test::TempDir d;
  rewrite(d.path(), [](const std::string& n) {
    return n.rfind(kLM, 0) == 0 ? "model." + n.substr(kLM.size()) : n;
  }, 3);
  // Flat config: the text fields at the top level.
  nlohmann::json cfg;
  std::ifstream(kTinyA + "/config.json") >> cfg;
  nlohmann::json flat = cfg["text_config"];
  flat["architectures"] = {"Glm5NextForCausalLM"};
  flat["model_type"] = "glm5_next";
  std::ofstream(d / "config.json", std::ios::trunc) << flat.dump();
  EXPECT_LT(rel_l2_vs_fixture(case0_logits(d.path())), 1e-4);
}

TEST(ModelLoading, ModuleSpellingIsEquivalent) {
  // transformers' in-memory names: attn_hc.*, fused conv1d, forget_gate.*, fused experts.
  const TensorStore st = TensorStore::open(kTinyA);
  const ModelConfig c = load_config(kTinyA);
  test::TempDir d;
  SafetensorsWriter w;
  for (const auto& name : st.names()) {
    if (name.find("visual") != std::string::npos) continue;
    const TensorInfo& t = st.get(name);
    std::string n = name;
    auto replace = [&](const std::string& from, const std::string& to) {
      const auto p = n.find(from);
      if (p != std::string::npos) n = n.substr(0, p) + to + n.substr(p + from.size());
    };
    if (n.find("_conv1d.weight") != std::string::npos || n.find("mlp.experts.") != std::string::npos) continue;
    replace(".hc_attn_", ".attn_hc.");
    replace(".hc_ffn_", ".ffn_hc.");
    for (const char* s : {"f_a_proj", "f_b_proj", "dt_bias", "A_log"}) replace(std::string("self_attn.") + s, std::string("self_attn.forget_gate.") + s);
    w.add_raw(n, t.dtype, t.shape, bytes_of(t));
  }
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = kLM + "layers." + std::to_string(l) + ".";
    if (!c.is_sparse(l)) {
      std::vector<uint8_t> conv;
      for (const char* s : {"q", "k", "v"}) {
        const auto b = bytes_of(st.get(p + "self_attn." + s + "_conv1d.weight"));
        conv.insert(conv.end(), b.begin(), b.end());
      }
      w.add_raw(p + "self_attn.conv1d.weight", DType::BF16, {3 * c.linear_dim(), 1, c.linear_conv_kernel_dim}, conv);
    }
    if (c.is_moe(l)) {
      std::vector<uint8_t> gu, dn;
      for (int64_t e = 0; e < c.n_routed_experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        for (const char* s : {"gate_proj", "up_proj"}) {
          const auto b = bytes_of(st.get(x + s + ".weight"));
          gu.insert(gu.end(), b.begin(), b.end());
        }
        const auto b = bytes_of(st.get(x + "down_proj.weight"));
        dn.insert(dn.end(), b.begin(), b.end());
      }
      const int64_t E = c.n_routed_experts, Im = c.moe_intermediate_size, D = c.hidden_size;
      w.add_raw(p + "mlp.experts.gate_up_proj", DType::BF16, {E, 2 * Im, D}, gu);
      w.add_raw(p + "mlp.experts.down_proj", DType::BF16, {E, D, Im}, dn);
    }
  }
  w.write(d / "model.safetensors");
  fs::copy_file(kTinyA + "/config.json", d / "config.json");
  EXPECT_EQ(case0_logits(d.path()), case0_logits(kTinyA));
}

TEST(ModelLoading, MissingTensorNamesFolderAndTensor) {
  test::TempDir d;
  const std::string gone = kLM + "layers.3.self_attn.kv_b_proj.weight";
  rewrite(d.path(), [&](const std::string& n) { return n == gone ? "" : n; });
  const std::string e = load_error(d.path());
  EXPECT_THAT(e, HasSubstr(d.path()));
  EXPECT_THAT(e, HasSubstr("missing tensor " + gone));
}

TEST(ModelLoading, WrongShapeNamesFileAndTensor) {
  test::TempDir d;
  const TensorStore st = TensorStore::open(kTinyA);
  SafetensorsWriter w;
  for (const auto& name : st.names()) {
    const TensorInfo& t = st.get(name);
    auto shape = t.shape;
    if (name == kLM + "layers.5.self_attn.b_proj.weight") std::swap(shape[0], shape[1]);
    w.add_raw(name, t.dtype, shape, bytes_of(t));
  }
  w.write(d / "model.safetensors");
  fs::copy_file(kTinyA + "/config.json", d / "config.json");
  const std::string e = load_error(d.path());
  EXPECT_THAT(e, HasSubstr("model.safetensors: tensor " + kLM + "layers.5.self_attn.b_proj.weight has shape [64, 4], expected [4, 64]"));
}

TEST(ModelLoading, DtypeMismatchNamesFileAndTensor) {
  test::TempDir d;
  const TensorStore st = TensorStore::open(kTinyA);
  SafetensorsWriter w;
  const std::string bad = kLM + "layers.0.input_layernorm.weight";
  for (const auto& name : st.names()) {
    const TensorInfo& t = st.get(name);
    if (name == bad)
      w.add_raw(name, DType::I16, t.shape, bytes_of(t));
    else
      w.add_raw(name, t.dtype, t.shape, bytes_of(t));
  }
  w.write(d / "model.safetensors");
  fs::copy_file(kTinyA + "/config.json", d / "config.json");
  EXPECT_THAT(load_error(d.path()), HasSubstr("tensor " + bad + ": dtype I16 where a BF16/F16/F32 tensor is expected"));
}

TEST(ModelLoading, KpoolMustMatchTheApeTensor) {
  test::TempDir d;
  rewrite(d.path(), [](const std::string& n) { return n; });
  nlohmann::json cfg;
  std::ifstream(d / "config.json") >> cfg;
  cfg["text_config"]["index_kpool"] = 8;
  std::ofstream(d / "config.json", std::ios::trunc) << cfg.dump();
  EXPECT_THAT(load_error(d.path()), HasSubstr("index_kpool_compress_ape has shape [4, 16] but config index_kpool is 8"));
}

TEST(ModelLoading, MissingConfigOrWeights) {
  test::TempDir d;
  EXPECT_THAT(load_error(d.path()), HasSubstr("config.json: cannot open"));
  fs::copy_file(kTinyA + "/config.json", d / "config.json");
  EXPECT_THAT(load_error(d.path()), HasSubstr("no *.safetensors files"));
}

TEST(ModelLoading, UnexpectedBiasIsRefused) {
  test::TempDir d;
  const TensorStore st = TensorStore::open(kTinyA);
  SafetensorsWriter w;
  for (const auto& name : st.names()) w.add_raw(name, st.get(name).dtype, st.get(name).shape, bytes_of(st.get(name)));
  w.add(kLM + "layers.3.self_attn.q_a_proj.bias", DType::BF16, {48}, std::vector<float>(48, 0.5f));
  w.write(d / "model.safetensors");
  fs::copy_file(kTinyA + "/config.json", d / "config.json");
  EXPECT_THAT(load_error(d.path()), HasSubstr("q_a_proj.bias: unexpected bias"));
}
