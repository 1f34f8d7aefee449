//! Function parameters from DWARF (`.debug_info`), for `args.NAME` /
//! `args->NAME` and `-lv`: each parameter's name, its C type spelled as
//! bpftrace prints it (`const char *`), and how to read it. Parameters are
//! taken in order from the argument registers (rdi, rsi, rdx, rcx, r8, r9),
//! as bpftrace 0.17 does; a seventh parameter or one that is not an
//! integer or pointer cannot be read. Never panics on malformed DWARF
//! (errors give "no information").

use gimli::{AttributeValue, EndianSlice, LittleEndian, constants as c};
use goblin::elf::Elf;
use std::borrow::Cow;

/// How a parameter's value is read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamValue {
    /// An integer of `bytes` bytes (pointers, enums and integers).
    Int {
        /// Signed.
        signed: bool,
        /// Bytes (1, 2, 4, 8).
        bytes: u8,
    },
    /// Not readable from a register (floating point, structures by value).
    Unsupported,
}

/// One parameter.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Param {
    /// Its name.
    pub name: String,
    /// Its type as bpftrace prints it.
    pub type_name: String,
    /// How it is read.
    pub value: ParamValue,
    /// Its C type (`None`: one wprobe does not model).
    pub ctype: Option<crate::ctypes::CType>,
    /// A C++ reference (`int &x`): `ctype` is a pointer to what it refers
    /// to, and `args.NAME` is that object.
    pub by_ref: bool,
}

type R<'a> = EndianSlice<'a, LittleEndian>;

/// The DWARF sections of an ELF file.
pub struct Debug<'a> {
    dwarf: gimli::Dwarf<R<'a>>,
}

