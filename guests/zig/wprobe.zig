//! wprobe.zig - write wprobe probe handlers in Zig (wasm32-freestanding, no libc, no std).
//!
//! GENERATED from the hostabi crate (hostabi::zigsdk::render). Do not edit:
//! run `BLESS=1 cargo test -p hostabi --test langsdk` after changing hostabi.
//!
//! Build: zig build-exe -target wasm32-freestanding -O ReleaseSmall -fno-entry -rdynamic
//! (see guests/zig/README.md), then `wprobe compile --manifest-from-export` when the
//! module calls `manifest`.

/// Host ABI version of this file.
pub const ABI_VERSION: u32 = 5;
/// Wasm import module of every host import.
pub const IMPORT_MODULE = "wprobe";
/// Custom section carrying the manifest.
pub const MANIFEST_SECTION = "wprobe.manifest";
/// Export `manifest` leaves for `wprobe compile --manifest-from-export`.
pub const MANIFEST_EXPORT = "wprobe_manifest";
/// The manifest's first lines (format and ABI version), put before yours by `manifest`.
pub const MANIFEST_HEAD = "wprobe-manifest 1\nabi 5\n";

/// Status codes returned by host imports.
pub const Status = struct {
    pub const OK: i32 = 0;
    pub const FAULT: i32 = -1;
    pub const READ_ONLY: i32 = -2;
    pub const NOT_PERMITTED: i32 = -3;
    pub const BAD_ARGUMENT: i32 = -4;
    pub const TOO_LARGE: i32 = -5;
    pub const NO_DEVICE: i32 = -6;
    pub const NOT_FOUND: i32 = -7;
    pub const FULL: i32 = -8;
};

/// Outcomes: the value a handler returns.
pub const Outcome = struct {
    pub const EXIT: i32 = 0;
    pub const ABORT: i32 = 1;
    pub const REMOVE: i32 = 2;
    pub const DEBUGGER_HANDOFF: i32 = 3;
    pub const CRASH_DUMP: i32 = 4;
    pub const CORE_DUMP: i32 = 5;
    pub const UNCAUGHT: i32 = 6;
    pub const BUDGET_EXCEEDED: i32 = 7;
    pub const STOP: i32 = 8;
};

