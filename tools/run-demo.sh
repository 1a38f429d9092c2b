#!/usr/bin/env bash
# Installs what is missing, builds, makes the demo model (random weights of the glm5_next
# architecture at small width, our own byte-level tokenizer with GLM's special tokens, GLM-5.3's
# chat template) and starts the whole stack on it: cpu-expert-worker, gpu-worker and gateway.
# The OpenAI API is then at http://127.0.0.1:${PORT:-8000}/v1 (model name "demo-model").
# Point MODEL at a real GLM-5.3-Flash folder to serve that instead.
set -euo pipefail
cd "$(dirname "$0")/.."
./tools/install-deps.sh
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)"
MODEL="${MODEL:-build/demo-model}"
if [ "$MODEL" = build/demo-model ] && [ ! -f build/demo-model/model.safetensors ]; then
  ./build/bin/flashtier-demo-model --out build/demo-model
fi
PORT="${PORT:-8000}"
cat >&2 <<MSG
Starting flashtier on $MODEL. Once it prints "ready", try:
  curl -s http://127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \\
    -d '{"model": "$(basename "$MODEL")", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 32}'
MSG
exec ./build/bin/flashtier-local --model "$MODEL" --port "$PORT" "$@"
