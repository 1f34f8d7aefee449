//! Builds the `hostabi` manifest of a checked program.

use crate::ast::{LocationKind, Program, WatchKind};
use hostabi::manifest::{self as m, Manifest, ProbeKind, ProbeSpec};

/// Export name of probe `i`'s handler.
pub fn export_name(i: usize) -> String {
    format!("probe{i}")
}

/// The manifest of `program`.
pub fn build(program: &Program) -> Manifest {
    let h = &program.header;
    let probes = program
        .probes
        .iter()
        .enumerate()
        .flat_map(|(i, p)| {
            let location = m::Location {
                kind: match p.kind {
                    LocationKind::Offset => m::LocationKind::Offset,
                    LocationKind::Address => m::LocationKind::Address,
                },
                symbol: p.symbol.clone(),
                addend: p.addend,
            };
            let spec = ProbeSpec {
                value: Some(p.value),
                opcode: p.opcode,
                kind: match p.watch {
                    None => ProbeKind::Breakpoint,
                    Some(WatchKind::X) => ProbeKind::WatchExec,
                    Some(WatchKind::W) => ProbeKind::WatchWrite,
                    Some(WatchKind::Rw) => ProbeKind::WatchReadWrite,
                },
                length: p.length,
                group: p.group.clone(),
                r#type: p.r#type.clone(),
                minor: p.minor,
                ignore: p.ignore,
                maxhits: p.maxhits,
                logonfault: p.logonfault,
                excpt_mask: p.excpt_mask,
                heap: p.heap,
                r#return: p.r#return,
                maxactive: p.maxactive,
                ..ProbeSpec::breakpoint(&export_name(i), location)
            };
            if p.usdt.is_empty() {
                return vec![spec];
            }
            // `usdt =`: one probe per site, all running this handler.
            p.usdt
                .iter()
                .map(|s| ProbeSpec {
                    location: m::Location {
                        kind: m::LocationKind::Offset,
                        symbol: None,
                        addend: s.addr,
                    },
                    value: Some(s.addr),
                    usdt_args: s.args.clone(),
                    semaphore: s.semaphore,
                    ..spec.clone()
                })
                .collect()
        })
        .collect();
    Manifest {
        abi: hostabi::ABI_VERSION,
        module: h.name.clone(),
        major: h.major,
        id: h.id,
        vars: h.vars,
        gvars: h.gvars,
        logmax: h.logmax,
        jmpmax: h.jmpmax,
        excpt_log: h.excpt_log,
        autostacktrace: h.autostacktrace,
        fuel: 0,
        groups: h.groups.clone(),
        types: h.types.clone(),
        probes,
        maps: Vec::new(),
        stops: stops(program),
    }
}

/// The `exit 1` (debugger hand-off) and `exit 3` (core dump) anywhere in
/// `program`, sorted: a transport that cannot stop the target at a hit
/// refuses such a program at load instead of failing at the hit.
fn stops(program: &Program) -> Vec<u8> {
    let mut v: Vec<u8> = program
        .bodies
        .iter()
        .flat_map(|b| &b.insns)
        .filter_map(|i| match i.op {
            crate::ast::Op::ExitN(n @ (1 | 3)) => Some(n),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}
