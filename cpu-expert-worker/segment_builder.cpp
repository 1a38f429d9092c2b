#include "cpu-expert-worker/segment_builder.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include "cpu-expert-worker/log.h"
#include "shared/core/error.h"
#include "shared/exl3/exl3_linear.h"
#include "shared/exl3/expert_block.h"
#include "shared/exl3/thread_pool.h"
#include "shared/ipc/liveness.h"
#include "shared/model/safetensors.h"
#include "shared/model/tensor_convert.h"

namespace ft::cew {

using ipc::BlockDesc;
using ipc::ProjDesc;
using ipc::ProjEncoding;
using ipc::SegmentHeader;

namespace {

using clk = std::chrono::steady_clock;

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

struct ProjPlan {
  ProjEncoding enc = ProjEncoding::F32;
  int64_t out = 0, in = 0;
  const uint8_t* src = nullptr;  // dense: the weights as on disk
  uint64_t wbytes = 0;
  std::string exl3_name;  // EXL3: the module to load again when copying
  int K = 0;
  exl3::Codebook codebook = exl3::Codebook::Inst3;
  int64_t in_p = 0, out_p = 0;
  uint64_t off_w = 0, off_suh = 0, off_svh = 0;  // in the block
};

struct BlockPlan {
  uint32_t layer = 0, expert = 0;
  int64_t hidden = 0, inter = 0;
  ProjPlan p[3];
  uint64_t offset = 0, bytes = 0;
  uint32_t format = 0;
};

ProjEncoding dense_encoding(const TensorInfo& t) {
  switch (t.dtype) {
    case DType::F32: return ProjEncoding::F32;
    case DType::BF16: return ProjEncoding::BF16;
    case DType::F16: return ProjEncoding::F16;
    default:
      throw Error(t.where() + " has dtype " + dtype_name(t.dtype) +
                  "; routed expert weights must be BF16, F16, F32 or EXL3");
  }
}

ProjPlan dense_plan(const TensorInfo& t, int64_t out, int64_t in) {
  expect_shape(t, {out, in});
  ProjPlan p;
  p.enc = dense_encoding(t);
  p.out = out;
  p.in = in;
  p.src = t.data;
  p.wbytes = t.nbytes;
  return p;
}

ProjPlan exl3_plan(const TensorStore& st, const std::string& name, int64_t out, int64_t in) {
  const exl3::Exl3Linear q = exl3::load_exl3_linear(st, name, out, in);
  if (!q.bias.empty()) throw Error(q.where + ": routed experts have no bias");
  ProjPlan p;
  p.enc = ProjEncoding::Exl3;
  p.out = out;
  p.in = in;
  p.exl3_name = name;
  p.K = q.K;
  p.codebook = q.codebook;
  p.in_p = q.in_p;
  p.out_p = q.out_p;
  p.wbytes = static_cast<uint64_t>(q.trellis_bytes());
  return p;
}

// Module prefix of layer `l`'s experts: "model.language_model.layers.L.mlp.experts." or "model.layers…".
std::string experts_prefix(const TensorStore& st, int64_t l) {
  for (const char* pre : {"model.language_model.", "model."}) {
    const std::string p = std::string(pre) + "layers." + std::to_string(l) + ".mlp.experts.";
    if (st.find(p + "gate_up_proj") || st.find(p + "0.gate_proj.weight") || st.find(p + "0.gate_proj.trellis"))
      return p;
  }
  return "model.language_model.layers." + std::to_string(l) + ".mlp.experts.";
}

std::vector<BlockPlan> plan_blocks(const TensorStore& st, const ModelConfig& c) {
  const int64_t E = c.n_routed_experts, D = c.hidden_size, Im = c.moe_intermediate_size;
  std::vector<BlockPlan> blocks;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    if (!c.is_moe(l)) continue;
    const std::string pre = experts_prefix(st, l);
    const TensorInfo* fused_gu = st.find(pre + "gate_up_proj");
    const bool fused = fused_gu && !st.find(pre + "0.gate_proj.weight") && !st.find(pre + "0.gate_proj.trellis");
    const TensorInfo* fused_dn = nullptr;
    if (fused) {
      fused_dn = &st.get(pre + "down_proj");
      expect_shape(*fused_gu, {E, 2 * Im, D});
      expect_shape(*fused_dn, {E, D, Im});
      dense_encoding(*fused_gu);
      dense_encoding(*fused_dn);
    }
    for (int64_t e = 0; e < E; ++e) {
      BlockPlan b;
      b.layer = static_cast<uint32_t>(l);
      b.expert = static_cast<uint32_t>(e);
      if (fused) {
        const uint64_t es = dtype_size(fused_gu->dtype), ds = dtype_size(fused_dn->dtype);
        for (int k = 0; k < 2; ++k) {
          ProjPlan& p = b.p[k];
          p.enc = dense_encoding(*fused_gu);
          p.out = Im;
          p.in = D;
          p.wbytes = static_cast<uint64_t>(Im * D) * es;
          p.src = fused_gu->data + (static_cast<uint64_t>(e) * 2 + k) * p.wbytes;
        }
        ProjPlan& p = b.p[2];
        p.enc = dense_encoding(*fused_dn);
        p.out = D;
        p.in = Im;
        p.wbytes = static_cast<uint64_t>(D * Im) * ds;
        p.src = fused_dn->data + static_cast<uint64_t>(e) * p.wbytes;
      } else {
        const char* names[3] = {"gate_proj", "up_proj", "down_proj"};
        const int64_t outs[3] = {Im, Im, D}, ins[3] = {D, D, Im};
        for (int k = 0; k < 3; ++k) {
          const std::string n = pre + std::to_string(e) + "." + names[k];
          if (const TensorInfo* t = st.find(n + ".weight")) b.p[k] = dense_plan(*t, outs[k], ins[k]);
          else if (exl3::is_exl3_linear(st, n)) b.p[k] = exl3_plan(st, n, outs[k], ins[k]);
          else throw Error(st.source() + ": missing tensor " + n + ".weight (routed expert " + std::to_string(e) +
                           " of layer " + std::to_string(l) + ")");
        }
      }
      int n_exl3 = 0;
      for (const ProjPlan& p : b.p) n_exl3 += p.enc == ProjEncoding::Exl3;
      b.hidden = D;
      b.inter = Im;
      if (n_exl3 == 3) {
        // The exl3 area's packed expert block (shared/exl3/expert_block.h), read by its kernels.
        exl3::ExpertGeometry g;
        g.hidden = D;
        g.inter = Im;
        for (int k = 0; k < 3; ++k) {
          g.K[k] = b.p[k].K;
          g.codebook[k] = b.p[k].codebook;
        }
        const exl3::ExpertBlockHeader eh = exl3::plan_expert_block(g);
        for (int k = 0; k < 3; ++k) {
          b.p[k].off_w = eh.proj[k].trellis_offset;
          b.p[k].off_suh = eh.proj[k].suh_offset;
          b.p[k].off_svh = eh.proj[k].svh_offset;
        }
        b.bytes = eh.block_bytes;
        b.format = static_cast<uint32_t>(ipc::BlockFormat::Exl3);
      } else if (n_exl3 == 0) {
        uint64_t off = 0;
        for (ProjPlan& p : b.p) {
          p.off_w = align_up(off, 64);
          off = p.off_w + p.wbytes;
        }
        b.bytes = align_up(off, ipc::kSegmentAlign);
        b.format = static_cast<uint32_t>(ipc::BlockFormat::Dense);
      } else {
        throw Error(st.source() + ": routed expert " + std::to_string(e) + " of layer " + std::to_string(l) +
                    " mixes EXL3 and dense projections; the expert tier needs all three in one encoding");
      }
      if (!blocks.empty() && blocks.back().layer == b.layer && blocks.back().format != b.format)
        throw Error(st.source() + ": layer " + std::to_string(l) +
                    " mixes EXL3 and dense routed experts; the expert tier needs one encoding per layer");
      blocks.push_back(std::move(b));
    }
  }
  return blocks;
}

struct Layout {
  uint64_t table_offset = 0, data_offset = 0, total = 0;
};

Layout lay_out(std::vector<BlockPlan>& blocks) {
  Layout L;
  L.table_offset = ipc::kSegmentAlign;
  L.data_offset = align_up(L.table_offset + blocks.size() * sizeof(BlockDesc), ipc::kSegmentAlign);
  uint64_t off = L.data_offset;
  for (BlockPlan& b : blocks) {
    b.offset = off;
    off += b.bytes;
  }
  L.total = off;
  return L;
}

void copy_block(const TensorStore& st, const BlockPlan& b, uint8_t* dst) {
  if (b.format == static_cast<uint32_t>(ipc::BlockFormat::Exl3)) {
    exl3::pack_expert_from_store(st, b.layer, b.expert, b.hidden, b.inter, dst);
    return;
  }
  for (const ProjPlan& p : b.p) std::memcpy(dst + p.off_w, p.src, p.wbytes);
}

void fill_desc(const BlockPlan& b, BlockDesc& d) {
  std::memset(&d, 0, sizeof d);
  d.offset = b.offset;
  d.bytes = b.bytes;
  d.layer = b.layer;
  d.expert = b.expert;
  d.format = b.format;
  for (int k = 0; k < 3; ++k) {
    const ProjPlan& p = b.p[k];
    ProjDesc& q = d.proj[k];
    q.encoding = static_cast<uint32_t>(p.enc);
    q.out = static_cast<uint32_t>(p.out);
    q.in = static_cast<uint32_t>(p.in);
    q.exl3_k = static_cast<uint32_t>(p.K);
    q.exl3_codebook = static_cast<uint32_t>(p.codebook);
    q.in_p = static_cast<uint32_t>(p.in_p);
    q.out_p = static_cast<uint32_t>(p.out_p);
    q.offset = p.off_w;
    q.bytes = p.wbytes;
    q.suh_offset = p.off_suh;
    q.svh_offset = p.off_svh;
  }
}

// The segment's shape must be the config's (a fingerprint collision or a hand-edited header would
// otherwise surface as wrong results).
std::string geometry_problem(const SegmentHeader& h, const ModelConfig& c) {
  std::vector<uint32_t> moe;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe(l)) moe.push_back(static_cast<uint32_t>(l));
  if (h.hidden != c.hidden_size || h.intermediate != c.moe_intermediate_size ||
      h.n_experts != c.n_routed_experts || h.n_layers != c.num_hidden_layers || h.n_moe_layers != moe.size() ||
      !std::equal(moe.begin(), moe.end(), h.moe_layers))
    return "its shape differs from config.json";
  return "";
}

