#!/usr/bin/env bash
# Installs what building and testing wprobe needs, idempotently: the wasm32
# Rust target (guest SDK and examples), the C toolchain pieces the tests
# use to build their targets and C guests (gcc, g++, clang, lld with
# wasm-ld), gdb (the tests check what `exit 1` and `exit 3` leave for it),
# setpriv/unshare/script (util-linux: tests run wprobe as another user, in
# a private mount namespace, on a terminal), bpftrace (the one-liner
# table is compared with its output), uftrace (`wprobe trace`'s call counts
# are compared with its own) and ltrace (the trace benchmark's other
# baseline), and prometheus with promtool (the metrics tests). Running it
# again changes nothing.
set -euo pipefail

if command -v rustup >/dev/null 2>&1; then
  rustup target add wasm32-unknown-unknown >/dev/null 2>&1 || rustup target add wasm32-unknown-unknown
fi

# Debian names wasm-ld per LLVM version; clang finds it under that name too.
link_wasm_ld() {
  if ! command -v wasm-ld >/dev/null 2>&1; then
    for v in /usr/bin/wasm-ld-*; do
      if [ -x "$v" ] && ln -sf "$v" /usr/local/bin/wasm-ld 2>/dev/null; then
        break
      fi
    done
  fi
  # No wasm-ld yet (lld not installed) is not an error here: it is
  # installed below and linked again.
  return 0
}
link_wasm_ld

missing=()
TOOLS=(gcc g++ clang ld.lld wasm-ld objcopy readelf objdump gdb setpriv unshare script bpftrace uftrace ltrace)
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
if [ ${#missing[@]} -gt 0 ]; then
  pkgs=()
  for t in "${missing[@]}"; do
    case "$t" in
      gcc) pkgs+=(gcc libc6-dev) ;;
      g++) pkgs+=(g++) ;;
      clang) pkgs+=(clang) ;;
      gdb) pkgs+=(gdb) ;;
      setpriv | unshare) pkgs+=(util-linux) ;;
      script) pkgs+=(bsdutils) ;;
      bpftrace) pkgs+=(bpftrace) ;;
      uftrace) pkgs+=(uftrace) ;;
      ltrace) pkgs+=(ltrace) ;;
      ld.lld | wasm-ld) pkgs+=(lld) ;;
      objcopy | readelf | objdump) pkgs+=(binutils) ;;
    esac
  done
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # One package may provide several tools (lld: ld.lld and wasm-ld).
  mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${pkgs[@]}" >/dev/null
fi
link_wasm_ld
for tool in "${TOOLS[@]}"; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup.sh: $tool is still missing" >&2; exit 1; }
done

# Zig and AssemblyScript handlers (guests/build.sh), pinned: Zig from its
# PyPI wheel in a virtual environment of the repository (.tools/zig-venv;
# Debian's pip refuses system-wide installs), the AssemblyScript compiler
# from guests/assemblyscript/package-lock.json (npm ci).
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
ZIG_VERSION=0.15.2
ZIG_VENV="$ROOT/.tools/zig-venv"
apt_install() {
  local SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}
# Tests trace Debian's /usr/bin/python3 as a large real program (the plan
# cache's warm runs, runtime/tests/all/cache.rs).
[ -x /usr/bin/python3 ] || apt_install python3
if [ "$("$ZIG_VENV/bin/python" -m ziglang version 2>/dev/null)" != "$ZIG_VERSION" ]; then
  command -v python3 >/dev/null 2>&1 || apt_install python3
  rm -rf "$ZIG_VENV"
  mkdir -p "$ROOT/.tools"
  if ! python3 -m venv "$ZIG_VENV" >/dev/null 2>&1; then
    apt_install python3-venv
    rm -rf "$ZIG_VENV"
    python3 -m venv "$ZIG_VENV"
  fi
  "$ZIG_VENV/bin/pip" install -q --disable-pip-version-check "ziglang==$ZIG_VERSION"
fi
command -v npm >/dev/null 2>&1 || apt_install nodejs npm
AS_DIR="$ROOT/guests/assemblyscript"
AS_VERSION="$(sed -n 's/.*"assemblyscript": "\([0-9.]*\)".*/\1/p' "$AS_DIR/package.json")"
if [ "$("$AS_DIR/node_modules/.bin/asc" --version 2>/dev/null)" != "Version $AS_VERSION" ]; then
  (cd "$AS_DIR" && npm ci --no-audit --no-fund --loglevel=error >/dev/null)
fi
"$ZIG_VENV/bin/python" -m ziglang version >/dev/null || { echo "setup.sh: zig is still missing" >&2; exit 1; }
"$AS_DIR/node_modules/.bin/asc" --version >/dev/null || { echo "setup.sh: asc is still missing" >&2; exit 1; }

# prometheus and promtool (Debian's `prometheus`, 2.42 on bookworm): the
# metrics tests (runtime/tests/all/metrics.rs) start a Prometheus of their
# own on 127.0.0.1 and check what `wprobe run --metrics` serves with
# promtool. Its recommends (exporters) are not needed.
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends prometheus >/dev/null
fi
for tool in prometheus promtool; do
  command -v "$tool" >/dev/null 2>&1 || { echo "setup.sh: $tool is still missing" >&2; exit 1; }
done

# bpftrace's conformance suite (runtime/tests/conformance) builds test
# programs with USDT probes: they need sys/sdt.h (systemtap-sdt-dev).
if ! [ -e /usr/include/sys/sdt.h ] && ! [ -e /usr/include/x86_64-linux-gnu/sys/sdt.h ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq systemtap-sdt-dev >/dev/null
fi

# USDT tests (runtime/tests/all/usdt.rs): Debian's python3.11 (its
# `python:*` probes) and PostgreSQL 15 (`postgresql:*`; the tests start a
# server of their own as a non-root user in a scratch directory, never
# Debian's default cluster).
usdt_pkgs=()
[ -x /usr/bin/python3.11 ] || usdt_pkgs+=(python3.11)
[ -x /usr/lib/postgresql/15/bin/postgres ] || usdt_pkgs+=(postgresql-15)
[ -x /usr/bin/psql ] || usdt_pkgs+=(postgresql-client-15)
if [ ${#usdt_pkgs[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${usdt_pkgs[@]}" >/dev/null
fi
for f in /usr/bin/python3.11 /usr/lib/postgresql/15/bin/postgres /usr/bin/psql; do
  [ -x "$f" ] || { echo "setup.sh: $f is still missing" >&2; exit 1; }
done
