/* wprobe.h - write wprobe probe handlers in C (clang --target=wasm32, no libc).
 *
 * GENERATED from the hostabi crate (hostabi::cheader::render). Do not edit:
 * run `BLESS=1 cargo test -p hostabi --test cheader` after changing hostabi.
 */
#ifndef WPROBE_H
#define WPROBE_H

typedef int wprobe_i32;
typedef long long wprobe_i64;
typedef unsigned int wprobe_u32;
typedef unsigned long long wprobe_u64;

_Static_assert(sizeof(wprobe_i32) == 4 && sizeof(wprobe_i64) == 8, "build with --target=wasm32");

/** Host ABI version of this header. */
#define WPROBE_ABI_VERSION 5
/** Wasm import module of every host import. */
#define WPROBE_IMPORT_MODULE "wprobe"
/** Custom section carrying the manifest. */
#define WPROBE_MANIFEST_SECTION "wprobe.manifest"

/* Status codes returned by host imports. */
#define WPROBE_OK (0)
#define WPROBE_FAULT (-1)
#define WPROBE_READ_ONLY (-2)
#define WPROBE_NOT_PERMITTED (-3)
#define WPROBE_BAD_ARGUMENT (-4)
#define WPROBE_TOO_LARGE (-5)
#define WPROBE_NO_DEVICE (-6)
#define WPROBE_NOT_FOUND (-7)
#define WPROBE_FULL (-8)

/* Outcomes: the value a handler returns. */
#define WPROBE_EXIT 0
#define WPROBE_ABORT 1
#define WPROBE_REMOVE 2
#define WPROBE_DEBUGGER_HANDOFF 3
#define WPROBE_CRASH_DUMP 4
#define WPROBE_CORE_DUMP 5
#define WPROBE_UNCAUGHT 6
#define WPROBE_BUDGET_EXCEEDED 7
#define WPROBE_STOP 8

