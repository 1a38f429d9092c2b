#include "gpu-worker/backends/cuda/engine/tier_split.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <iostream>
#include <random>

#include "gpu-worker/backends/cuda/core/cuda_check.h"
#include "gpu-worker/backends/cuda/core/stream_memops.h"
#include "gpu-worker/backends/cuda/engine/host_publish.h"
#include "gpu-worker/backends/cuda/exl3/moe.h"
#include "gpu-worker/backends/cuda/ops/moe.h"
#include "shared/core/error.h"

namespace ft::cuda {

namespace {

constexpr int kProbeEvery = 16;
using clk = std::chrono::steady_clock;
double us_since(clk::time_point t) { return std::chrono::duration<double, std::micro>(clk::now() - t).count(); }

// Inside a capture an event record must be external to become a node of the graph (recorded each
// replay); outside one the flag is refused.
void record(cudaEvent_t e, cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  FT_CUDA_CHECK(cudaStreamIsCapturing(s, &st));
  FT_CUDA_CHECK(cudaEventRecordWithFlags(e, s, st == cudaStreamCaptureStatusActive ? cudaEventRecordExternal
                                                                                    : cudaEventRecordDefault));
}

std::string what_of(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    return x.what();
  } catch (...) {
    return "an unknown exception";
  }
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
      n_moe_(static_cast<int>(c.moe_layer_count())),
      D_(c.hidden_size),
      rates_(o.rates),
      start_rates_(o.rates),
      hs_(static_cast<int>(c.moe_layer_count())) {
  if (o_.mode == tiers::TierMode::Exact) throw Error("the tier split runs in fast or cpu mode only");
  if (!stream_memops_available()) throw Error("the tier split needs stream memory operations, which this driver lacks");
  o_.max_rows = std::max<int64_t>(o_.max_rows, 1);
  layer_of_moe_.assign(static_cast<size_t>(n_moe_), -1);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    if (tier_.moe_index(l) >= 0) layer_of_moe_.at(static_cast<size_t>(tier_.moe_index(l))) = l;
  // Room for the calibration's 2-token steps too.
  const size_t rows = static_cast<size_t>(std::max<int64_t>(o_.max_rows, 2)), P = rows * TK_;
  picks_h_ = PinnedArray<int32_t>(P);
  lost_h_ = PinnedArray<int32_t>(P, PinnedKind::Mapped);
  x_h_ = PinnedArray<float>(rows * D_, PinnedKind::Mapped);
  y_h_ = PinnedArray<float>(P * D_, PinnedKind::Mapped);
  place_h_ = PinnedArray<int32_t>(P, PinnedKind::Mapped);
  picks_d_ = DeviceArray<int32_t>(budget, P, VramCategory::Workspace, "tier split picks");
  records_.resize(static_cast<size_t>(n_moe_));
  rows_.resize(static_cast<size_t>(E_));
  on_cpu_.resize(static_cast<size_t>(E_));
  for (LayerRecord& r : records_)
    for (cudaEvent_t* e : {&r.begin, &r.end, &r.arrived}) FT_CUDA_CHECK(cudaEventCreate(e));
  relay_ = std::make_unique<HelperThread>();
  if (o_.calibrate) calibrate(budget, s);
  rates_ = tiers::SplitRates(start_rates_);
  rates_.freeze(o_.freeze_rates);
}

CpuTierSplit::~CpuTierSplit() {
  if (armed_) {
    stop_ = true;
    try {
      relay_->wait();
    } catch (...) {
    }
  }
  relay_.reset();
  for (LayerRecord& r : records_)
    for (cudaEvent_t e : {r.begin, r.end, r.arrived})
      if (e) cudaEventDestroy(e);
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
      std::copy(pick.begin(), pick.end(), picks_h_.get() + static_cast<int64_t>(t) * TK_);
    FT_CUDA_CHECK(cudaMemcpyAsync(ex.get(), picks_h_.get(), P * sizeof(int32_t), cudaMemcpyHostToDevice, s));
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

void CpuTierSplit::arm(int64_t rows) {
  if (!active_ || armed_ || rows > o_.max_rows)
    throw Error("tier split: arm(" + std::to_string(rows) + ") outside an active step");
  step_rows_ = rows;
  served_.clear();
  stop_ = false;
  relay_->start([this] { relay(); });
  armed_ = true;
}

void CpuTierSplit::end_step() {
  if (!armed_) return;
  armed_ = false;
  // The stream passed every Done: the relay is past its last layer, and the step's results
  // stand whatever it reports now (it catches its own failures; this is the last guard).
  try {
    relay_->wait();
  } catch (...) {
    std::cerr << "cuda engine: the tier split's relay stopped (" << what_of(std::current_exception())
              << "); misses stay on the GPU until the CPU tier is retried" << std::endl;
    cpu_failed();
  }
  if (static_cast<int>(served_.size()) != n_moe_ && !relay_warned_) {
    relay_warned_ = true;
    std::cerr << "cuda engine: the tier split's relay served " << served_.size() << " of " << n_moe_
              << " MoE layers in a step" << std::endl;
  }
}

void CpuTierSplit::abandon(cudaStream_t s) noexcept {
  if (!armed_) return;
  armed_ = false;
  // What was enqueued runs to its end, the relay serving each layer it posts; then the relay stops
  // waiting for layers that will not come, and flags a partly enqueued layer left set are cleared.
  (void)cudaStreamSynchronize(s);
  stop_ = true;
  try {
    relay_->wait();
  } catch (...) {
  }
  stop_ = false;
  hs_.reset();
  served_.clear();
}

void CpuTierSplit::relay() {
  for (int moe = 0; moe < n_moe_; ++moe) {
    if (!hs_.wait_posted(moe, stop_)) return;
    serve_layer(moe);
  }
}

void CpuTierSplit::split_layer(int moe, const int32_t* route_h, int64_t P) {
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
  int zc_extra = 0;
  cpu_extra_ = 0;
  for (int e : sp.cpu) on_cpu[e] = 1, cpu_extra_ += rows[e] - 1;
  for (int e : sp.zero_copy) zc_extra += rows[e] - 1;
  cpu_experts_ = static_cast<int>(sp.cpu.size());
  for (int64_t p = 0; p < P; ++p) {
    const int32_t e = route_h[p];
    picks_h_[p] = e >= 0 && e < E_ && on_cpu[e] ? -1 : e;
  }
  ++st_.layers;
  st_.cpu_experts += sp.cpu.size();
  st_.zero_copy_experts += sp.zero_copy.size();
  st_.hit_experts += static_cast<uint64_t>(hits);
  st_.predicted_us += sp.finish_us;
  LayerRecord& rec = records_[static_cast<size_t>(moe)];
  rec.hits = hits;
  rec.zero_copy = static_cast<int>(sp.zero_copy.size());
  rec.extra_rows = zc_extra;
  rec.valid = true;
}

int64_t CpuTierSplit::cpu_requests(const int32_t* route_h, int64_t P) {
  // Grown, never shrunk: the rows' routings keep their vectors from layer to layer.
  if (req_routes_.size() < static_cast<size_t>(P)) req_routes_.resize(static_cast<size_t>(P));
  req_x_.resize(static_cast<size_t>(P) * D_);
  req_place_.clear();
  int64_t n = 0;
  for (int64_t p = 0; p < P; ++p) {
    if (picks_h_[p] >= 0 || route_h[p] < 0 || route_h[p] >= E_) continue;
    // One request row per pick, weight 1: the answer row is the expert's output alone.
    std::copy_n(x_h_.get() + (p / TK_) * D_, D_, req_x_.data() + n * D_);
    Routing& r = req_routes_[static_cast<size_t>(n)];
    r.experts.assign(1, route_h[p]);
    r.weights.assign(1, 1.0f);
    req_place_.push_back(static_cast<int32_t>(p));
    ++n;
  }
  return n;
}

void CpuTierSplit::serve_layer(int moe) {
  // Whatever fails here, the stream gets Ready and Done exactly once each (it waits for both):
  // a split that cannot be planned leaves every pick to the GPU, a CPU share that cannot be
  // computed goes back to it through the lost list.
  const int64_t layer = layer_of_moe_[static_cast<size_t>(moe)];
  const int64_t P = step_rows_ * TK_;
  const int32_t* route_h = tier_.route_buffer(layer);
  LayerRecord& rec = records_[static_cast<size_t>(moe)];
  rec.valid = false;
  std::fill_n(lost_h_.get(), P, -1);
  try {
    split_layer(moe, route_h, P);
  } catch (...) {
    std::cerr << "cuda engine: tier split of layer " << layer << " failed (" << what_of(std::current_exception())
              << "); the GPU computes its misses" << std::endl;
    std::copy_n(route_h, P, picks_h_.get());
  }
  hs_.signal(moe, LayerHandshake::Ready);
  int64_t answered = 0;
  try {
    answered = cpu_requests(route_h, P);
    if (answered > 0) {
      const auto t0 = clk::now();
      // The GPU's operand rounding: the CPU share sums as the GPU's would (to accumulation order).
      cpu_.compute(layer, req_x_.data(), answered, req_routes_, y_h_.get(), exl3::Operands::F16Rows);
      const double us = us_since(t0);
      st_.cpu_us += us;
      rates_.observe_cpu(cpu_experts_, cpu_extra_, us);
    }
  } catch (...) {
    std::cerr << "cuda engine: the CPU expert tier failed mid-step (" << what_of(std::current_exception())
              << "); its experts are read zero-copy, and misses stay on the GPU until it answers again" << std::endl;
    cpu_failed();
    for (int64_t p = 0; p < P; ++p)
      if (picks_h_[p] < 0 && route_h[p] >= 0 && route_h[p] < E_) lost_h_[p] = route_h[p];
    answered = 0;
  }
  for (int64_t i = 0; i < P; ++i) place_h_[i] = i < answered ? req_place_[static_cast<size_t>(i)] : -1;
  hs_.signal(moe, LayerHandshake::Done);
  served_.push_back(moe);
}

void CpuTierSplit::post(int64_t layer, const int32_t* experts, const float* x, int64_t n, cudaStream_t s) {
  if (!armed_ || n != step_rows_)
    throw Error("tier split: layer " + std::to_string(layer) + " posted " + std::to_string(n) +
                " rows outside an armed step of " + std::to_string(step_rows_));
  layer_ = layer;
  n_ = n;
  publish_to_host(experts, n * TK_, tier_.route_buffer_device(layer), x, n * D_, x_h_.device(), s);
  hs_.post(tier_.moe_index(layer), s);
}

const int32_t* CpuTierSplit::await_split(cudaStream_t s) {
  hs_.await(tier_.moe_index(layer_), LayerHandshake::Ready, s);
  FT_CUDA_CHECK(cudaMemcpyAsync(picks_d_.get(), picks_h_.get(), n_ * TK_ * sizeof(int32_t), cudaMemcpyHostToDevice, s));
  return picks_d_.get();
}

void CpuTierSplit::gpu_begin(cudaStream_t s) { record(records_[static_cast<size_t>(tier_.moe_index(layer_))].begin, s); }

void CpuTierSplit::gpu_end(cudaStream_t s) { record(records_[static_cast<size_t>(tier_.moe_index(layer_))].end, s); }

const int32_t* CpuTierSplit::await_cpu(float* Y, cudaStream_t s) {
  const int moe = tier_.moe_index(layer_);
  hs_.await(moe, LayerHandshake::Done, s);
  record(records_[static_cast<size_t>(moe)].arrived, s);
  // One CTA per possible answer row; rows past the last answer are −1 and skipped.
  moe_place_rows(y_h_.device(), place_h_.device(), n_ * TK_, D_, Y, s);
  // Read where they are: the dispatch reads them once, and the grouped kernel only the picks of
  // a failed call (none otherwise).
  return lost_h_.device();
}

void CpuTierSplit::after_step() {
  for (int moe : served_) {
    const LayerRecord& r = records_[static_cast<size_t>(moe)];
    if (!r.valid) continue;  // the split failed: no plan to fit the timing to
    float ms = 0, wait = 0;
    if (cudaEventElapsedTime(&ms, r.begin, r.end) != cudaSuccess) {
      (void)cudaGetLastError();
      if (!timing_warned_) std::cerr << "cuda engine: the tier split's GPU timings are unavailable" << std::endl;
      timing_warned_ = true;
      continue;
    }
    st_.gpu_us += 1e3 * ms;
    rates_.observe_gpu(r.hits, r.zero_copy, r.extra_rows, 1e3 * ms);
    if (cudaEventElapsedTime(&wait, r.end, r.arrived) == cudaSuccess) st_.wait_us += 1e3 * wait;
    else (void)cudaGetLastError();
  }
  served_.clear();
}

TierSplitStats CpuTierSplit::stats() const {
  TierSplitStats s = st_;
  s.cpu_up = cpu_up_;
  s.rates = rates_.rates();
  s.start_rates = start_rates_;
  return s;
}

}  // namespace ft::cuda
