#!/usr/bin/env bash
# Installs what is missing, builds, makes the demo model (random weights of the glm5_next
# architecture at small width, our own byte-level tokenizer, GLM-5.3's chat template) and runs it.
# Today the stack is the reference engine in one process; the services wrap it (issue 5).
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
if [ ! -f build/demo-model/model.safetensors ]; then
  ./build/bin/flashtier-demo-model --out build/demo-model
fi
exec ./build/bin/flashtier-generate --model build/demo-model --prompt "${1:-Hello! How can I help you today?}" --max-tokens "${2:-32}"
