#include "cpu-expert-worker/expert_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "shared/core/error.h"
#include "shared/exl3/hadamard.h"
#include "shared/exl3/packed.h"
#include "shared/exl3/reference.h"
#include "shared/ops/swiglu.h"

namespace ft::cew {

using ipc::BlockDesc;
using ipc::ProjDesc;
using ipc::ProjEncoding;

namespace {

int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
bool is_exl3(const ProjDesc& p) { return p.encoding == static_cast<uint32_t>(ProjEncoding::Exl3); }
// Output columns a projection produces (EXL3 works on the padded width, in 128-column blocks).
int64_t cols(const ProjDesc& p) { return is_exl3(p) ? p.out_p : p.out; }

DenseType dense_type(const ProjDesc& p) {
  switch (static_cast<ProjEncoding>(p.encoding)) {
    case ProjEncoding::BF16: return DenseType::BF16;
    case ProjEncoding::F16: return DenseType::F16;
    default: return DenseType::F32;
  }
}

}  // namespace

float* SegmentExperts::Aligned::get(size_t n) {
  if (n > cap) {
    std::free(p);
    cap = std::max(n, cap * 2);
    p = static_cast<float*>(std::aligned_alloc(64, (cap * 4 + 63) / 64 * 64));
    if (!p) throw Error("out of memory for expert scratch (" + std::to_string(cap * 4) + " bytes)");
  }
  return p;
}

SegmentExperts::Aligned::~Aligned() { std::free(p); }

SegmentExperts::SegmentExperts(const ipc::ExpertSegment& seg, float swiglu_limit, int threads)
    : seg_(seg),
      limit_(swiglu_limit),
      dense_simd_(best_dense_simd()),
      exl3_simd_(exl3::best_simd_path()),
      pool_(std::max(1, threads), true) {
  const ipc::SegmentHeader& h = seg.header();
  info_.hidden = h.hidden;
  info_.intermediate = h.intermediate;
  info_.n_layers = h.n_layers;
  info_.n_experts = h.n_experts;
  info_.top_k = h.top_k;
  info_.moe_layers.assign(h.moe_layers, h.moe_layers + h.n_moe_layers);
  info_.fingerprint = std::string(h.fingerprint, strnlen(h.fingerprint, sizeof h.fingerprint));
  info_.segment = seg.name();
  token_pairs_.reserve(256);
}

SegmentExperts::~SegmentExperts() = default;

std::string SegmentExperts::kernels() const {
  return std::string("dense ") + dense_simd_name(dense_simd_) + ", exl3 " + exl3::simd_name(exl3_simd_);
}

void SegmentExperts::validate(const ipc::ExpertBatch& b) const {
  if (b.hidden != info_.hidden)
    throw Error("hidden size " + std::to_string(b.hidden) + " does not match the model's " +
                std::to_string(info_.hidden));
  if (b.layer >= info_.n_layers)
    throw Error("layer " + std::to_string(b.layer) + " is out of range (the model has " +
                std::to_string(info_.n_layers) + " layers)");
  if (seg_.moe_index(b.layer) < 0) throw Error("layer " + std::to_string(b.layer) + " is not an MoE layer");
  if (b.n_tokens > 0 && (!b.x || (b.slots > 0 && (!b.expert_ids || !b.weights))))
    throw Error("batch without data");
  const uint64_t n = uint64_t{b.n_tokens} * b.slots;
  for (uint64_t i = 0; i < n; ++i) {
    const int32_t e = b.expert_ids[i];
    if (e < -1 || e >= static_cast<int32_t>(info_.n_experts))
      throw Error("expert id " + std::to_string(e) + " (token " + std::to_string(i / b.slots) + ", slot " +
                  std::to_string(i % b.slots) + ") is out of range: the model has " + std::to_string(info_.n_experts) +
                  " experts (−1 marks an unused slot)");
  }
}

void SegmentExperts::plan(const ipc::ExpertBatch& b, int moe) {
  pairs_.clear();
  for (uint32_t t = 0; t < b.n_tokens; ++t)
    for (uint32_t k = 0; k < b.slots; ++k) {
      const int32_t e = b.expert_ids[uint64_t{t} * b.slots + k];
      if (e >= 0) pairs_.push_back({t, static_cast<uint32_t>(e), k, b.weights[uint64_t{t} * b.slots + k]});
    }
  std::sort(pairs_.begin(), pairs_.end(), [](const Pair& a, const Pair& c) {
    return a.expert != c.expert ? a.expert < c.expert : a.token != c.token ? a.token < c.token : a.slot < c.slot;
  });
  groups_.clear();
  xs_ = round16(b.hidden);
  gs_ = round16(info_.intermediate);
  ys_ = round16(b.hidden);
  any_exl3_ = false;
  for (int p = 0; p < static_cast<int>(pairs_.size()); ++p) {
    if (!groups_.empty() && groups_.back().expert == pairs_[p].expert) {
      ++groups_.back().n;
      continue;
    }
    const BlockDesc& blk = seg_.block(moe, pairs_[p].expert);
    groups_.push_back({pairs_[p].expert, p, 1, &blk});
    for (const ProjDesc& pd : blk.proj)
      if (is_exl3(pd)) {
        any_exl3_ = true;
        xs_ = std::max<int64_t>(xs_, round16(pd.in_p));
      }
    gs_ = std::max({gs_, round16(cols(blk.proj[ipc::kGate])), round16(cols(blk.proj[ipc::kUp])),
                    round16(is_exl3(blk.proj[ipc::kDown]) ? blk.proj[ipc::kDown].in_p : 0)});
    ys_ = std::max(ys_, round16(cols(blk.proj[ipc::kDown])));
  }
  // Pairs of each token in ascending expert order: the order the sum is taken in.
  token_pairs_.resize(b.n_tokens);
  for (auto& v : token_pairs_) v.clear();
  for (int p = 0; p < static_cast<int>(pairs_.size()); ++p) token_pairs_[pairs_[p].token].push_back(p);
}

// Items over (expert group, output column range); ranges are multiples of 16 floats (64 bytes:
// no two threads write one cache line) or of 128 columns for EXL3 (its output transform works
// on whole 128-blocks). About four items per thread balance the load.
std::vector<SegmentExperts::Item> SegmentExperts::split(int64_t (*colsf)(const BlockDesc&)) const {
  std::vector<Item> items;
  int64_t total = 0;
  for (const Group& g : groups_) total += colsf(*g.block);
  const int64_t target = std::max<int64_t>(1, 4 * pool_.size());
  for (int gi = 0; gi < static_cast<int>(groups_.size()); ++gi) {
    const BlockDesc& blk = *groups_[gi].block;
    const int64_t C = colsf(blk);
    bool ex = false;
    for (const ProjDesc& pd : blk.proj) ex = ex || is_exl3(pd);
    const int64_t gran = ex ? 128 : 16;
    const int64_t chunk = std::max(gran, ceil_div(ceil_div(total, target), gran) * gran);
    for (int64_t c0 = 0; c0 < C; c0 += chunk) items.push_back({gi, c0, std::min(C, c0 + chunk)});
  }
  return items;
}

void SegmentExperts::project(const ProjDesc& pd, const uint8_t* blk, int64_t c0, int64_t c1, const float* x,
                             int64_t xs, int n, float* y, int64_t ys) {
  if (!is_exl3(pd)) {
    c1 = std::min<int64_t>(c1, pd.out);
    if (c1 > c0) dense_rows(dense_simd_, dense_type(pd), blk + pd.offset, pd.in, c0, c1 - c0, x, xs, n, y + c0, ys);
    return;
  }
  c1 = std::min<int64_t>(c1, pd.out_p);
  if (c1 <= c0) return;
  exl3::PackedProj w;
  w.K = static_cast<int>(pd.exl3_k);
  w.codebook = static_cast<exl3::Codebook>(pd.exl3_codebook);
  w.in_p = pd.in_p;
  w.out_p = pd.out_p;
  w.data = reinterpret_cast<const uint32_t*>(blk + pd.offset);
  exl3::matmul_pairs(exl3_simd_, w, c0 / 32, (c1 - c0) / 32, x, xs, n, y + c0, ys);
  // Output side of the EXL3 linear, per 128-block: z·Ĥ ⊙ svh (shared/exl3/reference.h).
  const float* svh = reinterpret_cast<const float*>(blk + pd.svh_offset);
  for (int r = 0; r < n; ++r)
    for (int64_t b0 = c0; b0 < c1; b0 += exl3::kHad) {
      float* z = y + r * ys + b0;
      exl3::hadamard128(z);
      for (int c = 0; c < exl3::kHad; ++c) z[c] *= svh[b0 + c];
    }
}

void SegmentExperts::prepare_inputs(int p, bool down) {
  const Pair& pr = pairs_[p];
  int gi = 0;  // the group holding pair p
  {
    int lo = 0, hi = static_cast<int>(groups_.size()) - 1;
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (groups_[mid].p0 <= p) lo = mid;
      else hi = mid - 1;
    }
    gi = lo;
  }
  const BlockDesc& blk = *groups_[gi].block;
  const uint8_t* base = seg_.block_data(blk);
  if (!down) {
    float* x = X_.p + p * xs_;
    std::memcpy(x, batch_->x + uint64_t{pr.token} * batch_->hidden, batch_->hidden * 4);
    std::fill(x + batch_->hidden, x + xs_, 0.0f);
    for (int k : {ipc::kGate, ipc::kUp}) {
      const ProjDesc& pd = blk.proj[k];
      if (!is_exl3(pd)) continue;
      float* dst = (k == ipc::kGate ? XG_.p : XU_.p) + p * xs_;
      exl3::input_transform(x, reinterpret_cast<const float*>(base + pd.suh_offset), pd.in_p, dst);
    }
    return;
  }
  const ProjDesc& pd = blk.proj[ipc::kDown];
  if (!is_exl3(pd)) return;
  float* h = G_.p + p * gs_;
  std::fill(h + info_.intermediate, h + pd.in_p, 0.0f);  // padded inputs beyond Im are zero
  exl3::input_transform(h, reinterpret_cast<const float*>(base + pd.suh_offset), pd.in_p, HH_.p + p * gs_);
}

