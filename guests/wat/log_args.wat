;; log_args.wat: on every call of target_fn(a, b, s) in probe_target
;; (tests/examples/probe_target.c), log a and b as raw 8-byte words and the
;; string s as a string item. The probe point travels in the module's
;; `wprobe.manifest` custom section, so no --probe flag is needed:
;;
;;   wprobe run guests/wat/log_args.wat -- ./probe_target
;;   log_args:target_fn pid P tid T cpu C 1.1: (0, 7) str "hello, probes"
(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "read_str" (func $read_str (param i64 i32 i32) (result i32)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)

  ;; Log data at offset 0:  [a: 8][b: 8][0x01 STRING token][n: u16][n bytes]
  ;; Item descriptors at 1024: raw words at 0, a tokenized item at 16.
  (func (export "on_target_fn") (result i32)
    (local $n i32)
    (i64.store (i32.const 0) (call $read_reg (i32.const 0x0a) (i32.const 0))) ;; rdi = a
    (i64.store (i32.const 8) (call $read_reg (i32.const 0x0b) (i32.const 0))) ;; rsi = b
    (i32.store8 (i32.const 16) (i32.const 0x01))
    (local.set $n
      (call $read_str (call $read_reg (i32.const 0x09) (i32.const 0))       ;; rdx = s
                      (i32.const 19) (i32.const 256)))
    ;; A negative result means the string was unreadable: log it empty.
    (if (i32.lt_s (local.get $n) (i32.const 0)) (then (local.set $n (i32.const 0))))
    (i32.store16 (i32.const 17) (local.get $n))
    (i32.store (i32.const 1024) (i32.const 0x800000)) ;; RAW_WORDS at 0
    (i32.store (i32.const 1028) (i32.const 0x820010)) ;; TOKENIZED at 16
    (drop (call $emit_log (i32.const 1) (i32.const 1)
                (i32.const 0) (i32.add (i32.const 19) (local.get $n))
                (i32.const 1024) (i32.const 2)))
    (i32.const 0)) ;; EXIT

  (@custom "wprobe.manifest"
    "wprobe-manifest 1\n"
    "abi 2\n"
    "module probe_target\n"
    "major 1\n"
    "probe on_target_fn\n"
    "  location offset target_fn\n"
    "  opcode 0x55\n"
    "  minor 1\n"))
