//! `wprobe repair --pid N` for the in-process transport: a wprobe that was
//! killed left its jumps in the process (the probes went dormant: each hit
//! runs the displaced instructions in the stub and goes on). The journal
//! says where; every thread is stopped, each site that still holds the
//! bytes wprobe wrote, in a mapping of the same inode, gets its original
//! bytes back, and the process is let go. The agent, its stubs and the
//! shared region stay mapped (dormant): a thread may still be returning
//! through a stub.

use super::journal;
use super::world::World;

/// Restores the journaled sites of `pid`; removes the journal. Returns how
/// many sites were restored.
pub fn repair(pid: i32) -> std::io::Result<usize> {
    let entries = journal::read(pid)?;
    // Written for an earlier process with this pid: nothing to restore.
    if journal::journal_start(pid)
        .is_some_and(|t| Some(t) != crate::proc::procinfo::start_time(pid))
    {
        let _ = std::fs::remove_file(journal::path(pid));
        return Ok(0);
    }
    let maps = crate::proc::procmaps::read(pid).map_err(|e| {
        let kind = match &e {
            crate::proc::procmaps::MapsError::Io { source, .. } => source.kind(),
            _ => std::io::ErrorKind::InvalidData,
        };
        std::io::Error::new(kind, e)
    })?;
    let world = World::stop(pid).map_err(|e| {
        let kind = match e.downcast_ref::<crate::transport::Error>() {
            Some(crate::transport::Error::Os {
                errno: Some(libc::EPERM),
                ..
            }) => std::io::ErrorKind::PermissionDenied,
            _ => std::io::ErrorKind::Other,
        };
        std::io::Error::new(kind, format!("{e:#}"))
    })?;
    // A thread between a near jump and its cave (a `jmp` to the stub in
    // padding, the target of a journaled `jmp rel8`) goes on at the stub:
    // the cave becomes padding again.
    let caves: std::collections::HashSet<u64> = entries
        .iter()
        .filter_map(|e| match e.patch[..] {
            [0xEB, rel, ..] => Some((e.addr + 2).wrapping_add(rel as i8 as i64 as u64)),
            _ => None,
        })
        .collect();
    for tid in world.tids() {
        let Some(pc) = world
            .regs(tid)
            .map(|r| r.rip)
            .filter(|pc| caves.contains(pc))
        else {
            continue;
        };
        let to = entries.iter().find_map(|e| {
            let mut now = vec![0u8; e.patch.len()];
            (e.addr == pc && world.peek(e.addr, &mut now) == now.len() && now == e.patch)
                .then(|| agent_loader::nearjump::jump_target(e.addr, &e.patch))
                .flatten()
        });
        if let Some(to) = to {
            world
                .set_pc(tid, to)
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
        }
    }
    let mut n = 0;
    for e in entries {
        let Some(m) = crate::proc::procmaps::find(&maps, e.addr) else {
            continue;
        };
        if m.inode != e.inode {
            continue;
        }
        let mut now = vec![0u8; e.patch.len()];
        if world.peek(e.addr, &mut now) == now.len() && now == e.patch {
            world
                .poke(e.addr, &e.orig)
                .map_err(|e| std::io::Error::other(format!("{e:#}")))?;
            n += 1;
        }
    }
    drop(world);
    let _ = std::fs::remove_file(journal::path(pid));
    Ok(n)
}