/* Register ids of wprobe_read_reg / wprobe_write_reg (x86-64). */
#define WPROBE_REG_CS 0x000 /* 16 bits */
#define WPROBE_REG_DS 0x001 /* 16 bits */
#define WPROBE_REG_ES 0x002 /* 16 bits */
#define WPROBE_REG_FS 0x003 /* 16 bits */
#define WPROBE_REG_GS 0x004 /* 16 bits */
#define WPROBE_REG_SS 0x005 /* 16 bits */
#define WPROBE_REG_RAX 0x006 /* 64 bits, writable */
#define WPROBE_REG_RBX 0x007 /* 64 bits, writable */
#define WPROBE_REG_RCX 0x008 /* 64 bits, writable */
#define WPROBE_REG_RDX 0x009 /* 64 bits, writable */
#define WPROBE_REG_RDI 0x00a /* 64 bits, writable */
#define WPROBE_REG_RSI 0x00b /* 64 bits, writable */
#define WPROBE_REG_RFLAGS 0x00c /* 64 bits */
#define WPROBE_REG_RIP 0x00d /* 64 bits */
#define WPROBE_REG_RSP 0x00e /* 64 bits */
#define WPROBE_REG_RBP 0x00f /* 64 bits, writable */
#define WPROBE_REG_R8 0x010 /* 64 bits, writable */
#define WPROBE_REG_R9 0x011 /* 64 bits, writable */
#define WPROBE_REG_R10 0x012 /* 64 bits, writable */
#define WPROBE_REG_R11 0x013 /* 64 bits, writable */
#define WPROBE_REG_R12 0x014 /* 64 bits, writable */
#define WPROBE_REG_R13 0x015 /* 64 bits, writable */
#define WPROBE_REG_R14 0x016 /* 64 bits, writable */
#define WPROBE_REG_R15 0x017 /* 64 bits, writable */
#define WPROBE_REG_ORIG_RAX 0x018 /* 64 bits */
#define WPROBE_REG_FS_BASE 0x019 /* 64 bits */
#define WPROBE_REG_GS_BASE 0x01a /* 64 bits */
#define WPROBE_REG_DR0 0x02c /* 64 bits */
#define WPROBE_REG_DR1 0x02d /* 64 bits */
#define WPROBE_REG_DR2 0x02e /* 64 bits */
#define WPROBE_REG_DR3 0x02f /* 64 bits */
#define WPROBE_REG_DR6 0x032 /* 64 bits */
#define WPROBE_REG_DR7 0x033 /* 64 bits */
#define WPROBE_REG_CPUID 0x03c /* 0 bits */
#define WPROBE_REG_FR0 0x03e /* 80 bits */
#define WPROBE_REG_FR1 0x03f /* 80 bits */
#define WPROBE_REG_FR2 0x040 /* 80 bits */
#define WPROBE_REG_FR3 0x041 /* 80 bits */
#define WPROBE_REG_FR4 0x042 /* 80 bits */
#define WPROBE_REG_FR5 0x043 /* 80 bits */
#define WPROBE_REG_FR6 0x044 /* 80 bits */
#define WPROBE_REG_FR7 0x045 /* 80 bits */
#define WPROBE_REG_FCW 0x046 /* 16 bits */
#define WPROBE_REG_FSW 0x047 /* 16 bits */
#define WPROBE_REG_FTW 0x048 /* 8 bits */
#define WPROBE_REG_FIP 0x049 /* 64 bits */
#define WPROBE_REG_FDP 0x04b /* 64 bits */
#define WPROBE_REG_XMM0 0x04d /* 128 bits */
#define WPROBE_REG_XMM1 0x04e /* 128 bits */
#define WPROBE_REG_XMM2 0x04f /* 128 bits */
#define WPROBE_REG_XMM3 0x050 /* 128 bits */
#define WPROBE_REG_XMM4 0x051 /* 128 bits */
#define WPROBE_REG_XMM5 0x052 /* 128 bits */
#define WPROBE_REG_XMM6 0x053 /* 128 bits */
#define WPROBE_REG_XMM7 0x054 /* 128 bits */
#define WPROBE_REG_MXCSR 0x055 /* 32 bits */
#define WPROBE_REG_FOP 0x056 /* 16 bits */
#define WPROBE_REG_XMM8 0x058 /* 128 bits */
#define WPROBE_REG_XMM9 0x059 /* 128 bits */
#define WPROBE_REG_XMM10 0x05a /* 128 bits */
#define WPROBE_REG_XMM11 0x05b /* 128 bits */
#define WPROBE_REG_XMM12 0x05c /* 128 bits */
#define WPROBE_REG_XMM13 0x05d /* 128 bits */
#define WPROBE_REG_XMM14 0x05e /* 128 bits */
#define WPROBE_REG_XMM15 0x05f /* 128 bits */
#define WPROBE_REG_EAX 0x106 /* 32 bits, writable */
#define WPROBE_REG_EBX 0x107 /* 32 bits, writable */
#define WPROBE_REG_ECX 0x108 /* 32 bits, writable */
#define WPROBE_REG_EDX 0x109 /* 32 bits, writable */
#define WPROBE_REG_EDI 0x10a /* 32 bits, writable */
#define WPROBE_REG_ESI 0x10b /* 32 bits, writable */
#define WPROBE_REG_EFLAGS 0x10c /* 32 bits */
#define WPROBE_REG_EIP 0x10d /* 32 bits */
#define WPROBE_REG_ESP 0x10e /* 32 bits */
#define WPROBE_REG_EBP 0x10f /* 32 bits, writable */
#define WPROBE_REG_R8D 0x110 /* 32 bits, writable */
#define WPROBE_REG_R9D 0x111 /* 32 bits, writable */
#define WPROBE_REG_R10D 0x112 /* 32 bits, writable */
#define WPROBE_REG_R11D 0x113 /* 32 bits, writable */
#define WPROBE_REG_R12D 0x114 /* 32 bits, writable */
#define WPROBE_REG_R13D 0x115 /* 32 bits, writable */
#define WPROBE_REG_R14D 0x116 /* 32 bits, writable */
#define WPROBE_REG_R15D 0x117 /* 32 bits, writable */

/* Limits. */
#define WPROBE_MAX_MEM_ACCESS_BYTES 1048576
#define WPROBE_MAX_LOG_DATA_BYTES 65535
#define WPROBE_MAX_LOG_ITEMS 65535
#define WPROBE_MAX_STACKTRACE_BYTES 65535
#define WPROBE_DEFAULT_MAXACTIVE 64
#define WPROBE_MAX_MAXACTIVE 4096

