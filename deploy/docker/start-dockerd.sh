#!/usr/bin/env bash
# Starts dockerd in the background when no daemon answers (CI and dev machines have no init
# system to start it), then waits until it does. Idempotent; prints nothing when one already runs.
#   deploy/docker/start-dockerd.sh [timeout_s]
# Uses Debian's docker.io: /usr/bin/docker (20.10) and /usr/sbin/dockerd with default flags.
set -euo pipefail
DOCKER=/usr/bin/docker
timeout_s="${1:-60}"
if "$DOCKER" info >/dev/null 2>&1; then exit 0; fi
if [ ! -x /usr/sbin/dockerd ]; then
  echo "start-dockerd: /usr/sbin/dockerd missing (apt-get install docker.io)" >&2
  exit 1
fi
log=/var/log/flashtier-dockerd.log
echo "start-dockerd: starting dockerd (log $log)" >&2
# setsid: the daemon outlives this script and the test that called it; it is a system service.
setsid /usr/sbin/dockerd >"$log" 2>&1 < /dev/null &
for _ in $(seq 1 $((timeout_s * 4))); do
  if "$DOCKER" info >/dev/null 2>&1; then exit 0; fi
  sleep 0.25
done
echo "start-dockerd: dockerd did not answer within ${timeout_s}s; last lines of $log:" >&2
tail -n 20 "$log" >&2 || true
exit 1