impl<'a> Debug<'a> {
    /// Loads the DWARF sections of `bytes` (`None` without `.debug_info`).
    pub fn load(bytes: &'a [u8]) -> Option<Debug<'a>> {
        let elf = Elf::parse(bytes).ok()?;
        let section = |name: &str| -> &'a [u8] {
            elf.section_headers
                .iter()
                .find(|s| elf.shdr_strtab.get_at(s.sh_name) == Some(name))
                .filter(|s| s.sh_type != goblin::elf::section_header::SHT_NOBITS)
                .and_then(|s| {
                    let start = s.sh_offset as usize;
                    bytes.get(start..start.checked_add(s.sh_size as usize)?)
                })
                .unwrap_or(&[])
        };
        if section(".debug_info").is_empty() {
            return None;
        }
        let load = |id: gimli::SectionId| -> Result<R<'a>, ()> {
            Ok(EndianSlice::new(section(id.name()), LittleEndian))
        };
        let dwarf = gimli::Dwarf::load(load).ok()?;
        Some(Debug { dwarf })
    }

    /// The parameters of function `name` (its first definition), or `None`
    /// when the DWARF does not describe it.
    pub fn params(&self, name: &str) -> Option<Vec<Param>> {
        let mut units = self.dwarf.units();
        while let Ok(Some(h)) = units.next() {
            let Ok(unit) = self.dwarf.unit(h) else {
                continue;
            };
            let mut cur = unit.entries();
            let mut found = None;
            let mut guard = 0u32;
            while let Ok(Some(e)) = cur.next_dfs() {
                guard += 1;
                if guard > 5_000_000 {
                    break;
                }
                // C++: by its mangled (linkage) name too, which a
                // definition out of its namespace or class has on the
                // declaration it specifies.
                let named_in = |d: &gimli::DebuggingInformationEntry<R<'a>>| {
                    [
                        c::DW_AT_name,
                        c::DW_AT_linkage_name,
                        c::DW_AT_MIPS_linkage_name,
                    ]
                    .iter()
                    .any(|at| self.name(&unit, d.attr_value(*at)).as_deref() == Some(name))
                };
                let named = || {
                    named_in(e)
                        || match e.attr_value(c::DW_AT_specification) {
                            Some(AttributeValue::UnitRef(d)) => {
                                unit.entry(d).is_ok_and(|d| named_in(&d))
                            }
                            _ => false,
                        }
                };
                if e.tag() == c::DW_TAG_subprogram
                    && e.attr_value(c::DW_AT_declaration).is_none()
                    && named()
                {
                    found = Some(e.offset());
                    break;
                }
            }
            let Some(off) = found else {
                continue;
            };
            return self.params_of(&unit, off);
        }
        None
    }

    fn name(&self, unit: &gimli::Unit<R<'a>>, v: Option<AttributeValue<R<'a>>>) -> Option<String> {
        let s = self.dwarf.attr_string(unit, v?).ok()?;
        Some(String::from_utf8_lossy(s.slice()).into_owned())
    }

    fn params_of(&self, unit: &gimli::Unit<R<'a>>, off: gimli::UnitOffset) -> Option<Vec<Param>> {
        let mut out = Vec::new();
        each_child(unit, off, c::DW_TAG_formal_parameter, |e| {
            let name = self
                .name(unit, e.attr_value(c::DW_AT_name))
                .unwrap_or_default();
            let (type_name, value, ctype, by_ref) = match e.attr_value(c::DW_AT_type) {
                Some(AttributeValue::UnitRef(t)) => {
                    let (n, v) = self.type_of(unit, t, 0);
                    (n, v, self.ctype(unit, t, 0), is_reference(unit, t))
                }
                _ => ("void".into(), ParamValue::Unsupported, None, false),
            };
            out.push(Param {
                name,
                type_name,
                value,
                ctype,
                by_ref,
            });
        })?;
        Some(out)
    }

    /// Spelling and reading of the type at `off`.
    fn type_of(
        &self,
        unit: &gimli::Unit<R<'a>>,
        off: gimli::UnitOffset,
        depth: u32,
    ) -> (String, ParamValue) {
        let unknown = ("?".to_string(), ParamValue::Unsupported);
        if depth > 16 {
            return unknown;
        }
        let Ok(e) = unit.entry(off) else {
            return unknown;
        };
        let name = self.name(unit, e.attr_value(c::DW_AT_name));
        let size = e
            .attr_value(c::DW_AT_byte_size)
            .and_then(|v| v.udata_value())
            .unwrap_or(0);
        let inner = || match e.attr_value(c::DW_AT_type) {
            Some(AttributeValue::UnitRef(t)) => self.type_of(unit, t, depth + 1),
            _ => ("void".to_string(), ParamValue::Unsupported),
        };
        let int = |bytes: u64, signed: bool| match bytes {
            1 | 2 | 4 | 8 => ParamValue::Int {
                signed,
                bytes: bytes as u8,
            },
            _ => ParamValue::Unsupported,
        };
        match e.tag() {
            c::DW_TAG_base_type => {
                let enc = match e.attr_value(c::DW_AT_encoding) {
                    Some(AttributeValue::Encoding(x)) => x,
                    _ => c::DW_ATE_signed,
                };
                let v = match enc {
                    c::DW_ATE_signed | c::DW_ATE_signed_char => int(size, true),
                    c::DW_ATE_unsigned | c::DW_ATE_unsigned_char | c::DW_ATE_boolean => {
                        int(size, false)
                    }
                    _ => ParamValue::Unsupported,
                };
                (name.unwrap_or_else(|| "?".into()), v)
            }
            c::DW_TAG_pointer_type | c::DW_TAG_reference_type | c::DW_TAG_rvalue_reference_type => {
                // bpftrace 0.23's spelling: `int *`, `char **`, `Foo &`,
                // and `int (&)[10]` for a reference to an array.
                let (t, _) = inner();
                let mark = match e.tag() {
                    c::DW_TAG_pointer_type => "*",
                    c::DW_TAG_reference_type => "&",
                    _ => "&&",
                };
                if let Some(i) = t.find('[')
                    && t.ends_with(']')
                {
                    return (format!("{} ({mark}){}", &t[..i], &t[i..]), int(8, false));
                }
                let sep = if t.ends_with(['*', '&']) { "" } else { " " };
                (format!("{t}{sep}{mark}"), int(8, false))
            }
            c::DW_TAG_const_type | c::DW_TAG_volatile_type => {
                let (t, v) = inner();
                let q = if e.tag() == c::DW_TAG_const_type {
                    "const"
                } else {
                    "volatile"
                };
                (format!("{q} {t}"), v)
            }
            c::DW_TAG_typedef => {
                let (_, v) = inner();
                (name.unwrap_or_else(|| "?".into()), v)
            }
            c::DW_TAG_enumeration_type => (
                format!("enum {}", name.unwrap_or_default()),
                int(if size == 0 { 4 } else { size }, false),
            ),
            // C++ names a class, structure or union by its name alone.
            c::DW_TAG_structure_type | c::DW_TAG_class_type | c::DW_TAG_union_type => {
                let kw = match e.tag() {
                    _ if is_cpp(unit) => "",
                    c::DW_TAG_union_type => "union ",
                    c::DW_TAG_class_type => "class ",
                    _ => "struct ",
                };
                (
                    format!("{kw}{}", name.unwrap_or_default()),
                    ParamValue::Unsupported,
                )
            }
            c::DW_TAG_array_type => {
                let (t, _) = inner();
                let dims: String = self
                    .array_dims(unit, off)
                    .iter()
                    .map(|n| {
                        if *n == 0 {
                            "[]".to_string()
                        } else {
                            format!("[{n}]")
                        }
                    })
                    .collect();
                let dims = if dims.is_empty() {
                    "[]".to_string()
                } else {
                    dims
                };
                (format!("{t}{dims}"), ParamValue::Unsupported)
            }
            _ => unknown,
        }
    }
}

