#!/usr/bin/env bash
# Runtime stage helper: installs what collect-runtime.sh gathered into /opt/flashtier, the Debian
# packages of the libraries the binaries link, and the non-root user the services run as.
#   install-runtime.sh DIR     (DIR: collect-runtime.sh's OUT, copied into the runtime stage)
set -euo pipefail
dir="$1"
apt-get update -qq
xargs apt-get install -y -qq --no-install-recommends <"$dir/packages" >/dev/null
rm -rf /var/lib/apt/lists/*
mkdir -p /opt/flashtier
cp -a "$dir/bin" "$dir/lib" /opt/flashtier/
rm -rf "$dir"
useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin flashtier
