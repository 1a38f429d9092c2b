#include "gpu-worker/backends/cuda/engine/tier_split.h"

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <random>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "shared/core/error.h"

namespace ft::cuda {

namespace {

constexpr int kProbeEvery = 16;
using clk = std::chrono::steady_clock;
double us_since(clk::time_point t) { return std::chrono::duration<double, std::micro>(clk::now() - t).count(); }

template <typename T>
T* pinned(size_t n, bool mapped) {
  void* p = nullptr;
  FT_CUDA_CHECK(cudaHostAlloc(&p, std::max<size_t>(n, 1) * sizeof(T), mapped ? cudaHostAllocMapped : cudaHostAllocDefault));
  return static_cast<T*>(p);
}

template <typename T>
T* device_alias(T* host) {
  void* d = nullptr;
  FT_CUDA_CHECK(cudaHostGetDevicePointer(&d, host, 0));
  return static_cast<T*>(d);
}

int64_t first_moe_layer(const ModelConfig& c) {
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (c.is_moe(l)) return l;
  throw Error("the tier split needs a model with MoE layers");
}

}  // namespace

CpuTierSplit::CpuTierSplit(const ModelConfig& c, GpuExpertTier& tier, ExpertBackend& cpu, const TierSplitOptions& o,
                           VramBudget& budget, cudaStream_t s)
    : cfg_(c),
      tier_(tier),
      cpu_(cpu),
      o_(o),
      E_(static_cast<int>(c.n_routed_experts)),
      TK_(static_cast<int>(c.num_experts_per_tok)),
      D_(c.hidden_size),
      rates_(o.rates),
      start_rates_(o.rates) {
  if (o_.mode == tiers::TierMode::Exact) throw Error("the tier split runs in fast or cpu mode only");
  o_.max_rows = std::max<int64_t>(o_.max_rows, 1);
  // Room for the calibration's 2-token steps too.
  const size_t P = static_cast<size_t>(std::max<int64_t>(o_.max_rows, 2)) * TK_;
  picks_h_ = pinned<int32_t>(P, false);
  lost_h_ = pinned<int32_t>(P, false);
  x_h_ = pinned<float>(static_cast<size_t>(o_.max_rows) * D_, false);
  y_h_ = pinned<float>(P * D_, true);
  place_h_ = pinned<int32_t>(P, true);
  picks_d_ = DeviceArray<int32_t>(budget, P, VramCategory::Workspace, "tier split picks");
  lost_d_ = DeviceArray<int32_t>(budget, P, VramCategory::Workspace, "tier split fallback picks");
  y_d_ = device_alias(y_h_);
  place_d_ = device_alias(place_h_);
  records_.resize(static_cast<size_t>(c.moe_layer_count()));
  rows_.resize(static_cast<size_t>(E_));
  on_cpu_.resize(static_cast<size_t>(E_));
  for (LayerRecord& r : records_) {
    FT_CUDA_CHECK(cudaEventCreate(&r.begin));
    FT_CUDA_CHECK(cudaEventCreate(&r.end));
  }
  helper_ = std::make_unique<HelperThread>();
  if (o_.calibrate) calibrate(budget, s);
  rates_ = tiers::SplitRates(start_rates_);
  rates_.freeze(o_.freeze_rates);
}

CpuTierSplit::~CpuTierSplit() {
  if (cpu_started_) {
    try {
      helper_->wait();
    } catch (...) {
    }
  }
  helper_.reset();
  for (LayerRecord& r : records_) {
    if (r.begin) cudaEventDestroy(r.begin);
    if (r.end) cudaEventDestroy(r.end);
  }
  for (void* p : {static_cast<void*>(picks_h_), static_cast<void*>(lost_h_), static_cast<void*>(x_h_),
                  static_cast<void*>(y_h_), static_cast<void*>(place_h_)})
    if (p) cudaFreeHost(p);
}

double CpuTierSplit::time_cpu(int64_t layer, int tokens, int per_token) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(tokens) * D_), out(x.size());
  for (float& v : x) v = u(rng);
  double best = 1e300;
  for (int rep = 0; rep < 6; ++rep) {
    // Other experts each repetition (from the top end: the GPU's calibration reads the low ids),
    // so no repetition finds the previous one's bytes in the CPU's caches.
    std::vector<Routing> rt(static_cast<size_t>(tokens));
    for (Routing& r : rt) {
      for (int j = per_token - 1; j >= 0; --j) r.experts.push_back((E_ - 1 - rep * per_token - j + 8 * E_) % E_);
      std::sort(r.experts.begin(), r.experts.end());
      r.experts.erase(std::unique(r.experts.begin(), r.experts.end()), r.experts.end());
      r.weights.assign(r.experts.size(), 1.0f);
    }
    const auto t0 = clk::now();
    cpu_.compute(layer, x.data(), tokens, rt, out.data(), exl3::Operands::F16Rows);
    if (rep > 0) best = std::min(best, us_since(t0));  // the first call connects and warms up
  }
  return best;
}

