use super::syntax::parse_location;
use super::*;
use crate::record::{DecodeError, DecodeErrorKind};
use alloc::{format, vec};

fn sample() -> Manifest {
    let mut p = ProbeSpec::breakpoint(
        "probe0",
        Location {
            kind: LocationKind::Offset,
            symbol: Some("target_fn".into()),
            addend: 1,
        },
    );
    p.value = Some(0x401147);
    p.opcode = Some(0x48);
    p.group = Some("g1".into());
    let mut w = ProbeSpec::breakpoint(
        "probe1",
        Location {
            kind: LocationKind::Address,
            symbol: None,
            addend: 0x404078,
        },
    );
    w.kind = ProbeKind::WatchWrite;
    w.length = 8;
    w.maxhits = 2;
    w.module = Some("/lib/libc.so.6".into());
    let b = ProbeSpec::special("begin0", Trigger::Begin);
    let i = ProbeSpec::special(
        "tick",
        Trigger::Interval {
            period_ns: 1_000_000,
        },
    );
    let mut r = ProbeSpec::breakpoint(
        "probe2",
        Location {
            kind: LocationKind::Offset,
            symbol: Some("target_fn".into()),
            addend: 0,
        },
    );
    r.r#return = true;
    r.maxactive = 8;
    r.args = alloc::vec![
        ArgSource::Reg(crate::regs::RAX),
        ArgSource::Entry(crate::regs::RSP),
        ArgSource::Elapsed,
    ];
    Manifest {
        module: "probe_target".into(),
        major: 13,
        groups: alloc::vec!["g1".into(), "g2".into()],
        probes: alloc::vec![p, w, r, b, i],
        maps: alloc::vec![
            MapDecl {
                name: "@".into(),
                kind: MapKind::Count,
                key: alloc::vec![Layout::U64, Layout::Str(16)],
                value: None,
                max_keys: 10,
                lhist: None,
                hist_bits: 0,
            },
            MapDecl {
                name: "@h".into(),
                kind: MapKind::Hist,
                key: alloc::vec![Layout::U64],
                value: None,
                max_keys: 10,
                lhist: None,
                hist_bits: 3,
            },
            MapDecl {
                name: "@lat".into(),
                kind: MapKind::Lhist,
                key: alloc::vec![],
                value: None,
                max_keys: 1,
                lhist: Some((0, 100, 10)),
                hist_bits: 0,
            },
            MapDecl {
                name: "@s".into(),
                kind: MapKind::Assign,
                key: alloc::vec![Layout::I64],
                value: Some(Layout::Str(64)),
                max_keys: 4096,
                lhist: None,
                hist_bits: 0,
            },
        ],
        ..Manifest::default()
    }
}

#[test]
fn round_trip() {
    let m = sample();
    let text = m.encode();
    assert_eq!(Manifest::decode(text.as_bytes()), Ok(m));
}

#[test]
fn usdt_keys_round_trip() {
    let mut m = sample();
    let args = crate::usdt::parse_args(
        "-4@%eax 8@-16(%rbp) 8@$3 -4@0x4010 1@8(%rax,%rdx,4)",
        &mut |_| None,
    )
    .unwrap();
    m.probes[0].usdt_args = args;
    m.probes[0].semaphore = Some(0x4050);
    let text = m.encode();
    assert!(
        text.contains(
            "  usdt_args -4@%rax 8@-16(%rbp) 8@$3 -4@0x4010 1@8(%rax,%rdx,4)\n  semaphore 0x4050\n"
        ),
        "{text}"
    );
    assert_eq!(Manifest::decode(text.as_bytes()), Ok(m));
    // A probe named by `usdt`, without a location.
    let named = "wprobe-manifest 1\nabi 4\nmodule m\nprobe p\n  usdt python:function__entry\n";
    let m = Manifest::decode(named.as_bytes()).unwrap();
    assert_eq!(
        m.probes[0].usdt_probe.as_deref(),
        Some("python:function__entry")
    );
    assert!(m.encode().contains("  usdt python:function__entry\n"));
    assert!(
        Manifest::decode(b"wprobe-manifest 1\nabi 4\nmodule m\nprobe p\n  usdt nocolon\n").is_err()
    );
    let head = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n  location offset f\n";
    let t = alloc::format!("{head}  usdt_args 3@%eax\n");
    assert_eq!(
        Manifest::decode(t.as_bytes()),
        Err(DecodeError::new(
            t.find("  usdt_args").unwrap(),
            DecodeErrorKind::BadValue
        ))
    );
}

