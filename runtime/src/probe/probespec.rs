//! `wprobe run --probe LOCATION=EXPORT`: probe points given on the command
//! line for handler modules without a manifest (hand-written WAT, modules
//! built by any wasm32 toolchain). Each spec becomes a
//! [`hostabi::manifest::ProbeSpec`] of a synthesised [`Manifest`], which then
//! resolves exactly like the manifest of a compiled `.rpn` program:
//!
//! | spec | manifest location | run-time address (spec §6.3) |
//! |---|---|---|
//! | `[MODULE:]SYMBOL[+N\|-N]=EXPORT` | `offset SYMBOL+N` | load bias + symbol value + N |
//! | `[MODULE:]NUMBER=EXPORT` | `offset NUMBER` | load bias + NUMBER (link-time address, as `objdump -d` shows it) |
//! | `[MODULE:]@NUMBER=EXPORT` | `address NUMBER` | NUMBER as is |
//! | `[MODULE:]@SYMBOL[+N\|-N]=EXPORT` | `address SYMBOL+N` | load bias + symbol value + N |
//!
//! Without `MODULE:` the probe is in the traced program's executable.
//! Parsing never panics; every rejection names the offending spec.

use hostabi::manifest::{Location, LocationKind, Manifest, ProbeSpec};

/// One parsed `--probe` argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliProbe {
    /// The module named before `:`, if any.
    pub module: Option<String>,
    /// Where the probe goes.
    pub location: Location,
    /// The handler export.
    pub export: String,
}

/// Why a `--probe` argument was refused; the message quotes the argument.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("--probe `{spec}`: {problem}")]
pub struct ProbeSpecError {
    /// The argument as given.
    pub spec: String,
    /// What is wrong with it.
    pub problem: String,
}

/// Parses `SYMBOL[+N|-N]` or `NUMBER` (the manifest's syntax).
fn location_expr(kind: LocationKind, s: &str) -> Option<Location> {
    Location::parse_expr(kind, s)
}

/// Parses one `--probe` argument.
pub fn parse(spec: &str) -> Result<CliProbe, ProbeSpecError> {
    let err = |problem: String| ProbeSpecError {
        spec: spec.to_string(),
        problem,
    };
    let Some((loc, export)) = spec.rsplit_once('=') else {
        return Err(err("expected LOCATION=EXPORT".into()));
    };
    let export = export.trim();
    if export.is_empty() {
        return Err(err("the handler export name after `=` is empty".into()));
    }
    if export.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(err(format!(
            "the handler export name `{export}` contains whitespace"
        )));
    }
    let loc = loc.trim();
    let (module, loc) = match loc.rsplit_once(':') {
        Some((m, l)) => {
            let m = m.trim();
            if m.is_empty() {
                return Err(err("the module name before `:` is empty".into()));
            }
            (Some(m.to_string()), l.trim())
        }
        None => (None, loc),
    };
    if loc.is_empty() {
        return Err(err("the location before `=` is empty".into()));
    }
    let location = match loc.strip_prefix('@') {
        Some(a) => location_expr(LocationKind::Address, a.trim()).ok_or_else(|| {
            err(format!(
                "bad address `{loc}`: expected @NUMBER or @SYMBOL[+N|-N]"
            ))
        })?,
        None => location_expr(LocationKind::Offset, loc).ok_or_else(|| {
            err(format!(
                "bad location `{loc}`: expected SYMBOL[+N|-N], a link-time NUMBER, or @ADDRESS"
            ))
        })?,
    };
    Ok(CliProbe {
        module,
        location,
        export: export.to_string(),
    })
}