double CpuTierSplit::time_zero_copy(int64_t layer, int tokens, VramBudget& budget, cudaStream_t s) {
  const int64_t P = static_cast<int64_t>(tokens) * TK_;
  const MoeDispatchSizes ds = moe_dispatch_sizes(tokens, TK_, E_);
  DeviceArray<int32_t> ex(budget, P, VramCategory::Workspace, "tier calibration picks");
  DeviceArray<int32_t> off(budget, ds.offsets, VramCategory::Workspace, "tier calibration dispatch"),
      sorted(budget, ds.sorted_pick, VramCategory::Workspace, "tier calibration dispatch"),
      act(budget, ds.active, VramCategory::Workspace, "tier calibration dispatch"),
      nact(budget, ds.n_active, VramCategory::Workspace, "tier calibration dispatch");
  DeviceArray<float> x(budget, static_cast<size_t>(tokens) * D_, VramCategory::Workspace, "tier calibration input"),
      w(budget, P, VramCategory::Workspace, "tier calibration weights"),
      Y(budget, static_cast<size_t>(P) * D_, VramCategory::Workspace, "tier calibration output");
  FT_CUDA_CHECK(cudaMemsetAsync(x.get(), 0, x.bytes(), s));
  FT_CUDA_CHECK(cudaMemsetAsync(w.get(), 0, w.bytes(), s));
  const MoeDispatch d{off.get(), sorted.get(), act.get(), nact.get()};
  const MoeRoutes r{ex.get(), w.get(), tokens, TK_};
  const int moe = tier_.moe_index(layer);
  double best = 1e300;
  for (int rep = 0; rep < 4; ++rep) {
    // Experts not in VRAM, other ones each repetition (the GPU's L2 holds tens of MB).
    std::vector<int32_t> pick;
    for (int e = rep * TK_; static_cast<int>(pick.size()) < TK_ && e < rep * TK_ + E_; ++e)
      if (!tier_.in_vram(moe, e % E_)) pick.push_back(e % E_);
    if (static_cast<int>(pick.size()) < TK_) return 0;  // everything cached: no zero-copy to time
    std::sort(pick.begin(), pick.end());
    for (int t = 0; t < tokens; ++t)
      std::copy(pick.begin(), pick.end(), picks_h_ + static_cast<int64_t>(t) * TK_);
    FT_CUDA_CHECK(cudaMemcpyAsync(ex.get(), picks_h_, P * sizeof(int32_t), cudaMemcpyHostToDevice, s));
    moe_dispatch(r, E_, d, s);
    LayerRecord& rec = records_[static_cast<size_t>(moe)];
    FT_CUDA_CHECK(cudaEventRecord(rec.begin, s));
    exl3_moe_experts(tier_.layer(layer), r, d, x.get(), D_, static_cast<float>(cfg_.swiglu_limit), Y.get(),
                     tier_.workspace(), s);
    FT_CUDA_CHECK(cudaEventRecord(rec.end, s));
    FT_CUDA_CHECK(cudaStreamSynchronize(s));
    float ms = 0;
    FT_CUDA_CHECK(cudaEventElapsedTime(&ms, rec.begin, rec.end));
    if (rep > 0) best = std::min(best, 1e3 * ms);
  }
  return best;
}

