//! Seeded smoke runs of the fuzzing oracles (`rpn2wasm::fuzzing`) inside
//! `cargo test` (1,000 iterations each on every run). The inputs come from a fixed-seed PRNG: random bytes, token soups
//! of the RPN vocabulary, and mutated example programs for the front end;
//! random bytes and mutated well-formed records and manifests for the
//! decoders. Every module compiled is validated with wasmparser.
//! `WPROBE_FUZZ_SEED` / `WPROBE_FUZZ_ITERS` override the seed and count;
//! `WPROBE_FUZZ_DUMP_SEEDS=DIR` writes the decoder seeds to DIR (a seed
//! corpus for `cargo fuzz run decode_records DIR`).

use hostabi::record::{RecordHeader, field};
use rpn2wasm::fuzzing::{decode_records, parse_and_compile, parse_and_compile_with};
use rpn2wasm::interp::{self, Limits, ProgramState, RecordKind};
use rpn2wasm::model::ModelEnv;
use std::panic::{AssertUnwindSafe, catch_unwind, resume_unwind};
use std::path::PathBuf;

const DEFAULT_SEED: u64 = 0xF022_5EED_0007;
const DEFAULT_ITERS: u64 = 1000;

/// SplitMix64: tiny, deterministic, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }

    fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    env_u64("WPROBE_FUZZ_SEED", DEFAULT_SEED)
}

fn iters() -> u64 {
    env_u64("WPROBE_FUZZ_ITERS", DEFAULT_ITERS)
}

fn examples_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/examples")
}

/// The example programs, as bytes.
fn examples() -> Vec<(String, Vec<u8>)> {
    let mut out: Vec<(String, Vec<u8>)> = std::fs::read_dir(examples_dir())
        .expect("examples directory")
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "rpn"))
        .map(|p| {
            (
                p.display().to_string(),
                std::fs::read(&p).expect("example readable"),
            )
        })
        .collect();
    out.sort();
    assert!(
        out.len() >= 10,
        "expected the example programs in {}",
        examples_dir().display()
    );
    out
}

fn validate(wasm: &[u8], input: &[u8]) {
    if let Err(e) = wasmparser::Validator::new().validate_all(wasm) {
        panic!(
            "compiled module does not validate: {} (at offset 0x{:x})\ninput: {:?}",
            e.message(),
            e.offset(),
            String::from_utf8_lossy(input)
        );
    }
}

/// Runs `f` on `iters()` inputs made by `make`, reporting the seed and the
/// input of a failure.
fn each_input(what: &str, mut make: impl FnMut(&mut Rng) -> Vec<u8>, mut f: impl FnMut(&[u8])) {
    let seed = seed();
    for i in 0..iters() {
        let iseed = seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let mut r = Rng(iseed);
        let input = make(&mut r);
        if let Err(e) = catch_unwind(AssertUnwindSafe(|| f(&input))) {
            eprintln!(
                "{what}: failure on WPROBE_FUZZ_SEED={seed} iteration {i}\ninput ({} bytes): {:?}",
                input.len(),
                String::from_utf8_lossy(&input)
            );
            resume_unwind(e);
        }
    }
}

