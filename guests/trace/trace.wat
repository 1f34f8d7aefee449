;; trace.wat: the handlers of `wprobe trace`. wprobe puts two probes on
;; every traced function: `trace_entry` at its entry, and `trace_exit` as a
;; return probe (`return yes`) at the same address, which runs when the
;; call returns. Each logs one record of raw 8-byte words with major
;; 0x7472 ("tr"); which function it is comes from the probe that ran, not
;; from the record:
;;
;;   entry, minor 1:  [rsp]                      rsp at the entry: the call's identity in its thread
;;   exit,  minor 2:  [rax, entry rsp, elapsed]  return value, the entry's rsp, ns the call took
;;
;; Words after these are shown as the call's arguments (entry) or extra
;; return values (exit); other records are shown under the call as they
;; are. `wprobe trace --handler FILE` runs another module with the same two
;; exports instead (args.wat logs the first argument too). wprobe embeds
;; this file when it is built.
(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "entry_reg" (func $entry_reg (param i32) (result i64)))
  (import "wprobe" "elapsed_ns" (func $elapsed_ns (result i64)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)

  ;; Log data at offset 0 (up to 3 words); one descriptor at 64: raw words at 0.
  (func (export "trace_entry") (result i32)
    (i64.store (i32.const 0) (call $read_reg (i32.const 0x0e) (i32.const 0))) ;; rsp
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 0x7472) (i32.const 1)
                (i32.const 0) (i32.const 8) (i32.const 64) (i32.const 1)))
    (i32.const 0)) ;; EXIT

  (func (export "trace_exit") (result i32)
    (i64.store (i32.const 0) (call $read_reg (i32.const 0x06) (i32.const 0))) ;; rax
    (i64.store (i32.const 8) (call $entry_reg (i32.const 0x0e)))              ;; rsp at the entry
    (i64.store (i32.const 16) (call $elapsed_ns))
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 0x7472) (i32.const 2)
                (i32.const 0) (i32.const 24) (i32.const 64) (i32.const 1)))
    (i32.const 0)))