void CpuTierSplit::calibrate(VramBudget& budget, cudaStream_t s) {
  const int64_t layer = first_moe_layer(cfg_);
  tiers::TierRates r = o_.rates;
  const double z1 = time_zero_copy(layer, 1, budget, s), z2 = time_zero_copy(layer, 2, budget, s);
  if (z1 > 0) {
    r.zc_expert = z1 / TK_;
    r.zc_row = std::max(0.0, (z2 - z1) / TK_);
    // A VRAM hit reads the same bytes at HBM speed; the running fit finds its real cost.
    r.hit_expert = r.zc_expert / 16;
  }
  try {
    const double c1 = time_cpu(layer, 1, 1), c4 = time_cpu(layer, 1, std::min(4, E_)),
                 r4 = time_cpu(layer, 4, 1);
    const int k = std::min(4, E_);
    r.cpu_expert = k > 1 ? std::max((c4 - c1) / (k - 1), c1 / 2) : c1;
    // The ring's round trip is tens of µs (docs/perf.md, expert tier transport): a larger
    // intercept is the kernel's own per-call cost, which the per-expert rate absorbs as it runs.
    r.handoff = std::clamp(c1 - r.cpu_expert, 0.0, 200.0);
    r.cpu_row = std::max(0.0, (r4 - c1) / 3);
    if (z1 > 0 && r.cpu_expert > 4 * r.zc_expert) {
      // A start-up stall (cold caches, frequency ramp): start level with zero-copy and let the
      // layers' timings set the rate.
      std::cerr << "cuda engine: the CPU tier's calibration looks stalled (" << r.cpu_expert
                << " µs per expert); starting from the zero-copy rate" << std::endl;
      r.cpu_row *= r.zc_expert / r.cpu_expert;
      r.cpu_expert = r.zc_expert;
    }
  } catch (const std::exception& e) {
    std::cerr << "cuda engine: the CPU expert tier did not answer its calibration (" << e.what()
              << "); misses read zero-copy until it does" << std::endl;
    cpu_up_ = false;
    down_since_ = clk::now();
    if (r.cpu_expert <= 0) r.cpu_expert = r.zc_expert;
  }
  start_rates_ = r;
  char line[320];
  std::snprintf(line, sizeof line,
                "cuda engine: tier split (%s) calibrated: CPU tier %.1f µs/expert + %.1f µs/extra row, hand-off %.1f µs; "
                "zero-copy %.1f µs/expert + %.1f µs/extra row",
                tiers::tier_mode_name(o_.mode), r.cpu_expert, r.cpu_row, r.handoff, r.zc_expert, r.zc_row);
  std::cerr << line << std::endl;
}

bool CpuTierSplit::begin_step(int64_t rows) {
  step_layers_.clear();
  active_ = false;
  if (rows > o_.max_rows || tier_.staged()) return false;
  if (!cpu_up_) {
    if (clk::now() - down_since_ < o_.retry_every) return false;
    if (!cpu_.healthy()) {
      down_since_ = clk::now();
      return false;
    }
    cpu_up_ = true;
    std::cerr << "cuda engine: the CPU expert tier answers again; splitting misses with it" << std::endl;
  }
  active_ = true;
  return true;
}

void CpuTierSplit::cpu_failed() {
  cpu_up_ = false;
  down_since_ = clk::now();
  ++st_.failures;
}

