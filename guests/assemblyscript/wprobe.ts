// wprobe.ts - write wprobe probe handlers in AssemblyScript (no env imports).
//
// GENERATED from the hostabi crate (hostabi::ascsdk::render). Do not edit:
// run `BLESS=1 cargo test -p hostabi --test langsdk` after changing hostabi.
//
// Build with guests/assemblyscript/asconfig.json: the stub runtime, `abort` mapped to
// `wprobeAbort` below, and the transform wprobe-transform.mjs, which writes the entry
// file's `WPROBE_MANIFEST` constant into the `wprobe.manifest` section (after
// MANIFEST_HEAD) and runs AssemblyScript's start function at the first hit instead
// of at instantiation (wprobe refuses start functions).

/** Host ABI version of this file. */
export const ABI_VERSION: i32 = 5;
/** Custom section carrying the manifest. */
export const MANIFEST_SECTION = "wprobe.manifest";
/** The manifest's first lines (format and ABI version), put before WPROBE_MANIFEST by the transform. */
export const MANIFEST_HEAD = "wprobe-manifest 1\nabi 5\n";

/** Status codes returned by host imports. */
export namespace status {
  export const OK: i32 = 0;
  export const FAULT: i32 = -1;
  export const READ_ONLY: i32 = -2;
  export const NOT_PERMITTED: i32 = -3;
  export const BAD_ARGUMENT: i32 = -4;
  export const TOO_LARGE: i32 = -5;
  export const NO_DEVICE: i32 = -6;
  export const NOT_FOUND: i32 = -7;
  export const FULL: i32 = -8;
}

/** Outcomes: the value a handler returns. */
export namespace outcome {
  export const EXIT: i32 = 0;
  export const ABORT: i32 = 1;
  export const REMOVE: i32 = 2;
  export const DEBUGGER_HANDOFF: i32 = 3;
  export const CRASH_DUMP: i32 = 4;
  export const CORE_DUMP: i32 = 5;
  export const UNCAUGHT: i32 = 6;
  export const BUDGET_EXCEEDED: i32 = 7;
  export const STOP: i32 = 8;
}

