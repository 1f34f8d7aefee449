#!/usr/bin/env bash
# benches/inproc/safety_costs.sh - what two of the in-process transport's
# fixes cost or save, per hit, in one run (issue 26):
#
#   str   a handler taking two str() of 12 and 38 bytes at each hit of
#         strs() (tests/progs/harm.c), against the same handler without
#         str(): the per-hit cost of the two strings. A string was one
#         process_vm_readv and one getpid per byte; it is one system call.
#   ring  printf("%d\n", arg0) at each of N calls with wprobe's output to
#         /dev/null, the ring 4 KiB (WPROBE_INPROC_RING_BYTES) so that it
#         fills, --ring-full=block against --ring-full=drop, and the command
#         untraced: the target's wall time (block slows it to wprobe's pace
#         and loses nothing; drop never waits and counts what it drops).
#
# Per hit = (T(N2) - T(N1)) / (N2 - N1): the slope between two call counts,
# so start-up and arming cancel; T the median of REPEATS runs (wall time of
# the whole command, wprobe included: benches/rusage.c). With BEFORE=PATH,
# the str rows are also measured with that wprobe binary (an older build),
# in the same run.
#
# usage: benches/inproc/safety_costs.sh [WPROBE] [REPEATS]
set -euo pipefail
cd "$(dirname "$0")/../.."
W=${1:-target/release/wprobe}
REPEATS=${2:-5}
N1=${N1:-20000}
N2=${N2:-100000}
RING_N=${RING_N:-300000}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
gcc -O0 -fno-pie -no-pie -fcf-protection=none -pthread -o "$tmp/harm" tests/progs/harm.c
gcc -O2 -o "$tmp/rusage" benches/rusage.c
[ -x "$W" ] || cargo build --release -p runtime --bin wprobe >/dev/null

# Median wall time (ns) of REPEATS runs of the command.
median() {
  local v=()
  for _ in $(seq "$REPEATS"); do
    v+=("$("$tmp/rusage" "$@" 3>&1 >/dev/null 2>/dev/null | awk '{print $1}')")
  done
  printf '%s\n' "${v[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

slope() { # wprobe, program, per-hit ns
  local w=$1 prog=$2 t1 t2
  t1=$(median "$w" run --transport inproc -e "$prog" -c "$tmp/harm strs $N1")
  t2=$(median "$w" run --transport inproc -e "$prog" -c "$tmp/harm strs $N2")
  echo $(( (t2 - t1) / (N2 - N1) ))
}

with_str="uprobe:$tmp/harm:strs { @[str(arg0), str(arg1)] = count(); }"
without="uprobe:$tmp/harm:strs { @[arg0, arg1] = count(); }"
echo "str(): ns per hit (slope $N1 -> $N2 calls, median of $REPEATS)"
printf '  %-28s %10s %10s %10s\n' wprobe "no str" "2 str()" "per str"
for w in "$W" ${BEFORE:+"$BEFORE"}; do
  a=$(slope "$w" "$without")
  b=$(slope "$w" "$with_str")
  printf '  %-28s %10d %10d %10d\n' "$(basename "$(dirname "$w")")/$(basename "$w")" "$a" "$b" $(( (b - a) / 2 ))
done

echo
echo "full ring: the command's wall time for $RING_N printf hits (ring 4 KiB, output to /dev/null)"
prog="uprobe:$tmp/harm:strs { printf(\"%d\\n\", arg1); }"
u=$(median "$tmp/harm" strs "$RING_N")
awk -v t="$u" 'BEGIN { printf "  %-28s %12.3f s\n", "untraced", t / 1e9 }'
for policy in block drop; do
  t=$(WPROBE_INPROC_RING_BYTES=4096 median "$W" run --transport inproc --ring-full "$policy" -o /dev/null -e "$prog" -c "$tmp/harm strs $RING_N")
  awk -v t="$t" -v p="--ring-full=$policy" 'BEGIN { printf "  %-28s %12.3f s\n", p, t / 1e9 }'
done
