#!/usr/bin/env bash
# benches/inproc/footprint.sh - what --transport inproc costs a process
# before its first hit: the time to arm 1, 100 and 10,000 sites, and the
# target's resident memory (VmRSS) before and after arming.
#
# The target: a generated C program of 10,000 functions f_0 .. f_9999 (each
# large enough for a jump), built -O0 non-PIE, that waits on stdin (nothing
# is called while measuring). For each K in 1, 100, 10,000 and each of
# REPEATS runs: the target is started, its VmRSS read, `wprobe run
# --transport inproc -p PID` attached with a handler on K functions (f_1234;
# f_100 .. f_199; all); once the last site's first byte is a jump the VmRSS
# is read again and wprobe stopped with SIGINT. The handler (an RPN program
# of K probes, each `abort`) does nothing. "arm ms" is wprobe's own
# measure (WPROBE_DEBUG: from the first probe planned to the target let go:
# the agent loaded, the modules loaded (compiled for it beforehand: the
# cache is warmed first), the stubs and jumps written, every thread
# stopped meanwhile); the medians are reported. "ptrace arm ms" is the
# ptrace transport arming the same sites (int3s), for comparison, with
# (int3s), for comparison.
#
# usage: benches/inproc/footprint.sh [REPEATS]
# env:   WPROBE (default target/release/wprobe, built when missing)
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
REPEATS=${1:-3}
TARGET_DIR=${CARGO_TARGET_DIR:-$ROOT/target}
W=${WPROBE:-$TARGET_DIR/release/wprobe}
if [ ! -x "$W" ]; then
  (cd "$ROOT" && cargo build --release -p runtime --bin wprobe >&2)
fi
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-footprint.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
{
  echo '#include <stdio.h>'
  echo 'volatile long g;'
  for ((i = 0; i < 10000; i++)); do
    echo "__attribute__((noinline)) long f_$i(long x) { g += x; return x * $i + g; }"
  done
  echo 'int main(void) { char b[8]; puts("ready"); fflush(stdout);'
  echo '  if (!fgets(b, sizeof b, stdin)) return 0; return (int)f_0(1); }'
} >"$WORK/many.c"
gcc -O0 -fno-pie -no-pie -fcf-protection=none -o "$WORK/many" "$WORK/many.c"
T=$WORK/many
rss() { awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
median() { sort -n | awk 'NF { a[++n] = $1 } END { print a[int((n + 1) / 2)] }'; }
addr() { nm "$T" | awk -v f="$1" '$3 == f { print "0x" $1 }'; }
first_byte() { dd if="/proc/$1/mem" bs=1 skip=$(($2)) count=1 2>/dev/null | od -An -tx1 | tr -d ' '; }

# prog K FIRST: an RPN program of K probes on f_FIRST .. f_(FIRST+K-1).
prog() {
  { echo "name = $T"; for ((i = $2; i < $2 + $1; i++)); do printf 'offset = f_%d\n abort\n' "$i"; done; } \
    >"$WORK/p$1.rpn"
}
prog 1 1234
prog 100 100
prog 10000 0

# one TRANSPORT K LASTFUNC: writes "arm_ms rss_before_kb rss_after_kb" to $WORK/res
one() {
  local tr=$1 k=$2 last=$3 pid wp a want i
  rm -f "$WORK/tout"
  mkfifo "$WORK/in"
  "$T" <"$WORK/in" >"$WORK/tout" &
  pid=$!
  exec 7>"$WORK/in"
  while ! grep -q ready "$WORK/tout" 2>/dev/null; do sleep 0.01; done
  local before
  before=$(rss "$pid")
  WPROBE_DEBUG=1 "$W" run --transport "$tr" "$WORK/p$k.rpn" -p "$pid" \
    >/dev/null 2>"$WORK/err" &
  wp=$!
  a=$(addr "$last")
  if [ "$tr" = inproc ]; then want=e9; else want=cc; fi
  for ((i = 0; i < 6000; i++)); do
    [ "$(first_byte "$pid" "$a")" = "$want" ] && break
    sleep 0.01
  done
  local after
  after=$(rss "$pid")
  kill -INT "$wp"
  wait "$wp" || true
  exec 7>&-
  wait "$pid" || true
  rm -f "$WORK/in"
  local ms
  ms=$(sed -n 's/.*: armed in \([0-9.]*\) ms.*/\1/p' "$WORK/err")
  echo "${ms:-?} $before $after" >"$WORK/res"
}

printf "%-8s %8s %14s %14s %14s %14s\n" sites "" "inproc arm ms" "ptrace arm ms" "RSS before KiB" "RSS after KiB"
# Compiled once (the module cache holds the runtime's and the agent's
# artifacts), so no run below measures compilation.
for spec in "1 f_1234" "100 f_199" "10000 f_9999"; do
  read -r k last <<<"$spec"
  one inproc "$k" "$last"
  one ptrace "$k" "$last"
done
for spec in "1 f_1234" "100 f_199" "10000 f_9999"; do
  read -r k last <<<"$spec"
  ia="" pa="" rb="" ra=""
  for ((r = 0; r < REPEATS; r++)); do
    one inproc "$k" "$last"
    read -r ms b a <"$WORK/res"
    ia+="$ms"$'\n'; rb+="$b"$'\n'; ra+="$a"$'\n'
    one ptrace "$k" "$last"
    read -r ms _ _ <"$WORK/res"
    pa+="$ms"$'\n'
  done
  printf "%-8s %8s %14s %14s %14s %14s\n" "$k" "" "$(median <<<"$ia")" "$(median <<<"$pa")" \
    "$(median <<<"$rb")" "$(median <<<"$ra")"
done
