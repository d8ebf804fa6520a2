#!/usr/bin/env bash
# Requests per second of a lab's endpoint beside a bare axum handler that parses the same JSON
# body, both measured with wrk in one run (128 connections, 10 s each): new keys (each request
# applies a write, committed before the answer) and replays (one key, the stored answer again).
#
#     cargo build --release --bin retrylab --example bare_endpoint && scripts/endpoint-throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bin=target/release
work="$(mktemp -d)"
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

"$bin/examples/bare_endpoint" 127.0.0.1:3998 >/dev/null &
"$bin/retrylab" --addr 127.0.0.1:3997 --db "$work/t.db" --endpoint-rate-per-s 100000000 \
  --endpoint-burst 100000000 --max-outside-keys-per-lab 100000000 --max-outside-keys 100000000 \
  >/dev/null 2>&1 &
sleep 1
lab="$(curl -s -X POST http://127.0.0.1:3997/api/labs | python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')"
curl -s -X PUT -H 'content-type: application/json' -d '{"latency_ms": [0, 0]}' \
  "http://127.0.0.1:3997/api/labs/$lab/downstream" >/dev/null

cat > "$work/new.lua" <<'LUA'
local counter = 0
request = function()
  counter = counter + 1
  local key = string.format("k-%d-%d-%d", math.random(1, 1000000000), os.time(), counter)
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = key},
    '{"message_id": 1, "lab": "x"}')
end
LUA
cat > "$work/replay.lua" <<'LUA'
request = function()
  return wrk.format("POST", nil, {["Content-Type"] = "application/json", ["Idempotency-Key"] = "same-key"},
    '{"message_id": 1, "lab": "x"}')
end
LUA

rps() { wrk -t2 -c128 -d10s -s "$1" "$2" | awk '/Requests\/sec/ {print $2}'; }
bare_new=$(rps "$work/new.lua" "http://127.0.0.1:3998/labs/$lab/downstream")
lab_new=$(rps "$work/new.lua" "http://127.0.0.1:3997/labs/$lab/downstream")
bare_replay=$(rps "$work/replay.lua" "http://127.0.0.1:3998/labs/$lab/downstream")
lab_replay=$(rps "$work/replay.lua" "http://127.0.0.1:3997/labs/$lab/downstream")
python3 - "$bare_new" "$lab_new" "$bare_replay" "$lab_replay" <<'PY'
import sys
bn, ln, br, lr = map(float, sys.argv[1:])
print(f"new keys: lab {ln:.0f}/s, bare {bn:.0f}/s, ratio {ln / bn:.2f}")
print(f"replays:  lab {lr:.0f}/s, bare {br:.0f}/s, ratio {lr / br:.2f}")
PY
