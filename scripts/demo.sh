#!/usr/bin/env bash
# The main job: build wprobe and trace a real program nobody here wrote.
# Counts and logs every malloc call of `ls -l /usr` with the RPN handler
# guests/rpn/malloc_count.rpn, armed in libc when the dynamic linker maps it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked -p runtime --bin wprobe
W=target/release/wprobe
LIBC=$(ldd /bin/ls | awk '$1 == "libc.so.6" { print $3 }')
OPCODE=$("$W" list "$LIBC" malloc | awk '$4 == "malloc" { print $3 }')
echo "+ wprobe run guests/rpn/malloc_count.rpn -D LIBC=$LIBC -D MALLOC_OPCODE=$OPCODE -- ls -l /usr" >&2
exec "$W" run guests/rpn/malloc_count.rpn -D "LIBC=$LIBC" -D "MALLOC_OPCODE=$OPCODE" -- ls -l /usr
