#!/usr/bin/env bash
# Where the zero-copy grouped MoE kernel loses PCIe bandwidth (GPU machine; bundle from
# `tools/gpu/run-checks.sh pack`). Prints:
#   1. flashtier-bench-exl3 --only moe: the committed kernel and its one-change variants;
#   2. Nsight Compute counters of the PCIe read probe and of the first zero-copy MoE launches
#      (gate/up and down of one batch-1 layer): bytes and requests that reach system memory
#      through the L2, PCIe bytes where the chip counts them, warp stall reasons, occupancy.
# The counters say whether the kernel moves more bytes over PCIe than it uses (short or
# partial requests) or moves them more slowly (fewer in flight, stalls between items).
# Logs go to $OUT (or .gpu-bundle/out).
set -uo pipefail
# shellcheck source=tools/gpu/bundle_env.sh
source "$(dirname "$0")/bundle_env.sh"
cd "$ROOT" || exit 1
BENCH=$B/bin/flashtier-bench-exl3

echo "== bench-exl3 --only ${ONLY:=moe}"
timeout 300 "$BENCH" --only "$ONLY" 2>&1 | tee "$OUTDIR/bench-moe.log" | grep -E "^moe |^gemv|PCIe read|host pages|bounds:"

if [ -z "$NCU" ]; then echo "== ncu: not found"; exit 0; fi
echo "== ncu: $NCU ($("$NCU" --version | tail -1))"
"$NCU" --query-metrics --chip gh100 >"$OUTDIR/ncu-metrics.txt" 2>&1 || true
grep -iE "^(pcie|lts__t_(sectors|requests)_aperture_sysmem|lts__t_sectors_srcunit_tex_aperture_sysmem)" \
  "$OUTDIR/ncu-metrics.txt" | cut -c1-110 | head -20
want="gpu__time_duration.sum lts__t_sectors_aperture_sysmem_op_read.sum lts__t_requests_aperture_sysmem_op_read.sum
lts__t_sectors_srcunit_tex_aperture_sysmem_op_read.sum lts__t_requests_srcunit_tex_aperture_sysmem_op_read.sum
pcie__read_bytes.sum pcie__write_bytes.sum lts__t_sectors_aperture_device_op_read.sum
sm__warps_active.avg.pct_of_peak_sustained_active"
metrics=""
for m in $want; do
  base=${m%.*}
  if grep -qE "^$base[[:space:]]" "$OUTDIR/ncu-metrics.txt"; then metrics+="${metrics:+,}$m"; fi
done
echo "metrics: $metrics"
common=(--clock-control none --print-summary none --metrics "$metrics")

echo "== ncu: read probe launches (HBM, then mapped host at 8 and 2 CTAs per SM)"
timeout 200 "$NCU" "${common[@]}" --kernel-name regex:read_probe_kernel --launch-count 12 \
  "$BENCH" --quick --only moe >"$OUTDIR/ncu-probe.log" 2>&1
grep -E "read_probe_kernel|gpu__time|sysmem|pcie__|device_op|==ERR|==WARN" "$OUTDIR/ncu-probe.log" | head -80

echo "== ncu: first zero-copy MoE launches (gate/up, down of a batch-1 layer), with stall reasons"
timeout 240 "$NCU" "${common[@]}" --section SpeedOfLight --section Occupancy --section WarpStateStats \
  --section SchedulerStats --kernel-name regex:exl3_moe_kernel --launch-count 2 \
  "$BENCH" --quick --only moe >"$OUTDIR/ncu-moe.log" 2>&1
grep -vE "^\s*$|^    -+" "$OUTDIR/ncu-moe.log" | grep -vE "^moe |^\[" | head -150
rm -rf "$B"