/// Whether the type at `off` is a C++ reference (through typedefs and
/// qualifiers).
fn is_reference(unit: &gimli::Unit<R<'_>>, mut off: gimli::UnitOffset) -> bool {
    for _ in 0..16 {
        let Ok(e) = unit.entry(off) else {
            return false;
        };
        match e.tag() {
            c::DW_TAG_reference_type | c::DW_TAG_rvalue_reference_type => return true,
            c::DW_TAG_typedef | c::DW_TAG_const_type | c::DW_TAG_volatile_type => {
                match e.attr_value(c::DW_AT_type) {
                    Some(AttributeValue::UnitRef(t)) => off = t,
                    _ => return false,
                }
            }
            _ => return false,
        }
    }
    false
}

/// Whether `unit` is C++ (its types are then named without `struct`).
fn is_cpp(unit: &gimli::Unit<R<'_>>) -> bool {
    let mut cur = unit.entries();
    let Ok(Some(root)) = cur.next_dfs() else {
        return false;
    };
    matches!(
        root.attr_value(c::DW_AT_language),
        Some(AttributeValue::Language(
            c::DW_LANG_C_plus_plus
                | c::DW_LANG_C_plus_plus_03
                | c::DW_LANG_C_plus_plus_11
                | c::DW_LANG_C_plus_plus_14
        ))
    )
}

impl<'a> Debug<'a> {
    /// The dimensions of the array type at `off` (0: unknown).
    fn array_dims(&self, unit: &gimli::Unit<R<'a>>, off: gimli::UnitOffset) -> Vec<u32> {
        let mut dims = Vec::new();
        let _ = each_child(unit, off, c::DW_TAG_subrange_type, |ce| {
            let n = match (
                ce.attr_value(c::DW_AT_count).and_then(|v| v.udata_value()),
                ce.attr_value(c::DW_AT_upper_bound)
                    .and_then(|v| v.udata_value()),
            ) {
                (Some(n), _) => n,
                (None, Some(u)) => u + 1,
                _ => 0,
            };
            dims.push(n.min(u32::MAX as u64) as u32);
        });
        dims
    }
}

