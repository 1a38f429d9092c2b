// The fixture checker over every model fixture (transformers goldens), plus proof that it fails
// on a wrong model and that the command line prints the summary line CI greps for.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <regex>
#include <sstream>

#include "shared/model/safetensors_writer.h"
#include "tools/check/fixture_check.h"
#include "tests/support/test_paths.h"

using namespace ft;
namespace fs = std::filesystem;

namespace {

FixtureCheckResult check(const std::string& name, bool internals = true) {
  FixtureCheckOptions o;
  o.model_dir = test::fixture(name + "/model");
  o.reference = test::fixture(name + "/reference.safetensors");
  o.internals = internals;
  std::ostringstream log;
  FixtureCheckResult r = run_fixture_check(o, log);
  std::cout << log.str() << r.summary_line() << "\n";
  return r;
}

void expect_pass(const FixtureCheckResult& r) {
  EXPECT_TRUE(r.passed);
  EXPECT_LE(r.prefill_rel_l2, 1e-4);
  EXPECT_LE(r.decode_rel_l2, 1e-4);
  EXPECT_EQ(r.top1, 1.0);
  EXPECT_EQ(r.greedy_agree, r.greedy_total);
  EXPECT_GT(r.greedy_total, 0);
  EXPECT_TRUE(r.internals_ok);
}

}  // namespace

class ModelFixtures : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelFixtures, CheckerPasses) { expect_pass(check(GetParam())); }

INSTANTIATE_TEST_SUITE_P(All, ModelFixtures,
                         ::testing::Values("glm5-tiny-a", "glm5-tiny-chat", "glm5-tiny-exl3",
                                           "glm5-variants/glm5-var-hc2-wide", "glm5-variants/glm5-var-group-softplus",
                                           "glm5-variants/glm5-var-shared-indexer",
                                           "glm5-variants/glm5-var-fp32-kpool1",
                                           "glm5-variants/glm5-var-allsparse-kpool16",
                                           "glm5-variants/glm5-var-12layer", "glm5-variants/glm5-var-tied",
                                           "glm5-variants/glm5-var-notail"),
                         [](const auto& info) {
                           std::string n = fs::path(info.param).filename().string();
                           for (char& ch : n)
                             if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           return n;
                         });

TEST(FixtureCheck, InternalsCoverEveryLayerOfCase0) {
  const FixtureCheckResult r = check("glm5-tiny-a");
  ASSERT_EQ(r.internal_lines.size(), 8u);
  EXPECT_THAT(r.internal_lines[3], ::testing::HasSubstr("dsa_sets_differ=0"));
  EXPECT_THAT(r.internal_lines[4], ::testing::HasSubstr("router_sets_differ=0"));
}

TEST(FixtureCheck, ReferenceRowsWithNaNAreLeftOutAndCounted) {
  // Without the tail pool, transformers' fully masked rows are NaN (the first κ−1 prompt tokens).
  const FixtureCheckResult r = check("glm5-variants/glm5-var-notail");
  ASSERT_EQ(r.cases.size(), 3u);
  for (const CaseResult& c : r.cases) EXPECT_EQ(c.ref_nonfinite_rows, 3);
  EXPECT_TRUE(r.passed);
}

TEST(FixtureCheck, FailsOnAPerturbedModel) {
  // Scale one expert's down projection: logits move and the checker must say so.
  test::TempDir d;
  const std::string src = test::fixture("glm5-tiny-a/model");
  const TensorStore st = TensorStore::open(src);
  SafetensorsWriter w;
  for (const auto& n : st.names()) {
    const TensorInfo& t = st.get(n);
    std::vector<uint8_t> b(t.data, t.data + t.nbytes);
    if (n == "model.language_model.layers.7.mlp.shared_experts.down_proj.weight")
      for (size_t i = 1; i < b.size(); i += 2) b[i] ^= 0x01;  // flip a low exponent bit of every bf16
    w.add_raw(n, t.dtype, t.shape, b);
  }
  w.write(d / "model.safetensors");
  fs::copy_file(src + "/config.json", d / "config.json");
  FixtureCheckOptions o;
  o.model_dir = d.path();
  o.reference = test::fixture("glm5-tiny-a/reference.safetensors");
  std::ostringstream log;
  const FixtureCheckResult r = run_fixture_check(o, log);
  EXPECT_FALSE(r.passed);
  EXPECT_GT(r.prefill_rel_l2, 1e-4);
}

TEST(FixtureCheck, CommandLinePrintsTheSummaryAndExitCode) {
  const std::string bin = std::string(FLASHTIER_BIN_DIR) + "/flashtier-check";
  const std::string cmd = bin + " --model " + test::fixture("glm5-tiny-chat/model") + " --reference " +
                          test::fixture("glm5-tiny-chat/reference.safetensors") + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  std::array<char, 512> buf;
  while (fgets(buf.data(), buf.size(), p)) out += buf.data();
  const int rc = pclose(p);
  EXPECT_EQ(WEXITSTATUS(rc), 0) << out;
  const std::string last = out.substr(out.rfind("fixture-check:"));
  EXPECT_TRUE(std::regex_match(last, std::regex(R"(fixture-check: cases=3 prefill_rel_l2=\S+ decode_rel_l2=\S+ top1=1\.0000 greedy=96/96 near_ties=0\n)")))
      << last;
  // Bad arguments and bad files: exit 2 with a message, no crash.
  EXPECT_EQ(WEXITSTATUS(std::system((bin + " --model /nonexistent --reference /nonexistent >/dev/null 2>&1").c_str())), 2);
  EXPECT_EQ(WEXITSTATUS(std::system((bin + " --bogus >/dev/null 2>&1").c_str())), 2);
}
