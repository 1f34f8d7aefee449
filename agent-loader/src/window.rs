//! Which instructions a probe's jump may replace, and why a site cannot be
//! patched. The rules (each refusal names its rule; the site is then not
//! armed, and wprobe says which and why):
//!
//! 1. The window is whole instructions from the probe address (after an
//!    `endbr64` there, which stays in place: indirect branches land on it)
//!    until at least 5 bytes, and ends inside the function (its symbol's
//!    size) — else *too short*.
//! 2. No instruction but the last may jump or return (the rest of the
//!    window would be left half-run), but for a `jmp` forward to an
//!    instruction of a window ending in a `ret` (a loop entered at its
//!    test); conditional branches may be anywhere (relocated, they fall
//!    through to the next displaced instruction). A branch into the
//!    window must land on one of its instructions (the block encoder
//!    links it to the stub's copy), never inside one. None may be a
//!    `call` (its return address would point
//!    into the stub: unwinders, stack walkers and a thread returning after
//!    the patch is removed would see it), except a direct `call` ending a
//!    probe's window, which the stub runs as a push of the original return
//!    address and a jump; none a `syscall`/`int`/`sysenter` (a signal or a
//!    restarted system call would resume inside the window), `xbegin`, or
//!    `loop`/`jrcxz` (rel8 only).
//! 3. No instruction after the first is a branch target: direct branches
//!    anywhere in the module (the caller's set, from a sweep of its
//!    executable sections, with the targets of the jump tables
//!    [`crate::jumptable`] could read), and, for a window that does not
//!    start at its function's entry, no indirect `jmp` in the function
//!    whose table was not read (it could land anywhere in it) and that is
//!    not a tail call through a pointer ([`crate::tailcall`]). One
//!    exception, in windows ending with a `ret`: a target whose every
//!    branch is a direct branch displaced in the same window (a `je` to
//!    the function's `ret` a few instructions before it): the branch moves
//!    with its target, and the stub's copy of it lands on the stub's copy
//!    of the target (the dispatch before the `ret`, for the `ret` itself).
//! 4. RIP-relative operands are re-displaced by the block encoder; one out
//!    of rel32 reach of the stub fails when the stub is generated. A `lea`
//!    of an address inside the window (a function taking its own address)
//!    is run as a `mov` of that address (the block encoder would point it
//!    at the stub's copy); any other access to the window's bytes (code
//!    reading itself) is refused: they are the jump now.
//! 5. At attach, no thread may stand inside the window (checked by the
//!    caller with every thread stopped).

use iced_x86::{
    Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic, OpKind, Register,
};
use rustc_hash::{FxHashMap as HashMap, FxHashSet as HashSet};

use crate::insn::{direct_branch, swept_target};
use crate::stub::{JMP_LEN, Site};

/// Why a site cannot be patched with a jump.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The function ends before 5 bytes of whole instructions from the site.
    TooShort {
        /// Bytes from the site to the function's end.
        room: u64,
    },
    /// The bytes do not decode.
    Undecodable {
        /// The first byte that does not.
        at: u64,
    },
    /// An instruction in the window that cannot be displaced.
    Instruction {
        /// Its address.
        at: u64,
        /// What it is.
        what: String,
        /// Why not.
        why: &'static str,
    },
    /// A branch targets an instruction inside the window.
    BranchTarget {
        /// The target.
        at: u64,
    },
    /// Mid-function window in a function with an indirect jump.
    IndirectJump {
        /// The indirect jump.
        at: u64,
    },
    /// No function symbol with a size covers the site.
    NoFunction,
    /// A return site without a window.
    ShortReturn {
        /// The `ret`.
        at: u64,
        /// Why the window cannot grow to 5 bytes.
        why: String,
    },
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::TooShort { room } => write!(
                f,
                "function too short: {room} bytes from the probe to its end, a jump needs 5"
            ),
            Refusal::ShortReturn { at, why } => {
                write!(f, "the `ret` at {at:#x} has no 5-byte window: {why}")
            }
            Refusal::Undecodable { at } => write!(f, "invalid instruction at {at:#x}"),
            Refusal::Instruction { at, what, why } => {
                write!(
                    f,
                    "`{what}` at {at:#x} in the 5 bytes the jump replaces: {why}"
                )
            }
            Refusal::BranchTarget { at } => write!(
                f,
                "{at:#x}, inside the 5 bytes the jump replaces, is a branch target"
            ),
            Refusal::IndirectJump { at } => write!(
                f,
                "the function has an indirect jump at {at:#x} (a jump table may land inside the \
                 5 bytes the jump replaces)"
            ),
            Refusal::NoFunction => write!(
                f,
                "no function symbol covers it (branch targets in the window cannot be ruled out)"
            ),
        }
    }
}

