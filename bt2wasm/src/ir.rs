//! The typed IR between the checker and the code generator: names are
//! resolved (variables to Wasm locals or frame slots, maps to indexes,
//! formats to event ids), every aggregate value (string, buffer, stack,
//! tuple) has a frame slot of known size, and operations carry the
//! signedness that decides their semantics (bpftrace's: 64-bit arithmetic,
//! unsigned division and modulo, a zero divisor giving 0).

use crate::ast::{BinOp, UnOp};
use crate::ctypes::{CType, EnumDef};
use std::rc::Rc;

/// A structure's value: its fields' names and value types, and its C size
/// (`sizeof`).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct RecordTy {
    /// `struct Foo`.
    pub name: String,
    /// Fields in order (anonymous members' fields flattened in).
    pub fields: Vec<(String, Ty)>,
    /// `sizeof` in C.
    pub c_size: u32,
}
use hostabi::layout::Layout;
use hostabi::maps::Op;

/// A value type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    /// An integer (`bytes` significant bytes, held in an i64).
    Int {
        /// Signed.
        signed: bool,
        /// Significant bytes: 1, 2, 4, 8.
        bytes: u8,
    },
    /// A NUL-padded string of this many bytes.
    Str(u32),
    /// A buffer of at most this many bytes.
    Buf(u32),
    /// A user stack of at most this many frames, and its print style
    /// (`None`: bpftrace's).
    Ustack(u32, Option<hostabi::layout::StackMode>),
    /// A code address printed as its symbol.
    Usym,
    /// A pointer to a C type: an address in an i64, scaled by the
    /// pointee's size in arithmetic.
    Ptr(Box<CType>),
    /// A structure or union read from the traced process: its fields laid
    /// out as a tuple's (each 8-byte aligned).
    Record(Rc<RecordTy>),
    /// An array read from the traced process (elements laid out as a
    /// tuple's).
    Array(Box<Ty>, u32),
    /// An enumeration's value (an integer printed as its enumerator).
    Enum(Rc<EnumDef>),
    /// `strftime(fmt, ns)`: a monotonic time in ns (an i64) printed as
    /// local time with this format.
    Strftime(Vec<u8>),
    /// `username`: a user id (an i64) printed as the user's name.
    Username,
    /// `ntop(...)`: an address family and 16 address bytes, printed as an
    /// IP address.
    Inet,
    /// A tuple.
    Tuple(Vec<Ty>),
    /// No value (calls such as `printf`), or not known yet.
    None,
}

impl Ty {
    /// `int64`.
    pub const I64: Ty = Ty::Int {
        signed: true,
        bytes: 8,
    };
    /// `uint64`.
    pub const U64: Ty = Ty::Int {
        signed: false,
        bytes: 8,
    };

    /// Whether it is an integer (pointers and enums included).
    pub fn is_int(&self) -> bool {
        matches!(self, Ty::Int { .. } | Ty::Ptr(_) | Ty::Enum(_))
    }

    /// Whether it is a pointer.
    pub fn is_ptr(&self) -> bool {
        matches!(self, Ty::Ptr(_))
    }

    /// The size of what a pointer points to, for its arithmetic (1 for
    /// `void *`, as C compilers take it).
    pub fn pointee_size(&self) -> u64 {
        match self {
            Ty::Ptr(p) => (p.size() as u64).max(1),
            _ => 1,
        }
    }

    /// Whether values of this type live in memory (frame slots).
    pub fn is_agg(&self) -> bool {
        !matches!(
            self,
            Ty::Int { .. } | Ty::Ptr(_) | Ty::Enum(_) | Ty::Strftime(_) | Ty::Username | Ty::None
        )
    }

    /// Whether it is signed (integers only; enums are C `int`s).
    pub fn signed(&self) -> bool {
        matches!(self, Ty::Int { signed: true, .. } | Ty::Enum(_))
    }

