;; RUN: run % --probe 0x1000=h -- /bin/true
(module
  (import "wprobe" "read_regs" (func (param i32 i32) (result i64)))
  (func (export "h") (result i32) i32.const 0))