/// The function around a site, as the caller found it in the module.
#[derive(Clone, Copy, Debug)]
pub struct Function<'a> {
    /// Run-time address of its first byte.
    pub start: u64,
    /// Its code (from the file), `start..start + code.len()`.
    pub code: &'a [u8],
    /// The module's load bias (run-time minus link-time addresses; the
    /// branch targets are link-time addresses).
    pub bias: u64,
}

/// What [`BranchTargets::sweep_noting`] notes besides the targets, in
/// address order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Noted {
    /// The indirect branches (`jmp` through a register or memory).
    pub indirect: Vec<u64>,
    /// The starts asked about that the sweep did not land on.
    pub missed: Vec<u64>,
    /// The calls: (their target, or the GOT slot of a `call *slot(%rip)`;
    /// the address they return to).
    pub calls: Vec<(u64, u64)>,
    /// The `ret`s.
    pub rets: Vec<u64>,
    /// The direct `jmp`s and `jcc`s: (their address, their target).
    pub jumps: Vec<(u64, u64)>,
    /// Where the sweep met bytes that decode as no instruction.
    pub invalid: Vec<u64>,
}

impl Noted {
    /// Adds what the sweep of another part of the code noted.
    pub fn append(&mut self, other: Noted) {
        self.indirect.extend(other.indirect);
        self.missed.extend(other.missed);
        self.calls.extend(other.calls);
        self.rets.extend(other.rets);
        self.jumps.extend(other.jumps);
        self.invalid.extend(other.invalid);
    }

    /// Each list in address order, `missed` without repeats, after parts
    /// noted apart were appended (each already in order when the parts
    /// came in order); the calls as they are.
    pub fn sort(&mut self) {
        fn in_order<T: Ord>(v: &mut [T]) {
            if !v.is_sorted() {
                v.sort_unstable();
            }
        }
        in_order(&mut self.indirect);
        in_order(&mut self.missed);
        self.missed.dedup();
        in_order(&mut self.rets);
        in_order(&mut self.jumps);
        in_order(&mut self.invalid);
    }
}

/// Branch targets of a module's code (link-time addresses): every
/// `jmp`/`jcc`/`call`/`loop` with an immediate target, from a linear sweep
/// of each executable section, and the entries of the jump tables
/// [`crate::jumptable`] could read (`.0`); the indirect `jmp`s whose every
/// target is in `.0` (`.1`: a window may go in their functions); how many
/// direct branches the sweep found to each target (`.2`; [`u32::MAX`] for
/// one reached otherwise too, a jump table's: no window takes all its
/// branches).
/// With `.3` (a module's caller fills it once its indirect `jmp`s are
/// resolved), the first indirect `jmp` not in `.1` of each function that
/// has one, by function start (link-time): [`BranchTargets::unknown_jump`]
/// then looks it up instead of decoding the function again for each
/// window in it.
#[derive(Clone, Debug, Default)]
pub struct BranchTargets(
    pub HashSet<u64>,
    pub HashSet<u64>,
    pub HashMap<u64, u32>,
    pub Option<HashMap<u64, u64>>,
);

impl BranchTargets {
    /// The first indirect `jmp` of `func` (run-time address) whose every
    /// target is not known (not in `.1`): a jump table could land
    /// anywhere in the function.
    pub fn unknown_jump(&self, func: &Function<'_>) -> Option<u64> {
        if let Some(m) = &self.3 {
            return m
                .get(&func.start.wrapping_sub(func.bias))
                .map(|a| a.wrapping_add(func.bias));
        }
        self.first_unknown_jump(func)
    }

    /// [`BranchTargets::unknown_jump`], decoding the function.
    pub fn first_unknown_jump(&self, func: &Function<'_>) -> Option<u64> {
        let mut d = Decoder::with_ip(64, func.code, func.start, DecoderOptions::NONE);
        let mut i = Instruction::default();
        while d.can_decode() {
            d.decode_out(&mut i);
            if i.flow_control() == FlowControl::IndirectBranch
                && !self.1.contains(&i.ip().wrapping_sub(func.bias))
            {
                return Some(i.ip());
            }
        }
        None
    }

