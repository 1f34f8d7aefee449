//! One handler body: `(probe index: i32) -> outcome: i32`. Integer
//! expressions leave an i64, aggregates the i32 address of their bytes.
//! Division and modulo are unsigned with bpftrace's zero rules (x / 0 = 0,
//! x % 0 = x); comparisons are signed only when both operands are.

mod maps;
mod ops;
mod reads;
mod strings;

pub use strings::{memeq_helper, strcontains_helper, streq_helper};

use super::Ctx;
use crate::ir::{E, Emit, Handler, Key, Part, S, Ty};
use hostabi::ImportId as I;
use wasm_encoder::{BlockType, Function, InstructionSink, MemArg, ValType};

fn mem(offset: u32, align: u32) -> MemArg {
    MemArg {
        offset: offset as u64,
        align,
        target: wasm_encoder::MemArgTarget::Memory(0),
        ordering: None,
    }
}

/// Which construct a label stack entry is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Lbl {
    Plain,
    LoopExit,
    LoopTop,
}

struct Gen<'c> {
    ctx: &'c Ctx,
    f: Function,
    labels: Vec<Lbl>,
    /// First i64 temp local, first i32 temp local.
    t64_base: u32,
    t32_base: u32,
    t64: u32,
    t32: u32,
    max64: u32,
    max32: u32,
}