#[test]
fn return_probe_keys() {
    let text = sample().encode();
    assert!(text.contains("probe probe2\n"), "{text}");
    assert!(text.contains("  return yes\n  maxactive 8\n"), "{text}");
    // Non-return probes write neither key.
    assert_eq!(text.matches("return").count(), 1, "{text}");
    let head = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n  location offset f\n";
    let m = Manifest::decode(alloc::format!("{head}  return yes\n").as_bytes()).unwrap();
    assert!(m.probes[0].r#return);
    assert_eq!(m.probes[0].maxactive, 0);
    assert_eq!(m.probes[0].maxactive_or_default(), DEFAULT_MAXACTIVE);
    let m = Manifest::decode(alloc::format!("{head}  return no\n").as_bytes()).unwrap();
    assert!(!m.probes[0].r#return);
    // `maxactive` before `return yes` is fine; the rules hold per probe.
    let ok = alloc::format!("{head}  maxactive 4096\n  return yes\n");
    assert_eq!(
        Manifest::decode(ok.as_bytes()).unwrap().probes[0].maxactive,
        4096
    );
    let bad = |tail: &str| {
        let t = alloc::format!("{head}{tail}");
        Manifest::decode(t.as_bytes()).map(|_| ())
    };
    let at = |tail: &str, line: &str| {
        let t = alloc::format!("{head}{tail}");
        Err(DecodeError::new(
            t.find(line).unwrap(),
            DecodeErrorKind::BadValue,
        ))
    };
    assert_eq!(
        bad("  return yes\n  maxactive 4097\n"),
        at("  return yes\n  maxactive 4097\n", "  maxactive")
    );
    assert_eq!(bad("  maxactive 3\n"), at("  maxactive 3\n", "  maxactive"));
    assert_eq!(
        bad("  maxactive 3\n  return no\n"),
        at("  maxactive 3\n  return no\n", "  maxactive")
    );
    assert_eq!(bad("  maxactive 0\n"), Ok(()));
    assert_eq!(
        bad("  return yes\n  watch w\n"),
        at("  return yes\n  watch w\n", "  return")
    );
    assert_eq!(bad("  return maybe\n"), at("  return maybe\n", "  return"));
}

#[test]
fn handler_args() {
    let text = sample().encode();
    assert!(
        text.contains("  maxactive 8\n  args rax entry.rsp elapsed\n"),
        "{text}"
    );
    assert_eq!(text.matches("  args").count(), 1, "{text}");
    let head = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n  location offset f\n";
    let args = |tail: &str| {
        let t = alloc::format!("{head}{tail}");
        Manifest::decode(t.as_bytes()).map(|m| m.probes[0].args.clone())
    };
    use crate::regs::{RDI, RSI, RSP};
    const EAX: u16 = 0x106;
    assert_eq!(
        args("  args rdi RSI eax rsp\n"),
        Ok(alloc::vec![
            ArgSource::Reg(RDI),
            ArgSource::Reg(RSI),
            ArgSource::Reg(EAX),
            ArgSource::Reg(RSP)
        ])
    );
    assert_eq!(args("  args\n"), Ok(alloc::vec![]));
    assert_eq!(
        args("  return yes\n  args entry.rdi elapsed rax\n"),
        Ok(alloc::vec![
            ArgSource::Entry(RDI),
            ArgSource::Elapsed,
            ArgSource::Reg(crate::regs::RAX)
        ])
    );
    // `args` before `return yes` is fine too.
    assert!(args("  args entry.rsp\n  return yes\n").is_ok());
    let at = |tail: &str, line: &str| {
        let t = alloc::format!("{head}{tail}");
        Err(DecodeError::new(
            t.find(line).unwrap(),
            DecodeErrorKind::BadValue,
        ))
    };
    for tail in [
        // Entry state and duration only in a return probe.
        "  args rdi elapsed\n",
        "  args entry.rdi\n  return no\n",
        // Not an argument register at the entry, not a register.
        "  return yes\n  args entry.rax\n",
        "  args rdi cr0\n",
        "  args cpuid\n",
        "  args rdi,rsi\n",
        // Seven.
        "  args rdi rsi rdx rcx r8 r9 rax\n",
    ] {
        assert_eq!(args(tail), at(tail, "  args"), "{tail}");
    }
}

#[test]
fn negative_addend_round_trips() {
    let loc = parse_location("address main-0x8").unwrap();
    assert_eq!(loc.addend, 8u64.wrapping_neg());
    assert_eq!(loc.render(), "main-0x8");
}

#[test]
fn errors_carry_line_offsets() {
    let text = "wprobe-manifest 1\nabi 1\nmodule m\nmajor 0\n";
    assert_eq!(
        Manifest::decode(text.as_bytes()),
        Err(DecodeError::new(33, DecodeErrorKind::BadValue))
    );
    let text = "wprobe-manifest 2\n";
    assert_eq!(
        Manifest::decode(text.as_bytes()).unwrap_err().kind,
        DecodeErrorKind::UnsupportedVersion(2)
    );
    let text = "wprobe-manifest 1\nabi 1\nmodule m\nprobe p\n";
    assert!(
        Manifest::decode(text.as_bytes()).is_err(),
        "probe without location"
    );
}

#[test]
fn every_prefix_and_flip_is_handled() {
    let text = sample().encode();
    let bytes = text.as_bytes();
    for cut in 0..bytes.len() {
        let _ = Manifest::decode(&bytes[..cut]);
    }
    for i in 0..bytes.len() {
        let mut b = bytes.to_vec();
        b[i] ^= 0xA5;
        let _ = Manifest::decode(&b);
    }
}

/// A location renders as `{:#x}` and `sym±{:#x}` would write it, for
/// addends across the range (0, one digit, every width, the extremes).
#[test]
fn locations_render_as_formatted() {
    let mut values = vec![
        0u64,
        1,
        9,
        0xa,
        0xf,
        0x10,
        u64::MAX,
        i64::MAX as u64,
        1 << 63,
    ];
    values.extend((0..64).map(|k| 1u64 << k));
    values.extend((1..16).map(|k| 0x0123_4567_89ab_cdefu64 >> (4 * k)));
    for v in values {
        let hex = Location {
            kind: LocationKind::Offset,
            symbol: None,
            addend: v,
        };
        assert_eq!(hex.render(), format!("{v:#x}"));
        let sym = Location {
            kind: LocationKind::Address,
            symbol: Some("f".into()),
            addend: v,
        };
        let a = v as i64;
        let want = match a {
            0 => "f".to_string(),
            a if a > 0 => format!("f+{a:#x}"),
            a => format!("f-{:#x}", a.unsigned_abs()),
        };
        assert_eq!(sym.render(), want);
    }
}