/** Register ids of `read_reg` / `write_reg` (x86-64). */
export namespace reg {
  /** `cs`: 16 bits */
  export const CS: i32 = 0x000;
  /** `ds`: 16 bits */
  export const DS: i32 = 0x001;
  /** `es`: 16 bits */
  export const ES: i32 = 0x002;
  /** `fs`: 16 bits */
  export const FS: i32 = 0x003;
  /** `gs`: 16 bits */
  export const GS: i32 = 0x004;
  /** `ss`: 16 bits */
  export const SS: i32 = 0x005;
  /** `rax`: 64 bits, writable */
  export const RAX: i32 = 0x006;
  /** `rbx`: 64 bits, writable */
  export const RBX: i32 = 0x007;
  /** `rcx`: 64 bits, writable */
  export const RCX: i32 = 0x008;
  /** `rdx`: 64 bits, writable */
  export const RDX: i32 = 0x009;
  /** `rdi`: 64 bits, writable */
  export const RDI: i32 = 0x00a;
  /** `rsi`: 64 bits, writable */
  export const RSI: i32 = 0x00b;
  /** `rflags`: 64 bits */
  export const RFLAGS: i32 = 0x00c;
  /** `rip`: 64 bits */
  export const RIP: i32 = 0x00d;
  /** `rsp`: 64 bits */
  export const RSP: i32 = 0x00e;
  /** `rbp`: 64 bits, writable */
  export const RBP: i32 = 0x00f;
  /** `r8`: 64 bits, writable */
  export const R8: i32 = 0x010;
  /** `r9`: 64 bits, writable */
  export const R9: i32 = 0x011;
  /** `r10`: 64 bits, writable */
  export const R10: i32 = 0x012;
  /** `r11`: 64 bits, writable */
  export const R11: i32 = 0x013;
  /** `r12`: 64 bits, writable */
  export const R12: i32 = 0x014;
  /** `r13`: 64 bits, writable */
  export const R13: i32 = 0x015;
  /** `r14`: 64 bits, writable */
  export const R14: i32 = 0x016;
  /** `r15`: 64 bits, writable */
  export const R15: i32 = 0x017;
  /** `orig_rax`: 64 bits */
  export const ORIG_RAX: i32 = 0x018;
  /** `fs_base`: 64 bits */
  export const FS_BASE: i32 = 0x019;
  /** `gs_base`: 64 bits */
  export const GS_BASE: i32 = 0x01a;
  /** `dr0`: 64 bits */
  export const DR0: i32 = 0x02c;
  /** `dr1`: 64 bits */
  export const DR1: i32 = 0x02d;
  /** `dr2`: 64 bits */
  export const DR2: i32 = 0x02e;
  /** `dr3`: 64 bits */
  export const DR3: i32 = 0x02f;
  /** `dr6`: 64 bits */
  export const DR6: i32 = 0x032;
  /** `dr7`: 64 bits */
  export const DR7: i32 = 0x033;
  /** `cpuid`: 0 bits */
  export const CPUID: i32 = 0x03c;
  /** `fr0`: 80 bits */
  export const FR0: i32 = 0x03e;
  /** `fr1`: 80 bits */
  export const FR1: i32 = 0x03f;
  /** `fr2`: 80 bits */
  export const FR2: i32 = 0x040;
  /** `fr3`: 80 bits */
  export const FR3: i32 = 0x041;
  /** `fr4`: 80 bits */
  export const FR4: i32 = 0x042;
  /** `fr5`: 80 bits */
  export const FR5: i32 = 0x043;
  /** `fr6`: 80 bits */
  export const FR6: i32 = 0x044;
  /** `fr7`: 80 bits */
  export const FR7: i32 = 0x045;
  /** `fcw`: 16 bits */
  export const FCW: i32 = 0x046;
  /** `fsw`: 16 bits */
  export const FSW: i32 = 0x047;
  /** `ftw`: 8 bits */
  export const FTW: i32 = 0x048;
  /** `fip`: 64 bits */
  export const FIP: i32 = 0x049;
  /** `fdp`: 64 bits */
  export const FDP: i32 = 0x04b;
  /** `xmm0`: 128 bits */
  export const XMM0: i32 = 0x04d;
  /** `xmm1`: 128 bits */
  export const XMM1: i32 = 0x04e;
  /** `xmm2`: 128 bits */
  export const XMM2: i32 = 0x04f;
  /** `xmm3`: 128 bits */
  export const XMM3: i32 = 0x050;
  /** `xmm4`: 128 bits */
  export const XMM4: i32 = 0x051;
  /** `xmm5`: 128 bits */
  export const XMM5: i32 = 0x052;
  /** `xmm6`: 128 bits */
  export const XMM6: i32 = 0x053;
  /** `xmm7`: 128 bits */
  export const XMM7: i32 = 0x054;
  /** `mxcsr`: 32 bits */
  export const MXCSR: i32 = 0x055;
  /** `fop`: 16 bits */
  export const FOP: i32 = 0x056;
  /** `xmm8`: 128 bits */
  export const XMM8: i32 = 0x058;
  /** `xmm9`: 128 bits */
  export const XMM9: i32 = 0x059;
  /** `xmm10`: 128 bits */
  export const XMM10: i32 = 0x05a;
  /** `xmm11`: 128 bits */
  export const XMM11: i32 = 0x05b;
  /** `xmm12`: 128 bits */
  export const XMM12: i32 = 0x05c;
  /** `xmm13`: 128 bits */
  export const XMM13: i32 = 0x05d;
  /** `xmm14`: 128 bits */
  export const XMM14: i32 = 0x05e;
  /** `xmm15`: 128 bits */
  export const XMM15: i32 = 0x05f;
  /** `eax`: 32 bits, writable */
  export const EAX: i32 = 0x106;
  /** `ebx`: 32 bits, writable */
  export const EBX: i32 = 0x107;
  /** `ecx`: 32 bits, writable */
  export const ECX: i32 = 0x108;
  /** `edx`: 32 bits, writable */
  export const EDX: i32 = 0x109;
  /** `edi`: 32 bits, writable */
  export const EDI: i32 = 0x10a;
  /** `esi`: 32 bits, writable */
  export const ESI: i32 = 0x10b;
  /** `eflags`: 32 bits */
  export const EFLAGS: i32 = 0x10c;
  /** `eip`: 32 bits */
  export const EIP: i32 = 0x10d;
  /** `esp`: 32 bits */
  export const ESP: i32 = 0x10e;
  /** `ebp`: 32 bits, writable */
  export const EBP: i32 = 0x10f;
  /** `r8d`: 32 bits, writable */
  export const R8D: i32 = 0x110;
  /** `r9d`: 32 bits, writable */
  export const R9D: i32 = 0x111;
  /** `r10d`: 32 bits, writable */
  export const R10D: i32 = 0x112;
  /** `r11d`: 32 bits, writable */
  export const R11D: i32 = 0x113;
  /** `r12d`: 32 bits, writable */
  export const R12D: i32 = 0x114;
  /** `r13d`: 32 bits, writable */
  export const R13D: i32 = 0x115;
  /** `r14d`: 32 bits, writable */
  export const R14D: i32 = 0x116;
  /** `r15d`: 32 bits, writable */
  export const R15D: i32 = 0x117;
}

