#!/usr/bin/env bash
# Builds flashtier's images from the repository: the build image (one compile of every service),
# then flashtier/gateway, flashtier/gpu-worker and flashtier/cpu-expert-worker.
#   deploy/docker/build-images.sh [--base IMAGE] [--runtime IMAGE] [--cuda IMAGE] [--tag TAG]
# --base     build stage base (default debian:bookworm); --local-base: the debootstrap image of
#            make-base-image.sh (made if missing), for machines that reach no registry (CI)
# --runtime  runtime stage base (default debian:bookworm-slim; with --local-base the same image)
# --cuda     an image with a CUDA toolkit in /usr/local/cuda, to build the CUDA backend
# --tag      image tag (default latest)
# Uses Debian's docker.io client (/usr/bin/docker, 20.10) with BuildKit, which is built in.
set -euo pipefail
cd "$(dirname "$0")/../.."
DOCKER=/usr/bin/docker
base=debian:bookworm runtime="" cuda="" tag=latest
while [ $# -gt 0 ]; do
  case "$1" in
    --base) base="$2"; shift 2 ;;
    --local-base) base="$(deploy/docker/make-base-image.sh)"; shift ;;
    --runtime) runtime="$2"; shift 2 ;;
    --cuda) cuda="$2"; shift 2 ;;
    --tag) tag="$2"; shift 2 ;;
    *) echo "usage: $0 [--base IMAGE | --local-base] [--runtime IMAGE] [--cuda IMAGE] [--tag TAG]" >&2; exit 2 ;;
  esac
done
if [ -z "$runtime" ]; then
  if [ "$base" = debian:bookworm ]; then runtime=debian:bookworm-slim; else runtime="$base"; fi
fi
export DOCKER_BUILDKIT=1
log="${FLASHTIER_BUILD_LOG:-/tmp/flashtier-build-images.log}"
: >"$log"
# Quiet on success; the build's own output (plain progress) goes to $log and its end is shown
# when a step fails.
build() {
  if ! "$DOCKER" build --progress=plain "$@" >>"$log" 2>&1; then
    echo "build-images: docker build $* failed; the end of $log:" >&2
    tail -n 40 "$log" >&2
    exit 1
  fi
}
build_args=(--build-arg "BASE_IMAGE=$base" --build-arg "CUDA_IMAGE=${cuda:-$base}")
t0=$(date +%s)
build -f deploy/docker/Dockerfile.build "${build_args[@]}" -t "flashtier/build:$tag" .
echo "build-images: flashtier/build:$tag in $(( $(date +%s) - t0 )) s" >&2
for svc in gateway gpu-worker cpu-expert-worker; do
  t1=$(date +%s)
  build -f "deploy/docker/Dockerfile.$svc" --build-arg "BUILD_IMAGE=flashtier/build:$tag" \
    --build-arg "RUNTIME_IMAGE=$runtime" -t "flashtier/$svc:$tag" .
  echo "build-images: flashtier/$svc:$tag in $(( $(date +%s) - t1 )) s" >&2
done
echo "build-images: all images in $(( $(date +%s) - t0 )) s" >&2
