#include "shared/exl3/expert_block.h"

#include <cstring>

#include "shared/core/error.h"
#include "shared/core/half.h"

namespace ft::exl3 {

namespace {

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

const char* proj_suffix(ExpertProj p) { return p == kGate ? "gate_proj" : p == kUp ? "up_proj" : "down_proj"; }

void check_proj(const Exl3Linear& q, int64_t in, int64_t out) {
  if (q.in_p != pad128(in) || q.out_p != pad128(out))
    throw Error(q.where + ": expert projection is " + std::to_string(q.in_p) + " x " + std::to_string(q.out_p) +
                " (in x out, padded), expected " + std::to_string(pad128(in)) + " x " + std::to_string(pad128(out)));
  if (!q.bias.empty()) throw Error(q.where + ": routed expert projections carry no bias in glm5_next");
}

}  // namespace

ExpertBlockHeader plan_expert_block(const ExpertGeometry& g) {
  ExpertBlockHeader h{};
  h.magic = kExpertBlockMagic;
  h.version = kExpertBlockVersion;
  h.hidden = static_cast<uint64_t>(g.hidden);
  h.inter = static_cast<uint64_t>(g.inter);
  const uint64_t D = pad128(g.hidden), I = pad128(g.inter);
  const uint64_t in[3] = {D, D, I}, out[3] = {I, I, D};
  uint64_t off = kExpertHeaderBytes;
  for (int p = 0; p < 3; ++p) {
    if (g.K[p] < 1 || g.K[p] > 8) throw Error("expert geometry: K = " + std::to_string(g.K[p]) + " is outside 1..8");
    ProjHeader& ph = h.proj[p];
    ph.K = static_cast<uint32_t>(g.K[p]);
    ph.codebook = static_cast<uint32_t>(g.codebook[p]);
    ph.in_p = in[p];
    ph.out_p = out[p];
    ph.trellis_offset = off = align_up(off, 64);
    off += in[p] * out[p] * ph.K / 8;
  }
  for (int p = 0; p < 3; ++p) {
    h.proj[p].suh_offset = off = align_up(off, 64);
    off += 2 * in[p];
    h.proj[p].svh_offset = off = align_up(off, 64);
    off += 2 * out[p];
  }
  h.block_bytes = align_up(off, kExpertBlockAlign);
  return h;
}

void pack_expert_block(const Exl3Linear& gate, const Exl3Linear& up, const Exl3Linear& down, int64_t hidden,
                       int64_t inter, uint8_t* dst) {
  check_proj(gate, hidden, inter);
  check_proj(up, hidden, inter);
  check_proj(down, inter, hidden);
  const Exl3Linear* q[3] = {&gate, &up, &down};
  ExpertGeometry g;
  g.hidden = hidden;
  g.inter = inter;
  for (int p = 0; p < 3; ++p) {
    g.K[p] = q[p]->K;
    g.codebook[p] = q[p]->codebook;
  }
  const ExpertBlockHeader h = plan_expert_block(g);
  std::memset(dst, 0, h.block_bytes);
  std::memcpy(dst, &h, sizeof(h));
  for (int p = 0; p < 3; ++p) {
    const ProjHeader& ph = h.proj[p];
    pack_trellis(q[p]->trellis, q[p]->in_p, q[p]->out_p, q[p]->K, reinterpret_cast<uint32_t*>(dst + ph.trellis_offset));
    // suh/svh were read from fp16 (or ±1 legacy signs): converting back is exact.
    uint16_t* suh = reinterpret_cast<uint16_t*>(dst + ph.suh_offset);
    uint16_t* svh = reinterpret_cast<uint16_t*>(dst + ph.svh_offset);
    for (uint64_t i = 0; i < ph.in_p; ++i) suh[i] = f32_to_f16(q[p]->suh[i]);
    for (uint64_t i = 0; i < ph.out_p; ++i) svh[i] = f32_to_f16(q[p]->svh[i]);
  }
}

std::string expert_proj_name(const TensorStore& store, int64_t layer, int64_t expert, ExpertProj p) {
  const std::string suffix =
      "layers." + std::to_string(layer) + ".mlp.experts." + std::to_string(expert) + "." + proj_suffix(p);
  for (const char* pre : {"model.language_model.", "model."})
    if (is_exl3_linear(store, pre + suffix)) return pre + suffix;
  throw Error(store.source() + ": missing EXL3 tensor model.language_model." + suffix +
              ".trellis (the fast expert tier needs EXL3 routed experts)");
}

ExpertGeometry expert_geometry(const TensorStore& store, int64_t layer, int64_t expert, int64_t hidden, int64_t inter) {
  ExpertGeometry g;
  g.hidden = hidden;
  g.inter = inter;
  for (int p = 0; p < 3; ++p) {
    const Exl3Linear q = load_exl3_linear(store, expert_proj_name(store, layer, expert, static_cast<ExpertProj>(p)));
    g.K[p] = q.K;
    g.codebook[p] = q.codebook;
  }
  return g;
}

void pack_expert_from_store(const TensorStore& store, int64_t layer, int64_t expert, int64_t hidden, int64_t inter,
                            uint8_t* dst) {
  const Exl3Linear gate = load_exl3_linear(store, expert_proj_name(store, layer, expert, kGate), inter, hidden);
  const Exl3Linear up = load_exl3_linear(store, expert_proj_name(store, layer, expert, kUp), inter, hidden);
  const Exl3Linear down = load_exl3_linear(store, expert_proj_name(store, layer, expert, kDown), hidden, inter);
  pack_expert_block(gate, up, down, hidden, inter, dst);
}

ExpertView view_expert_block(const uint8_t* block) {
  ExpertView v;
  v.header = reinterpret_cast<const ExpertBlockHeader*>(block);
  if (v.header->magic != kExpertBlockMagic)
    throw Error("expert block: bad magic " + std::to_string(v.header->magic) + " (not a packed EXL3 expert)");
  if (v.header->version != kExpertBlockVersion)
    throw Error("expert block: layout version " + std::to_string(v.header->version) + ", this build reads " +
                std::to_string(kExpertBlockVersion));
  for (int p = 0; p < 3; ++p) {
    const ProjHeader& ph = v.header->proj[p];
    v.proj[p].K = static_cast<int>(ph.K);
    v.proj[p].codebook = static_cast<Codebook>(ph.codebook);
    v.proj[p].in_p = static_cast<int64_t>(ph.in_p);
    v.proj[p].out_p = static_cast<int64_t>(ph.out_p);
    v.proj[p].data = reinterpret_cast<const uint32_t*>(block + ph.trellis_offset);
    v.suh[p] = reinterpret_cast<const uint16_t*>(block + ph.suh_offset);
    v.svh[p] = reinterpret_cast<const uint16_t*>(block + ph.svh_offset);
  }
  return v;
}

}  // namespace ft::exl3
