#!/usr/bin/env bash
# Runs every test of wprobe (unit, golden, differential, fuzz smoke, real
# tracing with ptrace and perf), after installing what they need.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo test --workspace --locked --no-fail-fast
