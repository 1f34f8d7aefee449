//! Code generation: the typed IR → one core Wasm module following the host
//! ABI: imports of `hostabi::IMPORT_MODULE` only (those used), exported
//! `memory`, one export `() -> i32` per concrete probe calling its
//! handler's body with the probe's index, and the `wprobe.manifest` and
//! `wprobe.events` custom sections. Output is deterministic.
//!
//! Memory: bytes 0..64 are scratch (the frame-pointer walk reads 16 bytes
//! at 16), static data (string literals, `probe`/`func` tables) starts at
//! [`ir::STATIC_BASE`], and every handler's frame starts at the same
//! address after it (handlers never run concurrently and never recurse).

mod body;

use crate::ir::{self, E, S};
use hostabi::{HOST_IMPORTS, ImportId, ValType as HV};
use std::collections::BTreeSet;
use wasm_encoder::{
    CodeSection, ConstExpr, CustomSection, DataSection, EntityType, ExportKind, ExportSection,
    Function, FunctionSection, ImportSection, MemorySection, MemoryType, Module, NameMap,
    NameSection, TypeSection, ValType,
};

/// Scratch bytes of the frame-pointer walk (16 bytes).
pub const SCRATCH_FP: u32 = 16;
/// Scratch bytes of the function-entry check of `ustack` (8 bytes).
pub const SCRATCH_ENTRY: u32 = 32;

fn vt(v: HV) -> ValType {
    match v {
        HV::I32 => ValType::I32,
        HV::I64 => ValType::I64,
    }
}

/// Function types, interned.
#[derive(Default)]
struct Types {
    list: Vec<(Vec<ValType>, Vec<ValType>)>,
}

impl Types {
    fn get(&mut self, p: &[ValType], r: &[ValType]) -> u32 {
        if let Some(i) = self.list.iter().position(|(a, b)| a == p && b == r) {
            return i as u32;
        }
        self.list.push((p.to_vec(), r.to_vec()));
        (self.list.len() - 1) as u32
    }
}

/// The helper functions a module needs besides its handlers.
#[derive(Default)]
struct Helpers {
    streq: bool,
    strcontains: bool,
    memeq: bool,
}

/// Imports an expression or statement needs.
fn uses_e(e: &E, u: &mut BTreeSet<u32>, streq: &mut Helpers) {
    use ImportId as I;
    let mut add = |i: I| {
        u.insert(i as u32);
    };
    match e {
        E::Int(_) | E::Local(_) | E::Slot(_) | E::Static(_) | E::Table { .. } => {}
        E::TableAt { index, .. } => uses_e(index, u, streq),
        E::Reg(_) => add(I::read_reg),
        E::UsdtArg(_) => add(I::usdt_arg),
        E::Fact(f) => add(match f {
            ir::Fact::Pid => I::current_pid,
            ir::Fact::Tid => I::current_tid,
            ir::Fact::Cpu => I::current_cpu,
            ir::Fact::Uid => I::current_uid,
            ir::Fact::Gid => I::current_gid,
            ir::Fact::Numaid => I::current_numa_node,
            ir::Fact::Cpid => I::child_pid,
            ir::Fact::Nsecs | ir::Fact::Elapsed | ir::Fact::NsecsBoot | ir::Fact::NsecsTai => {
                I::clock_ns
            }
            ir::Fact::Bias => I::load_bias,
        }),
        E::Comm(_) => add(I::current_comm),
        E::Un(_, x) | E::Cast { e: x, .. } => uses_e(x, u, streq),
        E::Bin(_, _, a, b) => {
            uses_e(a, u, streq);
            uses_e(b, u, streq);
        }
        E::StrEq { a, b, .. } => {
            streq.streq = true;
            uses_e(a, u, streq);
            uses_e(b, u, streq);
        }
        E::MemEq { a, b, .. } => {
            streq.memeq = true;
            uses_e(a, u, streq);
            uses_e(b, u, streq);
        }
        E::StrContains { hay, needle, .. } => {
            streq.strcontains = true;
            uses_e(hay, u, streq);
            uses_e(needle, u, streq);
        }
        E::Ternary(c, a, b) => {
            uses_e(c, u, streq);
            uses_e(a, u, streq);
            uses_e(b, u, streq);
        }
        E::ReadStr { addr, max, .. } => {
            add(I::read_str);
            uses_e(addr, u, streq);
            uses_e(max, u, streq);
        }
        E::ReadBuf { addr, len, .. } => {
            add(I::read_mem);
            uses_e(addr, u, streq);
            uses_e(len, u, streq);
        }
        E::Load { addr, .. } => {
            add(I::read_mem);
            uses_e(addr, u, streq);
        }
        E::Ustack { .. } => {
            add(I::read_mem);
            add(I::read_reg);
            add(I::current_pid);
        }
        E::Usym { addr, .. } => {
            add(I::current_pid);
            uses_e(addr, u, streq);
        }
        E::MapEntry { cursor, .. } => {
            add(I::map_entry);
            uses_e(cursor, u, streq);
        }
        E::MapGet { key, .. } | E::MapHas { key, .. } => {
            add(I::map_lookup);
            uses_key(key, u, streq);
        }
        E::Tuple { parts, .. } => {
            for p in parts {
                uses_e(&p.e, u, streq);
            }
        }
        E::Field { base, .. } => uses_e(base, u, streq),
        E::Seq(s, x) => {
            for st in s {
                uses_s(st, u, streq);
            }
            uses_e(x, u, streq);
        }
    }
}

