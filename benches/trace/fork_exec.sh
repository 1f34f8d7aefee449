#!/usr/bin/env bash
# benches/trace/fork_exec.sh - what following a child costs under -f: a
# shell loop that executes a small program N times (tests/progs/forkexecd.c,
# whose exec_work is probed: 3 hits a run), under wprobe run --follow with
# each transport. Per child = (T(N2) - T(N1)) / (N2 - N1): the slope between
# two loop lengths, so start-up cancels; T is the median wall time of
# REPEATS runs, the rows interleaved. A second loop executes /bin/true (no
# probe in it: followed without an agent under inproc) before one run of
# the probed program. The untraced loop's own slope is the baseline.
#
# usage: benches/trace/fork_exec.sh [REPEATS]
# env:   WPROBE (default target/release/wprobe), N1 (10), N2 (60)
set -euo pipefail
R=${1:-5}
N1=${N1:-10} N2=${N2:-60}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${WPROBE:-$ROOT/target/release/wprobe}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-forkexec.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
P=$ROOT/tests/progs
gcc -O0 -shared -fPIC -o "$WORK/libforkwork.so" "$P/libforkwork.c"
gcc -O0 -o "$WORK/forkexecd" "$P/forkexecd.c" -L"$WORK" -lforkwork -Wl,-rpath,"$WORK"
printf 'for i in $(seq 1 $1); do %s > /dev/null; done\n' "$WORK/forkexecd" > "$WORK/probed.sh"
printf 'for i in $(seq 1 $1); do /bin/true; done; %s > /dev/null\n' "$WORK/forkexecd" > "$WORK/other.sh"
PROG="uprobe:$WORK/forkexecd:exec_work { @e = count(); }"
t() { local s e; s=$(date +%s%N); "$@" >/dev/null 2>&1 || true; e=$(date +%s%N); echo $(( (e - s) / 1000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
rows="untraced ptrace inproc auto"
for loop in probed other; do
  for r in $rows; do for n in $N1 $N2; do : > "$WORK/$loop.$r.$n"; done; done
  for _ in $(seq "$R"); do
    for n in $N1 $N2; do
      for r in $rows; do
        if [ "$r" = untraced ]; then
          t bash "$WORK/$loop.sh" "$n" >> "$WORK/$loop.$r.$n"
        else
          t "$W" run --transport "$r" --follow -e "$PROG" -c "bash $WORK/$loop.sh $n" >> "$WORK/$loop.$r.$n"
        fi
      done
    done
  done
done
echo "fork_exec: per child executed under -f, REPEATS=$R, N1=$N1 N2=$N2, medians; wprobe $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf "%-10s %-34s %12s %10s\n" "" "loop" "us/child" "-untraced"
for loop in probed other; do
  a=$(median < "$WORK/$loop.untraced.$N1"); b=$(median < "$WORK/$loop.untraced.$N2")
  base=$(( (b - a) / (N2 - N1) ))
  for r in $rows; do
    a=$(median < "$WORK/$loop.$r.$N1"); b=$(median < "$WORK/$loop.$r.$N2")
    s=$(( (b - a) / (N2 - N1) ))
    what="forkexecd (probed) N times"
    [ "$loop" = other ] && what="/bin/true (no probe) N times"
    printf "%-10s %-34s %12s %10s\n" "$r" "$what" "$s" "$((s - base))"
  done
done
