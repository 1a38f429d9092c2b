#include "shared/exl3/expert_forward.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <initializer_list>

#include "shared/core/error.h"
#include "shared/core/half.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/hadamard.h"
#include "shared/exl3/reference.h"
#include "shared/exl3/trellis.h"
#include "shared/ops/swiglu.h"

namespace ft::exl3 {

namespace {

constexpr int kChunk = 128;  // output columns per block: one Hadamard block, 4 tile pairs

struct alignas(64) Counter {
  std::atomic<int> v{0};
};

void f16_row(const uint16_t* h, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
}

// Output transform of one 128-column block of one row, in place: z·Ĥ ⊙ svh.
void output_block(float* z, const uint16_t* svh) {
  hadamard128(z);
  for (int k = 0; k < kChunk; ++k) z[k] *= f16_to_f32(svh[k]);
}

// F16Rows: the row's output factor, after svh (the GPU kernels' order).
void scale_block(float* z, float row_scale) {
  for (int k = 0; k < kChunk; ++k) z[k] *= row_scale;
}

}  // namespace

// Per-batch bookkeeping, reused between calls to avoid allocations on the hot path.
struct ExpertRunner::Plan {
  struct Task {
    ExpertView view;
    const ExpertTask* src;
    float* xin[2];  // gate/up inputs after their input transform, [n][Dp]
    float* gu[2];   // gate/up outputs after their output transform, [n][Ip]
    float* xd;      // down input after SwiGLU and the down input transform, [n][Ip]
    float* y;       // down output, [n][Dp]
    float* rs[3];   // F16Rows: each row's output factor 2^−e per projection, [n]
  };
  struct Entry {
    int task, row;
    float w;
  };
  std::vector<Task> tasks;
  std::vector<int64_t> token_begin;  // CSR over tokens → entries, in task order
  std::vector<Entry> entries;
  // gu_done [task·ichunks], down_done [dchunks], xd_done [task], and for split blocks gu_blk
  // [(task·ichunks + chunk)·2 + projection], dn_blk [task·dchunks + chunk].
  std::unique_ptr<Counter[]> gu_done, down_done, xd_done, gu_blk, dn_blk;
  size_t counters = 0;
  float* scratch = nullptr;
  size_t scratch_floats = 0;

  ~Plan() { std::free(scratch); }