/// The manifest of a module probed by `probes` (all in one module): its
/// own manifest's settings when it has one (`base`), the probes replaced,
/// `default_module` (the traced executable) where no `MODULE:` was given.
pub fn manifest(
    probes: &[CliProbe],
    base: Option<&Manifest>,
    default_module: Option<&str>,
) -> Result<Manifest, String> {
    let mut module: Option<&str> = None;
    for p in probes {
        let m = match (&p.module, default_module) {
            (Some(m), _) => m.as_str(),
            (None, Some(d)) => d,
            (None, None) => {
                return Err(format!(
                    "--probe for `{}` names no module and there is no traced executable to default to: write MODULE:LOCATION=EXPORT",
                    p.export
                ));
            }
        };
        match module {
            Some(prev) if prev != m => {
                return Err(format!(
                    "--probe: the probes of one program must be in one module, found `{prev}` and `{m}`"
                ));
            }
            _ => module = Some(m),
        }
    }
    let mut out = base.cloned().unwrap_or_default();
    out.module = module.unwrap_or_default().to_string();
    out.probes = probes
        .iter()
        .map(|p| ProbeSpec::breakpoint(&p.export, p.location.clone()))
        .collect();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(kind: LocationKind, symbol: Option<&str>, addend: u64) -> Location {
        Location {
            kind,
            symbol: symbol.map(str::to_string),
            addend,
        }
    }

    #[test]
    fn accepted_forms() {
        use LocationKind::*;
        let cases: &[(&str, Option<&str>, Location, &str)] = &[
            ("target_fn=h", None, loc(Offset, Some("target_fn"), 0), "h"),
            (
                "target_fn+0x4=h",
                None,
                loc(Offset, Some("target_fn"), 4),
                "h",
            ),
            (
                "main-8=probe0",
                None,
                loc(Offset, Some("main"), 8u64.wrapping_neg()),
                "probe0",
            ),
            ("0x401146=h", None, loc(Offset, None, 0x401146), "h"),
            ("4198726=h", None, loc(Offset, None, 4198726), "h"),
            ("@0x404040=w", None, loc(Address, None, 0x404040), "w"),
            ("@counter=w", None, loc(Address, Some("counter"), 0), "w"),
            (
                "libc.so.6:malloc=on_malloc",
                Some("libc.so.6"),
                loc(Offset, Some("malloc"), 0),
                "on_malloc",
            ),
            (
                "/usr/lib/x.so:memcpy@GLIBC_2.14+1=h",
                Some("/usr/lib/x.so"),
                loc(Offset, Some("memcpy@GLIBC_2.14"), 1),
                "h",
            ),
            (
                " target_fn = h ",
                None,
                loc(Offset, Some("target_fn"), 0),
                "h",
            ),
        ];
        for (spec, module, location, export) in cases {
            let p = parse(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            assert_eq!(p.module.as_deref(), *module, "{spec}");
            assert_eq!(&p.location, location, "{spec}");
            assert_eq!(p.export, *export, "{spec}");
        }
    }

    #[test]
    fn rejections_name_the_spec_and_the_problem() {
        let cases = [
            ("target_fn", "--probe `target_fn`: expected LOCATION=EXPORT"),
            (
                "target_fn=",
                "--probe `target_fn=`: the handler export name after `=` is empty",
            ),
            ("=h", "--probe `=h`: the location before `=` is empty"),
            ("m:=h", "--probe `m:=h`: the location before `=` is empty"),
            (
                ":f=h",
                "--probe `:f=h`: the module name before `:` is empty",
            ),
            (
                "f=a b",
                "--probe `f=a b`: the handler export name `a b` contains whitespace",
            ),
            (
                "f+zz=h",
                "--probe `f+zz=h`: bad location `f+zz`: expected SYMBOL[+N|-N], a link-time NUMBER, or @ADDRESS",
            ),
            (
                "1abc=h",
                "--probe `1abc=h`: bad location `1abc`: expected SYMBOL[+N|-N], a link-time NUMBER, or @ADDRESS",
            ),
            (
                "@=h",
                "--probe `@=h`: bad address `@`: expected @NUMBER or @SYMBOL[+N|-N]",
            ),
            (
                "@0xzz=h",
                "--probe `@0xzz=h`: bad address `@0xzz`: expected @NUMBER or @SYMBOL[+N|-N]",
            ),
        ];
        for (spec, msg) in cases {
            assert_eq!(parse(spec).unwrap_err().to_string(), msg);
        }
    }

    #[test]
    fn manifest_groups_probes_by_module() {
        let a = parse("target_fn=h1").unwrap();
        let b = parse("bump+1=h2").unwrap();
        let m = manifest(&[a.clone(), b], None, Some("/t/probe_target")).unwrap();
        assert_eq!(m.module, "/t/probe_target");
        assert_eq!(m.abi, hostabi::ABI_VERSION);
        assert_eq!(m.probes.len(), 2);
        assert_eq!(m.probes[1].location.render(), "bump+0x1");
        assert_eq!(
            Manifest::decode(m.encode().as_bytes()).unwrap(),
            m,
            "a CLI manifest is an ordinary manifest"
        );
        let c = parse("libc.so.6:malloc=h3").unwrap();
        assert_eq!(
            manifest(&[a.clone(), c], None, Some("/t/probe_target")).unwrap_err(),
            "--probe: the probes of one program must be in one module, found `/t/probe_target` and `libc.so.6`"
        );
        assert!(
            manifest(&[a], None, None)
                .unwrap_err()
                .contains("names no module")
        );
    }

    #[test]
    fn arbitrary_strings_never_panic() {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let alphabet = b"ab_:@=+-0x19 \t.$/\xc3\xa9";
        for _ in 0..20_000 {
            let mut s = Vec::new();
            for _ in 0..(x % 12) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                s.push(alphabet[(x % alphabet.len() as u64) as usize]);
            }
            let s = String::from_utf8_lossy(&s);
            let _ = parse(&s);
        }
    }
}