    /// Adds targets reached other than by a direct branch (a jump table's).
    pub fn add_other(&mut self, targets: impl IntoIterator<Item = u64>) {
        for t in targets {
            self.0.insert(t);
            self.2.insert(t, u32::MAX);
        }
    }

    /// Adds what another sweep ([`BranchTargets::sweep`]) found: its
    /// targets, and the branches to each counted with these.
    pub fn merge_swept(&mut self, other: BranchTargets) {
        self.0.extend(other.0);
        for (t, n) in other.2 {
            let m = self.2.entry(t).or_insert(0);
            *m = m.saturating_add(n);
        }
    }

    /// Adds the direct branch targets of `code`, loaded at `addr`.
    pub fn sweep(&mut self, code: &[u8], addr: u64) {
        self.sweep_noting(code, addr, &[], &mut Noted::default());
        self.settle();
    }

    /// Puts every target counted (`.2`) in the set of targets (`.0`):
    /// [`BranchTargets::sweep_noting`] counts them only, so that a sweep
    /// and the merge of two makes one hash table, not two.
    pub fn settle(&mut self) {
        self.0.reserve(self.2.len());
        self.0.extend(self.2.keys().copied());
    }

    /// [`BranchTargets::sweep`] but for the set of targets (`.0`, which
    /// [`BranchTargets::settle`] fills), noting in `noted` the indirect
    /// branches met, the calls, the `ret`s, the direct jumps, the bytes
    /// that decode as no instruction, and which addresses of `starts`
    /// (sorted: functions' starts, and their ends) no instruction of the
    /// sweep starts at. A function whose start the sweep lands on decodes
    /// from there as the sweep did, so that it has an indirect branch only
    /// if one was noted inside it (and, landing on its end too with no
    /// byte invalid between, the `ret`s and jumps noted are its own
    /// decoding's).
    pub fn sweep_noting(&mut self, code: &[u8], addr: u64, starts: &[u64], noted: &mut Noted) {
        let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
        let mut i = Instruction::default();
        let mut next = starts.partition_point(|&s| s < addr);
        while d.can_decode() {
            d.decode_out(&mut i);
            while let Some(&s) = starts.get(next)
                && s < i.next_ip()
            {
                if s != i.ip() {
                    noted.missed.push(s);
                }
                next += 1;
            }
            if i.is_invalid() {
                noted.invalid.push(i.ip());
                continue;
            }
            match i.flow_control() {
                FlowControl::IndirectBranch => noted.indirect.push(i.ip()),
                FlowControl::Return => noted.rets.push(i.ip()),
                FlowControl::UnconditionalBranch | FlowControl::ConditionalBranch => {
                    noted.jumps.push((i.ip(), i.near_branch_target()));
                }
                FlowControl::Call if i.op_count() > 0 && i.op0_kind() == OpKind::NearBranch64 => {
                    noted.calls.push((i.near_branch_target(), i.next_ip()));
                }
                // `call *slot(%rip)`: a `-fno-plt` call through its GOT
                // slot, keyed by the slot.
                FlowControl::IndirectCall if i.is_ip_rel_memory_operand() => {
                    noted.calls.push((i.ip_rel_memory_address(), i.next_ip()));
                }
                _ => {}
            }
            if let Some(t) = swept_target(&i) {
                let n = self.2.entry(t).or_insert(0);
                *n = n.saturating_add(1);
            }
        }
    }
}

/// The first instruction of `win` (a window's instructions, run-time
/// addresses) after its first that a branch from outside the window may
/// land on: a branch target some branch not displaced in `win` reaches
/// (the sweep counted them all in `targets.2`; a direct branch inside the
/// window moves with its target).
/// `sent`: targets (run-time) whose every branch was sent elsewhere (their
/// jumps rewritten), which no branch reaches any more.
fn outside_target(
    win: &[Instruction],
    bias: u64,
    targets: &BranchTargets,
    sent: &[u64],
) -> Option<u64> {
    win.iter().skip(1).map(|i| i.ip()).find(|&at| {
        let link = at.wrapping_sub(bias);
        if !targets.0.contains(&link) || sent.contains(&at) {
            return false;
        }
        let inside = win
            .iter()
            .filter(|j| direct_branch(j) && j.near_branch_target() == at)
            .count();
        targets.2.get(&link).copied() != Some(inside as u32)
    })
}

