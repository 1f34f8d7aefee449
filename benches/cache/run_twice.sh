#!/usr/bin/env bash
# End-to-end effect of the compiled-module cache: wall time of
# `wprobe run P100.rpn -- probe_target` (100 probes on target_fn, the shape
# of `wprobe_benches::library::many_probe_program(100)`) with the cache off
# (WPROBE_NO_CACHE=1) and warm, median of REPEATS runs each.
#
#   bash benches/cache/run_twice.sh [REPEATS]     (default 7)
#
# Uses target/release/wprobe (or $CARGO_TARGET_DIR/release/wprobe); build it
# first with `cargo build --release -p runtime`. The cache lives in a
# temporary directory removed at the end.
set -euo pipefail
repeats=${1:-7}
root=$(cd "$(dirname "$0")/../.." && pwd)
wprobe=${CARGO_TARGET_DIR:-$root/target}/release/wprobe
[ -x "$wprobe" ] || { echo "build it first: cargo build --release -p runtime" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
gcc -O0 -g -fno-pie -no-pie -fcf-protection=none -fno-omit-frame-pointer \
    -o "$work/probe_target" "$root/tests/examples/probe_target.c"
{
    printf 'name = probe_target\nmajor = 5\n'
    for i in $(seq 0 99); do
        bits=(8 16 32 64)
        printf '\noffset = target_fn\nopcode = 0x55\nminor = %d\n' "$i"
        printf '        push r, rsi\n        push r, rdi\n'
        printf '        push greeting + %d\n        push mem, u%d\n        log 3\n' \
            $((i % 24)) "${bits[$((i % 4))]}"
    done
} > "$work/p100.rpn"
export WPROBE_CACHE_DIR=$work/cache
median() { sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}'; }
run() { # prints the wall time of one run in ms
    local t0 t1
    t0=$(date +%s%N)
    (cd "$work" && "$wprobe" run p100.rpn -- ./probe_target >/dev/null 2>&1)
    t1=$(date +%s%N)
    echo $(((t1 - t0) / 1000000))
}
cold=$(for _ in $(seq "$repeats"); do WPROBE_NO_CACHE=1 run; done | median)
run >/dev/null # fills the cache
warm=$(for _ in $(seq "$repeats"); do run; done | median)
echo "repeats=$repeats load=$(cut -d' ' -f1 /proc/loadavg) entry=$(du -b "$work"/cache/*.cwasm | cut -f1) bytes"
echo "wprobe run, cache off:  ${cold} ms (median)"
echo "wprobe run, cache warm: ${warm} ms (median)"
