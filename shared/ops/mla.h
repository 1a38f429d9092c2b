#pragma once
// Multi-head latent attention without RoPE (spec §5.1–5.2), in the absorbed form: keys and
// values are never expanded per token; the query is mapped into the kv latent space and the
// attention-weighted latent is mapped back per head (spec §6.1). O(|Sel|·NH·Rkv) per query.
#include <cstdint>

namespace ft {

struct MlaDims {
  int64_t heads;   // NH
  int64_t nope;    // dn = dqk
  int64_t v_dim;   // dv
  int64_t latent;  // Rkv
};

// q_abs[h] = W_kb,hᵀ·q_h for every head: kv_b [NH·(dn+dv), Rkv], q [NH·dn] → q_abs [NH, Rkv].
void mla_absorb_query(const float* kv_b, const float* q, const MlaDims& d, float* q_abs);

// ctx[h] = Σ_s softmax_s(q_abs[h]·c_s·scale)·c_s over the selected positions `sel` of the latent
// cache [T, Rkv]; zero when nothing is selected.
void mla_attend(const float* q_abs, const float* latent, const int32_t* sel, int64_t n_sel, const MlaDims& d,
                float scale, float* ctx);

// out[h] = W_vb,h·ctx[h] → out [NH·dv] (head-major, the o_proj input).
void mla_expand_values(const float* kv_b, const float* ctx, const MlaDims& d, float* out);

}  // namespace ft