/// Whether a window ending at `end` and growing back could take every
/// branch to `at`: they are all direct branches in `insns` (its function's
/// code) before `end` (a loop's back edge after `at` included).
fn sources_before(
    at: u64,
    end: u64,
    insns: &[Instruction],
    bias: u64,
    targets: &BranchTargets,
) -> bool {
    let mut n = 0u32;
    for j in insns {
        if direct_branch(j) && j.near_branch_target() == at {
            if j.ip() >= end {
                return false;
            }
            n += 1;
        }
    }
    targets.2.get(&at.wrapping_sub(bias)).copied() == Some(n)
}

/// Whether `i` is a `jmp` forward to at most `last` (an instruction of the
/// window it is in, which the block encoder links to the stub's copy).
fn inner_jump(i: &Instruction, last: u64) -> bool {
    i.flow_control() == FlowControl::UnconditionalBranch
        && direct_branch(i)
        && i.near_branch_target() > i.ip()
        && i.near_branch_target() <= last
}

/// The first branch of `win` (a window's instructions, the `ret` last if
/// any) whose target is inside the window's bytes `range` but not at one
/// of its instructions: relocated, it would go to the original bytes,
/// which are the jump now.
fn lands_amiss(win: &[Instruction], range: std::ops::Range<u64>) -> Result<(), Refusal> {
    match win
        .iter()
        .filter(|i| direct_branch(i) && range.contains(&i.near_branch_target()))
        .find(|i| !win.iter().any(|j| j.ip() == i.near_branch_target()))
    {
        Some(i) => Err(Refusal::Instruction {
            at: i.ip(),
            what: mnemonic(i),
            why: "it branches into the middle of an instruction of the window",
        }),
        None => Ok(()),
    }
}

/// Chooses the window of the probe at `probe` in `func` (run-time
/// addresses). `probe` must start an instruction of the function.
pub fn plan(probe: u64, func: Function<'_>, targets: &BranchTargets) -> Result<Site, Refusal> {
    plan_len(probe, func, targets, JMP_LEN)
}

/// [`plan`] for a window of at least `need` bytes
/// ([`crate::nearjump::NEAR_LEN`]: a near jump's, to a
/// [`crate::nearjump::CAVE_LEN`]-byte jump in padding nearby).
pub fn plan_len(
    probe: u64,
    func: Function<'_>,
    targets: &BranchTargets,
    need: usize,
) -> Result<Site, Refusal> {
    let end = func.start + func.code.len() as u64;
    if probe < func.start || probe >= end {
        return Err(Refusal::NoFunction);
    }
    let code = &func.code[(probe - func.start) as usize..];
    let mut d = Decoder::with_ip(64, code, probe, DecoderOptions::NONE);
    let mut start = probe;
    let mut displaced: Vec<Instruction> = Vec::new();
    let mut len = 0usize;
    while len < need {
        if !d.can_decode() {
            return Err(Refusal::TooShort { room: end - start });
        }
        let i = d.decode();
        if i.is_invalid() {
            return Err(Refusal::Undecodable { at: i.ip() });
        }
        if i.next_ip() > end {
            return Err(Refusal::TooShort { room: end - start });
        }
        if displaced.is_empty() && i.ip() == start && i.code() == Code::Endbr64 {
            start = i.next_ip();
            continue;
        }
        if let Some(prev) = displaced.last()
            && !falls_through(prev)
        {
            return Err(Refusal::Instruction {
                at: prev.ip(),
                what: mnemonic(prev),
                why: "control leaves the window before its end",
            });
        }
        // A `call` ending the window is run as a push of its return
        // address (the window's end, in the original code) and a jump:
        // the callee returns to the program, never into the stub.
        if !(len + i.len() >= need && call_ends_window(&i)) {
            refuse_instruction(&i)?;
        }
        len += i.len();
        displaced.push(i);
    }
    for i in &displaced[1..] {
        if targets.0.contains(&i.ip().wrapping_sub(func.bias)) {
            return Err(Refusal::BranchTarget { at: i.ip() });
        }
    }
    if probe != func.start
        && let Some(at) = targets.unknown_jump(&func)
    {
        return Err(Refusal::IndirectJump { at });
    }
    lands_amiss(&displaced, start..start + len as u64)?;
    checked(Site {
        probe,
        addr: start,
        displaced,
        len,
        ret: None,
    })
}