/// Register ids of `read_reg` / `write_reg` (x86-64).
pub const Reg = struct {
    /// `cs`: 16 bits
    pub const CS: i32 = 0x000;
    /// `ds`: 16 bits
    pub const DS: i32 = 0x001;
    /// `es`: 16 bits
    pub const ES: i32 = 0x002;
    /// `fs`: 16 bits
    pub const FS: i32 = 0x003;
    /// `gs`: 16 bits
    pub const GS: i32 = 0x004;
    /// `ss`: 16 bits
    pub const SS: i32 = 0x005;
    /// `rax`: 64 bits, writable
    pub const RAX: i32 = 0x006;
    /// `rbx`: 64 bits, writable
    pub const RBX: i32 = 0x007;
    /// `rcx`: 64 bits, writable
    pub const RCX: i32 = 0x008;
    /// `rdx`: 64 bits, writable
    pub const RDX: i32 = 0x009;
    /// `rdi`: 64 bits, writable
    pub const RDI: i32 = 0x00a;
    /// `rsi`: 64 bits, writable
    pub const RSI: i32 = 0x00b;
    /// `rflags`: 64 bits
    pub const RFLAGS: i32 = 0x00c;
    /// `rip`: 64 bits
    pub const RIP: i32 = 0x00d;
    /// `rsp`: 64 bits
    pub const RSP: i32 = 0x00e;
    /// `rbp`: 64 bits, writable
    pub const RBP: i32 = 0x00f;
    /// `r8`: 64 bits, writable
    pub const R8: i32 = 0x010;
    /// `r9`: 64 bits, writable
    pub const R9: i32 = 0x011;
    /// `r10`: 64 bits, writable
    pub const R10: i32 = 0x012;
    /// `r11`: 64 bits, writable
    pub const R11: i32 = 0x013;
    /// `r12`: 64 bits, writable
    pub const R12: i32 = 0x014;
    /// `r13`: 64 bits, writable
    pub const R13: i32 = 0x015;
    /// `r14`: 64 bits, writable
    pub const R14: i32 = 0x016;
    /// `r15`: 64 bits, writable
    pub const R15: i32 = 0x017;
    /// `orig_rax`: 64 bits
    pub const ORIG_RAX: i32 = 0x018;
    /// `fs_base`: 64 bits
    pub const FS_BASE: i32 = 0x019;
    /// `gs_base`: 64 bits
    pub const GS_BASE: i32 = 0x01a;
    /// `dr0`: 64 bits
    pub const DR0: i32 = 0x02c;
    /// `dr1`: 64 bits
    pub const DR1: i32 = 0x02d;
    /// `dr2`: 64 bits
    pub const DR2: i32 = 0x02e;
    /// `dr3`: 64 bits
    pub const DR3: i32 = 0x02f;
    /// `dr6`: 64 bits
    pub const DR6: i32 = 0x032;
    /// `dr7`: 64 bits
    pub const DR7: i32 = 0x033;
    /// `cpuid`: 0 bits
    pub const CPUID: i32 = 0x03c;
    /// `fr0`: 80 bits
    pub const FR0: i32 = 0x03e;
    /// `fr1`: 80 bits
    pub const FR1: i32 = 0x03f;
    /// `fr2`: 80 bits
    pub const FR2: i32 = 0x040;
    /// `fr3`: 80 bits
    pub const FR3: i32 = 0x041;
    /// `fr4`: 80 bits
    pub const FR4: i32 = 0x042;
    /// `fr5`: 80 bits
    pub const FR5: i32 = 0x043;
    /// `fr6`: 80 bits
    pub const FR6: i32 = 0x044;
    /// `fr7`: 80 bits
    pub const FR7: i32 = 0x045;
    /// `fcw`: 16 bits
    pub const FCW: i32 = 0x046;
    /// `fsw`: 16 bits
    pub const FSW: i32 = 0x047;
    /// `ftw`: 8 bits
    pub const FTW: i32 = 0x048;
    /// `fip`: 64 bits
    pub const FIP: i32 = 0x049;
    /// `fdp`: 64 bits
    pub const FDP: i32 = 0x04b;
    /// `xmm0`: 128 bits
    pub const XMM0: i32 = 0x04d;
    /// `xmm1`: 128 bits
    pub const XMM1: i32 = 0x04e;
    /// `xmm2`: 128 bits
    pub const XMM2: i32 = 0x04f;
    /// `xmm3`: 128 bits
    pub const XMM3: i32 = 0x050;
    /// `xmm4`: 128 bits
    pub const XMM4: i32 = 0x051;
    /// `xmm5`: 128 bits
    pub const XMM5: i32 = 0x052;
    /// `xmm6`: 128 bits
    pub const XMM6: i32 = 0x053;
    /// `xmm7`: 128 bits
    pub const XMM7: i32 = 0x054;
    /// `mxcsr`: 32 bits
    pub const MXCSR: i32 = 0x055;
    /// `fop`: 16 bits
    pub const FOP: i32 = 0x056;
    /// `xmm8`: 128 bits
    pub const XMM8: i32 = 0x058;
    /// `xmm9`: 128 bits
    pub const XMM9: i32 = 0x059;
    /// `xmm10`: 128 bits
    pub const XMM10: i32 = 0x05a;
    /// `xmm11`: 128 bits
    pub const XMM11: i32 = 0x05b;
    /// `xmm12`: 128 bits
    pub const XMM12: i32 = 0x05c;
    /// `xmm13`: 128 bits
    pub const XMM13: i32 = 0x05d;
    /// `xmm14`: 128 bits
    pub const XMM14: i32 = 0x05e;
    /// `xmm15`: 128 bits
    pub const XMM15: i32 = 0x05f;
    /// `eax`: 32 bits, writable
    pub const EAX: i32 = 0x106;
    /// `ebx`: 32 bits, writable
    pub const EBX: i32 = 0x107;
    /// `ecx`: 32 bits, writable
    pub const ECX: i32 = 0x108;
    /// `edx`: 32 bits, writable
    pub const EDX: i32 = 0x109;
    /// `edi`: 32 bits, writable
    pub const EDI: i32 = 0x10a;
    /// `esi`: 32 bits, writable
    pub const ESI: i32 = 0x10b;
    /// `eflags`: 32 bits
    pub const EFLAGS: i32 = 0x10c;
    /// `eip`: 32 bits
    pub const EIP: i32 = 0x10d;
    /// `esp`: 32 bits
    pub const ESP: i32 = 0x10e;
    /// `ebp`: 32 bits, writable
    pub const EBP: i32 = 0x10f;
    /// `r8d`: 32 bits, writable
    pub const R8D: i32 = 0x110;
    /// `r9d`: 32 bits, writable
    pub const R9D: i32 = 0x111;
    /// `r10d`: 32 bits, writable
    pub const R10D: i32 = 0x112;
    /// `r11d`: 32 bits, writable
    pub const R11D: i32 = 0x113;
    /// `r12d`: 32 bits, writable
    pub const R12D: i32 = 0x114;
    /// `r13d`: 32 bits, writable
    pub const R13D: i32 = 0x115;
    /// `r14d`: 32 bits, writable
    pub const R14D: i32 = 0x116;
    /// `r15d`: 32 bits, writable
    pub const R15D: i32 = 0x117;
};

