#!/usr/bin/env bash
# benches/metrics/scrape_cost.sh - does scraping `wprobe run --metrics`
# change what a hit costs the traced process? A same-run comparison.
#
# The target (batches.c) calls hit(i) in batches of BATCH calls, one batch
# every PERIOD_US (default 100,000 calls every 100 ms: about 1 M hits/s),
# and times each batch in the target, ns per call: the thread's CPU time
# (which leaves out the time other processes had the CPU: the machine is
# shared) and wall time. It runs under
#   wprobe run --transport TRANSPORT (inproc) --metrics 127.0.0.1:0
#     -e 'uprobe:…:hit { @c = count(); @h = hist(arg0); }'
# while a scraper alternates phases of PHASE_MS (default 500 ms): scraping
# (curl GET /metrics, one after the other, SCRAPE_GAP_MS (0) apart: as
# often as wprobe answers, far more than any Prometheus) and quiet. Each
# batch that lies wholly inside a scraping phase counts as scraped, wholly
# inside a quiet phase as quiet (batches across a phase boundary are left
# out); the first quiet phase precedes any scrape. Per hit = the median
# batch ns/call of each class minus the untraced loop's median (a run of
# the target alone, before each traced run), in CPU time and in wall time;
# ratio = scraped / quiet, both from the same run. Also reported: the
# slowest batch of each class (wall ns/call: where a copy of the maps,
# during which the target's hits wait, would show) and the scrapes
# answered. Every run's exit output is checked for exactly BATCHES x BATCH
# counts. RUNS runs; the figure is the median of their ratios.
#
# usage: benches/metrics/scrape_cost.sh [WPROBE] [RUNS]
#   WPROBE defaults to target/release/wprobe (build it first)
# env:   TRANSPORT (inproc) BATCHES (300) BATCH (100000) PERIOD_US (100000)
#        PHASE_MS (500) SCRAPE_GAP_MS (0)
set -euo pipefail
if [ "${1:-}" = -h ] || [ "${1:-}" = --help ]; then
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
  exit 2
fi
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
WPROBE=$(realpath "${1:-$ROOT/target/release/wprobe}")
RUNS=${2:-5}
TRANSPORT=${TRANSPORT:-inproc}
BATCHES=${BATCHES:-300}
BATCH=${BATCH:-100000}
PERIOD_US=${PERIOD_US:-100000}
PHASE_MS=${PHASE_MS:-500}
SCRAPE_GAP_MS=${SCRAPE_GAP_MS:-0}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/wprobe-scrape.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
gcc -O0 -g -fno-pie -no-pie -fcf-protection=none -fno-omit-frame-pointer \
  -o "$WORK/batches" "$ROOT/benches/metrics/batches.c"
cd "$WORK"
export WPROBE_CACHE_DIR="$WORK/cache"
PROG="uprobe:$WORK/batches:hit { @c = count(); @h = hist(arg0); }"
median() { sort -n | awk '{ a[NR] = $1 } END { print (NR ? a[int((NR + 1) / 2)] : "nan") }'; }
now() { date +%s%N; }

# The scraper: phases "quiet START END" and "scrape START END" (ns, realtime)
# in phases.txt, scrapes answered in scrapes.txt, until wprobe ($1) exits.
scraper() { # PID ADDR
  local pid=$1 addr=$2 n=0 t0 t1 phase=quiet
  : >phases.txt
  while kill -0 "$pid" 2>/dev/null; do
    t0=$(now)
    t1=$((t0 + PHASE_MS * 1000000))
    if [ $phase = scrape ]; then
      while [ "$(now)" -lt "$t1" ] && kill -0 "$pid" 2>/dev/null; do
        if curl -sf -o /dev/null "http://$addr/metrics"; then n=$((n + 1)); fi
        [ "$SCRAPE_GAP_MS" = 0 ] || sleep "$(awk -v m="$SCRAPE_GAP_MS" 'BEGIN { print m / 1000 }')"
      done
    else
      while [ "$(now)" -lt "$t1" ] && kill -0 "$pid" 2>/dev/null; do sleep 0.02; done
    fi
    echo "$phase $t0 $(now)" >>phases.txt
    if [ $phase = scrape ]; then phase=quiet; else phase=scrape; fi
  done
  echo "$n" >scrapes.txt
}