/* Log items: a descriptor is WPROBE_ITEM(offset in the data, kind). */
#define WPROBE_ITEM_RAW_WORDS 0x80u
#define WPROBE_ITEM_RAW_BYTES 0x81u
#define WPROBE_ITEM_TOKENIZED 0x82u
#define WPROBE_ITEM(offset, kind) ((wprobe_u32)(offset) | ((wprobe_u32)(kind) << 16))
/* Tokens of WPROBE_ITEM_TOKENIZED items: token byte, u16 count, payload. */
#define WPROBE_TOKEN_MEMORY 0x00
#define WPROBE_TOKEN_STRING 0x01
#define WPROBE_TOKEN_LOCAL_VARS 0x05
#define WPROBE_TOKEN_GLOBAL_VARS 0x06
#define WPROBE_TOKEN_WORDS 0x07
#define WPROBE_TOKEN_FAULT 0xff

/* Map service: kinds of `map` manifest lines, ops of wprobe_map_update. */
#define WPROBE_MAP_KIND_COUNT 1
#define WPROBE_MAP_KIND_SUM 2
#define WPROBE_MAP_KIND_MIN 3
#define WPROBE_MAP_KIND_MAX 4
#define WPROBE_MAP_KIND_AVG 5
#define WPROBE_MAP_KIND_STATS 6
#define WPROBE_MAP_KIND_HIST 7
#define WPROBE_MAP_KIND_LHIST 8
#define WPROBE_MAP_KIND_ASSIGN 9
#define WPROBE_MAP_OP_COUNT 1
#define WPROBE_MAP_OP_ADD 2
#define WPROBE_MAP_OP_MIN 3
#define WPROBE_MAP_OP_MAX 4
#define WPROBE_MAP_OP_AVG 5
#define WPROBE_MAP_OP_HIST 6
#define WPROBE_MAP_OP_LHIST 7
#define WPROBE_MAP_OP_SET 8
#define WPROBE_MAP_DEFAULT_MAX_KEYS 4096
/* Events of wprobe_emit_event (formats in the `wprobe.events` section). */
#define WPROBE_EVENT_PRINTF 1
#define WPROBE_EVENT_PRINT_MAP 2
#define WPROBE_EVENT_PRINT_VALUE 3
#define WPROBE_EVENT_TIME 4
#define WPROBE_EVENT_CAT 5
#define WPROBE_EVENT_SYSTEM 6
#define WPROBE_EVENT_EXIT 7
#define WPROBE_MAX_EVENT_BYTES 65535
/* Clocks of wprobe_clock_ns. */
#define WPROBE_CLOCK_MONOTONIC 0
#define WPROBE_CLOCK_SINCE_START 1
#define WPROBE_CLOCK_REALTIME 2
#define WPROBE_CLOCK_BOOTTIME 3
#define WPROBE_CLOCK_TAI 4

/* Host imports. Pointers are addresses in this module's memory; the host
 * checks every (pointer, length) and traps the handler on a bad one. */
/**
 * Value of register `reg` (a `Reg` id) of the hit thread, as the handler sees
 * it (earlier `write_reg` calls included). `part` 0 is the low 64 bits; part
 * 1 the high bits of an 80- or 128-bit register. A 32-bit alias reads the low
 * 32 bits zero-extended. An unknown id or part traps; a register the
 * transport cannot provide reads 0.
 */
__attribute__((import_module("wprobe"), import_name("read_reg")))
wprobe_i64 wprobe_read_reg(wprobe_i32 reg, wprobe_i32 part);

/**
 * Set register `reg` of the hit thread; applied when the handler returns,
 * whatever its outcome. A 32-bit alias sets the 64-bit register to the
 * zero-extended low 32 bits. Returns OK, READ_ONLY for a register that may
 * not be written, NOT_PERMITTED when the transport cannot write (perf),
 * BAD_ARGUMENT for an unknown id.
 */
__attribute__((import_module("wprobe"), import_name("write_reg")))
wprobe_i32 wprobe_write_reg(wprobe_i32 reg, wprobe_i64 value);

