// Safetensors reading: good files, unaligned data, sharded checkpoints, and every malformed
// input reported with the file and tensor named.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>

#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/model/safetensors.h"
#include "shared/model/safetensors_writer.h"
#include "shared/model/tensor_convert.h"
#include "tests/support/test_paths.h"

using namespace ft;
using ::testing::HasSubstr;

namespace {

void write_bytes(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), static_cast<std::streamsize>(b.size()));
}

std::vector<uint8_t> raw_file(const std::string& header_json, size_t data_bytes) {
  std::vector<uint8_t> b(8);
  const uint64_t n = header_json.size();
  std::memcpy(b.data(), &n, 8);
  b.insert(b.end(), header_json.begin(), header_json.end());
  b.resize(b.size() + data_bytes, 0);
  return b;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

}  // namespace

TEST(Safetensors, ReadsEveryFloatDtypeAtUnalignedOffsets) {
  test::TempDir d;
  SafetensorsWriter w;
  w.add_raw("odd", DType::U8, {3}, {1, 2, 3});  // pushes the next tensor off 2/4-byte alignment
  w.add("bf", DType::BF16, {2, 2}, {1.0f, -2.5f, 0.15625f, 3e38f});
  w.add("hf", DType::F16, {3}, {1.0f, -65504.0f, 5.96046448e-08f});
  w.add("f", DType::F32, {2}, {0.1f, -7.0f});
  w.add_i64("ids", {3}, {5, -1, 1LL << 40});
  // Pad the header until the BF16 tensor starts at an odd address.
  auto bf_address = [&](int pad) {
    w.set_metadata("pad", std::string(static_cast<size_t>(pad), 'x'));
    w.write(d / "a.safetensors");
    return reinterpret_cast<uintptr_t>(TensorStore::open(d / "a.safetensors").get("bf").data);
  };
  int pad = 0;
  while (bf_address(pad) % 2 == 0) ++pad;
  const TensorStore st = TensorStore::open(d / "a.safetensors");
  ASSERT_EQ(st.size(), 5u);
  EXPECT_NE(reinterpret_cast<uintptr_t>(st.get("bf").data) % 2, 0u);
  EXPECT_EQ(to_f32(st.get("bf")), (std::vector<float>{1.0f, -2.5f, 0.15625f, bf16_to_f32(f32_to_bf16(3e38f))}));
  EXPECT_EQ(to_f32(st.get("hf")), (std::vector<float>{1.0f, -65504.0f, 5.96046448e-08f}));
  EXPECT_EQ(to_f32(st.get("f")), (std::vector<float>{0.1f, -7.0f}));
  EXPECT_EQ(to_i64(st.get("ids")), (std::vector<int64_t>{5, -1, 1LL << 40}));
  EXPECT_EQ(st.get("bf").shape_str(), "[2, 2]");
}

TEST(Safetensors, Bf16RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.00390625f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.01171875f), 0x3f82);  // 1 + 3·2^-8: tie, rounds up to even
  EXPECT_EQ(f16_to_f32(f32_to_f16(0.1f)), 0.0999755859375f);
  EXPECT_EQ(f32_to_f16(70000.0f), 0x7c00);  // overflow → inf
}

TEST(Safetensors, TruncatedFileNamesFileAndTensor) {
  test::TempDir d;
  SafetensorsWriter w;
  w.add("model.w", DType::F32, {4, 4}, std::vector<float>(16, 1.0f));
  auto b = w.bytes();
  b.resize(b.size() - 10);
  write_bytes(d / "t.safetensors", b);
  const std::string e = error_of([&] { TensorStore::open(d / "t.safetensors"); });
  EXPECT_THAT(e, HasSubstr("t.safetensors"));
  EXPECT_THAT(e, HasSubstr("model.w"));
  EXPECT_THAT(e, HasSubstr("truncated"));
}

