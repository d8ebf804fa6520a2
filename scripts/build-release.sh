#!/usr/bin/env bash
# Builds the release binary and puts it in $1 (default: dist/). The Dockerfile's build stage
# runs exactly this script, and .ci/run runs it too, so a broken build step fails CI even on
# machines without a Docker engine.
set -euo pipefail
out="${1:-dist}"
cargo build --release --locked --bin retrylab
mkdir -p "$out"
install -m 0755 target/release/retrylab "$out/retrylab"
strip "$out/retrylab" 2>/dev/null || true
"$out/retrylab" --version
