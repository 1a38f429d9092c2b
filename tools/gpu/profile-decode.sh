#!/usr/bin/env bash
# Where a batch-1 decode step's time goes, kernel by kernel (GPU machine; bundle from
# `tools/gpu/run-checks.sh pack`). Nsight Compute times every kernel of a short
# flashtier-bench-engine decode run (real widths, LAYERS layers, default 12: each layer's kernels
# are the same at any depth) one at a time, and tools/gpu/kernel_table.py sums one step's kernels
# by name. The table's sum is the step's kernel time without the gaps between kernels: set
# against the benchmark's graph-replay step time (printed first, same layers), the difference is
# what launch latency and dependencies cost. Logs go to $OUT (or .gpu-bundle/out).
set -uo pipefail
# shellcheck source=tools/gpu/bundle_env.sh
source "$(dirname "$0")/bundle_env.sh"
cd "$ROOT" || exit 1
args=(--layers "${LAYERS:-12}" --batches "${BATCH:-1}" --prefill "" --steps 4 --context 256)
echo "== flashtier-bench-engine ${args[*]} (graph replay, no profiler)"
timeout 120 "$B/bin/flashtier-bench-engine" "${args[@]}" 2>&1 | grep -E "^\| (1|2|4|8) \||kernels, .* nodes"
if [ -z "$NCU" ]; then echo "== ncu: not found"; exit 0; fi
echo "== ncu: every kernel's duration"
# Graph launches are profiled node by node (ncu's default); the cap keeps the run short.
timeout "${NCU_TIMEOUT:-300}" "$NCU" --clock-control none --metrics gpu__time_duration.sum --csv --page raw \
  --launch-count "${LAUNCHES:-4000}" "$B/bin/flashtier-bench-engine" "${args[@]}" >"$OUTDIR/decode-kernels.csv" 2>&1
echo "rc=$?"
python3 "$ROOT/tools/gpu/kernel_table.py" "$OUTDIR/decode-kernels.csv" | tee "$OUTDIR/decode-kernels.txt" | head -60
xz -f "$OUTDIR/decode-kernels.csv"