    /// The value layout (key, value and argument bytes).
    pub fn layout(&self) -> Layout {
        match self {
            Ty::Int { signed, bytes } => Layout::Int {
                signed: *signed,
                bytes: *bytes,
            },
            Ty::Str(n) => Layout::Str(*n),
            Ty::Buf(n) => Layout::Buf(*n),
            Ty::Ustack(n, None) => Layout::Ustack(*n),
            Ty::Ustack(n, Some(m)) => Layout::UstackAs(*n, *m),
            Ty::Usym => Layout::Usym,
            Ty::Ptr(_) => Layout::Ptr,
            Ty::Record(r) => Layout::Record(
                r.fields
                    .iter()
                    .map(|(n, t)| (n.clone(), t.layout()))
                    .collect(),
            ),
            Ty::Array(t, n) => Layout::Array(Box::new(t.layout()), *n),
            Ty::Enum(e) => Layout::Enum(e.values.clone().into_boxed_slice()),
            Ty::Strftime(f) => Layout::Strftime(f.clone().into_boxed_slice()),
            Ty::Username => Layout::Username,
            Ty::Inet => Layout::Inet,
            Ty::Tuple(f) => Layout::Tuple(f.iter().map(Ty::layout).collect()),
            Ty::None => Layout::U64,
        }
    }

    /// Bytes of the value in memory (a multiple of 8).
    pub fn size(&self) -> u32 {
        self.layout().size() as u32
    }

    /// Bytes of a value of this type that an aggregate slot of `size`
    /// bytes takes when the value is stored there (the `src_size` of a
    /// `SetSlot` or `MapStore`): a tuple all `size` (it is converted to
    /// the slot's layout first), any other value at most its own.
    pub fn stored_size(&self, size: u32) -> u32 {
        if matches!(self, Ty::Tuple(_)) {
            size
        } else {
            self.size().min(size)
        }
    }

    /// bpftrace's spelling of the type, for messages.
    pub fn name(&self) -> String {
        match self {
            Ty::Int { signed, bytes } => {
                format!("{}int{}", if *signed { "" } else { "u" }, *bytes as u32 * 8)
            }
            Ty::Str(n) => format!("string[{n}]"),
            Ty::Buf(n) => format!("buffer[{n}]"),
            Ty::Ustack(..) => "ustack".into(),
            Ty::Usym => "usym".into(),
            Ty::Ptr(p) => format!("{} *", p.name()),
            Ty::Record(r) => r.name.clone(),
            Ty::Array(t, n) => format!("{}[{n}]", t.name()),
            Ty::Enum(e) => e.name.clone(),
            Ty::Strftime(_) => "timestamp".into(),
            Ty::Username => "username".into(),
            Ty::Inet => "inet".into(),
            Ty::Tuple(f) => format!(
                "({})",
                f.iter().map(Ty::name).collect::<Vec<_>>().join(", ")
            ),
            Ty::None => "none".into(),
        }
    }
}

/// Host facts read by an expression.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fact {
    /// `pid`.
    Pid,
    /// `tid`.
    Tid,
    /// `cpu`.
    Cpu,
    /// `uid`.
    Uid,
    /// `gid`.
    Gid,
    /// `numaid`.
    Numaid,
    /// `cpid`.
    Cpid,
    /// `nsecs`.
    Nsecs,
    /// `nsecs(boot)`: `CLOCK_BOOTTIME`.
    NsecsBoot,
    /// `nsecs(tai)`, `nsecs(sw_tai)`: `CLOCK_TAI`.
    NsecsTai,
    /// `elapsed`.
    Elapsed,
    /// The load bias of the probe's module (probe events' `@+OFF`, `@SYM`).
    Bias,
}

/// A part of a composite value: expression, its type, offset in the slot.
#[derive(Clone, Debug)]
pub struct Part {
    /// The value.
    pub e: E,
    /// Its type (the destination field's type).
    pub ty: Ty,
    /// Byte offset in the slot.
    pub off: u32,
}

/// A map key built in a frame slot.
#[derive(Clone, Debug)]
pub struct Key {
    /// The slot (frame offset).
    pub slot: u32,
    /// The key's fields.
    pub parts: Vec<Part>,
    /// Key bytes.
    pub size: u32,
}

