#!/usr/bin/env bash
# benches/trace/call_cost.sh - what one traced call costs (its entry and its
# return recorded), wprobe trace under each transport against uftrace and
# ltrace, in one run, on one target (benches/trace/calls.c: main calls f(i)
# N times).
#
#   untraced                       the loop alone (its cost per call)
#   uftrace record -P .            uftrace's dynamic patching of every function
#                                  (f's 5 nops become a call to its trampoline),
#                                  every entry and exit written to uftrace.data
#   ltrace -L -x f -o FILE         ltrace on f only: a breakpoint at its entry
#                                  and at its return address, a line per call
#   wprobe trace --transport perf -o FILE     every function, a line per call
#   wprobe trace --transport ptrace -o FILE   the same under ptrace
#   wprobe trace --transport inproc -o FILE   the same, the handlers in the
#                                  target (a window at f's entry and one at
#                                  its ret, no trap)
#   wprobe trace ... --report      the same, calls aggregated (no line per call)
#   wprobe run entry.rpn / return.rpn   under each transport: one ordinary
#                                  probe at f's entry, and one return probe
#                                  on f (count in a variable, no record): the
#                                  parts a traced call is made of
#   wprobe run at_ret (perf)       an ordinary probe on f's `ret` instruction:
#                                  the uprobe perf's return probes put there
#   ... f too short (int3s)        inproc, f built 4 bytes long (calls.c
#                                  -DSHORT_F): no room for a jump, an int3 at
#                                  its entry and its ret, a ptrace stop each
#
# Per call = (T(N2) - T(N1)) / (N2 - N1) - the untraced loop's cost per call:
# the slope between two call counts, so the fixed costs (start-up, symbol
# tables, arming every function, writing the report) cancel. T is the median
# of REPEATS runs, N1 and N2 runs alternating. Two times, from wait4's rusage
# (benches/rusage.c): wall, the traced command's elapsed time, and cpu, the
# user + system time of the tool and the target. A stop of the target costs
# about 50 times a uprobe here, and uftrace's patched call about 1/30 of a
# uprobe, so each row has its own call counts (below); the slope is per call
# either way. The last N2 run of each row is checked for N2 calls of f
# (uftrace report, ltrace's lines, wprobe's report or tree); a row whose
# count could not be confirmed is marked "!".
#
# usage: benches/trace/call_cost.sh [REPEATS]
# env:   REPEATS (5); FAST_N1/FAST_N2 (uftrace, untraced: 1000000/6000000);
#        PERF_N1/PERF_N2 (20000/120000); PTRACE_N1/PTRACE_N2 (2000/12000);
#        INPROC_N1/INPROC_N2 (200000/1200000: inproc with a line per call);
#        the other inproc rows (no line per call) use FAST_N1/FAST_N2, the
#        counts of the uftrace row they are compared with
#        WPROBE  wprobe binary (default target/release/wprobe, built when missing)
#        SKIP    rows to leave out, space separated: uftrace ltrace inproc perf ptrace
# Needs root for --transport perf (uprobes), gcc, uftrace and ltrace
# (scripts/setup.sh installs them).
set -euo pipefail

if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 0
fi

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REPEATS=${1:-${REPEATS:-5}}
FN1=${FAST_N1:-1000000} FN2=${FAST_N2:-6000000}
PN1=${PERF_N1:-20000} PN2=${PERF_N2:-120000}
TN1=${PTRACE_N1:-2000} TN2=${PTRACE_N2:-12000}
IN1=${INPROC_N1:-200000} IN2=${INPROC_N2:-1200000}
SKIP=" ${SKIP:-} "
skipped() { [[ $SKIP == *" $1 "* ]]; }
export LC_ALL=C

WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-trace-cost.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
trap 'echo "call_cost: interrupted" >&2; exit 130' INT

TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
W=${WPROBE:-$TARGET_DIR/release/wprobe}
if [ ! -x "$W" ]; then
  echo "call_cost: $W missing, building it (cargo build --release -p runtime)" >&2
  (cd "$ROOT" && cargo build --release -p runtime --bin wprobe >&2)
