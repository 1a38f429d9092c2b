#!/usr/bin/env bash
# The compose stack for real: builds the images from a debootstrap base, brings
# deploy/docker-compose.yml up on the demo model, runs the `openai` npm client against it, kills
# each service's container (SIGKILL from outside, as a crash) under 8 running streams and checks
# that every stream ends with [DONE] (a killed gateway may only cut them), that docker brings it
# back and the next request succeeds (the cpu-expert-worker re-attaching to its segment, not
# reloading it), scales the gpu-worker and the gateway to 2 and sees both replicas serve, and
# takes the stack down with nothing left behind.
#   compose_test.sh SOURCE_DIR BIN_DIR
# Exit 77 (ctest: skipped) where docker cannot run: not root, Debian's docker.io/docker-compose
# missing, or no daemon starts. FLASHTIER_DOCKER_TESTS=0 skips it too.
set -euo pipefail
src="$1"
bin="$2"
cd "$src"
DOCKER=/usr/bin/docker
skip() { echo "compose-test: SKIPPED: $*"; exit 77; }
[ "${FLASHTIER_DOCKER_TESTS:-1}" != 0 ] || skip "FLASHTIER_DOCKER_TESTS=0"
[ "$(id -u)" = 0 ] || skip "needs root (dockerd)"
[ -x "$DOCKER" ] && command -v docker-compose >/dev/null || skip "Debian's docker.io and docker-compose are not installed"
deploy/docker/start-dockerd.sh 60 || skip "no docker daemon could be started"

source tests/deploy/compose_lib.sh

# --- images -----------------------------------------------------------------------------------
t0=$(date +%s)
deploy/docker/build-images.sh --local-base 2>&1 | sed 's/^/compose-test: /'
say "images built in $(( $(date +%s) - t0 )) s"

# --- the stack ----------------------------------------------------------------------------------
prepare_inputs
t0=$(date +%s)
dc up -d 2>&1 | sed 's/^/compose-test: /'

wait_health 180 || fail "the stack's /health did not answer 200 within 180 s"
say "stack up and healthy in $(( $(date +%s) - t0 )) s"

# The API key is a compose secret (a file), not a flag.
[ "$(curl -s -o /dev/null -w '%{http_code}' "$base/v1/models")" = 401 ] || fail "a request without the API key was not refused"
gateway_cmdline="$(dc exec -T gateway sh -c 'cat /proc/1/cmdline' | tr '\0' ' ')"
[[ "$gateway_cmdline" != *"$key"* ]] || fail "the API key is on the gateway's command line: $gateway_cmdline"
[[ "$gateway_cmdline" == *"--api-key-file /run/secrets/api_key"* ]] || fail "the gateway does not read its key file: $gateway_cmdline"

# --- the openai npm client ------------------------------------------------------------------------
out="$(tests/deploy/js/run.sh "$base/v1" demo-model "$key" 2>&1)" || fail "openai client: $out"
say "openai client: $(echo "$out" | tail -n 1)"

# --- crashes: SIGKILL each service's process, docker restarts it ------------------------------------
start_streams() {  # 8 streaming completions in the background, each into $work/streamN.{out,rc}
  local i
  for i in 1 2 3 4 5 6 7 8; do
    ( curl -sN --max-time 90 "$base/v1/completions" -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
        -d '{"model":"demo-model","prompt":"Once upon a time","max_tokens":3000,"temperature":0,"ignore_eos":true,"stream":true}' \
        >"$work/stream$i.out" 2>/dev/null
      echo $? >"$work/stream$i.rc" ) &
  done
  local until=$(( $(date +%s) + 60 ))
  for i in 1 2 3 4 5 6 7 8; do  # until every stream has its first event
    until grep -q '^data: ' "$work/stream$i.out" 2>/dev/null; do
      [ "$(date +%s)" -lt "$until" ] || fail "stream $i got no event within 60 s"
      sleep 0.05
    done
  done
}
judge_streams() {  # judge_streams SERVICE: how the 8 streams ended (into $stream_ends); only a killed gateway may cut them
  local svc="$1" i rc last complete=0 errored=0 cut=0
  for i in 1 2 3 4 5 6 7 8; do
    rc="$(cat "$work/stream$i.rc")"
    last="$(grep '^data: ' "$work/stream$i.out" | tail -n 1)"
    if [ "$rc" = 0 ] && [ "$last" = "data: [DONE]" ]; then
      if grep -q '^data: {"error"' "$work/stream$i.out"; then errored=$((errored + 1)); else complete=$((complete + 1)); fi
    elif [ "$svc" = gateway ] && [ "$last" != "data: [DONE]" ]; then
      # A killed gateway can only drop its connections. curl says so (exit 18/52/56) on a direct
      # connection; through docker's port proxy it may exit 0 on the proxy's clean close.
      cut=$((cut + 1))
    else
      fail "killing $svc: stream $i ended badly (curl exit $rc, last event: ${last:0:120})"
    fi
  done
  stream_ends="$complete complete, $errored error+[DONE], $cut cut"
}
recover() {  # recover SERVICE: crash it under 8 running streams, then time until a chat succeeds
  local svc="$1" t0 until status
  start_streams
  t0=$(date +%s%N)
  crash "$svc"
  until=$(( $(date +%s) + 120 ))
  while :; do
    status="$(chat)"
    [ "$status" = 200 ] && break
    [ "$(date +%s)" -lt "$until" ] || fail "no successful chat within 120 s of killing $svc (last status $status: $(cat "$work/last.json" 2>/dev/null))"
    sleep 0.2
  done
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  wait  # the 8 streams
  judge_streams "$svc"
  say "killed $svc (SIGKILL) under 8 streams: restarted, next chat 200 after $ms ms; streams: $stream_ends"
}
[ "$(chat)" = 200 ] || fail "chat before the crashes: $(cat "$work/last.json")"
segments_before="$(dc exec -T cpu-expert-worker flashtier-shm list --json)"
recover cpu-expert-worker
# (The log in a variable: `docker logs | grep -q` under pipefail fails when grep stops reading early.)
expert_log="$("$DOCKER" logs "$(cid_of cpu-expert-worker)" 2>&1)"
grep -q "re-attached to segment flashtier-experts" <<<"$expert_log" ||
  fail "the restarted cpu-expert-worker did not re-attach to its segment: $(tail -n 5 <<<"$expert_log")"
