//! The functions of a module, the one rule every command picks functions
//! by: `wprobe list`, `wprobe trace` and the one-liners' uprobes.
//!
//! A function is an address where code starts: the code symbols
//! (`STT_FUNC`, `STT_GNU_IFUNC`) with that value, its *aliases*, and the
//! ranges of the unwind table that no symbol names (a stripped program's
//! functions, a library's static ones, the implementations of its
//! IFUNCs: *unnamed* functions). Its aliases are in one order of
//! preference, the name a function goes by when it needs one name: a
//! global symbol before a local one, then the fewest leading underscores
//! (the public name before the internal ones: `open64` before `__open`),
//! then the shortest name, then the first in name order. A *fragment* is
//! a part of a function the compiler moved away from it (GCC's
//! `NAME.cold`, or an unwind table entry that starts inside a frame),
//! entered by a jump: not a function of its own.
//!
//! Each command chooses from these:
//!
//! * `wprobe trace` traces one function per address, under its preferred
//!   name, fragments left out, unnamed functions included (`sub_ADDR`);
//! * `ustack`, `usym` and `func` print an address by its function's
//!   preferred name;
//! * `wprobe list` and `bpftrace -l` list one row per name (per alias);
//! * a one-liner's `uprobe:BIN:GLOB` places a probe on each matching
//!   name, as bpftrace does: two aliases of one address make two probes.
//!
//! A [`Matcher`] tests a pattern against every alias of a function, raw
//! and in the demangled forms a command shows.

use crate::info::{ElfInfo, SymKind, Symbol};

/// One function of a module.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Function {
    /// Link-time address of its entry.
    pub start: u64,
    /// Its size in bytes: its preferred symbol's (0 when the symbol
    /// table does not say), or its unwind table entry's when no symbol
    /// names it.
    pub size: u64,
    /// Its preferred symbol's kind ([`SymKind::Func`] when unnamed).
    pub kind: SymKind,
    /// The code symbols that start here, preferred first (global before
    /// local, then the fewest leading underscores, then the shortest
    /// name, then name order); empty for a function no symbol names.
    pub aliases: Vec<Symbol>,
    /// A part of a function moved away from it (its preferred name is
    /// `NAME.cold`, or its unwind table entry starts inside a frame).
    pub fragment: bool,
}

impl Function {
    /// The symbol it goes by (see [`Function::aliases`]); `None` when no
    /// symbol names it.
    pub fn symbol(&self) -> Option<&Symbol> {
        self.aliases.first()
    }

    /// The name it goes by; `None` when no symbol names it.
    pub fn name(&self) -> Option<&str> {
        self.symbol().map(|s| s.name.as_str())
    }

    /// Whether no symbol names it (only its unwind table entry bounds it).
    pub fn is_unnamed(&self) -> bool {
        self.aliases.is_empty()
    }

    /// The names of its symbols, preferred first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.aliases.iter().map(|s| s.name.as_str())
    }
}

/// The order of preference of two aliases of one function, the
/// preferred first.
fn preferred(a: &Symbol, b: &Symbol) -> std::cmp::Ordering {
    let key = |s: &'_ Symbol| {
        let underscores = s.name.len() - s.name.trim_start_matches('_').len();
        (!s.global, underscores, s.name.len())
    };
    key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
}

/// The functions of `elf`, by address (see the [module](self) docs):
/// every code symbol as an alias of the function at its value, and the
/// functions only the unwind table bounds.
pub fn of(elf: &ElfInfo) -> Vec<Function> {
    group(
        &elf.symbols,
        &elf.unnamed_functions(),
        elf.fragment_starts(),
    )
}

/// The functions of `elf` its symbols name, by address: [`of`] without
/// reading the unwind table (a parse of all of `.eh_frame`), for the
/// commands that want names only (`wprobe list`, a one-liner's uprobes,
/// symbolization): no unnamed functions, and a fragment told by its name
/// only (`NAME.cold`).
pub fn named(elf: &ElfInfo) -> Vec<Function> {
    group(&elf.symbols, &[], &[])
}

