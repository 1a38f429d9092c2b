#!/usr/bin/env bash
# Installs the official `@anthropic-ai/sdk` npm client into tests/gateway/anthropic_js/node_modules
# (once: tests/support/npm-ensure.sh) and runs one of its scripts against a gateway:
# run.sh SCRIPT BASE_URL MODEL [ARGS...] (SCRIPT: scripted.mjs or demo.mjs).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../support/npm-ensure.sh" "$here" @anthropic-ai/sdk
script="$1"
shift
exec node "$here/$script" "$@"
