#!/usr/bin/env bash
# Makes the local base image the Dockerfiles build FROM where no registry is reachable (CI):
# Debian bookworm by `debootstrap --variant=minbase`, imported with `docker import`.
#   deploy/docker/make-base-image.sh [TAG]        (default flashtier/debian:bookworm)
# The root filesystem tarball is kept in $FLASHTIER_CACHE (default /var/cache/flashtier), so
# later runs on the same machine import it in seconds instead of bootstrapping (~1 min) again.
# Prints the tag on stdout.
set -euo pipefail
DOCKER=/usr/bin/docker
tag="${1:-flashtier/debian:bookworm}"
cache="${FLASHTIER_CACHE:-/var/cache/flashtier}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
tarball="$cache/debootstrap-bookworm-minbase.tar"

if "$DOCKER" image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
mkdir -p "$cache"
if [ ! -s "$tarball" ]; then
  command -v debootstrap >/dev/null || { echo "make-base-image: debootstrap missing (apt-get install debootstrap)" >&2; exit 1; }
  root="$(mktemp -d /tmp/flashtier-rootfs.XXXXXX)"
  trap 'rm -rf "$root"' EXIT
  echo "make-base-image: debootstrap --variant=minbase bookworm ($mirror)" >&2
  debootstrap --variant=minbase bookworm "$root" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { tail -n 20 "$cache/debootstrap.log" >&2; exit 1; }
  # Smaller image: no package lists or caches (apt-get update runs in every Dockerfile anyway).
  rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
  printf 'deb %s bookworm main\ndeb %s bookworm-updates main\n' "$mirror" "$mirror" >"$root/etc/apt/sources.list"
  tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
  mv "$tarball.tmp" "$tarball"
fi
"$DOCKER" import --change 'CMD ["/bin/bash"]' "$tarball" "$tag" >/dev/null
echo "$tag"