/// Words the front end knows: header keywords, mnemonics, operand keywords,
/// registers, symbols, directives, punctuation and numbers.
const VOCAB: &[&str] = &[
    "name",
    "=",
    "probe_target",
    "major",
    "minor",
    "offset",
    "address",
    "opcode",
    "0x55",
    "vars",
    "gvars",
    "logmax",
    "jmpmax",
    "excpt_log",
    "excpt_mask",
    "autostacktrace",
    "yes",
    "no",
    "logonfault",
    "heap",
    "watchpoint",
    "w",
    "rw",
    "x",
    "groupdef",
    "group",
    "typedef",
    "type",
    "maxhits",
    "ignore",
    "passcount",
    "modtype",
    "user",
    "id",
    "proc",
    "call",
    "ret",
    "nop",
    "jmp",
    "jz",
    "jnz",
    "jlt",
    "jle",
    "jgt",
    "jge",
    "loop",
    "abort",
    "remove",
    "exit",
    "suspend",
    "setmin",
    "setmaj",
    "log",
    "str",
    "arf",
    "mrf",
    "b",
    "push",
    "pop",
    "move",
    "inc",
    "dec",
    "lv",
    "gv",
    "add",
    "sub",
    "mul",
    "neg",
    "and",
    "or",
    "xor",
    "rol",
    "ror",
    "shl",
    "shr",
    "xchg",
    "dup",
    "ros",
    "r",
    "u",
    "mem",
    "u8",
    "u16",
    "u32",
    "u64",
    "task",
    "pid",
    "procid",
    "vfyr",
    "vfyrw",
    "vfa",
    "div",
    "idiv",
    "pbl",
    "pbr",
    "pzl",
    "pzr",
    "sx",
    "ux",
    "rx",
    "lp",
    "plp",
    "st",
    "purge",
    "trace",
    "pv",
    "sbp",
    "tsp",
    "stp",
    "save",
    "restore",
    "copy",
    "callk",
    "malloc",
    "free",
    "wid",
    "pushh",
    "poph",
    "io",
    "seg2lin",
    "rax",
    "rdi",
    "rsi",
    "rdx",
    "rip",
    "rsp",
    "eax",
    "esi",
    "cpuid",
    "xmm0",
    "st0",
    "target_fn",
    "greeting",
    "counter",
    "origin",
    "bump",
    "main",
    "+",
    "-",
    ",",
    ":",
    "//",
    "\"",
    "#define",
    "#ifdef",
    "#ifndef",
    "#else",
    "#endif",
    "#undef",
    "#include",
    "#elif",
    "L1",
    "L1:",
    "L2:",
    "top",
    "p1",
    "0",
    "1",
    "7",
    "8",
    "63",
    "64",
    "255",
    "256",
    "65535",
    "65536",
    "-1",
    "0xFFFFFFFFFFFFFFFF",
    "0x10000000000000000",
    "18446744073709551616",
    "-32768",
    "32767",
];

const HEADER: &str = "name = probe_target\noffset = target_fn\nopcode = 0x55\n";

fn token_soup(r: &mut Rng) -> Vec<u8> {
    let mut s = String::new();
    if r.chance(80) {
        s.push_str(HEADER);
    }
    for _ in 0..r.below(30) {
        let words = 1 + r.below(5);
        for w in 0..words {
            if w > 0 {
                s.push_str(if r.chance(80) { " " } else { ", " });
            }
            s.push_str(r.pick::<&str>(VOCAB));
        }
        s.push('\n');
    }
    s.into_bytes()
}

fn random_bytes(r: &mut Rng) -> Vec<u8> {
    let n = r.below(512);
    let ascii = r.chance(50);
    (0..n)
        .map(|_| {
            let b = r.next() as u8;
            if ascii {
                b"\n\t ,:=+-#/\"0123456789abcdefghijklmnopqrstuvwxyz_"[b as usize % 48]
            } else {
                b
            }
        })
        .collect()
}

/// Applies one to four structural or byte mutations.
fn mutate(r: &mut Rng, input: &[u8]) -> Vec<u8> {
    let mut lines: Vec<Vec<u8>> = input.split(|b| *b == b'\n').map(<[u8]>::to_vec).collect();
    for _ in 0..1 + r.below(4) {
        let n = lines.len().max(1);
        match r.below(7) {
            0 if !lines.is_empty() => {
                lines.remove(r.below(n));
            }
            1 if !lines.is_empty() => {
                let l = lines[r.below(n)].clone();
                lines.insert(r.below(n), l);
            }
            2 if lines.len() > 1 => {
                let (a, b) = (r.below(n), r.below(n));
                lines.swap(a, b);
            }
            3 => {
                let line = format!("        {} {}", r.pick(VOCAB), r.pick(VOCAB)).into_bytes();
                lines.insert(r.below(n), line);
            }
            _ => {
                // Byte flips, insertions and deletions in one line.
                let i = r.below(n);
                if let Some(l) = lines.get_mut(i) {
                    let at = r.below(l.len() + 1);
                    match r.below(3) {
                        0 if at < l.len() => l[at] ^= 1 << r.below(8),
                        1 => l.insert(at, r.next() as u8),
                        _ if at < l.len() => {
                            l.remove(at);
                        }
                        _ => {}
                    }
                }
            }
        }
    }
    lines.join(&b'\n')
}

#[test]
fn smoke_parse_and_compile_random_bytes() {
    let mut compiled = 0;
    each_input("random bytes", random_bytes, |input| {
        for wasm in parse_and_compile(input) {
            validate(&wasm, input);
            compiled += 1;
        }
    });
    eprintln!("random bytes: {compiled} modules compiled");
}