// Limits of the host ABI.
/// Largest length of one `read_mem`, `read_str` or `write_mem`.
pub const MAX_MEM_ACCESS_BYTES: u32 = 1048576;
/// Largest data area of one log record.
pub const MAX_LOG_DATA_BYTES: u32 = 65535;
/// Most item descriptors of one log record.
pub const MAX_LOG_ITEMS: u32 = 65535;
/// Largest stack-trace area.
pub const MAX_STACKTRACE_BYTES: u32 = 65535;
/// Live calls of a return probe tracked per process without `maxactive`.
pub const DEFAULT_MAXACTIVE: u32 = 64;
/// Largest `maxactive` of a return probe.
pub const MAX_MAXACTIVE: u32 = 4096;
/// Keys of a map without `maxkeys=`.
pub const MAP_DEFAULT_MAX_KEYS: u32 = 4096;
/// Largest data of one `emit_event`.
pub const MAX_EVENT_BYTES: u32 = 65535;

/// Kinds of log item descriptors (bits 16-23 of a descriptor; see `item`).
pub const ItemKind = struct {
    pub const RAW_WORDS: u32 = 0x080;
    pub const RAW_BYTES: u32 = 0x081;
    pub const TOKENIZED: u32 = 0x082;
};

/// Tokens of TOKENIZED items: token byte, u16 count, payload.
pub const Token = struct {
    pub const MEMORY: u8 = 0x000;
    pub const STRING: u8 = 0x001;
    pub const LOCAL_VARS: u8 = 0x005;
    pub const GLOBAL_VARS: u8 = 0x006;
    pub const WORDS: u8 = 0x007;
    pub const FAULT: u8 = 0x0ff;
};

/// Kinds of the manifest's `map` lines.
pub const MapKind = struct {
    pub const COUNT: i32 = 1;
    pub const SUM: i32 = 2;
    pub const MIN: i32 = 3;
    pub const MAX: i32 = 4;
    pub const AVG: i32 = 5;
    pub const STATS: i32 = 6;
    pub const HIST: i32 = 7;
    pub const LHIST: i32 = 8;
    pub const ASSIGN: i32 = 9;
};

/// Ops of `map_update`.
pub const MapOp = struct {
    pub const COUNT: i32 = 1;
    pub const ADD: i32 = 2;
    pub const MIN: i32 = 3;
    pub const MAX: i32 = 4;
    pub const AVG: i32 = 5;
    pub const HIST: i32 = 6;
    pub const LHIST: i32 = 7;
    pub const SET: i32 = 8;
};

/// Kinds of `emit_event` events (formats in the `wprobe.events` section).
pub const EventKind = struct {
    pub const PRINTF: i32 = 1;
    pub const PRINT_MAP: i32 = 2;
    pub const PRINT_VALUE: i32 = 3;
    pub const TIME: i32 = 4;
    pub const CAT: i32 = 5;
    pub const SYSTEM: i32 = 6;
    pub const EXIT: i32 = 7;
};

