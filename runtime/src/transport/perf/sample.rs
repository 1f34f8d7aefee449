//! Layout of the records wprobe asks the kernel for, and their decoding
//! into a [`PerfHit`] without allocation: identifier, ip, pid/tid, time,
//! cpu, the user registers of the session's mask (none at all when no
//! handler reads a register; see [`super::regbits::regs_mask`]) and, when handlers read
//! memory, a user stack snapshot. Never panics on any bytes: a short or
//! inconsistent record is reported as `None`.

use super::hit::PerfHit;
#[cfg(test)]
use super::regbits::{REGS_MASK, regs_mask};
#[cfg(test)]
use crate::wasm::regscan::RegsRead;
use perf_event::SampleFlag;

/// What every probe event samples: the user registers when `regs`, the
/// stack snapshot when `stack`.
pub fn sample_flags(stack: bool, regs: bool) -> SampleFlag {
    let mut f = SampleFlag::IDENTIFIER
        | SampleFlag::IP
        | SampleFlag::TID
        | SampleFlag::TIME
        | SampleFlag::CPU;
    if regs {
        f |= SampleFlag::REGS_USER;
    }
    if stack {
        f |= SampleFlag::STACK_USER;
    }
    f
}

/// Bytes of user stack copied into each sample: enough for a few frames and
/// the arguments passed on the stack; the kernel copies it on every hit, so
/// the cost grows with it.
pub const STACK_SNAPSHOT_BYTES: u32 = 8192;

/// `PERF_RECORD_SAMPLE`.
pub const RECORD_SAMPLE: u32 = 9;

fn u64_at(b: &[u8], off: usize) -> Option<u64> {
    let s = b.get(off..off.checked_add(8)?)?;
    Some(u64::from_le_bytes(s.try_into().ok()?))
}

/// The sample's identifier (first word), its time (for ordering across CPUs).
pub fn id_and_time(body: &[u8]) -> Option<(u64, u64)> {
    Some((u64_at(body, 0)?, u64_at(body, 24)?))
}

/// What identifies one hit among consecutive samples of a ring: (pid/tid
/// word, ip).
pub fn hit_key(body: &[u8]) -> Option<(u64, u64)> {
    Some((u64_at(body, 16)?, u64_at(body, 8)?))
}

