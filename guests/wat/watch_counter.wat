;; watch_counter.wat: a hardware watchpoint on writes to the 8-byte global
;; `counter` of probe_target. The handler finds the watched address in the
;; debug registers (DR6 says which of DR0-DR3 fired) and logs the value
;; just written and the address of the instruction after the write.
;;
;;   wprobe run guests/wat/watch_counter.wat -- ./probe_target
;;   watch_counter:counter pid P tid T cpu C 11.0: (0, 0x401170)
(module
  (import "wprobe" "read_reg" (func $read_reg (param i32 i32) (result i64)))
  (import "wprobe" "read_mem" (func $read_mem (param i64 i32 i32) (result i32)))
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)

  ;; The address watched by the debug register that fired.
  (func $watched (result i64)
    (local $dr6 i64) (local $i i32)
    (local.set $dr6 (call $read_reg (i32.const 0x32) (i32.const 0)))
    (block $found
      (loop $next
        (br_if $found (i64.ne (i64.and (local.get $dr6)
                                       (i64.shl (i64.const 1) (i64.extend_i32_u (local.get $i))))
                              (i64.const 0)))
        (local.set $i (i32.add (local.get $i) (i32.const 1)))
        (br_if $next (i32.lt_u (local.get $i) (i32.const 4))))
      (local.set $i (i32.const 0)))
    (call $read_reg (i32.add (i32.const 0x2c) (local.get $i)) (i32.const 0)))

  (func (export "on_write") (result i32)
    (if (i32.ne (call $read_mem (call $watched) (i32.const 0) (i32.const 8)) (i32.const 8))
      (then (i64.store (i32.const 0) (i64.const -1))))
    (i64.store (i32.const 8) (call $read_reg (i32.const 0x0d) (i32.const 0))) ;; rip
    (i32.store (i32.const 16) (i32.const 0x800000))
    (drop (call $emit_log (i32.const 11) (i32.const 0) (i32.const 0) (i32.const 16)
                (i32.const 16) (i32.const 1)))
    (i32.const 0))

  (@custom "wprobe.manifest"
    "wprobe-manifest 1\n"
    "abi 2\n"
    "module probe_target\n"
    "major 11\n"
    "probe on_write\n"
    "  location offset counter\n"
    "  watch w\n"
    "  length 8\n"
    "  maxhits 2\n"))
