#!/usr/bin/env bash
# Installs what building and testing wprobe needs, idempotently: the wasm32
# Rust target (guest SDK and examples) and the C toolchain pieces the tests
# use to build their targets and C guests (gcc, clang, lld).
set -euo pipefail

if command -v rustup >/dev/null 2>&1; then
  rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown
fi

missing=()
for tool in gcc clang ld.lld; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=()
  for t in "${missing[@]}"; do
    case "$t" in
      gcc) pkgs+=(gcc libc6-dev) ;;
      clang) pkgs+=(clang) ;;
      ld.lld) pkgs+=(lld) ;;
    esac
  done
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
