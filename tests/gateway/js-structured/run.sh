#!/usr/bin/env bash
# Installs ajv, ajv-formats, openai and zod into this folder's node_modules (once; concurrent runs
# wait on a lock) and runs structured.mjs against a gateway: run.sh BASE_URL SECTION.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
if [ ! -f "$here/node_modules/zod/package.json" ] || [ ! -f "$here/node_modules/ajv-formats/package.json" ]; then
  (
    flock 9
    if [ ! -f "$here/node_modules/zod/package.json" ] || [ ! -f "$here/node_modules/ajv-formats/package.json" ]; then
      npm install --prefix "$here" --no-audit --no-fund --loglevel=error >&2
    fi
  ) 9>"$here/.install-lock"
fi
exec node "$here/structured.mjs" "$@"
