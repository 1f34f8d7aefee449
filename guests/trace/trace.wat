;; trace.wat: the handlers of `wprobe trace`, and the template of the
;; modules `wprobe trace --handler FILE` runs. wprobe puts two probes on
;; every traced function for such a module: `trace_entry` at its entry,
;; and `trace_exit` as a return probe (`return yes`) at the same address,
;; which runs when the call returns. Each logs one record of raw 8-byte
;; words with major 0x7472 ("tr"); which function it is comes from the
;; probe that ran, not from the record:
;;
;;   entry, minor 1:  [rsp]                      rsp at the entry: the call's identity in its thread
;;   exit,  minor 2:  [rax, entry rsp, elapsed]  return value, the entry's rsp, ns the call took
;;
;; The values come in as parameters (manifest `args rsp` and `args rax
;; entry.rsp elapsed`, which wprobe trace writes for handlers that take
;; them): no host call per value. A handler may take fewer of them, or
;; none, and read the rest with `read_reg`, `entry_reg` and `elapsed_ns`
;; (args.wat does).
;;
;; Words after these are shown as the call's arguments (entry) or extra
;; return values (exit); other records are shown under the call as they
;; are. `wprobe trace --handler FILE` runs another module with the same two
;; exports instead (args.wat logs the first argument too). wprobe embeds
;; this file when it is built, and runs it nowhere: without --handler, the
;; return probe alone is armed, asking for entry notices, and every
;; transport reports each call's entry and return with these same words
;; (docs/trace.md, "Custom handlers").
(module
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)

  ;; Log data at offset 0 (up to 3 words); one descriptor at 64: raw words at 0.
  (func (export "trace_entry") (param $rsp i64) (result i32)
    (i64.store (i32.const 0) (local.get $rsp))
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 0x7472) (i32.const 1)
                (i32.const 0) (i32.const 8) (i32.const 64) (i32.const 1)))
    (i32.const 0)) ;; EXIT

  (func (export "trace_exit") (param $rax i64) (param $entry_rsp i64) (param $elapsed i64)
        (result i32)
    (i64.store (i32.const 0) (local.get $rax))
    (i64.store (i32.const 8) (local.get $entry_rsp))
    (i64.store (i32.const 16) (local.get $elapsed))
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 0x7472) (i32.const 2)
                (i32.const 0) (i32.const 24) (i32.const 64) (i32.const 1)))
    (i32.const 0)))