impl Gen<'_> {
    fn i(&mut self) -> InstructionSink<'_> {
        self.f.instructions()
    }

    fn temp64(&mut self) -> u32 {
        self.t64 += 1;
        self.max64 = self.max64.max(self.t64);
        self.t64_base + self.t64 - 1
    }

    fn temp32(&mut self) -> u32 {
        self.t32 += 1;
        self.max32 = self.max32.max(self.t32);
        self.t32_base + self.t32 - 1
    }

    fn free64(&mut self) {
        self.t64 -= 1;
    }

    fn free32(&mut self) {
        self.t32 -= 1;
    }

    fn addr(&self, slot: u32) -> i32 {
        (self.ctx.frame_base + slot) as i32
    }

    fn call(&mut self, id: I) {
        let f = self.ctx.import(id);
        self.i().call(f);
    }

    fn depth(&self, want: Lbl) -> Option<u32> {
        let pos = self.labels.iter().rposition(|l| *l == want)?;
        Some((self.labels.len() - 1 - pos) as u32)
    }

    /// Zero-fills `len` bytes at `addr` (i32 on no stack: constant address).
    fn zero(&mut self, addr: i32, len: u32) {
        if len == 0 {
            return;
        }
        if len <= 64 && len.is_multiple_of(8) {
            for k in 0..len / 8 {
                self.i()
                    .i32_const(addr)
                    .i64_const(0)
                    .i64_store(mem(k * 8, 3));
            }
        } else {
            self.i()
                .i32_const(addr)
                .i32_const(0)
                .i32_const(len as i32)
                .memory_fill(0);
        }
    }

    fn stmts(&mut self, list: &[S]) {
        for s in list {
            self.stmt(s);
        }
    }

    fn stmt(&mut self, s: &S) {
        match s {
            S::Eval(e) => {
                let agg = is_agg(e);
                self.expr(e);
                self.i().drop();
                let _ = agg;
            }
            S::SetLocal(l, e) => {
                self.expr(e);
                self.i().local_set(l + 1);
            }
            S::SetSlot {
                slot,
                e,
                size,
                src_size,
            } => {
                let a = self.addr(*slot);
                self.copy_agg(a, 0, e, *size, *src_size);
            }
            S::If(c, a, b) => {
                self.truth(c);
                self.i().if_(BlockType::Empty);
                self.labels.push(Lbl::Plain);
                self.stmts(a);
                if !b.is_empty() {
                    self.i().else_();
                    self.stmts(b);
                }
                self.labels.pop();
                self.i().end();
            }
            S::While(c, body) => {
                self.i().block(BlockType::Empty);
                self.labels.push(Lbl::LoopExit);
                self.i().loop_(BlockType::Empty);
                self.labels.push(Lbl::LoopTop);
                self.truth(c);
                self.i().i32_eqz().br_if(1);
                self.stmts(body);
                self.i().br(0);
                self.labels.pop();
                self.i().end();
                self.labels.pop();
                self.i().end();
            }
            S::Break => {
                if let Some(d) = self.depth(Lbl::LoopExit) {
                    self.i().br(d);
                }
            }
            S::Continue => {
                if let Some(d) = self.depth(Lbl::LoopTop) {
                    self.i().br(d);
                }
            }
            S::Return(code) => {
                self.i().i32_const(*code).return_();
            }
            S::MapUpdate {
                map,
                key,
                op,
                value,
            } => {
                self.key(key);
                let k = self.addr(key.slot);
                self.i()
                    .i32_const(*map as i32)
                    .i32_const(k)
                    .i32_const(key.size as i32)
                    .i32_const(*op as u8 as i32);
                self.expr(value);
                self.call(I::map_update);
                self.i().drop();
            }
            S::MapStore {
                map,
                key,
                slot,
                value,
                size,
                src_size,
            } => {
                self.key(key);
                let v = self.addr(*slot);
                self.copy_agg(v, 0, value, *size, *src_size);
                let k = self.addr(key.slot);
                self.i()
                    .i32_const(*map as i32)
                    .i32_const(k)
                    .i32_const(key.size as i32)
                    .i32_const(v)
                    .i32_const(*size as i32);
                self.call(I::map_store);
                self.i().drop();
            }
            S::MapDelete { map, key } => {
                self.key(key);
                let k = self.addr(key.slot);
                self.i()
                    .i32_const(*map as i32)
                    .i32_const(k)
                    .i32_const(key.size as i32);
                self.call(I::map_delete);
                self.i().drop();
            }
            S::MapReset { map, zero } => {
                self.i().i32_const(*map as i32);
                self.call(if *zero { I::map_zero } else { I::map_clear });
                self.i().drop();
            }
            S::Emit(em) => self.emit(em),
        }
    }

    fn emit(&mut self, em: &Emit) {
        let a = self.addr(em.slot);
        self.parts(a, &em.parts);
        self.i()
            .i32_const(em.kind)
            .i32_const(em.id as i32)
            .i32_const(a)
            .i32_const(em.size as i32);
        self.call(I::emit_event);
        self.i().drop();
    }

    /// Builds a key in its slot.
    fn key(&mut self, k: &Key) {
        let a = self.addr(k.slot);
        self.parts(a, &k.parts);
    }

    /// Stores `parts` at `base` + their offsets.
    fn parts(&mut self, base: i32, parts: &[Part]) {
        for p in parts {
            if p.ty.is_agg() {
                let src = agg_size(&p.e).unwrap_or(p.ty.size()).min(p.ty.size());
                self.copy_agg(base, p.off, &p.e, p.ty.size(), src);
            } else {
                self.i().i32_const(base);
                self.expr(&p.e);
                self.i().i64_store(mem(p.off, 3));
            }
        }
    }

    /// Copies the aggregate `e` (`src` bytes) to `base + off`, zero-filling up to `size`.
    fn copy_agg(&mut self, base: i32, off: u32, e: &E, size: u32, src: u32) {
        let dst = base + off as i32;
        let src = src.min(size);
        if !is_agg(e) {
            // An integer stored where an aggregate goes (never produced by
            // the checker); keep the bytes defined.
            self.zero(dst, size);
            self.i().i32_const(dst);
            self.expr(e);
            self.i().i64_store(mem(0, 3));
            return;
        }
        self.i().i32_const(dst);
        self.expr(e);
        self.i().i32_const(src as i32).memory_copy(0, 0);
        if size > src {
            self.zero(dst + src as i32, size - src);
        }
    }

    /// An integer expression as an i32 truth value.
    fn truth(&mut self, e: &E) {
        self.expr(e);
        self.i().i64_const(0).i64_ne();
    }

    fn expr(&mut self, e: &E) {
        match e {
            E::Int(v) => {
                self.i().i64_const(*v);
            }
            E::Local(l) => {
                self.i().local_get(l + 1);
            }
            E::Slot(s) => {
                let a = self.addr(*s);
                self.i().i32_const(a);
            }
            E::Static(a) => {
                self.i().i32_const(*a as i32);
            }
            E::Table { base, stride } => {
                self.i()
                    .i32_const(*base as i32)
                    .local_get(0)
                    .i32_const(*stride as i32)
                    .i32_mul()
                    .i32_add();
            }
            E::TableAt {
                base,
                stride,
                count,
                index,
            } => self.table_at(*base, *stride, *count, index),
            E::Reg(r) => {
                self.i().i32_const(*r as i32).i32_const(0);
                self.call(I::read_reg);
            }
            E::UsdtArg(n) => {
                self.i().i32_const(*n as i32);
                self.call(I::usdt_arg);
            }
            E::Fact(f) => self.fact(f),
            E::Comm(slot) => {
                let a = self.addr(*slot);
                self.zero(a, 16);
                self.i().i32_const(a).i32_const(15);
                self.call(I::current_comm);
                self.i().drop().i32_const(a);
            }
            E::Un(op, x) => self.unop(op, x),
            E::Bin(op, signed, a, b) => self.binop(*op, *signed, a, b),
            E::StrEq { ne, a, b, n } => self.str_eq(*ne, a, b, *n),
            E::MemEq { ne, a, b, n } => self.mem_eq(*ne, a, b, *n),
            E::StrContains {
                hay,
                hn,
                needle,
                nn,
            } => self.str_contains(hay, *hn, needle, *nn),
            E::Ternary(c, a, b) => {
                self.truth(c);
                self.i().if_(BlockType::Result(ValType::I64));
                self.labels.push(Lbl::Plain);
                self.expr(a);
                self.i().else_();
                self.expr(b);
                self.labels.pop();
                self.i().end();
            }
            E::Cast { e, signed, bytes } => self.cast(e, signed, bytes),
            E::ReadStr {
                addr,
                max,
                slot,
                size,
            } => self.read_str(addr, max, *slot, *size),
            E::ReadBuf {
                addr,
                len,
                slot,
                cap,
            } => self.read_buf(addr, len, *slot, *cap),
            E::Load {
                addr,
                bytes,
                signed,
                slot,
            } => self.load(addr, *bytes, *signed, *slot),
            E::Ustack {
                slot,
                frames,
                entry_fixup,
            } => self.ustack(*slot, *frames, *entry_fixup),
            E::Usym { addr, slot } => self.usym(addr, *slot),
            E::MapGet { map, key, slot, ty } => self.map_get(*map, key, *slot, ty),
            E::MapEntry {
                map,
                cursor,
                key,
                val,
            } => self.map_entry(*map, cursor, *key, *val),
            E::MapHas { map, key } => self.map_has(*map, key),
            E::Tuple { slot, parts } => {
                let a = self.addr(*slot);
                self.parts(a, parts);
                self.i().i32_const(a);
            }
            E::Field { base, off, ty } => {
                self.expr(base);
                if ty.is_agg() {
                    self.i().i32_const(*off as i32).i32_add();
                } else {
                    self.i().i64_load(mem(*off, 3));
                }
            }
            E::Seq(list, x) => {
                self.stmts(list);
                self.expr(x);
            }
        }
    }
}

