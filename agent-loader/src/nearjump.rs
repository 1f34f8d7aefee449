//! Near jumps into padding, for sites where a 5-byte `jmp rel32` does not
//! fit (Frida-gum's way with short functions): a 2-byte `jmp rel8` in the
//! window (a window of [`NEAR_LEN`] bytes, chosen by the same rules as a
//! 5-byte one: only branch targets strictly inside it are forbidden) goes
//! to a *cave*, a `jmp rel32` to the site's stub written into
//! [`CAVE_LEN`] bytes of the alignment padding between functions within
//! rel8 reach. The padding is taken only where it is certainly never run:
//! after a function whose last instruction does not fall through (a
//! symbol's size that missed code ending the function would let it run on
//! into the padding), outside every function, whole `nop`s or `int3`s
//! from its first byte, none a branch target (direct or of a jump table
//! read). Several sites share a block big enough: the caller says which
//! bytes are taken.

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic};

use crate::stub::Site;
use crate::window::{BranchTargets, Function};

/// Bytes of a near jump (`jmp rel8`).
pub const NEAR_LEN: usize = 2;

/// Bytes of a cave (`jmp rel32`).
pub const CAVE_LEN: usize = 5;

/// How far before or after a function's end its padding is looked at
/// (bytes): a block longer than this is not needed whole.
pub const MAX_BLOCK: usize = 128;

/// How many bytes of `after` (the file's bytes from the end of `func` on,
/// up to the next function) a cave may take: whole `nop`/`int3`
/// instructions from its first byte, none a branch target, when the last
/// instruction of `func` (decoded from its start, ending exactly at its
/// end) does not fall through. 0 when none.
pub fn padding_block(func: Function<'_>, after: &[u8], targets: &BranchTargets) -> usize {
    let end = func.start + func.code.len() as u64;
    let mut d = Decoder::with_ip(64, func.code, func.start, DecoderOptions::NONE);
    let mut last = None;
    for i in d.iter() {
        if i.is_invalid() {
            return 0;
        }
        last = Some(i);
    }
    let Some(last) = last.filter(|i| i.next_ip() == end) else {
        return 0;
    };
    let stops = match last.flow_control() {
        FlowControl::Return | FlowControl::UnconditionalBranch | FlowControl::IndirectBranch => {
            true
        }
        FlowControl::Interrupt | FlowControl::Exception => {
            matches!(last.mnemonic(), Mnemonic::Int3 | Mnemonic::Ud2)
        }
        _ => false,
    };
    if !stops {
        return 0;
    }
    let after = &after[..after.len().min(MAX_BLOCK)];
    let mut d = Decoder::with_ip(64, after, end, DecoderOptions::NONE);
    let mut n = 0usize;
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() || !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            break;
        }
        n += i.len();
    }
    // No byte of the block may be a branch target: a target is code.
    if (0..n as u64).any(|k| targets.0.contains(&(end + k).wrapping_sub(func.bias))) {
        return 0;
    }
    n
}

