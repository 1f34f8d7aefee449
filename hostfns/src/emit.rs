//! The imports that emit records: `emit_log`, `emit_stacktrace`,
//! `emit_event` (with the map snapshot a PRINT_MAP event carries), within
//! the per-run record budget.

use crate::guest::{charge, memory, range, st};
use crate::{HostData, MAX_RECORD_BYTES_PER_RUN, MAX_RECORDS_PER_RUN, RecordSink, Services as _};
use hostabi::Status;
use hostabi::event::{EventKind, MAX_EVENT_BYTES};
use hostabi::record::{MAX_LOG_DATA_BYTES, MAX_LOG_ITEMS, MAX_STACKTRACE_BYTES};
use mapstore::StoreView;
use wasmtime::Caller;

/// Whether a run that emitted what `sink` holds may emit a record with
/// `bytes` more data bytes.
fn has_room<S: RecordSink + ?Sized>(sink: &S, bytes: usize) -> bool {
    sink.records() < MAX_RECORDS_PER_RUN
        && sink.bytes().saturating_add(bytes) <= MAX_RECORD_BYTES_PER_RUN
}

pub(crate) fn emit_log<T: HostData>(
    mut c: Caller<'_, T>,
    major: i32,
    minor: i32,
    data_ptr: i32,
    len: i32,
    items_ptr: i32,
    count: i32,
) -> wasmtime::Result<i32> {
    if len as u32 > MAX_LOG_DATA_BYTES || count as u32 > MAX_LOG_ITEMS {
        return Ok(st(Status::TooLarge));
    }
    charge(&mut c, len as u32 as u64 + 4 * count as u32 as u64);
    if !has_room(c.data().sink(), len as u32 as usize) {
        return Ok(st(Status::TooLarge));
    }
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let d = range(data, data_ptr, len, "emit_log data")?;
    let n_items = (count as u32 as usize) * 4;
    let i = range(data, items_ptr, n_items as i32, "emit_log items")?;
    state
        .sink_and_services()
        .0
        .push_log(major as u16, minor as u16, &data[d], &data[i]);
    Ok(st(Status::Ok))
}

pub(crate) fn emit_stacktrace<T: HostData>(
    mut c: Caller<'_, T>,
    ptr: i32,
    len: i32,
) -> wasmtime::Result<i32> {
    if len as u32 > MAX_STACKTRACE_BYTES {
        return Ok(st(Status::TooLarge));
    }
    charge(&mut c, len as u32 as u64);
    if !has_room(c.data().sink(), len as u32 as usize) {
        return Ok(st(Status::TooLarge));
    }
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let r = range(data, ptr, len, "emit_stacktrace")?;
    if hostabi::record::decode_stacktrace(&data[r.clone()], |_| {}).is_err() {
        return Ok(st(Status::BadArgument));
    }
    state.sink_and_services().0.push_stacktrace(&data[r]);
    Ok(st(Status::Ok))
}

pub(crate) fn emit_event<T: HostData>(
    mut c: Caller<'_, T>,
    kind: i32,
    id: i32,
    dp: i32,
    dl: i32,
) -> wasmtime::Result<i32> {
    let Some(kind) = EventKind::from_code(kind) else {
        return Ok(st(Status::BadArgument));
    };
    if dl as u32 > MAX_EVENT_BYTES || !(0..=0xFFFF).contains(&id) {
        return Ok(st(Status::TooLarge));
    }
    charge(&mut c, dl as u32 as u64);
    if !has_room(c.data().sink(), dl as u32 as usize) {
        return Ok(st(Status::TooLarge));
    }
    let mem = memory(&c)?;
    let (data, state) = mem.data_and_store_mut(&mut c);
    let d = range(data, dp, dl, "emit_event data")?;
    let (sink, services) = state.sink_and_services();
    let room = MAX_RECORD_BYTES_PER_RUN.saturating_sub(sink.bytes());
    let bytes = &data[d];
    match services.map_view().and_then(|r| {
        (kind == EventKind::PrintMap)
            .then(|| snapshot_len(r, id as u32, room))
            .flatten()
            .map(|n| (r, n))
    }) {
        // The map as it is now: later operations of the same run
        // (`clear`, `zero`) must not change what this print shows.
        Some((r, _)) => {
            let mut head = [0u8; 16];
            let n = bytes.len().min(16);
            head[..n].copy_from_slice(&bytes[..n]);
            sink.push_event(kind as u16, id as u16, &head);
            snapshot_map(r, id as u32, |b| sink.extend_last(b));
        }
        None => sink.push_event(kind as u16, id as u16, bytes),
    }
    Ok(st(Status::Ok))
}

/// Bytes a snapshot of map `map` adds to a PRINT_MAP event (its 16 bytes
/// of top and div included), when it fits in `room`; `None` otherwise (the
/// printer then reads the map as it is when printing).
fn snapshot_len(region: &[u8], map: u32, room: usize) -> Option<usize> {
    let view = StoreView::new(region);
    let (k, v) = view.sizes(map).ok()?;
    view.entries(map).ok()?;
    let len = view.stats(map).map(|st| st.len as usize).unwrap_or(0);
    let n = 24 + len * (k + v) as usize;
    (n <= room).then_some(n)
}

/// Streams the snapshot of map `map` that follows a PRINT_MAP event's 16
/// bytes of top and div: u32 key length, u32 value length, then `(key,
/// value)` pairs.
fn snapshot_map(region: &[u8], map: u32, mut out: impl FnMut(&[u8])) {
    let view = StoreView::new(region);
    let (Ok((k, v)), Ok(entries)) = (view.sizes(map), view.entries(map)) else {
        return;
    };
    out(&k.to_le_bytes());
    out(&v.to_le_bytes());
    for (key, val) in entries {
        out(key);
        out(val);
    }
}