/// An expression. Integer expressions leave an i64; aggregate ones the
/// i32 address of their bytes.
#[derive(Clone, Debug)]
pub enum E {
    /// An integer constant.
    Int(i64),
    /// An integer variable (Wasm local).
    Local(u32),
    /// The address of a frame slot (aggregate variable or temporary).
    Slot(u32),
    /// The address of static data (string literals).
    Static(u32),
    /// The address of this probe's entry in a table of fixed-stride strings
    /// (`probe`, `func`): `base + probe_index * stride`.
    Table {
        /// Table address.
        base: u32,
        /// Entry size.
        stride: u32,
    },
    /// Entry `index` of a table of fixed-stride strings in static data
    /// (an index past the last entry reads the last).
    TableAt {
        /// Table address.
        base: u32,
        /// Entry size.
        stride: u32,
        /// Entries.
        count: u32,
        /// The index.
        index: Box<E>,
    },
    /// A register of the hit thread (`hostabi::regs` id).
    Reg(u16),
    /// Argument N of the USDT site that fired (the `usdt_arg` import),
    /// already extended as its spec says.
    UsdtArg(u32),
    /// A host fact.
    Fact(Fact),
    /// `comm` into a 16-byte slot.
    Comm(u32),
    /// Unary operation.
    Un(UnOp, Box<E>),
    /// Integer binary operation; `signed` picks signed comparisons.
    Bin(BinOp, bool, Box<E>, Box<E>),
    /// String comparison of `n` bytes at most (`==`, `!=`).
    StrEq {
        /// Negated (`!=`).
        ne: bool,
        /// Left address.
        a: Box<E>,
        /// Right address.
        b: Box<E>,
        /// Bytes compared at most.
        n: u32,
    },
    /// Byte equality of two aggregates of `n` bytes (arrays, buffers:
    /// `==`, `!=`); no NUL ends the comparison.
    MemEq {
        /// Negated (`!=`).
        ne: bool,
        /// Left address.
        a: Box<E>,
        /// Right address.
        b: Box<E>,
        /// Bytes compared.
        n: u32,
    },
    /// `strcontains(hay, needle)`: 1 when the NUL-terminated `needle`
    /// (at most `nn` bytes) occurs in `hay` (at most `hn` bytes), else 0.
    StrContains {
        /// The string searched.
        hay: Box<E>,
        /// Its size.
        hn: u32,
        /// The string looked for.
        needle: Box<E>,
        /// Its size.
        nn: u32,
    },
    /// `c ? a : b` (both integer, or both aggregates of one size).
    Ternary(Box<E>, Box<E>, Box<E>),
    /// Truncate to `bytes` and extend (sign or zero) back to 64 bits.
    Cast {
        /// The value.
        e: Box<E>,
        /// Sign-extend.
        signed: bool,
        /// Bytes kept.
        bytes: u8,
    },
    /// `str(addr[, max])` into a slot of `size` bytes.
    ReadStr {
        /// The address.
        addr: Box<E>,
        /// Bytes to read at most (NUL included), clamped to `size`.
        max: Box<E>,
        /// Destination slot.
        slot: u32,
        /// Slot size.
        size: u32,
    },
    /// `buf(addr, len)` into a slot (u64 length, bytes).
    ReadBuf {
        /// The address.
        addr: Box<E>,
        /// Bytes to read (clamped to `cap`).
        len: Box<E>,
        /// Destination slot.
        slot: u32,
        /// Capacity.
        cap: u32,
    },
    /// Reads an integer of `bytes` bytes at an address of the traced
    /// process (`*(type *)addr`); a fault reads 0.
    Load {
        /// The address.
        addr: Box<E>,
        /// Bytes.
        bytes: u8,
        /// Sign-extend.
        signed: bool,
        /// Scratch slot (8 bytes).
        slot: u32,
    },
    /// A frame-pointer walk into a slot (pid, count, frames).
    Ustack {
        /// Destination slot.
        slot: u32,
        /// Most frames.
        frames: u32,
        /// At a uprobe: when the probed instruction is a function's first
        /// (`push %rbp` or `endbr64`), the caller's return address is at
        /// the stack pointer and the walk from RBP would miss it; add it as
        /// the kernel's perf callchain does.
        entry_fixup: bool,
    },
    /// `usym(addr)` into a 16-byte slot (address, pid).
    Usym {
        /// The address.
        addr: Box<E>,
        /// Destination slot.
        slot: u32,
    },
    /// A map lookup: integers read 0 when absent; aggregates leave the
    /// slot address (zeroed when absent).
    MapGet {
        /// Map index.
        map: u32,
        /// The key.
        key: Key,
        /// Value slot.
        slot: u32,
        /// Value type.
        ty: Ty,
    },
    /// `map_entry`: the first entry of `map` at or after `cursor`, its key
    /// and value copied to slots; its position, or a negative status.
    MapEntry {
        /// Map index.
        map: u32,
        /// The cursor.
        cursor: Box<E>,
        /// Key slot and size.
        key: (u32, u32),
        /// Value slot and size.
        val: (u32, u32),
    },
    /// Whether `map` has `key` (1 or 0).
    MapHas {
        /// Map index.
        map: u32,
        /// The key.
        key: Key,
    },
    /// A tuple built in a slot.
    Tuple {
        /// The slot.
        slot: u32,
        /// Fields.
        parts: Vec<Part>,
    },
    /// Field of a tuple at `off` (integers are loaded, aggregates addressed).
    Field {
        /// The tuple's address.
        base: Box<E>,
        /// Byte offset.
        off: u32,
        /// Field type.
        ty: Ty,
    },
    /// Statements, then a value.
    Seq(Vec<S>, Box<E>),
}

