//! Front-end error positions and codes (in the style of the kernel's
//! `kprobe_syntax_errors.tc`), the example programs, and a seeded
//! no-panic smoke test.
//!
//! Marker convention for the table: a line whose first non-blank character
//! is `^` is not part of the source; it says that the previous source line
//! has an error with the code written after the caret, at the caret's
//! column. Every diagnostic of the file must be marked, in order.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use rpn2wasm::ast::{Op, Program, WatchKind};
use rpn2wasm::parse::{parse_file, parse_text};
use rpn2wasm::symbols::MapSymbols;
use rpn2wasm::{Options, SourceMap};

/// Reference addresses of the example target (examples/README.md), plus a
/// few names for symbol tests.
fn symbols() -> MapSymbols {
    MapSymbols::new([
        ("target_fn", 0x401146u64),
        ("bump", 0x401191),
        ("main", 0x4011aa),
        ("greeting", 0x404040),
        ("origin", 0x404060),
        ("counter", 0x404078),
        ("Handler", 0x500000),
        ("handler", 0x500010),
        ("x", 0x600000),
    ])
}

fn opts() -> Options {
    Options {
        symbols: Some(Box::new(symbols())),
        ..Options::default()
    }
}

/// `(code, line, col)` of every diagnostic, in order.
type Found = Vec<(String, u32, u32)>;

fn positions(r: &Result<(Program, SourceMap), (rpn2wasm::Diagnostics, SourceMap)>) -> Found {
    match r {
        Ok(_) => Vec::new(),
        Err((d, map)) => {
            d.0.iter()
                .map(|d| {
                    let (l, c) = map.line_col(d.span.file, d.span.lo);
                    (d.code.to_string(), l, c)
                })
                .collect()
        }
    }
}

fn rendered(r: &Result<(Program, SourceMap), (rpn2wasm::Diagnostics, SourceMap)>) -> String {
    match r {
        Ok(_) => "(no error)".into(),
        Err((d, map)) => d.render(map),
    }
}

fn check_bytes(name: &str, src: &[u8], opts: &Options, expected: &[(&str, u32, u32)]) {
    let r = parse_text(Path::new("test.rpn"), src.to_vec(), opts);
    let found = positions(&r);
    let expected: Found = expected
        .iter()
        .map(|(c, l, col)| (c.to_string(), *l, *col))
        .collect();
    assert_eq!(found, expected, "case `{name}`:\n{}", rendered(&r));
}

/// Removes marker lines; returns the source and the expected diagnostics.
fn strip_markers(src: &str) -> (String, Found) {
    let mut out = String::new();
    let mut expected = Vec::new();
    let mut line = 0u32;
    for l in src.split_inclusive('\n') {
        let t = l.trim_start_matches(' ');
        if let Some(code) = t.strip_prefix('^') {
            let col = (l.len() - t.len() + 1) as u32;
            expected.push((code.trim().to_string(), line, col));
        } else {
            out.push_str(l);
            line += 1;
        }
    }
    (out, expected)
}

/// Checks one marked case; returns a description of the mismatch.
fn check_marked(name: &str, src: &str, opts: &Options) -> Option<String> {
    let (text, expected) = strip_markers(src);
    assert!(!expected.is_empty(), "case `{name}` has no marker");
    let r = parse_text(Path::new("test.rpn"), text.into_bytes(), opts);
    let found = positions(&r);
    (found != expected).then(|| {
        format!(
            "case `{name}`: expected {expected:?}, found {found:?}\n{}",
            rendered(&r)
        )
    })
}

/// A file header and a breakpoint probe; the body follows (line 4 on).
macro_rules! p {
    () => {
        "name = t\noffset = 0x1000\nopcode = 0x55\n"
    };
}

/// A file header and a return probe; the body follows (line 4 on).
macro_rules! r {
    () => {
        "name = t\noffset = target_fn\nreturn = yes\n"
    };
}