void SegmentExperts::up_phase(int i, int) {
  const Item& it = items_[i];
  const Group& g = groups_[it.group];
  const BlockDesc& blk = *g.block;
  const uint8_t* base = seg_.block_data(blk);
  const ProjDesc& gate = blk.proj[ipc::kGate];
  const ProjDesc& up = blk.proj[ipc::kUp];
  project(gate, base, it.c0, it.c1, (is_exl3(gate) ? XG_.p : X_.p) + g.p0 * xs_, xs_, g.n, G_.p + g.p0 * gs_, gs_);
  project(up, base, it.c0, it.c1, (is_exl3(up) ? XU_.p : X_.p) + g.p0 * xs_, xs_, g.n, U_.p + g.p0 * gs_, gs_);
  const int64_t c1 = std::min<int64_t>(it.c1, info_.intermediate);
  if (c1 <= it.c0) return;
  for (int r = 0; r < g.n; ++r) {
    float* h = G_.p + (g.p0 + r) * gs_;
    swiglu_clamped(h + it.c0, U_.p + (g.p0 + r) * gs_ + it.c0, c1 - it.c0, limit_, h + it.c0);
  }
}

void SegmentExperts::down_phase(int i, int) {
  const Item& it = items_[i];
  const Group& g = groups_[it.group];
  const BlockDesc& blk = *g.block;
  const ProjDesc& down = blk.proj[ipc::kDown];
  project(down, seg_.block_data(blk), it.c0, it.c1, (is_exl3(down) ? HH_.p : G_.p) + g.p0 * gs_, gs_, g.n,
          Y_.p + g.p0 * ys_, ys_);
}

