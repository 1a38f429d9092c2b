#include "shared/engine/state_snapshots.h"

#include <algorithm>

namespace ft {

// Rows [j·B, (j+1)·B) of every sparse layer's per-token caches (empty vectors elsewhere).
struct StateSnapshots::Block {
  PrefixIndex::Tokens tokens;  // a token list whose first (j+1)·B ids are this block's prefix
  int64_t end = 0;             // (j+1)·B
  std::vector<std::vector<float>> latent, kI, gI;  // per layer
  uint64_t bytes = 0;
};

struct StateSnapshots::Snapshot {
  int64_t n = 0;
  std::vector<std::shared_ptr<const Block>> blocks;  // whole blocks [0, n / B)
  std::vector<KdaState> kda;
  std::vector<std::vector<float>> tail_latent, tail_kI, tail_gI, pool_keys;  // per layer
  uint64_t own = 0;
};

namespace {

template <class V>
uint64_t vec_bytes(const std::vector<V>& vs) {
  uint64_t b = 0;
  for (const auto& v : vs) b += v.size() * sizeof(float);
  return b;
}

std::vector<float> rows(const std::vector<float>& v, int64_t r0, int64_t r1, int64_t width) {
  if (v.empty()) return {};
  return std::vector<float>(v.begin() + r0 * width, v.begin() + r1 * width);
}

}  // namespace

StateSnapshots::StateSnapshots(const ModelConfig& c, uint64_t budget_bytes, int64_t block_tokens)
    : cfg_(c), budget_(budget_bytes), B_(block_tokens), index_(block_tokens),
      live_block_bytes_(std::make_shared<uint64_t>(0)) {}

StateSnapshots::~StateSnapshots() = default;

std::shared_ptr<const StateSnapshots::Block> StateSnapshots::block_for(const PrefixIndex::Tokens& tokens, int64_t j,
                                                                       uint64_t chain, const SequenceState& s) {
  const int64_t end = (j + 1) * B_;
  auto it = blocks_.find({chain, j});
  if (it != blocks_.end()) {
    if (auto b = it->second.lock())
      if (std::equal(tokens->begin(), tokens->begin() + end, b->tokens->begin())) return b;
  }
  auto* raw = new Block;
  raw->tokens = tokens;
  raw->end = end;
  const int64_t L = cfg_.num_hidden_layers, Rkv = cfg_.kv_lora_rank, ID = cfg_.index_head_dim;
  raw->latent.resize(L);
  raw->kI.resize(L);
  raw->gI.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    if (!cfg_.is_sparse(l)) continue;
    const SparseState& sp = s.sparse[l];
    raw->latent[l] = rows(sp.latent, j * B_, end, Rkv);
    raw->kI[l] = rows(sp.kI, j * B_, end, ID);
    raw->gI[l] = rows(sp.gI, j * B_, end, ID);
  }
  raw->bytes = vec_bytes(raw->latent) + vec_bytes(raw->kI) + vec_bytes(raw->gI);
  *live_block_bytes_ += raw->bytes;
  std::weak_ptr<uint64_t> counter = live_block_bytes_;
  std::shared_ptr<const Block> b(raw, [counter](const Block* p) {
    if (auto c = counter.lock()) *c -= p->bytes;
    delete p;
  });
  blocks_[{chain, j}] = b;
  return b;
}

