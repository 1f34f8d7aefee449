//! C types of the traced program's memory: integers, pointers, arrays,
//! structures, unions, enums, as the program's own definitions
//! (`struct Foo { int a; char b[10]; }`) and the binaries' DWARF describe
//! them, laid out by the System V x86-64 rules (alignment, padding,
//! bitfields packed into their declared type's units). They say where a
//! field is in the target's memory and how to read it; values read from
//! there become [`crate::ir::Ty`] values.

use std::collections::HashMap;
use std::rc::Rc;

/// A C type.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum CType {
    /// An integer (`char`, `int`, `uint64_t`, `_Bool`...).
    Int {
        /// Signed.
        signed: bool,
        /// Bytes: 1, 2, 4, 8.
        bytes: u8,
    },
    /// A pointer to a type.
    Ptr(Box<CType>),
    /// `T[N]`.
    Array(Box<CType>, u32),
    /// A structure or union.
    Record(Rc<Record>),
    /// An enumeration (its values are integers of `bytes`).
    Enum(Rc<EnumDef>),
    /// Floating point of this many bytes (read as bytes only).
    Float(u8),
    /// `void`.
    Void,
    /// A structure, union or enum known by name only here (a pointer to
    /// the record being defined, or to one DWARF defines elsewhere):
    /// resolved where it is used.
    Named(String),
}

/// A structure or union, laid out.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Record {
    /// `struct Foo`, `union N` (`struct` alone when anonymous).
    pub name: String,
    /// A union.
    pub union: bool,
    /// Bytes (`sizeof`).
    pub size: u32,
    /// Alignment.
    pub align: u32,
    /// Fields in declaration order.
    pub fields: Vec<Field>,
}

/// One field of a record.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct Field {
    /// Its name (empty for an anonymous member, whose fields are the record's).
    pub name: String,
    /// Its type.
    pub ty: CType,
    /// Byte offset.
    pub offset: u32,
    /// A bitfield: (bit offset from `offset`, width in bits).
    pub bits: Option<(u32, u32)>,
    /// A C++ reference (`int &x`): `ty` is a pointer to what it refers
    /// to, which an access reads (printing the record shows the address).
    pub by_ref: bool,
}

/// A bitfield's place in its bytes: (first bit, width in bits).
pub type Bits = Option<(u32, u32)>;

/// A member found by name: its type, its byte offset, its bits.
pub type Member = (CType, u32, Bits);

/// An enumeration.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct EnumDef {
    /// `enum Foo` (`enum` alone when anonymous).
    pub name: String,
    /// Its enumerators.
    pub values: Vec<(String, i64)>,
    /// Bytes of its values.
    pub bytes: u8,
}

impl EnumDef {
    /// The name of `v`, if an enumerator has it.
    pub fn name_of(&self, v: i64) -> Option<&str> {
        self.values
            .iter()
            .find(|(_, x)| *x == v)
            .map(|(n, _)| n.as_str())
    }
}

impl CType {
    /// `sizeof`.
    pub fn size(&self) -> u32 {
        match self {
            CType::Int { bytes, .. } | CType::Float(bytes) => *bytes as u32,
            CType::Ptr(_) => 8,
            CType::Array(t, n) => t.size().saturating_mul(*n),
            CType::Record(r) => r.size,
            CType::Enum(e) => e.bytes as u32,
            CType::Void | CType::Named(_) => 1,
        }
    }

    /// `_Alignof`.
    pub fn align(&self) -> u32 {
        match self {
            CType::Int { bytes, .. } | CType::Float(bytes) => (*bytes as u32).max(1),
            CType::Ptr(_) => 8,
            CType::Array(t, _) => t.align(),
            CType::Record(r) => r.align,
            CType::Enum(e) => e.bytes as u32,
            CType::Void | CType::Named(_) => 1,
        }
    }

