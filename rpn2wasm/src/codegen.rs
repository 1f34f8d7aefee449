//! Code generation: a checked [`Program`] → one core Wasm module following
//! the host ABI (`hostabi`): imports from `hostabi::IMPORT_MODULE` only,
//! exported `memory`, one handler export per probe point (`probeN`,
//! `() -> i32` returning an `Outcome`), the `wprobe_flush` export, and the
//! manifest custom section. Output is deterministic: the same program gives
//! the same bytes.

mod asm;
mod body;
mod helpers;
pub mod layout;
pub mod stackinfo;

use crate::ast::{BodyOwner, Op, Program};
use helpers::{HELPERS, Helper};
use hostabi::manifest::Manifest;
use hostabi::{HOST_IMPORTS, ImportId, ValType as HV};
use layout::{self as l, g};
use std::collections::BTreeSet;
use wasm_encoder::{
    CodeSection, ConstExpr, CustomSection, DataSection, EntityType, ExportKind, ExportSection,
    FunctionSection, GlobalSection, GlobalType, ImportSection, MemorySection, MemoryType, Module,
    NameMap, NameSection, TypeSection, ValType,
};

pub use body::SourceMarks;

/// Function indices and program constants shared by the generators.
pub struct Ctx {
    imports: Vec<Option<u32>>,
    /// Function index of each helper of [`HELPERS`] the module contains.
    helpers: Vec<Option<u32>>,
    /// Helpers referenced so far (the first pass collects them).
    helpers_called: std::cell::RefCell<Vec<bool>>,
    body_base: u32,
    /// `logmax`.
    pub logmax: u16,
    /// `excpt_log`.
    pub excpt_log: u16,
    /// `jmpmax`.
    pub jmpmax: u16,
    /// `vars`.
    pub vars: u16,
    /// `id`.
    pub id: u16,
    /// `autostacktrace`.
    pub autostacktrace: bool,
    /// Length of the program name.
    pub name_len: u32,
    /// What the whole-program stack analysis proved.
    pub stack: stackinfo::StackFacts,
}

impl Ctx {
    /// Function index of a host import (must be in the used set).
    pub fn import(&self, id: ImportId) -> u32 {
        self.imports[id as usize].expect("codegen invariant: import collected before use")
    }

    /// Function index of a helper (recording that it is called).
    pub fn helper(&self, h: Helper) -> u32 {
        let i = HELPERS.iter().position(|x| *x == h).expect("listed");
        self.helpers_called.borrow_mut()[i] = true;
        self.helpers[i].expect("codegen invariant: helper collected before use")
    }

    /// Function index of body `b`.
    pub fn body_func(&self, b: usize) -> u32 {
        self.body_base + b as u32
    }
}

/// Host imports an instruction needs.
fn op_imports(op: &Op, out: &mut BTreeSet<u32>) {
    use ImportId as I;
    let ids: &[ImportId] = match op {
        Op::PushReg { reg, .. } if *reg == hostabi::regs::CPUID => &[I::cpuid],
        Op::PushReg { .. } => &[I::read_reg],
        Op::PopReg { .. } => &[I::write_reg],
        Op::PushMem(_) => &[I::read_mem],
        Op::PopMem(_) => &[I::write_mem],
        Op::PushSym { .. } => &[I::load_bias],
        Op::PushTask => &[I::thread_pointer],
        Op::PushPid => &[I::current_tid],
        Op::PushProcid => &[I::current_cpu],
        Op::Vfyr | Op::Vfyrw => &[I::check_access],
        Op::VarImm(_, crate::ast::VarSpace::Global, _) => &[I::gvar_get, I::gvar_set],
        Op::Var(_, crate::ast::VarSpace::Global) | Op::TraceVars(crate::ast::VarSpace::Global) => {
            &[I::gvar_get, I::gvar_set, I::gvar_count]
        }
        Op::Var(..) | Op::TraceVars(..) => &[],
        Op::PushIo(_) => &[I::io_in],
        Op::PopIo(_) => &[I::io_out],
        Op::Callk => &[I::callk],
        Op::PushEntry(_) => &[I::entry_reg],
        Op::PushElapsed => &[I::elapsed_ns],
        Op::PushUsdt(_) => &[I::usdt_arg],
        _ => &[],
    };
    out.extend(ids.iter().map(|i| *i as u32));
}

