#pragma once
// Compares the reference engine with a fixture's reference.safetensors (spec §9): prefill logits
// at every prompt position, cached decode logits for the stored greedy tokens, greedy agreement,
// and optionally case 0's internals (residual streams per layer, router sets, DSA sets).
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

namespace ft {

struct FixtureCheckOptions {
  std::string model_dir;
  std::string reference;   // reference.safetensors
  bool internals = false;  // compare case0.layerI.* when present (cpu backend)
  std::string backend = "cpu";  // "cpu" (fp32 reference engine) or "cuda"
  int device = 0;
  double vram_budget_gb = 0;
  // cuda: the engine's precision (CudaEngineOptions::precision). The references are fp32
  // arithmetic, so the check runs the engine's fp32 precision unless told otherwise (fp16 or
  // auto check the tensor-core path, whose fp16 operands flip routing and sparse selections at
  // near ties on random tiny models).
  std::string precision = "fp32";
  // Tolerances; the cuda backend is judged at bf16 level:
  // rel L2 ≤ 3e-3, top-1 ≥ 0.99, and a greedy disagreement is forgiven only where the
  // reference's own top-2 gap is below near_tie_gap·rms(reference row) (counted and reported).
  double max_rel_l2 = 1e-4;
  double min_top1 = 1.0;
  double near_tie_gap = 0.0;
  double max_internal_rel_l2 = 1e-3;
  void set_backend_tolerances();  // the defaults above for "cpu", the bf16 ones for "cuda"
};

struct CaseResult {
  int64_t prompt_len = 0, decode_steps = 0;
  double prefill_rel_l2 = 0, decode_rel_l2 = 0, max_abs = 0;
  int64_t top1_agree = 0, top1_total = 0;
  int64_t greedy_agree = 0, greedy_total = 0;
  int64_t near_ties = 0;           // greedy disagreements where the reference's top-2 gap is a near tie
  int64_t ref_nonfinite_rows = 0;  // reference rows with NaN/inf, left out of every figure
  double prefill_tok_s = 0, decode_tok_s = 0;
};

struct FixtureCheckResult {
  std::vector<CaseResult> cases;
  double prefill_rel_l2 = 0, decode_rel_l2 = 0, top1 = 0;
  int64_t greedy_agree = 0, greedy_total = 0, near_ties = 0;
  bool internals_ok = true;
  std::vector<std::string> internal_lines;  // one per layer when internals were compared
  bool passed = false;
  std::string summary_line() const;  // "fixture-check: cases=N prefill_rel_l2=X ..."
};

// Runs the whole check; per-case lines go to `log` as they finish. Throws ft::Error for a
// malformed model or reference.
FixtureCheckResult run_fixture_check(const FixtureCheckOptions& opts, std::ostream& log);

}  // namespace ft