# Median of column C (3: wall, 4: cpu) of the batches wholly inside phases
# of kind K; with MAX, their largest value instead.
of_class() { # K C [max]
  awk -v k="$1" -v c="$2" 'NR == FNR { if ($1 == k) { s[++n] = $2; e[n] = $3 }; next }
    { for (i = 1; i <= n; i++) if ($1 >= s[i] && $2 <= e[i]) { print $c; break } }' phases.txt ns.txt |
    if [ "${3:-}" = max ]; then sort -n | tail -n1; else median; fi
}
count_class() {
  awk -v k="$1" 'NR == FNR { if ($1 == k) { s[++n] = $2; e[n] = $3 }; next }
    { for (i = 1; i <= n; i++) if ($1 >= s[i] && $2 <= e[i]) { c++; break } } END { print c + 0 }' \
    phases.txt ns.txt
}
sub() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", a - b }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.3f", a / b }'; }

echo "wprobe=$WPROBE transport=$TRANSPORT"
echo "runs=$RUNS batches=$BATCHES x $BATCH calls every ${PERIOD_US} us" \
  "($((BATCH * 1000000 / PERIOD_US)) calls/s), phases of ${PHASE_MS} ms, scrapes ${SCRAPE_GAP_MS} ms apart"
echo "kernel=$(uname -r) cpus=$(nproc) load=$(cut -d' ' -f1 /proc/loadavg)"
echo "ns per hit: cpu (wall), loop cost subtracted; worst: the slowest batch's wall ns per call"
printf "%-4s %12s %16s %16s %9s %9s %11s %11s %8s %9s %9s\n" run "loop" "quiet" "scraped" \
  "batches" "" "quiet worst" "scr. worst" scrapes "cpu ratio" "wall ratio"
cr=()
wr=()
for r in $(seq 1 "$RUNS"); do
  rm -f ns.txt err.txt out.txt
  ./batches "$BATCHES" "$BATCH" "$PERIOD_US" ns.txt
  bw=$(awk '{ print $3 }' ns.txt | median)
  bc=$(awk '{ print $4 }' ns.txt | median)
  rm -f ns.txt
  "$WPROBE" run --transport "$TRANSPORT" --metrics 127.0.0.1:0 -e "$PROG" \
    -c "./batches $BATCHES $BATCH $PERIOD_US ns.txt" >out.txt 2>err.txt &
  wp=$!
  addr=""
  for _ in $(seq 1 1000); do
    addr=$(sed -n 's|^wprobe: metrics at http://\(.*\)/metrics$|\1|p' err.txt)
    [ -n "$addr" ] && break
    sleep 0.01
  done
  [ -n "$addr" ] || { echo "scrape_cost: no metrics address" >&2; cat err.txt >&2; exit 1; }
  scraper "$wp" "$addr"
  wait "$wp" || { echo "scrape_cost: wprobe failed" >&2; cat err.txt >&2; exit 1; }
  c=$(sed -n 's/^@c: //p' out.txt)
  [ "$c" = $((BATCHES * BATCH)) ] || {
    echo "scrape_cost: @c is ${c:-missing}, not $((BATCHES * BATCH))" >&2
    cat out.txt err.txt >&2
    exit 1
  }
  qc=$(sub "$(of_class quiet 4)" "$bc"); qw=$(sub "$(of_class quiet 3)" "$bw")
  sc=$(sub "$(of_class scrape 4)" "$bc"); sw=$(sub "$(of_class scrape 3)" "$bw")
  cr+=("$(div "$sc" "$qc")")
  wr+=("$(div "$sw" "$qw")")
  printf "%-4s %12s %16s %16s %9s %9s %11s %11s %8s %9s %9s\n" "$r" "$bc($bw)" "$qc($qw)" "$sc($sw)" \
    "q $(count_class quiet)" "s $(count_class scrape)" "$(of_class quiet 3 max)" \
    "$(of_class scrape 3 max)" "$(cat scrapes.txt)" "${cr[-1]}" "${wr[-1]}"
done
echo "median ratio, scraped / quiet per-hit cost (same run): cpu $(printf '%s\n' "${cr[@]}" | median)," \
  "wall $(printf '%s\n' "${wr[@]}" | median)"
echo "load=$(cut -d' ' -f1 /proc/loadavg)"
