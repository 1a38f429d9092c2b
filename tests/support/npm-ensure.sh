#!/usr/bin/env bash
# Installs the npm packages of DIR/package.json into DIR/node_modules unless every named package
# is there already; concurrent callers wait on a lock. Used by the JS test tools' run scripts.
#   npm-ensure.sh DIR PACKAGE...
set -euo pipefail
dir="$1"; shift
have() { for p in "$@"; do [ -f "$dir/node_modules/$p/package.json" ] || return 1; done; }
have "$@" && exit 0
(
  flock 9
  have "$@" || npm install --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
) 9>"$dir/.install-lock"
