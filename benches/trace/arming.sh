#!/usr/bin/env bash
# benches/trace/arming.sh - the start-up cost of tracing every function of a
# large binary: wprobe trace --transport inproc against uftrace record -P .
# on Debian's /usr/bin/python3.11 (about 10,000 functions, no libpython),
# run with --version, which exits before running Python code: the time is
# the tool's start-up (reading the binary, planning and writing every site,
# loading the agent) plus a few thousand calls. Wall time of the whole
# command: the median of REPEATS runs, and the fastest (this machine's
# virtual CPUs have spells of running several times slower, which the
# median of a few runs does not always outvote), each tool's runs
# interleaved; wprobe with its caches (compiled modules, plans) warm, with
# the compiled-module cache emptied and the plans kept (a handler module
# seen for the first time), and cold (both emptied: a binary traced for the
# first time).
#
# Two times of each run: the whole command's wall time, and the time from
# its start to the first traced call (the issue's "time from start to the
# first traced call"): the first record's timestamp (wprobe's duration view
# with -u, the time of day to the microsecond; uftrace's replay -f time,
# CLOCK_MONOTONIC, put on the time of day by an offset read once) less the
# time of day the command was started at. A tool that writes its data
# after the program ended (uftrace) has a first call earlier in its wall
# time than one that arms first and leaves at once.
#
# With IDLE=S, each run starts after S seconds idle rather than right
# after the one before: the first run of a tool after a pause, as a user
# meets it (memory freed a while ago may be slower to get back: a
# virtual machine that reports free pages to its host, or a kernel that
# must compact memory for a huge page).
#
# usage: benches/trace/arming.sh [REPEATS]
# env:   WPROBE (default target/release/wprobe; several binaries separated
#        by spaces are each measured, their runs interleaved with the
#        others'), PYTHON (/usr/bin/python3.11), IDLE (seconds, default 0)
set -euo pipefail
R=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a WS <<< "${WPROBE:-$ROOT/target/release/wprobe}"
P=${PYTHON:-/usr/bin/python3.11}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-arming.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
IDLE=${IDLE:-0}
t() { local s e; sleep "$IDLE"; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
least() { sort -n | head -1; }
# CLOCK_REALTIME - CLOCK_MONOTONIC, in ns (uftrace's timestamps are
# monotonic), read with the binary under test.
OFF=$("$P" -c 'import time; print(time.time_ns() - time.monotonic_ns())')
# wall_and_first OUT KIND CMD...: runs CMD, appends its wall time (ms) to
# OUT and its first traced call's time after the start (ms, 1 decimal;
# "-" when no call was recorded) to OUT.first. KIND: uftrace (data in
# $WORK/uftrace.data) or wprobe (CMD writes its duration view to
# $WORK/trace).
wall_and_first() {
  local out=$1 kind=$2 s e first; shift 2
  sleep "$IDLE"
  rm -rf "$WORK/uftrace.data" "$WORK/trace"
  s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N)
  echo $(( (e - s) / 1000000 )) >> "$out"
  case $kind in
    uftrace)
      first=$(uftrace replay -d "$WORK/uftrace.data" -f time --no-pager 2>/dev/null |
        awk '$1 ~ /^[0-9]+\.[0-9]+$/ { print $1; exit }')
      [ -n "$first" ] && first=$(awk -v f="$first" -v o="$OFF" 'BEGIN { printf "%.0f", f * 1e9 + o }') ;;
    wprobe)
      first=$(awk '/^[0-9][0-9]:[0-9][0-9]:[0-9][0-9]\./ { print $1; exit }' "$WORK/trace" 2>/dev/null)
      [ -n "$first" ] && first=$(date -d "today $first" +%s%N) ;;
  esac
  if [ -n "$first" ]; then
    awk -v f="$first" -v s="$s" 'BEGIN { printf "%.1f\n", (f - s) / 1e6 }' >> "$out.first"
  else
    echo - >> "$out.first"
  fi
}
# The median of the first-call times recorded in OUT.first.
first_median() { grep -vx -- - "$1.first" | median; }
: > "$WORK/u"; : > "$WORK/f"; : > "$WORK/f.first"
for k in "${!WS[@]}"; do for x in w m c; do : > "$WORK/$x$k"; : > "$WORK/$x$k.first"; done; done
for _ in $(seq "$R"); do
  t "$P" --version >> "$WORK/u"
  (cd "$WORK" && wall_and_first "$WORK/f" uftrace uftrace record -P . -d "$WORK/uftrace.data" "$P" --version)
  for k in "${!WS[@]}"; do
    # Each binary its own cache directory (another build's plans are
    # not its own: they would only be ignored and rewritten).
    export WPROBE_CACHE_DIR=$WORK/cache$k
    w() { wall_and_first "$WORK/$1" wprobe "${WS[$k]}" trace --transport inproc -u -o "$WORK/trace" -- "$P" --version; }
    w "w$k"
    rm -f "$WORK/cache$k"/*.cwasm
    w "m$k"
    rm -rf "$WORK/cache$k"
    w "c$k"
  done
done
u=$(median < "$WORK/u"); f=$(median < "$WORK/f"); fl=$(least < "$WORK/f"); f1=$(first_median "$WORK/f")
echo "arming: $P --version, REPEATS=$R, IDLE=${IDLE}s, medians (and fastest runs); wprobe $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "" || b == "" || b == 0) print "-"; else printf "%.2f", a / b }'; }
printf "%-44s %8s %8s %8s %8s %11s %8s\n" "" "wall ms" "×uftrace" "fastest" "×uftrace" "1st call ms" "×uftrace"
printf "%-44s %8s %8s %8s %8s %11s %8s\n" "untraced" "$u" "-" "$(least < "$WORK/u")" "-" "-" "-"
printf "%-44s %8s %8s %8s %8s %11s %8s\n" "uftrace record -P ." "$f" "1.00" "$fl" "1.00" "$f1" "1.00"
row() {
  local name=$1 x=$2 v l v1
  v=$(median < "$WORK/$x"); l=$(least < "$WORK/$x"); v1=$(first_median "$WORK/$x")
  printf "%-44s %8s %8s %8s %8s %11s %8s\n" "$name" "$v" "$(ratio "$v" "$f")" "$l" "$(ratio "$l" "$fl")" "$v1" "$(ratio "$v1" "$f1")"
}
for k in "${!WS[@]}"; do
  [ "${#WS[@]}" -gt 1 ] && echo "${WS[$k]}"
  row "wprobe trace --transport inproc (cache warm)" "w$k"
  row "  compiled modules cold, plans kept" "m$k"
  row "wprobe trace --transport inproc (cache cold)" "c$k"
done
