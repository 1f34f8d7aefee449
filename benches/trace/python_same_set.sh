#!/usr/bin/env bash
# benches/trace/python_same_set.sh - Debian's /usr/bin/python3.11 traced by
# `uftrace record -P .` and by `wprobe trace --transport inproc --report`
# restricted to the functions uftrace records: total wall time side by side.
#
# uftrace patches the executable's named (dynamic-symbol) functions its
# dynamic patching accepts and hooks library calls through the PLT; wprobe
# traces more by default (the functions only the unwind table bounds, and
# the ones uftrace cannot patch, such as `_PyEval_EvalFrameDefault`). So
# wprobe runs with `--plt`, `-X 'sub_*'` (functions no symbol names) and
# one `-X NAME` for each named function it recorded that uftrace's report
# lacks (found by a first pair of runs), and the calls each recorded are
# printed next to the times: the same set when they agree.
#
# usage: benches/trace/python_same_set.sh [REPEATS] [N]   (sums i*i for i < N)
# env:   WPROBE (default target/release/wprobe), PYTHON (/usr/bin/python3.11)
set -euo pipefail
R=${1:-5}
N=${2:-300000}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
W=${WPROBE:-$ROOT/target/release/wprobe}
P=${PYTHON:-/usr/bin/python3.11}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-python-set.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
S="print(sum(i*i for i in range($N)))"
t() { local s e; s=$(date +%s%N); "$@" >"$WORK/out" 2>"$WORK/err" || true; e=$(date +%s%N); echo $(( (e - s) / 1000000 )); }
median() { sort -n | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'; }
# uftrace's report: `NAME CALLS`, sorted; wprobe's `NAME@plt` is `NAME` there.
ureport() { uftrace report -d "$1" 2>/dev/null | awk 'NR > 2 && $NF !~ /:/ { gsub(/,/, "", $5); print $NF, $5 }' | sort; }
wreport() { awk 'NR > 2 { gsub(/,/, "", $5); n = $NF; sub(/@plt$/, "", n); print n, $5 }' "$1" | sort; }

want=$("$P" -c "$S")
(cd "$WORK" && uftrace record -P . -d "$WORK/u.data" "$P" -c "$S" >/dev/null 2>&1)
ureport "$WORK/u.data" > "$WORK/u.txt"
"$W" trace --transport inproc --plt -X 'sub_*' --report -o "$WORK/w0" -- "$P" -c "$S" >/dev/null 2>&1
wreport "$WORK/w0" > "$WORK/w0.txt"
join -v2 "$WORK/u.txt" "$WORK/w0.txt" | awk '{ print $1 }' > "$WORK/only_w"
X=(--plt -X 'sub_*')
while read -r f; do X+=(-X "$f"); done < "$WORK/only_w"

: > "$WORK/u"; : > "$WORK/f"; : > "$WORK/w"
same=yes
for _ in $(seq "$R"); do
  t "$P" -c "$S" >> "$WORK/u"
  (cd "$WORK" && t uftrace record -P . -d "$WORK/u.data" "$P" -c "$S") >> "$WORK/f"
  [ "$(cat "$WORK/out")" = "$want" ] || same=no
  t "$W" trace --transport inproc --report -o "$WORK/report" "${X[@]}" -- "$P" -c "$S" >> "$WORK/w"
  [ "$(cat "$WORK/out")" = "$want" ] || same=no
  wcalls=$(sed -n 's/.*trace: \([0-9]*\) calls.*/\1/p' "$WORK/err")
done
fcalls=$(awk '{ n += $2 } END { print n }' "$WORK/u.txt")
wreport "$WORK/report" > "$WORK/w.txt"
differ=$(join -a1 -a2 -e0 -o 0,1.2,2.2 "$WORK/u.txt" "$WORK/w.txt" | awk '$2 != $3' | wc -l)
u=$(median < "$WORK/u"); f=$(median < "$WORK/f"); w=$(median < "$WORK/w")
echo "python, the same functions: $P -c '$S', REPEATS=$R, medians; wprobe $(git -C "$ROOT" rev-parse --short HEAD); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "wprobe excludes $(wc -l < "$WORK/only_w") named functions uftrace does not record (and every sub_*)"
printf "%-34s %8s %10s %9s\n" "" "wall ms" "calls" "×uftrace"
printf "%-34s %8s %10s %9s\n" "untraced" "$u" "-" "-"
printf "%-34s %8s %10s %9s\n" "uftrace record -P ." "$f" "$fcalls" "1.0"
printf "%-34s %8s %10s %9s\n" "wprobe trace --transport inproc" "$w" "$wcalls" \
  "$(awk -v a="$w" -v b="$f" 'BEGIN { printf "%.2f", a / b }')"
echo "functions whose call counts differ between the two reports: $differ; output as untraced: $same"
