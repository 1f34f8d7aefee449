//! Where the per-hit machine state of a compiled RPN program lives: linear
//! memory regions (byte offsets) and Wasm global indices. One page holds
//! everything but the program name, which follows in a data segment.

/// Scratch bytes for host imports that return data (memory reads, I/O).
pub const SCRATCH: u32 = 64;
/// The circular RPN stack: 1024 words (spec §8.1).
pub const STACK: u32 = 1024;
/// Bytes of the RPN stack.
pub const STACK_BYTES: u32 = 1024 * 8;
/// The call frames: base frame + 32 (spec §8.3).
pub const FRAMES: u32 = STACK + STACK_BYTES;
/// Bytes per frame (11 words used).
pub const FRAME_BYTES: u32 = 96;
/// Maximum frames above the base frame.
pub const MAX_CALL_DEPTH: u32 = 32;
/// Local variables (persistent across hits): 256 words.
pub const VARS: u32 = FRAMES + FRAME_BYTES * (MAX_CALL_DEPTH + 1);
/// The log data area; `log str` may examine one byte beyond `logmax`.
pub const LOG: u32 = VARS + 256 * 8;
/// Bytes reserved for the log area.
pub const LOG_BYTES: u32 = 1024 + 16;
/// Log item descriptors: at most one per logged byte.
pub const ITEMS: u32 = LOG + LOG_BYTES;
/// The stack-trace area.
pub const STACKTRACE: u32 = ITEMS + 1024 * 4;
/// Bytes reserved for the stack-trace area.
pub const STACKTRACE_BYTES: u32 = 1024 + 16;
/// Heap allocation table: `HEAP_MAX_BLOCKS` entries of (handle u64, offset u32, size u32).
pub const HEAP_TABLE: u32 = STACKTRACE + STACKTRACE_BYTES;
/// Live heap blocks at most per hit (more: HEAP_NOMEM).
pub const HEAP_MAX_BLOCKS: u32 = 1024;
/// Bytes per heap table entry.
pub const HEAP_ENTRY_BYTES: u32 = 16;
/// The heap arena (16 KiB capacity at most, compacted when fragmented).
pub const HEAP_ARENA: u32 = HEAP_TABLE + HEAP_MAX_BLOCKS * HEAP_ENTRY_BYTES;
/// Bytes of the heap arena.
pub const HEAP_ARENA_BYTES: u32 = 16384;
/// The program name (`name =`), for stack-trace headers.
pub const NAME: u32 = HEAP_ARENA + HEAP_ARENA_BYTES;

/// Frame field offsets (each a u64/i64 word).
pub mod frame {
    /// Caller's SBP.
    pub const SAVED_SBP: u32 = 0;
    /// RPN-trace start slot.
    pub const PV_START: u32 = 8;
    /// RPN-trace count.
    pub const PV_COUNT: u32 = 16;
    /// lv-trace start.
    pub const LV_START: u32 = 24;
    /// lv-trace count.
    pub const LV_COUNT: u32 = 32;
    /// gv-trace start.
    pub const GV_START: u32 = 40;
    /// gv-trace count.
    pub const GV_COUNT: u32 = 48;
    /// Handler code offset, or 0xFFFFFFFF.
    pub const HANDLER_OFF: u32 = 56;
    /// Handler block index in the owning body function, or -1.
    pub const HANDLER_BLOCK: u32 = 64;
    /// Called address (code offset).
    pub const CALLED: u32 = 72;
    /// Return address (code offset).
    pub const RET: u32 = 80;
}

/// Wasm global indices.
pub mod g {
    /// TSP (i32).
    pub const TSP: u32 = 0;
    /// SBP (i32).
    pub const SBP: u32 = 1;
    /// LP (i32).
    pub const LP: u32 = 2;
    /// PLP (i32).
    pub const PLP: u32 = 3;
    /// STP (i32).
    pub const STP: u32 = 4;
    /// Jump counter (i32).
    pub const JC: u32 = 5;
    /// Frames above the base frame (i32).
    pub const DEPTH: u32 = 6;
    /// Major in force (i32).
    pub const MAJOR: u32 = 7;
    /// Minor in force (i32).
    pub const MINOR: u32 = 8;
    /// Exception mask of the running probe (i32).
    pub const MASK: u32 = 9;
    /// Last exception code (i64).
    pub const EXC_CODE: u32 = 10;
    /// Last exception handler offset (i64).
    pub const EXC_HANDLER: u32 = 11;
    /// Last exception p1 (i64).
    pub const EXC_P1: u32 = 12;
    /// Last exception p2 (i64).
    pub const EXC_P2: u32 = 13;
    /// Outcome of the run (i32, `hostabi::Outcome`).
    pub const OUTCOME: u32 = 14;
    /// Number of log item descriptors (i32).
    pub const ITEMS: u32 = 15;
    /// Location value of the running probe (i64), for stack-trace headers.
    pub const LOCATION: u32 = 16;
    /// Pending exception p1 set by helpers (i64).
    pub const PP1: u32 = 17;
    /// Pending exception p2 set by helpers (i64).
    pub const PP2: u32 = 18;
    /// Heap capacity of the running probe (i32).
    pub const HEAP_CAP: u32 = 19;
    /// Heap bytes in live blocks (i32).
    pub const HEAP_USED: u32 = 20;
    /// Heap arena bump pointer (i32).
    pub const HEAP_BUMP: u32 = 21;
    /// Live heap blocks (i32).
    pub const HEAP_LIVE: u32 = 22;
    /// Next heap handle (i64).
    pub const HEAP_NEXT: u32 = 23;
    /// Whether a handler run since the last zero-fill may have written the stack (i32).
    pub const STACK_DIRTY: u32 = 24;
    /// Number of globals.
    pub const COUNT: u32 = 25;
    /// Whether global `i` is i64 (otherwise i32).
    pub const fn is_i64(i: u32) -> bool {
        matches!(
            i,
            EXC_CODE | EXC_HANDLER | EXC_P1 | EXC_P2 | LOCATION | PP1 | PP2 | HEAP_NEXT
        )
    }
}

/// Internal status returned by body functions.
pub mod status {
    /// `ret`: continue after the call.
    pub const RET: i32 = 0;
    /// The handler run ends (outcome in the OUTCOME global).
    pub const TERMINATE: i32 = 1;
    /// An exception propagates into the caller's frame (the callee's frame is gone).
    pub const EXCEPTION: i32 = 2;
}

/// Results of the `raise`/`dispatch` helpers (besides a handler block index ≥ 0).
pub mod raised {
    /// Masked maskable exception: continue with the next instruction.
    pub const IGNORED: i32 = -3;
    /// The handler run ends.
    pub const TERMINATE: i32 = -2;
    /// The exception left this frame (implicit return done): return EXCEPTION.
    pub const PROPAGATE: i32 = -1;
}