/**
 * Copy `len` bytes of the traced process at `addr` to guest memory at
 * `dst_ptr`. Returns `len` when every byte was read, otherwise the number k <
 * len of bytes readable from `addr` (the first unreadable byte is `addr + k`;
 * bytes after k are unspecified). Bytes under the runtime's own breakpoints
 * read as the original bytes. `len` above MAX_MEM_ACCESS_BYTES traps.
 */
__attribute__((import_module("wprobe"), import_name("read_mem")))
wprobe_i32 wprobe_read_mem(wprobe_i64 addr, wprobe_i32 dst_ptr, wprobe_i32 len);

/**
 * Copy the NUL-terminated string at `addr` to `dst_ptr`, examining at most
 * `max` bytes. Returns n >= 0, the number of bytes copied before a NUL or
 * `max` (the NUL is not copied), or -(i + 1) when byte i (i < max, before any
 * NUL) could not be read.
 */
__attribute__((import_module("wprobe"), import_name("read_str")))
wprobe_i32 wprobe_read_str(wprobe_i64 addr, wprobe_i32 dst_ptr, wprobe_i32 max);

/**
 * Write `len` bytes from guest memory at `src_ptr` to the traced process at
 * `addr`, all or nothing. Returns OK, FAULT when a byte is unmapped or not
 * writable by the process, NOT_PERMITTED when the transport cannot write
 * (perf).
 */
__attribute__((import_module("wprobe"), import_name("write_mem")))
wprobe_i32 wprobe_write_mem(wprobe_i64 addr, wprobe_i32 src_ptr, wprobe_i32 len);

/**
 * Whether one byte at `addr` is accessible to the traced process per its
 * mappings: `access` 1 = readable, 3 = readable and writable. Returns OK or
 * FAULT. Never reads or writes the byte.
 */
__attribute__((import_module("wprobe"), import_name("check_access")))
wprobe_i32 wprobe_check_access(wprobe_i64 addr, wprobe_i32 access);

/**
 * Thread id of the thread that hit the probe.
 */
__attribute__((import_module("wprobe"), import_name("current_tid")))
wprobe_i64 wprobe_current_tid(void);

/**
 * Process id (thread-group id) of the thread that hit the probe.
 */
__attribute__((import_module("wprobe"), import_name("current_pid")))
wprobe_i64 wprobe_current_pid(void);

/**
 * CPU the hit thread last ran on.
 */
__attribute__((import_module("wprobe"), import_name("current_cpu")))
wprobe_i64 wprobe_current_cpu(void);

/**
 * The hit thread's thread pointer (`fs_base`, `pthread_self()` for glibc and
 * musl); 0 if unavailable.
 */
__attribute__((import_module("wprobe"), import_name("thread_pointer")))
wprobe_i64 wprobe_thread_pointer(void);

/**
 * Load bias of the program's module (`name =` / manifest `module`) in the hit
 * process: 0 for ET_EXEC, the mapping bias for PIE executables and shared
 * libraries.
 */
__attribute__((import_module("wprobe"), import_name("load_bias")))
wprobe_i64 wprobe_load_bias(void);

/**
 * Wall-clock time of the hit in nanoseconds since the Unix epoch.
 */
__attribute__((import_module("wprobe"), import_name("now_ns")))
wprobe_i64 wprobe_now_ns(void);

/**
 * Execute CPUID on the runtime's CPU with EAX = `leaf`, ECX = `subleaf`, and
 * return EAX, EBX, ECX or EDX (index 0, 1, 2, 3) zero-extended. Another index
 * traps.
 */
__attribute__((import_module("wprobe"), import_name("cpuid")))
wprobe_i64 wprobe_cpuid(wprobe_i32 leaf, wprobe_i32 subleaf, wprobe_i32 index);

/**
 * Current number of global variables shared by all programs of the run (the
 * largest `gvars` of any program loaded).
 */
__attribute__((import_module("wprobe"), import_name("gvar_count")))
wprobe_i64 wprobe_gvar_count(void);

/**
 * Value of global variable `index`. An index >= gvar_count() traps: check it
 * first.
 */
__attribute__((import_module("wprobe"), import_name("gvar_get")))
wprobe_i64 wprobe_gvar_get(wprobe_i64 index);

/**
 * Set global variable `index`. An index >= gvar_count() traps: check it
 * first.
 */
__attribute__((import_module("wprobe"), import_name("gvar_set")))
void wprobe_gvar_set(wprobe_i64 index, wprobe_i64 value);