fn vt(v: HV) -> ValType {
    match v {
        HV::I32 => ValType::I32,
        HV::I64 => ValType::I64,
    }
}

/// Interns function types.
#[derive(Default)]
struct Types {
    list: Vec<(Vec<ValType>, Vec<ValType>)>,
}

impl Types {
    fn get(&mut self, params: &[ValType], results: &[ValType]) -> u32 {
        if let Some(i) = self
            .list
            .iter()
            .position(|(p, r)| p.as_slice() == params && r.as_slice() == results)
        {
            return i as u32;
        }
        self.list.push((params.to_vec(), results.to_vec()));
        (self.list.len() - 1) as u32
    }
}

/// Generates the module of `program` carrying `manifest`.
pub fn generate(program: &Program, manifest: &Manifest) -> Vec<u8> {
    generate_with_marks(program, manifest).wasm
}

/// A generated module with the map from RPN instructions to Wasm code.
pub struct Generated {
    /// The module bytes.
    pub wasm: Vec<u8>,
    /// Per body (in `Program::bodies` order): for each instruction index, the
    /// byte offset of its code within the body function (locals included).
    pub marks: Vec<SourceMarks>,
    /// Function index of body 0 (body `b` is `first_body_func + b`).
    pub first_body_func: u32,
}

/// Which helpers the module needs: those the bodies and entry points call,
/// and the helpers those call, found by generating the code once with every
/// helper present and recording the calls. Only these are emitted: each
/// helper costs wasmtime compile time at every load.
fn helpers_needed(program: &Program, stack: stackinfo::StackFacts) -> Vec<bool> {
    let all = vec![true; HELPERS.len()];
    let ctx = make_ctx(program, &all_imports(), &all, stack);
    for b in &program.bodies {
        let _ = body::translate(&ctx, program, b);
    }
    for i in 0..program.probes.len() {
        let _ = entry(&ctx, program, i);
    }
    let _ = ctx.helper(Helper::Emit); // the flush export
    let mut needed = ctx.helpers_called.borrow().clone();
    // Close over helper-to-helper calls.
    loop {
        let mut grew = false;
        for (i, h) in HELPERS.iter().enumerate() {
            if !needed[i] {
                continue;
            }
            let ctx = make_ctx(program, &all_imports(), &all, stack);
            let _ = helpers::build(*h, &ctx);
            for (j, called) in ctx.helpers_called.borrow().iter().enumerate() {
                if *called && !needed[j] {
                    needed[j] = true;
                    grew = true;
                }
            }
        }
        if !grew {
            return needed;
        }
    }
}

fn all_imports() -> BTreeSet<u32> {
    (0..HOST_IMPORTS.len() as u32).collect()
}

/// The context for a module with these imports and helpers (in ABI order).
fn make_ctx(
    program: &Program,
    used: &BTreeSet<u32>,
    helpers: &[bool],
    stack: stackinfo::StackFacts,
) -> Ctx {
    let mut import_idx = vec![None; HOST_IMPORTS.len()];
    for (n, i) in used.iter().enumerate() {
        import_idx[*i as usize] = Some(n as u32);
    }
    let mut next = used.len() as u32;
    let helper_idx = helpers
        .iter()
        .map(|on| {
            on.then(|| {
                next += 1;
                next - 1
            })
        })
        .collect();
    Ctx {
        imports: import_idx,
        helpers: helper_idx,
        helpers_called: std::cell::RefCell::new(vec![false; HELPERS.len()]),
        body_base: next,
        logmax: program.header.logmax,
        excpt_log: program.header.excpt_log,
        jmpmax: program.header.jmpmax,
        vars: program.header.vars,
        id: program.header.id,
        autostacktrace: program.header.autostacktrace,
        name_len: program.header.name.len() as u32,
        stack,
    }
}

