//! Which registers a handler module can read, found in its code: every
//! call of the `read_reg` import whose register operand is a constant
//! (`i32.const REG; <part>; call read_reg`, the form `rpn2wasm` emits and
//! optimised Rust or C guests produce) names its register; anything else
//! (a computed register, `read_reg` reached through a table or a
//! `ref.func`, code that does not parse) means any register. The perf
//! transport samples only the registers its handlers can read: each
//! sampled register costs the traced thread time in the kernel at every hit.

use hostabi::regs;
use wasmparser::{ElementItems, Operator, Parser, Payload, TypeRef};

/// The registers a module can read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RegsRead {
    /// Only these 64-bit registers: bit `i` set for base register id `i`
    /// (aliases such as `eax` count as their 64-bit register).
    Only(u128),
    /// Any register.
    All,
}

impl RegsRead {
    /// Registers either can read.
    pub fn union(self, other: RegsRead) -> RegsRead {
        match (self, other) {
            (RegsRead::Only(a), RegsRead::Only(b)) => RegsRead::Only(a | b),
            _ => RegsRead::All,
        }
    }

    /// Whether base register id `id` may be read.
    pub fn contains(self, id: u16) -> bool {
        match self {
            RegsRead::All => true,
            RegsRead::Only(m) => id < 128 && m & (1 << id) != 0,
        }
    }
}

/// The general registers and `rip`/`rsp` (ids 0x06 … 0x17): where a USDT
/// argument or its address can be (`sys/sdt.h` operands name no other).
const USDT_REGS: u128 = ((1u128 << 0x18) - 1) & !((1u128 << 6) - 1);

/// The registers the module `wasm` can read (`All` when in doubt). A
/// module calling `usdt_arg` can read any general register (the specs are
/// the probes', not the module's).
pub fn registers_read(wasm: &[u8]) -> RegsRead {
    let mut set = 0u128;
    if calls_to(wasm, hostabi::ImportId::usdt_arg.import().name, |_, _| {
        false
    }) != Some(true)
    {
        set |= USDT_REGS;
    }
    let known = calls_to(
        wasm,
        hostabi::ImportId::read_reg.import().name,
        |before, last| {
            // `i32.const REG` then a part that consumes nothing.
            let simple_part = matches!(
                last,
                Some(
                    Operator::I32Const { .. }
                        | Operator::LocalGet { .. }
                        | Operator::GlobalGet { .. }
                )
            );
            match (before, simple_part) {
                (Some(Operator::I32Const { value }), true) => {
                    let id = u16::try_from(*value)
                        .ok()
                        .and_then(regs::by_id)
                        .map(|r| r.base_id());
                    // An unknown register traps: nothing is read.
                    if let Some(id) = id.filter(|id| *id < 128) {
                        set |= 1 << id;
                    }
                    true
                }
                _ => false,
            }
        },
    );
    match known {
        Some(true) => RegsRead::Only(set),
        _ => RegsRead::All,
    }
}

/// Whether the module `wasm` may ask `check_access` whether memory is
/// writable (RPN `vfyrw`): a call whose `access` is not the constant 1
/// (true when in doubt).
pub fn checks_writable(wasm: &[u8]) -> bool {
    let known = calls_to(
        wasm,
        hostabi::ImportId::check_access.import().name,
        |_, last| matches!(last, Some(Operator::I32Const { value: 1 })),
    );
    known != Some(true)
}