/**
 * Read a virtual I/O port (width 1, 2 or 4 bytes) into 8 bytes at `dst_ptr`,
 * zero-extended. Returns OK, or NO_DEVICE when the host has no virtual
 * handler for the port (real ports are never touched).
 */
__attribute__((import_module("wprobe"), import_name("io_in")))
wprobe_i32 wprobe_io_in(wprobe_i64 port, wprobe_i32 width, wprobe_i32 dst_ptr);

/**
 * Write the low `width` bytes of `value` to a virtual I/O port. Returns OK or
 * NO_DEVICE.
 */
__attribute__((import_module("wprobe"), import_name("io_out")))
wprobe_i32 wprobe_io_out(wprobe_i64 port, wprobe_i32 width, wprobe_i64 value);

/**
 * Emit this hit's log record: the host writes the record header (facility 1,
 * the program's header fields, `major`, `minor`) followed by `data_len` bytes
 * at `data_ptr`. `items_ptr` points to `items_count` u32 item descriptors
 * (`record::LogItem`) that say where each logged item starts, so the output
 * can be decoded exactly. Returns OK, or TOO_LARGE when data_len >
 * MAX_LOG_DATA_BYTES or items_count > MAX_LOG_ITEMS.
 */
__attribute__((import_module("wprobe"), import_name("emit_log")))
wprobe_i32 wprobe_emit_log(wprobe_i32 major, wprobe_i32 minor, wprobe_i32 data_ptr, wprobe_i32 data_len, wprobe_i32 items_ptr, wprobe_i32 items_count);

/**
 * Emit this hit's stack-trace record: header with major 0, minor 0, mask
 * 0x0007, then the stack-trace area (`record::stacktrace`). Returns OK,
 * TOO_LARGE, or BAD_ARGUMENT when the area does not parse.
 */
__attribute__((import_module("wprobe"), import_name("emit_stacktrace")))
wprobe_i32 wprobe_emit_stacktrace(wprobe_i32 data_ptr, wprobe_i32 data_len);

/**
 * Call the host's callk hook (RPN `callk`). Does nothing when no hook is
 * registered.
 */
__attribute__((import_module("wprobe"), import_name("callk")))
void wprobe_callk(void);

/**
 * Aggregate `value` into entry `key` of map `map` (an index of the manifest's
 * `map` lines) with `op` (`mapstore::Op`: COUNT, ADD, MIN, MAX, AVG, HIST,
 * LHIST, SET), creating the entry when absent. `key_len` must be the map's
 * key size. Returns OK; FULL when the entry is new and the map already holds
 * its maximum number of keys (the update is dropped and counted, and reported
 * at exit); BAD_ARGUMENT for an unknown map, a wrong key size or an op the
 * map's kind does not take.
 */
__attribute__((import_module("wprobe"), import_name("map_update")))
wprobe_i32 wprobe_map_update(wprobe_i32 map, wprobe_i32 key_ptr, wprobe_i32 key_len, wprobe_i32 op, wprobe_i64 value);

/**
 * Set entry `key` of an `assign` map to the `val_len` bytes at `val_ptr` (the
 * map's value size). Returns OK, FULL (counted, as for map_update) or
 * BAD_ARGUMENT.
 */
__attribute__((import_module("wprobe"), import_name("map_store")))
wprobe_i32 wprobe_map_store(wprobe_i32 map, wprobe_i32 key_ptr, wprobe_i32 key_len, wprobe_i32 val_ptr, wprobe_i32 val_len);

/**
 * Copy the value of entry `key` of map `map` to `dst_ptr` (at most `dst_len`
 * bytes). Returns the value's size in bytes (integers are 8-byte
 * little-endian; `avg`/`stats` values are count then total; histograms are
 * their bucket counts), NOT_FOUND when the key is absent, BAD_ARGUMENT for an
 * unknown map or a wrong key size.
 */
__attribute__((import_module("wprobe"), import_name("map_lookup")))
wprobe_i32 wprobe_map_lookup(wprobe_i32 map, wprobe_i32 key_ptr, wprobe_i32 key_len, wprobe_i32 dst_ptr, wprobe_i32 dst_len);

