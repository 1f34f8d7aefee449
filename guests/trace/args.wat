;; args.wat: `wprobe trace`'s handlers (trace.wat) that also log the first
;; argument (rdi) at the entry and the return value (rax) again at the
;; return. Words after the standard ones show as the call's arguments and
;; as its value in the default view (uftrace's `-A`/`-R` style):
;;
;;   wprobe trace --handler 'fib=guests/trace/args.wat' -- ./prog
;;       ...  |   fib(10) {
;;       ...  |   } = 55; /* fib */
;;
;; (`--handler FILE` alone uses it for every function.)
(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "entry_reg" (func $entry_reg (param i32) (result i64)))
  (import "wprobe" "elapsed_ns" (func $elapsed_ns (result i64)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)

  (func (export "trace_entry") (result i32)
    (i64.store (i32.const 0) (call $read_reg (i32.const 0x0e) (i32.const 0))) ;; rsp
    (i64.store (i32.const 8) (call $read_reg (i32.const 0x0a) (i32.const 0))) ;; rdi
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 0x7472) (i32.const 1)
                (i32.const 0) (i32.const 16) (i32.const 64) (i32.const 1)))
    (i32.const 0))

  (func (export "trace_exit") (result i32)
    (i64.store (i32.const 0) (call $read_reg (i32.const 0x06) (i32.const 0))) ;; rax
    (i64.store (i32.const 8) (call $entry_reg (i32.const 0x0e)))              ;; entry rsp
    (i64.store (i32.const 16) (call $elapsed_ns))
    (i64.store (i32.const 24) (i64.load (i32.const 0)))                       ;; rax, shown
    (i32.store (i32.const 64) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 0x7472) (i32.const 2)
                (i32.const 0) (i32.const 32) (i32.const 64) (i32.const 1)))
    (i32.const 0)))