fn uses_key(k: &ir::Key, u: &mut BTreeSet<u32>, streq: &mut Helpers) {
    for p in &k.parts {
        uses_e(&p.e, u, streq);
    }
}

fn uses_s(s: &S, u: &mut BTreeSet<u32>, streq: &mut Helpers) {
    use ImportId as I;
    match s {
        S::Eval(e) | S::SetLocal(_, e) | S::SetSlot { e, .. } => uses_e(e, u, streq),
        S::If(c, a, b) => {
            uses_e(c, u, streq);
            for x in a.iter().chain(b) {
                uses_s(x, u, streq);
            }
        }
        S::While(c, b) => {
            uses_e(c, u, streq);
            for x in b {
                uses_s(x, u, streq);
            }
        }
        S::Break | S::Continue | S::Return(_) => {}
        S::MapUpdate { key, value, .. } => {
            u.insert(I::map_update as u32);
            uses_key(key, u, streq);
            uses_e(value, u, streq);
        }
        S::MapStore { key, value, .. } => {
            u.insert(I::map_store as u32);
            uses_key(key, u, streq);
            uses_e(value, u, streq);
        }
        S::MapDelete { key, .. } => {
            u.insert(I::map_delete as u32);
            uses_key(key, u, streq);
        }
        S::MapReset { zero, .. } => {
            u.insert(if *zero { I::map_zero } else { I::map_clear } as u32);
        }
        S::Emit(em) => {
            u.insert(I::emit_event as u32);
            for p in &em.parts {
                uses_e(&p.e, u, streq);
            }
        }
    }
}

/// Function indices shared by the body generators.
pub struct Ctx {
    imports: Vec<Option<u32>>,
    /// The string-equality helper's index.
    pub streq: Option<u32>,
    /// The substring helper's index.
    pub strcontains: Option<u32>,
    /// The byte-equality helper's index.
    pub memeq: Option<u32>,
    /// Address of handler frames.
    pub frame_base: u32,
}

impl Ctx {
    /// Function index of an import (collected before use).
    pub fn import(&self, id: ImportId) -> u32 {
        self.imports[id as usize].expect("codegen invariant: import collected before use")
    }
}

/// The export of probe `p`: its handler's body with its index, then the
/// bodies merged into it (`also`), the outcome the strongest of theirs
/// (`exit()` from any of them stops the run); nothing for a probe merged
/// into another.
fn entry(p: &ir::ProbeOut, body_base: u32) -> Function {
    if p.merged {
        let mut f = Function::new([]);
        f.instructions()
            .i32_const(hostabi::Outcome::Exit as i32)
            .end();
        return f;
    }
    if p.also.is_empty() {
        let mut f = Function::new([]);
        f.instructions()
            .i32_const(p.index as i32)
            .call(body_base + p.handler as u32)
            .end();
        return f;
    }
    // Local 0: the outcome so far; local 1: the last body's.
    let mut f = Function::new([(2, ValType::I32)]);
    let mut ins = f.instructions();
    ins.i32_const(p.index as i32)
        .call(body_base + p.handler as u32)
        .local_set(0);
    for (h, index) in &p.also {
        ins.i32_const(*index as i32)
            .call(body_base + *h as u32)
            .local_set(1)
            .local_get(1)
            .local_get(0)
            .local_get(1)
            .local_get(0)
            .i32_gt_s()
            .select()
            .local_set(0);
    }
    ins.local_get(0).end();
    f
}

