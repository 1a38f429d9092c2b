#!/usr/bin/env bash
# What holds the prefill kernels back (GPU machine; bundle from `tools/gpu/run-checks.sh pack`).
# Nsight Compute on one launch of each tensor-core prefill kernel, as the benchmarks call them:
#   dense  linear_tiled_kernel   (flashtier-bench-linear --quick)
#   exl3   exl3_gemm_kernel      (flashtier-bench-exl3 --only prefill)
#   moe    exl3_moe_gemm_kernel  (flashtier-bench-exl3 --only moeprefill)
# and prints throughput against peak (tensor pipe, issue, shared memory, DRAM), occupancy and
# the warp stall reasons: whether a kernel is short of issue slots, of tensor-core rate, of
# shared-memory bandwidth, or waits on latency with too few warps. PROFILE="dense exl3 moe"
# picks kernels; logs go to $OUT (or .gpu-bundle/out).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUTDIR=${OUT:-$ROOT/.gpu-bundle/out}
mkdir -p "$OUTDIR"
B=$(mktemp -d)
tar -C "$B" -xJf "$ROOT/.gpu-bundle/bundle.tar.xz"
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -z "$NCU" ]; then echo "== ncu: not found"; exit 0; fi

sections=(--section SpeedOfLight --section ComputeWorkloadAnalysis --section Occupancy --section SchedulerStats
          --section WarpStateStats --section LaunchStats)
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
for what in ${PROFILE:-dense exl3 moe}; do
  case $what in
    dense) profile dense linear_tiled_kernel 4 "$B/bin/flashtier-bench-linear" --quick ;;
    exl3) profile exl3 exl3_gemm_kernel 4 "$B/bin/flashtier-bench-exl3" --only prefill ;;
    moe) profile moe exl3_moe_gemm_kernel 2 "$B/bin/flashtier-bench-exl3" --only moeprefill ;;
  esac
done
# The raw pipe counters of the EXL3 kernel: tensor pipe vs the integer/FMA pipes its decode uses.
if [[ " ${PROFILE:-dense exl3 moe} " == *" exl3 "* ]]; then
  timeout 120 "$NCU" --clock-control none --print-summary none -k regex:exl3_gemm_kernel --launch-skip 4 --launch-count 1 \
    --metrics sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_alu.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_fma.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,l1tex__data_pipe_lsu_wavefronts_mem_shared.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum \
    "$B/bin/flashtier-bench-exl3" --only prefill 2>&1 | grep -E "^\s+(sm|smsp|l1tex)__" | tee "$OUTDIR/ncu-exl3-pipes.txt"
fi
rm -rf "$B"