/// Walks every call to import `name` of module `wasm`, giving `on_call`
/// the two operators before it. `Some(true)` when `on_call` accepted every
/// call and the import is used in no other way (a table, a global, an
/// export, a tail call: it could then be called with anything);
/// `Some(false)` otherwise; `None` when the module does not parse.
fn calls_to(
    wasm: &[u8],
    name: &str,
    mut on_call: impl FnMut(&Option<Operator<'_>>, &Option<Operator<'_>>) -> bool,
) -> Option<bool> {
    let mut func_imports = 0u32;
    // Every function index that is the import (it may be imported twice).
    let mut targets: Vec<u32> = Vec::new();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.ok()?;
        if targets.is_empty() && !matches!(payload, Payload::ImportSection(_)) {
            continue;
        }
        match payload {
            Payload::ImportSection(r) => {
                for imp in r.into_imports() {
                    let imp = imp.ok()?;
                    if let TypeRef::Func(_) | TypeRef::FuncExact(_) = imp.ty {
                        if imp.module == hostabi::IMPORT_MODULE && imp.name == name {
                            targets.push(func_imports);
                        }
                        func_imports += 1;
                    }
                }
            }
            // The import as a value (a table entry, a funcref global, an
            // export) can be called from anywhere with any argument.
            Payload::ElementSection(r) => {
                for e in r {
                    match e.ok()?.items {
                        ElementItems::Functions(fs) => {
                            for f in fs {
                                if targets.contains(&f.ok()?) {
                                    return Some(false);
                                }
                            }
                        }
                        ElementItems::Expressions(..) => return Some(false),
                    }
                }
            }
            Payload::GlobalSection(r) => {
                for g in r {
                    let mut ops = g.ok()?.init_expr.get_operators_reader();
                    while !ops.eof() {
                        if let Operator::RefFunc { function_index } = ops.read().ok()?
                            && targets.contains(&function_index)
                        {
                            return Some(false);
                        }
                    }
                }
            }
            Payload::ExportSection(r) => {
                for e in r {
                    let e = e.ok()?;
                    if e.kind == wasmparser::ExternalKind::Func && targets.contains(&e.index) {
                        return Some(false);
                    }
                }
            }
            Payload::CodeSectionEntry(body) => {
                let mut ops = body.get_operators_reader().ok()?;
                // The last two operators before the current one.
                let (mut before, mut last): (Option<Operator>, Option<Operator>) = (None, None);
                while !ops.eof() {
                    let op = ops.read().ok()?;
                    match &op {
                        Operator::Call { function_index }
                            if targets.contains(function_index) && !on_call(&before, &last) =>
                        {
                            return Some(false);
                        }
                        Operator::RefFunc { function_index }
                        | Operator::ReturnCall { function_index }
                            if targets.contains(function_index) =>
                        {
                            return Some(false);
                        }
                        _ => {}
                    }
                    before = last.take();
                    last = Some(op);
                }
            }
            _ => {}
        }
    }
    Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wat(text: &str) -> Vec<u8> {
        wat::parse_str(text).unwrap()
    }

    const RDI: u16 = 0x0A;
    const RSI: u16 = 0x0B;

    #[test]
    fn constant_registers_are_found_and_others_mean_all() {
        let m = |body: &str| {
            registers_read(&wat(&format!(
                r#"(module
                  (import "wprobe" "read_reg" (func $r (param i32 i32) (result i64)))
                  (func (export "h") (param i32) (result i32) {body} i32.const 0))"#
            )))
        };
        assert_eq!(m(""), RegsRead::Only(0));
        assert_eq!(
            m("i32.const 0x0A i32.const 0 call $r drop i32.const 0x0B i32.const 0 call $r drop"),
            RegsRead::Only(1 << RDI | 1 << RSI)
        );
        // The part may be computed; the register may not.
        assert_eq!(
            m("i32.const 0x0A local.get 0 call $r drop"),
            RegsRead::Only(1 << RDI)
        );
        assert_eq!(m("local.get 0 i32.const 0 call $r drop"), RegsRead::All);
        // A computed part: the constant before the call is not the register.
        assert_eq!(
            m("i32.const 0x0A local.get 0 i32.const 1 i32.add call $r drop"),
            RegsRead::All
        );
        assert_eq!(m("ref.func $r drop"), RegsRead::All);
        // An alias counts as its 64-bit register.
        let edi = regs::REGS.iter().find(|r| r.name == "edi").unwrap().id;
        assert_eq!(
            m(&format!("i32.const {edi} i32.const 0 call $r drop")),
            RegsRead::Only(1 << RDI)
        );
    }

    #[test]
    fn without_read_reg_nothing_is_read_and_bad_bytes_mean_all() {
        assert_eq!(
            registers_read(&wat(
                r#"(module (func (export "h") (result i32) i32.const 0))"#
            )),
            RegsRead::Only(0)
        );
        assert_eq!(registers_read(b"\0asm\x01\0\0\0\x0a\xff"), RegsRead::All);
        let tabled = wat(r#"(module
              (import "wprobe" "read_reg" (func $r (param i32 i32) (result i64)))
              (table 1 funcref) (elem (i32.const 0) $r))"#);
        assert_eq!(registers_read(&tabled), RegsRead::All);
        let twice = wat(r#"(module
              (import "wprobe" "read_reg" (func $a (param i32 i32) (result i64)))
              (import "wprobe" "read_reg" (func $b (param i32 i32) (result i64)))
              (func (param i32) (result i64) local.get 0 i32.const 0 call $a))"#);
        assert_eq!(
            registers_read(&twice),
            RegsRead::All,
            "the first of two imports"
        );
        let tail = wat(r#"(module
              (import "wprobe" "read_reg" (func $r (param i32 i32) (result i64)))
              (func (param i32 i32) (result i64) local.get 0 local.get 1 return_call $r))"#);
        assert_eq!(registers_read(&tail), RegsRead::All, "a tail call");
        let exported = wat(r#"(module
              (import "wprobe" "read_reg" (func $r (param i32 i32) (result i64)))
              (export "r" (func $r)))"#);
        assert_eq!(registers_read(&exported), RegsRead::All, "re-exported");
        let global = wat(r#"(module
              (import "wprobe" "read_reg" (func $r (param i32 i32) (result i64)))
              (global funcref (ref.func $r)))"#);
        assert_eq!(registers_read(&global), RegsRead::All, "in a global");
    }

    #[test]
    fn write_checks_are_found() {
        let m = |body: &str| {
            checks_writable(&wat(&format!(
                r#"(module
                  (import "wprobe" "check_access" (func $c (param i64 i32) (result i32)))
                  (func (export "h") (param i32) (result i32) {body} i32.const 0))"#
            )))
        };
        assert!(!m(""));
        assert!(!m("i64.const 0 i32.const 1 call $c drop"));
        assert!(m("i64.const 0 i32.const 3 call $c drop"));
        assert!(m("i64.const 0 local.get 0 call $c drop"), "computed: maybe");
        assert!(!checks_writable(&wat(r#"(module (func (export "h")))"#)));
    }

    #[test]
    fn usdt_arg_reads_the_general_registers() {
        let m = wat(r#"(module
              (import "wprobe" "usdt_arg" (func $u (param i32) (result i64)))
              (func (export "h") (result i32) (drop (call $u (i32.const 0))) (i32.const 0)))"#);
        let r = registers_read(&m);
        assert!(r.contains(RDI) && r.contains(hostabi::regs::RSP) && r.contains(0x17));
        assert!(!r.contains(0x4D) && r != RegsRead::All, "{r:?}");
    }

    #[test]
    fn union_and_contains() {
        let a = RegsRead::Only(1 << RDI);
        assert_eq!(
            a.union(RegsRead::Only(1 << RSI)),
            RegsRead::Only(1 << RDI | 1 << RSI)
        );
        assert_eq!(a.union(RegsRead::All), RegsRead::All);
        assert!(a.contains(RDI) && !a.contains(RSI) && RegsRead::All.contains(RSI));
    }
}