/// Clock ids of `clock_ns`.
pub const Clock = struct {
    pub const MONOTONIC: i32 = 0;
    pub const SINCE_START: i32 = 1;
    pub const REALTIME: i32 = 2;
    pub const BOOTTIME: i32 = 3;
    pub const TAI: i32 = 4;
};

/// The host imports (module `wprobe`), exactly as `hostabi` declares them. Pointers
/// are addresses in this module's memory (`ptr(&x)`); the host checks every range
/// and traps the handler on a bad one.
pub const raw = struct {
    /// Value of register `reg` (a `Reg` id) of the hit thread, as the handler sees it (earlier
    /// `write_reg` calls included). `part` 0 is the low 64 bits; part 1 the high bits of an 80- or
    /// 128-bit register. A 32-bit alias reads the low 32 bits zero-extended. An unknown id or part
    /// traps; a register the transport cannot provide reads 0.
    pub extern "wprobe" fn read_reg(reg: i32, part: i32) i64;

    /// Set register `reg` of the hit thread; applied when the handler returns, whatever its
    /// outcome. A 32-bit alias sets the 64-bit register to the zero-extended low 32 bits. Returns
    /// OK, READ_ONLY for a register that may not be written, NOT_PERMITTED when the transport
    /// cannot write (perf), BAD_ARGUMENT for an unknown id.
    pub extern "wprobe" fn write_reg(reg: i32, value: i64) i32;

    /// Copy `len` bytes of the traced process at `addr` to guest memory at `dst_ptr`. Returns `len`
    /// when every byte was read, otherwise the number k < len of bytes readable from `addr` (the
    /// first unreadable byte is `addr + k`; bytes after k are unspecified). Bytes under the
    /// runtime's own breakpoints read as the original bytes. `len` above MAX_MEM_ACCESS_BYTES
    /// traps.
    pub extern "wprobe" fn read_mem(addr: i64, dst_ptr: i32, len: i32) i32;

    /// Copy the NUL-terminated string at `addr` to `dst_ptr`, examining at most `max` bytes.
    /// Returns n >= 0, the number of bytes copied before a NUL or `max` (the NUL is not copied), or
    /// -(i + 1) when byte i (i < max, before any NUL) could not be read.
    pub extern "wprobe" fn read_str(addr: i64, dst_ptr: i32, max: i32) i32;

    /// Write `len` bytes from guest memory at `src_ptr` to the traced process at `addr`, all or
    /// nothing. Returns OK, FAULT when a byte is unmapped or not writable by the process,
    /// NOT_PERMITTED when the transport cannot write (perf).
    pub extern "wprobe" fn write_mem(addr: i64, src_ptr: i32, len: i32) i32;

    /// Whether one byte at `addr` is accessible to the traced process per its mappings: `access` 1
    /// = readable, 3 = readable and writable. Returns OK or FAULT. Never reads or writes the byte.
    pub extern "wprobe" fn check_access(addr: i64, access: i32) i32;

    /// Thread id of the thread that hit the probe.
    pub extern "wprobe" fn current_tid() i64;

    /// Process id (thread-group id) of the thread that hit the probe.
    pub extern "wprobe" fn current_pid() i64;

    /// CPU the hit thread last ran on.
    pub extern "wprobe" fn current_cpu() i64;

    /// The hit thread's thread pointer (`fs_base`, `pthread_self()` for glibc and musl); 0 if
    /// unavailable.
    pub extern "wprobe" fn thread_pointer() i64;

    /// Load bias of the program's module (`name =` / manifest `module`) in the hit process: 0 for
    /// ET_EXEC, the mapping bias for PIE executables and shared libraries.
    pub extern "wprobe" fn load_bias() i64;

    /// Wall-clock time of the hit in nanoseconds since the Unix epoch.
    pub extern "wprobe" fn now_ns() i64;

    /// Execute CPUID on the runtime's CPU with EAX = `leaf`, ECX = `subleaf`, and return EAX, EBX,
    /// ECX or EDX (index 0, 1, 2, 3) zero-extended. Another index traps.
    pub extern "wprobe" fn cpuid(leaf: i32, subleaf: i32, index: i32) i64;

    /// Current number of global variables shared by all programs of the run (the largest `gvars` of
    /// any program loaded).
    pub extern "wprobe" fn gvar_count() i64;

    /// Value of global variable `index`. An index >= gvar_count() traps: check it first.
    pub extern "wprobe" fn gvar_get(index: i64) i64;

    /// Set global variable `index`. An index >= gvar_count() traps: check it first.
    pub extern "wprobe" fn gvar_set(index: i64, value: i64) void;

    /// Read a virtual I/O port (width 1, 2 or 4 bytes) into 8 bytes at `dst_ptr`, zero-extended.
    /// Returns OK, or NO_DEVICE when the host has no virtual handler for the port (real ports are
    /// never touched).
    pub extern "wprobe" fn io_in(port: i64, width: i32, dst_ptr: i32) i32;

    /// Write the low `width` bytes of `value` to a virtual I/O port. Returns OK or NO_DEVICE.
    pub extern "wprobe" fn io_out(port: i64, width: i32, value: i64) i32;

    /// Emit this hit's log record: the host writes the record header (facility 1, the program's
    /// header fields, `major`, `minor`) followed by `data_len` bytes at `data_ptr`. `items_ptr`
    /// points to `items_count` u32 item descriptors (`record::LogItem`) that say where each logged
    /// item starts, so the output can be decoded exactly. Returns OK, or TOO_LARGE when data_len >
    /// MAX_LOG_DATA_BYTES or items_count > MAX_LOG_ITEMS.
    pub extern "wprobe" fn emit_log(major: i32, minor: i32, data_ptr: i32, data_len: i32, items_ptr: i32, items_count: i32) i32;

    /// Emit this hit's stack-trace record: header with major 0, minor 0, mask 0x0007, then the
    /// stack-trace area (`record::stacktrace`). Returns OK, TOO_LARGE, or BAD_ARGUMENT when the
    /// area does not parse.
    pub extern "wprobe" fn emit_stacktrace(data_ptr: i32, data_len: i32) i32;

    /// Call the host's callk hook (RPN `callk`). Does nothing when no hook is registered.
    pub extern "wprobe" fn callk() void;

    /// Aggregate `value` into entry `key` of map `map` (an index of the manifest's `map` lines)
    /// with `op` (`mapstore::Op`: COUNT, ADD, MIN, MAX, AVG, HIST, LHIST, SET), creating the entry
    /// when absent. `key_len` must be the map's key size. Returns OK; FULL when the entry is new
    /// and the map already holds its maximum number of keys (the update is dropped and counted, and
    /// reported at exit); BAD_ARGUMENT for an unknown map, a wrong key size or an op the map's kind
    /// does not take.
    pub extern "wprobe" fn map_update(map: i32, key_ptr: i32, key_len: i32, op: i32, value: i64) i32;

    /// Set entry `key` of an `assign` map to the `val_len` bytes at `val_ptr` (the map's value
    /// size). Returns OK, FULL (counted, as for map_update) or BAD_ARGUMENT.
    pub extern "wprobe" fn map_store(map: i32, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32) i32;

    /// Copy the value of entry `key` of map `map` to `dst_ptr` (at most `dst_len` bytes). Returns
    /// the value's size in bytes (integers are 8-byte little-endian; `avg`/`stats` values are count
    /// then total; histograms are their bucket counts), NOT_FOUND when the key is absent,
    /// BAD_ARGUMENT for an unknown map or a wrong key size.
    pub extern "wprobe" fn map_lookup(map: i32, key_ptr: i32, key_len: i32, dst_ptr: i32, dst_len: i32) i32;

    /// Remove entry `key` of map `map`. Returns OK, NOT_FOUND or BAD_ARGUMENT.
    pub extern "wprobe" fn map_delete(map: i32, key_ptr: i32, key_len: i32) i32;

    /// Remove every entry of map `map` (bpftrace `clear`). Returns OK or BAD_ARGUMENT.
    pub extern "wprobe" fn map_clear(map: i32) i32;

    /// Set every value of map `map` to zero, keeping its keys (bpftrace `zero`). Returns OK or
    /// BAD_ARGUMENT.
    pub extern "wprobe" fn map_zero(map: i32) i32;

    /// Emit an output event (`event::EventKind`): PRINTF with `id` a printf entry of the module's
    /// `wprobe.events` section and the data its arguments laid out as the entry says; PRINT_MAP
    /// with `id` a map index and 16 bytes (top, div); PRINT_VALUE with `id` a value entry and the
    /// value's bytes; TIME with `id` a time entry; CAT and SYSTEM with `id` a printf entry giving a
    /// file's path or a shell command (bpftrace `cat`, `system`); EXIT with `id` 0 and an i64 exit
    /// status (bpftrace `exit(code)`; the handler then returns STOP). wprobe formats events when it
    /// writes them. Returns OK, TOO_LARGE (data_len > MAX_EVENT_BYTES or the run's record budget is
    /// spent) or BAD_ARGUMENT (unknown kind).
    pub extern "wprobe" fn emit_event(kind: i32, id: i32, data_ptr: i32, data_len: i32) i32;

    /// A clock at the hit, in nanoseconds: `clock::MONOTONIC` (bpftrace `nsecs`),
    /// `clock::SINCE_START` (time since the run started, bpftrace `elapsed`), `clock::REALTIME`
    /// (since the Unix epoch), `clock::BOOTTIME` (`CLOCK_BOOTTIME`, bpftrace `nsecs(boot)`),
    /// `clock::TAI` (`CLOCK_TAI`, bpftrace `nsecs(tai)` and `nsecs(sw_tai)`). Another id traps.
    pub extern "wprobe" fn clock_ns(clock: i32) i64;

    /// Real user id of the process that hit the probe (-1 if unknown).
    pub extern "wprobe" fn current_uid() i64;

    /// Copy the hit thread's name (`/proc/PID/task/TID/comm`, at most 15 bytes, no NUL) to
    /// `dst_ptr`, at most `len` bytes. Returns the number of bytes copied.
    pub extern "wprobe" fn current_comm(dst_ptr: i32, len: i32) i32;

    /// Process id of the command wprobe launched (bpftrace `cpid`), 0 when it attached to a process
    /// instead.
    pub extern "wprobe" fn child_pid() i64;

    /// In the handler of a return probe (manifest `return yes`): the value register `reg` had at
    /// the entry of the call that is returning. `reg` is one of the six SysV argument registers
    /// rdi, rsi, rdx, rcx, r8, r9 or rsp, by `Reg` id (`regs::ENTRY_REGS`); any other id traps, and
    /// so does a call from the handler of a probe that is not a return probe (every i64 is a
    /// possible register value, so there is no room for a status).
    pub extern "wprobe" fn entry_reg(reg: i32) i64;

    /// In the handler of a return probe: nanoseconds between the entry of the returning call and
    /// its return, both taken by the runtime with a monotonic clock when it caught them (the
    /// tracer's own stops are included). Traps in the handler of a probe that is not a return
    /// probe.
    pub extern "wprobe" fn elapsed_ns() i64;

    /// Iterate map `map` (bpftrace `for ($kv : @m)`, `len(@m)`): copy the key and the value of its
    /// first entry at or after `cursor` (start at 0) to `key_ptr` and `val_ptr` (at most `key_len`
    /// and `val_len` bytes). Returns that entry's position (the next call passes position + 1;
    /// deleting the entry found does not move the others), NOT_FOUND past the last entry,
    /// BAD_ARGUMENT for an unknown map.
    pub extern "wprobe" fn map_entry(map: i32, cursor: i64, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32) i32;

    /// Argument `index` (0-based) of the USDT probe that fired (manifest `usdt_args`, from the
    /// site's `.note.stapsdt` spec), sign- or zero-extended from its size as the spec says. An
    /// argument whose register or memory cannot be read is 0. An index the site does not have
    /// traps, and so does a call from the handler of a probe that is not a USDT site.
    pub extern "wprobe" fn usdt_arg(index: i32) i64;

    /// Real group id of the thread that hit the probe (-1 if unknown); wprobe's own in a `begin`,
    /// `end` or `interval` probe.
    pub extern "wprobe" fn current_gid() i64;

    /// NUMA node of the CPU the hit thread last ran on (`current_cpu`); 0 on a machine with one
    /// node.
    pub extern "wprobe" fn current_numa_node() i64;
};

