#pragma once
// EXL3 linears on the GPU — the twin of shared/exl3/reference.h:
//   y = ((((x ⊙ suh)·Ĥ)·Wq)·Ĥ) ⊙ svh (+ bias), sliced to the logical `out` columns,
// with the trellis decoded inside the matmul (the dense weight never exists in global memory).
//
// Device form of a linear: the packed trellis of shared/exl3/packed.h (the layout of the
// cpu-expert-worker's expert blocks, so the grouped MoE kernel in moe.h reads the same form),
// suh/svh as fp16 (the checkpoint's own values) and an optional fp32 bias [out_p].
//
// Numerics:
//   * input transform: fp32 x (zero-extended to in_p) ⊙ suh, the 128-point Hadamard in fp32 with
//     hadamard.cpp's butterfly order (same bits as the CPU), then fp16 of xh·2^e_r with e_r chosen
//     per row exactly as to_f16_rows (ops/linear.h) does; row_scale = 2^−e_r;
//   * weights: the reference decode's fp16 values bit for bit (spec §5's GPU formulas);
//   * matmul: mma.m16n8k16, fp16 operands, fp32 accumulation, under the reduction contract of
//     ops/linear.h with KC = exl3_k_chunk(in_p, out_p) (chunk partials added left to right);
//   * output transform: the Hadamard on the fp32 sums (same butterflies), ·svh, ·row_scale, + bias.
// Batch invariance: a row's output bits depend only on that row, whatever the row count, the
// kernel chosen (skinny for ≤ 32 rows, row batches of 32 beyond) or the row's position.
//
// Host functions take device pointers and a stream, allocate nothing and never synchronise
// (upload and decode-to-dense are load-time helpers and say so).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "gpu-worker/backends/cuda/core/vram.h"
#include "gpu-worker/backends/cuda/ops/linear.h"
#include "shared/exl3/codebook.h"
#include "shared/exl3/exl3_linear.h"

namespace ft::cuda {

// One EXL3 linear as the kernels see it (pointers into device or mapped host memory).
struct Exl3LinearDev {
  int K = 0;                                        // bits per weight, 1…8
  ft::exl3::Codebook codebook = ft::exl3::Codebook::Inst3;
  int64_t in = 0, out = 0;                          // logical widths (x has `in` columns, y gets `out`)
  int64_t in_p = 0, out_p = 0;                      // padded, multiples of 128
  const uint32_t* trellis = nullptr;                // packed form, in_p·out_p·K/8 bytes, 16-byte aligned
  const __half* suh = nullptr;                      // [in_p]
  const __half* svh = nullptr;                      // [out_p]
  const float* bias = nullptr;                      // [out_p] or null
  int k_chunk = 0;                                  // KC = exl3_k_chunk(in_p, out_p)
};

// KC of the reduction contract for an EXL3 weight: a power of two times 128 that divides in_p,
// the largest that still leaves ≥ 256 (128-column block, chunk) work items, at least 128. A
// function of (in_p, out_p) only.
int exl3_k_chunk(int64_t in_p, int64_t out_p);

// An uploaded linear: owns its device memory (VramCategory::Weights).
class Exl3LinearGpu {
 public:
  Exl3LinearGpu() = default;
  const Exl3LinearDev& dev() const { return dev_; }
  uint64_t bytes() const { return trellis_.bytes() + scales_.bytes() + bias_.bytes(); }

