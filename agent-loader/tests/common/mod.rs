//! Handler modules and helpers shared by the agent tests and the bench.
#![allow(dead_code, reason = "each test binary uses a subset")]

use agent_loader::{LoadedAgent, ModuleSpec, Target};
use anyhow::Result;

/// Counts hits in global variable 0.
pub const COUNT_WAT: &str = r#"
(module
  (import "wprobe" "gvar_get" (func $gg (param i64) (result i64)))
  (import "wprobe" "gvar_set" (func $gs (param i64 i64)))
  (memory (export "memory") 1)
  (func (export "count") (result i32)
    (call $gs (i64.const 0) (i64.add (call $gg (i64.const 0)) (i64.const 1)))
    (i32.const 0))
  (func (export "empty") (result i32) (i32.const 0)))
"#;

/// Logs registers (rdi, rsi, rip, rsp, rflags, xmm1 high, eax alias, fs_base,
/// tid, pid) as raw words, and sets rax := rdi + rsi, rbx := 0x1234.
pub const LOGREGS_WAT: &str = r#"
(module
  (import "wprobe" "read_reg" (func $rr (param i32 i32) (result i64)))
  (import "wprobe" "write_reg" (func $wr (param i32 i64) (result i32)))
  (import "wprobe" "current_tid" (func $tid (result i64)))
  (import "wprobe" "current_pid" (func $pid (result i64)))
  (import "wprobe" "emit_log" (func $log (param i32 i32 i32 i32 i32 i32) (result i32)))
  (memory (export "memory") 1)
  (func (export "logregs") (result i32)
    (i64.store (i32.const 0)  (call $rr (i32.const 0x0A) (i32.const 0)))   ;; rdi
    (i64.store (i32.const 8)  (call $rr (i32.const 0x0B) (i32.const 0)))   ;; rsi
    (i64.store (i32.const 16) (call $rr (i32.const 0x0D) (i32.const 0)))   ;; rip
    (i64.store (i32.const 24) (call $rr (i32.const 0x0E) (i32.const 0)))   ;; rsp
    (i64.store (i32.const 32) (call $rr (i32.const 0x0C) (i32.const 0)))   ;; rflags
    (i64.store (i32.const 40) (call $rr (i32.const 0x4E) (i32.const 1)))   ;; xmm1 high
    (i64.store (i32.const 48) (call $rr (i32.const 0x106) (i32.const 0)))  ;; eax
    (i64.store (i32.const 56) (call $rr (i32.const 0x19) (i32.const 0)))   ;; fs_base
    (i64.store (i32.const 64) (call $tid))
    (i64.store (i32.const 72) (call $pid))
    ;; write_reg statuses: rax ok, rip read-only
    (i64.store (i32.const 80)
      (i64.extend_i32_s (call $wr (i32.const 0x06)
        (i64.add (call $rr (i32.const 0x0A) (i32.const 0)) (call $rr (i32.const 0x0B) (i32.const 0))))))
    (i64.store (i32.const 88) (i64.extend_i32_s (call $wr (i32.const 0x0D) (i64.const 0))))
    (drop (call $wr (i32.const 0x07) (i64.const 0x1234)))
    (i32.store (i32.const 1024) (i32.const 0x00800000))  ;; one RawWords item at offset 0
    (drop (call $log (i32.const 7) (i32.const 9) (i32.const 0) (i32.const 96) (i32.const 1024) (i32.const 1)))
    (i32.const 0)))
"#;

/// read_mem of the address in rdi (8 bytes) and of rsi: stores the two
/// return values and the first word read in gvars 0..3.
pub const READMEM_WAT: &str = r#"
(module
  (import "wprobe" "read_reg" (func $rr (param i32 i32) (result i64)))
  (import "wprobe" "read_mem" (func $rm (param i64 i32 i32) (result i32)))
  (import "wprobe" "check_access" (func $ca (param i64 i32) (result i32)))
  (import "wprobe" "gvar_set" (func $gs (param i64 i64)))
  (import "wprobe" "now_ns" (func $now (result i64)))
  (memory (export "memory") 1)
  (func (export "readmem") (result i32)
    (call $gs (i64.const 0)
      (i64.extend_i32_s (call $rm (call $rr (i32.const 0x0A) (i32.const 0)) (i32.const 0) (i32.const 8))))
    (call $gs (i64.const 1) (i64.load (i32.const 0)))
    (call $gs (i64.const 2)
      (i64.extend_i32_s (call $rm (call $rr (i32.const 0x0B) (i32.const 0)) (i32.const 8) (i32.const 8))))
    (call $gs (i64.const 3)
      (i64.extend_i32_s (call $ca (call $rr (i32.const 0x0B) (i32.const 0)) (i32.const 1))))
    (call $gs (i64.const 4)
      (i64.extend_i32_s (call $ca (call $rr (i32.const 0x0A) (i32.const 0)) (i32.const 3))))
    (call $gs (i64.const 5) (call $now))
    (i32.const 0)))
"#;

/// Never returns (fuel), traps, returns a non-outcome.
pub const BAD_WAT: &str = r#"
(module
  (memory (export "memory") 1)
  (func (export "spin") (result i32) (loop $l (br $l)) (i32.const 0))
  (func (export "trap") (result i32) unreachable)
  (func (export "div") (result i32) (i32.div_s (i32.const 1) (i32.const 0)))
  (func (export "weird") (result i32) (i32.const 99))
  (func $rec (export "deep") (result i32) (call $rec))
  ;; grows memory to the 16 MiB limit (255 more pages), then one page too many:
  ;; returns 1 if the first grow gave 1 and the second -1.
  (func (export "grow") (result i32)
    (i32.and (i32.eq (memory.grow (i32.const 255)) (i32.const 1))
             (i32.eq (memory.grow (i32.const 1)) (i32.const -1)))))
"#;

/// Spins for a while (fuel-bounded), for signals to arrive meanwhile.
pub const SPIN_WAT: &str = r#"
(module
  (import "wprobe" "gvar_set" (func $gs (param i64 i64)))
  (memory (export "memory") 1)
  (func (export "spin") (result i32) (local $i i32)
    (local.set $i (i32.const 20000000))
    (loop $l (local.set $i (i32.sub (local.get $i) (i32.const 1)))
             (br_if $l (local.get $i)))
    (call $gs (i64.const 0) (i64.const 1))
    (i32.const 0)))
"#;

/// Compiles WAT for the agent.
pub fn cwasm(engine: &wasmtime::Engine, wat: &str) -> Vec<u8> {
    let wasm = wat::parse_str(wat).expect("valid WAT");
    agent_loader::compile::precompile(engine, &wasm).expect("compiles")
}

/// Loads `wat` with the given sites.
pub fn load<T: Target + ?Sized>(
    t: &mut T,
    a: &mut LoadedAgent,
    engine: &wasmtime::Engine,
    wat: &str,
    sites: &[(u32, &str)],
    gvars: u32,
    fuel: u64,
) -> Result<u32> {
    let c = cwasm(engine, wat);
    a.load_module(
        t,
        &ModuleSpec {
            cwasm: &c,
            sites,
            gvars,
            fuel,
            load_bias: 0x5555_0000,
            writes_allowed: true,
        },
    )
}

/// `SigCgt:` and friends of /proc/PID/status.
pub fn sig_lines(pid: i32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("Sig") || l.starts_with("Shd"))
        .filter(|l| !l.starts_with("SigQ") && !l.starts_with("SigPnd") && !l.starts_with("ShdPnd"))
        .collect::<Vec<_>>()
        .join("\n")
}
