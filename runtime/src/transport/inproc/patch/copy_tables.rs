//! The jump tables a function's relocated copy carries (`whole.rs`,
//! `agent_loader::whole`): the tables of the function the module's sweep
//! resolved, read again with their addresses, and whether a branch from
//! outside the function may land on one of their entries (where the
//! original needs a jump back into the copy: the module's count of ways
//! in does not tell a table's entries from branches).

use agent_loader::jumptable::Table;
use agent_loader::whole::Whole;
use agent_loader::window::Function;

use crate::transport::inproc::code::ModuleCode;

/// The jump tables of `func` (module `module`, run-time addresses) that
/// the module's sweep resolved, at run-time addresses.
pub(super) fn own_tables(module: &ModuleCode, func: &Function<'_>) -> Vec<Table> {
    let bias = func.bias;
    let link = func.start.wrapping_sub(bias);
    let read = |at: u64, len: usize| module.elf().bytes_at(at, len).map(<[u8]>::to_vec);
    agent_loader::jumptable::tables(
        func.code,
        link,
        &module.targets.0,
        Some(&module.targets.2),
        &read,
    )
    .into_iter()
    .filter(|t| !module.may_leave_by(t.jmp))
    .map(|mut t| {
        t.jmp = t.jmp.wrapping_add(bias);
        t.addr = t.addr.wrapping_add(bias);
        for e in &mut t.targets {
            *e = e.wrapping_add(bias);
        }
        t
    })
    .collect()
}

/// Whether a jump from outside `whole` may land on `at` (run-time; load
/// bias `bias`): a `jmp rel32`/`jcc rel32` of the module there
/// ([`ModuleCode::far_jumps_to`]), or the bytes of a `jmp rel8`/`jcc
/// rel8` within reach before or after the function that would (a scan,
/// not a decoding: erring towards a jump back into the copy).
pub(super) fn entered_from_outside(module: &ModuleCode, whole: &Whole, at: u64, bias: u64) -> bool {
    let link = at.wrapping_sub(bias);
    let (start, end) = (whole.start.wrapping_sub(bias), whole.end.wrapping_sub(bias));
    if module
        .far_jumps_to(link)
        .iter()
        .any(|&j| !(start..end).contains(&j))
    {
        return true;
    }
    // `eb`, `7x`, `e0`-`e3` (loops, `jrcxz`) and their rel8.
    let short_to = |from: u64, b: &[u8]| {
        b.windows(2).enumerate().any(|(p, w)| {
            let short = matches!(w[0], 0xeb | 0x70..=0x7f | 0xe0..=0xe3);
            let next = from + p as u64 + 2;
            short && next.wrapping_add(w[1] as i8 as i64 as u64) == link
        })
    };
    // The bytes in reach, as many as the module's segment has.
    let bytes = |from: u64, mut len: u64| loop {
        if let Some(b) = module.elf().bytes_at(from, len as usize) {
            break b;
        }
        if len == 0 {
            break &[][..];
        }
        len /= 2;
    };
    const REACH: u64 = 130;
    let before = start.saturating_sub(REACH);
    let (mut lo, mut n) = (before, start - before);
    let head = loop {
        // Its end fixed at the function's start.
        if let Some(b) = module.elf().bytes_at(lo, n as usize) {
            break b;
        }
        if n == 0 {
            break &[][..];
        }
        n /= 2;
        lo = start - n;
    };
    short_to(lo, head) || short_to(end, bytes(end, REACH))
}
