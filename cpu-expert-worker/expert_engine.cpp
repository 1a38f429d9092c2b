#include "cpu-expert-worker/expert_engine.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>

#include "shared/core/error.h"
#include "shared/ops/swiglu.h"

namespace ft::cew {

using ipc::BlockDesc;
using ipc::ProjDesc;
using ipc::ProjEncoding;

namespace {

int64_t round16(int64_t v) { return (v + 15) / 16 * 16; }
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

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
      pool_(std::max(1, threads), true),
      runner_(pool_, swiglu_limit, exl3_simd_) {
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
  if (b.flags & ~ipc::kBatchKnownFlags)
    throw Error("batch flags " + std::to_string(b.flags) + " carry bits this worker does not know (it knows " +
                std::to_string(ipc::kBatchF16Operands) + ": fp16 operands)");
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
  exl3_layer_ = seg_.block(moe, 0).format == static_cast<uint32_t>(ipc::BlockFormat::Exl3);
  for (int p = 0; p < static_cast<int>(pairs_.size()); ++p) {
    if (!groups_.empty() && groups_.back().expert == pairs_[p].expert) {
      ++groups_.back().n;
      continue;
    }
    const BlockDesc& blk = seg_.block(moe, pairs_[p].expert);
    if ((blk.format == static_cast<uint32_t>(ipc::BlockFormat::Exl3)) != exl3_layer_)
      throw Error("segment " + seg_.name() + ": layer " + std::to_string(b.layer) + " mixes block formats");
    groups_.push_back({pairs_[p].expert, p, 1, &blk});
  }
  // Pairs of each token in ascending expert order: the order the sum is taken in.
  token_pairs_.resize(b.n_tokens);
  for (auto& v : token_pairs_) v.clear();
  for (int p = 0; p < static_cast<int>(pairs_.size()); ++p) token_pairs_[pairs_[p].token].push_back(p);
}

// Items over (expert group, output row range of the projection): ranges are multiples of 16 floats
// (64 bytes: no two threads write one cache line of the scratch), about four items per thread.
std::vector<SegmentExperts::Item> SegmentExperts::split(int64_t (*colsf)(const BlockDesc&)) const {
  std::vector<Item> items;
  int64_t total = 0;
  for (const Group& g : groups_) total += colsf(*g.block);
  const int64_t target = std::max<int64_t>(1, 4 * pool_.size());
  const int64_t chunk = std::max<int64_t>(16, round16(ceil_div(total, target)));
  for (int gi = 0; gi < static_cast<int>(groups_.size()); ++gi) {
    const int64_t C = colsf(*groups_[gi].block);
    for (int64_t c0 = 0; c0 < C; c0 += chunk) items.push_back({gi, c0, std::min(C, c0 + chunk)});
  }
  return items;
}

void SegmentExperts::project(const ProjDesc& pd, const uint8_t* blk, int64_t c0, int64_t c1, const float* x,
                             int64_t xs, int n, float* y, int64_t ys) {
  dense_rows(dense_simd_, dense_type(pd), blk + pd.offset, pd.in, c0, c1 - c0, x, xs, n, y + c0, ys);
}

void SegmentExperts::up_phase(int i) {
  const Item& it = items_[i];
  const Group& g = groups_[it.group];
  const BlockDesc& blk = *g.block;
  const uint8_t* base = seg_.block_data(blk);
  project(blk.proj[ipc::kGate], base, it.c0, it.c1, X_.p + g.p0 * xs_, xs_, g.n, G_.p + g.p0 * gs_, gs_);
  project(blk.proj[ipc::kUp], base, it.c0, it.c1, X_.p + g.p0 * xs_, xs_, g.n, U_.p + g.p0 * gs_, gs_);
  for (int r = 0; r < g.n; ++r) {
    float* h = G_.p + (g.p0 + r) * gs_;
    swiglu_clamped(h + it.c0, U_.p + (g.p0 + r) * gs_ + it.c0, it.c1 - it.c0, limit_, h + it.c0);
  }
}

void SegmentExperts::down_phase(int i) {
  const Item& it = items_[i];
  const Group& g = groups_[it.group];
  const BlockDesc& blk = *g.block;
  project(blk.proj[ipc::kDown], seg_.block_data(blk), it.c0, it.c1, G_.p + g.p0 * gs_, gs_, g.n, Y_.p + g.p0 * ys_,
          ys_);
}

void SegmentExperts::compute_dense(const ipc::ExpertBatch& b, float* out) {
  const int64_t D = b.hidden;
  const size_t P = pairs_.size();
  if (P > 0) {
    X_.get(P * xs_);
    G_.get(P * gs_);
    U_.get(P * gs_);
    Y_.get(P * ys_);
    pool_.parallel_for(static_cast<int>(P), [&](int p, int) {
      std::memcpy(X_.p + p * xs_, b.x + uint64_t{pairs_[p].token} * D, D * 4);
    });
    items_ = split([](const BlockDesc& k) { return static_cast<int64_t>(k.proj[ipc::kGate].out); });
    pool_.parallel_for(static_cast<int>(items_.size()), [this](int i, int) { up_phase(i); });
    items_ = split([](const BlockDesc& k) { return static_cast<int64_t>(k.proj[ipc::kDown].out); });
    pool_.parallel_for(static_cast<int>(items_.size()), [this](int i, int) { down_phase(i); });
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
}

void SegmentExperts::compute_exl3(const ipc::ExpertBatch& b, float* out) {
  if (groups_.empty()) {
    std::fill(out, out + uint64_t{b.n_tokens} * b.hidden, 0.0f);
    return;
  }
  task_rows_.resize(pairs_.size());
  task_weights_.resize(pairs_.size());
  for (size_t p = 0; p < pairs_.size(); ++p) {
    task_rows_[p] = static_cast<int32_t>(pairs_[p].token);
    task_weights_[p] = pairs_[p].w;
  }
  tasks_.clear();
  for (const Group& g : groups_)
    tasks_.push_back({seg_.block_data(*g.block), task_rows_.data() + g.p0, task_weights_.data() + g.p0, g.n});
  runner_.forward(tasks_.data(), static_cast<int>(tasks_.size()), b.x, b.n_tokens, out,
                  b.flags & ipc::kBatchF16Operands ? exl3::Operands::F16Rows : exl3::Operands::F32);
}

void SegmentExperts::compute(const ipc::ExpertBatch& b, float* out) {
  validate(b);
  std::lock_guard<FifoMutex> lk(mu_);
  if (b.n_tokens == 0) return;
  plan(b, seg_.moe_index(b.layer));
  if (exl3_layer_) compute_exl3(b, out);
  else compute_dense(b, out);
}

}  // namespace ft::cew