say "cpu-expert-worker: $(grep -o 're-attached to segment [^,]*' <<<"$expert_log" | tail -n 1)"
recover gpu-worker
recover gateway
segments_after="$(dc exec -T cpu-expert-worker flashtier-shm list --json)"
python3 - "$segments_before" "$segments_after" <<'EOF' || fail "the shared-memory objects changed across the restarts"
import json, sys
before, after = (json.loads(a) for a in sys.argv[1:3])
key = lambda objs: sorted((o["name"], o["kind"], o["bytes"]) for o in objs)
assert any(o["kind"] == "expert-segment" and o["complete"] for o in before), before
assert key(before) == key(after), (before, after)
EOF

# --- scaling ------------------------------------------------------------------------------------------
dc up -d --no-recreate --scale gpu-worker=2 2>&1 | sed 's/^/compose-test: /'
until=$(( $(date +%s) + 120 ))
while [ "$(curl -s "$base/metrics" | grep -c '^flashtier_worker_up{.*} 1$')" != 2 ]; do
  [ "$(date +%s)" -lt "$until" ] || fail "the gateway did not find 2 SERVING gpu-workers: $(curl -s "$base/metrics" | grep '^flashtier_worker_up')"
  sleep 0.5
done
for _ in 1 2 3 4 5 6; do [ "$(chat)" = 200 ] || fail "chat with 2 gpu-workers: $(cat "$work/last.json")"; done
served="$(curl -s "$base/metrics" | grep '^flashtier_worker_streams_total{' | awk '$2 > 0' | wc -l)"
[ "$served" = 2 ] || fail "not both gpu-workers served: $(curl -s "$base/metrics" | grep '^flashtier_worker_streams_total')"
say "--scale gpu-worker=2: both found through DNS and both served"

dc up -d --no-recreate --scale gpu-worker=2 --scale gateway=2 2>&1 | sed 's/^/compose-test: /'
until=$(( $(date +%s) + 120 ))
instances=""
while :; do
  for _ in $(seq 1 10); do
    instances+="$(curl -s -o /dev/null -D - "$base/health" | tr -d '\r' | sed -n 's/^X-Flashtier-Instance: //ip')"$'\n'
  done
  [ "$(echo "$instances" | sed '/^$/d' | sort -u | wc -l)" -ge 2 ] && break
  [ "$(date +%s)" -lt "$until" ] || fail "only one gateway answered on port $port: $(echo "$instances" | sort | uniq -c)"
  sleep 0.5
done
say "--scale gateway=2: $(echo "$instances" | sed '/^$/d' | sort -u | wc -l) gateways answer on one port"

# --- down: nothing left ------------------------------------------------------------------------------
dc down -v --remove-orphans -t 10 2>&1 | sed 's/^/compose-test: /'
left="$("$DOCKER" ps -aq --filter "label=com.docker.compose.project=$project")"
[ -z "$left" ] || fail "containers left after down: $left"
left="$("$DOCKER" network ls -q --filter "label=com.docker.compose.project=$project")"
[ -z "$left" ] || fail "networks left after down: $left"
left="$("$DOCKER" volume ls -q --filter "label=com.docker.compose.project=$project")"
[ -z "$left" ] || fail "volumes left after down: $left"
say "down: no containers, networks or volumes left; PASSED in $(( $(date +%s) - t_start )) s"
