#!/usr/bin/env bash
# Makes an image holding this machine's CUDA toolkit at /usr/local/cuda, for
# `build-images.sh --cuda IMAGE` where no registry (nvidia/cuda:*-devel) is reachable: the build
# stage then compiles the CUDA backend with it and the gpu-worker image carries libcudart, cuBLAS
# and the project's CUDA libraries (the driver's libcuda comes from the host at run time).
#   deploy/docker/make-cuda-image.sh [TAG]     (default flashtier/cuda-local:<toolkit version>)
# The whole toolkit tree (layouts differ: lib64 may be a link to lib, targets/ may hold the libraries).
# Prints the tag on stdout. Run from the repository (it makes the local base image if missing).
set -euo pipefail
cd "$(dirname "$0")/../.."
DOCKER=/usr/bin/docker
cuda="${CUDA_HOME:-/usr/local/cuda}"
[ -x "$cuda/bin/nvcc" ] || { echo "make-cuda-image: no nvcc in $cuda/bin" >&2; exit 1; }
version="$("$cuda/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"
tag="${1:-flashtier/cuda-local:$version}"
if "$DOCKER" image inspect "$tag" >/dev/null 2>&1; then
  echo "$tag"
  exit 0
fi
real="$(readlink -f "$cuda")"
# The tree as /usr/local/cuda whatever its real name (cuda-13.0 behind a symlink; the rename
# leaves link targets alone: they are relative), imported as a
# files-only layer, then put on the local Debian base: the build stage's `RUN` needs a shell.
base="$(deploy/docker/make-base-image.sh)"
tar -C "$real" --numeric-owner --transform "flags=rSH;s,^\.,usr/local/cuda," -cf - . | "$DOCKER" import - "$tag-files" >/dev/null
printf 'FROM %s\nCOPY --from=%s /usr/local/cuda /usr/local/cuda\n' "$base" "$tag-files" |
  DOCKER_BUILDKIT=1 "$DOCKER" build -q -t "$tag" - >/dev/null
"$DOCKER" rmi "$tag-files" >/dev/null
echo "$tag"
