#!/usr/bin/env bash
# benches/trace/arming.sh - the start-up cost of tracing every function of a
# large binary: wprobe trace --transport inproc against uftrace record -P .
# on Debian's /usr/bin/python3.11 (about 10,000 functions, no libpython),
# run with --version, which exits before running Python code: the time is
# the tool's start-up (reading the binary, planning and writing every site,
# loading the agent) plus a few thousand calls. Wall time of the whole
# command, median of REPEATS runs, each tool's runs interleaved; wprobe with
# its caches (compiled modules, plans) warm and cold (emptied before the
# run).
#
# usage: benches/trace/arming.sh [REPEATS]
# env:   WPROBE (default target/release/wprobe; several binaries separated
#        by spaces are each measured, their runs interleaved with the
#        others'), PYTHON (/usr/bin/python3.11)
set -euo pipefail
R=${1:-5}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
read -r -a WS <<< "${WPROBE:-$ROOT/target/release/wprobe}"
P=${PYTHON:-/usr/bin/python3.11}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-arming.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
t() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
: > "$WORK/u"; : > "$WORK/f"
for k in "${!WS[@]}"; do : > "$WORK/w$k"; : > "$WORK/c$k"; done
for _ in $(seq "$R"); do
  t "$P" --version >> "$WORK/u"
  (cd "$WORK" && t uftrace record -P . -d "$WORK/uftrace.data" "$P" --version) >> "$WORK/f"
  for k in "${!WS[@]}"; do
    # Each binary its own cache directory (another build's plans are
    # not its own: they would only be ignored and rewritten).
    export WPROBE_CACHE_DIR=$WORK/cache$k
    t "${WS[$k]}" trace --transport inproc --report -- "$P" --version >> "$WORK/w$k"
    rm -rf "$WORK/cache$k"
    t "${WS[$k]}" trace --transport inproc --report -- "$P" --version >> "$WORK/c$k"
  done
done
u=$(median < "$WORK/u"); f=$(median < "$WORK/f")
echo "arming: $P --version, REPEATS=$R, medians; wprobe $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-44s %8s %8s\n" "" "wall ms" "×uftrace"
printf "%-44s %8s %8s\n" "untraced" "$u" "-"
printf "%-44s %8s %8s\n" "uftrace record -P ." "$f" "1.0"
for k in "${!WS[@]}"; do
  w=$(median < "$WORK/w$k"); c=$(median < "$WORK/c$k")
  [ "${#WS[@]}" -gt 1 ] && echo "${WS[$k]}"
  printf "%-44s %8s %8s\n" "wprobe trace --transport inproc (cache warm)" "$w" "$(awk -v a="$w" -v b="$f" 'BEGIN { printf "%.1f", a / b }')"
  printf "%-44s %8s %8s\n" "wprobe trace --transport inproc (cache cold)" "$c" "$(awk -v a="$c" -v b="$f" 'BEGIN { printf "%.1f", a / b }')"
done
