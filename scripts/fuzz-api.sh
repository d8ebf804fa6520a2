#!/usr/bin/env bash
# Fuzzes the HTTP API against its own OpenAPI description with schemathesis: starts the
# server on a free loopback port with a temporary store, creates a real lab, and runs a fixed
# number of generated cases per operation (scripts/fuzz-api.toml). Fails on any status the
# description does not list, any answer that does not match its schema, and any 5xx other
# than the downstream's injected 503.
#
#     scripts/fuzz-api.sh [path/to/retrylab]     (default: target/debug/retrylab)
set -euo pipefail
cd "$(dirname "$0")/.."

schemathesis_version=4.32.5
binary="${1:-${CARGO_TARGET_DIR:-target}/debug/retrylab}"
venv="${CARGO_TARGET_DIR:-target}/fuzz-venv"
if [ ! -x "$venv/bin/st" ] || ! "$venv/bin/st" --version | grep -q "$schemathesis_version"; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "schemathesis==$schemathesis_version"
fi

work="$(mktemp -d)"
server=""
cleanup() {
  if [ -n "$server" ]; then kill "$server" 2>/dev/null || true; wait "$server" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

# The control API's per-client rate limit would answer most generated cases 429: lift it.
# Steady traffic is held to 20 messages/s: a generated case sets a lab's traffic near the
# largest rate the description allows, with no end, and 4,000 arrivals a second on the debug
# build kept the server so busy that later cases ran past their timeout (a faster rate is a
# 422 naming the limit, which the description lists).
RUST_LOG=warn "$binary" --addr 127.0.0.1:0 --db "$work/fuzz.db" \
  --control-rate-per-s 1000000 --control-burst 1000000 \
  --max-traffic-rate-per-s 20 >"$work/stdout" 2>"$work/server.log" &
server=$!
base=""
for _ in $(seq 100); do
  base="$(grep -o 'http://[0-9.:]*' "$work/stdout" | head -n 1 || true)"
  [ -n "$base" ] && break
  sleep 0.1
done
[ -n "$base" ] || { echo "the server did not start:"; cat "$work/server.log"; exit 1; }

RETRYLAB_FUZZ_LAB="$(python3 -c '
import json, sys, urllib.request
request = urllib.request.Request(sys.argv[1] + "/api/labs", method="POST")
print(json.load(urllib.request.urlopen(request))["id"])
' "$base")"
export RETRYLAB_FUZZ_LAB

# One worker: with two, the tool's own threads parse Python source at once, and CPython 3.11's
# parser can fail under that ("AST constructor recursion depth mismatch"), an error of the tool
# that CI reported as a failed case.
status=0
"$venv/bin/st" --config-file scripts/fuzz-api.toml run "$base/api/openapi.json" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_headers_conformance,response_schema_conformance \
  --workers 1 --no-color || status=$?
if grep -q 'panicked' "$work/server.log"; then
  echo "the server panicked:"; grep -A5 'panicked' "$work/server.log"; status=1
fi
exit "$status"
