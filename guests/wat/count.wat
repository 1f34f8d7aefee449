;; count.wat: count the hits of a probe in a local variable (linear memory
;; persists across hits) and log the running count. No manifest: bind the
;; handler to a location on the command line.
;;
;;   wprobe run guests/wat/count.wat --probe target_fn=count -- ./probe_target
;;   count:target_fn pid P tid T cpu C 1.0: (1)
;;   ... (2), (3)
(module
  (import "wprobe" "emit_log" (func $emit_log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  ;; offset 0: the counter; offset 8: the log data; offset 16: one descriptor.
  (func (export "count") (result i32)
    (i64.store (i32.const 0) (i64.add (i64.load (i32.const 0)) (i64.const 1)))
    (i64.store (i32.const 8) (i64.load (i32.const 0)))
    (i32.store (i32.const 16) (i32.const 0x800000)) ;; RAW_WORDS at 0
    (drop (call $emit_log (i32.const 1) (i32.const 0) (i32.const 8) (i32.const 8)
                (i32.const 16) (i32.const 1)))
    (i32.const 0)))
