#!/usr/bin/env bash
# Runs every test of wprobe (unit, golden, differential, fuzz smoke, real
# tracing with ptrace and perf), after installing what they need, then the
# code checks: formatting, clippy and rustdoc with warnings denied.
# With CI=true (as .ci/run sets it), a test that needs what the machine
# lacks fails instead of being reported as ignored.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo fmt --all -- --check
# Tests that run `wprobe` use a compiled-module cache of their own, not the
# user's ~/.cache/wprobe.
WPROBE_CACHE_DIR="$(mktemp -d "${TMPDIR:-/tmp}/wprobe-test-cache.XXXXXX")"
export WPROBE_CACHE_DIR
trap 'rm -rf "$WPROBE_CACHE_DIR"' EXIT
cargo test --workspace --locked --no-fail-fast
cargo clippy --workspace --all-targets --locked -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
# The installable binary stays small (the release profile leaves debug
# information and symbols out; `--profile profiling` keeps them).
cargo build --release --locked -p runtime --bin wprobe
size=$(stat -c %s target/release/wprobe)
max=$((30 * 1024 * 1024))
if [ "$size" -gt "$max" ]; then
  echo "target/release/wprobe is $size bytes, over the 30 MiB ($max bytes) an installable binary may take" >&2
  exit 1
fi
echo "target/release/wprobe: $size bytes (at most $max)"
