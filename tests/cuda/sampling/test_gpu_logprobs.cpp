// GPU logprobs vs shared/sampling's token_logprobs: the chosen token's log-softmax and the top n
// (ids exact, ties to the lower id; values ≤ 1e−5 abs), n clamped to 20 and to V, rows without
// logprobs untouched, and the same bits for a row alone or among others.
#include <cstring>

#include "gpu-worker/backends/cuda/sampling/logprobs.h"
#include "shared/sampling/logprobs.h"
#include "tests/cuda/sampling/sampling_test_util.h"

namespace ft::test::sampling {
namespace {

using cuda::kMaxTopLogprobs;
using cuda::SamplingRowParams;

class GpuLogprobs : public GpuTest {};

struct LogprobsOut {
  std::vector<float> chosen;
  std::vector<int32_t> ids;
  std::vector<float> values;
};

LogprobsOut gpu_logprobs(const std::vector<float>& logits, int64_t rows, int64_t V, const std::vector<int32_t>& want,
                         const std::vector<int32_t>& chosen) {
  std::vector<SamplingRowParams> params(rows);
  for (int64_t r = 0; r < rows; ++r) params[r].logprobs = want[r];
  DevBuf<float> d_logits(logits), d_chosen_lp(rows), d_values(rows * kMaxTopLogprobs);
  DevBuf<int32_t> d_chosen(chosen), d_ids(rows * kMaxTopLogprobs);
  DevBuf<SamplingRowParams> d_params(params);
  const size_t bytes = cuda::logprobs_workspace_bytes(rows, V);
  DevBuf<char> ws(bytes);
  cuda::token_logprobs(d_logits.get(), V, rows, V, d_params.get(), d_chosen.get(), ws.get(), bytes, d_chosen_lp.get(),
                       d_ids.get(), d_values.get(), nullptr);
  return {d_chosen_lp.download(), d_ids.download(), d_values.download()};
}

bool close(float a, float b, double tol) {
  if (std::isinf(a) || std::isinf(b)) return a == b;
  return std::isfinite(a) && std::fabs(static_cast<double>(a) - b) <= tol;
}

TEST_F(GpuLogprobs, MatchTokenLogprobs) {
  for (int64_t V : {int64_t{7}, int64_t{512}, int64_t{8193}, kRealVocab}) {
    std::mt19937_64 g(7 + V);
    const std::vector<int32_t> ns = {-1, 0, 1, 2, 5, 19, 20, 25, 3, 20};
    const int64_t R = static_cast<int64_t>(ns.size());
    std::vector<float> logits;
    std::vector<int32_t> chosen;
    for (int64_t r = 0; r < R; ++r) {
      auto shape = static_cast<LogitShape>(r % 7);
      std::vector<float> x = random_logits(V, shape, g);
      if (r == 3) {  // near ties: one ulp apart, and exact ties
        for (int64_t i = 0; i < V; ++i) x[i] = 1.0f;
        for (int64_t i = 0; i < V; i += 3) x[i] = std::nextafter(1.0f, 2.0f);
      }
      logits.insert(logits.end(), x.begin(), x.end());
      chosen.push_back(static_cast<int32_t>(g() % V));
    }
    const LogprobsOut got = gpu_logprobs(logits, R, V, ns, chosen);
    int bad = 0;
    for (int64_t r = 0; r < R; ++r) {
      const std::span<const float> x(logits.data() + r * V, V);
      const std::string where = "V=" + std::to_string(V) + " row " + std::to_string(r) + " (" +
                                shape_name(static_cast<LogitShape>(r % 7)) + ") n=" + std::to_string(ns[r]);
      if (ns[r] < 0) {  // untouched: still the poison bytes
        uint32_t b;
        std::memcpy(&b, &got.chosen[r], 4);
        EXPECT_EQ(b, 0xFFFFFFFFu) << where;
        EXPECT_EQ(got.ids[r * kMaxTopLogprobs], -1) << where;  // 0xFFFFFFFF poison reads as −1 too
        continue;
      }
      const TokenLogprobs want = token_logprobs(x, chosen[r], ns[r]);
      EXPECT_TRUE(close(got.chosen[r], want.chosen, 1e-5))
          << where << " chosen " << chosen[r] << ": gpu " << got.chosen[r] << ", cpu " << want.chosen;
      EXPECT_EQ(static_cast<int64_t>(want.top.size()), std::min<int64_t>(ns[r], V)) << where;
      const int n = std::min(static_cast<int>(want.top.size()), kMaxTopLogprobs);  // the GPU reports at most 20
      for (int j = 0; j < kMaxTopLogprobs; ++j) {
        const int32_t id = got.ids[r * kMaxTopLogprobs + j];
        const float v = got.values[r * kMaxTopLogprobs + j];
        if (j < n) {
          if ((id != want.top[j].first || !close(v, want.top[j].second, 1e-5)) && ++bad <= 20)
            ADD_FAILURE() << where << " top " << j << ": gpu (" << id << ", " << v << "), cpu (" << want.top[j].first
                          << ", " << want.top[j].second << ")";
        } else if ((id != -1 || v != -INFINITY) && ++bad <= 20) {
          ADD_FAILURE() << where << " top " << j << " past n: gpu (" << id << ", " << v << "), want (-1, -inf)";
        }
      }
    }
    EXPECT_EQ(bad, 0) << "V=" << V;
  }
}

TEST_F(GpuLogprobs, SameBitsAloneOrAmongOthers) {
  const int64_t V = kRealVocab;
  std::mt19937_64 g(4);
  const std::vector<float> x = random_logits(V, LogitShape::Normal, g);
  const int32_t tok = 1234;
  const LogprobsOut alone = gpu_logprobs(x, 1, V, {20}, {tok});
  std::vector<float> batch;
  for (int i = 0; i < 5; ++i) {
    const auto o = random_logits(V, static_cast<LogitShape>(i), g);
    batch.insert(batch.end(), o.begin(), o.end());
  }
  batch.insert(batch.begin() + 3 * V, x.begin(), x.end());  // row 3 of 6
  const LogprobsOut among = gpu_logprobs(batch, 6, V, {20, 0, 5, 20, -1, 7}, {1, 2, 3, tok, 5, 6});
  EXPECT_EQ(bit_mismatches(&among.chosen[3], &alone.chosen[0], 1), 0u);
  EXPECT_EQ(bit_mismatches(&among.ids[3 * kMaxTopLogprobs], &alone.ids[0], kMaxTopLogprobs), 0u);
  EXPECT_EQ(bit_mismatches(&among.values[3 * kMaxTopLogprobs], &alone.values[0], kMaxTopLogprobs), 0u);
}

}  // namespace
}  // namespace ft::test::sampling
