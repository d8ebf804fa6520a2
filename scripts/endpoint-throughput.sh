#!/usr/bin/env bash
# Requests per second of a lab's endpoint beside a bare axum handler that parses the same JSON
# body, both measured with wrk in one run (128 connections, 10 s each): new keys (each request
# applies a write, committed before the answer) and replays (one key, the stored answer again).
#
#     cargo build --release --bin retrylab --example bare_endpoint && scripts/endpoint-throughput.sh
#
# ROUNDS (default 3) and SECONDS_EACH (default 10) set how many rounds and how long each wrk run;
# BIN_DIR (default target/release) where the two binaries are.
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${BIN_DIR:-target/release}"
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/examples/bare_endpoint" 127.0.0.1:3998 >/dev/null &
"${RETRYLAB_BIN:-$bin/retrylab}" --addr 127.0.0.1:3997 --db "$work/t.db" --endpoint-rate-per-s 100000000 \
  --endpoint-burst 100000000 --max-outside-keys-per-lab 100000000 --max-outside-keys 100000000 \
  >/dev/null 2>&1 &
sleep 1
lab="$(curl -s -X POST http://127.0.0.1:3997/api/labs | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
curl -s -X PUT -H 'content-type: application/json' -d '{"latency_ms": [0, 0]}' \
  "http://127.0.0.1:3997/api/labs/$lab/downstream" >/dev/null

rps() { wrk -t2 -c128 -d"${SECONDS_EACH:-10}s" -s "$1" "$2" | awk '/Requests\/sec/ {print $2}'; }
# Rounds alternate the two servers, so a slow spell on this shared machine hits both.
results=()
for round in $(seq "${ROUNDS:-3}"); do
  bare_new=$(rps scripts/wrk/new-keys.lua "http://127.0.0.1:3998/labs/$lab/downstream")
  lab_new=$(rps scripts/wrk/new-keys.lua "http://127.0.0.1:3997/labs/$lab/downstream")
  bare_replay=$(rps scripts/wrk/repeat.lua "http://127.0.0.1:3998/labs/$lab/downstream")
  lab_replay=$(rps scripts/wrk/repeat.lua "http://127.0.0.1:3997/labs/$lab/downstream")
  results+=("$bare_new,$lab_new,$bare_replay,$lab_replay")
done
python3 - "${results[@]}" <<'PY'
import statistics, sys
rounds = [tuple(map(float, r.split(","))) for r in sys.argv[1:]]
for i, (bn, ln, br, lr) in enumerate(rounds, 1):
    print(f"round {i}: new keys lab {ln:.0f}/s bare {bn:.0f}/s ({ln / bn:.2f}); "
          f"replays lab {lr:.0f}/s bare {br:.0f}/s ({lr / br:.2f})")
for name, ratios in (("new keys", [ln / bn for bn, ln, _, _ in rounds]),
                     ("replays", [lr / br for _, _, br, lr in rounds])):
    print(f"{name}: lab / bare min {min(ratios):.2f} median {statistics.median(ratios):.2f} max {max(ratios):.2f}")
PY