TEST(Safetensors, TruncatedHeaderIsReported) {
  test::TempDir d;
  write_bytes(d / "h.safetensors", {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{'});
  EXPECT_THAT(error_of([&] { TensorStore::open(d / "h.safetensors"); }), HasSubstr("header length"));
  write_bytes(d / "tiny.safetensors", {1, 2, 3});
  EXPECT_THAT(error_of([&] { TensorStore::open(d / "tiny.safetensors"); }), HasSubstr("tiny.safetensors"));
}

TEST(Safetensors, BadJsonHeader) {
  test::TempDir d;
  write_bytes(d / "j.safetensors", raw_file("{\"a\": {\"dtype\": ", 0));
  const std::string e = error_of([&] { TensorStore::open(d / "j.safetensors"); });
  EXPECT_THAT(e, HasSubstr("j.safetensors"));
  EXPECT_THAT(e, HasSubstr("bad safetensors JSON header"));
}

TEST(Safetensors, MalformedEntries) {
  test::TempDir d;
  write_bytes(d / "a.safetensors",
              raw_file(R"({"x.weight": {"dtype": "Q4", "shape": [2], "data_offsets": [0, 2]}})", 2));
  EXPECT_THAT(error_of([&] { TensorStore::open(d / "a.safetensors"); }), HasSubstr("x.weight: unsupported dtype Q4"));
  write_bytes(d / "b.safetensors",
              raw_file(R"({"y.weight": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8));
  const std::string e = error_of([&] { TensorStore::open(d / "b.safetensors"); });
  EXPECT_THAT(e, HasSubstr("tensor y.weight: holds 8 bytes but F32 [3] needs 12"));
  write_bytes(d / "c.safetensors", raw_file(R"({"z": {"dtype": "F32", "shape": [1]}})", 4));
  EXPECT_THAT(error_of([&] { TensorStore::open(d / "c.safetensors"); }), HasSubstr("tensor z: header entry needs"));
}

TEST(Safetensors, ShapeAndDtypeMismatchNameTheTensor) {
  test::TempDir d;
  SafetensorsWriter w;
  w.add("model.norm.weight", DType::BF16, {3}, {1, 2, 3});
  w.add_i64("model.ids", {2}, {1, 2});
  w.write(d / "m.safetensors");
  const TensorStore st = TensorStore::open(d / "m.safetensors");
  const std::string e = error_of([&] { expect_shape(st.get("model.norm.weight"), {4}); });
  EXPECT_THAT(e, HasSubstr("m.safetensors: tensor model.norm.weight has shape [3], expected [4]"));
  EXPECT_THAT(error_of([&] { to_f32(st.get("model.ids")); }),
              HasSubstr("tensor model.ids: dtype I64 where a BF16/F16/F32 tensor is expected"));
  EXPECT_THAT(error_of([&] { st.get("model.missing"); }), HasSubstr("missing tensor model.missing"));
}

TEST(Safetensors, ShardedCheckpointWithIndex) {
  test::TempDir d;
  SafetensorsWriter a, b;
  a.add("t.a", DType::F32, {1}, {1.0f});
  b.add("t.b", DType::F32, {1}, {2.0f});
  a.write(d / "model-00001-of-00002.safetensors");
  b.write(d / "model-00002-of-00002.safetensors");
  std::ofstream(d / "model.safetensors.index.json")
      << R"({"metadata": {}, "weight_map": {"t.a": "model-00001-of-00002.safetensors", "t.b": "model-00002-of-00002.safetensors"}})";
  const TensorStore st = TensorStore::open(d.path());
  EXPECT_EQ(st.size(), 2u);
  EXPECT_EQ(to_f32(st.get("t.b"))[0], 2.0f);
  EXPECT_THAT(*st.get("t.b").file, HasSubstr("model-00002-of-00002"));
}

TEST(Safetensors, IndexListingAMissingTensorOrShard) {
  test::TempDir d;
  SafetensorsWriter a;
  a.add("t.a", DType::F32, {1}, {1.0f});
  a.write(d / "s1.safetensors");
  std::ofstream(d / "model.safetensors.index.json") << R"({"weight_map": {"t.a": "s1.safetensors", "t.c": "s1.safetensors"}})";
  const std::string e = error_of([&] { TensorStore::open(d.path()); });
  EXPECT_THAT(e, HasSubstr("s1.safetensors: tensor t.c is listed in model.safetensors.index.json but missing"));
  std::ofstream(d / "model.safetensors.index.json", std::ios::trunc) << R"({"weight_map": {"t.a": "gone.safetensors"}})";
  EXPECT_THAT(error_of([&] { TensorStore::open(d.path()); }), HasSubstr("gone.safetensors listed in weight_map does not exist"));
  std::ofstream(d / "model.safetensors.index.json", std::ios::trunc) << "{not json";
  EXPECT_THAT(error_of([&] { TensorStore::open(d.path()); }), HasSubstr("model.safetensors.index.json: bad JSON"));
}

TEST(Safetensors, DuplicateTensorAcrossShards) {
  test::TempDir d;
  SafetensorsWriter a;
  a.add("dup", DType::F32, {1}, {1.0f});
  a.write(d / "x1.safetensors");
  a.write(d / "x2.safetensors");
  EXPECT_THAT(error_of([&] { TensorStore::open(d.path()); }), HasSubstr("tensor dup also appears in"));
}

TEST(Safetensors, MissingPathOrEmptyFolder) {
  test::TempDir d;
  EXPECT_THAT(error_of([&] { TensorStore::open(d / "nope"); }), HasSubstr("no such file or folder"));
  EXPECT_THAT(error_of([&] { TensorStore::open(d.path()); }), HasSubstr("no *.safetensors files"));
}