/// The functions named by the code symbols among `symbols` and those
/// `unnamed` bounds (`[start, end)`) where no code symbol starts, by
/// address; a function whose start is in `fragment_starts` (sorted), or
/// whose preferred name is a fragment's, is a fragment.
pub fn group(symbols: &[Symbol], unnamed: &[(u64, u64)], fragment_starts: &[u64]) -> Vec<Function> {
    let mut code: Vec<&Symbol> = symbols.iter().filter(|s| s.is_code()).collect();
    code.sort_by(|a, b| a.value.cmp(&b.value).then_with(|| preferred(a, b)));
    let is_fragment_start = |v: u64| fragment_starts.binary_search(&v).is_ok();
    let mut out: Vec<Function> = Vec::new();
    for s in code {
        match out.last_mut() {
            Some(f) if f.start == s.value => f.aliases.push(s.clone()),
            _ => out.push(Function {
                start: s.value,
                size: s.size,
                kind: s.kind,
                fragment: crate::unwind::is_fragment_name(&s.name) || is_fragment_start(s.value),
                aliases: vec![s.clone()],
            }),
        }
    }
    let named_end = out.len();
    for &(start, end) in unnamed {
        // A symbol without a size names it (crtstuff's `frame_dummy`).
        if out[..named_end]
            .binary_search_by_key(&start, |f| f.start)
            .is_ok()
        {
            continue;
        }
        out.push(Function {
            start,
            size: end.saturating_sub(start),
            kind: SymKind::Func,
            aliases: Vec::new(),
            fragment: is_fragment_start(start),
        });
    }
    out.sort_by_key(|f| f.start);
    out
}

/// A form of a symbol's name a pattern may be tested against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameForm {
    /// The symbol as it is in the file (`_ZN2ns1fEi`).
    Raw,
    /// Demangled in full ([`crate::demangle()`]: `ns::f(int)`).
    Demangled,
    /// Demangled without parameters, return type or template arguments
    /// ([`crate::demangle_short()`]: `ns::f`).
    Short,
    /// A C++ name demangled without its parameters (`ns::f<int>`), as
    /// bpftrace's `uprobe:BIN:cpp:NAME` probes match; nothing for a name
    /// that is not mangled C++ ([`cpp_name`]).
    Cpp,
}

impl NameForm {
    /// `name` in this form; `None` when it has none (a C name's
    /// [`NameForm::Cpp`]).
    pub fn of(self, name: &str) -> Option<std::borrow::Cow<'_, str>> {
        match self {
            NameForm::Raw => Some(std::borrow::Cow::Borrowed(name)),
            NameForm::Demangled => Some(crate::demangle(name)),
            NameForm::Short => Some(crate::demangle_short(name)),
            NameForm::Cpp => cpp_name(name).map(std::borrow::Cow::Owned),
        }
    }
}

/// The C++ name `symbol` (Itanium-mangled, `_Z…`) demangled without its
/// parameters: `ns::f<int>` for `ns::f<int>(int)` (bpftrace's `cpp:`
/// probes); `None` for a name that is not mangled C++.
pub fn cpp_name(symbol: &str) -> Option<String> {
    if !symbol.starts_with("_Z") {
        return None;
    }
    let d = crate::demangle(symbol);
    if d == symbol {
        return None;
    }
    // The parameters open at the first `(` outside template arguments.
    let mut depth = 0i32;
    for (i, c) in d.char_indices() {
        match c {
            '<' => depth += 1,
            '>' => depth -= 1,
            '(' if depth == 0 => return Some(d[..i].to_string()),
            _ => {}
        }
    }
    Some(d.into_owned())
}

