//! Instruction boundaries, from the file: a probe placed without an
//! `opcode =` check is armed only where an instruction starts, which is
//! known by decoding its function from the symbol's start with iced-x86
//! (a linear sweep, which is exact for compiled code: x86-64 compilers put
//! no data inside functions). An address inside an instruction is refused
//! with the nearest boundaries named.

use iced_x86::{Decoder, DecoderOptions, Instruction};

use crate::info::{ElfInfo, Symbol};

/// A verified probe location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Boundary {
    /// The function whose code was decoded.
    pub function: String,
    /// Its link-time start.
    pub start: u64,
    /// Length of the instruction at the address.
    pub len: usize,
}

/// Why a location was not verified.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BoundaryError {
    /// Inside an instruction.
    #[error(
        "{addr:#x} is not an instruction boundary: it is inside the instruction at \
         {before:#x} ({function}+{}); the nearest boundaries are {before:#x} and {after:#x} \
         ({function}+{})",
        before - start,
        after - start
    )]
    Inside {
        /// The address.
        addr: u64,
        /// The function.
        function: String,
        /// Its start.
        start: u64,
        /// The instruction that contains the address.
        before: u64,
        /// The next instruction.
        after: u64,
    },
    /// No function symbol with a size covers the address.
    #[error(
        "{addr:#x} is in no function of the module's symbol table, so its instruction \
         boundaries cannot be verified; give the first byte with `opcode =`"
    )]
    NoFunction {
        /// The address.
        addr: u64,
    },
    /// The bytes from the function's start do not decode as far as the address.
    #[error(
        "{function} does not decode as x86-64 code from its start {start:#x} up to {addr:#x} \
         (invalid instruction at {bad:#x}); give the first byte with `opcode =`"
    )]
    Undecodable {
        /// The address.
        addr: u64,
        /// The function.
        function: String,
        /// Its start.
        start: u64,
        /// The first byte that does not decode.
        bad: u64,
    },
}

/// The instructions of `sym` decoded from the file: `(address, length)`,
/// and the address of the first byte that does not decode, if any.
pub fn decode_function(elf: &ElfInfo, sym: &Symbol) -> (Vec<(u64, usize)>, Option<u64>) {
    let Some(bytes) = elf.bytes_at(sym.value, sym.size as usize) else {
        return (Vec::new(), Some(sym.value));
    };
    let mut decoder = Decoder::with_ip(64, bytes, sym.value, DecoderOptions::NONE);
    let mut insn = Instruction::default();
    let mut out = Vec::new();
    while decoder.can_decode() {
        decoder.decode_out(&mut insn);
        if insn.is_invalid() {
            return (out, Some(insn.ip()));
        }
        out.push((insn.ip(), insn.len()));
    }
    let bad = (bytes.len() < sym.size as usize).then(|| sym.value + bytes.len() as u64);
    (out, bad)
}

/// Checks that link-time address `addr` starts an instruction of the
/// function that contains it.
pub fn check_boundary(elf: &ElfInfo, addr: u64) -> Result<Boundary, BoundaryError> {
    let f = elf
        .function_containing(addr)
        .ok_or(BoundaryError::NoFunction { addr })?;
    let (insns, bad) = decode_function(elf, f);
    for &(ip, len) in &insns {
        if ip == addr {
            return Ok(Boundary {
                function: f.name.clone(),
                start: f.value,
                len,
            });
        }
        let end = ip + len as u64;
        if ip < addr && addr < end {
            return Err(BoundaryError::Inside {
                addr,
                function: f.name.clone(),
                start: f.value,
                before: ip,
                after: end,
            });
        }
    }
    Err(BoundaryError::Undecodable {
        addr,
        function: f.name.clone(),
        start: f.value,
        bad: bad.unwrap_or(addr),
    })
}
