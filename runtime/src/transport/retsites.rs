//! Where the calls of a function return, decoded from its module file at
//! arming time: the `ret` instructions of the function, and of the
//! functions it continues in through direct jumps (a tail call `jmp g`, a
//! conditional tail call, or the `f.cold` part GCC splits off), so that a
//! probe on each sees every return that passes through them. The perf
//! transport puts a uprobe there, the in-process transport a return site,
//! instead of rewriting return addresses as the kernel's uretprobes do
//! (their trampoline address on the stack makes the C++ unwinder give up:
//! an exception thrown through a traced frame then terminates the
//! program).
//!
//! A tail call that leaves the module (`jmp f@plt`, or `jmp *f@GOTPCREL`)
//! is listed by the name of the function it goes to ([`ReturnSites::
//! outside`]): a transport that finds that function in the process may
//! take its `ret`s as return sites too (the in-process transport does).
//! Not seen: a tail call through any other indirect jump; such a call's
//! return is never observed and the call is reported as gone when its
//! thread moves on.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Instruction};
use wprobe_elf::{ElfInfo, Symbol};

use crate::transport::{Error, Rule};

/// At most this many functions are followed through tail jumps from one
/// probed function.
const MAX_FUNCTIONS: usize = 64;

/// The returns of the function entered at `entry` (a file offset of the
/// module `elf`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReturnSites {
    /// The function's name.
    pub function: String,
    /// File offsets of every `ret` through which its calls return, sorted.
    pub rets: Vec<u64>,
    /// The functions followed (the probed one first).
    pub followed: Vec<String>,
    /// Functions of other modules it tail-calls (through the PLT or the
    /// GOT), by name, sorted: its calls that go there return through their
    /// `ret`s.
    pub outside: Vec<String>,
    /// The link-time addresses of its other indirect jumps (`jmp *%rax`):
    /// a jump table's, or a tail call through a pointer, whose calls
    /// return through `ret`s no decoding finds.
    pub indirect: Vec<u64>,
    /// Its calls never return: no `ret`, no jump out of the functions
    /// followed, no indirect jump (every path ends in a call that does not
    /// return: `exit`, `longjmp`, `abort`, or `ud2`). A transport tracks
    /// its calls from their entry, and each is closed as unwound when its
    /// thread leaves it, with no return site.
    pub never_returns: bool,
}

/// The refusal of a return probe on a function whose calls return
/// through no `ret` of its module: `--transport TRANSPORT` cannot give it
/// return sites (`addr`: the function's entry, when it has a run-time
/// address).
pub fn no_ret(function: &str, path: &std::path::Path, transport: &str, addr: Option<u64>) -> Error {
    let why = format!(
        "has no `ret` instruction (it ends in calls that do not return, or in tail calls out of \
         the module): --transport {transport} cannot observe its returns; use --transport ptrace"
    );
    Error::refused(
        Rule::Returns,
        addr,
        format!("{function} in {} {why}", path.display()),
    )
    .alike(format!("it {why}"))
}

/// A function followed: its name (or its address, when no symbol names
/// it) and its link-time range.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Followed {
    name: String,
    start: u64,
    end: u64,
}

impl Followed {
    fn of(s: &Symbol) -> Followed {
        Followed {
            name: s.name.clone(),
            start: s.value,
            end: s.value.saturating_add(s.size),
        }
    }

    /// The function starting at `vaddr`: a code symbol's, else the unwind
    /// table's range of a function no symbol names.
    fn starting_at(elf: &ElfInfo, vaddr: u64) -> Option<Followed> {
        if let Some(s) = elf.function_starting_at(vaddr) {
            return Some(Followed::of(s));
        }
        let (start, end) = elf.unnamed_function_at(vaddr)?;
        Some(Followed {
            name: format!("{start:#x}"),
            start,
            end,
        })
    }
}

/// The function whose file bytes contain file offset `off`: the innermost
/// code symbol with a size, else an unnamed function that starts there.
fn function_at_offset(elf: &ElfInfo, off: u64) -> Option<Followed> {
    let at = elf.vaddr_of_offset(off)?;
    match elf.function_containing(at) {
        Some(s) => Some(Followed::of(s)),
        None => Followed::starting_at(elf, at),
    }
}

