#!/usr/bin/env bash
# Runtime stage helper: installs the Debian packages that collect-runtime.sh found the binaries
# link, and the non-root user the services run as. Its own layer, before the binaries are
# copied: while the package list stays the same, a rebuild after a code change reuses it.
#   install-runtime.sh PACKAGES_FILE
set -euo pipefail
apt-get update -qq
xargs apt-get install -y -qq --no-install-recommends <"$1" >/dev/null
rm -rf /var/lib/apt/lists/* "$1"
useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin flashtier