void SegmentExperts::compute(const ipc::ExpertBatch& b, float* out) {
  validate(b);
  std::lock_guard<std::mutex> lk(mu_);
  const int64_t D = b.hidden;
  if (b.n_tokens == 0) return;
  plan(b, seg_.moe_index(b.layer));
  batch_ = &b;
  const size_t P = pairs_.size();
  if (P > 0) {
    X_.get(P * xs_);
    G_.get(P * gs_);
    U_.get(P * gs_);
    Y_.get(P * ys_);
    if (any_exl3_) {
      XG_.get(P * xs_);
      XU_.get(P * xs_);
      HH_.get(P * gs_);
    }
    const int np = static_cast<int>(P);
    pool_.parallel_for(np, [this](int p, int) { prepare_inputs(p, false); });
    items_ = split([](const BlockDesc& k) { return std::max(cols(k.proj[ipc::kGate]), cols(k.proj[ipc::kUp])); });
    pool_.parallel_for(static_cast<int>(items_.size()), [this](int i, int w) { up_phase(i, w); });
    if (any_exl3_) pool_.parallel_for(np, [this](int p, int) { prepare_inputs(p, true); });
    items_ = split([](const BlockDesc& k) { return cols(k.proj[ipc::kDown]); });
    pool_.parallel_for(static_cast<int>(items_.size()), [this](int i, int w) { down_phase(i, w); });
  }
  // out[t] = Σ_k w_k·y_k in ascending expert order, from 0, exactly as LocalExperts sums.
  const int64_t per_token = std::max<int64_t>(1, ceil_div(4 * pool_.size(), b.n_tokens));
  const int64_t dchunk = std::max<int64_t>(16, round16(ceil_div(D, per_token)));
  const int64_t nd = ceil_div(D, dchunk);
  pool_.parallel_for(static_cast<int>(b.n_tokens * nd), [&](int i, int) {
    const int64_t t = i / nd, d0 = (i % nd) * dchunk, d1 = std::min(D, d0 + dchunk);
    float* o = out + t * D;
    for (int64_t d = d0; d < d1; ++d) o[d] = 0.0f;
    for (int p : token_pairs_[t]) {
      const float w = pairs_[p].w;
      const float* y = Y_.p + p * ys_;
      for (int64_t d = d0; d < d1; ++d) o[d] += w * y[d];
    }
  });
  batch_ = nullptr;
}

}  // namespace ft::cew
