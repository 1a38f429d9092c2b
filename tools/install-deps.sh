#!/usr/bin/env bash
# Installs the Debian packages flashtier builds and tests with. Idempotent: when every package is
# already installed it only runs dpkg-query and returns in well under a second.
set -euo pipefail

# --build: only what compiling the services needs (the container images' build stage), not the
# test tools, docker or the fuzzing toolchain.
BUILD_ONLY=0
if [ "${1:-}" = "--build" ]; then BUILD_ONLY=1; fi

PACKAGES=(
  cmake ninja-build ccache pkg-config g++
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libboost-dev libboost-system-dev nlohmann-json3-dev
  libgtest-dev libgmock-dev googletest libbenchmark-dev
  libpcre2-dev
  curl jq nodejs npm
)
if [ "$BUILD_ONLY" = 1 ]; then
  PACKAGES=(cmake ninja-build ccache pkg-config g++ libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev
            protobuf-compiler libboost-dev libboost-system-dev nlohmann-json3-dev libgtest-dev libgmock-dev
            libpcre2-dev)
else
  # Deploy tests (tests/deploy): Debian's docker 20.10 client/daemon and compose 1.29, debootstrap
  # for the local base image, clang's libFuzzer for fuzz/, openssl for the gRPC TLS test.
  PACKAGES+=(docker.io docker-compose debootstrap clang libfuzzer-14-dev openssl)
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    # nodejs/npm may come from outside Debian (preinstalled node): accept a working binary.
    case "$p" in
      nodejs) command -v node >/dev/null 2>&1 && continue ;;
      npm) command -v npm >/dev/null 2>&1 && continue ;;
    esac
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