/** Limits of the host ABI. */
export namespace limit {
  /** Largest length of one `read_mem`, `read_str` or `write_mem`. */
  export const MAX_MEM_ACCESS_BYTES: u32 = 1048576;
  /** Largest data area of one log record. */
  export const MAX_LOG_DATA_BYTES: u32 = 65535;
  /** Most item descriptors of one log record. */
  export const MAX_LOG_ITEMS: u32 = 65535;
  /** Largest stack-trace area. */
  export const MAX_STACKTRACE_BYTES: u32 = 65535;
  /** Live calls of a return probe tracked per process without `maxactive`. */
  export const DEFAULT_MAXACTIVE: u32 = 64;
  /** Largest `maxactive` of a return probe. */
  export const MAX_MAXACTIVE: u32 = 4096;
  /** Keys of a map without `maxkeys=`. */
  export const MAP_DEFAULT_MAX_KEYS: u32 = 4096;
  /** Largest data of one `emit_event`. */
  export const MAX_EVENT_BYTES: u32 = 65535;
}

/** Kinds of log item descriptors (bits 16-23 of a descriptor; see `item`). */
export namespace item_kind {
  export const RAW_WORDS: u32 = 0x080;
  export const RAW_BYTES: u32 = 0x081;
  export const TOKENIZED: u32 = 0x082;
}

/** Tokens of TOKENIZED items: token byte, u16 count, payload. */
export namespace token {
  export const MEMORY: i32 = 0x000;
  export const STRING: i32 = 0x001;
  export const LOCAL_VARS: i32 = 0x005;
  export const GLOBAL_VARS: i32 = 0x006;
  export const WORDS: i32 = 0x007;
  export const FAULT: i32 = 0x0ff;
}

/** Kinds of the manifest's `map` lines. */
export namespace map_kind {
  export const COUNT: i32 = 1;
  export const SUM: i32 = 2;
  export const MIN: i32 = 3;
  export const MAX: i32 = 4;
  export const AVG: i32 = 5;
  export const STATS: i32 = 6;
  export const HIST: i32 = 7;
  export const LHIST: i32 = 8;
  export const ASSIGN: i32 = 9;
}

/** Ops of `map_update`. */
export namespace map_op {
  export const COUNT: i32 = 1;
  export const ADD: i32 = 2;
  export const MIN: i32 = 3;
  export const MAX: i32 = 4;
  export const AVG: i32 = 5;
  export const HIST: i32 = 6;
  export const LHIST: i32 = 7;
  export const SET: i32 = 8;
}

/** Kinds of `emit_event` events (formats in the `wprobe.events` section). */
export namespace event_kind {
  export const PRINTF: i32 = 1;
  export const PRINT_MAP: i32 = 2;
  export const PRINT_VALUE: i32 = 3;
  export const TIME: i32 = 4;
  export const CAT: i32 = 5;
  export const SYSTEM: i32 = 6;
  export const EXIT: i32 = 7;
}

/** Clock ids of `clock_ns`. */
export namespace clock {
  export const MONOTONIC: i32 = 0;
  export const SINCE_START: i32 = 1;
  export const REALTIME: i32 = 2;
  export const BOOTTIME: i32 = 3;
  export const TAI: i32 = 4;
}

