//! Unit tests of the reference interpreter on hand-built programs.
//!
//! This file holds the program builder and the helpers the tests share; the
//! tests are in submodules by subject: `examples` (spec examples), `arith`,
//! `stack`, `control` (branches, procedures), `exceptions`, `logging`,
//! `stacktrace`, `system` (registers, memory, system values), `vars`,
//! `heap_io` (heap, I/O, `callk`) and `return_probes`.

use super::*;
use crate::ast::{
    Body, BodyOwner, FileHeader, Insn, LocationKind, Op, Probe, Proc, SlotOp, StackRel, VarOp,
    VarSpace, Width,
};
use crate::model::ModelEnv;
use crate::source::Span;
use Op::*;
use hostabi::record::{ItemKind, LogItem, decode_stacktrace};
use hostabi::regs;

mod arith;
mod control;
mod examples;
mod exceptions;
mod heap_io;
mod logging;
mod return_probes;
mod stack;
mod stacktrace;
mod system;
mod vars;
// ----- builder -----

/// Builds a checked-looking program: probe bodies first, then procedures,
/// each with its implicit terminator, offsets laid out as in §15.
struct Builder {
    header: FileHeader,
    probes: Vec<(Probe, Vec<Op>)>,
    procs: Vec<(String, Vec<Op>)>,
}

fn probe_cfg(value: u64) -> Probe {
    Probe {
        kind: LocationKind::Offset,
        symbol: None,
        value,
        addend: 0,
        length: 1,
        opcode: Some(0x55),
        watch: None,
        group: None,
        r#type: None,
        minor: 0,
        ignore: 0,
        maxhits: 0x7FFF_FFFF,
        logonfault: false,
        excpt_mask: 0x0FFF,
        heap: 0,
        r#return: false,
        maxactive: 0,
        usdt: Vec::new(),
        body: 0,
        span: Span::default(),
    }
}

impl Builder {
    fn new() -> Builder {
        Builder {
            header: FileHeader {
                name: "probe_target".into(),
                ..FileHeader::default()
            },
            probes: Vec::new(),
            procs: Vec::new(),
        }
    }

    fn header(mut self, f: impl FnOnce(&mut FileHeader)) -> Builder {
        f(&mut self.header);
        self
    }

    fn probe(mut self, ops: Vec<Op>) -> Builder {
        let mut p = probe_cfg(0x401146);
        p.excpt_mask = self.header.excpt_mask;
        p.heap = self.header.heap;
        self.probes.push((p, ops));
        self
    }

    /// Adjusts the last probe.
    fn cfg(mut self, f: impl FnOnce(&mut Probe)) -> Builder {
        if let Some((p, _)) = self.probes.last_mut() {
            f(p);
        }
        self
    }

    fn proc_(mut self, name: &str, ops: Vec<Op>) -> Builder {
        self.procs.push((name.into(), ops));
        self
    }

    fn build(self) -> Program {
        let mut bodies = Vec::new();
        let mut probes = Vec::new();
        let mut procs = Vec::new();
        let mut offset = 0u32;
        let mut lay = |owner: BodyOwner, mut ops: Vec<Op>, term: Op| {
            ops.push(term);
            let insns = ops
                .into_iter()
                .map(|op| {
                    let insn = Insn {
                        span: Span::default(),
                        offset,
                        op,
                    };
                    offset += insn.op.size();
                    insn
                })
                .collect();
            bodies.push(Body { owner, insns });
            bodies.len() - 1
        };
        for (i, (mut p, ops)) in self.probes.into_iter().enumerate() {
            p.body = lay(BodyOwner::Probe(i), ops, Exit);
            probes.push(p);
        }
        for (i, (name, ops)) in self.procs.into_iter().enumerate() {
            let body = lay(BodyOwner::Proc(i), ops, Ret);
            procs.push(Proc {
                name,
                body,
                span: Span::default(),
            });
        }
        Program {
            header: self.header,
            probes,
            procs,
            bodies,
            code_size: offset,
        }
    }
}

fn run_on(p: &Program, probe: usize, env: &mut ModelEnv) -> RunResult {
    let mut st = ProgramState::new(p);
    run(p, probe, &mut st, env, &Limits::default())
}

/// Runs probe 0 of a one-probe program with default header on a target_fn(5) hit.
fn hit(ops: Vec<Op>) -> RunResult {
    let p = Builder::new().probe(ops).build();
    run_on(&p, 0, &mut ModelEnv::probe_target_hit(5))
}

fn hit_with(b: Builder) -> RunResult {
    let p = b.build();
    run_on(&p, 0, &mut ModelEnv::probe_target_hit(5))
}

fn data(r: &RunResult) -> &[u8] {
    &r.records[0].data
}

fn words(r: &RunResult) -> Vec<u64> {
    data(r)
        .chunks(8)
        .map(|c| {
            let mut a = [0u8; 8];
            a[..c.len()].copy_from_slice(c);
            u64::from_le_bytes(a)
        })
        .collect()
}

fn item(offset: u16, kind: ItemKind) -> u32 {
    LogItem { offset, kind }.encode()
}

fn le(v: u64) -> [u8; 8] {
    v.to_le_bytes()
}

const IA: u64 = 0x0001;
const MAXJ: u64 = 0x0004;
const CSO: u64 = 0x0010;
const DBZ: u64 = 0x0020;
const IOP: u64 = 0x0040;
const IOPC: u64 = 0x0080;
const LOGOV: u64 = 0x1000;
const NONE: u64 = HANDLER_NONE;
