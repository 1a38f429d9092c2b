#!/usr/bin/env bash
# Installs the official `openai` npm client into tests/gateway/js/node_modules (once:
# tests/support/npm-ensure.sh) and runs openai_client.mjs against a gateway: run.sh BASE_URL MODEL.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../support/npm-ensure.sh" "$here" openai
exec node "$here/openai_client.mjs" "$@"
