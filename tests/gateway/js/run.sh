#!/usr/bin/env bash
# Installs the official `openai` npm client into tests/gateway/js/node_modules (once; concurrent
# runs wait on a lock) and runs openai_client.mjs against a gateway: run.sh BASE_URL MODEL.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -f "$here/node_modules/openai/package.json" ]; then
  (
    flock 9
    if [ ! -f "$here/node_modules/openai/package.json" ]; then
      npm install --prefix "$here" --no-audit --no-fund --loglevel=error >&2
    fi
  ) 9>"$here/.install-lock"
fi
exec node "$here/openai_client.mjs" "$@"