const int32_t* CpuTierSplit::split(int64_t layer, const int32_t* experts, const float* x, int64_t n, cudaStream_t s) {
  if (n > o_.max_rows) throw Error("tier split: " + std::to_string(n) + " rows exceed " + std::to_string(o_.max_rows));
  layer_ = layer;
  n_cpu_ = 0;
  cpu_started_ = false;
  const int moe = tier_.moe_index(layer);
  const int64_t P = n * TK_;
  int32_t* route_h = tier_.route_buffer(layer);
  FT_CUDA_CHECK(cudaMemcpyAsync(route_h, experts, P * sizeof(int32_t), cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaMemcpyAsync(x_h_, x, n * D_ * sizeof(float), cudaMemcpyDeviceToHost, s));
  FT_CUDA_CHECK(cudaStreamSynchronize(s));

  std::vector<int>& rows = rows_;
  std::fill(rows.begin(), rows.end(), 0);
  for (int64_t p = 0; p < P; ++p)
    if (route_h[p] >= 0 && route_h[p] < E_) ++rows[route_h[p]];
  misses_.clear();
  int hits = 0;
  for (int e = 0; e < E_; ++e) {
    if (rows[e] == 0) continue;
    if (tier_.in_vram(moe, e)) ++hits;
    else misses_.push_back({e, rows[e]});
  }
  const tiers::TierMode mode = cpu_up_ ? o_.mode : tiers::TierMode::Exact;
  tiers::LayerSplit sp = tiers::split_misses(rates_.rates(), mode, misses_, hits);
  // The fit only learns the CPU tier's cost from layers that use it: one that looked dear once
  // (a slow call, a busy host) would never be tried again. Every kProbeEvery layers without CPU
  // work, one zero-copy miss goes there anyway.
  if (mode == tiers::TierMode::Fast && !rates_.frozen() && sp.cpu.empty() && sp.zero_copy.size() >= 2) {
    if (++layers_without_cpu_ >= kProbeEvery) {
      layers_without_cpu_ = 0;
      sp.cpu.push_back(sp.zero_copy.back());
      sp.zero_copy.pop_back();
      ++st_.probes;
    }
  } else if (!sp.cpu.empty()) {
    layers_without_cpu_ = 0;
  }
  std::vector<uint8_t>& on_cpu = on_cpu_;
  std::fill(on_cpu.begin(), on_cpu.end(), 0);
  int cpu_extra = 0, zc_extra = 0;
  for (int e : sp.cpu) on_cpu[e] = 1, cpu_extra += rows[e] - 1;
  for (int e : sp.zero_copy) zc_extra += rows[e] - 1;
  req_x_.resize(static_cast<size_t>(P) * D_);
  req_routes_.resize(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) {
    const int32_t e = route_h[p];
    const bool c = e >= 0 && e < E_ && on_cpu[e];
    picks_h_[p] = c ? -1 : e;
    lost_h_[p] = c ? e : -1;
    if (!c) continue;
    // One request row per pick, weight 1: the answer row is the expert's output alone.
    std::copy_n(x_h_ + (p / TK_) * D_, D_, req_x_.data() + static_cast<int64_t>(n_cpu_) * D_);
    Routing& r = req_routes_[static_cast<size_t>(n_cpu_)];
    r.experts.assign(1, e);
    r.weights.assign(1, 1.0f);
    place_h_[n_cpu_++] = static_cast<int32_t>(p);
  }
  req_routes_.resize(static_cast<size_t>(n_cpu_));
  FT_CUDA_CHECK(cudaMemcpyAsync(picks_d_.get(), picks_h_, P * sizeof(int32_t), cudaMemcpyHostToDevice, s));

  ++st_.layers;
  st_.cpu_experts += sp.cpu.size();
  st_.zero_copy_experts += sp.zero_copy.size();
  st_.hit_experts += static_cast<uint64_t>(hits);
  st_.predicted_us += sp.finish_us;
  LayerRecord& rec = records_[static_cast<size_t>(moe)];
  rec.hits = hits;
  rec.zero_copy = static_cast<int>(sp.zero_copy.size());
  rec.extra_rows = zc_extra;
  if (n_cpu_ > 0) {
    const int n_req = n_cpu_, n_experts = static_cast<int>(sp.cpu.size());
    queued_ = clk::now();
    cpu_started_ = true;
    helper_->start([this, layer, n_req, n_experts, cpu_extra] {
      // The GPU's operand rounding: the CPU share sums as the GPU's would (to accumulation order).
      cpu_.compute(layer, req_x_.data(), n_req, req_routes_, y_h_, exl3::Operands::F16Rows);
      cpu_call_us_ = us_since(queued_);
      rates_.observe_cpu(n_experts, cpu_extra, cpu_call_us_);
    });
  }
  return picks_d_.get();
}

void CpuTierSplit::gpu_begin(cudaStream_t s) {
  FT_CUDA_CHECK(cudaEventRecord(records_[static_cast<size_t>(tier_.moe_index(layer_))].begin, s));
}

void CpuTierSplit::gpu_end(cudaStream_t s) {
  const int moe = tier_.moe_index(layer_);
  FT_CUDA_CHECK(cudaEventRecord(records_[static_cast<size_t>(moe)].end, s));
  step_layers_.push_back(moe);
}

const int32_t* CpuTierSplit::finish(float* Y, cudaStream_t s) {
  if (!cpu_started_) return nullptr;
  cpu_started_ = false;
  const auto t0 = clk::now();
  try {
    helper_->wait();
  } catch (const std::exception& e) {
    std::cerr << "cuda engine: the CPU expert tier failed mid-step (" << e.what()
              << "); its experts are read zero-copy, and misses stay on the GPU until it answers again" << std::endl;
    cpu_failed();
    FT_CUDA_CHECK(cudaMemcpyAsync(lost_d_.get(), lost_h_, picks_d_.bytes(), cudaMemcpyHostToDevice, s));
    return lost_d_.get();
  }
  st_.wait_us += us_since(t0);
  st_.cpu_us += cpu_call_us_;
  moe_place_rows(y_d_, place_d_, n_cpu_, D_, Y, s);
  return nullptr;
}

void CpuTierSplit::after_step() {
  for (int moe : step_layers_) {
    const LayerRecord& r = records_[static_cast<size_t>(moe)];
    float ms = 0;
    if (cudaEventElapsedTime(&ms, r.begin, r.end) != cudaSuccess) continue;
    st_.gpu_us += 1e3 * ms;
    rates_.observe_gpu(r.hits, r.zero_copy, r.extra_rows, 1e3 * ms);
  }
  step_layers_.clear();
}

TierSplitStats CpuTierSplit::stats() const {
  TierSplitStats s = st_;
  s.cpu_up = cpu_up_;
  s.rates = rates_.rates();
  s.start_rates = start_rates_;
  return s;
}

}  // namespace ft::cuda
