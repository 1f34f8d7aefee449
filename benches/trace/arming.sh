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
: > "$WORK/u"; : > "$WORK/f"
for k in "${!WS[@]}"; do : > "$WORK/w$k"; : > "$WORK/m$k"; : > "$WORK/c$k"; done
for _ in $(seq "$R"); do
  t "$P" --version >> "$WORK/u"
  (cd "$WORK" && t uftrace record -P . -d "$WORK/uftrace.data" "$P" --version) >> "$WORK/f"
  for k in "${!WS[@]}"; do
    # Each binary its own cache directory (another build's plans are
    # not its own: they would only be ignored and rewritten).
    export WPROBE_CACHE_DIR=$WORK/cache$k
    t "${WS[$k]}" trace --transport inproc --report -- "$P" --version >> "$WORK/w$k"
    rm -f "$WORK/cache$k"/*.cwasm
    t "${WS[$k]}" trace --transport inproc --report -- "$P" --version >> "$WORK/m$k"
    rm -rf "$WORK/cache$k"
    t "${WS[$k]}" trace --transport inproc --report -- "$P" --version >> "$WORK/c$k"
  done
done
u=$(median < "$WORK/u"); f=$(median < "$WORK/f"); fl=$(least < "$WORK/f")
echo "arming: $P --version, REPEATS=$R, IDLE=${IDLE}s, medians (and fastest runs); wprobe $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
printf "%-44s %8s %8s %8s %8s\n" "" "wall ms" "×uftrace" "fastest" "×uftrace"
printf "%-44s %8s %8s %8s %8s\n" "untraced" "$u" "-" "$(least < "$WORK/u")" "-"
printf "%-44s %8s %8s %8s %8s\n" "uftrace record -P ." "$f" "1.00" "$fl" "1.00"
for k in "${!WS[@]}"; do
  w=$(median < "$WORK/w$k"); m=$(median < "$WORK/m$k"); c=$(median < "$WORK/c$k")
  wl=$(least < "$WORK/w$k"); ml=$(least < "$WORK/m$k"); cl=$(least < "$WORK/c$k")
  [ "${#WS[@]}" -gt 1 ] && echo "${WS[$k]}"
  printf "%-44s %8s %8s %8s %8s\n" "wprobe trace --transport inproc (cache warm)" "$w" "$(ratio "$w" "$f")" "$wl" "$(ratio "$wl" "$fl")"
  printf "%-44s %8s %8s %8s %8s\n" "  compiled modules cold, plans kept" "$m" "$(ratio "$m" "$f")" "$ml" "$(ratio "$ml" "$fl")"
  printf "%-44s %8s %8s %8s %8s\n" "wprobe trace --transport inproc (cache cold)" "$c" "$(ratio "$c" "$f")" "$cl" "$(ratio "$cl" "$fl")"
done
