#!/usr/bin/env bash
# Build stage helper: gathers what a service binary needs at run time into OUT, so the runtime
# stage holds that and nothing else.
#   collect-runtime.sh OUT BINARY...
# OUT/bin/        the binaries
# OUT/lib/        shared libraries that no Debian package owns (the project's own CUDA libraries,
#                 libcudart from /usr/local/cuda when the CUDA backend was built)
# OUT/packages    the Debian packages owning every other library the binaries link (ldd), which
#                 the runtime stage installs with apt (so they get Debian's security updates)
set -euo pipefail
out="$1"; shift
mkdir -p "$out/bin" "$out/lib"
: >"$out/packages.tmp"
for bin in "$@"; do
  cp "$bin" "$out/bin/"
  ldd "$bin" | awk '/=> \// {print $3}' | while read -r lib; do
    real="$(readlink -f "$lib")"
    pkg=""
    # Debian records /lib and /usr/lib paths as shipped; ldd may name either (merged /usr).
    for p in "$lib" "$real" "${lib#/usr}" "/usr$lib" "${real#/usr}" "/usr$real"; do
      pkg="$(dpkg-query -S "$p" 2>/dev/null | head -n1 | cut -d: -f1 || true)"
      [ -n "$pkg" ] && break
    done
    if [ -n "$pkg" ]; then
      echo "$pkg" >>"$out/packages.tmp"
    else
      cp -L "$lib" "$out/lib/"
      echo "collect-runtime: $(basename "$bin") links $lib (no Debian package): copied" >&2
    fi
  done
done
# libc6 and friends are in every base image; listing them is harmless (apt keeps them).
sort -u "$out/packages.tmp" >"$out/packages"
rm "$out/packages.tmp"
echo "collect-runtime: packages: $(tr '\n' ' ' <"$out/packages")" >&2