  float* reserve(size_t floats) {
    if (floats > scratch_floats) {
      std::free(scratch);
      scratch = static_cast<float*>(std::aligned_alloc(64, (floats * 4 + 63) / 64 * 64));
      if (!scratch) throw Error("expert runner: out of memory for " + std::to_string(floats * 4) + " bytes of scratch");
      scratch_floats = floats;
    }
    return scratch;
  }
  // Zeroes the first `sizes[i]` counters of the i-th array (in the order declared above; each
  // array holds the largest).
  void reset_counters(std::initializer_list<size_t> sizes) {
    std::unique_ptr<Counter[]>* arrays[] = {&gu_done, &down_done, &xd_done, &gu_blk, &dn_blk};
    const size_t n = std::max(sizes);
    if (n > counters) {
      for (auto* a : arrays) a->reset(new Counter[n]);
      counters = n;
    }
    size_t a = 0;
    for (size_t m : sizes) {
      for (size_t i = 0; i < m; ++i) (*arrays[a])[i].v.store(0, std::memory_order_relaxed);
      ++a;
    }
  }
};

ExpertRunner::ExpertRunner(ThreadPool& pool, float swiglu_limit, SimdPath path)
    : pool_(pool), limit_(swiglu_limit), path_(path), plan_(std::make_unique<Plan>()) {
  if (!simd_supported(path)) throw Error(std::string("EXL3 kernel path ") + simd_name(path) + " is not supported by this CPU");
}

ExpertRunner::~ExpertRunner() = default;

void ExpertRunner::forward(const ExpertTask* tasks, int ntasks, const float* x, int64_t T, float* out,
                           Operands operands) {
  const bool f16 = operands == Operands::F16Rows;
  Plan& P = *plan_;
  P.tasks.clear();
  if (ntasks == 0) {
    return;
  }
  const ExpertView v0 = view_expert_block(tasks[0].block);
  const int64_t D = static_cast<int64_t>(v0.header->hidden), I = static_cast<int64_t>(v0.header->inter);
  const int64_t Dp = pad128(D), Ip = pad128(I);
  const int64_t dchunks = Dp / kChunk, ichunks = Ip / kChunk;

  size_t total = 0;
  for (int e = 0; e < ntasks; ++e) total += static_cast<size_t>(tasks[e].n) * (3 * Dp + 3 * Ip + 3);
  float* s = P.reserve(total);
  for (int e = 0; e < ntasks; ++e) {
    Plan::Task t;
    t.view = view_expert_block(tasks[e].block);
    if (static_cast<int64_t>(t.view.header->hidden) != D || static_cast<int64_t>(t.view.header->inter) != I)
      throw Error("expert batch mixes widths: task " + std::to_string(e) + " differs from task 0");
    t.src = &tasks[e];
    const int64_t n = tasks[e].n;
    for (int p = 0; p < 2; ++p) t.xin[p] = s, s += n * Dp;
    for (int p = 0; p < 2; ++p) t.gu[p] = s, s += n * Ip;
    t.xd = s, s += n * Ip;
    t.y = s, s += n * Dp;
    for (int p = 0; p < 3; ++p) t.rs[p] = s, s += n;
    P.tasks.push_back(t);
  }
  P.token_begin.assign(static_cast<size_t>(T + 1), 0);
  for (int e = 0; e < ntasks; ++e)
    for (int i = 0; i < tasks[e].n; ++i) {
      const int32_t r = tasks[e].rows[i];
      if (r < 0 || r >= T) throw Error("expert batch: row " + std::to_string(r) + " outside [0, " + std::to_string(T) + ")");
      ++P.token_begin[r + 1];
    }
  for (int64_t t = 0; t < T; ++t) P.token_begin[t + 1] += P.token_begin[t];
  P.entries.resize(static_cast<size_t>(P.token_begin[T]));
  {
    std::vector<int64_t> fill(P.token_begin.begin(), P.token_begin.end() - 1);
    for (int e = 0; e < ntasks; ++e)
      for (int i = 0; i < tasks[e].n; ++i)
        P.entries[fill[tasks[e].rows[i]]++] = {e, i, tasks[e].weights ? tasks[e].weights[i] : 1.0f};
  }
  // Items of jobs 2 and 3 cover 4, 2 or 1 of a 128-column block's 4 tile pairs: a call with few
  // experts (the split's 1–3 per layer) otherwise leaves threads idle in its last round (one
  // expert's 32 blocks on 14 threads: 3 rounds for 2.3 rounds of work). A column's sum does not
  // depend on the pairs per call (KernelPath.PairsPerCallDoNotChangeTheBits); a block's last
  // finisher applies its output transform.
  auto subdivide = [&](int64_t blocks) {
    int sub = 1;
    while (sub < 4 && blocks * sub < 3 * static_cast<int64_t>(pool_.size())) sub *= 2;
    return sub;
  };
  const int gu_sub = subdivide(ntasks * ichunks * 2), dn_sub = subdivide(ntasks * dchunks);
  P.reset_counters({static_cast<size_t>(ntasks * ichunks), static_cast<size_t>(dchunks), static_cast<size_t>(ntasks),
                    gu_sub > 1 ? static_cast<size_t>(ntasks * ichunks * 2) : 0,
                    dn_sub > 1 ? static_cast<size_t>(ntasks * dchunks) : 0});

  // Job 1: gather each row and apply the gate/up input transforms ((x ⊙ suh)·Ĥ, then the GPU's
  // fp16 rounding for F16Rows).
  std::vector<std::pair<int, int>> rows;  // (task, row) per item pair
  for (int e = 0; e < ntasks; ++e)
    for (int i = 0; i < tasks[e].n; ++i) rows.push_back({e, i});
  pool_.parallel_for(static_cast<int>(2 * rows.size()), [&](int item, int) {
    const auto [e, i] = rows[item / 2];
    const int p = item % 2;
    const Plan::Task& t = P.tasks[e];
    const float* src = x + static_cast<int64_t>(t.src->rows[i]) * D;
    float* dst = t.xin[p] + i * Dp;
    const uint16_t* suh = t.view.suh[p];
    for (int64_t k = 0; k < D; ++k) dst[k] = src[k] * f16_to_f32(suh[k]);
    for (int64_t k = D; k < Dp; ++k) dst[k] = 0.0f;
    hadamard_blocks(dst, Dp);
    if (f16) t.rs[p][i] = round_row_to_f16(dst, Dp);
  });

  // Job 2: gate and up, one 128-column block each; the second finisher of a block applies
  // SwiGLU and the down input transform to it. For F16Rows the rounding of a down input row needs
  // the whole row: the expert's last block to finish rounds its rows.
  const float limit = limit_;
  const SimdPath path = path_;
  pool_.parallel_for(static_cast<int>(ntasks * ichunks * 2 * gu_sub), [&](int item, int) {
    const int q = item % gu_sub, blk = item / gu_sub;  // blk = (e·ichunks + c)·2 + p
    const int e = blk / static_cast<int>(2 * ichunks);
    const int c = (blk / 2) % static_cast<int>(ichunks);
    const int p = blk % 2;
    const Plan::Task& t = P.tasks[e];
    const int n = t.src->n;
    float* z = t.gu[p] + c * kChunk;
    const int g = 4 / gu_sub;
    matmul_pairs(path, t.view.proj[p], 4 * c + q * g, g, t.xin[p], Dp, n, z + q * g * 32, Ip);
    if (gu_sub > 1 && P.gu_blk[blk].v.fetch_add(1, std::memory_order_acq_rel) != gu_sub - 1) return;
    for (int r = 0; r < n; ++r) {
      output_block(z + r * Ip, t.view.svh[p] + c * kChunk);
      if (f16) scale_block(z + r * Ip, t.rs[p][r]);
    }
    if (P.gu_done[e * ichunks + c].v.fetch_add(1, std::memory_order_acq_rel) != 1) return;
    float suh[kChunk];
    f16_row(t.view.suh[kDown] + c * kChunk, kChunk, suh);
    for (int r = 0; r < n; ++r) {
      float* h = t.xd + r * Ip + c * kChunk;
      swiglu_clamped(t.gu[kGate] + r * Ip + c * kChunk, t.gu[kUp] + r * Ip + c * kChunk, kChunk, limit, h);
      for (int k = 0; k < kChunk; ++k) h[k] *= suh[k];
      hadamard128(h);
    }
    if (!f16 || P.xd_done[e].v.fetch_add(1, std::memory_order_acq_rel) != ichunks - 1) return;
    for (int r = 0; r < n; ++r) t.rs[kDown][r] = round_row_to_f16(t.xd + r * Ip, Ip);
  });

  // Job 3: down, one 128-column block per item; the last finisher of a column block sums the
  // experts' weighted outputs for it, in task order, into `out`.
  pool_.parallel_for(static_cast<int>(ntasks * dchunks * dn_sub), [&](int item, int) {
    const int q = item % dn_sub, blk = item / dn_sub;  // blk = e·dchunks + c
    const int e = blk / static_cast<int>(dchunks);
    const int c = blk % static_cast<int>(dchunks);
    const Plan::Task& t = P.tasks[e];
    const int n = t.src->n;
    float* z = t.y + c * kChunk;
    const int g = 4 / dn_sub;
    matmul_pairs(path, t.view.proj[kDown], 4 * c + q * g, g, t.xd, Ip, n, z + q * g * 32, Dp);
    if (dn_sub > 1 && P.dn_blk[blk].v.fetch_add(1, std::memory_order_acq_rel) != dn_sub - 1) return;
    for (int r = 0; r < n; ++r) {
      output_block(z + r * Dp, t.view.svh[kDown] + c * kChunk);
      if (f16) scale_block(z + r * Dp, t.rs[kDown][r]);
    }
    if (P.down_done[c].v.fetch_add(1, std::memory_order_acq_rel) != ntasks - 1) return;
    const int64_t k0 = c * kChunk, k1 = std::min<int64_t>(D, k0 + kChunk);
    for (int64_t tok = 0; tok < T; ++tok) {
      float* o = out + tok * D;
      for (int64_t k = k0; k < k1; ++k) o[k] = 0.0f;
      for (int64_t j = P.token_begin[tok]; j < P.token_begin[tok + 1]; ++j) {
        const Plan::Entry& en = P.entries[j];
        const float* y = P.tasks[en.task].y + en.row * Dp;
        for (int64_t k = k0; k < k1; ++k) o[k] += en.w * y[k];
      }
    }
  });
}

void expert_forward(const uint8_t* block, const float* x, int n, float* out, ThreadPool& pool, float swiglu_limit,
                    SimdPath path) {
  std::vector<int32_t> rows(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) rows[i] = i;
  ExpertTask t{block, rows.data(), nullptr, n};
  ExpertRunner runner(pool, swiglu_limit, path);
  runner.forward(&t, 1, x, n, out);
}

void expert_forward_reference(const Exl3Linear& gate, const Exl3Linear& up, const Exl3Linear& down, int64_t hidden,
                              int64_t inter, float swiglu_limit, const float* x, int n, float* out, Operands operands) {
  const int64_t Dp = pad128(hidden), Ip = pad128(inter);
  std::vector<float> wg(Dp * Ip), wu(Dp * Ip), wd(Ip * Dp);
  decode_trellis_f32(gate.trellis, Dp, Ip, gate.K, gate.codebook, wg.data());
  decode_trellis_f32(up.trellis, Dp, Ip, up.K, up.codebook, wu.data());
  decode_trellis_f32(down.trellis, Ip, Dp, down.K, down.codebook, wd.data());
  std::vector<float> xp(Dp, 0.0f), g(Ip), u(Ip), h(Ip), y(Dp);
  for (int r = 0; r < n; ++r) {
    std::copy(x + r * hidden, x + (r + 1) * hidden, xp.begin());
    forward_reference(gate, wg.data(), xp.data(), 1, g.data(), operands);
    forward_reference(up, wu.data(), xp.data(), 1, u.data(), operands);
    swiglu_clamped(g.data(), u.data(), Ip, swiglu_limit, h.data());
    forward_reference(down, wd.data(), h.data(), 1, y.data(), operands);
    std::copy(y.begin(), y.begin() + hidden, out + r * hidden);
  }
}

}  // namespace ft::exl3