/**
 * The host imports (module `wprobe`), exactly as `hostabi` declares them. Pointers
 * are addresses in this module's memory (`changetype<usize>(x)`, `memory.data(n)`);
 * the host checks every range and traps the handler on a bad one.
 */
export namespace raw {
  // Value of register `reg` (a `Reg` id) of the hit thread, as the handler sees it (earlier
  // `write_reg` calls included). `part` 0 is the low 64 bits; part 1 the high bits of an 80- or
  // 128-bit register. A 32-bit alias reads the low 32 bits zero-extended. An unknown id or part
  // traps; a register the transport cannot provide reads 0.
  // @ts-ignore: decorator
  @external("wprobe", "read_reg")
  export declare function read_reg(reg: i32, part: i32): i64;

  // Set register `reg` of the hit thread; applied when the handler returns, whatever its outcome. A
  // 32-bit alias sets the 64-bit register to the zero-extended low 32 bits. Returns OK, READ_ONLY
  // for a register that may not be written, NOT_PERMITTED when the transport cannot write (perf),
  // BAD_ARGUMENT for an unknown id.
  // @ts-ignore: decorator
  @external("wprobe", "write_reg")
  export declare function write_reg(reg: i32, value: i64): i32;

  // Copy `len` bytes of the traced process at `addr` to guest memory at `dst_ptr`. Returns `len`
  // when every byte was read, otherwise the number k < len of bytes readable from `addr` (the first
  // unreadable byte is `addr + k`; bytes after k are unspecified). Bytes under the runtime's own
  // breakpoints read as the original bytes. `len` above MAX_MEM_ACCESS_BYTES traps.
  // @ts-ignore: decorator
  @external("wprobe", "read_mem")
  export declare function read_mem(addr: i64, dst_ptr: i32, len: i32): i32;

  // Copy the NUL-terminated string at `addr` to `dst_ptr`, examining at most `max` bytes. Returns n
  // >= 0, the number of bytes copied before a NUL or `max` (the NUL is not copied), or -(i + 1)
  // when byte i (i < max, before any NUL) could not be read.
  // @ts-ignore: decorator
  @external("wprobe", "read_str")
  export declare function read_str(addr: i64, dst_ptr: i32, max: i32): i32;

  // Write `len` bytes from guest memory at `src_ptr` to the traced process at `addr`, all or
  // nothing. Returns OK, FAULT when a byte is unmapped or not writable by the process,
  // NOT_PERMITTED when the transport cannot write (perf).
  // @ts-ignore: decorator
  @external("wprobe", "write_mem")
  export declare function write_mem(addr: i64, src_ptr: i32, len: i32): i32;

  // Whether one byte at `addr` is accessible to the traced process per its mappings: `access` 1 =
  // readable, 3 = readable and writable. Returns OK or FAULT. Never reads or writes the byte.
  // @ts-ignore: decorator
  @external("wprobe", "check_access")
  export declare function check_access(addr: i64, access: i32): i32;

  // Thread id of the thread that hit the probe.
  // @ts-ignore: decorator
  @external("wprobe", "current_tid")
  export declare function current_tid(): i64;

  // Process id (thread-group id) of the thread that hit the probe.
  // @ts-ignore: decorator
  @external("wprobe", "current_pid")
  export declare function current_pid(): i64;

  // CPU the hit thread last ran on.
  // @ts-ignore: decorator
  @external("wprobe", "current_cpu")
  export declare function current_cpu(): i64;

  // The hit thread's thread pointer (`fs_base`, `pthread_self()` for glibc and musl); 0 if
  // unavailable.
  // @ts-ignore: decorator
  @external("wprobe", "thread_pointer")
  export declare function thread_pointer(): i64;

  // Load bias of the program's module (`name =` / manifest `module`) in the hit process: 0 for
  // ET_EXEC, the mapping bias for PIE executables and shared libraries.
  // @ts-ignore: decorator
  @external("wprobe", "load_bias")
  export declare function load_bias(): i64;

  // Wall-clock time of the hit in nanoseconds since the Unix epoch.
  // @ts-ignore: decorator
  @external("wprobe", "now_ns")
  export declare function now_ns(): i64;

