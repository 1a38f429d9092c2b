#!/usr/bin/env python3
"""A PROJECTION (not a measurement) of flashtier-bench-tiers' fast-mode decode rows for an RTX 3090
on a 24-core AVX2 host with PCIe 4.0, from what the H200 run measured per component.

Inputs per row (docs/gpu-runs.md session 18 call 2, H200, `--modes fast --batches 1,4`, the cache's
admission gate on): step ms, HBM GB per step, the average per
split layer of CPU-tier experts, zero-copy experts and VRAM hits, and the cost model's rates at
the end (CPU µs per expert, hand-off µs, zero-copy µs per expert). Scaling assumptions, each
stated: HBM 936 GB/s × 0.95 (the H200 run read 4467 GB/s); zero-copy reads at the same share of
a PCIe 4.0 x16 link (25 GB/s probe) as the H200's kernel gets of its 51.4 GB/s; the CPU tier's
AVX2 kernel at K=3, batch 1 is 19.5 GB/s against avx512fp16's 38.8 GB/s on 16 threads of the same
host (docs/perf.md, EXL3 expert kernels) and scales linearly from 14 to 23 threads (it is compute-
bound at ~1/5 of RAM bandwidth); the hand-off and everything that is neither experts nor HBM
bytes (launches, host waits, attention latency) stay as measured; the same 24 GB budget gives the
same hit rate. Each layer's misses are split at the continuous optimum of the cost model."""

ROWS = [  # name, batch, step ms, HBM GB, CPU experts, zero-copy experts, hits, CPU µs, hand-off µs, zc µs
    ("decode C1 @1k", 1, 44.69, 5.53, 1.74, 3.24, 3.01, 253, 135, 194),
    ("decode C4 @1k", 4, 106.01, 8.95, 8.00, 10.57, 9.21, 240, 135, 184),
]
MOE_LAYERS = 42
HBM_H200, HBM_3090 = 4467.0, 936.0 * 0.95
ZC_SCALE = 51.4 / 25.0
CPU_SCALE = (38.8 / 19.5) * (14 / 23)
HIT_US = 20.0  # a VRAM hit on the H200 (the rate's start value; small against the rest)


def main():
    print("| run | H200 ms (measured) | RTX 3090 ms (projected) | tok/s (projected) | layer µs | CPU share of misses |")
    print("|---|---|---|---|---|---|")
    for name, b, step, hbm, cpu_n, zc_n, hits, c, h, zc in ROWS:
        misses = cpu_n + zc_n
        layer_h200 = max(h + c * cpu_n, zc * zc_n + hits * HIT_US)
        hbm_ms = hbm / HBM_H200 * 1e3
        other_ms = step - MOE_LAYERS * layer_h200 / 1e3 - hbm_ms
        c2, z2, hit2 = c * CPU_SCALE, zc * ZC_SCALE, HIT_US * HBM_H200 / HBM_3090
        k = min(max((z2 * misses + hits * hit2 - h) / (z2 + c2), 0.0), misses)
        layer = max(h + c2 * k, z2 * (misses - k) + hits * hit2)
        proj = MOE_LAYERS * layer / 1e3 + hbm / HBM_3090 * 1e3 + other_ms
        print(f"| {name} | {step:.1f} | {proj:.1f} | {b * 1e3 / proj:.1f} | {layer:.0f} | {k:.1f} of {misses:.1f} |")


if __name__ == "__main__":
    main()