// ---------------------------------------------------------------------------
// Helpers over the raw imports (no allocator, no std).

/// The address of `p` in this module's memory, as host imports take pointers.
pub inline fn ptr(p: anytype) i32 {
    return @intCast(@intFromPtr(p));
}

/// A log item descriptor: the item starts at `offset` in the data, of `kind`
/// (an `ItemKind` constant).
pub inline fn item(offset: u32, kind: u32) u32 {
    return offset | (kind << 16);
}

/// The low 64 bits of register `id` (a `Reg` constant) of the hit thread.
pub inline fn readReg(id: i32) u64 {
    return @bitCast(raw.read_reg(id, 0));
}

/// Copies memory of the traced process at `address` into `buf`; returns the
/// number of leading bytes that could be read (`buf.len` when all were).
pub inline fn readMem(address: u64, buf: []u8) usize {
    const n = raw.read_mem(@bitCast(address), ptr(buf.ptr), @intCast(buf.len));
    return @intCast(@max(n, 0));
}

/// The NUL-terminated string at `address`, copied into `buf` (at most
/// `buf.len` bytes); null when a byte before its end could not be read.
pub inline fn readStr(address: u64, buf: []u8) ?[]u8 {
    const n = raw.read_str(@bitCast(address), ptr(buf.ptr), @intCast(buf.len));
    if (n < 0) return null;
    return buf[0..@intCast(n)];
}

