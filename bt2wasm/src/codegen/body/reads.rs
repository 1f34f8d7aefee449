//! Expressions that read the hit: facts (pid, clocks...), strings,
//! buffers and integers from the traced process's memory, `usym` values
//! and user stacks.

use super::{Gen, Lbl, mem};
use crate::codegen::{SCRATCH_ENTRY, SCRATCH_FP};
use crate::ir::{E, Fact};
use hostabi::ImportId as I;
use wasm_encoder::{BlockType, ValType};

impl Gen<'_> {
    /// A fact of the hit: an import call, or a clock read.
    pub(super) fn fact(&mut self, f: &Fact) {
        match f {
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
        }
    }

    /// `read_str` into slot `slot`: at most `min(max, size) - 1` bytes and
    /// the NUL; all zeros when the read fails.
    pub(super) fn read_str(&mut self, addr: &E, max: &E, slot: u32, size: u32) {
        let a = self.addr(slot);
        self.zero(a, size.div_ceil(8) * 8);
        self.expr(addr);
        self.i().i32_const(a);
        // Bytes before the NUL: min(max, size) - 1, at least 0.
        match max {
            E::Int(m) => {
                let n = (*m).min(size as i64).max(1) - 1;
                self.i().i32_const(n as i32);
            }
            m => {
                let t = self.temp64();
                self.expr(m);
                self.i().local_tee(t).i64_const(size as i64).local_get(t);
                self.i()
                    .i64_const(size as i64)
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

    /// `read_mem` of `min(len, cap)` bytes into a buffer (its length, then
    /// the bytes) in slot `slot`; the bytes zero when the read fails.
    pub(super) fn read_buf(&mut self, addr: &E, len: &E, slot: u32, cap: u32) {
        let a = self.addr(slot);
        self.zero(a, 8 + cap.div_ceil(8) * 8);
        let n = self.temp32();
        // n = min(len, cap)
        self.expr(len);
        let t = self.temp64();
        self.i()
            .local_tee(t)
            .i64_const(cap as i64)
            .local_get(t)
            .i64_const(cap as i64)
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

    /// An integer of `bytes` bytes read from the process, 0 when the read
    /// fails.
    pub(super) fn load(&mut self, addr: &E, bytes: u8, signed: bool, slot: u32) {
        let a = self.addr(slot);
        self.expr(addr);
        self.i().i32_const(a).i32_const(bytes as i32);
        self.call(I::read_mem);
        self.i()
            .i32_const(bytes as i32)
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

    /// A `usym` value: the address and the pid, symbolized when printed.
    pub(super) fn usym(&mut self, addr: &E, slot: u32) {
        let a = self.addr(slot);
        self.i().i32_const(a);
        self.expr(addr);
        self.i().i64_store(mem(0, 3)).i32_const(a);
        self.call(I::current_pid);
        self.i().i64_store(mem(8, 3)).i32_const(a);
    }

    /// The kernel's user frame-pointer walk: the IP, then the return
    /// address of each frame from RBP, until a frame cannot be read.
    pub(super) fn ustack(&mut self, slot: u32, frames: u32, entry_fixup: bool) {
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
