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
  bool internals = false;  // compare case0.layerI.* when present
  double max_rel_l2 = 1e-4;
  double max_internal_rel_l2 = 1e-3;
};

struct CaseResult {
  int64_t prompt_len = 0, decode_steps = 0;
  double prefill_rel_l2 = 0, decode_rel_l2 = 0, max_abs = 0;
  int64_t top1_agree = 0, top1_total = 0;
  int64_t greedy_agree = 0, greedy_total = 0;
  int64_t ref_nonfinite_rows = 0;  // reference rows with NaN/inf, left out of every figure
  double prefill_tok_s = 0, decode_tok_s = 0;
};

struct FixtureCheckResult {
  std::vector<CaseResult> cases;
  double prefill_rel_l2 = 0, decode_rel_l2 = 0, top1 = 0;
  int64_t greedy_agree = 0, greedy_total = 0;
  bool internals_ok = true;
  std::vector<std::string> internal_lines;  // one per layer when internals were compared
  bool passed = false;
  std::string summary_line() const;  // "fixture-check: cases=N prefill_rel_l2=X ..."
};

// Runs the whole check; per-case lines go to `log` as they finish. Throws ft::Error for a
// malformed model or reference.
FixtureCheckResult run_fixture_check(const FixtureCheckOptions& opts, std::ostream& log);

}  // namespace ft