 private:
  friend Exl3LinearGpu upload_exl3_linear(const ft::exl3::Exl3Linear&, int64_t, int64_t, VramBudget&);
  Exl3LinearDev dev_;
  DeviceArray<uint32_t> trellis_;
  DeviceArray<__half> scales_;  // suh [in_p] then svh [out_p]
  DeviceArray<float> bias_;
};

// Packs q's trellis on the host (ft::exl3::pack_trellis) and copies trellis, suh, svh and bias to
// the GPU (synchronous: a load-time call). out/in are the logical widths (checked against the
// padded sizes). Throws VramExhausted past the budget.
Exl3LinearGpu upload_exl3_linear(const ft::exl3::Exl3Linear& q, int64_t out, int64_t in, VramBudget& budget);

// Describes a linear whose packed trellis and fp16 suh/svh already sit in device-visible memory
// (an expert block's projection, for example).
Exl3LinearDev exl3_linear_view(int K, ft::exl3::Codebook cb, int64_t in, int64_t out, const uint32_t* trellis,
                               const __half* suh, const __half* svh, const float* bias = nullptr);

// Programmatic dependent launch (sm_90 and later; nothing changes below): the skinny kernel of
// each exl3_linear starts while its input transform runs and copies its first trellis stages
// before it waits for that input, hiding its launch and first memory latency. Results are the
// same bits either way (the skinny kernel reads activations through L2, not the read-only path,
// which is undefined for data another kernel writes during its lifetime: docs/perf.md, session
// 13). Auto (the default) uses it for calls of up to four rows, where it measured faster on every
// model shape from a CUDA graph (session 12, H100: 0.9–2.5 µs per call); at 8 rows it loses on
// the wide shapes. flashtier-bench-exl3 times Off and On. FLASHTIER_EXL3_PDL=off|auto|on sets the
// policy a process starts with.
enum class Exl3Programmatic { Off = 0, Auto = 1, On = 2 };
void exl3_set_programmatic_launch(Exl3Programmatic policy);
Exl3Programmatic exl3_programmatic_launch();

// The wide shape of the prefill kernels (more than 32 rows, and the grouped MoE kernel's prefill
// form): 16 warps × 256 columns with the running sums in shared memory (186–229 KB, so only on
// parts that opt in that much: sm_90; elsewhere the narrow shape runs). Same bits either way.
// Measured (docs/perf.md, session 17, H100): 1.08× the narrow shape's rate per SM at 2048–8192
// rows and in the MoE prefill form, but a wide CTA is two narrow ones, so a linear whose grid is
// about one wave of narrow CTAs loses (4096→4096 × 512 rows: 91 against 152 TFLOP/s). Auto (the
// default) runs a linear wide where its waves of wide CTAs take less time than the narrow waves
// at that rate (exl3_wide_prefill_pays) and the MoE form wide wherever it fits; On runs every
// prefill call wide where it fits (the tests); FLASHTIER_EXL3_WIDE=off|auto|on sets the start.
enum class Exl3Wide { Off = 0, Auto = 1, On = 2 };
void exl3_set_wide_prefill(Exl3Wide policy);
Exl3Wide exl3_wide_prefill();
// Auto's rule for a linear of out_p padded outputs over `rows` rows on `sms` SMs.
bool exl3_wide_prefill_pays(int64_t out_p, int64_t rows, int sms);
// Whether the current device can run the wide shape of a K-bit linear (its shared memory; the
// grouped MoE kernel's: exl3_moe_wide_prefill_fits in moe.h).
bool exl3_wide_prefill_fits(int K);
// The prefill kernels' narrow block on wgmma (sm_90a code, compute capability 9.0 devices;
// gemm_wgmma.cuh), with mma.sync's bits (a wgmma k16 step is an mma.sync k16 step's arithmetic;
// the prefill tests compare the two forms bit for bit on the GPU machine). Auto (the default) and
// On run it where the device loads it, ahead of the wide shape (docs/perf.md, session 21: 4–7%
// faster than the narrow and wide mma.sync blocks at 512–8192 rows); Off keeps mma.sync (A/B);
// FLASHTIER_EXL3_WGMMA=off|auto|on sets the start. exl3_wgmma_prefill(): whether prefill calls
// take it now. Launches are counted like the wide shape's.
enum class Exl3Wgmma { Off = 0, Auto = 1, On = 2 };
void exl3_set_wgmma_prefill(Exl3Wgmma policy);
Exl3Wgmma exl3_wgmma_policy();
bool exl3_wgmma_prefill();
uint64_t exl3_wgmma_prefill_launches();
// Launches of the wide shape so far in this process (linears and MoE prefill forms).
uint64_t exl3_wide_prefill_launches();

// Scratch of exl3_linear for up to max_rows rows (bytes, 256-aligned pieces inside). Before its
// first use a workspace must be zeroed once (exl3_linear_workspace_init); the kernels leave their
// counters at zero again, so it can then be reused by any linear on the same stream.
size_t exl3_linear_workspace_bytes(const Exl3LinearDev& L, int64_t max_rows);
// Where a call of `rows` rows keeps its pieces (byte offsets). The split-K counters come first
// and span the same bytes for every linear and row count: what makes the sharing above safe.
struct Exl3LinearWorkspaceLayout {
  size_t counters_end = 0, row_scale = 0, xh = 0, partials = 0, total = 0;
};
Exl3LinearWorkspaceLayout exl3_linear_workspace_layout(const Exl3LinearDev& L, int64_t rows);
void exl3_linear_workspace_init(void* workspace, size_t bytes, cudaStream_t stream);

// y[r][n] = (… as above …) for r < rows, n < L.out; x rows ld_x floats apart (L.in columns
// read), y rows ld_y floats apart. Accumulate adds to y instead of overwriting it.
void exl3_linear(const Exl3LinearDev& L, const float* x, int64_t ld_x, int64_t rows, float* y, int64_t ld_y,
                 void* workspace, cudaStream_t stream, LinearStore store = LinearStore::Overwrite);

// The two halves of exl3_linear, for callers that make the transformed input themselves (the
// grouped MoE does) or reuse it:
// xh[r] = the permuted fp16 row of ((x[r] ⊙ suh)·Ĥ)·2^e_r ([rows][in_p] halves, inside every
// 32-input block in the B-fragment order of device.cuh), row_scale[r] = 2^−e_r.
void exl3_input_transform(const float* x, int64_t ld_x, int64_t rows, int64_t in, const __half* suh, int64_t in_p,
                          __half* xh, float* row_scale, cudaStream_t stream);
// The matmul and output transform on an already transformed input (workspace as for exl3_linear).
void exl3_matmul_transformed(const Exl3LinearDev& L, const __half* xh, const float* row_scale, int64_t rows,
                             float* y, int64_t ld_y, void* workspace, cudaStream_t stream,
                             LinearStore store = LinearStore::Overwrite);

// Dense copies of a whole linear (load-time helpers; asynchronous on `stream`):
// Wq [in_p][out_p] fp16: the decoded trellis, input rows × output columns (exllamav3's
// `reconstruct`), every value the reference decode's bits.
void exl3_decode_wq(const Exl3LinearDev& L, __half* wq, cudaStream_t stream);
// W [out][in] fp32, nn.Linear orientation: the logical slice of W_effᵀ with
// W_eff = diag(suh)·Ĥ·Wq·Ĥ·diag(svh) (the twin of ft::exl3::dense_weight; fp32 Hadamards, so it
// agrees with the reference's double-precision formula to fp32 rounding, ~1e-6 relative).
void exl3_decode_dense(const Exl3LinearDev& L, float* w, cudaStream_t stream);

}  // namespace ft::cuda
