//! Near jumps: where no 5-byte jump fits, a 2-byte `jmp rel8` to a cave,
//! a `jmp rel32` to the stub written in padding within rel8 reach
//! (`agent_loader::nearjump`); whether they are on, and the caves taken.

use agent_loader::nearjump;
use agent_loader::stub::Site;
use agent_loader::window::Function;

use super::Patcher;
use super::Shape;
use super::windows::window_of;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::world::World;

/// Whether sites where no 5-byte jump fits may take a near jump to a cave
/// (`WPROBE_NO_NEAR_JUMPS=1`: a trap instead, as before near jumps; for
/// comparisons and for the tests of trap sites).
pub(super) fn near_jumps() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("WPROBE_NO_NEAR_JUMPS").is_none_or(|v| v.is_empty()))
}

/// Longest run of padding a window takes after its function's end.
const MAX_TAIL: u64 = 64;

/// A cave of `caves` (5 bytes each, by address) meeting `lo..hi`.
pub(super) fn cave_in(caves: &super::window_index::CaveSet, lo: u64, hi: u64) -> Option<u64> {
    caves.meeting(lo, hi)
}

impl Patcher {
    /// The 2-byte window of `shape` at `addr` (in `func` of `module`, load
    /// bias `bias`, `after` the padding after it) for a near jump, and a
    /// free cave within its reach: (window, cave address).
    #[allow(
        clippy::too_many_arguments,
        reason = "the planner's state, the stopped process and the window's facts"
    )]
    pub(super) fn near_window(
        &mut self,
        world: &World,
        module: &ModuleCode,
        func: Function<'_>,
        after: &[u8],
        addr: u64,
        bias: u64,
        shape: Shape,
    ) -> Result<(Site, u64), String> {
        let link = addr.wrapping_sub(bias);
        let near = window_of(
            module,
            shape,
            true,
            link,
            bias,
            func,
            after,
            &mut self.decoded,
        );
        let pcs = &self.thread_pcs;
        let (caves, tails, by_window, sites) =
            (&self.caves, &self.tails, &self.by_window, &self.sites);
        near.and_then(|site| {
            let (lo, hi) = (site.addr, site.addr + site.len as u64);
            if pcs.iter().any(|(_, pc)| *pc > lo && *pc < hi) {
                return Err("a thread is stopped inside its 2-byte window".to_string());
            }
            if let Some(c) = cave_in(caves, lo, hi) {
                return Err(format!("its window meets the cave at {c:#x}"));
            }
            let blocks = module.padding_blocks_near(lo.wrapping_sub(bias), bias);
            let taken = |a: u64, b: u64| {
                if (a < hi && lo < b)
                    || cave_in(caves, a, b).is_some()
                    || tails
                        .range(a.saturating_sub(MAX_TAIL)..b)
                        .any(|(&t, &e)| t < b && a < e)
                    || by_window.near(a, b).any(|(_, i)| {
                        let o = &sites[i].site;
                        o.addr < b && a < o.addr + o.len as u64
                    })
                    || pcs.iter().any(|(_, pc)| (a..b).contains(pc))
                {
                    return true;
                }
                // The bytes in memory are the file's (its padding:
                // `padding_block` decoded the block whole).
                // (Read through the chunks planning reads the code by, not
                // a system call each: a cave is a few bytes, and a large
                // program tries a thousand.)
                // (A cave is `CAVE_LEN` bytes: a longer span is taken.)
                let file = module.bytes_at(a.wrapping_sub(bias), (b - a) as usize);
                let mut buf = [0u8; nearjump::CAVE_LEN];
                !buf.get_mut(..(b - a) as usize).is_some_and(|now| {
                    world.peek_code(a, now) == now.len() && file == Some(&now[..])
                })
            };
            let c = nearjump::find_cave(lo, &blocks, taken).ok_or_else(|| {
                format!(
                    "no free padding between functions within 127 bytes ({} blocks \
                     near)",
                    blocks.len()
                )
            })?;
            Ok((site, c))
        })
    }
}