/// A glob ([`crate::glob()`]) tested against names in some forms: a name
/// matches when any of its forms does, a function when any of its
/// aliases does.
#[derive(Clone, Copy, Debug)]
pub struct Matcher<'p> {
    pattern: &'p str,
    forms: &'p [NameForm],
}

impl<'p> Matcher<'p> {
    /// A matcher of `pattern` against the `forms` of each name.
    pub fn new(pattern: &'p str, forms: &'p [NameForm]) -> Matcher<'p> {
        Matcher { pattern, forms }
    }

    /// Whether `name` matches in one of the forms.
    pub fn matches_name(&self, name: &str) -> bool {
        self.forms
            .iter()
            .any(|form| form.of(name).is_some_and(|n| crate::glob(self.pattern, &n)))
    }

    /// The aliases of `f` whose name matches, preferred first.
    pub fn matching<'f>(&self, f: &'f Function) -> impl Iterator<Item = &'f Symbol> {
        let m = *self;
        f.aliases.iter().filter(move |s| m.matches_name(&s.name))
    }

    /// Whether a name of `f` matches.
    pub fn matches(&self, f: &Function) -> bool {
        self.matching(f).next().is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sym(name: &str, value: u64, size: u64, global: bool) -> Symbol {
        Symbol {
            name: name.into(),
            value,
            size,
            kind: SymKind::Func,
            global,
            dynamic: false,
        }
    }

    fn names(f: &Function) -> Vec<&str> {
        f.names().collect()
    }

    #[test]
    fn aliases_are_one_function_global_then_public_then_shortest_then_name_order() {
        let mut data = sym("table", 0x100, 8, true);
        data.kind = SymKind::Object;
        let symbols = vec![
            sym("__GI_open", 0x200, 0x40, false),
            sym("open64", 0x200, 0x40, true),
            sym("__open", 0x200, 0x40, true),
            sym("open", 0x200, 0x40, true),
            sym("_o", 0x200, 0x40, true),
            sym("helper", 0x300, 0x10, false),
            sym("z", 0x400, 0x10, true),
            sym("a", 0x400, 0x10, true),
            data,
        ];
        let fs = group(&symbols, &[], &[]);
        assert_eq!(fs.len(), 3, "{fs:?}");
        assert_eq!(fs[0].start, 0x200);
        assert_eq!(
            names(&fs[0]),
            ["open", "open64", "_o", "__open", "__GI_open"]
        );
        assert_eq!(fs[0].name(), Some("open"));
        assert_eq!(fs[0].size, 0x40);
        // A local symbol names its function when it is the only one.
        assert_eq!(fs[1].name(), Some("helper"));
        // Same length: name order.
        assert_eq!(names(&fs[2]), ["a", "z"]);
        assert!(fs.iter().all(|f| !f.fragment && !f.is_unnamed()));
    }

    #[test]
    fn a_local_symbol_yields_to_a_longer_global_one() {
        let fs = group(
            &[sym("f", 0x10, 4, false), sym("longer_name", 0x10, 4, true)],
            &[],
            &[],
        );
        assert_eq!(names(&fs[0]), ["longer_name", "f"]);
    }

    #[test]
    fn fragments_by_name_or_by_unwind_entry() {
        let symbols = vec![
            sym("main", 0x100, 0x40, true),
            sym("main.cold", 0x900, 0x10, false),
            sym("moved", 0xa00, 0x10, false),
        ];
        let fs = group(&symbols, &[], &[0xa00]);
        let frag: Vec<(Option<&str>, bool)> = fs.iter().map(|f| (f.name(), f.fragment)).collect();
        assert_eq!(
            frag,
            [
                (Some("main"), false),
                (Some("main.cold"), true),
                (Some("moved"), true)
            ]
        );
    }

    #[test]
    fn unnamed_functions_where_no_code_symbol_starts() {
        let mut ifunc = sym("strlen", 0x500, 0x20, true);
        ifunc.kind = SymKind::Ifunc;
        let symbols = vec![
            sym("frame_dummy", 0x100, 0, false),
            sym("main", 0x200, 0x40, true),
            ifunc,
        ];
        // The unwind table: frame_dummy's (named, without a size), two no
        // symbol names, one a fragment.
        let unnamed = [(0x100, 0x110), (0x300, 0x330), (0x600, 0x608)];
        let fs = group(&symbols, &unnamed, &[0x600]);
        let got: Vec<(u64, Option<&str>, u64, SymKind, bool)> = fs
            .iter()
            .map(|f| (f.start, f.name(), f.size, f.kind, f.fragment))
            .collect();
        assert_eq!(
            got,
            [
                (0x100, Some("frame_dummy"), 0, SymKind::Func, false),
                (0x200, Some("main"), 0x40, SymKind::Func, false),
                (0x300, None, 0x30, SymKind::Func, false),
                (0x500, Some("strlen"), 0x20, SymKind::Ifunc, false),
                (0x600, None, 8, SymKind::Func, true),
            ]
        );
        assert!(fs[2].is_unnamed() && fs[2].symbol().is_none());
    }

    #[test]
    fn a_pattern_matches_any_alias_raw_or_demangled() {
        let symbols = vec![
            sym("_ZN2ns3getEi", 0x100, 8, true),
            sym("ns_get_alias", 0x100, 8, false),
            sym("_ZN2ns3BoxIiE3setEi", 0x200, 8, true),
            sym("plain", 0x300, 8, true),
        ];
        let fs = group(&symbols, &[(0x400, 0x410)], &[]);
        let hits = |pat: &str, forms: &[NameForm]| -> Vec<u64> {
            let m = Matcher::new(pat, forms);
            fs.iter()
                .filter(|f| m.matches(f))
                .map(|f| f.start)
                .collect()
        };
        use NameForm::*;
        assert_eq!(hits("ns::get*", &[Raw]), [] as [u64; 0]);
        assert_eq!(hits("ns::get*", &[Raw, Demangled]), [0x100]);
        assert_eq!(hits("ns::get(int)", &[Demangled]), [0x100]);
        assert_eq!(hits("ns::get", &[Short]), [0x100]);
        // The alias that is not the preferred name.
        assert_eq!(hits("ns_get_*", &[Raw]), [0x100]);
        assert_eq!(hits("ns::Box<int>::set", &[Cpp]), [0x200]);
        assert_eq!(hits("ns::Box::set", &[Short]), [0x200]);
        assert_eq!(hits("ns::Box<int>::set(int)", &[Demangled]), [0x200]);
        // A C name has no C++ form.
        assert_eq!(hits("plain", &[Cpp]), [] as [u64; 0]);
        assert_eq!(hits("plain", &[Raw, Cpp]), [0x300]);
        // An unnamed function has no name to match.
        assert_eq!(hits("*", &[Raw]), [0x100, 0x200, 0x300]);
        let m = Matcher::new("ns*", &[Raw, Demangled]);
        let which: Vec<&str> = m.matching(&fs[0]).map(|s| s.name.as_str()).collect();
        assert_eq!(which, ["_ZN2ns3getEi", "ns_get_alias"]);
    }

    #[test]
    fn every_code_symbol_of_this_test_binary_is_an_alias_once() {
        let exe = std::env::current_exe().unwrap();
        let info = ElfInfo::open(&exe).unwrap();
        let fs = of(&info);
        assert!(fs.windows(2).all(|w| w[0].start < w[1].start));
        let aliases: usize = fs.iter().map(|f| f.aliases.len()).sum();
        assert_eq!(aliases, info.symbols.iter().filter(|s| s.is_code()).count());
        for f in &fs {
            assert!(f.aliases.iter().all(|s| s.value == f.start));
        }
        assert!(fs.iter().any(|f| f.name() == Some("main")));
    }
}