    /// The spelling bpftrace uses in messages (`struct Foo *`, `int32[4]`).
    pub fn name(&self) -> String {
        match self {
            CType::Int { signed, bytes } => {
                format!("{}int{}", if *signed { "" } else { "u" }, *bytes as u32 * 8)
            }
            CType::Ptr(t) => format!("{} *", t.name()),
            CType::Array(t, n) => format!("{}[{n}]", t.name()),
            CType::Record(r) => r.name.clone(),
            CType::Enum(e) => e.name.clone(),
            CType::Float(b) => if *b == 4 { "float" } else { "double" }.into(),
            CType::Void => "void".into(),
            CType::Named(n) => n.clone(),
        }
    }

    /// The field `name` of a record type (looking into anonymous members),
    /// with its offset from the record's start.
    pub fn field(&self, name: &str) -> Option<Member> {
        let CType::Record(r) = self else {
            return None;
        };
        for f in &r.fields {
            if f.name == name {
                return Some((f.ty.clone(), f.offset, f.bits));
            }
            if f.name.is_empty()
                && let Some((t, off, bits)) = f.ty.field(name)
            {
                return Some((t, f.offset + off, bits));
            }
        }
        None
    }
}

/// The integer type a C or bpftrace type name denotes (`unsigned int`,
/// `uint8_t`, `u32`, `long long`, `size_t`...).
pub fn base_type(name: &str) -> Option<CType> {
    let words: Vec<&str> = name.split_whitespace().collect();
    let int = |signed, bytes| Some(CType::Int { signed, bytes });
    if let [one] = words[..] {
        let v = match one {
            "int8" | "s8" | "int8_t" | "__s8" => int(true, 1),
            "uint8" | "u8" | "uint8_t" | "__u8" | "bool" | "_Bool" => int(false, 1),
            "int16" | "s16" | "int16_t" | "__s16" => int(true, 2),
            "uint16" | "u16" | "uint16_t" | "__u16" => int(false, 2),
            "int32" | "s32" | "int32_t" | "__s32" | "pid_t" | "uid_t" | "gid_t" => int(true, 4),
            "uint32" | "u32" | "uint32_t" | "__u32" => int(false, 4),
            "int64" | "s64" | "int64_t" | "__s64" | "ssize_t" | "off_t" | "intptr_t" => {
                int(true, 8)
            }
            "uint64" | "u64" | "uint64_t" | "__u64" | "size_t" | "uintptr_t" => int(false, 8),
            "float" => Some(CType::Float(4)),
            "double" => Some(CType::Float(8)),
            "void" => Some(CType::Void),
            _ => None,
        };
        if v.is_some() {
            return v;
        }
    }
    // C's multi-word integer names.
    let mut signed = None;
    let (mut chars, mut shorts, mut ints, mut longs) = (0, 0, 0, 0);
    for w in &words {
        match *w {
            "signed" | "__signed__" => signed = Some(true),
            "unsigned" => signed = Some(false),
            "char" => chars += 1,
            "short" => shorts += 1,
            "int" => ints += 1,
            "long" => longs += 1,
            "const" | "volatile" => {}
            _ => return None,
        }
    }
    if chars + shorts + ints + longs == 0 && signed.is_none() {
        return None;
    }
    let bytes = if chars > 0 {
        1
    } else if shorts > 0 {
        2
    } else if longs > 0 {
        8
    } else {
        4
    };
    let _ = ints;
    int(signed.unwrap_or(true), bytes)
}

