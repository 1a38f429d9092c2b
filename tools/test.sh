#!/usr/bin/env bash
# Installs what is missing, builds everything into build/, and runs every test.
# CI runs exactly this (.ci/run). GPU tests skip where no GPU exists.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 600
