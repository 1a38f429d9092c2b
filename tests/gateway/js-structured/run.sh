#!/usr/bin/env bash
# Installs ajv, ajv-formats, openai and zod into this folder's node_modules (once:
# tests/support/npm-ensure.sh) and runs structured.mjs against a gateway: run.sh BASE_URL SECTION.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../support/npm-ensure.sh" "$here" zod ajv ajv-formats openai
exec node "$here/structured.mjs" "$@"
