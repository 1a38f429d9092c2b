# Shared by the compose scripts (compose_test.sh, measure_shm_survival.sh): a private compose
# project on a free loopback port, serving the demo model, with helpers to poll it and to crash
# a service's container. Source it after `cd` to the source tree with $bin set; it sets a trap
# that takes the project down and removes its files.
DOCKER=/usr/bin/docker
t_start=$(date +%s)
say() { echo "compose-test: [$(( $(date +%s) - t_start ))s] $*"; }
fail() { echo "compose-test: FAILED: $*"; exit 1; }

work="$(mktemp -d /tmp/flashtier-compose.XXXXXX)"
project="ftci$$"
port="$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
key="ci-key-$$"
export MODEL_DIR="$work/demo-model" SERVED_MODEL_NAME=demo-model PORT="$port" HOST_ADDR=127.0.0.1
# (batch 10: the 8 streams of a crash test and the chat that times the recovery all run at once)
export API_KEY_FILE="$work/api-key" EXPERT_SHM_SIZE=1g THREADS=1 MAX_BATCH_SIZE=10 CONTEXT_SIZE=4096
export DRAIN_TIMEOUT=5 STOP_GRACE=10s TAG=latest
compose_files=(-f deploy/docker-compose.yml)  # a script may append overrides
dc() { docker-compose -p "$project" "${compose_files[@]}" "$@"; }
prepare_inputs() {  # the demo model and the API key file, readable by the services' uid 10001
  "$bin/flashtier-demo-model" --out "$MODEL_DIR" >/dev/null
  printf '%s\n' "$key" >"$API_KEY_FILE"
  chmod -R a+rX "$work"
}
cleanup() {
  local rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 77 ]; then
    echo "compose-test: --- docker-compose ps / logs (last 30 lines per service) ---"
    dc ps 2>&1 || true
    dc logs --no-color --tail 30 2>&1 || true
  fi
  dc down -v --remove-orphans -t 5 >/dev/null 2>&1 || true
  rm -rf "$work"
}
trap cleanup EXIT

base="http://127.0.0.1:$port"
health() { curl -s -o /dev/null -w '%{http_code}' --max-time 3 "$base/health" || true; }
wait_health() {  # wait_health TIMEOUT_S: until /health answers 200
  local until=$(( $(date +%s) + $1 ))
  while [ "$(date +%s)" -lt "$until" ]; do
    [ "$(health)" = 200 ] && return 0
    sleep 0.2
  done
  return 1
}
chat() {  # one greedy chat through the published port; prints the HTTP status
  curl -s -o "$work/last.json" -w '%{http_code}' --max-time 30 "$base/v1/chat/completions" \
    -H "Authorization: Bearer $key" -H 'Content-Type: application/json' \
    -d '{"model":"demo-model","messages":[{"role":"user","content":"hi"}],"max_tokens":4,"temperature":0}' || true
}
cid_of() { dc ps -q "$1" | head -n 1; }
restarts() { "$DOCKER" inspect -f '{{.RestartCount}}' "$1"; }
crash() {  # crash SERVICE: kills its main process from outside; returns once docker restarted it
  local svc="$1" cid pid before until
  cid="$(cid_of "$svc")"
  pid="$("$DOCKER" inspect -f '{{.State.Pid}}' "$cid")"
  before="$(restarts "$cid")"
  kill -9 "$pid"
  until=$(( $(date +%s) + 60 ))
  while [ "$(restarts "$cid")" = "$before" ] || [ "$("$DOCKER" inspect -f '{{.State.Running}}' "$cid")" != true ]; do
    [ "$(date +%s)" -lt "$until" ] || fail "$svc was not restarted within 60 s of its SIGKILL"
    sleep 0.1
  done
}