/// Decodes the sample in `hit.rec` into the hit's fields; returns the
/// event identifier. `time_offset` turns the perf clock into wall-clock ns;
/// `stack`: whether the events sample the user stack; `mask`: the registers
/// they sample ([`super::regbits::regs_mask`]; 0: none, and no register field at all).
pub fn decode(hit: &mut PerfHit, time_offset: u64, stack: bool, mask: u64) -> Option<u64> {
    let b = &hit.rec;
    let id = u64_at(b, 0)?;
    let ip = u64_at(b, 8)?;
    let pidtid = u64_at(b, 16)?;
    let time = u64_at(b, 24)?;
    let cpu = u64_at(b, 32)?;
    let mut off = 40;
    // By bit of the kernel's mask.
    let mut regs = [0u64; 24];
    let mut has_regs = false;
    if mask != 0 {
        let abi = u64_at(b, off)?;
        off += 8;
        has_regs = abi != 0;
        if has_regs {
            for (bit, r) in regs.iter_mut().enumerate() {
                if mask & (1 << bit) != 0 {
                    *r = u64_at(b, off)?;
                    off += 8;
                }
            }
        }
    }
    let size = if stack {
        let n = usize::try_from(u64_at(b, off)?).ok()?;
        off += 8;
        n
    } else {
        0
    };
    let stack_off = off;
    let dyn_size = if size > 0 {
        let d = u64_at(b, off.checked_add(size)?)?;
        usize::try_from(d).ok()?.min(size)
    } else {
        0
    };
    hit.ip = ip;
    hit.pid = pidtid as u32;
    hit.tid = (pidtid >> 32) as u32;
    hit.time_ns = time.wrapping_add(time_offset);
    hit.cpu = cpu as u32;
    hit.has_regs = has_regs;
    hit.regs_mask = mask;
    hit.stack_off = stack_off;
    hit.stack_len = dyn_size;
    let r = &mut hit.regs;
    [
        r.rax,
        r.rbx,
        r.rcx,
        r.rdx,
        r.rsi,
        r.rdi,
        r.rbp,
        r.rsp,
        _,
        r.eflags,
        r.cs,
        r.ss,
    ] = regs[..12].try_into().ok()?;
    [r.r8, r.r9, r.r10, r.r11, r.r12, r.r13, r.r14, r.r15] = regs[16..24].try_into().ok()?;
    r.rip = ip;
    r.ds = 0;
    r.es = 0;
    r.fs = 0;
    r.gs = 0;
    r.orig_rax = u64::MAX;
    r.fs_base = 0;
    r.gs_base = 0;
    Some(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_a_sample_and_rejects_short_ones() {
        let mut body = Vec::new();
        for w in [7u64, 0x401000, (5u64 << 32) | 4, 1000, 1, 2] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        for i in 0..20u64 {
            body.extend_from_slice(&(100 + i).to_le_bytes());
        }
        body.extend_from_slice(&16u64.to_le_bytes());
        body.extend_from_slice(&[0xAB; 16]);
        body.extend_from_slice(&8u64.to_le_bytes());
        let mut h = PerfHit {
            rec: body.clone(),
            ..PerfHit::default()
        };
        assert_eq!(decode(&mut h, 5, true, REGS_MASK), Some(7));
        assert_eq!((h.pid, h.tid, h.cpu, h.time_ns), (4, 5, 1, 1005));
        assert_eq!(h.regs.rax, 100);
        assert_eq!(h.regs.rsp, 107);
        // The instruction pointer is the sample's IP.
        assert_eq!(h.regs.rip, 0x401000);
        assert_eq!(h.regs.r15, 119);
        assert_eq!(h.stack(), &[0xAB; 8]);
        for cut in [0, 8, 47, 100, body.len() - 1] {
            let mut h = PerfHit {
                rec: body[..cut].to_vec(),
                ..PerfHit::default()
            };
            assert_eq!(decode(&mut h, 0, true, REGS_MASK), None, "cut at {cut}");
        }
    }

    #[test]
    fn a_narrow_mask_carries_only_its_registers_in_bit_order() {
        use hostabi::env::HitEnv;
        const RDI: u16 = 0x0A;
        const RSP: u16 = 0x0E;
        const RIP: u16 = 0x0D;
        let mask = regs_mask(RegsRead::Only(1 << RDI), true);
        assert_eq!(mask, 1 << 5 | 1 << 7, "rdi, and rsp for the snapshot");
        let mut body = Vec::new();
        // id, ip, pid/tid, time, cpu, abi, rdi, rsp, stack size 8, 8 bytes, dyn size.
        for w in [7u64, 0x401000, 1, 2, 0, 2, 0xD1, 0x7000, 8, 0x55, 8] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        let mut h = PerfHit {
            rec: body,
            ..PerfHit::default()
        };
        assert_eq!(decode(&mut h, 0, true, mask), Some(7));
        assert_eq!(h.read_reg(RDI, 0), Some(0xD1));
        assert_eq!(h.read_reg(RSP, 0), Some(0x7000));
        assert_eq!(h.read_reg(RIP, 0), Some(0x401000));
        assert_eq!(h.read_reg(0x06, 0), None, "rax was not sampled");
        assert_eq!(h.stack(), &0x55u64.to_le_bytes());
        // No register at all: no ABI word either.
        let mut body = Vec::new();
        for w in [7u64, 0x401000, 1, 2, 0] {
            body.extend_from_slice(&w.to_le_bytes());
        }
        let mut h = PerfHit {
            rec: body,
            ..PerfHit::default()
        };
        assert_eq!(regs_mask(RegsRead::Only(0), false), 0);
        assert_eq!(decode(&mut h, 0, false, 0), Some(7));
        assert_eq!(h.read_reg(RIP, 0), Some(0x401000));
        assert_eq!(h.read_reg(RDI, 0), None);
        assert_eq!(regs_mask(RegsRead::All, false), REGS_MASK & !(1 << 8));
    }
}
