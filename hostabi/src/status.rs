//! Status codes returned by host imports, handler outcomes, and the RPN
//! exception codes that the runtime reports. Discriminants are explicit and
//! never reused.

/// Status returned by host imports that can fail recoverably.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Status {
    /// Success.
    Ok = 0,
    /// An address of the traced process is unmapped, or lacks the access asked for.
    Fault = -1,
    /// The register may not be written.
    ReadOnly = -2,
    /// The transport does not allow this operation (perf handlers only observe).
    NotPermitted = -3,
    /// An argument is out of its domain (unknown register id, bad width, malformed data).
    BadArgument = -4,
    /// A size exceeds its documented limit.
    TooLarge = -5,
    /// No virtual device handles this I/O port.
    NoDevice = -6,
    /// The key is not in the map (`map_lookup`, `map_delete`).
    NotFound = -7,
    /// The map is full: the update needed a new key and was refused (and counted).
    Full = -8,
}

impl Status {
    /// Every status, for tables and snapshots.
    pub const ALL: &'static [Status] = &[
        Status::Ok,
        Status::Fault,
        Status::ReadOnly,
        Status::NotPermitted,
        Status::BadArgument,
        Status::TooLarge,
        Status::NoDevice,
        Status::NotFound,
        Status::Full,
    ];

    /// The status with this code, if any.
    pub fn from_code(code: i32) -> Option<Status> {
        Status::ALL.iter().copied().find(|s| *s as i32 == code)
    }

    /// The constant name used in docs and in the C header.
    pub const fn name(self) -> &'static str {
        match self {
            Status::Ok => "OK",
            Status::Fault => "FAULT",
            Status::ReadOnly => "READ_ONLY",
            Status::NotPermitted => "NOT_PERMITTED",
            Status::BadArgument => "BAD_ARGUMENT",
            Status::TooLarge => "TOO_LARGE",
            Status::NoDevice => "NO_DEVICE",
            Status::NotFound => "NOT_FOUND",
            Status::Full => "FULL",
        }
    }
}

/// How a handler run ended: the value returned by every handler export.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(i32)]
pub enum Outcome {
    /// Normal end (`exit`, implicit exit, or a guest returning normally).
    Exit = 0,
    /// `abort`: no records were emitted for this hit.
    Abort = 1,
    /// `remove`: normal end, then the probe is disabled for good.
    Remove = 2,
    /// `exit 1`: hand the stopped process to a debugger (detach, leave it stopped).
    DebuggerHandoff = 3,
    /// `exit 2`: system crash dump, unavailable in user space (reported).
    CrashDump = 4,
    /// `exit 3`: write a core file of the traced process; it then runs on.
    CoreDump = 5,
    /// Ended by an uncaught exception (or a masked non-maskable one); records were emitted.
    Uncaught = 6,
    /// Ended by the RPN instruction budget (§16 [A 13]); records were emitted.
    BudgetExceeded = 7,
    /// Stop tracing (bpftrace `exit()`): the runtime detaches every probe,
    /// runs the `end` probes, prints the maps and exits.
    Stop = 8,
}

impl Outcome {
    /// Every outcome, for tables and snapshots.
    pub const ALL: &'static [Outcome] = &[
        Outcome::Exit,
        Outcome::Abort,
        Outcome::Remove,
        Outcome::DebuggerHandoff,
        Outcome::CrashDump,
        Outcome::CoreDump,
        Outcome::Uncaught,
        Outcome::BudgetExceeded,
        Outcome::Stop,
    ];

    /// The outcome with this code, if any.
    pub fn from_code(code: i32) -> Option<Outcome> {
        Outcome::ALL.iter().copied().find(|o| *o as i32 == code)
    }

    /// The constant name used in docs and in the C header.
    pub const fn name(self) -> &'static str {
        match self {
            Outcome::Exit => "EXIT",
            Outcome::Abort => "ABORT",
            Outcome::Remove => "REMOVE",
            Outcome::DebuggerHandoff => "DEBUGGER_HANDOFF",
            Outcome::CrashDump => "CRASH_DUMP",
            Outcome::CoreDump => "CORE_DUMP",
            Outcome::Uncaught => "UNCAUGHT",
            Outcome::BudgetExceeded => "BUDGET_EXCEEDED",
            Outcome::Stop => "STOP",
        }
    }
}

