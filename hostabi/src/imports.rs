//! The list of host imports: one line per import, expanded by the compiler,
//! the runtime, the guest SDKs, the C header generator and the ABI snapshot.
//!
//! This file only *declares*; it never implements an import.

/// Calls `$mac!` once with the whole list of host imports.
///
/// Each entry is `name(param: type, ...) -> (results) "doc";` where every
/// type is `i32` or `i64`. The Wasm import module is [`crate::IMPORT_MODULE`].
/// Guest pointers (`*_ptr`) and lengths are offsets and byte counts in the
/// guest's exported linear memory `memory`; the host bounds-checks them and
/// traps the handler (never the host) when they fall outside it.
#[macro_export]
macro_rules! foreach_host_import {
    ($mac:ident) => {
        $mac! {
            read_reg(reg: i32, part: i32) -> (i64)
                "Value of register `reg` (a `Reg` id) of the hit thread, as the handler sees it (earlier `write_reg` calls included). `part` 0 is the low 64 bits; part 1 the high bits of an 80- or 128-bit register. A 32-bit alias reads the low 32 bits zero-extended. An unknown id or part traps; a register the transport cannot provide reads 0.";
            write_reg(reg: i32, value: i64) -> (i32)
                "Set register `reg` of the hit thread; applied when the handler returns, whatever its outcome. A 32-bit alias sets the 64-bit register to the zero-extended low 32 bits. Returns OK, READ_ONLY for a register that may not be written, NOT_PERMITTED when the transport cannot write (perf), BAD_ARGUMENT for an unknown id.";
            read_mem(addr: i64, dst_ptr: i32, len: i32) -> (i32)
                "Copy `len` bytes of the traced process at `addr` to guest memory at `dst_ptr`. Returns `len` when every byte was read, otherwise the number k < len of bytes readable from `addr` (the first unreadable byte is `addr + k`; bytes after k are unspecified). Bytes under the runtime's own breakpoints read as the original bytes. `len` above MAX_MEM_ACCESS_BYTES traps.";
            read_str(addr: i64, dst_ptr: i32, max: i32) -> (i32)
                "Copy the NUL-terminated string at `addr` to `dst_ptr`, examining at most `max` bytes. Returns n >= 0, the number of bytes copied before a NUL or `max` (the NUL is not copied), or -(i + 1) when byte i (i < max, before any NUL) could not be read.";
            write_mem(addr: i64, src_ptr: i32, len: i32) -> (i32)
                "Write `len` bytes from guest memory at `src_ptr` to the traced process at `addr`, all or nothing. Returns OK, FAULT when a byte is unmapped or not writable by the process, NOT_PERMITTED when the transport cannot write (perf).";
            check_access(addr: i64, access: i32) -> (i32)
                "Whether one byte at `addr` is accessible to the traced process per its mappings: `access` 1 = readable, 3 = readable and writable. Returns OK or FAULT. Never reads or writes the byte.";
            current_tid() -> (i64)
                "Thread id of the thread that hit the probe.";
            current_pid() -> (i64)
                "Process id (thread-group id) of the thread that hit the probe.";
            current_cpu() -> (i64)
                "CPU the hit thread last ran on.";
            thread_pointer() -> (i64)
                "The hit thread's thread pointer (`fs_base`, `pthread_self()` for glibc and musl); 0 if unavailable.";
            load_bias() -> (i64)
                "Load bias of the program's module (`name =` / manifest `module`) in the hit process: 0 for ET_EXEC, the mapping bias for PIE executables and shared libraries.";
            now_ns() -> (i64)
                "Wall-clock time of the hit in nanoseconds since the Unix epoch.";
            cpuid(leaf: i32, subleaf: i32, index: i32) -> (i64)
                "Execute CPUID on the runtime's CPU with EAX = `leaf`, ECX = `subleaf`, and return EAX, EBX, ECX or EDX (index 0, 1, 2, 3) zero-extended. Another index traps.";
            gvar_count() -> (i64)
                "Current number of global variables shared by all programs of the run (the largest `gvars` of any program loaded).";
            gvar_get(index: i64) -> (i64)
                "Value of global variable `index`. An index >= gvar_count() traps: check it first.";
            gvar_set(index: i64, value: i64) -> ()
                "Set global variable `index`. An index >= gvar_count() traps: check it first.";
            io_in(port: i64, width: i32, dst_ptr: i32) -> (i32)
                "Read a virtual I/O port (width 1, 2 or 4 bytes) into 8 bytes at `dst_ptr`, zero-extended. Returns OK, or NO_DEVICE when the host has no virtual handler for the port (real ports are never touched).";
            io_out(port: i64, width: i32, value: i64) -> (i32)
                "Write the low `width` bytes of `value` to a virtual I/O port. Returns OK or NO_DEVICE.";
            emit_log(major: i32, minor: i32, data_ptr: i32, data_len: i32, items_ptr: i32, items_count: i32) -> (i32)
                "Emit this hit's log record: the host writes the record header (facility 1, the program's header fields, `major`, `minor`) followed by `data_len` bytes at `data_ptr`. `items_ptr` points to `items_count` u32 item descriptors (`record::LogItem`) that say where each logged item starts, so the output can be decoded exactly. Returns OK, or TOO_LARGE when data_len > MAX_LOG_DATA_BYTES or items_count > MAX_LOG_ITEMS.";
            emit_stacktrace(data_ptr: i32, data_len: i32) -> (i32)
                "Emit this hit's stack-trace record: header with major 0, minor 0, mask 0x0007, then the stack-trace area (`record::stacktrace`). Returns OK, TOO_LARGE, or BAD_ARGUMENT when the area does not parse.";
            callk() -> ()
                "Call the host's callk hook (RPN `callk`). Does nothing when no hook is registered.";
            map_update(map: i32, key_ptr: i32, key_len: i32, op: i32, value: i64) -> (i32)
                "Aggregate `value` into entry `key` of map `map` (an index of the manifest's `map` lines) with `op` (`mapstore::Op`: COUNT, ADD, MIN, MAX, AVG, HIST, LHIST, SET), creating the entry when absent. `key_len` must be the map's key size. Returns OK; FULL when the entry is new and the map already holds its maximum number of keys (the update is dropped and counted, and reported at exit); BAD_ARGUMENT for an unknown map, a wrong key size or an op the map's kind does not take.";
            map_store(map: i32, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32) -> (i32)
                "Set entry `key` of an `assign` map to the `val_len` bytes at `val_ptr` (the map's value size). Returns OK, FULL (counted, as for map_update) or BAD_ARGUMENT.";
            map_lookup(map: i32, key_ptr: i32, key_len: i32, dst_ptr: i32, dst_len: i32) -> (i32)
                "Copy the value of entry `key` of map `map` to `dst_ptr` (at most `dst_len` bytes). Returns the value's size in bytes (integers are 8-byte little-endian; `avg`/`stats` values are count then total; histograms are their bucket counts), NOT_FOUND when the key is absent, BAD_ARGUMENT for an unknown map or a wrong key size.";
            map_delete(map: i32, key_ptr: i32, key_len: i32) -> (i32)
                "Remove entry `key` of map `map`. Returns OK, NOT_FOUND or BAD_ARGUMENT.";
            map_clear(map: i32) -> (i32)
                "Remove every entry of map `map` (bpftrace `clear`). Returns OK or BAD_ARGUMENT.";
            map_zero(map: i32) -> (i32)
                "Set every value of map `map` to zero, keeping its keys (bpftrace `zero`). Returns OK or BAD_ARGUMENT.";
            emit_event(kind: i32, id: i32, data_ptr: i32, data_len: i32) -> (i32)
                "Emit an output event (`event::EventKind`): PRINTF with `id` a printf entry of the module's `wprobe.events` section and the data its arguments laid out as the entry says; PRINT_MAP with `id` a map index and 16 bytes (top, div); PRINT_VALUE with `id` a value entry and the value's bytes; TIME with `id` a time entry; CAT and SYSTEM with `id` a printf entry giving a file's path or a shell command (bpftrace `cat`, `system`); EXIT with `id` 0 and an i64 exit status (bpftrace `exit(code)`; the handler then returns STOP). wprobe formats events when it writes them. Returns OK, TOO_LARGE (data_len > MAX_EVENT_BYTES or the run's record budget is spent) or BAD_ARGUMENT (unknown kind).";
            clock_ns(clock: i32) -> (i64)
                "A clock at the hit, in nanoseconds: `clock::MONOTONIC` (bpftrace `nsecs`), `clock::SINCE_START` (time since the run started, bpftrace `elapsed`), `clock::REALTIME` (since the Unix epoch), `clock::BOOTTIME` (`CLOCK_BOOTTIME`, bpftrace `nsecs(boot)`), `clock::TAI` (`CLOCK_TAI`, bpftrace `nsecs(tai)` and `nsecs(sw_tai)`). Another id traps.";
            current_uid() -> (i64)
                "Real user id of the process that hit the probe (-1 if unknown).";
            current_comm(dst_ptr: i32, len: i32) -> (i32)
                "Copy the hit thread's name (`/proc/PID/task/TID/comm`, at most 15 bytes, no NUL) to `dst_ptr`, at most `len` bytes. Returns the number of bytes copied.";
            child_pid() -> (i64)
                "Process id of the command wprobe launched (bpftrace `cpid`), 0 when it attached to a process instead.";
            entry_reg(reg: i32) -> (i64)
                "In the handler of a return probe (manifest `return yes`): the value register `reg` had at the entry of the call that is returning. `reg` is one of the six SysV argument registers rdi, rsi, rdx, rcx, r8, r9 or rsp, by `Reg` id (`regs::ENTRY_REGS`); any other id traps, and so does a call from the handler of a probe that is not a return probe (every i64 is a possible register value, so there is no room for a status).";
            elapsed_ns() -> (i64)
                "In the handler of a return probe: nanoseconds between the entry of the returning call and its return, both taken by the runtime with a monotonic clock when it caught them (the tracer's own stops are included). Traps in the handler of a probe that is not a return probe.";
            map_entry(map: i32, cursor: i64, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32) -> (i32)
                "Iterate map `map` (bpftrace `for ($kv : @m)`, `len(@m)`): copy the key and the value of its first entry at or after `cursor` (start at 0) to `key_ptr` and `val_ptr` (at most `key_len` and `val_len` bytes). Returns that entry's position (the next call passes position + 1; deleting the entry found does not move the others), NOT_FOUND past the last entry, BAD_ARGUMENT for an unknown map.";
            usdt_arg(index: i32) -> (i64)
                "Argument `index` (0-based) of the USDT probe that fired (manifest `usdt_args`, from the site's `.note.stapsdt` spec), sign- or zero-extended from its size as the spec says. An argument whose register or memory cannot be read is 0. An index the site does not have traps, and so does a call from the handler of a probe that is not a USDT site.";
            current_gid() -> (i64)
                "Real group id of the thread that hit the probe (-1 if unknown); wprobe's own in a `begin`, `end` or `interval` probe.";
            current_numa_node() -> (i64)
                "NUMA node of the CPU the hit thread last ran on (`current_cpu`); 0 on a machine with one node.";
        }
    };
}

