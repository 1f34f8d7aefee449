//! A window as the module's rules alone plan it (for a 5-byte jump or a
//! 2-byte one), kept in the module's plans: what `check`, `near` and the
//! planning ahead (`ahead`) ask.

use agent_loader::nearjump::NEAR_LEN;
use agent_loader::stub::{JMP_LEN, Site};
use agent_loader::window;

use super::Shape;
use crate::transport::inproc::code::ModuleCode;
use crate::transport::inproc::plans::WindowShape;

/// The window of `shape` at link-time address `link` in `func` of `module`
/// (load bias `bias`; `after`: the padding after it) as the module's rules
/// alone plan it, for a 5-byte jump or, with `near`, a 2-byte one
/// (`near`): as an earlier planning of this file chose or refused it (the
/// plan cache), else planned now and kept (`ModuleCode::kept_or_planned`).
/// `decoded`: the function whose `ret`s were planned last, decoded once
/// for all of them (they come one after the other).
#[allow(
    clippy::too_many_arguments,
    reason = "the window's facts, and the function decoded last"
)]
pub(super) fn window_of(
    module: &ModuleCode,
    shape: Shape,
    near: bool,
    link: u64,
    bias: u64,
    func: window::Function<'_>,
    after: &[u8],
    decoded: &mut Option<window::Decoded>,
) -> Result<Site, String> {
    let addr = link.wrapping_add(bias);
    let (kept_as, need) = match (shape, near) {
        (Shape::Probe, false) => (WindowShape::Probe, JMP_LEN),
        (Shape::Ret, false) => (WindowShape::Ret, JMP_LEN),
        (Shape::Whole, false) => (WindowShape::Whole, JMP_LEN),
        (Shape::Probe, true) => (WindowShape::NearProbe, NEAR_LEN),
        (Shape::Ret, true) => (WindowShape::NearRet, NEAR_LEN),
        (Shape::Whole, true) => (WindowShape::NearWhole, NEAR_LEN),
    };
    let targets = &module.targets;
    module.kept_or_planned(kept_as, link, bias, || {
        if shape == Shape::Ret && !decoded.as_ref().is_some_and(|d| d.is_of(func, targets)) {
            *decoded = Some(window::Decoded::new(func, targets));
        }
        match (shape, &*decoded) {
            (Shape::Probe, _) => window::plan_len(addr, func, targets, need),
            (Shape::Ret, Some(d)) => window::plan_ret_in(addr, func, d, after, targets, need),
            (Shape::Ret, None) => window::plan_ret_len(addr, func, after, targets, need),
            (Shape::Whole, _) => window::plan_whole_len(addr, func, after, targets, need),
        }
        .map_err(|r| {
            let why = r.to_string();
            if near { near_words(&why) } else { why }
        })
    })
}

/// A refusal's words for the 2 bytes of a near jump (the rules say them
/// for 5).
fn near_words(why: &str) -> String {
    why.replace("5-byte window", "2-byte window")
        .replace(
            "the 5 bytes the jump replaces",
            "the bytes a near jump replaces",
        )
        .replace("a jump needs 5", "a near jump needs 2")
}
