#!/usr/bin/env bash
# Measures which layout of the compose stack keeps the expert segment through which restart
# (not a CI test: docs/reliability.md has its table). For each layout and each victim: a fresh
# stack, one chat, SIGKILL of the victim's process, then whether chats work again (and after how
# long) and whether the cpu-expert-worker re-attached to its segment or rebuilt it.
#   tests/deploy/measure_shm_survival.sh BIN_DIR [LAYOUT...]   (images built first: build-images.sh)
# Layouts: holder (deploy/docker-compose.yml: shm-holder owns the IPC namespace), owner (the old
# layout: the cpu-expert-worker owns it, the gpu-worker joins), volume (a tmpfs named volume
# mounted at /dev/shm in both workers).
set -euo pipefail
bin="$1"
shift
layouts=" ${*:-holder owner volume} "
cd "$(dirname "$0")/../.."
deploy/docker/start-dockerd.sh 60
source tests/deploy/compose_lib.sh
prepare_inputs
cat >"$work/owner.yml" <<'YML'
services:
  cpu-expert-worker: {ipc: shareable, shm_size: 1g}
  gpu-worker: {ipc: "service:cpu-expert-worker"}
YML
cat >"$work/volume.yml" <<'YML'
services:
  cpu-expert-worker: {ipc: private, volumes: ["expert-shm:/dev/shm"]}
  gpu-worker: {ipc: private, volumes: ["expert-shm:/dev/shm"]}
volumes:
  expert-shm: {driver_opts: {type: tmpfs, device: tmpfs, o: "size=1g,mode=1777"}}
YML
trial() {  # trial LAYOUT VICTIM...
  local layout="$1"; shift
  [[ "$layouts" == *" $layout "* ]] || return 0
  compose_files=(-f deploy/docker-compose.yml)
  [ "$layout" = holder ] || compose_files+=(-f "$work/$layout.yml")
  dc up -d >/dev/null 2>&1
  wait_health 120 || fail "$layout: not healthy"
  [ "$(chat)" = 200 ] || fail "$layout: first chat"
  local victim t0 ok status
  for victim in "$@"; do
    t0=$(date +%s%N)
    crash "$victim"
    ok=no
    for _ in $(seq 1 300); do
      status="$(chat)"
      if [ "$status" = 200 ]; then ok="yes after $(( ($(date +%s%N) - t0) / 1000000 )) ms"; break; fi
      sleep 0.2
    done
  done
  local log builds reattach
  log="$("$DOCKER" logs "$(cid_of cpu-expert-worker)" 2>&1)"
  builds="$(grep -c 'building segment' <<<"$log" || true)"
  reattach="$(grep -c 're-attached to segment' <<<"$log" || true)"
  echo "survival: layout=$layout killed=$(IFS=+; echo "$*") chats_again=$ok segment_builds=$builds re_attaches=$reattach"
  dc down -v --remove-orphans -t 5 >/dev/null 2>&1
}
trial holder cpu-expert-worker
trial holder gpu-worker
trial holder gpu-worker cpu-expert-worker
trial holder shm-holder
trial holder shm-holder cpu-expert-worker
trial owner cpu-expert-worker
trial owner gpu-worker
trial volume cpu-expert-worker
trial volume gpu-worker cpu-expert-worker