/**
 * Remove entry `key` of map `map`. Returns OK, NOT_FOUND or BAD_ARGUMENT.
 */
__attribute__((import_module("wprobe"), import_name("map_delete")))
wprobe_i32 wprobe_map_delete(wprobe_i32 map, wprobe_i32 key_ptr, wprobe_i32 key_len);

/**
 * Remove every entry of map `map` (bpftrace `clear`). Returns OK or
 * BAD_ARGUMENT.
 */
__attribute__((import_module("wprobe"), import_name("map_clear")))
wprobe_i32 wprobe_map_clear(wprobe_i32 map);

/**
 * Set every value of map `map` to zero, keeping its keys (bpftrace `zero`).
 * Returns OK or BAD_ARGUMENT.
 */
__attribute__((import_module("wprobe"), import_name("map_zero")))
wprobe_i32 wprobe_map_zero(wprobe_i32 map);

/**
 * Emit an output event (`event::EventKind`): PRINTF with `id` a printf entry
 * of the module's `wprobe.events` section and the data its arguments laid out
 * as the entry says; PRINT_MAP with `id` a map index and 16 bytes (top, div);
 * PRINT_VALUE with `id` a value entry and the value's bytes; TIME with `id` a
 * time entry; CAT and SYSTEM with `id` a printf entry giving a file's path or
 * a shell command (bpftrace `cat`, `system`); EXIT with `id` 0 and an i64
 * exit status (bpftrace `exit(code)`; the handler then returns STOP). wprobe
 * formats events when it writes them. Returns OK, TOO_LARGE (data_len >
 * MAX_EVENT_BYTES or the run's record budget is spent) or BAD_ARGUMENT
 * (unknown kind).
 */
__attribute__((import_module("wprobe"), import_name("emit_event")))
wprobe_i32 wprobe_emit_event(wprobe_i32 kind, wprobe_i32 id, wprobe_i32 data_ptr, wprobe_i32 data_len);

/**
 * A clock at the hit, in nanoseconds: `clock::MONOTONIC` (bpftrace `nsecs`),
 * `clock::SINCE_START` (time since the run started, bpftrace `elapsed`),
 * `clock::REALTIME` (since the Unix epoch), `clock::BOOTTIME`
 * (`CLOCK_BOOTTIME`, bpftrace `nsecs(boot)`), `clock::TAI` (`CLOCK_TAI`,
 * bpftrace `nsecs(tai)` and `nsecs(sw_tai)`). Another id traps.
 */
__attribute__((import_module("wprobe"), import_name("clock_ns")))
wprobe_i64 wprobe_clock_ns(wprobe_i32 clock);

/**
 * Real user id of the process that hit the probe (-1 if unknown).
 */
__attribute__((import_module("wprobe"), import_name("current_uid")))
wprobe_i64 wprobe_current_uid(void);

/**
 * Copy the hit thread's name (`/proc/PID/task/TID/comm`, at most 15 bytes, no
 * NUL) to `dst_ptr`, at most `len` bytes. Returns the number of bytes copied.
 */
__attribute__((import_module("wprobe"), import_name("current_comm")))
wprobe_i32 wprobe_current_comm(wprobe_i32 dst_ptr, wprobe_i32 len);

/**
 * Process id of the command wprobe launched (bpftrace `cpid`), 0 when it
 * attached to a process instead.
 */
__attribute__((import_module("wprobe"), import_name("child_pid")))
wprobe_i64 wprobe_child_pid(void);

/**
 * In the handler of a return probe (manifest `return yes`): the value
 * register `reg` had at the entry of the call that is returning. `reg` is one
 * of the six SysV argument registers rdi, rsi, rdx, rcx, r8, r9 or rsp, by
 * `Reg` id (`regs::ENTRY_REGS`); any other id traps, and so does a call from
 * the handler of a probe that is not a return probe (every i64 is a possible
 * register value, so there is no room for a status).
 */
__attribute__((import_module("wprobe"), import_name("entry_reg")))
wprobe_i64 wprobe_entry_reg(wprobe_i32 reg);

/**
 * In the handler of a return probe: nanoseconds between the entry of the
 * returning call and its return, both taken by the runtime with a monotonic
 * clock when it caught them (the tracer's own stops are included). Traps in
 * the handler of a probe that is not a return probe.
 */