/// Lays out the members of a record: `(name, type, bit width)` in order.
pub fn layout(name: String, union: bool, members: Vec<(String, CType, Option<u32>)>) -> Record {
    let mut fields = Vec::new();
    let mut bit = 0u64; // current position in bits (structs)
    let mut size = 0u64;
    let mut align = 1u32;
    for (fname, ty, width) in members {
        let a = ty.align().max(1);
        let sz = ty.size() as u64;
        align = align.max(a);
        if union {
            size = size.max(sz);
            fields.push(Field {
                name: fname,
                ty,
                offset: 0,
                bits: width.map(|w| (0, w)),
                by_ref: false,
            });
            continue;
        }
        match width {
            Some(w) => {
                // A bitfield shares its declared type's aligned unit while
                // it fits there (gcc, System V).
                let unit = (sz * 8).max(8);
                let w = w as u64;
                if w == 0 {
                    bit = bit.div_ceil(unit) * unit;
                    continue;
                }
                if (bit % unit) + w > unit {
                    bit = bit.div_ceil(unit) * unit;
                }
                let byte = bit / 8;
                fields.push(Field {
                    name: fname,
                    ty,
                    offset: byte as u32,
                    bits: Some(((bit % 8) as u32, w as u32)),
                    by_ref: false,
                });
                bit += w;
            }
            None => {
                let byte = (bit.div_ceil(8)).div_ceil(a as u64) * a as u64;
                fields.push(Field {
                    name: fname,
                    ty,
                    offset: byte as u32,
                    bits: None,
                    by_ref: false,
                });
                bit = (byte + sz) * 8;
            }
        }
        size = size.max(bit.div_ceil(8));
    }
    let size = size.div_ceil(align as u64) * align as u64;
    Record {
        name,
        union,
        size: size.min(u32::MAX as u64) as u32,
        align,
        fields,
    }
}

/// The named types a program knows: its own definitions, then what the
/// binaries' DWARF adds when a name is first used.
#[derive(Default, Debug)]
pub struct Types {
    /// `struct Foo`, `union N`, `enum E` by their full names.
    pub named: HashMap<String, CType>,
    /// Enumerators by name: the enum and the value.
    pub enumerators: HashMap<String, (Rc<EnumDef>, i64)>,
}

impl Types {
    /// Adds an enum and its enumerators.
    pub fn add_enum(&mut self, e: Rc<EnumDef>) {
        for (n, v) in &e.values {
            self.enumerators.insert(n.clone(), (e.clone(), *v));
        }
        if e.name != "enum" {
            self.named.insert(e.name.clone(), CType::Enum(e));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int(bytes: u8) -> CType {
        CType::Int {
            signed: true,
            bytes,
        }
    }

    #[test]
    fn records_are_laid_out_as_gcc_does() {
        // struct A { int32_t a; int32_t b; char c[28] } is 36 bytes.
        let r = layout(
            "struct A".into(),
            false,
            vec![
                ("a".into(), int(4), None),
                ("b".into(), int(4), None),
                ("c".into(), CType::Array(Box::new(int(1)), 28), None),
            ],
        );
        assert_eq!(r.size, 36);
        // struct Foo { int x; char c; } is 8; struct { char c; long l; } 16.
        let r = layout(
            "s".into(),
            false,
            vec![("x".into(), int(4), None), ("c".into(), int(1), None)],
        );
        assert_eq!(r.size, 8);
        let r = layout(
            "s".into(),
            false,
            vec![("c".into(), int(1), None), ("l".into(), int(8), None)],
        );
        assert_eq!((r.size, r.fields[1].offset), (16, 8));
        // unsigned int a:4, b:8, c:3, d:1, e:16: one 4-byte unit.
        let u = CType::Int {
            signed: false,
            bytes: 4,
        };
        let r = layout(
            "bits".into(),
            false,
            ["a", "b", "c", "d", "e"]
                .iter()
                .zip([4, 8, 3, 1, 16])
                .map(|(n, w)| (n.to_string(), u.clone(), Some(w)))
                .collect(),
        );
        assert_eq!(r.size, 4);
        assert_eq!(r.fields[4].offset * 8 + r.fields[4].bits.unwrap().0, 16);
        assert_eq!(
            base_type("unsigned long long"),
            Some(CType::Int {
                signed: false,
                bytes: 8
            })
        );
        assert_eq!(
            base_type("uint8_t"),
            Some(CType::Int {
                signed: false,
                bytes: 1
            })
        );
        assert_eq!(base_type("struct"), None);
    }
}
