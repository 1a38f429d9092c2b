#include "shared/engine/state.h"

namespace ft {

SequenceState new_sequence_state(const ModelConfig& c) {
  SequenceState s;
  const int64_t L = c.num_hidden_layers;
  s.kda.resize(L);
  s.sparse.resize(L);
  for (int64_t l = 0; l < L; ++l) {
    if (c.is_sparse(l)) continue;
    s.kda[l].conv_window.assign(static_cast<size_t>((c.linear_conv_kernel_dim - 1) * 3 * c.linear_dim()), 0.0f);
    s.kda[l].S.assign(static_cast<size_t>(c.linear_num_heads * c.linear_head_dim * c.linear_head_dim), 0.0f);
  }
  return s;
}

size_t SequenceState::bytes() const {
  size_t b = 0;
  for (const auto& k : kda) b += (k.conv_window.size() + k.S.size()) * sizeof(float);
  for (const auto& sp : sparse) b += (sp.latent.size() + sp.kI.size() + sp.gI.size() + sp.pool_keys.size()) * sizeof(float);
  return b;
}

}  // namespace ft
