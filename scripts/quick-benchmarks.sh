#!/usr/bin/env bash
# Runs every benchmark and script under scripts/ and examples/ once, in a quick mode (small
# counts, short runs), against the debug build: CI runs this so none of them rots. The figures
# it prints mean nothing; the full runs (BENCHMARKS.md) use the release build and the defaults.
# (fuzz-api.sh and build-release.sh run in .ci/run itself.)
#
#     scripts/quick-benchmarks.sh
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-target}"
bin="$target/debug/retrylab"
cargo build --locked --bin retrylab --examples

step() { echo "== $*" >&2; }

step "examples/burst_bench"
BURST_BENCH_MESSAGES=200 BURST_BENCH_BASELINE_ROWS=20 cargo run --locked --quiet --example burst_bench
step "examples/traffic_bench"
cargo run --locked --quiet --example traffic_bench -- --quick
step "examples/ledger_memory"
LEDGER_MEMORY_KEYS=2000 cargo run --locked --quiet --example ledger_memory
step "examples/lab_memory"
cargo run --locked --quiet --example lab_memory -- --quick
step "scripts/endpoint-throughput.sh (with examples/bare_endpoint)"
BIN_DIR="$target/debug" ROUNDS=1 SECONDS_EACH=1 scripts/endpoint-throughput.sh
step "scripts/defence-cost.sh"
RETRYLAB_BIN="$bin" ROUNDS=1 SECONDS_EACH=1 scripts/defence-cost.sh
step "scripts/lean-bench.py"
python3 scripts/lean-bench.py --quick --bin "$bin" --bare "$target/debug/examples/bare_endpoint"
step "scripts/compare-bench.py"
QUICK=1 python3 scripts/compare-bench.py "$bin"
step "scripts/brooker-experiment.py"
python3 scripts/brooker-experiment.py --quick --bin "$bin"
step "scripts/endpoint-flood.py"
python3 scripts/endpoint-flood.py "$bin" 50
step "scripts/event-window-memory.py"
MESSAGES=50 python3 scripts/event-window-memory.py "$bin" 1048576 3
step "scripts/slow-connections.py"
python3 scripts/slow-connections.py "$bin" 20
step "scripts/export-memory.py"
python3 scripts/export-memory.py --quick --bin "$bin"
step "scripts/reset-memory.py"
python3 scripts/reset-memory.py --quick --bin "$bin"
step "scripts/export-memory.py --contention"
python3 scripts/export-memory.py --quick --contention --bin "$bin"
step "scripts/event-reach.py"
python3 scripts/event-reach.py --quick --bin "$bin"
step "scripts/left-labs.py"
python3 scripts/left-labs.py --quick --bin "$bin"
step "scripts/retry-after-chance.py"
python3 scripts/retry-after-chance.py --runs 2000
step "scripts/grade-stability.py (each library of the conformance matrix graded once)"
python3 scripts/grade-stability.py --runs 1 --bin "$bin"
# The page's measurements in headless Chromium (tests/browser/, ignored in `cargo test`), each
# small and short: they print frame times and sizes without holding them to targets, which a
# loaded machine would miss; the steady run does check that the page's counters equal the API's.
browser_measurement() { cargo test --locked --test browser -- --ignored --nocapture --exact "$1"; }
step "tests/browser/steady.rs (steady traffic, 5 s, and a trace of 1 s)"
STEADY_FPS_S=5 STEADY_FPS_TRACE_S=1 browser_measurement steady::steady_traffic_fps
step "tests/browser/scale.rs (a burst of 200)"
SCALE_BURST=200 SCALE_IDLE_S=1 browser_measurement scale::scale_burst_of_2000_frame_times_and_stream_bytes
step "tests/browser/open_large.rs (a lab of 400 messages, opened once)"
OPEN_MESSAGES=400 OPEN_RUNS=1 browser_measurement open_large::open_large_lab_interactive_within_1500_ms
step "every script ran"
