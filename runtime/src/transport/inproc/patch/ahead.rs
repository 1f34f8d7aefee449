//! A module's functions planned ahead of the planner, on a thread of its
//! own: a run about to plan the return probes of most of them (`wprobe
//! trace` of a whole program) with no plan kept (the cache cold) has their
//! return sites found and the windows of their entries and `ret`s planned
//! on the other CPU while it plans, as a warm run finds them kept.

use super::Shape;
use super::continuations::own_continuations;
use super::near::near_jumps;
use super::windows::window_of;
use crate::transport::inproc::code::ModuleCode;

/// Starts the thread for `module`, from its function at link-time `from`
/// on, in address order, at load bias `bias`: first the module's far
/// jumps (`ModuleCode::far_jumps`, which the copies of whole
/// functions ask first; the map of calls is made with the sweep), then
/// each function's return sites (`ModuleCode::return_sites`), the window
/// of its entry and of each `ret` as `check` will ask for them
/// ([`window_of`]), and of the continuation sites of a function that
/// tail-calls through a pointer ([`own_continuations`]), and where no
/// 5-byte jump fits, the 2-byte window and
/// the padding near it (`near`). The planner takes what is kept and
/// plans the rest itself; a function it reaches first is planned twice,
/// the same. The thread stops once the module's plans are saved.
pub(super) fn plan_ahead(module: &std::sync::Arc<ModuleCode>, from: u64, bias: u64) {
    if module.rets_kept() {
        return;
    }
    let me = std::sync::Arc::clone(module);
    let _ = std::thread::Builder::new()
        .name("wprobe-rets".into())
        .spawn(move || {
            crate::transport::inproc::plans::plan_ahead_here();
            me.far_jumps();
            let mut decoded = None;
            for start in me.function_starts_from(from) {
                if me.planning_over() {
                    break;
                }
                let Some(off) = me.elf().file_offset(start) else {
                    continue;
                };
                let Ok(found) = me.return_sites(off) else {
                    continue;
                };
                if me.elf().is_plt_entry(start) {
                    continue;
                }
                // A function that tail-calls through a pointer: its calls
                // are seen returning at continuation sites too, as
                // `Patcher::continue_tail_calls` plans them.
                let conts = match me.tail_calls_through_pointer(&found) {
                    true => own_continuations(&me, start, &found.function, true, false),
                    false => Vec::new(),
                };
                let links = std::iter::once((Shape::Probe, Some(start)))
                    .chain(
                        found
                            .rets
                            .iter()
                            .map(|&r| (Shape::Ret, me.vaddr_of_offset(r))),
                    )
                    .chain(conts.into_iter().map(|c| (Shape::Probe, Some(c))));
                for (shape, link) in links {
                    if let Some(link) = link
                        && let Some((func, after)) = me.function_and_padding(link, bias)
                        && window_of(&me, shape, false, link, bias, func, after, &mut decoded)
                            .is_err()
                        && near_jumps()
                        && let Ok(near) =
                            window_of(&me, shape, true, link, bias, func, after, &mut decoded)
                    {
                        me.padding_blocks_near(near.addr.wrapping_sub(bias), bias);
                    }
                }
            }
        });
}