/// RPN exception x-field bits (spec §10.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Exception {
    /// Unreadable or unwritable address; p1 = the address.
    InvalidAddr = 0x0001,
    /// Reserved (segmented addressing); never raised on x86-64.
    SegFault = 0x0002,
    /// Branch limit reached; p1 = jmpmax.
    MaxJmps = 0x0004,
    /// `call` beyond 32 frames (p1 = 32) or `ret` in the base frame (p1 = 0).
    CallStackOverflow = 0x0010,
    /// Division by zero.
    DivideByZero = 0x0020,
    /// Bad operand; p1 = kind (1 lv, 2 gv, 3 bit, 4 exit facility, 5 I/O port), p2 = value.
    InvalidOperand = 0x0040,
    /// Reserved instruction executed; p1 = opcode, p2 = code offset.
    InvalidOpcode = 0x0080,
    /// Heap exhausted; p1 = requested size.
    HeapNomem = 0x0100,
    /// Not a live heap handle; p1 = handle, p2 = offset.
    HeapInvalidHandle = 0x0200,
    /// Heap access out of the block; p1 = handle, p2 = offset.
    HeapInvalidOffset = 0x0400,
    /// Log area full (maskable); p1 = logmax.
    LogOverflow = 0x1000,
    /// Reserved (maskable); never raised.
    RpnStackWrap = 0x2000,
    /// User exception raised by `rx` (maskable).
    User = 0x8000,
}

impl Exception {
    /// Every exception type.
    pub const ALL: &'static [Exception] = &[
        Exception::InvalidAddr,
        Exception::SegFault,
        Exception::MaxJmps,
        Exception::CallStackOverflow,
        Exception::DivideByZero,
        Exception::InvalidOperand,
        Exception::InvalidOpcode,
        Exception::HeapNomem,
        Exception::HeapInvalidHandle,
        Exception::HeapInvalidOffset,
        Exception::LogOverflow,
        Exception::RpnStackWrap,
        Exception::User,
    ];

    /// The spec's name of the exception.
    pub const fn name(self) -> &'static str {
        match self {
            Exception::InvalidAddr => "INVALID_ADDR",
            Exception::SegFault => "SEG_FAULT",
            Exception::MaxJmps => "MAX_JMPS",
            Exception::CallStackOverflow => "CALL_STACK_OVERFLOW",
            Exception::DivideByZero => "DIVIDE_BY_ZERO",
            Exception::InvalidOperand => "INVALID_OPERAND",
            Exception::InvalidOpcode => "INVALID_OPCODE",
            Exception::HeapNomem => "HEAP_NOMEM",
            Exception::HeapInvalidHandle => "HEAP_INVALID_HANDLE",
            Exception::HeapInvalidOffset => "HEAP_INVALID_OFFSET",
            Exception::LogOverflow => "LOG_OVERFLOW",
            Exception::RpnStackWrap => "RPN_STACK_WRAP",
            Exception::User => "USER",
        }
    }

    /// The x-field bit.
    pub const fn bit(self) -> u16 {
        self as u16
    }

    /// The names of the x-field bits set in `code` (u-field ignored), lowest bit first.
    pub fn names_in(code: u64) -> impl Iterator<Item = &'static str> {
        let x = (code & 0xFFFF) as u16;
        Exception::ALL
            .iter()
            .filter(move |e| x & e.bit() != 0)
            .map(|e| e.name())
    }
}

/// Bits 0x0001..=0x0800 of the x-field: exceptions that cannot be masked off
/// (a masked one terminates the handler instead, spec §10.3).
pub const NON_MASKABLE_BITS: u16 = 0x0FFF;

/// Default exception mask of a probe (spec §5 `excpt_mask`).
pub const DEFAULT_EXCEPTION_MASK: u16 = 0x0FFF;

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec::Vec;

    #[test]
    fn codes_round_trip() {
        for s in Status::ALL {
            assert_eq!(Status::from_code(*s as i32), Some(*s));
        }
        for o in Outcome::ALL {
            assert_eq!(Outcome::from_code(*o as i32), Some(*o));
        }
        assert_eq!(Status::from_code(7), None);
    }

    #[test]
    fn names_of_a_code() {
        let v: Vec<_> = Exception::names_in(0x2_8020).collect();
        assert_eq!(v, ["DIVIDE_BY_ZERO", "USER"]);
    }
}