/// Emits a log record of `data` described by `items`; returns a `Status`.
pub inline fn emitLog(major: i32, minor: i32, data: []const u8, items: []const u32) i32 {
    return raw.emit_log(major, minor, ptr(data.ptr), @intCast(data.len), ptr(items.ptr), @intCast(items.len));
}

/// Global variable `index` of the run, or null beyond `gvar_count()`.
pub inline fn gvarGet(index: u64) ?u64 {
    if (index >= @as(u64, @bitCast(raw.gvar_count()))) return null;
    return @bitCast(raw.gvar_get(@bitCast(index)));
}

/// Sets global variable `index`; false (and nothing set) beyond `gvar_count()`.
pub inline fn gvarSet(index: u64, value: u64) bool {
    if (index >= @as(u64, @bitCast(raw.gvar_count()))) return false;
    raw.gvar_set(@bitCast(index), @bitCast(value));
    return true;
}

/// In a return probe's handler: argument `n` (0 = rdi ... 5 = r9) of the
/// returning call as it was at its entry. Another `n` traps.
pub inline fn entryArg(n: u32) u64 {
    const id: i32 = switch (n) {
        0 => Reg.RDI,
        1 => Reg.RSI,
        2 => Reg.RDX,
        3 => Reg.RCX,
        4 => Reg.R8,
        5 => Reg.R9,
        else => unreachable,
    };
    return @bitCast(raw.entry_reg(id));
}

/// In a return probe's handler: rsp at the entry of the returning call.
pub inline fn entryRsp() u64 {
    return @bitCast(raw.entry_reg(Reg.RSP));
}

/// In a return probe's handler: nanoseconds between the call's entry and return.
pub inline fn elapsed() u64 {
    return @bitCast(raw.elapsed_ns());
}

/// Declares the module's probe points: the manifest lines after its `abi`
/// line (docs/hostabi.md, "Manifest"), best as a multi-line string:
///
///     comptime {
///         wprobe.manifest(
///             \\module probe_target
///             \\probe on_call
///             \\  location offset target_fn
///         );
///     }
///
/// Zig cannot emit a custom section: this exports the text as the string
/// `wprobe_manifest`, and `wprobe compile --manifest-from-export M.wasm -o M.wasm`
/// moves it into the `wprobe.manifest` section after linking.
pub fn manifest(comptime lines: []const u8) void {
    const S = struct {
        const text = MANIFEST_HEAD ++ lines ++ "\n";
        const bytes: [text.len:0]u8 = text.*;
    };
    @export(&S.bytes, .{ .name = MANIFEST_EXPORT });
}