fi
W=$(cd "$(dirname "$W")" && pwd)/$(basename "$W")
gcc -O1 -fpatchable-function-entry=5 -o "$WORK/calls" "$ROOT/benches/trace/calls.c"
gcc -O1 -DSHORT_F -o "$WORK/calls_short" "$ROOT/benches/trace/calls.c"
gcc -O2 -o "$WORK/rusage" "$ROOT/benches/rusage.c"
T=$WORK/calls
cd "$WORK"
# f's ret instruction (offset from f), for the at_ret row.
read -r F_AT RET_AT < <(objdump -d --no-show-raw-insn "$T" | awk '/^[0-9a-f]+ <f>:/ { f = $1; on = 1; next }
  on && /^$/ { exit } on && $2 == "ret" { sub(":", "", $1); print f, $1; exit }')
printf 'name = calls\nvars = 1\noffset = f + %d\n        inc lv, 0\n        abort\n' \
  $((0x$RET_AT - 0x$F_AT)) >"$WORK/at_ret.rpn"

median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# m CMD...: "wall_ns cpu_ns"; the command's output goes to $WORK/out.
m() { "$WORK/rusage" "$@" 3>&1 >"$WORK/out" 2>&1 || true; }
# slope A B VERIFY CMD...: CMD... A and CMD... B (the count appended),
# REPEATS times each, alternating; prints "wall_ns/call cpu_ns/call ok";
# VERIFY is a command run after the last B run, given B, that succeeds when
# it confirms B calls of f ("-": none).
slope() {
  local a=$1 b=$2 verify=$3 i ra="" rb="" ok=1
  shift 3
  for ((i = 0; i < REPEATS; i++)); do
    ra+="$(m "$@" "$a")"$'\n'
    rb+="$(m "$@" "$b")"$'\n'
  done
  if [ "$verify" != - ] && ! $verify "$b" >/dev/null 2>&1; then ok=0; fi
  awk -v w1="$(awk 'NF { print $1 }' <<<"$ra" | median)" -v c1="$(awk 'NF { print $2 }' <<<"$ra" | median)" \
      -v w2="$(awk 'NF { print $1 }' <<<"$rb" | median)" -v c2="$(awk 'NF { print $2 }' <<<"$rb" | median)" \
      -v d=$((b - a)) -v ok="$ok" 'BEGIN { printf "%.0f %.0f %d\n", (w2 - w1) / d, (c2 - c1) / d, ok }'
}

# Checks of the last run: N calls of f.
uftrace_ok() { uftrace report -d "$WORK/ud" -f call | grep -Eq "^ +$1  f$"; }
ltrace_ok() { [ "$(grep -c '^f(' "$WORK/lt.out")" = "$1" ]; }
report_ok() { grep -Eq " $1  f$" "$WORK/trace.out"; }
hits_ok() { grep -Eq "^  (entry|return|at_ret):f(\+0x[0-9a-f]+)? +$1 " "$WORK/out"; }
tree_ok() { [ "$(grep -c '|   f();$' "$WORK/trace.out")" = "$1" ]; }

CPU=$(awk -F': *' '/^model name/ { print $2; exit }' /proc/cpuinfo)
COMMIT=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)
echo "call_cost: measuring (REPEATS=$REPEATS: a few minutes)..." >&2

declare -a NAMES=() RES=()
add() { NAMES+=("$1"); RES+=("$2"); }
UN=$(slope "$FN1" "$FN2" - "$T")
read -r uw uc _ <<<"$UN"
net() { local w c ok; read -r w c ok <<<"$1"; echo "$((w - uw)) $((c - uc)) $ok"; }

if ! skipped uftrace && command -v uftrace >/dev/null; then
  add "uftrace record -P ." "$(net "$(slope "$FN1" "$FN2" uftrace_ok uftrace record -d "$WORK/ud" -P . "$T")")"
fi
if ! skipped ltrace && command -v ltrace >/dev/null; then
  add "ltrace -x f (a line per call)" "$(net "$(slope "$TN1" "$TN2" ltrace_ok ltrace -L -x f -o "$WORK/lt.out" "$T")")"