/// A Wasm value type used by host imports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValType {
    /// 32-bit integer.
    I32,
    /// 64-bit integer.
    I64,
}

impl ValType {
    /// The WAT spelling (`i32` / `i64`).
    pub const fn wat(self) -> &'static str {
        match self {
            ValType::I32 => "i32",
            ValType::I64 => "i64",
        }
    }
}

/// One host import, as data.
#[derive(Clone, Copy, Debug)]
pub struct HostImport {
    /// Field name within [`crate::IMPORT_MODULE`].
    pub name: &'static str,
    /// Parameter names and types, in order.
    pub params: &'static [(&'static str, ValType)],
    /// Result types (zero or one).
    pub results: &'static [ValType],
    /// What the import does, for docs and generated headers.
    pub doc: &'static str,
}

macro_rules! __valtype {
    (i32) => {
        ValType::I32
    };
    (i64) => {
        ValType::I64
    };
}

macro_rules! __imports_table {
    ($( $name:ident ( $($p:ident : $pt:tt),* ) -> ( $($r:tt),* ) $doc:literal ; )*) => {
        /// Every host import, in declaration order.
        pub const HOST_IMPORTS: &[HostImport] = &[
            $( HostImport {
                name: stringify!($name),
                params: &[ $( (stringify!($p), __valtype!($pt)) ),* ],
                results: &[ $( __valtype!($r) ),* ],
                doc: $doc,
            }, )*
        ];

        /// Index of each host import in [`HOST_IMPORTS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        #[allow(non_camel_case_types, reason = "variants spell the import names exactly")]
        #[repr(u32)]
        pub enum ImportId {
            $(
                #[doc = $doc]
                $name,
            )*
        }
    };
}

