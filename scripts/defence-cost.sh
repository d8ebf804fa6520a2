#!/usr/bin/env bash
# What the overloaded endpoint's defences cost per request: new keys per second against a lab
# in overloaded mode with no defence, and in turns against one with each defence on (the
# deadline drop, CoDel and retries first together; the AIMD limit; the Gradient2 limit;
# admission control), all on one server, measured with wrk (128 connections). Each
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
base='"mode": "overloaded", "capacity": 10000, "queue": 0, "latency_ms": [0, 0]'
plain="$(lab "{$base}")"
# Each defence beside no defence: its name, then its lab. The adaptive limits start and stay
# far above the 128 connections (nothing is refused), and admission control sees only
# successes (it refuses nothing): what is measured is the bookkeeping each request costs.
defended=(
  "deadline, codel, retries first" "$(lab "{$base, \"defences\": {\"deadline\": true, \"queue\": \"codel\", \"retries_first\": true}}")"
  "aimd limit" "$(lab "{$base, \"defences\": {\"limit\": {\"kind\": \"aimd\", \"initial_limit\": 1000, \"max_limit\": 1000}}}")"
  "gradient2 limit" "$(lab "{$base, \"defences\": {\"limit\": {\"kind\": \"gradient2\", \"initial_limit\": 1000, \"max_limit\": 1000}}}")"
  "admission control" "$(lab "{$base, \"defences\": {\"admission\": {}}}")"
)

rps() { wrk -t2 -c128 -d"${SECONDS_EACH:-10}s" -s scripts/wrk/new-keys-hints.lua "$1" | awk '/Requests\/sec/ {print $2}'; }
results=()
for round in $(seq "${ROUNDS:-3}"); do
  for ((i = 0; i < ${#defended[@]}; i += 2)); do
    # No defence and this one in turns, so each ratio is of two runs a few seconds apart.
    p=$(rps "http://127.0.0.1:3996/labs/$plain/downstream")
    d=$(rps "http://127.0.0.1:3996/labs/${defended[i + 1]}/downstream")
    results+=("$round|${defended[i]}|$p|$d")
  done
done
python3 - "${results[@]}" <<'PY'
import statistics, sys
ratios = {}
for line in sys.argv[1:]:
    round_, name, p, d = line.split("|")
    p, d = float(p), float(d)
    print(f"round {round_}: no defence {p:.0f}/s, {name} {d:.0f}/s ({d / p:.2f})")
    ratios.setdefault(name, []).append(d / p)
print("| defence | over no defence, min / median / max |")
print("| --- | --- |")
for name, r in ratios.items():
    print(f"| {name} | {min(r):.2f} / {statistics.median(r):.2f} / {max(r):.2f} |")
PY
