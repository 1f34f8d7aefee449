//! The clock imports (`now_ns`, `clock_ns`) and the clock offsets the
//! hosts measure for them.

use crate::{HostData, Services as _};
use hostabi::env::HitEnv as _;
use wasmtime::{Caller, bail};

/// The offset of a clock from a base clock, from a read of the base (`b1`),
/// of the clock (`x`) and of the base again (`b2`): `x` less the middle of
/// the bracket, never negative (CLOCK_BOOTTIME is never behind
/// CLOCK_MONOTONIC, nor CLOCK_TAI behind CLOCK_REALTIME). `whole_seconds`
/// rounds to the nearest second (the TAI offset is a whole number of leap
/// seconds, so the reads' few hundred ns of skew vanish).
pub fn clock_offset(b1: u64, x: u64, b2: u64, whole_seconds: bool) -> u64 {
    let mid = b1.wrapping_add(b2.wrapping_sub(b1) / 2);
    let d = x.wrapping_sub(mid) as i64;
    if d <= 0 {
        return 0;
    }
    let d = d as u64;
    if whole_seconds {
        (d + 500_000_000) / 1_000_000_000 * 1_000_000_000
    } else {
        d
    }
}

pub(crate) fn now_ns<T: HostData>(c: Caller<'_, T>) -> i64 {
    c.data().env().now_ns() as i64
}

pub(crate) fn clock_ns<T: HostData>(c: Caller<'_, T>, id: i32) -> wasmtime::Result<i64> {
    let s = c.data().services();
    let real = if s.special() {
        s.realtime_now()
    } else {
        c.data().env().now_ns()
    };
    let mono = real.wrapping_sub(s.mono_offset_ns());
    Ok(match id {
        hostabi::imports::clock::MONOTONIC => mono as i64,
        hostabi::imports::clock::SINCE_START => mono.saturating_sub(s.start_mono_ns()) as i64,
        hostabi::imports::clock::REALTIME => real as i64,
        hostabi::imports::clock::BOOTTIME => mono.wrapping_add(s.boot_offset_ns()) as i64,
        hostabi::imports::clock::TAI => real.wrapping_add(s.tai_offset_ns()) as i64,
        _ => bail!("clock_ns: no clock {id}"),
    })
}
