#!/usr/bin/env bash
# Installs kubernetes-models + yaml into tests/deploy/k8s/node_modules (once), shows that broken
# manifests are refused, then validates deploy/k8s (or DIR) and its overlays: validate.sh [DIR].
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
"$here/../../support/npm-ensure.sh" "$here" kubernetes-models yaml
node "$here/validate.mjs" --self-test
# DIR and every overlay below it (a directory with its own kustomization.yaml).
root="${1:-$here/../../../deploy/k8s}"
status=0
while IFS= read -r k; do
  d=$(dirname "$k")
  echo "== $d"
  node "$here/validate.mjs" "$d" || status=1
done < <(find "$root" -name kustomization.yaml | sort)
exit $status
