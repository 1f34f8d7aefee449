//! Symbol names as people read them: C++ (Itanium ABI, `_Z…`) and Rust
//! (legacy `_ZN…E` with a hash, and v0 `_R…`) names demangled; anything else
//! as it is.

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

#[cfg(test)]
mod tests {
    use super::demangle;

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
}