/// The window of a function whose entry and first `ret` are too close for
/// two windows: the straight-line code from the entry (after an
/// `endbr64`) through that `ret`, completed if needed by the padding after
/// it. Its stub calls `dispatch` at the entry, runs the displaced
/// instructions, calls `dispatch` again before the `ret` (the entry site's
/// id + 1), then runs the `ret`. Refused when control flow, a refused
/// instruction or a branch target (past the first) comes before the `ret`.
pub fn plan_whole(
    entry: u64,
    func: Function<'_>,
    after: &[u8],
    targets: &BranchTargets,
) -> Result<Site, Refusal> {
    plan_whole_len(entry, func, after, targets, JMP_LEN)
}

/// [`plan_whole`] for a window of at least `need` bytes.
pub fn plan_whole_len(
    entry: u64,
    func: Function<'_>,
    after: &[u8],
    targets: &BranchTargets,
    need: usize,
) -> Result<Site, Refusal> {
    let end = func.start + func.code.len() as u64;
    if entry < func.start || entry >= end {
        return Err(Refusal::NoFunction);
    }
    let code = &func.code[(entry - func.start) as usize..];
    let mut d = Decoder::with_ip(64, code, entry, DecoderOptions::NONE);
    let mut start = entry;
    let mut displaced: Vec<Instruction> = Vec::new();
    let ret = loop {
        if !d.can_decode() {
            return Err(Refusal::TooShort { room: end - start });
        }
        let i = d.decode();
        if i.is_invalid() {
            return Err(Refusal::Undecodable { at: i.ip() });
        }
        if displaced.is_empty() && i.ip() == start && i.code() == Code::Endbr64 {
            start = i.next_ip();
            continue;
        }
        if i.flow_control() == FlowControl::Return {
            break i;
        }
        // A `jmp` forward is checked once the window's end is known.
        if !falls_through(&i) && !inner_jump(&i, end) {
            return Err(Refusal::Instruction {
                at: i.ip(),
                what: mnemonic(&i),
                why: "control leaves the window before its end",
            });
        }
        refuse_instruction(&i)?;
        displaced.push(i);
    };
    if let Some(j) = displaced
        .iter()
        .find(|i| !falls_through(i) && !inner_jump(i, ret.ip()))
    {
        return Err(Refusal::Instruction {
            at: j.ip(),
            what: mnemonic(j),
            why: "control leaves the window before its end",
        });
    }
    // A loop in the window makes it long: not where an unread jump table
    // could land.
    if displaced.iter().any(|i| !falls_through(i))
        && let Some(at) = targets.unknown_jump(&func)
    {
        return Err(Refusal::IndirectJump { at });
    }
    let mut win = displaced.clone();
    win.push(ret);
    if let Some(at) = outside_target(&win, func.bias, targets, &[]) {
        return Err(Refusal::BranchTarget { at });
    }
    lands_amiss(&win, start..ret.next_ip())?;
    let base = (ret.next_ip() - start) as usize;
    let len = if base >= need {
        base
    } else {
        base + padding(func, after, ret.next_ip(), need - base, targets)
            .ok_or(Refusal::TooShort { room: base as u64 })?
    };
    checked(Site {
        probe: entry,
        addr: start,
        displaced,
        len,
        ret: Some(ret),
    })
}

/// Bytes of alignment padding from `from` (just after a `ret`) on: whole
/// `nop`/`int3` instructions no direct branch targets, in the function's
/// code and then in `after` (the bytes from its end to the next function),
/// until `need` bytes: `need` (the window ends there, maybe inside a long
/// `nop`: the rest stays free for a near jump's cave); `None` when there
/// are fewer.
fn padding(
    func: Function<'_>,
    after: &[u8],
    from: u64,
    need: usize,
    targets: &BranchTargets,
) -> Option<usize> {
    let mut bytes = func.code[(from - func.start) as usize..].to_vec();
    bytes.extend_from_slice(after);
    let mut d = Decoder::with_ip(64, &bytes, from, DecoderOptions::NONE);
    let mut n = 0;
    while n < need && d.can_decode() {
        let i = d.decode();
        if i.is_invalid()
            || targets.0.contains(&i.ip().wrapping_sub(func.bias))
            || !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3)
        {
            return None;
        }
        n += i.len();
    }
    // A window takes no more padding than it needs (padding is never run:
    // the rest of a long `nop` stays free for near jumps' caves).
    (n >= need).then_some(need)
}

