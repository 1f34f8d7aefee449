#!/bin/sh
# Builds the agent: target/agent/wprobe-agent.so (or $1).
#
# cargo compiles a no_std static library for x86_64-unknown-linux-gnu (a
# hard-float SysV target, so floats cross wasmtime's libcalls in SSE
# registers as Cranelift expects; x86_64-unknown-none is soft-float), then
# ld.lld links it alone — no crt files, no libc, no libgcc — into a shared
# object whose symbols bind locally (-Bsymbolic, version script), so the only
# dynamic relocations left are R_X86_64_RELATIVE, and any undefined symbol is
# a link error (-z defs). scripts/check below verifies the result.
#
# Two files: the object with its symbols and DWARF (`$out`, for profiles of
# the agent: benches/trace/where.sh), and the same object stripped of them
# (`$out` with `.so` replaced by `.stripped.so`): what wprobe embeds and
# loads. Stripping removes only sections no segment holds; the loaded
# bytes are the same (checked below).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out=${1:-$here/../target/agent/wprobe-agent.so}
target=x86_64-unknown-linux-gnu
cd "$here"
cargo build --release --target $target ${AGENT_CARGO_FLAGS:-}
lib=$here/target/$target/release/libwprobe_agent.a
mkdir -p "$(dirname "$out")"
ld.lld -m elf_x86_64 -shared -o "$out.tmp" \
  -Bsymbolic -z defs -z now -z relro -z noexecstack -z max-page-size=4096 \
  --gc-sections --hash-style=gnu --build-id=sha1 --eh-frame-hdr \
  --version-script "$here/exports.map" -soname wprobe-agent.so \
  -u wprobe_agent_init -u wprobe_agent_load -u wprobe_agent_sites -u wprobe_agent_dispatch \
  -u wprobe_agent_trap -u wprobe_agent_bench -u wprobe_agent_fast \
  -u wprobe_agent_fast_table \
  "$lib"
sh "$here/check.sh" "$out.tmp"
stripped=${out%.so}.stripped.so
objcopy --strip-all "$out.tmp" "$stripped.tmp"
sh "$here/check.sh" "$stripped.tmp"
# The same program headers, and the same bytes in every allocated section.
segs() { readelf -lW "$1" | awk '$1 == "LOAD" || $1 == "GNU_RELRO" {print $1, $3, $5, $6}'; }
[ "$(segs "$out.tmp")" = "$(segs "$stripped.tmp")" ] ||
  { echo "agent build: stripping moved a segment" >&2; exit 1; }
for s in $(readelf -SW "$out.tmp" | sed -n 's/^ *\[ *[0-9]*\] *//p' | awk '$7 ~ /A/ && $2 != "NOBITS" { print $1 }'); do
  objcopy -O binary --only-section="$s" "$out.tmp" "$out.sec.a"
  objcopy -O binary --only-section="$s" "$stripped.tmp" "$out.sec.b"
  cmp -s "$out.sec.a" "$out.sec.b" ||
    { echo "agent build: stripping changed section $s" >&2; exit 1; }
done
rm -f "$out.sec.a" "$out.sec.b"
mv "$stripped.tmp" "$stripped"
mv "$out.tmp" "$out"
