#!/usr/bin/env bash
# The main job: build wprobe and trace a real program nobody here wrote.
# Counts and logs every malloc call of `ls -l /usr` with the RPN handler
# guests/rpn/malloc_count.rpn, armed in libc when the dynamic linker maps it.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked -p runtime --bin wprobe
echo "+ wprobe run guests/rpn/malloc_count.rpn -- ls -l /usr" >&2
exec target/release/wprobe run guests/rpn/malloc_count.rpn -- ls -l /usr
