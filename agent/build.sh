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
mv "$out.tmp" "$out"