/// Generates the module and the instruction-to-code map (for `--emit wat`).
pub fn generate_with_marks(program: &Program, manifest: &Manifest) -> Generated {
    let stack = stackinfo::analyze(program);
    let needed = helpers_needed(program, stack);
    // Imports actually used, in ABI order (deterministic).
    let mut used = BTreeSet::new();
    for (h, on) in HELPERS.iter().zip(&needed) {
        if *on {
            used.extend(h.imports().iter().map(|i| *i as u32));
        }
    }
    for b in &program.bodies {
        for insn in &b.insns {
            op_imports(&insn.op, &mut used);
        }
    }
    let mut types = Types::default();
    let mut imports = ImportSection::new();
    for i in &used {
        let imp = &HOST_IMPORTS[*i as usize];
        let params: Vec<ValType> = imp.params.iter().map(|(_, t)| vt(*t)).collect();
        let results: Vec<ValType> = imp.results.iter().map(|t| vt(*t)).collect();
        let ty = types.get(&params, &results);
        imports.import(hostabi::IMPORT_MODULE, imp.name, EntityType::Function(ty));
    }
    let name = program.header.name.as_bytes();
    let ctx = make_ctx(program, &used, &needed, stack);
    let mut funcs = FunctionSection::new();
    let mut code = CodeSection::new();
    for (h, on) in HELPERS.iter().zip(&needed) {
        if *on {
            let (p, r) = h.sig();
            funcs.function(types.get(p, r));
            code.function(&helpers::build(*h, &ctx));
        }
    }
    let body_ty = types.get(&[], &[ValType::I32]);
    let mut marks = Vec::with_capacity(program.bodies.len());
    for b in &program.bodies {
        funcs.function(body_ty);
        let (f, m) = body::translate(&ctx, program, b);
        code.function(&f);
        marks.push(m);
    }
    // Probe entry points.
    let entry_base = ctx.body_base + program.bodies.len() as u32;
    let mut exports = ExportSection::new();
    exports.export(hostabi::MEMORY_EXPORT, ExportKind::Memory, 0);
    for i in 0..program.probes.len() {
        funcs.function(body_ty);
        code.function(&entry(&ctx, program, i));
        // Probe i's handler (a `usdt =` probe has one manifest entry per
        // site, all naming this export).
        exports.export(
            &crate::manifest::export_name(i),
            ExportKind::Func,
            entry_base + i as u32,
        );
    }
    // The flush export (budget exhaustion, spec §16 [A 13]).
    funcs.function(body_ty);
    {
        let mut a = asm::Asm::new(0, &[]);
        a.i()
            .call(ctx.helper(Helper::Emit))
            .i32_const(hostabi::Outcome::BudgetExceeded as i32);
        code.function(&a.finish());
    }
    exports.export(
        hostabi::FLUSH_EXPORT,
        ExportKind::Func,
        entry_base + program.probes.len() as u32,
    );

    // The RPN registers, for debuggers and for the differential tests that
    // compare the final machine with the interpreter's.
    exports.export("rpn_tsp", ExportKind::Global, g::TSP);
    exports.export("rpn_sbp", ExportKind::Global, g::SBP);

    let mut type_sec = TypeSection::new();
    for (p, r) in &types.list {
        type_sec.ty().function(p.iter().copied(), r.iter().copied());
    }
    let mut memories = MemorySection::new();
    let bytes_needed = l::NAME as u64 + name.len() as u64;
    let pages = bytes_needed.div_ceil(65536);
    memories.memory(MemoryType {
        minimum: pages,
        maximum: Some(pages),
        memory64: false,
        shared: false,
        page_size_log2: None,
    });
    let mut globals = GlobalSection::new();
    for i in 0..g::COUNT {
        let (ty, init) = if g::is_i64(i) {
            (ValType::I64, ConstExpr::i64_const(0))
        } else {
            (ValType::I32, ConstExpr::i32_const(0))
        };
        globals.global(
            GlobalType {
                val_type: ty,
                mutable: true,
                shared: false,
            },
            &init,
        );
    }
    let mut names = NameSection::new();
    let mut fnames = NameMap::new();
    for (i, n) in used.iter().enumerate() {
        fnames.append(i as u32, HOST_IMPORTS[*n as usize].name);
    }
    for (i, h) in HELPERS.iter().enumerate() {
        if let Some(f) = ctx.helpers[i] {
            fnames.append(f, &format!("rt_{h:?}").to_lowercase());
        }
    }
    for (b, body) in program.bodies.iter().enumerate() {
        let n = match body.owner {
            BodyOwner::Probe(p) => format!("probe{p}_body"),
            BodyOwner::Proc(p) => format!("proc_{}", program.procs[p].name),
        };
        fnames.append(ctx.body_base + b as u32, &n);
    }
    for i in 0..program.probes.len() {
        fnames.append(entry_base + i as u32, &crate::manifest::export_name(i));
    }
    fnames.append(
        entry_base + program.probes.len() as u32,
        hostabi::FLUSH_EXPORT,
    );
    names.functions(&fnames);
    let mut data = DataSection::new();
    if !name.is_empty() {
        data.active(
            0,
            &ConstExpr::i32_const(l::NAME as i32),
            name.iter().copied(),
        );
    }
    let manifest_text = manifest.encode();
    let mut module = Module::new();
    module.section(&type_sec);
    module.section(&imports);
    module.section(&funcs);
    module.section(&memories);
    module.section(&globals);
    module.section(&exports);
    module.section(&code);
    module.section(&data);
    module.section(&names);
    module.section(&CustomSection {
        name: hostabi::MANIFEST_SECTION.into(),
        data: manifest_text.as_bytes().into(),
    });
    Generated {
        wasm: module.finish(),
        marks,
        first_body_func: ctx.body_base,
    }
}

