#!/usr/bin/env bash
# benches/uftrace_suite/run.sh - `wprobe trace` measured against uftrace's own
# test suite: the plain call-tree tests (cases.txt says which, and why the
# others are left out), each program built at -O0 and -O2, traced under each
# transport, its normalised output compared with the test's expected one;
# `uftrace live` on the -pg build of the same program as the reference when
# uftrace is installed.
#
#   benches/uftrace_suite/run.sh                    # every in-scope test
#   ONLY='t00[1-9]' benches/uftrace_suite/run.sh    # the tests matching a regex
#   TRANSPORTS=inproc LEVELS=O2 benches/uftrace_suite/run.sh
#
# Nothing of uftrace is kept in this repository: its tests/ directory is
# exported at run time from a git copy of uftrace (UFTRACE_SRC: a bare git
# directory or a checkout; /work/.mirror/namhyung+uftrace/repo by default),
# and the run says SKIP and exits 0 when there is none. WPROBE is the wprobe
# binary (target/release/wprobe by default; build it first). The diffs of
# the cases that did not match are left in OUT (a temporary directory by
# default, printed at the end). Needs gcc, g++ and python3; ptrace must be
# allowed (the other transports need it too to start the program).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
src=${UFTRACE_SRC:-/work/.mirror/namhyung+uftrace/repo}
wprobe=${WPROBE:-$root/target/release/wprobe}

if [ -d "$src/tests" ]; then
  gitdir=""
elif git --git-dir="$src" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  gitdir=$src
elif git --git-dir="$src/.git" rev-parse --verify -q HEAD >/dev/null 2>&1; then
  gitdir=$src/.git
else
  echo "SKIP: no copy of uftrace's source at $src (set UFTRACE_SRC to a git clone of github.com/namhyung/uftrace)"
  exit 0
fi
[ -x "$wprobe" ] || { echo "no wprobe binary at $wprobe (cargo build --release, or set WPROBE)" >&2; exit 2; }
for tool in gcc g++ python3; do
  command -v $tool >/dev/null || { echo "$tool is needed" >&2; exit 2; }
done

work=$(mktemp -d /tmp/uftrace-suite.XXXXXX)
trap 'rm -rf "$work"' EXIT
if [ -n "$gitdir" ]; then
  git --git-dir="$gitdir" archive HEAD tests utils | tar -x -C "$work"
  rev=$(git --git-dir="$gitdir" rev-parse --short HEAD)
else
  cp -r "$src/tests" "$src/utils" "$work/"
  rev=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo "?")
fi
out=${OUT:-$(mktemp -d /tmp/uftrace-suite-diffs.XXXXXX)}
uft=""
if [ "${REFERENCE:-1}" = 1 ] && command -v uftrace >/dev/null; then
  uft=$(command -v uftrace)
fi

ref=none
[ -z "$uft" ] || ref=$("$uft" --version | head -1)
echo "uftrace tests at $rev; $("$wprobe" --version 2>/dev/null | head -1) at $(git -C "$root" rev-parse --short HEAD); reference: $ref"
python3 "$here/suite.py" --tests "$work/tests" --cases "$here/cases.txt" \
  --wprobe "$wprobe" --transports "${TRANSPORTS:-auto,inproc,ptrace}" \
  --levels "${LEVELS:-O0,O2}" --uftrace "$uft" --only "${ONLY:-.}" \
  --out "$out" --timeout "${TIMEOUT:-30}"