  // Execute CPUID on the runtime's CPU with EAX = `leaf`, ECX = `subleaf`, and return EAX, EBX, ECX
  // or EDX (index 0, 1, 2, 3) zero-extended. Another index traps.
  // @ts-ignore: decorator
  @external("wprobe", "cpuid")
  export declare function cpuid(leaf: i32, subleaf: i32, index: i32): i64;

  // Current number of global variables shared by all programs of the run (the largest `gvars` of
  // any program loaded).
  // @ts-ignore: decorator
  @external("wprobe", "gvar_count")
  export declare function gvar_count(): i64;

  // Value of global variable `index`. An index >= gvar_count() traps: check it first.
  // @ts-ignore: decorator
  @external("wprobe", "gvar_get")
  export declare function gvar_get(index: i64): i64;

  // Set global variable `index`. An index >= gvar_count() traps: check it first.
  // @ts-ignore: decorator
  @external("wprobe", "gvar_set")
  export declare function gvar_set(index: i64, value: i64): void;

  // Read a virtual I/O port (width 1, 2 or 4 bytes) into 8 bytes at `dst_ptr`, zero-extended.
  // Returns OK, or NO_DEVICE when the host has no virtual handler for the port (real ports are
  // never touched).
  // @ts-ignore: decorator
  @external("wprobe", "io_in")
  export declare function io_in(port: i64, width: i32, dst_ptr: i32): i32;

  // Write the low `width` bytes of `value` to a virtual I/O port. Returns OK or NO_DEVICE.
  // @ts-ignore: decorator
  @external("wprobe", "io_out")
  export declare function io_out(port: i64, width: i32, value: i64): i32;

  // Emit this hit's log record: the host writes the record header (facility 1, the program's header
  // fields, `major`, `minor`) followed by `data_len` bytes at `data_ptr`. `items_ptr` points to
  // `items_count` u32 item descriptors (`record::LogItem`) that say where each logged item starts,
  // so the output can be decoded exactly. Returns OK, or TOO_LARGE when data_len >
  // MAX_LOG_DATA_BYTES or items_count > MAX_LOG_ITEMS.
  // @ts-ignore: decorator
  @external("wprobe", "emit_log")
  export declare function emit_log(major: i32, minor: i32, data_ptr: i32, data_len: i32, items_ptr: i32, items_count: i32): i32;

  // Emit this hit's stack-trace record: header with major 0, minor 0, mask 0x0007, then the
  // stack-trace area (`record::stacktrace`). Returns OK, TOO_LARGE, or BAD_ARGUMENT when the area
  // does not parse.
  // @ts-ignore: decorator
  @external("wprobe", "emit_stacktrace")
  export declare function emit_stacktrace(data_ptr: i32, data_len: i32): i32;

  // Call the host's callk hook (RPN `callk`). Does nothing when no hook is registered.
  // @ts-ignore: decorator
  @external("wprobe", "callk")
  export declare function callk(): void;

  // Aggregate `value` into entry `key` of map `map` (an index of the manifest's `map` lines) with
  // `op` (`mapstore::Op`: COUNT, ADD, MIN, MAX, AVG, HIST, LHIST, SET), creating the entry when
  // absent. `key_len` must be the map's key size. Returns OK; FULL when the entry is new and the
  // map already holds its maximum number of keys (the update is dropped and counted, and reported
  // at exit); BAD_ARGUMENT for an unknown map, a wrong key size or an op the map's kind does not
  // take.
  // @ts-ignore: decorator
  @external("wprobe", "map_update")
  export declare function map_update(map: i32, key_ptr: i32, key_len: i32, op: i32, value: i64): i32;

  // Set entry `key` of an `assign` map to the `val_len` bytes at `val_ptr` (the map's value size).
  // Returns OK, FULL (counted, as for map_update) or BAD_ARGUMENT.
  // @ts-ignore: decorator
  @external("wprobe", "map_store")
  export declare function map_store(map: i32, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32): i32;

  // Copy the value of entry `key` of map `map` to `dst_ptr` (at most `dst_len` bytes). Returns the
  // value's size in bytes (integers are 8-byte little-endian; `avg`/`stats` values are count then
  // total; histograms are their bucket counts), NOT_FOUND when the key is absent, BAD_ARGUMENT for
  // an unknown map or a wrong key size.
  // @ts-ignore: decorator
  @external("wprobe", "map_lookup")
  export declare function map_lookup(map: i32, key_ptr: i32, key_len: i32, dst_ptr: i32, dst_len: i32): i32;