/// Decodes the function entered at file offset `entry` and the functions
/// it jumps into, and lists their `ret` instructions (for return probes of
/// `--transport TRANSPORT`). A function the symbol tables do not name is
/// bounded by its unwind table entry: a static function of a stripped
/// module it tail-calls, or an IFUNC's implementation entered at `entry`.
/// A refusal ([`Rule::Returns`], no address: the caller's [`Error::at`])
/// when its function cannot be found or has no `ret`.
pub fn return_sites(elf: &ElfInfo, entry: u64, transport: &str) -> Result<ReturnSites, Error> {
    return_sites_in(elf, entry, transport, None)
}

/// Where a direct jump out of a function goes, looked up once with the
/// function's decoding (a function followed from thousands of probed ones
/// had its jumps' targets looked up again for each: a third of the
/// instructions of finding python3.11's return sites).
#[derive(Debug, PartialEq, Eq)]
struct Leap {
    /// The jump's target (link-time).
    to: u64,
    /// The function that starts there.
    function: Option<Followed>,
    /// The function of another module whose PLT entry is there.
    import: Option<String>,
}

/// What one function's own code says of its returns: one decoding of it.
#[derive(Debug, Default, PartialEq, Eq)]
struct Own {
    /// File offsets of its `ret`s.
    rets: Vec<u64>,
    /// Its direct jumps out of its range, in its order.
    jumps: Vec<Leap>,
    /// The names of the functions of other modules it tail-calls through
    /// the GOT.
    outside: Vec<String>,
    /// Its other indirect jumps.
    indirect: Vec<u64>,
}

impl Own {
    /// The decoding of `start..end` of `elf`.
    fn of(elf: &ElfInfo, start: u64, end: u64) -> Own {
        let mut own = Own::default();
        let Some(bytes) = elf.bytes_at(start, (end - start) as usize) else {
            return own;
        };
        let mut insn = Instruction::default();
        let mut d = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
        while d.can_decode() {
            d.decode_out(&mut insn);
            if insn.is_invalid() {
                // Data or padding past the code: nothing more to find.
                break;
            }
            match insn.flow_control() {
                FlowControl::Return => {
                    if let Some(off) = elf.file_offset(insn.ip()) {
                        own.rets.push(off);
                    }
                }
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    own.leap(elf, start..end, insn.near_branch_target());
                }
                FlowControl::IndirectBranch => own.indirect_jump(elf, &insn),
                _ => {}
            }
        }
        own
    }

    /// A direct jump to `to` from inside `range`: kept when it leaves the
    /// range, with where it goes.
    fn leap(&mut self, elf: &ElfInfo, range: std::ops::Range<u64>, to: u64) {
        if range.contains(&to) {
            return;
        }
        let leap = match self.jumps.iter().find(|l| l.to == to) {
            Some(l) => Leap {
                to,
                function: l.function.clone(),
                import: l.import.clone(),
            },
            None => Leap {
                to,
                function: Followed::starting_at(elf, to),
                import: elf.import_at(to).map(str::to_string),
            },
        };
        self.jumps.push(leap);
    }

    /// An indirect `jmp`: through the GOT (`jmp *f@GOTPCREL(%rip)`), a
    /// tail call to another module's function; else a jump through a
    /// pointer.
    fn indirect_jump(&mut self, elf: &ElfInfo, insn: &Instruction) {
        match insn
            .is_ip_rel_memory_operand()
            .then(|| elf.import_at(insn.ip_rel_memory_address()))
            .flatten()
        {
            Some(name) => self.outside.push(name.to_string()),
            None => self.indirect.push(insn.ip()),
        }
    }

    /// [`Own::of`] from what the module's sweep noted (`flow`), without
    /// decoding the function again; `None` unless the sweep decoded it as
    /// [`Own::of`] would: one part of the sweep holds `start..end`, the
    /// sweep landed on both (an instruction of its starts at each), and no
    /// byte between decoded as no instruction (where [`Own::of`] stops).
    fn from_flow(elf: &ElfInfo, flow: &Flow, start: u64, end: u64) -> Option<Own> {
        let landed = |a: u64| {
            flow.bounds.binary_search(&a).is_ok() && flow.missed.binary_search(&a).is_err()
        };
        if start >= end
            || !flow.parts.iter().any(|&(a, b)| a <= start && end <= b)
            || !landed(start)
            || !landed(end)
        {
            return None;
        }
        let within = |v: &[u64]| {
            let i = v.partition_point(|&a| a < start);
            let j = v.partition_point(|&a| a < end);
            i..j
        };
        if !within(&flow.invalid).is_empty() {
            return None;
        }
        let mut own = Own::default();
        for &r in &flow.rets[within(&flow.rets)] {
            if let Some(off) = elf.file_offset(r) {
                own.rets.push(off);
            }
        }
        let i = flow.jumps.partition_point(|&(a, _)| a < start);
        let j = flow.jumps.partition_point(|&(a, _)| a < end);
        for &(_, to) in &flow.jumps[i..j] {
            own.leap(elf, start..end, to);
        }
        for &at in &flow.indirect[within(&flow.indirect)] {
            let bytes = elf.bytes_at(at, 15)?;
            let insn = Decoder::with_ip(64, bytes, at, DecoderOptions::NONE).decode();
            if insn.is_invalid() {
                return None;
            }
            own.indirect_jump(elf, &insn);
        }
        Some(own)
    }
}

