//! One handler body: `(probe index: i32) -> outcome: i32`. Integer
//! expressions leave an i64, aggregates the i32 address of their bytes.
//! Division and modulo are unsigned with bpftrace's zero rules (x / 0 = 0,
//! x % 0 = x); comparisons are signed only when both operands are.

use super::{Ctx, SCRATCH_ENTRY, SCRATCH_FP};
use crate::ast::{BinOp, UnOp};
use crate::ir::{E, Emit, Fact, Handler, Key, Part, S, Ty};
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
            } => {
                let t = self.temp64();
                self.i().i32_const(*base as i32);
                self.expr(index);
                let last = count.saturating_sub(1) as i64;
                self.i()
                    .local_tee(t)
                    .i64_const(*count as i64)
                    .i64_lt_u()
                    .if_(BlockType::Result(ValType::I64))
                    .local_get(t)
                    .else_()
                    .i64_const(last)
                    .end()
                    .i32_wrap_i64()
                    .i32_const(*stride as i32)
                    .i32_mul()
                    .i32_add();
                self.free64();
            }
            E::Reg(r) => {
                self.i().i32_const(*r as i32).i32_const(0);
                self.call(I::read_reg);
            }
            E::UsdtArg(n) => {
                self.i().i32_const(*n as i32);
                self.call(I::usdt_arg);
            }
            E::Fact(f) => match f {
                Fact::Pid => self.call(I::current_pid),
                Fact::Tid => self.call(I::current_tid),
                Fact::Cpu => self.call(I::current_cpu),
                Fact::Uid => self.call(I::current_uid),
                Fact::Gid => self.call(I::current_gid),
                Fact::Numaid => self.call(I::current_numa_node),
                Fact::Cpid => self.call(I::child_pid),
                Fact::Bias => self.call(I::load_bias),
                Fact::Nsecs => {
                    self.i().i32_const(hostabi::imports::clock::MONOTONIC);
                    self.call(I::clock_ns);
                }
                Fact::Elapsed => {
                    self.i().i32_const(hostabi::imports::clock::SINCE_START);
                    self.call(I::clock_ns);
                }
                Fact::NsecsBoot => {
                    self.i().i32_const(hostabi::imports::clock::BOOTTIME);
                    self.call(I::clock_ns);
                }
                Fact::NsecsTai => {
                    self.i().i32_const(hostabi::imports::clock::TAI);
                    self.call(I::clock_ns);
                }
            },
            E::Comm(slot) => {
                let a = self.addr(*slot);
                self.zero(a, 16);
                self.i().i32_const(a).i32_const(15);
                self.call(I::current_comm);
                self.i().drop().i32_const(a);
            }
            E::Un(op, x) => match op {
                UnOp::Neg => {
                    self.i().i64_const(0);
                    self.expr(x);
                    self.i().i64_sub();
                }
                UnOp::Not => {
                    self.expr(x);
                    self.i().i64_eqz().i64_extend_i32_u();
                }
                UnOp::BitNot => {
                    self.expr(x);
                    self.i().i64_const(-1).i64_xor();
                }
                UnOp::Deref => {
                    self.expr(x);
                }
            },
            E::Bin(op, signed, a, b) => self.binop(*op, *signed, a, b),
            E::StrEq { ne, a, b, n } => {
                self.expr(a);
                self.expr(b);
                self.i().i32_const(*n as i32);
                let f = self.ctx.streq.expect("codegen invariant: streq collected");
                self.i().call(f);
                if *ne {
                    self.i().i32_eqz();
                }
                self.i().i64_extend_i32_u();
            }
            E::MemEq { ne, a, b, n } => {
                self.expr(a);
                self.expr(b);
                self.i().i32_const(*n as i32);
                let f = self.ctx.memeq.expect("codegen invariant: memeq collected");
                self.i().call(f);
                if *ne {
                    self.i().i32_eqz();
                }
                self.i().i64_extend_i32_u();
            }
            E::StrContains {
                hay,
                hn,
                needle,
                nn,
            } => {
                self.expr(hay);
                self.i().i32_const(*hn as i32);
                self.expr(needle);
                self.i().i32_const(*nn as i32);
                let f = self
                    .ctx
                    .strcontains
                    .expect("codegen invariant: strcontains collected");
                self.i().call(f).i64_extend_i32_u();
            }
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
            E::Cast { e, signed, bytes } => {
                self.expr(e);
                match (signed, bytes) {
                    (_, 8) => {}
                    (true, 1) => {
                        self.i().i64_extend8_s();
                    }
                    (true, 2) => {
                        self.i().i64_extend16_s();
                    }
                    (true, _) => {
                        self.i().i64_extend32_s();
                    }
                    (false, b) => {
                        let mask = (1i64 << (*b as u32 * 8)) - 1;
                        self.i().i64_const(mask).i64_and();
                    }
                }
            }
            E::ReadStr {
                addr,
                max,
                slot,
                size,
            } => {
                let a = self.addr(*slot);
                self.zero(a, size.div_ceil(8) * 8);
                self.expr(addr);
                self.i().i32_const(a);
                // Bytes before the NUL: min(max, size) - 1, at least 0.
                match max.as_ref() {
                    E::Int(m) => {
                        let n = (*m).min(*size as i64).max(1) - 1;
                        self.i().i32_const(n as i32);
                    }
                    m => {
                        let t = self.temp64();
                        self.expr(m);
                        self.i().local_tee(t).i64_const(*size as i64).local_get(t);
                        self.i()
                            .i64_const(*size as i64)
                            .i64_lt_u()
                            .select()
                            .i32_wrap_i64()
                            .i32_const(1)
                            .i32_sub();
                        // A max of 0 gives -1: read nothing.
                        let t32 = self.temp32();
                        self.i()
                            .local_tee(t32)
                            .i32_const(0)
                            .local_get(t32)
                            .i32_const(0)
                            .i32_gt_s()
                            .select();
                        self.free32();
                        self.free64();
                    }
                }
                self.call(I::read_str);
                self.i().i32_const(0).i32_lt_s();
                self.i().if_(BlockType::Empty);
                self.labels.push(Lbl::Plain);
                self.zero(a, size.div_ceil(8) * 8);
                self.labels.pop();
                self.i().end().i32_const(a);
            }
            E::ReadBuf {
                addr,
                len,
                slot,
                cap,
            } => {
                let a = self.addr(*slot);
                self.zero(a, 8 + cap.div_ceil(8) * 8);
                let n = self.temp32();
                // n = min(len, cap)
                self.expr(len);
                let t = self.temp64();
                self.i()
                    .local_tee(t)
                    .i64_const(*cap as i64)
                    .local_get(t)
                    .i64_const(*cap as i64)
                    .i64_lt_u()
                    .select()
                    .i32_wrap_i64()
                    .local_set(n);
                self.free64();
                self.expr(addr);
                self.i().i32_const(a + 8).local_get(n);
                self.call(I::read_mem);
                self.i().local_get(n).i32_ne();
                self.i().if_(BlockType::Empty);
                self.labels.push(Lbl::Plain);
                self.zero(a + 8, cap.div_ceil(8) * 8);
                self.labels.pop();
                self.i()
                    .end()
                    .i32_const(a)
                    .local_get(n)
                    .i64_extend_i32_u()
                    .i64_store(mem(0, 3))
                    .i32_const(a);
                self.free32();
            }
            E::Load {
                addr,
                bytes,
                signed,
                slot,
            } => {
                let a = self.addr(*slot);
                self.expr(addr);
                self.i().i32_const(a).i32_const(*bytes as i32);
                self.call(I::read_mem);
                self.i()
                    .i32_const(*bytes as i32)
                    .i32_eq()
                    .if_(BlockType::Result(ValType::I64));
                self.labels.push(Lbl::Plain);
                self.i().i32_const(a);
                match (bytes, signed) {
                    (1, true) => self.i().i64_load8_s(mem(0, 0)),
                    (1, false) => self.i().i64_load8_u(mem(0, 0)),
                    (2, true) => self.i().i64_load16_s(mem(0, 1)),
                    (2, false) => self.i().i64_load16_u(mem(0, 1)),
                    (4, true) => self.i().i64_load32_s(mem(0, 2)),
                    (4, false) => self.i().i64_load32_u(mem(0, 2)),
                    _ => self.i().i64_load(mem(0, 3)),
                };
                self.i().else_().i64_const(0);
                self.labels.pop();
                self.i().end();
            }
            E::Ustack {
                slot,
                frames,
                entry_fixup,
            } => self.ustack(*slot, *frames, *entry_fixup),
            E::Usym { addr, slot } => {
                let a = self.addr(*slot);
                self.i().i32_const(a);
                self.expr(addr);
                self.i().i64_store(mem(0, 3)).i32_const(a);
                self.call(I::current_pid);
                self.i().i64_store(mem(8, 3)).i32_const(a);
            }
            E::MapGet { map, key, slot, ty } => {
                self.key(key);
                let v = self.addr(*slot);
                self.zero(v, ty.size());
                let k = self.addr(key.slot);
                self.i()
                    .i32_const(*map as i32)
                    .i32_const(k)
                    .i32_const(key.size as i32)
                    .i32_const(v)
                    .i32_const(ty.size() as i32);
                self.call(I::map_lookup);
                self.i().drop();
                if ty.is_agg() {
                    self.i().i32_const(v);
                } else {
                    self.i().i32_const(v).i64_load(mem(0, 3));
                }
            }
            E::MapEntry {
                map,
                cursor,
                key,
                val,
            } => {
                let (k, v) = (self.addr(key.0), self.addr(val.0));
                self.i().i32_const(*map as i32);
                self.expr(cursor);
                self.i()
                    .i32_const(k)
                    .i32_const(key.1 as i32)
                    .i32_const(v)
                    .i32_const(val.1 as i32);
                self.call(I::map_entry);
                self.i().i64_extend_i32_s();
            }
            E::MapHas { map, key } => {
                self.key(key);
                let k = self.addr(key.slot);
                self.i()
                    .i32_const(*map as i32)
                    .i32_const(k)
                    .i32_const(key.size as i32)
                    .i32_const(k)
                    .i32_const(0);
                self.call(I::map_lookup);
                // The value's length when found, a negative status when not.
                self.i().i32_const(0).i32_ge_s().i64_extend_i32_u();
            }
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

    fn binop(&mut self, op: BinOp, signed: bool, a: &E, b: &E) {
        match op {
            BinOp::LAnd | BinOp::LOr => {
                self.truth(a);
                self.i().if_(BlockType::Result(ValType::I64));
                self.labels.push(Lbl::Plain);
                if op == BinOp::LAnd {
                    self.truth(b);
                    self.i().i64_extend_i32_u().else_().i64_const(0);
                } else {
                    self.i().i64_const(1).else_();
                    self.truth(b);
                    self.i().i64_extend_i32_u();
                }
                self.labels.pop();
                self.i().end();
                return;
            }
            BinOp::Div | BinOp::Mod => {
                let (ta, tb) = (self.temp64(), self.temp64());
                self.expr(a);
                self.i().local_set(ta);
                self.expr(b);
                self.i()
                    .local_tee(tb)
                    .i64_eqz()
                    .if_(BlockType::Result(ValType::I64));
                if op == BinOp::Div {
                    self.i().i64_const(0);
                } else {
                    self.i().local_get(ta);
                }
                self.i().else_().local_get(ta).local_get(tb);
                if op == BinOp::Div {
                    self.i().i64_div_u();
                } else {
                    self.i().i64_rem_u();
                }
                self.i().end();
                self.free64();
                self.free64();
                return;
            }
            _ => {}
        }
        self.expr(a);
        self.expr(b);
        let mut i = self.i();
        match op {
            BinOp::Add => i.i64_add(),
            BinOp::Sub => i.i64_sub(),
            BinOp::Mul => i.i64_mul(),
            BinOp::BitAnd => i.i64_and(),
            BinOp::BitOr => i.i64_or(),
            BinOp::BitXor => i.i64_xor(),
            BinOp::Shl => i.i64_shl(),
            BinOp::Shr => i.i64_shr_u(),
            BinOp::Eq => i.i64_eq().i64_extend_i32_u(),
            BinOp::Ne => i.i64_ne().i64_extend_i32_u(),
            BinOp::Lt if signed => i.i64_lt_s().i64_extend_i32_u(),
            BinOp::Lt => i.i64_lt_u().i64_extend_i32_u(),
            BinOp::Le if signed => i.i64_le_s().i64_extend_i32_u(),
            BinOp::Le => i.i64_le_u().i64_extend_i32_u(),
            BinOp::Gt if signed => i.i64_gt_s().i64_extend_i32_u(),
            BinOp::Gt => i.i64_gt_u().i64_extend_i32_u(),
            BinOp::Ge if signed => i.i64_ge_s().i64_extend_i32_u(),
            BinOp::Ge => i.i64_ge_u().i64_extend_i32_u(),
            BinOp::Div | BinOp::Mod | BinOp::LAnd | BinOp::LOr => &mut i,
        };
    }

    /// The kernel's user frame-pointer walk: the IP, then the return
    /// address of each frame from RBP, until a frame cannot be read.
    fn ustack(&mut self, slot: u32, frames: u32, entry_fixup: bool) {
        use crate::check::reg::RBP;
        let a = self.addr(slot);
        let size = 16 + 8 * frames;
        self.zero(a, size);
        self.i().i32_const(a);
        self.call(I::current_pid);
        self.i().i64_store(mem(0, 3));
        // frame 0: the instruction pointer
        self.i()
            .i32_const(a)
            .i32_const(hostabi::regs::RIP as i32)
            .i32_const(0);
        self.call(I::read_reg);
        self.i().i64_store(mem(16, 3));
        let (cnt, fp) = (self.temp32(), self.temp64());
        self.i().i32_const(1).local_set(cnt);
        if entry_fixup && frames > 1 {
            // The probed instruction (original bytes: the runtime hides its
            // own breakpoints): push %rbp (0x55) or endbr64 (f3 0f 1e fa)?
            self.i().i32_const(hostabi::regs::RIP as i32).i32_const(0);
            self.call(I::read_reg);
            self.i().i32_const(SCRATCH_ENTRY as i32).i32_const(4);
            self.call(I::read_mem);
            self.i()
                .i32_const(4)
                .i32_eq()
                .i32_const(SCRATCH_ENTRY as i32)
                .i32_load8_u(mem(0, 0))
                .i32_const(0x55)
                .i32_eq()
                .i32_const(SCRATCH_ENTRY as i32)
                .i32_load(mem(0, 2))
                .i32_const(0xfa1e0ff3u32 as i32)
                .i32_eq()
                .i32_or()
                .i32_and()
                .if_(BlockType::Empty);
            self.labels.push(Lbl::Plain);
            self.i().i32_const(hostabi::regs::RSP as i32).i32_const(0);
            self.call(I::read_reg);
            self.i().i32_const(SCRATCH_ENTRY as i32).i32_const(8);
            self.call(I::read_mem);
            self.i().i32_const(8).i32_eq().if_(BlockType::Empty);
            self.labels.push(Lbl::Plain);
            self.i()
                .i32_const(a)
                .i32_const(SCRATCH_ENTRY as i32)
                .i64_load(mem(0, 3))
                .i64_store(mem(24, 3))
                .i32_const(2)
                .local_set(cnt);
            self.labels.pop();
            self.i().end();
            self.labels.pop();
            self.i().end();
        }
        self.i().i32_const(RBP as i32).i32_const(0);
        self.call(I::read_reg);
        self.i().local_set(fp);
        self.i().block(BlockType::Empty).loop_(BlockType::Empty);
        self.labels.push(Lbl::Plain);
        self.labels.push(Lbl::Plain);
        self.i()
            .local_get(cnt)
            .i32_const(frames as i32)
            .i32_ge_u()
            .br_if(1);
        self.i()
            .local_get(fp)
            .i32_const(SCRATCH_FP as i32)
            .i32_const(16);
        self.call(I::read_mem);
        self.i().i32_const(16).i32_ne().br_if(1);
        // frames[cnt] = [fp + 8]
        self.i()
            .i32_const(a + 16)
            .local_get(cnt)
            .i32_const(8)
            .i32_mul()
            .i32_add()
            .i32_const(SCRATCH_FP as i32)
            .i64_load(mem(8, 3))
            .i64_store(mem(0, 3));
        self.i()
            .local_get(cnt)
            .i32_const(1)
            .i32_add()
            .local_set(cnt);
        self.i()
            .i32_const(SCRATCH_FP as i32)
            .i64_load(mem(0, 3))
            .local_set(fp)
            .br(0);
        self.labels.pop();
        self.labels.pop();
        self.i().end().end();
        self.i()
            .i32_const(a)
            .local_get(cnt)
            .i64_extend_i32_u()
            .i64_store(mem(8, 3))
            .i32_const(a);
        self.free64();
        self.free32();
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

/// `streq(a: i32, b: i32, n: i32) -> i32`: 1 when the strings at `a` and
/// `b` are equal up to their NUL or `n` bytes.
pub fn streq_helper() -> Function {
    let mut f = Function::new([(1, ValType::I32)]);
    let (a, b, n, i) = (0, 1, 2, 3);
    f.instructions()
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(i)
        .local_get(n)
        .i32_ge_u()
        .br_if(1)
        .local_get(a)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .local_get(b)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_ne()
        .if_(BlockType::Empty)
        .i32_const(0)
        .return_()
        .end()
        .local_get(a)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_eqz()
        .br_if(1)
        .local_get(i)
        .i32_const(1)
        .i32_add()
        .local_set(i)
        .br(0)
        .end()
        .end()
        .i32_const(1)
        .end();
    f
}

/// `strcontains(h, hn, nd, nn) -> i32`: whether the NUL-terminated string
/// at `nd` (at most `nn` bytes) occurs in the one at `h` (at most `hn`).
pub fn strcontains_helper() -> Function {
    let mut f = Function::new([(3, ValType::I32)]);
    let (h, hn, nd, nn, i, j, nl) = (0, 1, 2, 3, 4, 5, 6);
    let mut ins = f.instructions();
    // nl = strnlen(nd, nn)
    ins.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(nl)
        .local_get(nn)
        .i32_ge_u()
        .br_if(1)
        .local_get(nd)
        .local_get(nl)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_eqz()
        .br_if(1)
        .local_get(nl)
        .i32_const(1)
        .i32_add()
        .local_set(nl)
        .br(0)
        .end()
        .end();
    ins.local_get(nl)
        .i32_eqz()
        .if_(BlockType::Empty)
        .i32_const(1)
        .return_()
        .end();
    // Each start i with i + nl <= hn, up to the haystack's NUL.
    ins.block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(i)
        .local_get(nl)
        .i32_add()
        .local_get(hn)
        .i32_gt_u()
        .br_if(1)
        .i32_const(0)
        .local_set(j)
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(j)
        .local_get(nl)
        .i32_ge_u()
        .if_(BlockType::Empty)
        .i32_const(1)
        .return_()
        .end()
        .local_get(h)
        .local_get(i)
        .i32_add()
        .local_get(j)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .local_get(nd)
        .local_get(j)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_ne()
        .br_if(1)
        .local_get(j)
        .i32_const(1)
        .i32_add()
        .local_set(j)
        .br(0)
        .end()
        .end()
        .local_get(h)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_eqz()
        .br_if(1)
        .local_get(i)
        .i32_const(1)
        .i32_add()
        .local_set(i)
        .br(0)
        .end()
        .end()
        .i32_const(0)
        .end();
    f
}

/// `memeq(a, b, n) -> i32`: whether the `n` bytes at `a` and `b` are equal.
pub fn memeq_helper() -> Function {
    let mut f = Function::new([(1, ValType::I32)]);
    let (a, b, n, i) = (0, 1, 2, 3);
    f.instructions()
        .block(BlockType::Empty)
        .loop_(BlockType::Empty)
        .local_get(i)
        .local_get(n)
        .i32_ge_u()
        .br_if(1)
        .local_get(a)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .local_get(b)
        .local_get(i)
        .i32_add()
        .i32_load8_u(mem(0, 0))
        .i32_ne()
        .if_(BlockType::Empty)
        .i32_const(0)
        .return_()
        .end()
        .local_get(i)
        .i32_const(1)
        .i32_add()
        .local_set(i)
        .br(0)
        .end()
        .end()
        .i32_const(1)
        .end();
    f
}
