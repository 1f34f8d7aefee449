//! Symbol names as people read them: C++ (Itanium ABI, `_Z…`) and Rust
//! (legacy `_ZN…E` with a hash, and v0 `_R…`) names demangled; anything else
//! as it is. Two forms: [`demangle`], the full name (`ns::f(int)`, as perf
//! and bpftrace print symbols), and [`demangle_short`], the name alone
//! (`ns::f`: no parameters, template arguments or return type, as uftrace
//! prints call trees by default).

use std::borrow::Cow;

/// The demangled form of `name`, or `name` itself.
pub fn demangle(name: &str) -> Cow<'_, str> {
    if let Ok(d) = rustc_demangle::try_demangle(name) {
        // `{:#}` leaves out the legacy hash suffix.
        return Cow::Owned(format!("{d:#}"));
    }
    if name.starts_with("_Z")
        && let Ok(sym) = cpp_demangle::Symbol::new(name)
        && let Ok(s) = sym.demangle()
    {
        return Cow::Owned(s);
    }
    Cow::Borrowed(name)
}

/// The demangled name without what distinguishes overloads and template
/// instances: no parameter list, no return type, no template arguments
/// and no ABI tags (`std::vector<int>::push_back(int const&)` is
/// `std::vector::push_back`), uftrace's default ("simple") form. GCC's
/// clone suffixes stay (`f [clone .cold]`). Rust names as [`demangle`]
/// gives them; anything else as it is.
pub fn demangle_short(name: &str) -> Cow<'_, str> {
    if !name.starts_with("_Z") || rustc_demangle::try_demangle(name).is_ok() {
        return demangle(name);
    }
    let opts = cpp_demangle::DemangleOptions::new()
        .no_params()
        .no_return_type();
    let Some(s) = cpp_demangle::Symbol::new(name)
        .ok()
        .and_then(|sym| sym.demangle_with_options(&opts).ok())
    else {
        return Cow::Borrowed(name);
    };
    let mut short = strip_templates(&s).unwrap_or(s);
    // GCC's clone suffixes (`.cold`, `.part.0`), which `no_params` drops.
    if name.contains('.')
        && let Cow::Owned(full) = demangle(name)
        && let Some(i) = full.find(" [clone ")
    {
        short.push_str(&full[i..]);
    }
    Cow::Owned(short)
}

/// Characters an operator's name is made of (`operator<<=`).
const OPERATOR_CHARS: &[char] = &[
    '<', '>', '=', '-', '!', '+', '*', '/', '%', '^', '&', '|', '~',
];

/// `s` without its template argument lists (`<…>`, nested) and ABI tags
/// (`[abi:cxx11]`); the `<` and `>` of an operator's name (`operator<<`,
/// `operator->`) stay. `None` when the brackets do not balance.
fn strip_templates(s: &str) -> Option<String> {
    let mut out = String::with_capacity(s.len());
    let mut depth = 0usize;
    let mut rest = s;
    while let Some(c) = rest.chars().next() {
        if depth == 0
            && let Some(after) = rest.strip_prefix("operator")
        {
            let ops = after
                .find(|c: char| !OPERATOR_CHARS.contains(&c))
                .unwrap_or(after.len());
            out.push_str("operator");
            out.push_str(&after[..ops]);
            rest = &after[ops..];
            continue;
        }
        if depth == 0
            && let Some(after) = rest.strip_prefix("[abi:")
        {
            let end = after.find(']')?;
            rest = &after[end + 1..];
            continue;
        }
        match c {
            '<' => depth += 1,
            '>' => depth = depth.checked_sub(1)?,
            _ if depth == 0 => out.push(c),
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    (depth == 0).then(|| out.trim_end().to_string())
}

#[cfg(test)]
mod tests {
    use super::{demangle, demangle_short};

    #[test]
    fn cpp_rust_and_c_names() {
        assert_eq!(demangle("_ZN3foo3barEv"), "foo::bar()");
        assert_eq!(
            demangle("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector<int, std::allocator<int> >::push_back(int const&)"
        );
        assert_eq!(
            demangle("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle("_RNvCs1234_7mycrate3foo"), "mycrate::foo");
        assert_eq!(demangle("malloc"), "malloc");
        assert_eq!(demangle("_Zgarbage"), "_Zgarbage");
    }

    #[test]
    fn short_names_are_uftraces_simple_form() {
        assert_eq!(demangle_short("_ZN3foo3barEv"), "foo::bar");
        assert_eq!(
            demangle_short("_ZN2ns3ns13foo4bar1Ev"),
            "ns::ns1::foo::bar1"
        );
        assert_eq!(
            demangle_short("_ZNSt6vectorIiSaIiEE9push_backERKi"),
            "std::vector::push_back"
        );
        // A function template: its return type goes too.
        assert_eq!(demangle_short("_ZSt4sortIPiEvT_S1_"), "std::sort");
        assert_eq!(demangle_short("_Znwm"), "operator new");
        assert_eq!(demangle_short("_ZdlPvm"), "operator delete");
        assert_eq!(
            demangle_short("_ZStlsISt11char_traitsIcEERSt13basic_ostreamIcT_ES5_PKc"),
            "std::operator<<"
        );
        assert_eq!(demangle_short("_ZN3FooptEv"), "Foo::operator->");
        assert_eq!(demangle_short("_ZN3FoossERKS_"), "Foo::operator<=>");
        assert_eq!(
            demangle_short("_ZNSt8ios_base4InitC1Ev"),
            "std::ios_base::Init::Init"
        );
        assert_eq!(
            demangle_short("_ZNSt8ios_base4InitD1Ev"),
            "std::ios_base::Init::~Init"
        );
        assert_eq!(
            demangle_short("_Z14std_string_retB5cxx11v"),
            "std_string_ret"
        );
        assert_eq!(demangle_short("_Z3foov.cold"), "foo [clone .cold]");
        assert_eq!(
            demangle_short("_ZN4core3fmt5write17h0123456789abcdefE"),
            "core::fmt::write"
        );
        assert_eq!(demangle_short("main"), "main");
        assert_eq!(demangle_short("foo.part.0"), "foo.part.0");
        assert_eq!(demangle_short("_Zgarbage"), "_Zgarbage");
    }
}