/// The alignment padding inside `func` (run-time start and length of each
/// block of at least [`CAVE_LEN`] bytes): the whole `nop`s or `int3`s right
/// after an instruction that does not fall through (a `ret`, a `jmp`, an
/// `int3` or `ud2`), up to the next other instruction, none of whose bytes
/// is a branch target. None when the function does not decode whole, or
/// has an indirect `jmp` whose every target is not known (`targets.1`): it
/// could land in the padding.
pub fn inner_padding(func: Function<'_>, targets: &BranchTargets) -> Vec<(u64, usize)> {
    let link = |a: u64| a.wrapping_sub(func.bias);
    let mut out = Vec::new();
    let mut d = Decoder::with_ip(64, func.code, func.start, DecoderOptions::NONE);
    let mut block: Option<(u64, usize)> = None;
    let mut after_stop = false;
    for i in d.iter() {
        if i.is_invalid() {
            return Vec::new();
        }
        if i.flow_control() == FlowControl::IndirectBranch && !targets.1.contains(&link(i.ip())) {
            return Vec::new();
        }
        let pad = matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3);
        if pad && (after_stop || block.is_some()) {
            let b = block.get_or_insert((i.ip(), 0));
            b.1 += i.len();
            after_stop = false;
            continue;
        }
        if let Some(b) = block.take() {
            out.push(b);
        }
        after_stop = match i.flow_control() {
            FlowControl::Return
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch => true,
            FlowControl::Interrupt | FlowControl::Exception => {
                matches!(i.mnemonic(), Mnemonic::Int3 | Mnemonic::Ud2)
            }
            _ => false,
        };
    }
    // Padding running to the function's end stays the function's: the
    // padding after it is `padding_block`'s, which checks it whole.
    out.retain(|&(start, len)| {
        len >= CAVE_LEN && (0..len as u64).all(|k| !targets.0.contains(&link(start + k)))
    });
    out
}

/// Whether `bytes` are padding: whole `nop`s or `int3`s.
pub fn is_padding(bytes: &[u8]) -> bool {
    let mut d = Decoder::with_ip(64, bytes, 0, DecoderOptions::NONE);
    let mut n = 0;
    while d.can_decode() {
        let i = d.decode();
        if i.is_invalid() || !matches!(i.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return false;
        }
        n += i.len();
    }
    n == bytes.len() && n > 0
}

/// [`CAVE_LEN`] bytes of `blocks` (padding: run-time start and length) a
/// near jump at `site` reaches (rel8 from `site` + 2), none of which
/// `taken(from, to)` says is used (by another cave or a window): in the
/// nearest block with room, the last such bytes.
pub fn find_cave(
    site: u64,
    blocks: &[(u64, usize)],
    taken: impl Fn(u64, u64) -> bool,
) -> Option<u64> {
    let from = site + NEAR_LEN as u64;
    let reach = |c: u64| (-128..=127).contains(&(c as i64).wrapping_sub(from as i64));
    let mut best: Option<u64> = None;
    for &(start, len) in blocks {
        if len < CAVE_LEN {
            continue;
        }
        // From the block's end: its first bytes may complete the window
        // of the `ret` before it.
        for c in (start..=start + (len - CAVE_LEN) as u64).rev() {
            if reach(c) && !taken(c, c + CAVE_LEN as u64) {
                // The nearest to the site: the others stay for sites
                // farther away.
                let dist = |c: u64| c.abs_diff(from);
                if best.is_none_or(|b| dist(c) < dist(b)) {
                    best = Some(c);
                }
                break;
            }
        }
    }
    best
}

/// The bytes to write in a near site's window: `jmp rel8` to `cave`, then
/// `int3` to the window's end. `None` when the cave is out of reach.
pub fn near_patch(site: &Site, cave: u64) -> Option<Vec<u8>> {
    let rel = (cave as i64).wrapping_sub((site.addr + NEAR_LEN as u64) as i64);
    let rel = i8::try_from(rel).ok()?;
    let mut b = vec![0xEB, rel as u8];
    b.resize(site.len.max(NEAR_LEN), 0xCC);
    Some(b)
}

/// The bytes of a cave at `cave`: `jmp rel32` to `stub`.
pub fn cave_patch(cave: u64, stub: u64) -> Option<Vec<u8>> {
    let rel = (stub as i64).wrapping_sub((cave + CAVE_LEN as u64) as i64);
    let rel = i32::try_from(rel).ok()?;
    let mut b = vec![0xE9];
    b.extend_from_slice(&rel.to_le_bytes());
    Some(b)
}

