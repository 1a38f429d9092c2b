#!/usr/bin/env bash
# Installs the official `@anthropic-ai/sdk` npm client into tests/gateway/anthropic_js/node_modules
# (once; concurrent runs wait on a lock) and runs one of its scripts against a gateway:
# run.sh SCRIPT BASE_URL MODEL [ARGS...] (SCRIPT: scripted.mjs or demo.mjs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -f "$here/node_modules/@anthropic-ai/sdk/package.json" ]; then
  (
    flock 9
    if [ ! -f "$here/node_modules/@anthropic-ai/sdk/package.json" ]; then
      npm install --prefix "$here" --no-audit --no-fund --loglevel=error >&2
    fi
  ) 9>"$here/.install-lock"
fi
script="$1"
shift
exec node "$here/$script" "$@"