/// The export of probe `i`: reset the per-hit state, run the body, emit records.
fn entry(ctx: &Ctx, program: &Program, i: usize) -> wasm_encoder::Function {
    let p = &program.probes[i];
    let mut a = asm::Asm::new(0, &[]);
    let set32 = |a: &mut asm::Asm, gl: u32, v: i32| {
        a.i().i32_const(v).global_set(gl);
    };
    for gl in [
        g::TSP,
        g::SBP,
        g::LP,
        g::PLP,
        g::STP,
        g::JC,
        g::DEPTH,
        g::OUTCOME,
        g::ITEMS,
    ] {
        set32(&mut a, gl, 0);
    }
    set32(&mut a, g::MAJOR, program.header.major as i32);
    set32(&mut a, g::MINOR, p.minor as i32);
    set32(&mut a, g::MASK, p.excpt_mask as i32);
    set32(&mut a, g::HEAP_CAP, p.heap as i32);
    for gl in [g::HEAP_USED, g::HEAP_BUMP, g::HEAP_LIVE] {
        set32(&mut a, gl, 0);
    }
    a.i().i64_const(1).global_set(g::HEAP_NEXT);
    for gl in [g::EXC_CODE, g::EXC_P1, g::EXC_P2, g::PP1, g::PP2] {
        a.i().i64_const(0).global_set(gl);
    }
    a.i()
        .i64_const(hostabi::record::HANDLER_NONE as i64)
        .global_set(g::EXC_HANDLER);
    a.i().i64_const(p.value as i64).global_set(g::LOCATION);
    // Base frame: no handler (its other fields are never read: the base
    // frame is not written into stack traces and never returned from).
    a.i()
        .i32_const(0)
        .i64_const(hostabi::record::HANDLER_NONE as i64)
        .i64_store(asm::mem(l::FRAMES + l::frame::HANDLER_OFF, 3));
    a.i()
        .i32_const(0)
        .i64_const(-1)
        .i64_store(asm::mem(l::FRAMES + l::frame::HANDLER_BLOCK, 3));
    // The stack starts zero-filled (spec §8.1): refill only when an earlier
    // run may have written it (bodies that can write it set the flag).
    // Only the slots a run can write need it (`extent`, counted from slot
    // 1023 down; all 1,024 when the analysis could not bound it). Programs
    // compiled with store elision read no slot they did not write in the
    // same run (no slot above TOS, nothing below the base), so they need none.
    let extent = if ctx.stack.elide {
        0
    } else {
        ctx.stack.extent.min(stackinfo::SLOTS)
    };
    if extent > 0 {
        a.i().global_get(g::STACK_DIRTY);
        let dirty = a.if_();
        a.i()
            .i32_const((l::STACK + 8 * (stackinfo::SLOTS - extent)) as i32)
            .i32_const(0)
            .i32_const((8 * extent) as i32)
            .memory_fill(0);
        a.i().i32_const(0).global_set(g::STACK_DIRTY);
        a.end(dirty);
    }
    a.i().call(ctx.body_func(p.body)).drop();
    a.i()
        .global_get(g::OUTCOME)
        .i32_const(hostabi::Outcome::Abort as i32)
        .i32_ne();
    let emit = a.if_();
    a.i().call(ctx.helper(Helper::Emit));
    a.end(emit);
    a.i().global_get(g::OUTCOME);
    a.finish()
}