  // Remove entry `key` of map `map`. Returns OK, NOT_FOUND or BAD_ARGUMENT.
  // @ts-ignore: decorator
  @external("wprobe", "map_delete")
  export declare function map_delete(map: i32, key_ptr: i32, key_len: i32): i32;

  // Remove every entry of map `map` (bpftrace `clear`). Returns OK or BAD_ARGUMENT.
  // @ts-ignore: decorator
  @external("wprobe", "map_clear")
  export declare function map_clear(map: i32): i32;

  // Set every value of map `map` to zero, keeping its keys (bpftrace `zero`). Returns OK or
  // BAD_ARGUMENT.
  // @ts-ignore: decorator
  @external("wprobe", "map_zero")
  export declare function map_zero(map: i32): i32;

  // Emit an output event (`event::EventKind`): PRINTF with `id` a printf entry of the module's
  // `wprobe.events` section and the data its arguments laid out as the entry says; PRINT_MAP with
  // `id` a map index and 16 bytes (top, div); PRINT_VALUE with `id` a value entry and the value's
  // bytes; TIME with `id` a time entry; CAT and SYSTEM with `id` a printf entry giving a file's
  // path or a shell command (bpftrace `cat`, `system`); EXIT with `id` 0 and an i64 exit status
  // (bpftrace `exit(code)`; the handler then returns STOP). wprobe formats events when it writes
  // them. Returns OK, TOO_LARGE (data_len > MAX_EVENT_BYTES or the run's record budget is spent) or
  // BAD_ARGUMENT (unknown kind).
  // @ts-ignore: decorator
  @external("wprobe", "emit_event")
  export declare function emit_event(kind: i32, id: i32, data_ptr: i32, data_len: i32): i32;

  // A clock at the hit, in nanoseconds: `clock::MONOTONIC` (bpftrace `nsecs`), `clock::SINCE_START`
  // (time since the run started, bpftrace `elapsed`), `clock::REALTIME` (since the Unix epoch),
  // `clock::BOOTTIME` (`CLOCK_BOOTTIME`, bpftrace `nsecs(boot)`), `clock::TAI` (`CLOCK_TAI`,
  // bpftrace `nsecs(tai)` and `nsecs(sw_tai)`). Another id traps.
  // @ts-ignore: decorator
  @external("wprobe", "clock_ns")
  export declare function clock_ns(clock: i32): i64;

  // Real user id of the process that hit the probe (-1 if unknown).
  // @ts-ignore: decorator
  @external("wprobe", "current_uid")
  export declare function current_uid(): i64;

  // Copy the hit thread's name (`/proc/PID/task/TID/comm`, at most 15 bytes, no NUL) to `dst_ptr`,
  // at most `len` bytes. Returns the number of bytes copied.
  // @ts-ignore: decorator
  @external("wprobe", "current_comm")
  export declare function current_comm(dst_ptr: i32, len: i32): i32;

  // Process id of the command wprobe launched (bpftrace `cpid`), 0 when it attached to a process
  // instead.
  // @ts-ignore: decorator
  @external("wprobe", "child_pid")
  export declare function child_pid(): i64;

  // In the handler of a return probe (manifest `return yes`): the value register `reg` had at the
  // entry of the call that is returning. `reg` is one of the six SysV argument registers rdi, rsi,
  // rdx, rcx, r8, r9 or rsp, by `Reg` id (`regs::ENTRY_REGS`); any other id traps, and so does a
  // call from the handler of a probe that is not a return probe (every i64 is a possible register
  // value, so there is no room for a status).
  // @ts-ignore: decorator
  @external("wprobe", "entry_reg")
  export declare function entry_reg(reg: i32): i64;

  // In the handler of a return probe: nanoseconds between the entry of the returning call and its
  // return, both taken by the runtime with a monotonic clock when it caught them (the tracer's own
  // stops are included). Traps in the handler of a probe that is not a return probe.
  // @ts-ignore: decorator
  @external("wprobe", "elapsed_ns")
  export declare function elapsed_ns(): i64;