fi
if ! skipped perf; then
  add "wprobe trace --transport perf" "$(net "$(slope "$PN1" "$PN2" tree_ok "$W" trace --transport perf -o "$WORK/trace.out" -- "$T")")"
  add "  ... --report" "$(net "$(slope "$PN1" "$PN2" report_ok "$W" trace --transport perf --report -o "$WORK/trace.out" -- "$T")")"
  add "  wprobe run entry.rpn (perf)" "$(net "$(slope "$PN1" "$PN2" hits_ok "$W" run --transport perf "$ROOT/benches/trace/entry.rpn" -- "$T")")"
  add "  wprobe run return.rpn (perf)" "$(net "$(slope "$PN1" "$PN2" hits_ok "$W" run --transport perf "$ROOT/benches/trace/return.rpn" -- "$T")")"
  add "  wprobe run at_ret (perf)" "$(net "$(slope "$PN1" "$PN2" hits_ok "$W" run --transport perf "$WORK/at_ret.rpn" -- "$T")")"
fi
if ! skipped inproc; then
  add "wprobe trace --transport inproc" "$(net "$(slope "$IN1" "$IN2" tree_ok "$W" trace --transport inproc -o "$WORK/trace.out" -- "$T")")"
  add "  ... --report" "$(net "$(slope "$FN1" "$FN2" report_ok "$W" trace --transport inproc --report -o "$WORK/trace.out" -- "$T")")"
  add "  wprobe run entry.rpn (inproc)" "$(net "$(slope "$FN1" "$FN2" hits_ok "$W" run --transport inproc "$ROOT/benches/trace/entry.rpn" -- "$T")")"
  add "  wprobe run return.rpn (inproc)" "$(net "$(slope "$FN1" "$FN2" hits_ok "$W" run --transport inproc "$ROOT/benches/trace/return.rpn" -- "$T")")"
  add "  ... --report, f too short (int3s)" "$(net "$(slope "$TN1" "$TN2" report_ok "$W" trace --transport inproc --report -o "$WORK/trace.out" -- "$WORK/calls_short")")"
fi
if ! skipped ptrace; then
  add "wprobe trace --transport ptrace" "$(net "$(slope "$TN1" "$TN2" tree_ok "$W" trace --transport ptrace -o "$WORK/trace.out" -- "$T")")"
  add "  ... --report" "$(net "$(slope "$TN1" "$TN2" report_ok "$W" trace --transport ptrace --report -o "$WORK/trace.out" -- "$T")")"
  add "  wprobe run entry.rpn (ptrace)" "$(net "$(slope "$TN1" "$TN2" hits_ok "$W" run --transport ptrace "$ROOT/benches/trace/entry.rpn" -- "$T")")"
  add "  wprobe run return.rpn (ptrace)" "$(net "$(slope "$TN1" "$TN2" hits_ok "$W" run --transport ptrace "$ROOT/benches/trace/return.rpn" -- "$T")")"
fi

bw=0 bc=0
for i in "${!NAMES[@]}"; do
  if [ "${NAMES[$i]}" = "uftrace record -P ." ]; then read -r bw bc _ <<<"${RES[$i]}"; fi
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.1f", a / b; else print "-" }'; }
echo "machine: $CPU, $(nproc) cores; kernel $(uname -r); load $LOAD0 (start) $(cut -d' ' -f1-3 /proc/loadavg) (end)"
echo "calls: untraced and uftrace $FN1/$FN2, inproc $IN1/$IN2 (a line per call; else as uftrace), perf $PN1/$PN2, ptrace and ltrace $TN1/$TN2; REPEATS=$REPEATS, medians; wprobe $COMMIT; $(date -u +%Y-%m-%dT%H:%MZ)"
printf "%-34s %12s %12s %10s %10s\n" tracer "wall ns/call" "cpu ns/call" "wall ×uf" "cpu ×uf"
printf "%-34s %12s %12s %10s %10s\n" "untraced loop (ns per call)" "$uw" "$uc" - -
warn=0
for i in "${!NAMES[@]}"; do
  read -r w c ok <<<"${RES[$i]}"
  name=${NAMES[$i]}
  if [ "$ok" != 1 ]; then name+=" !"; warn=1; fi
  printf "%-34s %12s %12s %10s %10s\n" "$name" "$w" "$c" "$(ratio "$w" "$bw")" "$(ratio "$c" "$bc")"
done
if [ "$warn" = 1 ]; then echo "! the tool's output did not confirm N2 calls of f (see its row)"; fi
