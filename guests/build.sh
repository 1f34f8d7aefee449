#!/usr/bin/env bash
# Builds every handler example of every language:
#
#   bash guests/build.sh                 # c rust zig assemblyscript wat
#   bash guests/build.sh zig c           # some languages
#
# into target/guests/<lang>/<example>.wasm (the workspace's target directory:
# $CARGO_TARGET_DIR when set; WPROBE_GUESTS_OUT=DIR puts <lang>/ under DIR
# instead). The toolchains are the ones scripts/setup.sh installs: clang and
# wasm-ld (C), the wasm32-unknown-unknown target (Rust), Zig from its PyPI
# wheel in .tools/zig-venv (or ZIG=command), AssemblyScript from
# guests/assemblyscript's package-lock.json (npm ci). Zig modules get their
# manifest section and WAT files become binaries through `wprobe compile`
# (WPROBE=path; by default the workspace's debug build, built when missing).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
TARGET="${CARGO_TARGET_DIR:-$ROOT/target}"
case "$TARGET" in /*) ;; *) TARGET="$ROOT/$TARGET" ;; esac
OUT="${WPROBE_GUESTS_OUT:-$TARGET/guests}"
LANGS=("$@")
[ ${#LANGS[@]} -gt 0 ] || LANGS=(c rust zig assemblyscript wat)
# The examples every SDK language has, with the same exports and records.
EXAMPLES=(log_args count_calls histogram watch_counter time_calls map_args faults)

die() {
  echo "guests/build.sh: $*" >&2
  exit 1
}

wprobe_bin() {
  if [ -z "${WPROBE:-}" ]; then
    WPROBE="$TARGET/debug/wprobe"
    if [ ! -x "$WPROBE" ]; then
      (cd "$ROOT" && cargo build -q -p runtime --bin wprobe) || die "building wprobe failed"
    fi
  fi
  [ -x "$WPROBE" ] || die "no wprobe at $WPROBE (set WPROBE=path)"
}

build_c() {
  command -v clang >/dev/null || die "clang not found: run scripts/setup.sh"
  mkdir -p "$OUT/c"
  for e in "${EXAMPLES[@]}"; do
    clang --target=wasm32 -O2 -Wall -Wextra -Werror -nostdlib -mbulk-memory \
      -fuse-ld=lld -Wl,--no-entry -I "$ROOT/guests/c" \
      -o "$OUT/c/$e.wasm" "$ROOT/guests/c/examples/$e.c"
  done
}

build_rust() {
  command -v cargo >/dev/null || die "cargo not found: install Rust (rustup)"
  local dir="$OUT/.rust-target"
  (cd "$ROOT/guests/rust" &&
    env -u RUSTFLAGS -u CARGO_BUILD_TARGET CARGO_TARGET_DIR="$dir" \
      cargo build -q --locked --release --examples --target wasm32-unknown-unknown) ||
    die "building guests/rust failed (needs \`rustup target add wasm32-unknown-unknown\`: scripts/setup.sh)"
  mkdir -p "$OUT/rust"
  for e in "${EXAMPLES[@]}"; do
    cp "$dir/wasm32-unknown-unknown/release/examples/$e.wasm" "$OUT/rust/$e.wasm"
  done
}

zig_cmd() {
  if [ -n "${ZIG:-}" ]; then
    read -r -a Z <<<"$ZIG"
  elif [ -x "$ROOT/.tools/zig-venv/bin/python" ]; then
    Z=("$ROOT/.tools/zig-venv/bin/python" -m ziglang)
  elif command -v zig >/dev/null; then
    Z=(zig)
  else
    die "zig not found: run scripts/setup.sh (Zig's PyPI wheel in .tools/zig-venv), or set ZIG=command"
  fi
}

build_zig() {
  zig_cmd
  wprobe_bin
  mkdir -p "$OUT/zig"
  local tmp
  tmp="$(mktemp -d)"
  for e in "${EXAMPLES[@]}"; do
    # One module for the example, one for the SDK, both for wasm32.
    (cd "$tmp" && "${Z[@]}" build-exe -fno-entry -rdynamic \
      -target wasm32-freestanding -O ReleaseSmall --dep wprobe -Mroot="$ROOT/guests/zig/examples/$e.zig" \
      -target wasm32-freestanding -O ReleaseSmall -Mwprobe="$ROOT/guests/zig/wprobe.zig" \
      --cache-dir "$OUT/.zig-cache" --global-cache-dir "$OUT/.zig-cache" \
      -femit-bin="$tmp/$e.wasm") || { rm -rf "$tmp"; die "zig build-exe of $e failed"; }
    # The post-link step: the manifest string Zig exported becomes the
    # `wprobe.manifest` section (count_calls and faults have none).
    if grep -q 'wprobe.manifest(' "$ROOT/guests/zig/examples/$e.zig"; then
      "$WPROBE" compile --manifest-from-export "$tmp/$e.wasm" -o "$OUT/zig/$e.wasm"
    else
      cp "$tmp/$e.wasm" "$OUT/zig/$e.wasm"
    fi
  done
  rm -rf "$tmp"
}

build_assemblyscript() {
  local dir="$ROOT/guests/assemblyscript"
  local asc="$dir/node_modules/.bin/asc"
  [ -x "$asc" ] || die "the AssemblyScript compiler is not installed: run scripts/setup.sh (npm ci in guests/assemblyscript)"
  mkdir -p "$OUT/assemblyscript"
  for e in "${EXAMPLES[@]}"; do
    (cd "$dir" && "$asc" "examples/$e.ts" --config asconfig.json -o "$OUT/assemblyscript/$e.wasm") ||
      die "asc of $e failed"
  done
}

build_wat() {
  wprobe_bin
  mkdir -p "$OUT/wat"
  for f in "$ROOT"/guests/wat/*.wat; do
    "$WPROBE" compile "$f" -o "$OUT/wat/$(basename "$f" .wat).wasm"
  done
}

for lang in "${LANGS[@]}"; do
  case "$lang" in
    c | rust | zig | assemblyscript | wat) "build_$lang" ;;
    *) die "unknown language \`$lang\` (c, rust, zig, assemblyscript, wat)" ;;
  esac
  echo "guests/build.sh: $lang -> $OUT/$lang"
done