#[test]
fn smoke_parse_and_compile_token_soups() {
    let mut compiled = 0;
    each_input("token soup", token_soup, |input| {
        for wasm in parse_and_compile(input) {
            validate(&wasm, input);
            compiled += 1;
        }
    });
    eprintln!("token soups: {compiled} modules compiled");
    assert!(
        compiled > 0 || iters() < 100,
        "no token soup compiled: the generator is too weak"
    );
}

#[test]
fn smoke_parse_and_compile_mutated_examples() {
    let examples = examples();
    let dirs = [examples_dir()];
    let mut compiled = 0;
    each_input(
        "mutated example",
        |r| {
            let (_, text) = r.pick(&examples);
            mutate(r, text)
        },
        |input| {
            for wasm in parse_and_compile_with(input, &dirs) {
                validate(&wasm, input);
                compiled += 1;
            }
        },
    );
    eprintln!("mutated examples: {compiled} modules compiled");
    assert!(
        compiled * 10 >= iters() as usize,
        "under 10% of mutated examples compiled"
    );
}

/// Well-formed decoder inputs: encoded record headers, the manifests of the
/// examples, and the log data and stack-trace areas of running them.
fn decoder_seeds() -> Vec<Vec<u8>> {
    let mut seeds = Vec::new();
    let mut r = Rng(seed());
    for _ in 0..16 {
        let h = RecordHeader {
            mask: (r.next() as u32 & field::ALL) | field::MAJOR | field::MINOR,
            major: r.next() as u16,
            minor: r.next() as u16,
            cpu: r.next() as u32,
            pid: r.next() as u32,
            rip: r.next(),
            time_sec: r.next(),
            comm: *b"probe_target\0\0\0\0",
            ..RecordHeader::default()
        };
        let mut buf = vec![0u8; RecordHeader::len_for(h.mask)];
        let n = h.encode(&mut buf).expect("buffer sized by len_for");
        seeds.push(buf[..n].to_vec());
    }
    let opts = rpn2wasm::fuzzing::options(&[examples_dir()]);
    for (path, text) in examples() {
        let Ok((program, _)) =
            rpn2wasm::parse::parse_text(std::path::Path::new(&path), text, &opts)
        else {
            continue;
        };
        seeds.push(rpn2wasm::manifest::build(&program).encode().into_bytes());
        let mut state = ProgramState::new(&program);
        for probe in 0..program.probes.len() {
            let mut env = ModelEnv::probe_target_hit(1);
            env.with_gvars(usize::from(program.header.gvars));
            let res = interp::run(&program, probe, &mut state, &mut env, &Limits::default());
            for rec in res.records {
                match rec.kind {
                    RecordKind::StackTrace => seeds.push(rec.data),
                    RecordKind::Log { .. } => {
                        // The oracle's layout: item count, items, data.
                        let items = &rec.items[..rec.items.len().min(255)];
                        let mut s = vec![items.len() as u8];
                        s.extend(items.iter().flat_map(|i| i.to_le_bytes()));
                        s.extend_from_slice(&rec.data);
                        seeds.push(s);
                    }
                }
            }
        }
    }
    seeds
}

#[test]
fn smoke_decode_records() {
    let seeds = decoder_seeds();
    assert!(seeds.len() > 30, "too few decoder seeds: {}", seeds.len());
    if let Some(dir) = std::env::var_os("WPROBE_FUZZ_DUMP_SEEDS") {
        std::fs::create_dir_all(&dir).expect("seed directory");
        for (i, s) in seeds.iter().enumerate() {
            std::fs::write(PathBuf::from(&dir).join(format!("seed-{i:03}")), s)
                .expect("seed written");
        }
    }
    for s in &seeds {
        decode_records(s);
    }
    each_input(
        "decoders",
        |r| {
            if r.chance(25) {
                random_bytes(r)
            } else {
                let mut s = r.pick(&seeds).clone();
                for _ in 0..1 + r.below(4) {
                    match r.below(4) {
                        0 if !s.is_empty() => {
                            let i = r.below(s.len());
                            s[i] ^= 1 << r.below(8);
                        }
                        1 => {
                            let n = r.below(s.len() + 1);
                            s.truncate(n);
                        }
                        2 => {
                            let i = r.below(s.len() + 1);
                            s.insert(i, r.next() as u8);
                        }
                        _ if !s.is_empty() => {
                            let i = r.below(s.len());
                            s[i] = *r.pick(&[0, 1, 2, 3, 4, 5, 6, 7, 0xFF, b'\n', b' ']);
                        }
                        _ => {}
                    }
                }
                s
            }
        },
        decode_records,
    );
}