/// Whether [`Own::from_flow`] finds what [`Own::of`] does for
/// `start..end`; `None` where it declines (tests).
#[cfg(test)]
pub(crate) fn flow_agrees(elf: &ElfInfo, flow: &Flow, start: u64, end: u64) -> Option<bool> {
    Own::from_flow(elf, flow, start, end).map(|o| o == Own::of(elf, start, end))
}

/// What the sweep of a module noted of its control flow
/// (`agent_loader::window::Noted`, link-time addresses, each list
/// sorted), for `Own::from_flow`: a cold start finds a traced
/// function's returns from it rather than decoding the function a second
/// time (python3.11: 700,000 instructions decoded again, 85 M of the 1.6
/// G instructions of a cold start).
#[derive(Debug, Default)]
pub struct Flow {
    /// The ranges swept, each decoded from its start.
    pub parts: Vec<(u64, u64)>,
    /// The functions' starts and ends the sweep was asked about.
    pub bounds: Vec<u64>,
    /// Those no instruction of the sweep starts at.
    pub missed: Vec<u64>,
    /// Where bytes decoded as no instruction.
    pub invalid: Vec<u64>,
    /// The `ret`s.
    pub rets: Vec<u64>,
    /// The direct `jmp`s and `jcc`s: (address, target).
    pub jumps: Vec<(u64, u64)>,
    /// The indirect branches.
    pub indirect: Vec<u64>,
}

/// The functions of one module decoded for [`return_sites_in`], by range:
/// a function many others tail-call (an error path, an eval loop) is
/// decoded once for all of them, not once for each (python3.11: 17,500
/// functions followed from 7,700 return probes).
/// With the module's [`Flow`] when it was swept in this run, each
/// function is read from it rather than decoded.
#[derive(Debug, Default)]
pub struct Decodings {
    kept: std::sync::Mutex<rustc_hash::FxHashMap<(u64, u64), std::sync::Arc<Own>>>,
    flow: Option<Flow>,
}

impl Decodings {
    /// Decodings of a module its sweep noted `flow` of.
    pub fn with_flow(flow: Flow) -> Decodings {
        Decodings {
            kept: Default::default(),
            flow: Some(flow),
        }
    }

    fn own(&self, elf: &ElfInfo, start: u64, end: u64) -> std::sync::Arc<Own> {
        if let Some(o) = self
            .kept
            .lock()
            .ok()
            .and_then(|m| m.get(&(start, end)).cloned())
        {
            return o;
        }
        let o = std::sync::Arc::new(
            self.flow
                .as_ref()
                .and_then(|f| Own::from_flow(elf, f, start, end))
                .unwrap_or_else(|| Own::of(elf, start, end)),
        );
        if let Ok(mut m) = self.kept.lock() {
            m.insert((start, end), o.clone());
        }
        o
    }
}