/// Calls `f` with each child of the entry at `off` tagged `tag` (a
/// function's parameters, an array's subranges, an enumeration's
/// enumerators, a record's members); `None` when the entry's tree does
/// not read.
fn each_child<'a>(
    unit: &gimli::Unit<R<'a>>,
    off: gimli::UnitOffset,
    tag: gimli::DwTag,
    mut f: impl FnMut(&gimli::DebuggingInformationEntry<R<'a>>),
) -> Option<()> {
    let mut tree = unit.entries_tree(Some(off)).ok()?;
    let root = tree.root().ok()?;
    let mut children = root.children();
    while let Ok(Some(child)) = children.next() {
        let e = child.entry();
        if e.tag() == tag {
            f(e);
        }
    }
    Some(())
}

/// How deep pointers are followed into the records they point to when a
/// type is built (a list's `next` pointer points at its own record).
const MAX_POINTER_DEPTH: u32 = 4;

impl<'a> Debug<'a> {
    /// The C type named `name` (`struct Foo`, `union U`, `enum E`, or a
    /// typedef), from its first full definition.
    pub fn find_type(&self, name: &str) -> Option<crate::ctypes::CType> {
        let (tag, bare) = match name.split_once(' ') {
            Some(("struct", n)) => (Some(c::DW_TAG_structure_type), n),
            Some(("union", n)) => (Some(c::DW_TAG_union_type), n),
            Some(("class", n)) => (Some(c::DW_TAG_class_type), n),
            Some(("enum", n)) => (Some(c::DW_TAG_enumeration_type), n),
            _ => (None, name),
        };
        let mut units = self.dwarf.units();
        while let Ok(Some(h)) = units.next() {
            let Ok(unit) = self.dwarf.unit(h) else {
                continue;
            };
            let mut cur = unit.entries();
            let mut guard = 0u32;
            while let Ok(Some(e)) = cur.next_dfs() {
                guard += 1;
                if guard > 5_000_000 {
                    break;
                }
                let t = e.tag();
                let wanted = match tag {
                    Some(w) => t == w,
                    None => {
                        t == c::DW_TAG_typedef
                            || t == c::DW_TAG_structure_type
                            || t == c::DW_TAG_class_type
                    }
                };
                if wanted
                    && e.attr_value(c::DW_AT_declaration).is_none()
                    && self.name(&unit, e.attr_value(c::DW_AT_name)).as_deref() == Some(bare)
                {
                    let off = e.offset();
                    return self.ctype(&unit, off, 0);
                }
            }
        }
        None
    }