/// What an `emit_event` statement sends.
#[derive(Clone, Debug)]
pub struct Emit {
    /// Event kind (`hostabi::event::EventKind` code).
    pub kind: i32,
    /// Entry id.
    pub id: u32,
    /// Argument slot.
    pub slot: u32,
    /// Arguments laid out in the slot.
    pub parts: Vec<Part>,
    /// Bytes sent.
    pub size: u32,
}

/// A statement.
#[derive(Clone, Debug)]
pub enum S {
    /// Evaluate, discard.
    Eval(E),
    /// Set an integer local.
    SetLocal(u32, E),
    /// Copy an aggregate of `size` bytes into a frame slot.
    SetSlot {
        /// Destination slot.
        slot: u32,
        /// Source address expression.
        e: E,
        /// Destination size (the source may be smaller: zero-filled).
        size: u32,
        /// Source size.
        src_size: u32,
    },
    /// Conditional.
    If(E, Vec<S>, Vec<S>),
    /// `while (cond) body`.
    While(E, Vec<S>),
    /// `break`.
    Break,
    /// `continue`.
    Continue,
    /// Return this outcome code.
    Return(i32),
    /// `map_update`.
    MapUpdate {
        /// Map index.
        map: u32,
        /// The key.
        key: Key,
        /// Op.
        op: Op,
        /// The sample.
        value: E,
    },
    /// `map_store` of an aggregate value (address, size).
    MapStore {
        /// Map index.
        map: u32,
        /// The key.
        key: Key,
        /// Value slot the value is copied to first.
        slot: u32,
        /// The value (address).
        value: E,
        /// Value bytes in the map.
        size: u32,
        /// Source bytes.
        src_size: u32,
    },
    /// `map_delete`.
    MapDelete {
        /// Map index.
        map: u32,
        /// The key.
        key: Key,
    },
    /// `map_clear` (`clear`) or `map_zero` (`zero`).
    MapReset {
        /// Map index.
        map: u32,
        /// Zero instead of clear.
        zero: bool,
    },
    /// `emit_event`.
    Emit(Emit),
}

/// One handler body (a source probe); every concrete probe expanded from
/// its attach points calls it with its index.
#[derive(Clone, Debug, Default)]
pub struct Handler {
    /// The statements (predicate folded in as an `If`).
    pub body: Vec<S>,
    /// i64 locals used (variables and temporaries).
    pub locals: u32,
    /// Frame bytes used.
    pub frame: u32,
}

/// One concrete probe: its export, its handler and its index there.
#[derive(Clone, Debug)]
pub struct ProbeOut {
    /// The export name.
    pub export: String,
    /// The handler.
    pub handler: usize,
    /// Index within the handler's probes (`probe`/`func` tables).
    pub index: u32,
    /// The manifest entry.
    pub spec: hostabi::manifest::ProbeSpec,
    /// Later return probes of the same function, `(handler, index)`: their
    /// bodies run after this one's, in program order (see
    /// [`crate::check::merge_returns`]).
    pub also: Vec<(usize, u32)>,
    /// Its body runs as another probe's `also`: the export does nothing.
    pub merged: bool,
}

/// The whole compiled program before code generation.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// Handlers.
    pub handlers: Vec<Handler>,
    /// Concrete probes.
    pub probes: Vec<ProbeOut>,
    /// Static data, placed at [`STATIC_BASE`].
    pub data: Vec<u8>,
    /// The manifest (probes filled from `probes`).
    pub manifest: hostabi::manifest::Manifest,
    /// The events section.
    pub events: hostabi::event::Events,
}

/// Where static data starts in linear memory.
pub const STATIC_BASE: u32 = 64;
