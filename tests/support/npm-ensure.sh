#!/usr/bin/env bash
# Installs the npm packages of DIR/package.json into DIR/node_modules once; concurrent callers wait
# on a lock. Used by the JS test tools' run scripts.
#   npm-ensure.sh DIR PACKAGE...
# "Installed" is a stamp written after npm finished (holding package.json's hash), not the
# presence of the packages: a caller that only looked for them could start while another one's
# npm install is still writing node_modules (seen: a ctest -j2 run failing in 2 s).
set -euo pipefail
dir="$1"; shift
stamp="$dir/node_modules/.flashtier-installed"
want="$(sha256sum "$dir/package.json" | cut -d' ' -f1)"
installed() {
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ] || return 1
  for p in "$@"; do [ -f "$dir/node_modules/$p/package.json" ] || return 1; done
}
installed "$@" && exit 0
(
  flock 9
  if ! installed "$@"; then
    npm install --prefix "$dir" --no-audit --no-fund --loglevel=error >&2
    echo "$want" >"$stamp"
  fi
) 9>"$dir/.install-lock"