/// The one-instruction window of a site that traps instead of jumping (a
/// fallback where no 5-byte window can go: the tracer writes an `int3` at
/// `addr` and, at each trap, moves the thread to the stub). `code` holds
/// the bytes from `addr` on. The stub is that of a jump's window of one
/// instruction: `dispatch`, the instruction relocated, a jump back (a
/// `ret`: `dispatch`, then the `ret`). Refused: an undecodable
/// instruction, an indirect `call` (its return address would point into
/// the stub), `loop`/`jrcxz`, `xbegin`.
pub fn plan_trap(addr: u64, code: &[u8], ret_site: bool) -> Result<Site, Refusal> {
    let mut d = Decoder::with_ip(64, code, addr, DecoderOptions::NONE);
    let i = d.decode();
    if i.is_invalid() {
        return Err(Refusal::Undecodable { at: addr });
    }
    let why = match i.flow_control() {
        FlowControl::IndirectCall => Some("a call's return address would point into the stub"),
        FlowControl::XbeginXabortXend => Some("transactional memory is not relocated"),
        _ => None,
    }
    .or(match i.mnemonic() {
        Mnemonic::Loop | Mnemonic::Loope | Mnemonic::Loopne | Mnemonic::Jrcxz | Mnemonic::Jecxz => {
            Some("rel8-only branches are not relocated")
        }
        _ => None,
    });
    if let Some(why) = why {
        return Err(Refusal::Instruction {
            at: addr,
            what: mnemonic(&i),
            why,
        });
    }
    if i.flow_control() == FlowControl::Call && i.code() != Code::Call_rel32_64 {
        return Err(Refusal::Instruction {
            at: addr,
            what: mnemonic(&i),
            why: "only a direct call is relocated",
        });
    }
    let is_ret = i.flow_control() == FlowControl::Return;
    if ret_site && !is_ret {
        return Err(Refusal::Undecodable { at: addr });
    }
    checked(Site {
        probe: addr,
        addr,
        displaced: if ret_site { Vec::new() } else { vec![i] },
        len: i.len(),
        ret: ret_site.then_some(i),
    })
}

/// Most instructions before a `ret` a return site's window takes...
const MAX_EPILOGUE: usize = 4;

/// ... unless it grows to take the branches to a target inside it: then
/// at most this many, in at most [`MAX_INNER_BYTES`] bytes.
const MAX_INNER: usize = 16;

/// See [`MAX_INNER`].
const MAX_INNER_BYTES: u64 = 64;

/// Chooses the window of a return site: the `ret` at `ret` (run-time
/// address) of `func`, where calls return. The window is the `ret` with
/// the fewest whole instructions before it that make 5 bytes (none a
/// branch target but the first, none transferring control; none at all in
/// a function with an indirect jump, whose jump table may land anywhere),
/// completed if needed by the alignment padding after the `ret` (`nop`s or
/// `int3`s no direct branch targets, never executed): `after` holds the
/// bytes between the function's end and the next function. A window with
/// a branch target after its first instruction grows, beyond the usual few
/// instructions, to take every branch to it when they are all direct
/// branches before it in the function. The stub runs the displaced
/// instructions, calls `dispatch` with the return address at `[rsp]`, then
/// runs the `ret`.
pub fn plan_ret(
    ret: u64,
    func: Function<'_>,
    after: &[u8],
    targets: &BranchTargets,
) -> Result<Site, Refusal> {
    plan_ret_len(ret, func, after, targets, JMP_LEN)
}

/// [`plan_ret`] for a window of at least `need` bytes.
pub fn plan_ret_len(
    ret: u64,
    func: Function<'_>,
    after: &[u8],
    targets: &BranchTargets,
    need: usize,
) -> Result<Site, Refusal> {
    plan_ret_in(
        ret,
        func,
        &Decoded::new(func, targets),
        after,
        targets,
        need,
    )
}

/// A function decoded whole, once for the windows of all its `ret`s
/// ([`plan_ret_in`]): each `ret`'s window would otherwise decode it again.
#[derive(Clone, Debug)]
pub struct Decoded {
    start: u64,
    bias: u64,
    code: Vec<u8>,
    /// The branch targets it was decoded against (their address: one
    /// module's).
    targets: usize,
    insns: Vec<Instruction>,
    /// Its first indirect branch whose targets are unknown.
    indirect: Option<u64>,
    /// Branch targets (run-time) whose every branch was sent elsewhere
    /// ([`Decoded::sending`]).
    sent: Vec<u64>,
}