/// [`return_sites`], each function's decoding taken from `decodings` or
/// kept there.
pub fn return_sites_in(
    elf: &ElfInfo,
    entry: u64,
    transport: &str,
    decodings: Option<&Decodings>,
) -> Result<ReturnSites, Error> {
    let path = elf.path.display();
    let f = function_at_offset(elf, entry).ok_or_else(|| {
        let why = format!(
            "is in no function of its symbol table: --transport {transport} finds the returns of \
             a return probe by decoding its function; use --transport ptrace"
        );
        Error::refused(
            Rule::Returns,
            None,
            format!("offset {entry:#x} of {path} {why}"),
        )
        .alike(format!("it {why}"))
    })?;
    let function = f.name.clone();
    let mut seen: Vec<u64> = vec![f.start];
    let mut todo: Vec<Followed> = vec![f];
    let mut followed = Vec::new();
    let mut rets = Vec::new();
    let mut outside: Vec<String> = Vec::new();
    let mut indirect: Vec<u64> = Vec::new();
    // A direct jump to code no function starts at (not followed).
    let mut jumps_out = false;
    while let Some(s) = todo.pop() {
        let (start, end) = (s.start, s.end);
        followed.push(s.name);
        let own = match decodings {
            Some(d) => d.own(elf, start, end),
            None => std::sync::Arc::new(Own::of(elf, start, end)),
        };
        rets.extend_from_slice(&own.rets);
        outside.extend(own.outside.iter().cloned());
        indirect.extend_from_slice(&own.indirect);
        for leap in &own.jumps {
            let t = leap.to;
            if seen.contains(&t) {
                continue;
            }
            if let Some(g) = &leap.function
                && seen.len() < MAX_FUNCTIONS
            {
                seen.push(t);
                todo.push(g.clone());
            } else if let Some(name) = &leap.import {
                outside.push(name.clone());
            } else {
                jumps_out = true;
            }
        }
    }
    rets.sort_unstable();
    rets.dedup();
    outside.sort_unstable();
    outside.dedup();
    let never_returns = rets.is_empty() && outside.is_empty() && indirect.is_empty() && !jumps_out;
    // A function that ends only in tail calls through a pointer (CPython's
    // `_Py_Dealloc`: `jmp *0x30(%rax)`) returns through the `ret`s of the
    // functions it goes to: listed by `indirect`, and the transport
    // decides (its calls are paired where those functions return, when
    // they are traced, and are otherwise closed as unwound).
    if rets.is_empty() && outside.is_empty() && indirect.is_empty() && !never_returns {
        return Err(no_ret(&function, &elf.path, transport, None));
    }
    indirect.sort_unstable();
    indirect.dedup();
    Ok(ReturnSites {
        function,
        rets,
        followed,
        outside,
        indirect,
        never_returns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each function decoded once for all the return probes that follow it
    /// finds what decoding it for each finds: every function of python3.11
    /// (named or not) and of the C library, in address order and then
    /// again (every decoding kept by then).
    #[test]
    fn decodings_kept_find_the_same_returns() {
        for path in ["/usr/bin/python3.11", "/usr/lib/x86_64-linux-gnu/libc.so.6"] {
            let elf = ElfInfo::open(std::path::Path::new(path)).expect("open");
            let mut funcs = elf.named_functions();
            funcs.extend(elf.unnamed_functions());
            funcs.sort_unstable();
            funcs.dedup();
            let kept = Decodings::default();
            let mut found = 0;
            for _ in 0..2 {
                for &(s, _) in &funcs {
                    let Some(off) = elf.file_offset(s) else {
                        continue;
                    };
                    let fresh = return_sites(&elf, off, "inproc");
                    let once = return_sites_in(&elf, off, "inproc", Some(&kept));
                    match (fresh, once) {
                        (Ok(a), Ok(b)) => {
                            assert_eq!(a, b, "{path} {s:#x}");
                            found += 1;
                        }
                        (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string()),
                        (a, b) => panic!("{path} {s:#x}: {a:?} / {b:?}"),
                    }
                }
            }
            assert!(found > 2000, "{path}: {found}");
        }
    }
}
