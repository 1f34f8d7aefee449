#!/usr/bin/env bash
# benches/trace/where.sh - where a call traced by `wprobe trace --transport
# inproc --report` spends its time: `perf record -e cpu-clock -F FREQ` of
# two runs (every process: wprobe's threads and the target) on fib.c at
# -O0, fib N1 and fib N2, and benches/trace/where.py's split of the
# difference per traced call (the stub and trampoline, the agent's parts,
# the time reads, the ring, the reader).
#
# usage: benches/trace/where.sh WPROBE AGENT_SO
#   WPROBE    the wprobe binary (a release build)
#   AGENT_SO  the agent object it embeds, with its symbols and DWARF:
#             TARGET/release/build/agent-loader-*/out/wprobe-agent.so of
#             the same build
# env: FREQ (10000), N1 (20), N2 (30), SHAPE (fib0: fib2, loop0, loop2 as
#      in percall.sh), KEEP=DIR (keep the perf data there)
# Needs perf, gcc, addr2line, objdump, python3; root.
set -euo pipefail
if [ $# -ne 2 ] || [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
W=$(realpath "$1"); SO=$(realpath "$2")
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
FREQ=${FREQ:-10000}; SHAPE=${SHAPE:-fib0}
case $SHAPE in
  fib*) SRC=fib.c; N1=${N1:-20}; N2=${N2:-30}; F=fib ;;
  loop*) SRC=calls.c; N1=${N1:-1000000}; N2=${N2:-6000000}; F=f ;;
  *) echo "where: SHAPE fib0, fib2, loop0 or loop2" >&2; exit 2 ;;
esac
WORK=${KEEP:-$(mktemp -d "${TMPDIR:-/tmp}/wprobe-where.XXXXXX")}
mkdir -p "$WORK"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$WORK"' EXIT
gcc -O"${SHAPE: -1}" -fpatchable-function-entry=5 -o "$WORK/$SHAPE" "$ROOT/benches/trace/$SRC"
cd "$WORK"
calls=()
for n in "$N1" "$N2"; do
  perf record -q -e cpu-clock -F "$FREQ" -o "$n.data" -- \
    "$W" trace --transport inproc --report -o "$n.out" -- "./$SHAPE" "$n" >/dev/null 2>&1
  c=$(awk -v f="$F" '$NF == f { print $(NF - 1); exit }' "$n.out")
  [ -n "$c" ] || { echo "where: no calls of $F in the report of $SHAPE $n" >&2; exit 1; }
  calls+=("$c")
done
echo "$SHAPE $N1 and $N2: ${calls[0]} and ${calls[1]} calls of $F; perf -F $FREQ; load $(cut -d' ' -f1-3 /proc/loadavg)"
FREQ=$FREQ python3 "$ROOT/benches/trace/where.py" "$SO" "${calls[0]}" "$N1.data" "${calls[1]}" "$N2.data"
