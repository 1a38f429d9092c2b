#!/usr/bin/env bash
# Installs the official `openai` npm client into tests/deploy/js/node_modules (once) and runs
# stack_client.mjs: run.sh BASE_URL MODEL API_KEY.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../support/npm-ensure.sh" "$here" openai
exec node "$here/stack_client.mjs" "$@"