__attribute__((import_module("wprobe"), import_name("elapsed_ns")))
wprobe_i64 wprobe_elapsed_ns(void);

/**
 * Iterate map `map` (bpftrace `for ($kv : @m)`, `len(@m)`): copy the key and
 * the value of its first entry at or after `cursor` (start at 0) to `key_ptr`
 * and `val_ptr` (at most `key_len` and `val_len` bytes). Returns that entry's
 * position (the next call passes position + 1; deleting the entry found does
 * not move the others), NOT_FOUND past the last entry, BAD_ARGUMENT for an
 * unknown map.
 */
__attribute__((import_module("wprobe"), import_name("map_entry")))
wprobe_i32 wprobe_map_entry(wprobe_i32 map, wprobe_i64 cursor, wprobe_i32 key_ptr, wprobe_i32 key_len, wprobe_i32 val_ptr, wprobe_i32 val_len);

/**
 * Argument `index` (0-based) of the USDT probe that fired (manifest
 * `usdt_args`, from the site's `.note.stapsdt` spec), sign- or zero-extended
 * from its size as the spec says. An argument whose register or memory cannot
 * be read is 0. An index the site does not have traps, and so does a call
 * from the handler of a probe that is not a USDT site.
 */
__attribute__((import_module("wprobe"), import_name("usdt_arg")))
wprobe_i64 wprobe_usdt_arg(wprobe_i32 index);

/**
 * Real group id of the thread that hit the probe (-1 if unknown); wprobe's
 * own in a `begin`, `end` or `interval` probe.
 */
__attribute__((import_module("wprobe"), import_name("current_gid")))
wprobe_i64 wprobe_current_gid(void);

/**
 * NUMA node of the CPU the hit thread last ran on (`current_cpu`); 0 on a
 * machine with one node.
 */
__attribute__((import_module("wprobe"), import_name("current_numa_node")))
wprobe_i64 wprobe_current_numa_node(void);

/* Return probes (manifest `return yes`): the entry state of the returning
 * call. These work only in a return probe's handler; elsewhere the host
 * traps the handler. */

/**
 * Argument n (0 = the first, in rdi, ... 5 = the sixth, in r9) of the
 * returning call, as it was at the call's entry. Another n traps.
 */
static inline wprobe_u64 wprobe_entry_arg(unsigned n)
{
    switch (n) {
    case 0: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_RDI);
    case 1: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_RSI);
    case 2: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_RDX);
    case 3: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_RCX);
    case 4: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_R8);
    case 5: return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_R9);
    default: __builtin_trap();
    }
}

/**
 * rsp at the entry of the returning call: the address of its return address.
 */
static inline wprobe_u64 wprobe_entry_rsp(void)
{
    return (wprobe_u64)wprobe_entry_reg(WPROBE_REG_RSP);
}

/**
 * Nanoseconds between the entry of the returning call and its return.
 */
static inline wprobe_u64 wprobe_elapsed(void)
{
    return (wprobe_u64)wprobe_elapsed_ns();
}

/**
 * Declares the module's probe points: the lines of the `wprobe-manifest 1` manifest
 * after its `abi` line, each wrapped in WPROBE_LINE (no quotes or
 * backslashes inside), e.g.
 *
 *   WPROBE_MANIFEST(
 *       WPROBE_LINE("module probe_target")
 *       WPROBE_LINE("probe on_call")
 *       WPROBE_LINE("  location offset target_fn")
 *       WPROBE_LINE("  opcode 0x55"));
 *
 * Emits the `wprobe.manifest` custom section through the assembler (a
 * `.custom_section.NAME` section), which clang and wasm-ld keep as is.
 */
#define WPROBE_LINE(text) ".ascii \"" text "\"\n.byte 10\n"
#define WPROBE_MANIFEST(lines) \
    __asm__(".section .custom_section.wprobe.manifest,\"\",@\n" \
            WPROBE_LINE("wprobe-manifest 1") WPROBE_LINE("abi 5") lines ".text\n")

/** Defines handler export `name`: `WPROBE_HANDLER(on_call) { ... return WPROBE_EXIT; }`. */
#define WPROBE_HANDLER(name) \
    __attribute__((export_name(#name))) wprobe_i32 name(void)

#endif /* WPROBE_H */