/// Generates the module of `m`.
pub fn generate(m: &ir::Module) -> Vec<u8> {
    let mut used = BTreeSet::new();
    let mut streq = Helpers::default();
    for h in &m.handlers {
        for s in &h.body {
            uses_s(s, &mut used, &mut streq);
        }
    }
    let mut types = Types::default();
    let mut imports = ImportSection::new();
    let mut import_idx = vec![None; HOST_IMPORTS.len()];
    for (n, i) in used.iter().enumerate() {
        let imp = &HOST_IMPORTS[*i as usize];
        let p: Vec<ValType> = imp.params.iter().map(|(_, t)| vt(*t)).collect();
        let r: Vec<ValType> = imp.results.iter().map(|t| vt(*t)).collect();
        let ty = types.get(&p, &r);
        imports.import(hostabi::IMPORT_MODULE, imp.name, EntityType::Function(ty));
        import_idx[*i as usize] = Some(n as u32);
    }
    let mut next = used.len() as u32;
    let streq_idx = streq.streq.then(|| {
        next += 1;
        next - 1
    });
    let strcontains_idx = streq.strcontains.then(|| {
        next += 1;
        next - 1
    });
    let memeq_idx = streq.memeq.then(|| {
        next += 1;
        next - 1
    });
    let frame_base = (ir::STATIC_BASE + m.data.len() as u32).div_ceil(16) * 16;
    let ctx = Ctx {
        imports: import_idx,
        streq: streq_idx,
        strcontains: strcontains_idx,
        memeq: memeq_idx,
        frame_base,
    };
    let mut funcs = FunctionSection::new();
    let mut code = CodeSection::new();
    let mut names = NameMap::new();
    for (i, n) in used.iter().enumerate() {
        names.append(i as u32, HOST_IMPORTS[*n as usize].name);
    }
    if let Some(i) = streq_idx {
        funcs.function(types.get(&[ValType::I32; 3], &[ValType::I32]));
        code.function(&body::streq_helper());
        names.append(i, "streq");
    }
    if let Some(i) = strcontains_idx {
        funcs.function(types.get(&[ValType::I32; 4], &[ValType::I32]));
        code.function(&body::strcontains_helper());
        names.append(i, "strcontains");
    }
    if let Some(i) = memeq_idx {
        funcs.function(types.get(&[ValType::I32; 3], &[ValType::I32]));
        code.function(&body::memeq_helper());
        names.append(i, "memeq");
    }
    let body_base = next;
    let body_ty = types.get(&[ValType::I32], &[ValType::I32]);
    for (i, h) in m.handlers.iter().enumerate() {
        funcs.function(body_ty);
        code.function(&body::handler(&ctx, h));
        names.append(body_base + i as u32, &format!("probe{i}_body"));
    }
    let entry_base = body_base + m.handlers.len() as u32;
    let entry_ty = types.get(&[], &[ValType::I32]);
    let mut exports = ExportSection::new();
    exports.export(hostabi::MEMORY_EXPORT, ExportKind::Memory, 0);
    for (i, p) in m.probes.iter().enumerate() {
        funcs.function(entry_ty);
        code.function(&entry(p, body_base));
        exports.export(&p.export, ExportKind::Func, entry_base + i as u32);
        names.append(entry_base + i as u32, &p.export);
    }
    let mut type_sec = TypeSection::new();
    for (p, r) in &types.list {
        type_sec.ty().function(p.iter().copied(), r.iter().copied());
    }
    let frame_max = m.handlers.iter().map(|h| h.frame).max().unwrap_or(0);
    let pages = (frame_base as u64 + frame_max as u64 + 64)
        .div_ceil(65536)
        .max(1);
    let mut memories = MemorySection::new();
    memories.memory(MemoryType {
        minimum: pages,
        maximum: Some(pages),
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut data = DataSection::new();
    if !m.data.is_empty() {
        data.active(
            0,
            &ConstExpr::i32_const(ir::STATIC_BASE as i32),
            m.data.iter().copied(),
        );
    }
    let mut name_sec = NameSection::new();
    name_sec.functions(&names);
    let mut module = Module::new();
    module.section(&type_sec);
    module.section(&imports);
    module.section(&funcs);
    module.section(&memories);
    module.section(&exports);
    module.section(&code);
    module.section(&data);
    module.section(&name_sec);
    let manifest = m.manifest.encode();
    module.section(&CustomSection {
        name: hostabi::MANIFEST_SECTION.into(),
        data: manifest.as_bytes().into(),
    });
    if !m.events.is_empty() {
        let ev = m.events.encode();
        module.section(&CustomSection {
            name: hostabi::event::EVENTS_SECTION.into(),
            data: ev.as_bytes().into(),
        });
    }
    module.finish()
}