impl Decoded {
    /// Decodes `func` (a module's, with its branch `targets`).
    pub fn new(func: Function<'_>, targets: &BranchTargets) -> Decoded {
        let mut insns: Vec<Instruction> = Vec::with_capacity(func.code.len() / 4 + 1);
        let mut d = Decoder::with_ip(64, func.code, func.start, DecoderOptions::NONE);
        let mut indirect = None;
        let mut i = Instruction::default();
        while d.can_decode() {
            d.decode_out(&mut i);
            if i.flow_control() == FlowControl::IndirectBranch
                && !targets.1.contains(&i.ip().wrapping_sub(func.bias))
            {
                indirect.get_or_insert(i.ip());
            }
            insns.push(i);
        }
        Decoded {
            start: func.start,
            bias: func.bias,
            code: func.code.to_vec(),
            targets: std::ptr::from_ref(targets) as usize,
            insns,
            indirect,
            sent: Vec::new(),
        }
    }

    /// The same, where no branch reaches the branch target `at` (run-time)
    /// any more: each of them (all the module's sweep counted) was
    /// rewritten to go elsewhere. A `ret`'s window may take it.
    pub fn sending(mut self, at: u64) -> Decoded {
        self.sent.push(at);
        self
    }

    /// Whether this is `func` decoded against `targets`.
    pub fn is_of(&self, func: Function<'_>, targets: &BranchTargets) -> bool {
        self.start == func.start
            && self.bias == func.bias
            && self.targets == std::ptr::from_ref(targets) as usize
            && self.code == func.code
    }
}

/// [`plan_ret_len`] with `func` decoded already (`decoded`, which must be
/// `func`'s: [`Decoded::is_of`]).
pub fn plan_ret_in(
    ret: u64,
    func: Function<'_>,
    decoded: &Decoded,
    after: &[u8],
    targets: &BranchTargets,
    need: usize,
) -> Result<Site, Refusal> {
    let end = func.start + func.code.len() as u64;
    if ret < func.start || ret >= end {
        return Err(Refusal::NoFunction);
    }
    debug_assert!(decoded.is_of(func, targets));
    let insns = &decoded.insns[..];
    let r = insns.binary_search_by_key(&ret, Instruction::ip).ok();
    let r = r
        .filter(|&r| insns[r].flow_control() == FlowControl::Return)
        .ok_or(Refusal::Undecodable { at: ret })?;
    // Padding inside the function (after a `ret` that is not its last
    // instruction) is where a later `ret` of the function, too short for
    // a jump, finds the cave of its near jump: a 5-byte window takes it
    // only when no window of the epilogue fits.
    if need >= JMP_LEN
        && insns[r].next_ip() < end
        && let Ok(site) = plan_ret_at(func, decoded, after, targets, need, r, false)
    {
        return Ok(site);
    }
    plan_ret_at(func, decoded, after, targets, need, r, true)
}