/// Whether `e` leaves an address (aggregate) rather than an i64.
fn is_agg(e: &E) -> bool {
    match e {
        E::Slot(_)
        | E::Static(_)
        | E::Table { .. }
        | E::TableAt { .. }
        | E::Comm(_)
        | E::ReadStr { .. }
        | E::ReadBuf { .. }
        | E::Ustack { .. }
        | E::Usym { .. }
        | E::Tuple { .. } => true,
        E::MapGet { ty, .. } | E::Field { ty, .. } => ty.is_agg(),
        E::Seq(_, x) => is_agg(x),
        _ => false,
    }
}

/// Bytes an aggregate expression provides, when it is known here.
fn agg_size(e: &E) -> Option<u32> {
    Some(match e {
        E::Comm(_) => 16,
        E::ReadStr { size, .. } => size.div_ceil(8) * 8,
        E::ReadBuf { cap, .. } => 8 + cap.div_ceil(8) * 8,
        E::Ustack { frames, .. } => 16 + 8 * frames,
        E::Usym { .. } => 16,
        E::MapGet { ty, .. } | E::Field { ty, .. } => Ty::size(ty),
        E::Table { stride, .. } | E::TableAt { stride, .. } => *stride,
        E::Seq(_, x) => return agg_size(x),
        _ => return None,
    })
}

/// The body of one handler.
pub fn handler(ctx: &Ctx, h: &Handler) -> Function {
    let run = |t64: u32, t32: u32, base32: u32| {
        let mut g = Gen {
            ctx,
            f: Function::new([
                (h.locals, ValType::I64),
                (t64, ValType::I64),
                (t32, ValType::I32),
            ]),
            labels: Vec::new(),
            t64_base: 1 + h.locals,
            t32_base: base32,
            t64: 0,
            t32: 0,
            max64: 0,
            max32: 0,
        };
        g.stmts(&h.body);
        g.i().i32_const(hostabi::Outcome::Exit as i32).end();
        (g.f, g.max64, g.max32)
    };
    // First pass: count temporaries (their indexes are placeholders).
    let (_, m64, m32) = run(0, 0, 1 + h.locals + 100_000);
    let (f, _, _) = run(m64, m32, 1 + h.locals + m64);
    f
}