foreach_host_import!(__imports_table);

impl ImportId {
    /// The import's description.
    pub fn import(self) -> &'static HostImport {
        &HOST_IMPORTS[self as usize]
    }

    /// Looks an import up by its field name.
    pub fn by_name(name: &str) -> Option<ImportId> {
        HOST_IMPORTS
            .iter()
            .position(|i| i.name == name)
            .map(|i| ALL_IMPORT_IDS[i])
    }
}

macro_rules! __import_ids {
    ($( $name:ident ( $($p:ident : $pt:tt),* ) -> ( $($r:tt),* ) $doc:literal ; )*) => {
        /// Every [`ImportId`], in declaration order.
        pub const ALL_IMPORT_IDS: &[ImportId] = &[ $( ImportId::$name, )* ];
    };
}
foreach_host_import!(__import_ids);

/// Clock ids of the `clock_ns` import.
pub mod clock {
    /// `CLOCK_MONOTONIC` at the hit (bpftrace `nsecs`).
    pub const MONOTONIC: i32 = 0;
    /// Nanoseconds since the run started (bpftrace `elapsed`).
    pub const SINCE_START: i32 = 1;
    /// `CLOCK_REALTIME` at the hit (nanoseconds since the Unix epoch).
    pub const REALTIME: i32 = 2;
    /// `CLOCK_BOOTTIME` at the hit: the monotonic clock plus the time spent
    /// suspended (bpftrace `nsecs(boot)`).
    pub const BOOTTIME: i32 = 3;
    /// `CLOCK_TAI` at the hit: International Atomic Time (bpftrace
    /// `nsecs(tai)`, `nsecs(sw_tai)`).
    pub const TAI: i32 = 4;
    /// Every clock id with its name, for the ABI snapshot.
    pub const ALL: &[(&str, i32)] = &[
        ("MONOTONIC", MONOTONIC),
        ("SINCE_START", SINCE_START),
        ("REALTIME", REALTIME),
        ("BOOTTIME", BOOTTIME),
        ("TAI", TAI),
    ];
}

/// Largest `len` accepted by `read_mem`, `write_mem` and `read_str` (bytes).
/// Bounds the work one host call can do for a guest (1 MiB).
pub const MAX_MEM_ACCESS_BYTES: u32 = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_match_table_positions() {
        for (i, id) in ALL_IMPORT_IDS.iter().enumerate() {
            assert_eq!(*id as usize, i);
            assert_eq!(ImportId::by_name(HOST_IMPORTS[i].name), Some(*id));
        }
        assert_eq!(ImportId::by_name("nope"), None);
    }

    #[test]
    fn every_import_has_at_most_one_result() {
        for i in HOST_IMPORTS {
            assert!(i.results.len() <= 1, "{}", i.name);
        }
    }
}