/// [`plan_ret_in`] for the `ret` at index `r` of `decoded`, taking
/// padding after it (`pad`) or not.
fn plan_ret_at(
    func: Function<'_>,
    decoded: &Decoded,
    after: &[u8],
    targets: &BranchTargets,
    need: usize,
    r: usize,
    pad: bool,
) -> Result<Site, Refusal> {
    let insns = &decoded.insns[..];
    let indirect = decoded.indirect;
    let ret = insns[r].ip();
    let pad_len = |need: usize| {
        if pad {
            padding(func, after, insns[r].next_ip(), need, targets)
        } else {
            None
        }
    };
    let mut refusal = None;
    for k in 0..=MAX_INNER.min(r) {
        let pre = &insns[r - k..r];
        if k > 0 {
            if let Some(at) = indirect {
                refusal.get_or_insert(Refusal::IndirectJump { at });
                break;
            }
            let i = &insns[r - k];
            if i.is_invalid() {
                break;
            }
            if !falls_through(i) && !inner_jump(i, insns[r].ip()) {
                refusal.get_or_insert(Refusal::Instruction {
                    at: i.ip(),
                    what: mnemonic(i),
                    why: "control leaves the window before its end",
                });
                break;
            }
            if let Err(e) = refuse_instruction(i) {
                refusal.get_or_insert(e);
                break;
            }
        }
        let inner = outside_target(&insns[r - k..=r], func.bias, targets, &decoded.sent);
        if let Some(at) = inner {
            refusal.get_or_insert(Refusal::BranchTarget { at });
            // Grow to take the target's branches, if it can.
            if !sources_before(at, insns[r].ip(), insns, func.bias, targets)
                || insns[r].next_ip() - insns[r - k].ip() >= MAX_INNER_BYTES
            {
                break;
            }
            continue;
        }
        // Past the usual epilogue only for a target's branches.
        if k > MAX_EPILOGUE && !matches!(refusal, Some(Refusal::BranchTarget { .. })) {
            break;
        }
        let base: usize = pre.iter().map(|i| i.len()).sum::<usize>() + insns[r].len();
        let len = if base >= need {
            Some(base)
        } else {
            pad_len(need - base).map(|p| base + p)
        };
        if let Some(len) = len {
            let from = insns[r - k].ip();
            if let Err(e) = lands_amiss(&insns[r - k..=r], from..from + len as u64) {
                refusal.get_or_insert(e);
                break;
            }
            return checked(Site {
                probe: ret,
                addr: insns[r - k].ip(),
                displaced: pre.to_vec(),
                len,
                ret: Some(insns[r]),
            });
        }
    }
    Err(Refusal::ShortReturn {
        at: ret,
        why: match refusal {
            Some(r) => r.to_string(),
            None => "too few instructions before it and too little padding after it".into(),
        },
    })
}

/// Whether execution may go on with the next instruction: a plain one, or
/// a conditional branch (relocated, its fall-through is the next displaced
/// instruction, never a branch target).
fn falls_through(i: &Instruction) -> bool {
    match i.flow_control() {
        FlowControl::Next => true,
        FlowControl::ConditionalBranch => i.is_jcc_short_or_near(),
        _ => false,
    }
}

/// The instruction's mnemonic, lower case (`call`, `syscall`).
fn mnemonic(i: &Instruction) -> String {
    format!("{:?}", i.mnemonic()).to_ascii_lowercase()
}

/// A displaced instruction's RIP-relative data access inside the window
/// (the bytes the jump or trap replaces) is refused, but for a `lea`
/// (`stub::generate` runs it as a `mov` of the address).
fn checked(site: Site) -> Result<Site, Refusal> {
    let window = site.addr..site.addr + site.len as u64;
    for i in &site.displaced {
        if i.is_ip_rel_memory_operand()
            && i.mnemonic() != Mnemonic::Lea
            && window.contains(&i.ip_rel_memory_address())
        {
            return Err(Refusal::Instruction {
                at: i.ip(),
                what: mnemonic(i),
                why: "it reads or writes the bytes the jump replaces",
            });
        }
    }
    Ok(site)
}

/// Whether `i` is a `call` the stub can run as a push of the original
/// return address and a jump (`stub::generate`): a direct one, or an
/// indirect one through a register or memory not addressed by `rsp`
/// (which the push moves).
fn call_ends_window(i: &Instruction) -> bool {
    match i.code() {
        Code::Call_rel32_64 => true,
        Code::Call_rm64 => {
            let uses_rsp = |r: Register| r.full_register() == Register::RSP;
            if i.op0_kind() == OpKind::Register {
                !uses_rsp(i.op0_register())
            } else {
                !uses_rsp(i.memory_base()) && !uses_rsp(i.memory_index())
            }
        }
        _ => false,
    }
}

fn refuse_instruction(i: &Instruction) -> Result<(), Refusal> {
    let why = match i.flow_control() {
        FlowControl::Call | FlowControl::IndirectCall => {
            Some("a call's return address would point into the stub")
        }
        FlowControl::Interrupt => Some("a system call or interrupt would resume inside the window"),
        FlowControl::XbeginXabortXend => Some("transactional memory is not relocated"),
        _ => None,
    }
    .or(match i.mnemonic() {
        Mnemonic::Syscall | Mnemonic::Sysenter => {
            Some("a system call would resume inside the window")
        }
        Mnemonic::Loop | Mnemonic::Loope | Mnemonic::Loopne | Mnemonic::Jrcxz | Mnemonic::Jecxz => {
            Some("rel8-only branches are not relocated")
        }
        _ => None,
    });
    match why {
        Some(why) => Err(Refusal::Instruction {
            at: i.ip(),
            what: mnemonic(i),
            why,
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests;
