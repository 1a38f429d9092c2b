#include "gpu-worker/tiers/synthetic_segment.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

#include "shared/core/error.h"
#include "shared/exl3/expert_block.h"
#include "shared/ipc/expert_segment.h"
#include "shared/ipc/shm.h"

namespace ft::tiers {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

// One projection with random trellis bits (any bit pattern is a valid trellis), random ±1 input
// signs and an output scale of in^-1/2, so a decoded expert keeps activations near unit size.
exl3::Exl3Linear random_linear(int64_t out, int64_t in, int K, exl3::Codebook cb, std::mt19937_64& g,
                               std::vector<uint8_t>& trellis_store) {
  exl3::Exl3Linear L;
  L.name = "synthetic";
  L.where = "synthetic expert";
  L.K = K;
  L.codebook = cb;
  L.in_p = exl3::pad128(in);
  L.out_p = exl3::pad128(out);
  trellis_store.resize(static_cast<size_t>(L.trellis_bytes()));
  for (size_t i = 0; i + 8 <= trellis_store.size(); i += 8) {
    const uint64_t r = g();
    std::memcpy(trellis_store.data() + i, &r, 8);
  }
  L.trellis = trellis_store.data();
  L.suh.resize(static_cast<size_t>(L.in_p));
  for (float& s : L.suh) s = (g() & 1) ? 1.0f : -1.0f;
  L.svh.assign(static_cast<size_t>(L.out_p), 0.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(in));
  for (int64_t i = 0; i < out; ++i) L.svh[static_cast<size_t>(i)] = scale;
  return L;
}

}  // namespace