const CASES: &[(&str, &str)] = &[
    ("unknown mnemonic", concat!(p!(), "  bogus 1\n  ^ E0020\n")),
    (
        "unknown mnemonic after label",
        concat!(p!(), "top: pushx 1\n     ^ E0020\n"),
    ),
    (
        "bad register",
        concat!(p!(), "  push r, rzx\n          ^ E0065\n"),
    ),
    (
        "forbidden register cr0",
        concat!(p!(), "  push r, CR0\n          ^ E0071\n"),
    ),
    (
        "forbidden register msr (pop)",
        concat!(p!(), "  pop u, msr\n         ^ E0071\n"),
    ),
    (
        "undefined label",
        concat!(p!(), "  jmp nowhere\n      ^ E0050\n"),
    ),
    (
        "duplicate label (case-insensitive)",
        concat!(p!(), "a:  nop\nA:  nop\n^ E0051\n  jmp a\n"),
    ),
    (
        "label on a header line",
        concat!(p!(), "lbl: minor = 1\n^ E0052\n  nop\n"),
    ),
    (
        "label in the file header",
        "name = t\nearly:\n^ E0052\noffset = 0x1000\nopcode = 0x55\n",
    ),
    (
        "label on a proc line",
        concat!(p!(), "  nop\nl: proc f\n^ E0052\n  ret\n"),
    ),
    (
        "jump into another body",
        concat!(p!(), "  jmp inside\n      ^ E0053\nproc f\ninside: ret\n"),
    ),
    (
        "jump into another probe",
        concat!(
            p!(),
            "  jnz there\n      ^ E0053\noffset = 0x2000\nopcode = 0x55\nthere: nop\n"
        ),
    ),
    (
        "sx target in another body",
        concat!(p!(), "  sx h\n     ^ E0053\nproc f\nh:  log 3\n"),
    ),
    (
        "undefined procedure",
        concat!(p!(), "  call nothing\n       ^ E0054\n"),
    ),
    (
        "duplicate procedure (case-insensitive)",
        concat!(
            p!(),
            "  call f\nproc f\n  ret\nproc F\n     ^ E0055\n  ret\n"
        ),
    ),
    (
        "call of a label",
        concat!(p!(), "lbl: nop\n  call lbl\n       ^ E0056\n"),
    ),
    (
        "call of a label in another body",
        concat!(p!(), "  call lbl\n       ^ E0056\nproc f\nlbl: ret\n"),
    ),
    (
        "jump to a procedure name",
        concat!(p!(), "  jmp f\n      ^ E0057\nproc f\n  ret\n"),
    ),
    (
        "push 2^64",
        concat!(p!(), "  push 18446744073709551616\n       ^ E0025\n"),
    ),
    (
        "push below -2^63",
        concat!(p!(), "  push -9223372036854775809\n       ^ E0025\n"),
    ),
    ("log 70000", concat!(p!(), "  log 70000\n      ^ E0025\n")),
    ("shl 256", concat!(p!(), "  shl 256\n      ^ E0025\n")),
    (
        "push b, 256",
        concat!(p!(), "  push b, 256\n          ^ E0025\n"),
    ),
    ("exit 256", concat!(p!(), "  exit 0x100\n       ^ E0025\n")),
    (
        "push sbp, 32768",
        concat!(p!(), "  push sbp, 32768\n            ^ E0025\n"),
    ),
    ("pbl 0", concat!(p!(), "  pbl 0\n      ^ E0025\n")),
    ("pbl 65", concat!(p!(), "  pbl 65\n      ^ E0025\n")),
    ("pzr 65", concat!(p!(), "  PZR 0x41\n      ^ E0025\n")),
    (
        "negative log count",
        concat!(p!(), "  log -1\n      ^ E0026\n"),
    ),
    (
        "negative variable index",
        concat!(
            "name = t\nvars = 2\noffset = 0x1000\nopcode = 0x55\n",
            "  push lv, -1\n           ^ E0026\n"
        ),
    ),
    (
        "negative header value",
        "name = t\nminor = -1\n^ E0032\noffset = 0x1000\nopcode = 0x55\nminor = -1\n        ^ E0026\n",
    ),
    ("setmaj 0", concat!(p!(), "  setmaj 0\n         ^ E0037\n")),
    (
        "lv index >= vars",
        "name = t\nvars = 2\noffset = 0x1000\nopcode = 0x55\n  push lv, 1\n  pop lv, 2\n          ^ E0060\n",
    ),
    (
        "gv index >= gvars (default 0)",
        concat!(p!(), "  inc gv, 0\n          ^ E0061\n"),
    ),
    (
        "pop to rip",
        concat!(p!(), "  pop r, rip\n         ^ E0066\n"),
    ),
    (
        "pop to eflags",
        concat!(p!(), "  pop u, EFLAGS\n         ^ E0066\n"),
    ),
    (
        "pop to cpuid",
        concat!(p!(), "  pop r, cpuid\n         ^ E0066\n"),
    ),
    (
        "unterminated #ifdef",
        concat!(p!(), "#ifdef X\n^ E0014\n  nop\n"),
    ),
    ("#else without #if", concat!(p!(), "  #else\n  ^ E0012\n")),
    ("#endif without #if", concat!(p!(), "#ENDIF\n^ E0012\n")),
    (
        "second #else",
        concat!(p!(), "#ifndef X\n#else\n#else\n^ E0013\n#endif\n"),
    ),
    (
        "#elseif after #else",
        concat!(p!(), "#ifdef X\n#else\n#elif Y\n^ E0013\n#endif\n"),
    ),
    (
        "include of a missing file",
        concat!(p!(), "#include \"no/such/file.inc\"\n          ^ E0015\n"),
    ),
    (
        "macro expansion deeper than 32",
        concat!(
            "#define M0 M1\n#define M1 M2\n#define M2 M3\n#define M3 M4\n#define M4 M5\n",
            "#define M5 M6\n#define M6 M7\n#define M7 M8\n#define M8 M9\n#define M9 M10\n",
            "#define M10 M11\n#define M11 M12\n#define M12 M13\n#define M13 M14\n#define M14 M15\n",
            "#define M15 M16\n#define M16 M17\n#define M17 M18\n#define M18 M19\n#define M19 M20\n",
            "#define M20 M21\n#define M21 M22\n#define M22 M23\n#define M23 M24\n#define M24 M25\n",
            "#define M25 M26\n#define M26 M27\n#define M27 M28\n#define M28 M29\n#define M29 M30\n",
            "#define M30 M31\n#define M31 M32\n#define M32 1\n",
            p!(),
            "  push M1\n",
            "  push M0\n       ^ E0018\n"
        ),
    ),
    (
        "exponential macro expansion",
        concat!(
            "#define A0 x x x x x x x x\n#define A1 A0 A0 A0 A0 A0 A0 A0 A0\n",
            "#define A2 A1 A1 A1 A1 A1 A1 A1 A1\n#define A3 A2 A2 A2 A2 A2 A2 A2 A2\n",
            "#define A4 A3 A3 A3 A3 A3 A3 A3 A3\n#define A5 A4 A4 A4 A4 A4 A4 A4 A4\n",
            "#define A6 A5 A5 A5 A5 A5 A5 A5 A5\n#define A7 A6 A6 A6 A6 A6 A6 A6 A6\n",
            p!(),
            "  push A7\n       ^ E0019\n"
        ),
    ),
    (
        "error in macro text points at the macro use",
        concat!("#define BAD bogus\n", p!(), "  nop\n   BAD 1\n   ^ E0020\n"),
    ),
    (
        "unknown directive",
        concat!(p!(), "#pragma once\n^ E0010\n"),
    ),
    (
        "invalid macro name",
        concat!(p!(), "#define 9X 1\n        ^ E0011\n"),
    ),
    (
        "text after #endif",
        concat!(p!(), "#ifdef X\n#endif X\n       ^ E0011\n"),
    ),
    (
        "missing name",
        "\n^ E0030\noffset = 0x1000\nopcode = 0x55\n  nop\n",
    ),
    (
        "unknown header keyword",
        concat!(
            "name = t\ncolour = red\n^ E0031\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "probe keyword in the file header",
        "name = t\nminor = 1\n^ E0032\noffset = 0x1000\nopcode = 0x55\n",
    ),
    (
        "file keyword in a probe header",
        concat!(p!(), "vars = 3\n^ E0032\n"),
    ),
    (
        "duplicate keyword",
        "name = t\nmajor = 1\nMAJOR=2\n^ E0033\noffset = 0x1000\nopcode = 0x55\n",
    ),
    (
        "duplicate keyword (ignore/passcount synonyms)",
        concat!(p!(), "ignore = 1\npasscount = 2\n^ E0033\n"),
    ),
    (
        "header statement after instructions",
        concat!(p!(), "  nop\nminor = 1\n^ E0045\n"),
    ),
    (
        "header statement after a label",
        concat!(p!(), "start:\nmaxhits = 1\n^ E0045\n  nop\n"),
    ),
    (
        "header statement in a procedure",
        concat!(p!(), "proc f\nminor = 1\n^ E0045\n"),
    ),
    (
        "instruction in the file header",
        "name = t\n  push 1\n  ^ E0029\noffset = 0x1000\nopcode = 0x55\n",
    ),
    (
        "forbidden opcode 0xCC",
        "name = t\noffset = main\nopcode = 0xcc\n         ^ E0041\n",
    ),
    (
        "forbidden opcode 0x9B",
        "name = t\noffset = main\nopcode = 155\n         ^ E0041\n",
    ),
    (
        "opcode out of range",
        "name = t\noffset = main\nopcode = 256\n         ^ E0034\n",
    ),
    (
        "opcode on a watchpoint",
        "name = t\noffset = counter\nwatchpoint = w\nopcode = 0x55\n^ E0040\n",
    ),
    (
        "range on a breakpoint",
        "name = t\noffset = main:main+3\n         ^ E0042\nopcode = 0x55\n",
    ),
    (
        "misaligned watchpoint",
        "name = t\naddress = 0x1002 : 0x1005\n          ^ E0044\nwatchpoint = rw\n",
    ),
    (
        "watchpoint length 3",
        "name = t\noffset = counter:counter+2\n         ^ E0043\nwatchpoint = w\n",
    ),
    (
        "watchpoint range end before start",
        "name = t\noffset = counter+8:counter\n         ^ E0043\nwatchpoint = w\n",
    ),
    (
        "execution watchpoint longer than 1",
        "name = t\noffset = main:main+1\n         ^ E0043\nwatchpoint = x\n",
    ),
    (
        "watchpoint = io",
        "name = t\noffset = counter\nwatchpoint = io\n             ^ E0036\n",
    ),
    (
        "watchpoint kind unknown",
        "name = t\noffset = counter\nwatchpoint = rwx\n             ^ E0035\n",
    ),
    (
        "modtype = kernel",
        concat!(
            "name = t\nmodtype = kernel\n          ^ E0036\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "modtype unknown",
        concat!(
            "name = t\nmodtype = usr\n          ^ E0035\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "major = 0",
        concat!(
            "name = t\nmajor = 0\n        ^ E0037\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "major = 65536",
        concat!(
            "name = t\nmajor = 65536\n        ^ E0034\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "logmax = 2000",
        concat!(
            "name = t\nlogmax = 2000\n         ^ E0034\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "vars = 257",
        concat!(
            "name = t\nvars=257\n     ^ E0034\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "heap = 16385",
        concat!(p!(), "heap = 16385\n       ^ E0034\n"),
    ),
    (
        "maxhits = 2^31",
        concat!(p!(), "maxhits = 2147483648\n          ^ E0034\n"),
    ),
    (
        "excpt_mask = 0x10000",
        concat!(p!(), "excpt_mask = 0x10000\n             ^ E0034\n"),
    ),
    (
        "autostacktrace not yes/no",
        concat!(
            "name = t\nautostacktrace = maybe\n                 ^ E0035\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "missing header value",
        concat!(
            "name = t\nid =\n    ^ E0035\n",
            "offset = 0x1000\nopcode = 0x55\n"
        ),
    ),
    (
        "undeclared group",
        concat!(
            "name = t\ngroupdef = a, b c\n",
            "offset = 0x1000\nopcode = 0x55\ngroup = d\n        ^ E0038\n"
        ),
    ),
    (
        "undeclared type",
        concat!(p!(), "type = fast\n       ^ E0038\n"),
    ),
    (
        "unknown symbol",
        concat!(p!(), "  push mian + 4\n       ^ E0080\n"),
    ),
    (
        "unknown symbol in a location",
        "name = t\noffset = target_fun\n         ^ E0080\nopcode = 0x55\n",
    ),
    (
        "ambiguous case-insensitive symbol",
        concat!(p!(), "  push HANDLER\n       ^ E0081\n"),
    ),
    (
        "two symbols",
        concat!(p!(), "  push main + bump\n              ^ E0028\n"),
    ),
    (
        "subtracted symbol",
        concat!(p!(), "  push 8 - main\n           ^ E0028\n"),
    ),
    (
        "negated symbol",
        "name = t\noffset = -main\n          ^ E0028\nopcode = 0x55\n",
    ),
    ("legacy seg2lin", concat!(p!(), "  seg2lin\n  ^ E0070\n")),
    ("legacy push bif", concat!(p!(), "  push bif\n  ^ E0070\n")),
    (
        "legacy cnvrt sxf",
        concat!(p!(), "  CNVRT SXF\n  ^ E0070\n"),
    ),
    ("legacy log mrs", concat!(p!(), "  log mrs\n  ^ E0070\n")),
    (
        "missing comma",
        concat!(
            "name = t\nvars = 4\noffset = 0x1000\nopcode = 0x55\n",
            "  push lv 3\n          ^ E0024\n"
        ),
    ),
    (
        "missing comma before register",
        concat!(p!(), "  push r rax\n         ^ E0024\n"),
    ),
    (
        "comma after one-word mnemonic",
        concat!(p!(), "  log, 2\n     ^ E0024\n"),
    ),
    ("extra operand", concat!(p!(), "  add 3\n      ^ E0023\n")),
    (
        "extra operand after keyword form",
        concat!(p!(), "  push x 3\n         ^ E0023\n"),
    ),
    ("missing operand", concat!(p!(), "  ros\n     ^ E0022\n")),
    (
        "missing index after comma",
        concat!(p!(), "  push gv,\n          ^ E0022\n"),
    ),
    (
        "wrong width",
        concat!(p!(), "  push mem, u128\n            ^ E0021\n"),
    ),
    (
        "no u64 I/O",
        concat!(p!(), "  pop io, u64\n          ^ E0021\n"),
    ),
    (
        "wrong trace operand",
        concat!(p!(), "  trace sv\n        ^ E0021\n"),
    ),
    (
        "malformed hex number",
        concat!(p!(), "  push 0x\n       ^ E0004\n"),
    ),
    (
        "malformed decimal number",
        concat!(p!(), "  dup 1b\n      ^ E0004\n"),
    ),
    ("invalid label name", concat!(p!(), "a.b: nop\n^ E0027\n")),
    (
        "unterminated quoted name",
        "name = \"probe_target\n       ^ E0003\noffset = 0x1000\nopcode = 0x55\n",
    ),
    (
        "stray character",
        concat!(p!(), "  push 1 ; comment\n         ^ E0002\n"),
    ),
    (
        "non-ASCII outside a comment",
        concat!(p!(), "  push 1 // café is fine\n  log é\n      ^ E0002\n"),
    ),
    (
        "return probe on a watchpoint",
        "name = t\noffset = counter\nwatchpoint = w\nreturn = yes\n^ E0048\n",
    ),
    (
        "return probe on a watchpoint, watchpoint given last",
        "name = t\noffset = counter\nRETURN = yes\n^ E0048\nwatchpoint = rw\n",
    ),
    (
        "maxactive without return",
        concat!(p!(), "maxactive = 8\n^ E0049\n"),
    ),
    (
        "maxactive with return = no",
        "name = t\noffset = main\nreturn = no\nmaxactive = 0\n^ E0049\n",
    ),
    (
        "maxactive above 4096",
        concat!(r!(), "maxactive = 4097\n            ^ E0034\n"),
    ),
    (
        "maxactive negative",
        concat!(r!(), "maxactive = -1\n            ^ E0026\n"),
    ),
    (
        "return neither yes nor no",
        concat!(p!(), "return = 1\n         ^ E0035\n"),
    ),
    (
        "return in the file header",
        "name = t\nreturn = yes\n^ E0032\noffset = main\n",
    ),
    (
        "return given twice",
        concat!(r!(), "return = no\n^ E0033\n"),
    ),
    (
        "push entry in a probe that is not a return probe",
        concat!(p!(), "  push 1\n  push entry, rdi\n  ^ E0067\n"),
    ),
    (
        "push elapsed in a probe that is not a return probe",
        concat!(p!(), "top: push elapsed\n     ^ E0067\n"),
    ),
    (
        "push elapsed in a procedure a non-return probe calls, through another procedure",
        concat!(
            r!(),
            "  call outer\n",
            "offset = bump\n",
            "  call outer\n",
            "proc outer\n",
            "  call inner\n",
            "proc inner\n",
            "  push elapsed\n",
            "  ^ E0067\n",
            "  push entry, rsp\n",
            "  ^ E0067\n",
        ),
    ),
    (
        "push entry of a register not kept at the entry",
        concat!(r!(), "  push entry, rax\n              ^ E0068\n"),
    ),
    (
        "push entry of a 32-bit alias",
        concat!(r!(), "  push entry, EDI\n              ^ E0068\n"),
    ),
    (
        "push entry of an unknown register",
        concat!(r!(), "  push entry, rzx\n              ^ E0065\n"),
    ),
    (
        "push entry of a privileged register",
        concat!(r!(), "  push entry, cr3\n              ^ E0071\n"),
    ),
    (
        "push entry without its register",
        concat!(r!(), "  push entry\n            ^ E0022\n"),
    ),
    (
        "push entry without its comma",
        concat!(r!(), "  push entry rdi\n             ^ E0024\n"),
    ),
    (
        "push entry with an extra operand",
        concat!(r!(), "  push entry, rdi, rsi\n                 ^ E0023\n"),
    ),
    (
        "push elapsed + 0 is a symbol",
        concat!(r!(), "  push elapsed + 0\n       ^ E0080\n"),
    ),
    (
        "several errors, all reported in order",
        concat!(
            "name = t\n",
            "major = 0\n",
            "        ^ E0037\n",
            "bogus = 1\n",
            "^ E0031\n",
            "offset = main\n",
            "opcode = 0xCD\n",
            "         ^ E0041\n",
            "  frobnicate\n",
            "  ^ E0020\n",
            "  jmp nowhere\n",
            "      ^ E0050\n",
            "  push r, cr3\n",
            "          ^ E0071\n",
            "  pop r, rsp\n",
            "         ^ E0066\n",
            "  log 1 2\n",
            "        ^ E0023\n",
            "offset = bump\n",
            "opcode = 0x9B\n",
            "         ^ E0041\n",
            "  pbl 65\n",
            "      ^ E0025\n",
            "  call missing\n",
            "       ^ E0054\n",
        ),
    ),
];

#[test]
fn malformed_programs_report_exact_codes_and_positions() {
    assert!(CASES.len() >= 45, "only {} cases", CASES.len());
    let opts = opts();
    let failures: Vec<String> = CASES
        .iter()
        .filter_map(|(name, src)| check_marked(name, src, &opts))
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// Return probes that build (§6.5): the statements reach the probe, and the
/// entry instructions are allowed in the return probe's body and in a
/// procedure only return probes call, even when it is not called at all.
#[test]
fn return_probes_and_their_entry_instructions_build() {
    let src = concat!(
        "name = t\n",
        "offset = target_fn\n",
        "Return = YES\n",
        "maxactive = 4096\n",
        "  push entry, RDI\n",
        "  push elapsed\n",
        "  call both\n",
        "address = bump\n",
        "return = yes\n",
        "  call both\n",
        "offset = main\n",
        "return = no\n",
        "  push r, rax\n",
        "proc both\n",
        "  push entry, r9\n",
        "  push entry, rsp\n",
        "proc never_called\n",
        "  push elapsed\n",
    );
    let (p, _) = parse_text(Path::new("t.rpn"), src.as_bytes().to_vec(), &opts())
        .unwrap_or_else(|(d, map)| panic!("{}", d.render(&map)));
    let flags: Vec<(bool, u32)> = p.probes.iter().map(|p| (p.r#return, p.maxactive)).collect();
    assert_eq!(flags, [(true, 4096), (true, 0), (false, 0)]);
    assert_eq!(p.bodies[0].insns[0].op, Op::PushEntry(0x0A));
    assert_eq!(p.bodies[0].insns[1].op, Op::PushElapsed);
    assert_eq!(p.bodies[3].insns[1].op, Op::PushEntry(0x0E));
    let m = rpn2wasm::manifest::build(&p);
    let keys: Vec<(bool, u32)> = m.probes.iter().map(|p| (p.r#return, p.maxactive)).collect();
    assert_eq!(keys, [(true, 4096), (true, 0), (false, 0)]);
    let text = m.encode();
    assert!(text.contains("  return yes\n  maxactive 4096\n"), "{text}");
}

#[test]
fn crlf_line_endings_keep_columns() {
    let src = b"name = t\r\noffset = 0x1000\r\nopcode = 0x55\r\n  push 1\r\n   bogus\r\n";
    check_bytes("crlf", src, &opts(), &[("E0020", 5, 4)]);
    // A CR alone at the end of the last line is also ignored.
    check_bytes(
        "crlf at eof",
        b"name = t\r\noffset = 0x1000\r\nopcode = 0x55\r\n  jmp x\r",
        &opts(),
        &[("E0050", 4, 7)],
    );
}

#[test]
fn tabs_count_as_one_column() {
    let src = b"name = t\noffset = 0x1000\nopcode = 0x55\n\t\tpush\tr,\trzx\n";
    check_bytes("tabs", src, &opts(), &[("E0065", 4, 11)]);
}

#[test]
fn non_utf8_bytes_are_reported_with_their_position() {
    let src = b"name = t\noffset = 0x1000\nopcode = 0x55\n  push 1 // caf\xe9\n  nop\n\xff\xfe\n";
    check_bytes(
        "latin-1",
        src,
        &opts(),
        &[("E0001", 4, 16), ("E0001", 6, 1)],
    );
    // A bad byte in the comment of a header line does not lose the statement.
    let src = b"name = t\noffset = 0x1000 // \xe9\nopcode = 0x55\n  nop\n";
    check_bytes("in comment", src, &opts(), &[("E0001", 2, 20)]);
    // Valid UTF-8 in a comment is fine; before an error it is one column.
    let src = "name = t\noffset = 0x1000\nopcode = 0x55\n// é\nlbl: push r, é\n".as_bytes();
    check_bytes("utf8", src, &opts(), &[("E0002", 5, 14)]);
}

#[test]
fn nul_bytes_are_reported() {
    let src = b"name = t\noffset = 0x1000\nopcode = 0x55\n  push\x00 1\n";
    check_bytes("nul", src, &opts(), &[("E0002", 4, 7)]);
    let src = b"name = t\x00x\noffset = 0x1000\nopcode = 0x55\n";
    check_bytes("nul in name", src, &opts(), &[("E0002", 1, 9)]);
}

#[test]
fn empty_file_has_no_name_and_no_probe() {
    check_bytes("empty", b"", &opts(), &[("E0030", 1, 1), ("E0046", 1, 1)]);
    // "No probe" points at the end of the file.
    check_bytes(
        "only a name",
        b"name = t\n\n// only a comment\n",
        &opts(),
        &[("E0046", 4, 1)],
    );
    check_bytes(
        "blank",
        b"\n\n   \n",
        &opts(),
        &[("E0030", 1, 1), ("E0046", 4, 1)],
    );
}

#[test]
fn one_megabyte_line() {
    let mut src = b"name = t\noffset = 0x1000\nopcode = 0x55\n".to_vec();
    src.extend(std::iter::repeat_n(b' ', 1 << 20));
    src.extend_from_slice(b"bogus\n  push ");
    src.extend(std::iter::repeat_n(b'7', 1 << 20));
    src.push(b'\n');
    check_bytes(
        "1 MB lines",
        &src,
        &opts(),
        &[("E0020", 4, (1 << 20) + 1), ("E0025", 5, 8)],
    );
}

#[test]
fn code_image_larger_than_65535_bytes() {
    let mut src = String::from("name = t\noffset = 0x1000\nopcode = 0x55\n");
    // 7281 pushes end at 65529; the 7282nd (line 7285) ends at 65538.
    for _ in 0..7282 {
        src.push_str("  push 1\n");
    }
    check_bytes("code size", src.as_bytes(), &opts(), &[("E0090", 7285, 3)]);
    // Exactly 65535 bytes is allowed: 7281 pushes + 5 `exit 0` + implicit exit.
    let mut src = String::from("name = t\noffset = 0x1000\nopcode = 0x55\n");
    for _ in 0..7281 {
        src.push_str("  push 1\n");
    }
    for _ in 0..2 {
        src.push_str("  exit 1\n");
    }
    src.push_str("  nop\n");
    let (p, _) = parse_text(Path::new("t.rpn"), src.into_bytes(), &opts()).unwrap();
    assert_eq!(p.code_size, 65535);
}

#[test]
fn more_than_65535_probes() {
    let mut src = String::from("name = t\n");
    for i in 0..65536u32 {
        src.push_str(&format!("address = {}\nopcode = 0x55\n", 0x1000 + i));
    }
    // Each probe has at least its implicit `exit`, so the code image is too
    // large as well; that is reported at the last probe's implicit exit.
    let line = 2 + 65535 * 2;
    check_bytes(
        "probes",
        src.as_bytes(),
        &opts(),
        &[("E0047", line, 1), ("E0090", line + 1, 14)],
    );
}

#[test]
fn module_without_symbols_is_needed_only_when_a_symbol_is_used() {
    let no_syms = Options::default();
    let src = "name = /nonexistent/wprobe/module\noffset = 0x1000\nopcode = 0x55\n  push 4\n";
    let (p, _) = parse_text(Path::new("t.rpn"), src.into(), &no_syms).unwrap();
    assert_eq!(p.probes[0].value, 0x1000);
    let src = "name = /nonexistent/wprobe/module\noffset = main\nopcode = 0x55\n  push bump\n";
    check_bytes("no module", src.as_bytes(), &no_syms, &[("E0082", 2, 10)]);
}

#[test]
fn symbols_from_an_elf_file() {
    // The test binary itself is an ELF file with `main`.
    let exe = std::env::current_exe().unwrap();
    let src = format!(
        "name = \"{}\"\noffset = main + 1\nopcode = 0x55\n  push main\n",
        exe.display()
    );
    let r = parse_text(Path::new("t.rpn"), src.into_bytes(), &Options::default());
    let (p, _) = r.unwrap_or_else(|(d, m)| panic!("{}", d.render(&m)));
    let main = match &p.bodies[0].insns[0].op {
        Op::PushSym { value } => *value,
        other => panic!("{other:?}"),
    };
    assert_ne!(main, 0);
    assert_eq!(p.probes[0].value, main + 1);
    assert_eq!(p.probes[0].addend, 1);
    assert_eq!(p.probes[0].symbol.as_deref(), Some("main"));
}

/// A fresh temporary directory for file-based tests.
fn tmpdir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("rpn2wasm-errors-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn file_positions(path: &Path, opts: &Options) -> Vec<(String, String, u32, u32)> {
    match parse_file(path, opts) {
        Ok(_) => Vec::new(),
        Err((d, map)) => {
            d.0.iter()
                .map(|d| {
                    let (l, c) = map.line_col(d.span.file, d.span.lo);
                    let f = map.files[d.span.file as usize]
                        .path
                        .file_name()
                        .unwrap()
                        .to_string_lossy()
                        .into_owned();
                    (d.code.to_string(), f, l, c)
                })
                .collect()
        }
    }
}

fn own(v: &[(&str, &str, u32, u32)]) -> Vec<(String, String, u32, u32)> {
    v.iter()
        .map(|(c, f, l, col)| (c.to_string(), f.to_string(), *l, *col))
        .collect()
}

#[test]
fn include_cycle() {
    let d = tmpdir("cycle");
    std::fs::write(
        d.join("main.rpn"),
        "name = t\n#include \"a.inc\"\noffset = 0x1000\nopcode = 0x55\n",
    )
    .unwrap();
    std::fs::write(d.join("a.inc"), "// a\n#include <b.inc>\n").unwrap();
    std::fs::write(d.join("b.inc"), "\n\n#include a.inc\n").unwrap();
    assert_eq!(
        file_positions(&d.join("main.rpn"), &opts()),
        own(&[("E0016", "b.inc", 3, 10)])
    );
    // Including itself directly.
    std::fs::write(d.join("self.rpn"), "#include \"self.rpn\"\n").unwrap();
    assert_eq!(
        file_positions(&d.join("self.rpn"), &opts()),
        own(&[
            ("E0030", "self.rpn", 1, 1),
            ("E0016", "self.rpn", 1, 11),
            ("E0046", "self.rpn", 2, 1)
        ])
    );
}

#[test]
fn include_depth_limit_is_16() {
    let d = tmpdir("depth");
    std::fs::write(
        d.join("main.rpn"),
        "name = t\noffset = 0x1000\nopcode = 0x55\n#include \"f1.inc\"\n",
    )
    .unwrap();
    for i in 1..=17 {
        std::fs::write(
            d.join(format!("f{i}.inc")),
            format!("  push {i}\n#include \"f{}.inc\"\n", i + 1),
        )
        .unwrap();
    }
    std::fs::write(d.join("f18.inc"), "  nop\n").unwrap();
    // f16.inc is at depth 16 and may still be read; its include of f17 fails.
    assert_eq!(
        file_positions(&d.join("main.rpn"), &opts()),
        own(&[("E0017", "f16.inc", 2, 11)])
    );
    // With 16 levels in all, it builds.
    std::fs::write(d.join("f16.inc"), "  push 16\n").unwrap();
    let (p, _) = parse_file(&d.join("main.rpn"), &opts()).unwrap();
    assert_eq!(p.bodies[0].insns.len(), 17);
    assert_eq!(p.bodies[0].insns[15].op, Op::PushImm(16));
}

#[test]
fn include_search_order_and_errors_inside_included_files() {
    let d = tmpdir("search");
    std::fs::create_dir_all(d.join("inc1")).unwrap();
    std::fs::create_dir_all(d.join("inc2")).unwrap();
    std::fs::write(d.join("inc1/x.inc"), "  push 1\n").unwrap();
    std::fs::write(d.join("inc2/x.inc"), "  push 2\n").unwrap();
    std::fs::write(d.join("inc2/y.inc"), "  push 3\n  bad\n").unwrap();
    std::fs::write(
        d.join("main.rpn"),
        "name = t\noffset = 0x1000\nopcode = 0x55\n#include x.inc\n#include \"y.inc\"\n  oops\n",
    )
    .unwrap();
    let mut o = opts();
    o.include_dirs = vec![d.join("inc1"), d.join("inc2")];
    // Errors of the included file come where the include is.
    assert_eq!(
        file_positions(&d.join("main.rpn"), &o),
        own(&[("E0020", "y.inc", 2, 3), ("E0020", "main.rpn", 6, 3)])
    );
    // The including file's directory comes first.
    std::fs::write(d.join("x.inc"), "  push 9\n").unwrap();
    std::fs::write(
        d.join("main.rpn"),
        "name = t\noffset = 0x1000\nopcode = 0x55\n#include x.inc\n",
    )
    .unwrap();
    let (p, _) = parse_file(&d.join("main.rpn"), &o).unwrap();
    assert_eq!(p.bodies[0].insns[0].op, Op::PushImm(9));
    // A conditional group may not cross a file boundary.
    std::fs::write(d.join("open.inc"), "#ifdef X\n").unwrap();
    std::fs::write(
        d.join("main.rpn"),
        "name = t\noffset = 0x1000\nopcode = 0x55\n#include \"open.inc\"\n#endif\n",
    )
    .unwrap();
    assert_eq!(
        file_positions(&d.join("main.rpn"), &o),
        own(&[("E0014", "open.inc", 1, 1), ("E0012", "main.rpn", 5, 1)])
    );
}

#[test]
fn missing_main_file() {
    let found = file_positions(Path::new("/nonexistent/wprobe.rpn"), &opts());
    assert_eq!(found, own(&[("E0015", "wprobe.rpn", 1, 1)]));
}

#[test]
fn render_format_is_stable() {
    let src = "name = t\noffset = 0x1000\nopcode = 0x55\n\tpush r, rzx // x\n";
    let r = parse_text(Path::new("dir/t.rpn"), src.into(), &opts());
    assert_eq!(
        rendered(&r),
        "dir/t.rpn:4:10: error[E0065]: unknown register `rzx`\n  | \tpush r, rzx // x\n  | \t        ^^^\n"
    );
}

// ---------------------------------------------------------------------------
// Valid programs.

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/examples")
}

fn build(file: &str, opts: &Options) -> Program {
    match parse_file(&examples_dir().join(file), opts) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!("{file}:\n{}", d.render(&map)),
    }
}

#[test]
fn all_examples_parse_and_check() {
    let mut n = 0;
    for e in std::fs::read_dir(examples_dir()).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_some_and(|x| x == "rpn") {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            let p = build(&name, &opts());
            assert!(!p.probes.is_empty(), "{name}");
            assert!(p.code_size > 0, "{name}");
            n += 1;
        }
    }
    assert_eq!(n, 16);
}

fn offsets_of(p: &Program, body: usize) -> Vec<u32> {
    p.bodies[body].insns.iter().map(|i| i.offset).collect()
}

#[test]
fn example_10_offsets() {
    let p = build("10_stacktrace.rpn", &opts());
    assert_eq!(p.procs.len(), 2);
    assert!(p.procs[0].name == "outer" && p.procs[1].name == "inner");
    // Probe 1 body 0..40, `oops` at 37; outer at 41; inner at 52; probe 2 at 131.
    assert_eq!(offsets_of(&p, 0), [0, 3, 6, 15, 18, 27, 36, 37, 40]);
    assert_eq!(p.bodies[0].insns[4].op, Op::Sx(7));
    assert_eq!(p.bodies[p.procs[0].body].insns[0].offset, 41);
    assert_eq!(p.bodies[p.procs[0].body].insns[1].offset, 50);
    assert_eq!(p.bodies[p.procs[1].body].insns[0].offset, 52);
    assert_eq!(p.bodies[p.probes[1].body].insns[0].offset, 131);
    assert_eq!(p.bodies[0].insns[5].op, Op::Call(0));
    assert_eq!(p.header.vars, 2);
    assert!(p.header.autostacktrace);
    assert_eq!(p.probes[1].minor, 2);
    assert_eq!(p.probes[1].value, 0x401191);
}

#[test]
fn example_06_suspend_offset() {
    // The header comment says the suspend instruction is at code offset 114.
    let p = build("06_exceptions.rpn", &opts());
    let s = p.bodies[0]
        .insns
        .iter()
        .find(|i| i.op == Op::Suspend)
        .unwrap();
    assert_eq!(s.offset, 114);
}

#[test]
fn example_11_watchpoint() {
    let p = build("11_watchpoint.rpn", &opts());
    let w = &p.probes[0];
    assert_eq!(w.watch, Some(WatchKind::W));
    assert_eq!(
        (w.value, w.length, w.opcode, w.maxhits),
        (0x404078, 8, None, 2)
    );
}

#[test]
fn example_13_defines_and_includes() {
    let p = build("13_preprocessor.rpn", &opts());
    assert_eq!(p.probes[0].value, 0x401147);
    assert_eq!(p.probes[0].addend, 1);
    assert_eq!(p.probes[0].symbol.as_deref(), Some("target_fn"));
    let ops: Vec<&Op> = p.bodies[0].insns.iter().map(|i| &i.op).collect();
    assert_eq!(
        ops,
        [
            &Op::PushReg {
                reg: 0x0A,
                user: false
            },
            &Op::PushImm(2),
            &Op::Mul,
            &Op::LogN(1),
            &Op::Call(0),
            &Op::Exit
        ]
    );
    assert_eq!(p.procs[0].name, "log_marker");
    assert_eq!(p.bodies[1].insns[0].op, Op::PushImm(0x4d41524b));

    let mut o = opts();
    o.defines = vec![("SCALE".into(), "3".into()), ("TERSE".into(), "1".into())];
    let p = build("13_preprocessor.rpn", &o);
    let ops: Vec<&Op> = p.bodies[0].insns.iter().map(|i| &i.op).collect();
    assert_eq!(
        ops,
        [
            &Op::PushReg {
                reg: 0x0A,
                user: false
            },
            &Op::PushImm(3),
            &Op::Mul,
            &Op::LogN(1),
            &Op::Exit
        ]
    );

    let mut o = opts();
    o.defines = vec![
        ("VERBOSE".into(), "1".into()),
        ("MARKER".into(), "0x99".into()),
    ];
    let p = build("13_preprocessor.rpn", &o);
    assert_eq!(
        p.bodies[0].insns[3].op,
        Op::PushReg {
            reg: 0x0E,
            user: false
        }
    );
    assert_eq!(p.bodies[1].insns[0].op, Op::PushImm(0x99));
}

#[test]
fn example_13_include_from_an_include_dir() {
    // The same program as in-memory text in another directory: common.inc
    // is found through -I only.
    let text = std::fs::read(examples_dir().join("13_preprocessor.rpn")).unwrap();
    let path = Path::new("/nonexistent/13.rpn");
    let r = parse_text(path, text.clone(), &opts());
    // The missing include, and the call of the procedure it would define.
    assert_eq!(
        positions(&r),
        [("E0054".to_string(), 40, 14), ("E0015".to_string(), 43, 11)]
    );
    let mut o = opts();
    o.include_dirs = vec![examples_dir()];
    let r = parse_text(path, text, &o);
    assert!(r.is_ok(), "{}", rendered(&r));
}

#[test]
fn command_line_define_is_overridden_by_define() {
    let src = "#define N 5\nname = t\noffset = 0x1000\nopcode = 0x55\n  push N\n#undef N\n#ifndef N\n  push 6\n#endif\n";
    let mut o = opts();
    o.defines = vec![("N".into(), "1".into())];
    let (p, _) = parse_text(Path::new("t.rpn"), src.into(), &o).unwrap();
    assert_eq!(p.bodies[0].insns[0].op, Op::PushImm(5));
    assert_eq!(p.bodies[0].insns[1].op, Op::PushImm(6));
}

#[test]
fn syntax_variants() {
    let src = "NAME=\"probe_target\"   // quoted
MajoR = 3
groupdef = g1,g2 g3
typedef = slow
offset = main + 4
OPCODE = 0X48
group = G2
passcount = 2
top: l2: PUSH LV,0
  push x
  push x + 0
  push -1
  push -9223372036854775808
  push 010
  push r , RAX
  pop u,r8d
  push sbp, -2
  pushh u16, 2
  poph u64,0
  log b, 4
  log arf
  vfa
  push wid
  push io, u8
  push mem,u64
  jmp TOP
  loop l2
  call Helper
  exit 3
proc helper
  ret
";
    let mut o = opts();
    o.defines = Vec::new();
    let src = src
        .replace("NAME=", "name=")
        .replace("top: l2: PUSH LV,0", "vars = 1\ntop: l2: PUSH LV,0");
    // `vars` after the location statement is misplaced; put it first instead.
    let src = src
        .replace("vars = 1\n", "")
        .replace("MajoR = 3\n", "MajoR = 3\nvars = 1\n");
    let r = parse_text(Path::new("t.rpn"), src.into_bytes(), &o);
    let (p, _) = r.unwrap_or_else(|(d, m)| panic!("{}", d.render(&m)));
    assert_eq!(p.header.name, "probe_target");
    assert_eq!(p.header.groups, ["g1", "g2", "g3"]);
    let probe = &p.probes[0];
    assert_eq!(probe.group.as_deref(), Some("g2"));
    assert_eq!(
        (probe.value, probe.opcode, probe.ignore),
        (0x4011ae, Some(0x48), 2)
    );
    use rpn2wasm::ast::{SlotOp, StackRel, VarOp, VarSpace, Width};
    let ops: Vec<Op> = p.bodies[0].insns.iter().map(|i| i.op.clone()).collect();
    assert_eq!(
        ops,
        [
            Op::VarImm(VarOp::Push, VarSpace::Local, 0),
            Op::PushX,
            Op::PushSym { value: 0x600000 },
            Op::PushImm(u64::MAX),
            Op::PushImm(1 << 63),
            Op::PushImm(10),
            Op::PushReg {
                reg: 6,
                user: false
            },
            Op::PopReg {
                reg: 0x110,
                user: true
            },
            Op::SlotImm(SlotOp::Push, StackRel::Sbp, -2),
            Op::PushH(Width::U16, 2),
            Op::PopH(Width::U64, 0),
            Op::LogB(4),
            Op::LogStr,
            Op::Vfyr,
            Op::PushWid,
            Op::PushIo(Width::U8),
            Op::PushMem(Width::U64),
            Op::Jmp(0),
            Op::Loop(0),
            Op::Call(0),
            Op::ExitN(3),
            Op::Exit,
        ]
    );
}

// ---------------------------------------------------------------------------
// Smoke test: no input makes the front end panic. `RPN_SMOKE_SEED` and
// `RPN_SMOKE_ITERS` override the seed and the number of iterations.

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const VOCAB: &[&str] = &[
    "name",
    "=",
    "offset",
    "address",
    "opcode",
    "0x55",
    "watchpoint",
    "w",
    "x",
    "rw",
    "io",
    "major",
    "minor",
    "vars",
    "gvars",
    "groupdef",
    "group",
    "proc",
    "call",
    "ret",
    "push",
    "pop",
    "lv",
    "gv",
    ",",
    ":",
    "+",
    "-",
    "main",
    "bump",
    "counter",
    "r",
    "u",
    "rax",
    "cr0",
    "rip",
    "mem",
    "u8",
    "u64",
    "b",
    "sbp",
    "tsp",
    "log",
    "str",
    "jmp",
    "loop",
    "sx",
    "top:",
    "top",
    "exit",
    "0",
    "1",
    "255",
    "256",
    "65536",
    "18446744073709551616",
    "0x",
    "\"",
    "//",
    "#define",
    "#undef",
    "#ifdef",
    "#ifndef",
    "#elseif",
    "#else",
    "#endif",
    "#include",
    "A",
    "B",
    "A B A",
    "\n",
    "\n",
    "\n",
    "\t",
    " ",
    "\r\n",
    "é",
    "\u{0}",
    "pbl",
    "setmaj",
    "seg2lin",
    "cnvrt",
    "sxf",
    "pushh",
    "heap",
    "logmax",
    "2000",
    "excpt_mask",
    "dup",
    "ros",
];

fn random_bytes(rng: &mut Rng) -> Vec<u8> {
    let len = rng.below(600);
    (0..len)
        .map(|_| match rng.below(4) {
            0 => rng.next() as u8,
            1 => b"\n \t,:=+-\"#/"[rng.below(11)],
            _ => b'!' + rng.below(94) as u8,
        })
        .collect()
}

fn token_soup(rng: &mut Rng) -> Vec<u8> {
    let mut s = String::from("name = t\n");
    for _ in 0..rng.below(200) {
        s.push_str(VOCAB[rng.below(VOCAB.len())]);
        s.push(if rng.below(3) == 0 { '\n' } else { ' ' });
    }
    s.into_bytes()
}

fn mutate(rng: &mut Rng, examples: &[Vec<u8>]) -> Vec<u8> {
    let mut v = examples[rng.below(examples.len())].clone();
    for _ in 0..1 + rng.below(8) {
        let len = v.len();
        let at = rng.below(len + 1);
        match rng.below(5) {
            0 if len > 0 => {
                let end = (at + rng.below(40)).min(len);
                v.drain(at.min(end)..end);
            }
            1 => v.insert(at, rng.next() as u8),
            2 => {
                let tok = VOCAB[rng.below(VOCAB.len())].as_bytes();
                v.splice(at..at, tok.iter().copied());
            }
            3 if len > 0 => {
                let start = rng.below(len);
                let end = (start + rng.below(200)).min(len);
                let chunk = v[start..end].to_vec();
                v.splice(at..at, chunk);
            }
            _ => {
                if at < len {
                    v[at] = b"\n:,-0x#"[rng.below(7)];
                }
            }
        }
    }
    v
}

#[test]
fn smoke_random_inputs_never_panic() {
    let seed = std::env::var("RPN_SMOKE_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_1234_abcd_0001u64);
    let examples: Vec<Vec<u8>> = std::fs::read_dir(examples_dir())
        .unwrap()
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    let iterations: usize = std::env::var("RPN_SMOKE_ITERS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2000);
    // xorshift must not start at 0.
    let mut rng = Rng(seed | 1);
    let path = Path::new("/nonexistent-rpn2wasm-smoke/fuzz.rpn");
    let mut rejected = 0;
    for i in 0..iterations {
        let input = match i % 3 {
            0 => random_bytes(&mut rng),
            1 => token_soup(&mut rng),
            _ => mutate(&mut rng, &examples),
        };
        let o = opts();
        let r = catch_unwind(AssertUnwindSafe(|| {
            let r = parse_text(path, input.clone(), &o);
            if let Err((d, map)) = &r {
                assert!(!d.0.is_empty(), "an error result without diagnostics");
                let _ = d.render(map);
            }
            r.is_err()
        }));
        match r {
            Ok(err) => rejected += usize::from(err),
            Err(_) => panic!(
                "front end panicked: seed {seed:#x}, iteration {i}, input {:?}",
                String::from_utf8_lossy(&input)
            ),
        }
    }
    // The generators must exercise the error paths (and mutated examples
    // sometimes stay valid).
    assert!(
        rejected > iterations * 3 / 4,
        "only {rejected} of {iterations} inputs rejected"
    );
}
