//! The identity imports: who and where the hit is (thread, process, CPU,
//! NUMA node, thread pointer, load bias, user and group, thread name, the
//! launched command).

use crate::guest::{memory, range};
use crate::{HostData, Services as _};
use hostabi::env::HitEnv as _;
use wasmtime::Caller;

/// The pid and tid the identity builtins report: the hit's, or the
/// tracer's own in a special probe.
fn identity<T: HostData>(d: &T) -> (u64, u64) {
    let s = d.services();
    if s.special() {
        let p = s.own_pid();
        (p, p)
    } else {
        (d.env().pid(), d.env().tid())
    }
}

pub(crate) fn current_tid<T: HostData>(c: Caller<'_, T>) -> i64 {
    identity(c.data()).1 as i64
}

pub(crate) fn current_pid<T: HostData>(c: Caller<'_, T>) -> i64 {
    identity(c.data()).0 as i64
}

pub(crate) fn current_cpu<T: HostData>(c: Caller<'_, T>) -> i64 {
    c.data().env().cpu() as i64
}

pub(crate) fn thread_pointer<T: HostData>(c: Caller<'_, T>) -> i64 {
    c.data().env().thread_pointer() as i64
}

pub(crate) fn load_bias<T: HostData>(c: Caller<'_, T>) -> i64 {
    c.data().env().load_bias() as i64
}

pub(crate) fn current_uid<T: HostData>(mut c: Caller<'_, T>) -> i64 {
    let pid = identity(c.data()).0;
    c.data_mut().services_mut().uid(pid)
}

pub(crate) fn current_comm<T: HostData>(
    mut c: Caller<'_, T>,
    dp: i32,
    dl: i32,
) -> wasmtime::Result<i32> {
    let (pid, tid) = identity(c.data());
    let recorded = if c.data().services().special() {
        None
    } else {
        c.data().env().comm()
    };
    let (b, n) = match recorded {
        Some(b) => (b, b.iter().position(|&x| x == 0).unwrap_or(b.len()).min(15)),
        None => c.data_mut().services_mut().comm(pid, tid),
    };
    let mem = memory(&c)?;
    let data = mem.data_mut(&mut c);
    let d = range(data, dp, dl, "current_comm")?;
    let n = n.min(d.len()).min(b.len());
    data[d.start..d.start + n].copy_from_slice(&b[..n]);
    Ok(n as i32)
}

pub(crate) fn child_pid<T: HostData>(c: Caller<'_, T>) -> i64 {
    c.data().services().child_pid() as i64
}

pub(crate) fn current_gid<T: HostData>(mut c: Caller<'_, T>) -> i64 {
    let (pid, tid) = identity(c.data());
    c.data_mut().services_mut().gid(pid, tid)
}

pub(crate) fn current_numa_node<T: HostData>(c: Caller<'_, T>) -> i64 {
    let cpu = c.data().env().cpu();
    c.data().services().numa_node(cpu)
}