SyntheticSegmentInfo build_synthetic_segment(const ModelConfig& c, const SyntheticSegmentOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t D = c.hidden_size, I = c.moe_intermediate_size, E = c.n_routed_experts;
  std::vector<uint32_t> moe_layers;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe(l)) moe_layers.push_back(static_cast<uint32_t>(l));
  if (moe_layers.empty() || moe_layers.size() > ipc::kSegmentMaxMoeLayers)
    throw Error("synthetic segment: the config has " + std::to_string(moe_layers.size()) + " MoE layers");
  exl3::ExpertGeometry geo;
  geo.hidden = D;
  geo.inter = I;
  for (int p = 0; p < 3; ++p) {
    geo.K[p] = o.K;
    geo.codebook[p] = o.codebook;
  }
  const exl3::ExpertBlockHeader eh = exl3::plan_expert_block(geo);
  const uint64_t block = eh.block_bytes;
  SyntheticSegmentInfo info;
  info.identities = moe_layers.size() * static_cast<uint64_t>(E);
  info.block_bytes = block;
  info.distinct_blocks = o.pool_bytes ? std::min<uint64_t>(info.identities, o.pool_bytes / block) : info.identities;
  if (info.distinct_blocks == 0)
    throw Error("synthetic segment: a pool of " + std::to_string(o.pool_bytes) + " bytes holds no expert block of " +
                std::to_string(block) + " bytes");
  const uint64_t table_offset = ipc::kSegmentAlign;
  const uint64_t data_offset = align_up(table_offset + info.identities * sizeof(ipc::BlockDesc), ipc::kSegmentAlign);
  info.total_bytes = data_offset + info.distinct_blocks * block;

  ipc::ShmMapping::remove(o.name);
  ipc::ShmMapping shm = ipc::ShmMapping::create(o.name, info.total_bytes, true);
  auto& h = *new (shm.data()) ipc::SegmentHeader{};
  std::memcpy(h.magic, ipc::kSegmentMagic, 8);
  h.layout_version = ipc::kSegmentLayoutVersion;
  h.header_bytes = sizeof(ipc::SegmentHeader);
  std::snprintf(h.fingerprint, sizeof h.fingerprint, "synthetic-exl3-k%d-seed%llu", o.K,
                static_cast<unsigned long long>(o.seed));
  h.total_bytes = info.total_bytes;
  h.table_offset = table_offset;
  h.data_offset = data_offset;
  h.data_bytes = info.total_bytes - data_offset;
  h.hidden = static_cast<uint32_t>(D);
  h.intermediate = static_cast<uint32_t>(I);
  h.n_layers = static_cast<uint32_t>(c.num_hidden_layers);
  h.n_experts = static_cast<uint32_t>(E);
  h.top_k = static_cast<uint32_t>(c.num_experts_per_tok);
  h.n_moe_layers = static_cast<uint32_t>(moe_layers.size());
  std::copy(moe_layers.begin(), moe_layers.end(), h.moe_layers);
  h.build_id = o.seed;
  h.builder_pid.store(static_cast<uint32_t>(getpid()));
  h.complete.store(0);

  auto* table = reinterpret_cast<ipc::BlockDesc*>(shm.data() + table_offset);
  const int64_t outs[3] = {I, I, D}, ins[3] = {D, D, I};
  for (size_t m = 0; m < moe_layers.size(); ++m)
    for (int64_t e = 0; e < E; ++e) {
      ipc::BlockDesc& d = table[m * static_cast<size_t>(E) + static_cast<size_t>(e)];
      std::memset(&d, 0, sizeof d);
      d.offset = data_offset + synthetic_block_of(static_cast<int>(m), static_cast<int>(e), static_cast<int>(E),
                                                  info.distinct_blocks) * block;
      d.bytes = block;
      d.layer = moe_layers[m];
      d.expert = static_cast<uint32_t>(e);
      d.format = static_cast<uint32_t>(ipc::BlockFormat::Exl3);
      for (int p = 0; p < 3; ++p) {
        ipc::ProjDesc& q = d.proj[p];
        q.encoding = static_cast<uint32_t>(ipc::ProjEncoding::Exl3);
        q.out = static_cast<uint32_t>(outs[p]);
        q.in = static_cast<uint32_t>(ins[p]);
        q.exl3_k = static_cast<uint32_t>(o.K);
        q.exl3_codebook = static_cast<uint32_t>(o.codebook);
        q.in_p = static_cast<uint32_t>(eh.proj[p].in_p);
        q.out_p = static_cast<uint32_t>(eh.proj[p].out_p);
        q.offset = eh.proj[p].trellis_offset;
        q.bytes = eh.proj[p].in_p * eh.proj[p].out_p * static_cast<uint64_t>(o.K) / 8;
        q.suh_offset = eh.proj[p].suh_offset;
        q.svh_offset = eh.proj[p].svh_offset;
      }
    }

  // A few distinct random experts, packed once; the pool's blocks are copies of them (the bytes'
  // values do not matter to a bandwidth benchmark, their addresses do).
  constexpr int kVariants = 4;
  std::vector<std::vector<uint8_t>> variants(kVariants, std::vector<uint8_t>(static_cast<size_t>(block)));
  std::mt19937_64 g(o.seed);
  for (auto& v : variants) {
    std::vector<uint8_t> tg, tu, td;
    const exl3::Exl3Linear gate = random_linear(I, D, o.K, o.codebook, g, tg);
    const exl3::Exl3Linear up = random_linear(I, D, o.K, o.codebook, g, tu);
    const exl3::Exl3Linear down = random_linear(D, I, o.K, o.codebook, g, td);
    exl3::pack_expert_block(gate, up, down, D, I, v.data());
  }
  const int T = std::max(1, o.threads);
  std::vector<std::thread> th;
  for (int t = 0; t < T; ++t)
    th.emplace_back([&, t] {
      for (uint64_t b = static_cast<uint64_t>(t); b < info.distinct_blocks; b += static_cast<uint64_t>(T))
        std::memcpy(shm.data() + data_offset + b * block, variants[b % kVariants].data(), static_cast<size_t>(block));
    });
  for (auto& x : th) x.join();
  info.build_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  h.build_seconds = info.build_seconds;
  h.builder_pid.store(0);
  h.complete.store(1, std::memory_order_release);
  return info;
}

}  // namespace ft::tiers