// Logs "bytes, %, rate, ETA" every `every` seconds until stopped.
class ProgressLogger {
 public:
  ProgressLogger(const std::string& name, const std::atomic<uint64_t>& done, uint64_t total, double every)
      : done_(done), total_(total), t0_(clk::now()) {
    thread_ = std::thread([this, name, every] {
      std::unique_lock<std::mutex> lk(mu_);
      while (!cv_.wait_for(lk, std::chrono::duration<double>(every), [this] { return stop_; })) {
        const double s = std::chrono::duration<double>(clk::now() - t0_).count();
        const double d = static_cast<double>(done_.load()), rate = d / std::max(s, 1e-9);
        const double eta = rate > 0 ? (static_cast<double>(total_) - d) / rate : 0;
        char pct[16];
        std::snprintf(pct, sizeof pct, "%.1f%%", 100.0 * d / std::max<double>(1, static_cast<double>(total_)));
        log_line("loading experts into " + name + ": " + fmt_bytes(d) + " / " + fmt_bytes(static_cast<double>(total_)) +
                 " (" + pct + ") at " + fmt_bytes(rate) + "/s, ETA " + fmt_seconds(eta));
      }
    });
  }
  ~ProgressLogger() {
    {
      std::lock_guard<std::mutex> lk(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  const std::atomic<uint64_t>& done_;
  uint64_t total_;
  clk::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace

uint64_t segment_bytes(const std::string& model_dir, const ModelConfig& cfg) {
  const TensorStore st = TensorStore::open(model_dir);
  std::vector<BlockPlan> blocks = plan_blocks(st, cfg);
  return lay_out(blocks).total;
}

OpenedSegment open_or_build_segment(const std::string& model_dir, const ModelConfig& cfg,
                                    const std::string& fingerprint, const SegmentOptions& opts,
                                    LoadProgress* progress) {
  ipc::ShmMapping::check_name(opts.name);
  OpenedSegment res;
  const auto t_attach = clk::now();
  if (auto old = ipc::ShmMapping::open(opts.name, false)) {
    const auto& h = *reinterpret_cast<const SegmentHeader*>(old->data());
    std::string why = ipc::segment_problem(h, old->size(), fingerprint);
    if (why.empty()) why = geometry_problem(h, cfg);
    if (why.empty() && opts.force_rebuild) why = "a rebuild was asked for";
    if (why.empty()) {
      res.segment = ipc::ExpertSegment(std::move(*old));
      res.reattached = true;
      res.seconds = std::chrono::duration<double>(clk::now() - t_attach).count();
      if (progress) {
        progress->total = h.data_bytes;
        progress->done = h.data_bytes;
      }
      return res;
    }
    if (old->size() >= sizeof(SegmentHeader) && std::memcmp(h.magic, ipc::kSegmentMagic, 8) == 0 &&
        h.complete.load() == 0) {
      const uint32_t pid = h.builder_pid.load();
      if (pid != 0 && static_cast<pid_t>(pid) != getpid() && ipc::process_alive(static_cast<pid_t>(pid)))
        throw Error("segment " + opts.name + " is being built by another process (pid " + std::to_string(pid) +
                    "); wait for it or stop it");
    }
    res.rebuild_reason = why;
    old.reset();
    ipc::ShmMapping::remove(opts.name);
  }

  const auto t_build = clk::now();
  const TensorStore st = TensorStore::open(model_dir);
  std::vector<BlockPlan> blocks = plan_blocks(st, cfg);
  const Layout L = lay_out(blocks);
  const uint64_t data_bytes = L.total - L.data_offset;
  if (progress) {
    progress->total = data_bytes;
    progress->done = 0;
  }
  ipc::ShmMapping shm = ipc::ShmMapping::create(opts.name, L.total, true);
  auto& h = *new (shm.data()) SegmentHeader{};
  std::memcpy(h.magic, ipc::kSegmentMagic, 8);
  h.layout_version = ipc::kSegmentLayoutVersion;
  h.header_bytes = sizeof(SegmentHeader);
  std::snprintf(h.fingerprint, sizeof h.fingerprint, "%s", fingerprint.c_str());
  h.total_bytes = L.total;
  h.table_offset = L.table_offset;
  h.data_offset = L.data_offset;
  h.data_bytes = data_bytes;
  h.hidden = static_cast<uint32_t>(cfg.hidden_size);
  h.intermediate = static_cast<uint32_t>(cfg.moe_intermediate_size);
  h.n_layers = static_cast<uint32_t>(cfg.num_hidden_layers);
  h.n_experts = static_cast<uint32_t>(cfg.n_routed_experts);
  h.top_k = static_cast<uint32_t>(cfg.num_experts_per_tok);
  for (int64_t l = 0; l < cfg.num_hidden_layers; ++l)
    if (cfg.is_moe(l)) {
      if (h.n_moe_layers >= ipc::kSegmentMaxMoeLayers) throw Error("too many MoE layers for the segment header");
      h.moe_layers[h.n_moe_layers++] = static_cast<uint32_t>(l);
    }
  h.build_id = std::random_device{}() | (static_cast<uint64_t>(std::random_device{}()) << 32);
  h.built_unix_ms = static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  h.builder_pid.store(static_cast<uint32_t>(getpid()));
  h.complete.store(0);
  auto* table = reinterpret_cast<BlockDesc*>(shm.data() + L.table_offset);
  for (size_t i = 0; i < blocks.size(); ++i) fill_desc(blocks[i], table[i]);

  log_line("building segment " + opts.name + ": " + std::to_string(blocks.size()) + " expert blocks, " +
           fmt_bytes(static_cast<double>(L.total)) + " from " + model_dir +
           (res.rebuild_reason.empty() ? "" : " (existing segment not reused: " + res.rebuild_reason + ")"));
  std::atomic<uint64_t> local_done{0};
  std::atomic<uint64_t>& done = progress ? progress->done : local_done;
  std::mutex err_mu;
  std::string first_error;
  std::atomic<bool> failed{false};
  {
    ProgressLogger logger(opts.name, done, data_bytes, opts.progress_every_s);
    exl3::ThreadPool pool(std::max(1, opts.threads), false);
    pool.parallel_for(static_cast<int>(blocks.size()), [&](int i, int) {
      if (failed.load(std::memory_order_relaxed) || (opts.cancel && opts.cancel->load(std::memory_order_relaxed)))
        return;
      try {
        copy_block(st, blocks[i], shm.data() + blocks[i].offset);
        done.fetch_add(blocks[i].bytes, std::memory_order_relaxed);
      } catch (const std::exception& e) {
        std::lock_guard<std::mutex> lk(err_mu);
        if (!failed.exchange(true)) first_error = e.what();
      }
    });
  }
  if (failed || (opts.cancel && opts.cancel->load())) {
    shm = ipc::ShmMapping();
    ipc::ShmMapping::remove(opts.name);
    throw Error(failed ? first_error : "segment build of " + opts.name + " interrupted");
  }
  res.seconds = std::chrono::duration<double>(clk::now() - t_build).count();
  res.bytes_copied = data_bytes;
  h.build_seconds = res.seconds;
  h.builder_pid.store(0);
  h.complete.store(1, std::memory_order_release);
  log_line("segment " + opts.name + " built: " + fmt_bytes(static_cast<double>(data_bytes)) + " in " +
           fmt_seconds(res.seconds) + " (" + fmt_bytes(static_cast<double>(data_bytes) / std::max(res.seconds, 1e-9)) +
           "/s)");
  // Serve from a read-only mapping: nothing may write the experts once they are complete.
  shm = ipc::ShmMapping();
  std::string why;
  auto seg = ipc::ExpertSegment::attach(opts.name, fingerprint, &why);
  if (!seg) throw Error("segment " + opts.name + " vanished after its build: " + why);
  res.segment = std::move(*seg);
  return res;
}

}  // namespace ft::cew
