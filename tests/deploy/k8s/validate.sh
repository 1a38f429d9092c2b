#!/usr/bin/env bash
# Installs kubernetes-models + yaml into tests/deploy/k8s/node_modules (once), shows that broken
# manifests are refused, then validates deploy/k8s (or DIR): validate.sh [DIR].
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../support/npm-ensure.sh" "$here" kubernetes-models yaml
node "$here/validate.mjs" --self-test
node "$here/validate.mjs" "${1:-$here/../../../deploy/k8s}"
