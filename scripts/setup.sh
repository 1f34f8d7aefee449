#!/usr/bin/env bash
# Installs what building and testing wprobe needs, idempotently: the wasm32
# Rust target (guest SDK and examples) and the C toolchain pieces the tests
# use to build their targets and C guests (gcc, clang, lld with wasm-ld).
# Running it again changes nothing.
set -euo pipefail

if command -v rustup >/dev/null 2>&1; then
  rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown
fi

missing=()
for tool in gcc clang ld.lld wasm-ld; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=()
  for t in "${missing[@]}"; do
    case "$t" in
      gcc) pkgs+=(gcc libc6-dev) ;;
      clang) pkgs+=(clang) ;;
      ld.lld | wasm-ld) pkgs+=(lld) ;;
    esac
  done
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # One package may provide several tools (lld: ld.lld and wasm-ld).
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
# Debian names wasm-ld per LLVM version; clang finds it under that name too.
if ! command -v wasm-ld >/dev/null 2>&1; then
  for v in /usr/bin/wasm-ld-*; do
    [ -x "$v" ] && ln -sf "$v" /usr/local/bin/wasm-ld 2>/dev/null && break
  done
fi
for tool in gcc clang ld.lld wasm-ld; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup.sh: $tool is still missing" >&2; exit 1; }
done