void StateSnapshots::keep(std::span<const int32_t> tokens, const SequenceState& s) {
  if (budget_ == 0 || tokens.empty()) return;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (s.n_tokens != n) return;  // a state that does not cover exactly these tokens is never kept
  auto toks = std::make_shared<const std::vector<int32_t>>(tokens.begin(), tokens.end());
  auto snap = std::make_shared<Snapshot>();
  snap->n = n;
  const int64_t whole = n / B_, L = cfg_.num_hidden_layers, Rkv = cfg_.kv_lora_rank, ID = cfg_.index_head_dim;
  uint64_t chain = 0;
  for (int64_t j = 0; j < whole; ++j) {
    chain = prefix_block_hash(chain, std::span<const int32_t>(*toks).subspan(static_cast<size_t>(j * B_), B_));
    snap->blocks.push_back(block_for(toks, j, chain, s));
  }
  snap->kda = s.kda;
  snap->tail_latent.resize(L);
  snap->tail_kI.resize(L);
  snap->tail_gI.resize(L);
  snap->pool_keys.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    if (!cfg_.is_sparse(l)) continue;
    const SparseState& sp = s.sparse[l];
    snap->tail_latent[l] = rows(sp.latent, whole * B_, n, Rkv);
    snap->tail_kI[l] = rows(sp.kI, whole * B_, n, ID);
    snap->tail_gI[l] = rows(sp.gI, whole * B_, n, ID);
    snap->pool_keys[l] = sp.pool_keys;
  }
  for (const KdaState& k : snap->kda) snap->own += (k.conv_window.size() + k.S.size()) * sizeof(float);
  snap->own += vec_bytes(snap->tail_latent) + vec_bytes(snap->tail_kI) + vec_bytes(snap->tail_gI) +
               vec_bytes(snap->pool_keys) + toks->size() * sizeof(int32_t);
  block_bytes_ = *live_block_bytes_;
  if (snap->own + block_bytes_ > budget_ && index_.size() == 0) {
    // Alone it does not fit: drop it (its new blocks go with it).
    snap.reset();
    block_bytes_ = *live_block_bytes_;
    return;
  }
  // A snapshot of exactly these tokens already kept is replaced.
  if (const PrefixIndex::Entry* old = index_.find(*toks, n); old && static_cast<int64_t>(old->tokens->size()) == n) {
    own_bytes_ -= static_cast<const Snapshot*>(old->payload.get())->own;
    index_.erase(old->id);
  }
  own_bytes_ += snap->own;
  index_.insert(toks, std::shared_ptr<void>(snap, snap.get()));
  evict_to_fit();
  st_.snapshots = index_.size();
}

void StateSnapshots::evict_to_fit() {
  block_bytes_ = *live_block_bytes_;
  while (own_bytes_ + block_bytes_ > budget_ && index_.size() > 0) {
    const PrefixIndex::Entry* e = index_.oldest();
    own_bytes_ -= static_cast<const Snapshot*>(e->payload.get())->own;
    index_.erase(e->id);
    ++st_.evictions;
    block_bytes_ = *live_block_bytes_;
  }
  for (auto it = blocks_.begin(); it != blocks_.end();) it = it->second.expired() ? blocks_.erase(it) : std::next(it);
  st_.snapshots = index_.size();
}

int64_t StateSnapshots::restore(std::span<const int32_t> prompt, int64_t max_len, SequenceState& s) {
  const PrefixIndex::Entry* e = budget_ ? index_.find(prompt, max_len) : nullptr;
  if (!e) {
    ++st_.misses;
    return 0;
  }
  const auto snap = std::static_pointer_cast<const Snapshot>(e->payload);  // alive through this call
  const int64_t n = snap->n, L = cfg_.num_hidden_layers;
  s.n_tokens = n;
  s.kda = snap->kda;
  for (int64_t l = 0; l < L; ++l) {
    if (!cfg_.is_sparse(l)) continue;
    SparseState& sp = s.sparse[l];
    sp.latent.clear();
    sp.kI.clear();
    sp.gI.clear();
    for (const auto& b : snap->blocks) {
      sp.latent.insert(sp.latent.end(), b->latent[l].begin(), b->latent[l].end());
      sp.kI.insert(sp.kI.end(), b->kI[l].begin(), b->kI[l].end());
      sp.gI.insert(sp.gI.end(), b->gI[l].begin(), b->gI[l].end());
    }
    sp.latent.insert(sp.latent.end(), snap->tail_latent[l].begin(), snap->tail_latent[l].end());
    sp.kI.insert(sp.kI.end(), snap->tail_kI[l].begin(), snap->tail_kI[l].end());
    sp.gI.insert(sp.gI.end(), snap->tail_gI[l].begin(), snap->tail_gI[l].end());
    sp.pool_keys = snap->pool_keys[l];
  }
  ++st_.hits;
  st_.tokens_saved += static_cast<uint64_t>(n);
  return n;
}

PrefixCacheStats StateSnapshots::stats() const {
  PrefixCacheStats s = st_;
  s.bytes = own_bytes_ + *live_block_bytes_;
  s.budget = budget_;
  s.snapshots = index_.size();
  return s;
}

}  // namespace ft
