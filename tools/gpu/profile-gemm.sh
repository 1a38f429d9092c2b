#!/usr/bin/env bash
# What holds the prefill kernels back (GPU machine; bundle from `tools/gpu/run-checks.sh pack`).
# Nsight Compute on one launch of each tensor-core prefill kernel, as the benchmarks call them:
#   dense  linear_tiled_kernel   (flashtier-bench-linear --quick)
#   exl3   exl3_gemm_kernel      (flashtier-bench-exl3 --only prefill)
#   densewg, exl3wg, moewg   the wgmma forms of the three (sm_90a); densetma the dense one fed by TMA
#   moe    exl3_moe_gemm_kernel  (flashtier-bench-exl3 --only moeprefill)
#   gemv, gemvkda  exl3_gemv_kernel at batch 1, MLA o / KDA q/k/v, K=3 (not run unless named)
# and prints throughput against peak (tensor pipe, issue, shared memory, DRAM), occupancy and
# the warp stall reasons: whether a kernel is short of issue slots, of tensor-core rate, of
# shared-memory bandwidth, or waits on latency with too few warps. PROFILE="dense exl3 moe"
# picks kernels; NCU_SECTIONS adds sections (e.g. "--section SourceCounters": the instructions the
# warps stall on); logs go to $OUT (or .gpu-bundle/out).
set -uo pipefail
# shellcheck source=tools/gpu/bundle_env.sh
source "$(dirname "$0")/bundle_env.sh"
cd "$ROOT" || exit 1
if [ -z "$NCU" ]; then echo "== ncu: not found"; exit 0; fi

sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats
          --section WarpStateStats --section LaunchStats ${NCU_SECTIONS:-})
profile() {  # name kernel-regex skip binary args...
  local name=$1 kernel=$2 skip=$3
  shift 3
  echo "== $name: $kernel (launch $skip)"
  timeout 240 "$NCU" --clock-control none --print-summary none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
    "${sections[@]}" "$@" >"$OUTDIR/ncu-$name.txt" 2>&1
  echo "rc=$?"
  grep -E "^  [a-z_]+.*\(|Duration|Compute \(SM\) Throughput|Memory Throughput|Issue Slots Busy|Issued Ipc|\
Executed Ipc|No Eligible|Active Warps Per Scheduler|Eligible Warps|Warp Cycles Per Issued|Registers Per|\
Achieved Occupancy|Shared Memory Configuration|Grid Size|Block Size|Theoretical Occupancy|Stall|stall" \
    "$OUTDIR/ncu-$name.txt" | head -40
  grep -oE "(on|by) [^.]*stalled[^.]*\." "$OUTDIR/ncu-$name.txt" | head -6
}
# each KERNELS... FN: FN name kernel-regex launches-to-skip binary args... for each kernel named.
each() {
  local fn=$1 what
  shift
  for what in "$@"; do
    case $what in
      dense) "$fn" dense linear_tiled_kernel 4 "$B/bin/flashtier-bench-linear" --quick ;;
      exl3) "$fn" exl3 exl3_gemm_kernel 4 "$B/bin/flashtier-bench-exl3" --only prefill ;;
      moe) "$fn" moe exl3_moe_gemm_kernel 2 "$B/bin/flashtier-bench-exl3" --only moeprefill ;;
      # Their wgmma forms (sm_90a; the EXL3 ones need FLASHTIER_EXL3_WGMMA=on until it is the default).
      densewg) "$fn" densewg linear_wgmma_kernel 4 "$B/bin/flashtier-bench-linear" --quick ;;
      # The dense wgmma kernel fed by the copy engine (the default on sm_90 since session 24).
      densetma) "$fn" densetma linear_wgmma_tma_kernel 4 "$B/bin/flashtier-bench-linear" --quick ;;
      exl3wg) "$fn" exl3wg exl3_gemm_wgmma_kernel 4 "$B/bin/flashtier-bench-exl3" --only prefill ;;
      moewg) "$fn" moewg exl3_moe_gemm_wgmma_kernel 2 "$B/bin/flashtier-bench-exl3" --only moeprefill ;;
      # The batch-1 GEMV at MLA o (16384→4096, K=3), eager calls after the first few.
      gemv) "$fn" gemv exl3_gemv_kernel 20 "$B/bin/flashtier-bench-exl3" --only gemv --gemv-shape "MLA o" --gemv-k 3 ;;
      # KDA q/k/v 4096→8192: the shape class of the KDA in-projection (4096→24,896).
      gemvkda) "$fn" gemvkda exl3_gemv_kernel 20 "$B/bin/flashtier-bench-exl3" --only gemv --gemv-shape "KDA q" --gemv-k 3 ;;
    esac
  done
}
# shellcheck disable=SC2086
each profile ${PROFILE-dense exl3 moe}
# Raw counters per kernel: the pipes (tensor vs the integer/FMA pipes the EXL3 decode uses, shared
# memory) and the warp stall reasons per issued instruction, largest first.
counters() {  # name kernel-regex skip binary args...
  local name=$1 kernel=$2 skip=$3
  shift 3
  echo "== $name counters"
  timeout 120 "$NCU" --clock-control none --print-summary none -k "regex:$kernel" --launch-skip "$skip" --launch-count 1 \
    --metrics "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio" \
    "$@" >"$OUTDIR/ncu-$name-counters.txt" 2>&1
  grep -E "^\s+(sm|l1tex|smsp__issue)" "$OUTDIR/ncu-$name-counters.txt"
  grep -E "stalled_.*ratio" "$OUTDIR/ncu-$name-counters.txt" | awk '{print $NF, $1}' | sort -gr | head -8
}
# shellcheck disable=SC2086
each counters ${COUNTERS-exl3 moe}
rm -rf "$B"