    /// The C type at `off`; `depth` counts the pointers followed.
    fn ctype(
        &self,
        unit: &gimli::Unit<R<'a>>,
        off: gimli::UnitOffset,
        depth: u32,
    ) -> Option<crate::ctypes::CType> {
        use crate::ctypes::CType;
        let e = unit.entry(off).ok()?;
        let name = self.name(unit, e.attr_value(c::DW_AT_name));
        let size = e
            .attr_value(c::DW_AT_byte_size)
            .and_then(|v| v.udata_value())
            .unwrap_or(0);
        let inner = |d: u32| match e.attr_value(c::DW_AT_type) {
            Some(AttributeValue::UnitRef(t)) => self.ctype(unit, t, d),
            _ => Some(CType::Void),
        };
        Some(match e.tag() {
            c::DW_TAG_base_type => {
                let enc = match e.attr_value(c::DW_AT_encoding) {
                    Some(AttributeValue::Encoding(x)) => x,
                    _ => c::DW_ATE_signed,
                };
                match enc {
                    c::DW_ATE_float => CType::Float(size as u8),
                    c::DW_ATE_signed | c::DW_ATE_signed_char
                        if matches!(size, 1 | 2 | 4 | 8 | 16) =>
                    {
                        CType::Int {
                            signed: true,
                            bytes: size as u8,
                        }
                    }
                    _ if matches!(size, 1 | 2 | 4 | 8 | 16) => CType::Int {
                        signed: false,
                        bytes: size as u8,
                    },
                    _ => return None,
                }
            }
            c::DW_TAG_pointer_type | c::DW_TAG_reference_type | c::DW_TAG_rvalue_reference_type => {
                // A pointer to a named record names it (resolved where it
                // is used): records pointing at themselves stay finite.
                if let Some(AttributeValue::UnitRef(t)) = e.attr_value(c::DW_AT_type)
                    && let Ok(pe) = unit.entry(t)
                    && let Some(kw) = match pe.tag() {
                        c::DW_TAG_structure_type => Some("struct"),
                        c::DW_TAG_union_type => Some("union"),
                        c::DW_TAG_class_type => Some("class"),
                        _ => None,
                    }
                    && let Some(n) = self.name(unit, pe.attr_value(c::DW_AT_name))
                {
                    return Some(CType::Ptr(Box::new(CType::Named(format!("{kw} {n}")))));
                }
                if depth >= MAX_POINTER_DEPTH {
                    CType::Ptr(Box::new(CType::Void))
                } else {
                    CType::Ptr(Box::new(inner(depth + 1).unwrap_or(CType::Void)))
                }
            }
            c::DW_TAG_const_type | c::DW_TAG_volatile_type | c::DW_TAG_typedef => inner(depth)?,
            c::DW_TAG_array_type => {
                let elem = inner(depth)?;
                let dims = self.array_dims(unit, off);
                let mut t = elem;
                for d in dims.iter().rev() {
                    t = CType::Array(Box::new(t), *d);
                }
                t
            }
            c::DW_TAG_enumeration_type => self.enum_type(unit, off, name, size)?,
            c::DW_TAG_structure_type | c::DW_TAG_union_type | c::DW_TAG_class_type => {
                self.record_type(unit, off, e.tag(), name, size, depth)?
            }
            _ => return None,
        })
    }

    /// An enumeration type: its enumerators and their values.
    fn enum_type(
        &self,
        unit: &gimli::Unit<R<'a>>,
        off: gimli::UnitOffset,
        name: Option<String>,
        size: u64,
    ) -> Option<crate::ctypes::CType> {
        use crate::ctypes::{CType, EnumDef};
        let mut values = Vec::new();
        each_child(unit, off, c::DW_TAG_enumerator, |ce| {
            let n = self
                .name(unit, ce.attr_value(c::DW_AT_name))
                .unwrap_or_default();
            let v = match ce.attr_value(c::DW_AT_const_value) {
                Some(AttributeValue::Sdata(v)) => v,
                Some(AttributeValue::Udata(v)) => v as i64,
                Some(AttributeValue::Data1(v)) => v as i64,
                Some(AttributeValue::Data2(v)) => v as i64,
                Some(AttributeValue::Data4(v)) => v as i64,
                Some(AttributeValue::Data8(v)) => v as i64,
                _ => 0,
            };
            values.push((n, v));
        })?;
        Some(CType::Enum(std::rc::Rc::new(EnumDef {
            name: format!("enum {}", name.unwrap_or_default()),
            values,
            bytes: if matches!(size, 1 | 2 | 4 | 8) {
                size as u8
            } else {
                4
            },
        })))
    }