  // Iterate map `map` (bpftrace `for ($kv : @m)`, `len(@m)`): copy the key and the value of its
  // first entry at or after `cursor` (start at 0) to `key_ptr` and `val_ptr` (at most `key_len` and
  // `val_len` bytes). Returns that entry's position (the next call passes position + 1; deleting
  // the entry found does not move the others), NOT_FOUND past the last entry, BAD_ARGUMENT for an
  // unknown map.
  // @ts-ignore: decorator
  @external("wprobe", "map_entry")
  export declare function map_entry(map: i32, cursor: i64, key_ptr: i32, key_len: i32, val_ptr: i32, val_len: i32): i32;

  // Argument `index` (0-based) of the USDT probe that fired (manifest `usdt_args`, from the site's
  // `.note.stapsdt` spec), sign- or zero-extended from its size as the spec says. An argument whose
  // register or memory cannot be read is 0. An index the site does not have traps, and so does a
  // call from the handler of a probe that is not a USDT site.
  // @ts-ignore: decorator
  @external("wprobe", "usdt_arg")
  export declare function usdt_arg(index: i32): i64;

  // Real group id of the thread that hit the probe (-1 if unknown); wprobe's own in a `begin`,
  // `end` or `interval` probe.
  // @ts-ignore: decorator
  @external("wprobe", "current_gid")
  export declare function current_gid(): i64;

  // NUMA node of the CPU the hit thread last ran on (`current_cpu`); 0 on a machine with one node.
  // @ts-ignore: decorator
  @external("wprobe", "current_numa_node")
  export declare function current_numa_node(): i64;
}

// ---------------------------------------------------------------------------
// Helpers over the raw imports. None allocates: a handler that keeps its
// buffers in `memory.data` (or module-level StaticArrays, allocated once)
// runs no allocator and no GC at its hits.

/** A log item descriptor: the item starts at `offset` in the data, of `kind` (`item_kind`). */
// @ts-ignore: decorator
@inline export function item(offset: u32, kind: u32): u32 {
  return offset | (kind << 16);
}

/** The low 64 bits of register `id` (`reg.RDI`, ...) of the hit thread. */
// @ts-ignore: decorator
@inline export function readReg(id: i32): u64 {
  return <u64>raw.read_reg(id, 0);
}

/** Global variable `index` of the run, or `fallback` beyond `gvar_count()`. */
export function gvarGet(index: u64, fallback: u64 = 0): u64 {
  return index < <u64>raw.gvar_count() ? <u64>raw.gvar_get(<i64>index) : fallback;
}

/** Sets global variable `index`; false (and nothing set) beyond `gvar_count()`. */
export function gvarSet(index: u64, value: u64): bool {
  if (index >= <u64>raw.gvar_count()) return false;
  raw.gvar_set(<i64>index, <i64>value);
  return true;
}

/** In a return probe's handler: argument `n` (0 = rdi ... 5 = r9) of the returning call at its entry. Another `n` traps. */
export function entryArg(n: i32): u64 {
  switch (n) {
    case 0: return <u64>raw.entry_reg(reg.RDI);
    case 1: return <u64>raw.entry_reg(reg.RSI);
    case 2: return <u64>raw.entry_reg(reg.RDX);
    case 3: return <u64>raw.entry_reg(reg.RCX);
    case 4: return <u64>raw.entry_reg(reg.R8);
    case 5: return <u64>raw.entry_reg(reg.R9);
  }
  unreachable();
  return 0;
}

/** In a return probe's handler: rsp at the entry of the returning call. */
// @ts-ignore: decorator
@inline export function entryRsp(): u64 {
  return <u64>raw.entry_reg(reg.RSP);
}

/** In a return probe's handler: nanoseconds between the call's entry and its return. */
// @ts-ignore: decorator
@inline export function elapsed(): u64 {
  return <u64>raw.elapsed_ns();
}

/**
 * The `abort` of this SDK (build with `--use abort=wprobe/wprobeAbort`): an
 * assertion or a runtime error (an index out of range, out of memory) traps
 * the handler run, which wprobe counts; nothing is imported from `env`.
 */
export function wprobeAbort(message: usize, fileName: usize, line: u32, column: u32): void {
  unreachable();
}
