#!/usr/bin/env bash
# What the overloaded endpoint's defences cost per request: new keys per second against a lab
# in overloaded mode with no defence, and against one with the deadline drop, CoDel and
# retries first on, both on one server, measured with wrk in turns (128 connections). Each
# request says how long its client waits and that it is a first attempt, so the defences read
# and check every one; the work takes 0 ms and there are workers for all, so nothing waits or
# is dropped, and what differs is the defences' own cost.
#
#     cargo build --release --bin retrylab && scripts/defence-cost.sh
#
# ROUNDS (default 3), SECONDS_EACH (default 10), RETRYLAB_BIN (default target/release/retrylab).
set -euo pipefail
cd "$(dirname "$0")/.."
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

"${RETRYLAB_BIN:-target/release/retrylab}" --addr 127.0.0.1:3996 --db "$work/t.db" \
  --endpoint-rate-per-s 100000000 --endpoint-burst 100000000 \
  --max-outside-keys-per-lab 100000000 --max-outside-keys 100000000 >/dev/null 2>&1 &
sleep 1
lab() {
  local id
  id="$(curl -s -X POST http://127.0.0.1:3996/api/labs | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
  curl -sf -X PUT -H 'content-type: application/json' -d "$1" \
    "http://127.0.0.1:3996/api/labs/$id/downstream" >/dev/null
  echo "$id"
}
plain="$(lab '{"mode": "overloaded", "capacity": 10000, "queue": 0, "latency_ms": [0, 0]}')"
defended="$(lab '{"mode": "overloaded", "capacity": 10000, "queue": 0, "latency_ms": [0, 0],
  "defences": {"deadline": true, "queue": "codel", "retries_first": true}}')"

rps() { wrk -t2 -c128 -d"${SECONDS_EACH:-10}s" -s scripts/wrk/new-keys-hints.lua "$1" | awk '/Requests\/sec/ {print $2}'; }
results=()
for round in $(seq "${ROUNDS:-3}"); do
  p=$(rps "http://127.0.0.1:3996/labs/$plain/downstream")
  d=$(rps "http://127.0.0.1:3996/labs/$defended/downstream")
  results+=("$p,$d")
done
python3 - "${results[@]}" <<'PY'
import statistics, sys
rounds = [tuple(map(float, r.split(","))) for r in sys.argv[1:]]
for i, (p, d) in enumerate(rounds, 1):
    print(f"round {i}: no defence {p:.0f}/s, defences on {d:.0f}/s ({d / p:.2f})")
ratios = [d / p for p, d in rounds]
print(f"defences on / none: min {min(ratios):.2f} median {statistics.median(ratios):.2f} max {max(ratios):.2f}")
PY