    /// A structure, union or class type (`tag`): its members, bit-fields
    /// and C++ reference members included; `depth` counts the pointers
    /// followed.
    fn record_type(
        &self,
        unit: &gimli::Unit<R<'a>>,
        off: gimli::UnitOffset,
        tag: gimli::DwTag,
        name: Option<String>,
        size: u64,
        depth: u32,
    ) -> Option<crate::ctypes::CType> {
        use crate::ctypes::CType;
        let union = tag == c::DW_TAG_union_type;
        let mut fields = Vec::new();
        let mut align = 1u32;
        each_child(unit, off, c::DW_TAG_member, |ce| {
            let fname = self
                .name(unit, ce.attr_value(c::DW_AT_name))
                .unwrap_or_default();
            let fty = match ce.attr_value(c::DW_AT_type) {
                Some(AttributeValue::UnitRef(t)) => self.ctype(unit, t, depth),
                _ => None,
            };
            let Some(fty) = fty else { return };
            align = align.max(fty.align());
            let byte = ce
                .attr_value(c::DW_AT_data_member_location)
                .and_then(|v| v.udata_value())
                .unwrap_or(0);
            let bits = match (
                ce.attr_value(c::DW_AT_data_bit_offset)
                    .and_then(|v| v.udata_value()),
                ce.attr_value(c::DW_AT_bit_size)
                    .and_then(|v| v.udata_value()),
            ) {
                (Some(bo), Some(w)) => Some((bo, w)),
                _ => None,
            };
            let (offset, bits) = match bits {
                Some((bo, w)) => ((bo / 8) as u32, Some(((bo % 8) as u32, w as u32))),
                None => (byte as u32, None),
            };
            let by_ref = matches!(
                ce.attr_value(c::DW_AT_type),
                Some(AttributeValue::UnitRef(t)) if is_reference(unit, t)
            );
            fields.push(crate::ctypes::Field {
                name: fname,
                ty: fty,
                offset,
                bits,
                by_ref,
            });
        })?;
        let kw = if union {
            "union"
        } else if tag == c::DW_TAG_class_type {
            "class"
        } else {
            "struct"
        };
        Some(CType::Record(std::rc::Rc::new(crate::ctypes::Record {
            name: match name {
                Some(n) => format!("{kw} {n}"),
                None => kw.to_string(),
            },
            union,
            size: size.min(u32::MAX as u64) as u32,
            align,
            fields,
        })))
    }
}

/// The parameters of `func` in the ELF file `bytes` (`None`: no DWARF for it).
pub fn function_params(bytes: &[u8], func: &str) -> Option<Vec<Param>> {
    Debug::load(bytes)?.params(func)
}

/// Lossy text of a DWARF string (for callers outside this module).
pub fn lossy(b: &[u8]) -> Cow<'_, str> {
    String::from_utf8_lossy(b)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_of_a_gcc_function() {
        let dir = std::env::temp_dir().join(format!("bt2wasm-dwarf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let src = dir.join("d.c");
        std::fs::write(
            &src,
            "struct s { int a; };\nenum e { A };\n__attribute__((noinline)) int leaf(int x, const char *s, unsigned long n, struct s *p, enum e k, char c) { return x + (int)n + s[0] + p->a + k + c; }\nint main() { struct s v = {1}; return leaf(1, \"a\", 2, &v, A, 'c'); }\n",
        )
        .unwrap();
        let out = dir.join("d");
        let ok = std::process::Command::new("gcc")
            .args(["-g", "-O0", "-o"])
            .arg(&out)
            .arg(&src)
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let bytes = std::fs::read(&out).unwrap();
        let p = function_params(&bytes, "leaf").unwrap();
        let got: Vec<(String, String)> = p
            .iter()
            .map(|p| (p.type_name.clone(), p.name.clone()))
            .collect();
        let want = [
            ("int", "x"),
            ("const char *", "s"),
            ("long unsigned int", "n"),
            ("struct s *", "p"),
            ("enum e", "k"),
            ("char", "c"),
        ];
        for (g, w) in got.iter().zip(want) {
            assert_eq!((g.0.as_str(), g.1.as_str()), w);
        }
        assert_eq!(
            p[0].value,
            ParamValue::Int {
                signed: true,
                bytes: 4
            }
        );
        assert_eq!(function_params(&bytes, "nope"), None);
        assert_eq!(function_params(b"not elf", "leaf"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