/// The target of the `jmp rel32` `patch` written at `at` (a cave's).
pub fn jump_target(at: u64, patch: &[u8]) -> Option<u64> {
    match patch {
        [0xE9, a, b, c, d] => Some(
            (at + CAVE_LEN as u64).wrapping_add(i32::from_le_bytes([*a, *b, *c, *d]) as i64 as u64),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::{plan_len, plan_ret_len};

    fn f(code: &[u8]) -> Function<'_> {
        Function {
            start: 0x1000,
            code,
            bias: 0,
        }
    }

    #[test]
    fn padding_inside_a_function_after_a_jump() {
        let t = BranchTargets::default();
        // jmp +8 | nopw 0(%rax,%rax,1) (6 bytes) | xor eax,eax; ret
        let code = [
            0xeb, 0x06, 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x31, 0xc0, 0xc3,
        ];
        assert_eq!(inner_padding(f(&code), &t), vec![(0x1002, 6)]);
        // after a conditional jump the nops run
        let mut c = code;
        c[0] = 0x74;
        assert_eq!(inner_padding(f(&c), &t), vec![]);
        // a branch target among them: code
        let mut t2 = BranchTargets::default();
        t2.add_other([0x1004]);
        assert_eq!(inner_padding(f(&code), &t2), vec![]);
        // fewer bytes than a cave: xchg ax,ax (2)
        let code = [0xeb, 0x02, 0x66, 0x90, 0x31, 0xc0, 0xc3];
        assert_eq!(inner_padding(f(&code), &t), vec![]);
        // an indirect jmp whose targets are not known: none
        let code = [
            0xff, 0xe0, 0x66, 0x0f, 0x1f, 0x44, 0x00, 0x00, 0x31, 0xc0, 0xc3,
        ];
        assert_eq!(inner_padding(f(&code), &t), vec![]);
        let mut t3 = BranchTargets::default();
        t3.1.insert(0x1000);
        assert_eq!(inner_padding(f(&code), &t3), vec![(0x1002, 6)]);
    }

    #[test]
    fn padding_after_a_function_that_stops() {
        let t = BranchTargets::default();
        // xor eax,eax; ret | int3 ×7
        let code = [0x31, 0xc0, 0xc3];
        assert_eq!(padding_block(f(&code), &[0xcc; 7], &t), 7);
        // multi-byte nops: nop dword [rax+rax]; xchg ax,ax; nop
        let pad = [0x0f, 0x1f, 0x44, 0x00, 0x00, 0x66, 0x90, 0x90];
        assert_eq!(padding_block(f(&code), &pad, &t), 8);
        // padding up to the first byte that is not
        let pad = [0xcc, 0xcc, 0xcc, 0x55, 0xcc, 0xcc, 0xcc, 0xcc];
        assert_eq!(padding_block(f(&code), &pad, &t), 3);
        // a last instruction that falls through: the symbol may be short
        let code = [0x31, 0xc0];
        assert_eq!(padding_block(f(&code), &[0xcc; 7], &t), 0);
        // nor a call (it may return into the bytes after it)
        let code = [0xe8, 0, 0, 0, 0];
        assert_eq!(padding_block(f(&code), &[0xcc; 7], &t), 0);
        // a jmp ends it
        let code = [0xeb, 0xfe];
        assert_eq!(padding_block(f(&code), &[0xcc; 7], &t), 7);
        // a branch target in the padding: it is code
        let code = [0x31, 0xc0, 0xc3];
        let mut t2 = BranchTargets::default();
        t2.0.insert(0x1005);
        assert_eq!(padding_block(f(&code), &[0xcc; 7], &t2), 0);
        // a jump table's entry too
        let mut t3 = BranchTargets::default();
        t3.add_other([0x1003]);
        assert_eq!(padding_block(f(&code), &[0xcc; 7], &t3), 0);
        // undecodable function code
        assert_eq!(padding_block(f(&[0x0f]), &[0xcc; 7], &t), 0);
    }

    #[test]
    fn caves_in_reach_and_shared() {
        let blocks = [(0x1100, 12usize), (0x2000, 16)];
        let none = |_: u64, _: u64| false;
        // in reach of 0x1090 (rel8 from 0x1092): the first block, its
        // last 5 bytes (the first may complete a `ret`'s window)
        assert_eq!(find_cave(0x1090, &blocks, none), Some(0x1107));
        // out of reach of both
        assert_eq!(find_cave(0x1500, &blocks, none), None);
        // a block too small
        assert_eq!(find_cave(0x1090, &[(0x1100, 4)], none), None);
        // two sites share a block: the second takes the bytes before
        let taken = |a: u64, b: u64| a < 0x110c && 0x1107 < b;
        assert_eq!(find_cave(0x1090, &blocks, taken), Some(0x1102));
        // full (a `ret`'s window took its first two bytes)
        let full = |a: u64, b: u64| a < 0x110c && 0x1100 < b && !(a >= 0x1102 && b <= 0x1107);
        assert_eq!(find_cave(0x1090, &blocks, full), Some(0x1102));
        let full = |a: u64, b: u64| a < 0x110c && 0x1100 < b;
        assert_eq!(find_cave(0x1090, &blocks, full), None);
        // reach: rel8 is -128..=127 from the jump's end
        assert_eq!(
            find_cave(0x1100 - 2 - 127, &[(0x1100, 5)], none),
            Some(0x1100)
        );
        assert_eq!(find_cave(0x1100 - 2 - 128, &[(0x1100, 5)], none), None);
        assert_eq!(
            find_cave(0x1100 + 128 - 2, &[(0x1100, 5)], none),
            Some(0x1100)
        );
        assert_eq!(find_cave(0x1100 + 129 - 2, &[(0x1100, 5)], none), None);
        // the nearest block of two
        assert_eq!(
            find_cave(0x1040, &[(0x1000, 8), (0x1050, 8)], none),
            Some(0x1053)
        );
    }

    #[test]
    fn near_and_cave_bytes() {
        let t = BranchTargets::default();
        // inc eax; ret: 3 bytes, too short for 5, a near window of 2
        let code = [0xff, 0xc0, 0xc3];
        let s = plan_len(0x1000, f(&code), &t, NEAR_LEN).unwrap();
        assert_eq!((s.addr, s.len), (0x1000, 2));
        assert_eq!(near_patch(&s, 0x1010).unwrap(), [0xeb, 0x0e]);
        assert_eq!(near_patch(&s, 0x0f90).unwrap(), [0xeb, 0x8e]);
        assert!(near_patch(&s, 0x1200).is_none());
        let c = cave_patch(0x1010, 0x7000_0000).unwrap();
        assert_eq!(jump_target(0x1010, &c), Some(0x7000_0000));
        assert!(cave_patch(0x1010, 0x1_0000_1000_0000).is_none());
        // its `ret`: a window of the `ret` and one byte of padding
        let s = plan_ret_len(0x1002, f(&code), &[0xcc], &t, NEAR_LEN).unwrap();
        assert_eq!((s.addr, s.len), (0x1002, 2));
        // without padding, `inc eax; ret`
        let s = plan_ret_len(0x1002, f(&code), &[], &t, NEAR_LEN).unwrap();
        assert_eq!((s.addr, s.len, s.displaced.len()), (0x1000, 3, 1));
        // ... unless the `ret` is a branch target (strictly inside)
        let mut t2 = BranchTargets::default();
        t2.0.insert(0x1002);
        t2.2.insert(0x1002, 1);
        assert!(plan_ret_len(0x1002, f(&code), &[], &t2, NEAR_LEN).is_err());
        // a target at the window's start is fine: `ret` + padding
        assert!(plan_ret_len(0x1002, f(&code), &[0x90], &t2, NEAR_LEN).is_ok());
        assert!(is_padding(&[0xcc, 0x90, 0x66, 0x90]));
        assert!(!is_padding(&[0xcc, 0x55]));
        assert!(!is_padding(&[]));
    }
}
