#!/bin/sh
# Checks that an agent object is self-contained: no interpreter, no
# DT_NEEDED, no TLS, no undefined symbols, only R_X86_64_RELATIVE dynamic
# relocations, and no %fs-relative memory access (TLS) of its own.
set -eu
f=$1
fail() { echo "agent check: $f: $*" >&2; exit 1; }
readelf -lW "$f" | grep -q INTERP && fail "has PT_INTERP"
readelf -lW "$f" | grep -q ' TLS ' && fail "has PT_TLS"
readelf -dW "$f" | grep -q NEEDED && fail "has DT_NEEDED: $(readelf -dW "$f" | grep NEEDED)"
und=$(readelf --dyn-syms -W "$f" | awk '$7 == "UND" && $8 != "" {print $8}')
[ -z "$und" ] || fail "undefined symbols: $und"
other=$(readelf -rW "$f" | awk '/^[0-9a-f]+ / && $3 != "R_X86_64_RELATIVE" {print $3}' | sort -u)
[ -z "$other" ] || fail "relocation types other than R_X86_64_RELATIVE: $other"
fs=$(objdump -d --no-show-raw-insn "$f" | grep -c '%fs:' || true)
[ "$fs" = 0 ] || fail "$fs instructions address memory through %fs"
exit 0
