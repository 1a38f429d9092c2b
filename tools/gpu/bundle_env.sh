# shellcheck shell=bash disable=SC2034
# Sourced by the GPU machine's profiling scripts: ROOT (the checkout), OUTDIR (logs: $OUT or
# .gpu-bundle/out), B (the bundle of `run-checks.sh pack`, unpacked into a temporary folder, its
# libraries on LD_LIBRARY_PATH) and NCU (Nsight Compute's command line, empty when absent).
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUTDIR=${OUT:-$ROOT/.gpu-bundle/out}
mkdir -p "$OUTDIR"
B=$(mktemp -d)
tar -C "$B" -xJf "$ROOT/.gpu-bundle/bundle.tar.xz"
export LD_LIBRARY_PATH=$B/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
