//! A generator of random, well-formed RPN programs (as source text, so the
//! front end is exercised too) and of random synthetic hits, for the
//! differential test of the compiler against the reference interpreter.
//! Deterministic for a seed.

use rpn2wasm::model::ModelEnv;
use std::fmt::Write as _;

/// SplitMix64: small, fast, good enough for test generation.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `p_percent`%.
    pub fn chance(&mut self, p_percent: u64) -> bool {
        self.below(100) < p_percent
    }

    /// One element of a slice.
    pub fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len() as u64) as usize]
    }
}

/// Interesting 64-bit operands.
pub const EDGE_VALUES: &[u64] = &[
    0,
    1,
    u64::MAX,
    i64::MAX as u64,
    i64::MIN as u64,
    0xFFFF_FFFF,
    0x1_0000_0000,
    0x1_0000_0001,
    63,
    64,
    65,
    2,
    7,
];

/// Base of the readable+writable region of generated hits.
pub const RW_BASE: u64 = 0x10_0000;
/// Base of the read-only region (holds NUL-terminated strings).
pub const RO_BASE: u64 = 0x20_0000;
/// Size of each region.
pub const REGION_BYTES: u64 = 256;
/// The virtual I/O port served by generated hits.
pub const IO_PORT: u64 = 0x60;

fn addr(r: &mut Rng) -> String {
    let a = match r.below(20) {
        0..=5 => RW_BASE + r.below(REGION_BYTES - 8),
        6..=10 => RO_BASE + r.below(REGION_BYTES - 8),
        11..=12 => RO_BASE + r.below(16),
        13 => RW_BASE + REGION_BYTES - 1 - r.below(9),
        14 => RO_BASE + REGION_BYTES - 1 - r.below(20),
        15 => 0,
        16 => 0x10,
        17 => RW_BASE - 1 - r.below(4),
        _ => r.next_u64(),
    };
    format!("0x{a:x}")
}

fn value(r: &mut Rng) -> String {
    match r.below(4) {
        0 => format!("0x{:x}", r.pick(EDGE_VALUES)),
        1 => format!("{}", r.below(10)),
        2 => format!("-{}", r.below(5) + 1),
        _ => format!("0x{:x}", r.next_u64()),
    }
}

/// Shape of a generated program.
#[derive(Clone, Copy)]
struct Shape {
    vars: u64,
    gvars: u64,
    procs: usize,
    /// The body being generated may read the entry state (`push entry`,
    /// `push elapsed`): a return probe, or a procedure when every probe of
    /// the program is a return probe (spec §6.5).
    entry: bool,
}

/// The registers `push entry` accepts.
const ENTRY_REGS: &[&str] = &["rdi", "rsi", "rdx", "rcx", "r8", "r9", "rsp"];

/// A `push entry, R` or `push elapsed` line (`entry` bodies only).
fn entry_insn(r: &mut Rng) -> String {
    if r.chance(25) {
        "push elapsed".into()
    } else {
        format!("push entry, {}", r.pick(ENTRY_REGS))
    }
}

/// Return-probe statements for a probe header: `return = yes` with
/// probability 40%, then maybe `maxactive`; whether it is a return probe.
fn return_statements(r: &mut Rng, out: &mut String) -> bool {
    if !r.chance(40) {
        return false;
    }
    out.push_str("return = yes\n");
    if r.chance(50) {
        let _ = writeln!(out, "maxactive = {}", r.pick(&[0, 1, 64, 4096]));
    }
    true
}

const READ_REGS: &[&str] = &[
    "rax", "rdi", "rsi", "rdx", "rip", "rsp", "rflags", "cs", "ss", "fs_base", "orig_rax", "esi",
    "eflags", "r15d", "xmm0", "xmm15", "fr3", "mxcsr", "fcw", "ftw", "dr7", "gs",
];
const WRITE_REGS: &[&str] = &[
    "rax", "rdi", "rsi", "rbx", "r8", "r15", "rbp", "eax", "r9d", "ebp",
];

fn insn(r: &mut Rng, s: &Shape, labels: usize, out: &mut String) {
    let lbl = |r: &mut Rng| format!("l{}", r.below(labels as u64));
    let w = *r.pick(&["u8", "u16", "u32", "u64"]);
    let line = match r.below(64) {
        0..=5 => format!("push {}", value(r)),
        6 => format!("push b, {}", r.below(256)),
        7 => format!("push greeting + {}", r.below(16)),
        8 => r
            .pick(&["add", "sub", "mul", "neg", "and", "or", "xor"])
            .to_string(),
        9 => r.pick(&["div", "idiv"]).to_string(),
        10 => format!(
            "{} {}",
            r.pick(&["shl", "shr", "rol", "ror"]),
            r.pick(&[0, 1, 3, 63, 64, 65, 200])
        ),
        11 => r.pick(&["shl", "shr", "rol", "ror"]).to_string(),
        12 => format!(
            "{} {}",
            r.pick(&["pbl", "pbr", "pzl", "pzr"]),
            1 + r.below(64)
        ),
        13 => format!(
            "push {}\n{}",
            r.pick(&[0, 1, 8, 33, 64, 65]),
            r.pick(&["pbl", "pbr", "pzl", "pzr"])
        ),
        14 => "xchg".into(),
        15 => format!("dup {}", r.below(5)),
        16 => format!("push {}\npush {}\ndup", r.below(4), value(r)),
        17 => format!("ros {}", r.below(4)),
        18..=19 if s.vars > 0 => {
            let i = r.below(s.vars);
            format!("{} lv, {i}", r.pick(&["push", "pop", "move", "inc", "dec"]))
        }
        20 => {
            let i = r.below(s.vars + 2);
            match r.below(5) {
                0 => format!("push {i}\npush lv"),
                1 => format!("push {i}\npush {}\npop lv", value(r)),
                2 => format!("push {i}\nmove lv"),
                3 => format!("push {i}\ninc lv"),
                _ => format!("push {i}\ndec lv"),
            }
        }
        21 if s.gvars > 0 => {
            let i = r.below(s.gvars);
            format!("{} gv, {i}", r.pick(&["push", "pop", "move", "inc", "dec"]))
        }
        22 => {
            let i = r.below(s.gvars + 2);
            match r.below(5) {
                0 => format!("push {i}\npush gv"),
                1 => format!("push {i}\npush {}\npop gv", value(r)),
                2 => format!("push {i}\nmove gv"),
                3 => format!("push {i}\ninc gv"),
                _ => format!("push {i}\ndec gv"),
            }
        }
        23 => format!("push {}, {}", r.pick(&["r", "u"]), r.pick(READ_REGS)),
        24 => format!("push {}\npush r, cpuid", r.below(3)),
        25 => format!("pop {}, {}", r.pick(&["r", "u"]), r.pick(WRITE_REGS)),
        26..=27 => format!("push {}\npush mem, {w}", addr(r)),
        28 => format!("push {}\npush {}\npop mem, {w}", addr(r), value(r)),
        29 if s.entry && r.chance(50) => entry_insn(r),
        29 => r
            .pick(&[
                "push pid",
                "push procid",
                "push task",
                "push wid",
                "nop",
                "callk",
            ])
            .to_string(),
        30 => format!("push {}\n{}", addr(r), r.pick(&["vfyr", "vfyrw", "vfa"])),
        31..=33 => format!("log {}", r.below(5)),
        34 => format!("log b, {}", r.below(4)),
        35 => format!("push {}\nlog", r.pick(&[0, 1, 2, 3, 70000])),
        36..=37 => format!(
            "push {}\npush {}\n{}",
            r.pick(&[0, 1, 5, 13, 64, 2000, u64::MAX]),
            addr(r),
            r.pick(&["log str", "log arf", "log mrf"])
        ),
        38 => format!(
            "push {}\npush {}\nlog {}",
            r.below(s.vars.max(s.gvars) + 2),
            r.below(4),
            r.pick(&["lv", "gv"])
        ),
        39 => "log st".into(),
        40 => r
            .pick(&["push lp", "push plp", "push stp", "purge st"])
            .to_string(),
        41 => match r.below(4) {
            0 => "push plp\npop lp".to_string(),
            1 => "push lp\npush 8\nxchg\nsub\npop lp".to_string(),
            _ => format!("push {}\npop {}", r.below(60), r.pick(&["lp", "stp"])),
        },
        42 => format!("push {}\npush {}\ntrace pv", r.below(1024), r.below(4)),
        43 => format!(
            "push {}\npush {}\ntrace {}",
            r.below(s.vars.max(s.gvars) + 2),
            r.below(3),
            r.pick(&["lv", "gv"])
        ),
        44 => format!(
            "{} {}, {}",
            r.pick(&["push", "pop", "copy"]),
            r.pick(&["tsp", "sbp"]),
            r.below(7) as i64 - 3
        ),
        45 => format!(
            "push {}\n{} {}",
            r.below(7) as i64 - 3,
            r.pick(&["push", "copy"]),
            r.pick(&["tsp", "sbp"])
        ),
        46 => format!(
            "push {}\npush {}\npop {}",
            r.below(5),
            value(r),
            r.pick(&["tsp", "sbp"])
        ),
        47 => r
            .pick(&[
                "save tsp",
                "save sbp",
                "save tsp\nrestore sbp",
                "push 1020\nrestore tsp",
                "push 3\nrestore sbp",
            ])
            .to_string(),
        48..=50 => format!(
            "{} {}",
            r.pick(&["jmp", "jz", "jnz", "jlt", "jle", "jgt", "jge", "loop"]),
            lbl(r)
        ),
        51..=52 if s.procs > 0 => format!("call p{}", r.below(s.procs as u64)),
        53 => format!("sx {}", lbl(r)),
        54 => "ux".into(),
        55 => format!(
            "push {}\npush {}\npush 0x{:x}\nrx",
            value(r),
            value(r),
            r.pick(&[0x8000u64, 0x28000, 0x20, 0x1000, 0x4, 0x0, 0x10001])
        ),
        56 => "push x".into(),
        57 if r.chance(40) => r
            .pick(&[
                "exit", "abort", "remove", "exit 1", "exit 2", "exit 3", "exit 0", "exit 9",
                "suspend", "resume", "ret",
            ])
            .to_string(),
        58 => r
            .pick(&[
                "setmin 7",
                "setmaj 3",
                "push 0x10005\nsetmin",
                "push 0x20000\nsetmaj",
                "push 9\nsetmaj",
            ])
            .to_string(),
        59 => format!(
            "push {}\npush io, {}",
            r.pick(&[IO_PORT, 0x61]),
            r.pick(&["u8", "u16", "u32"])
        ),
        60 => format!(
            "push {}\npush {}\npop io, {}",
            r.pick(&[IO_PORT, 0x61]),
            value(r),
            r.pick(&["u8", "u16", "u32"])
        ),
        61 => format!("push {}\nmalloc", r.pick(&[0, 8, 16, 40, 100])),
        62 => format!(
            "push {}\n{}",
            r.below(4),
            r.pick(&[
                "free",
                "push 0\npushh u64, 1",
                "push 4\npushh u16, 3",
                "push 2\npushh u8, 5",
                "push 1\npushh u32, 2",
            ])
        ),
        _ => format!(
            "push 7\npush {}\npush {}\npoph {}, 1",
            r.below(4),
            r.below(12),
            r.pick(&["u8", "u16", "u32", "u64"])
        ),
    };
    out.push_str(&line);
    out.push('\n');
}

fn body(r: &mut Rng, s: &Shape, out: &mut String) {
    let n = 2 + r.below(28) as usize;
    let labels = 1 + r.below(4) as usize;
    // Each label is placed before some instruction (several may share one).
    let mut at: Vec<usize> = (0..labels)
        .map(|_| r.below(n as u64 + 1) as usize)
        .collect();
    at.sort_unstable();
    let mut next_label = 0;
    for i in 0..=n {
        while next_label < labels && at[next_label] == i {
            let _ = writeln!(out, "l{next_label}:");
            next_label += 1;
        }
        if i < n {
            insn(r, s, labels, out);
        }
    }
    // A label on the last line labels the implicit terminator.
}

/// A random program (source text).
pub fn program(r: &mut Rng) -> String {
    let s = Shape {
        vars: r.below(5),
        gvars: r.below(4),
        procs: r.below(4) as usize,
        entry: false,
    };
    let mut out = String::new();
    let _ = writeln!(out, "name = diff\nmajor = {}", 1 + r.below(5));
    let _ = writeln!(out, "vars = {}\ngvars = {}", s.vars, s.gvars);
    let _ = writeln!(out, "logmax = {}", r.pick(&[0, 16, 40, 100, 1024, 1024]));
    let _ = writeln!(out, "jmpmax = {}", r.pick(&[0, 1, 5, 20, 60, 200]));
    let _ = writeln!(out, "excpt_log = {}", r.pick(&[0, 30, 90, 300, 1024]));
    let _ = writeln!(out, "autostacktrace = {}", r.pick(&["yes", "no"]));
    let any_mask = r.below(0x10000);
    let mask = *r.pick(&[0x0fffu64, 0x1fff, 0x8fff, 0xffff, 0x0000, 0x9010, any_mask]);
    let _ = writeln!(out, "excpt_mask = 0x{mask:x}");
    let _ = writeln!(out, "heap = {}", r.pick(&[0, 64, 200]));
    let probes = 1 + r.below(2);
    let mut all_return = true;
    for p in 0..probes {
        let _ = writeln!(
            out,
            "\naddress = 0x{:x}\nopcode = 0x55\nminor = {p}",
            0x401000 + p
        );
        let ret = return_statements(r, &mut out);
        all_return &= ret;
        body(r, &Shape { entry: ret, ..s }, &mut out);
    }
    // Procedures may read the entry state only when no probe that is not
    // a return probe can call them: here, when every probe is one.
    let proc_shape = Shape {
        entry: all_return,
        ..s
    };
    for p in 0..s.procs {
        let _ = writeln!(out, "\nproc p{p}");
        body(r, &proc_shape, &mut out);
    }
    out
}

/// A random hit: registers, a memory image with holes, globals sized later.
pub fn hit(r: &mut Rng) -> ModelEnv {
    let mut env = ModelEnv::new();
    for reg in hostabi::regs::REGS {
        if reg.is_alias() || reg.id == hostabi::regs::CPUID {
            continue;
        }
        for part in 0..reg.parts() {
            let v = if r.chance(30) {
                *r.pick(EDGE_VALUES)
            } else {
                r.next_u64()
            };
            env.set_reg_part(reg.id, part, v);
        }
    }
    let rw: Vec<u8> = (0..REGION_BYTES).map(|_| r.next_u64() as u8).collect();
    let ro: Vec<u8> = (0..REGION_BYTES)
        .map(|_| {
            if r.chance(8) {
                0
            } else {
                b'a' + r.below(26) as u8
            }
        })
        .collect();
    env.map(RW_BASE, rw, true, true);
    env.map(RO_BASE, ro, true, false);
    env.add_io_port(IO_PORT, r.next_u64());
    env.tid = 1000 + r.below(100);
    env.cpu = r.below(8);
    env.thread_pointer = r.next_u64();
    env.load_bias = r.pick(&[0u64, 0x5555_5555_4000]).to_owned();
    // Every hit carries an entry state: only return probes can read it.
    let mut entry = hostabi::env::EntryState {
        regs: [0; 7],
        elapsed_ns: if r.chance(20) {
            *r.pick(EDGE_VALUES)
        } else {
            r.below(10_000_000)
        },
    };
    for v in &mut entry.regs {
        *v = if r.chance(30) {
            *r.pick(EDGE_VALUES)
        } else {
            r.next_u64()
        };
    }
    env.entry = Some(entry);
    env
}

/// Generator state of a stack-disciplined body: the depth the generator
/// assumes, and the depth below which it must not touch (a loop counter).
struct Disciplined<'a> {
    s: &'a Shape,
    depth: i64,
    floor: i64,
    labels: usize,
    out: String,
    /// Nesting of loops and forward branches.
    nest: u32,
    procs: usize,
    /// Also read and write slots just above TOS (`push tsp, -k`): the
    /// program keeps a bounded stack but loses store elision.
    dead_slots: bool,
}

impl Disciplined<'_> {
    fn line(&mut self, l: &str) {
        self.out.push_str(l);
        self.out.push('\n');
    }

    /// Values available above the floor.
    fn room(&self) -> i64 {
        self.depth - self.floor
    }

    /// Pushes zeros or drops values until the depth is `d` (never below the floor).
    fn restore(&mut self, d: i64) {
        while self.depth > d {
            let n = (self.depth - d).min(255);
            self.line(&format!("ros {n}"));
            self.depth -= n;
        }
        while self.depth < d {
            self.line("push 0");
            self.depth += 1;
        }
    }

    fn one(&mut self, r: &mut Rng) {
        let room = self.room();
        let w = *r.pick(&["u8", "u16", "u32", "u64"]);
        match r.below(40) {
            0..=7 => {
                let v = value(r);
                self.line(&format!("push {v}"));
                self.depth += 1;
            }
            8 => {
                let reg = *r.pick(READ_REGS);
                self.line(&format!("push r, {reg}"));
                let parts = hostabi::regs::REGS
                    .iter()
                    .find(|x| x.name == reg)
                    .map_or(1, |x| x.parts() as i64);
                self.depth += parts;
            }
            9..=11 if room >= 2 => {
                let op = *r.pick(&["add", "sub", "mul", "and", "or", "xor", "shl", "shr", "rol"]);
                self.line(op);
                self.depth -= 1;
            }
            12 if room >= 2 => {
                let op = *r.pick(&["div", "idiv", "xchg"]);
                self.line(op);
            }
            13 if room >= 1 => {
                let op = *r.pick(&["neg", "shl 3", "ror 17", "pbl 9", "pzr 5"]);
                self.line(op);
            }
            14 if room >= 1 => {
                let n = 1 + r.below(3) as i64;
                self.line(&format!("dup {n}"));
                self.depth += n;
            }
            15 if room >= 1 => {
                let n = 1 + r.below(room.min(3) as u64) as i64;
                self.line(&format!("ros {n}"));
                self.depth -= n;
            }
            16..=17 if self.depth >= 1 => {
                let k = r.below(self.depth as u64);
                self.line(&format!("push tsp, {k}"));
                self.depth += 1;
            }
            18 if room >= 2 => {
                // Writes only above the floor: S[k] with k < room - 1 after the pop.
                let k = 1 + r.below((room - 1) as u64);
                if r.chance(50) {
                    self.line(&format!("pop tsp, {k}"));
                    self.depth -= 1;
                } else {
                    self.line(&format!("copy tsp, {k}"));
                }
            }
            19..=20 => {
                let a = addr(r);
                self.line(&format!("push {a}\npush mem, {w}"));
                self.depth += 1;
            }
            21 if room >= 1 => {
                let n = 1 + r.below(room.min(4) as u64) as i64;
                self.line(&format!("log {n}"));
                self.depth -= n;
            }
            22 if room >= 1 => {
                self.line("log b, 1");
                self.depth -= 1;
            }
            23 => {
                let a = addr(r);
                let len = *r.pick(&[0u64, 5, 13, 64]);
                self.line(&format!(
                    "push {len}\npush {a}\n{}",
                    r.pick(&["log str", "log mrf"])
                ));
            }
            24 if self.s.vars > 0 => {
                let i = r.below(self.s.vars);
                if room >= 1 && r.chance(50) {
                    self.line(&format!("pop lv, {i}"));
                    self.depth -= 1;
                } else {
                    self.line(&format!("push lv, {i}"));
                    self.depth += 1;
                }
            }
            25 if self.s.gvars > 0 => {
                let i = r.below(self.s.gvars);
                if r.chance(50) {
                    self.line(&format!("inc gv, {i}"));
                } else {
                    self.line(&format!("push gv, {i}"));
                    self.depth += 1;
                }
            }
            26 if self.s.entry && r.chance(50) => {
                self.line(&entry_insn(r));
                self.depth += 1;
            }
            26 => {
                let (l, d) = *r.pick(&[
                    ("push pid", 1),
                    ("push lp", 1),
                    ("save tsp", 1),
                    ("push x", 3),
                    ("nop", 0),
                ]);
                self.line(l);
                self.depth += d;
            }
            27 if room >= 1 => {
                self.line(&format!("setmin\npush {}", r.below(9)));
            }
            28..=29 if self.nest < 3 && self.depth < 40 => {
                // A counted loop whose body never touches the counter.
                let l = self.labels;
                self.labels += 1;
                let n = 1 + r.below(4);
                self.line(&format!("push {n}\nlp{l}:"));
                self.depth += 1;
                let (floor, depth) = (self.floor, self.depth);
                self.floor = depth;
                self.nest += 1;
                for _ in 0..1 + r.below(6) {
                    self.one(r);
                }
                self.nest -= 1;
                self.restore(depth);
                self.floor = floor;
                self.line(&format!("loop lp{l}\nros 1"));
                self.depth -= 1;
            }
            30..=31 if self.nest < 3 && self.depth >= 1 => {
                // A forward branch over a depth-neutral segment.
                let l = self.labels;
                self.labels += 1;
                let j = *r.pick(&["jz", "jnz", "jlt", "jge", "jmp"]);
                self.line(&format!("{j} fw{l}"));
                let depth = self.depth;
                self.nest += 1;
                for _ in 0..1 + r.below(5) {
                    self.one(r);
                }
                self.nest -= 1;
                self.restore(depth);
                self.line(&format!("fw{l}:"));
            }
            32 if self.procs > 0 => {
                self.line(&format!("call p{}", r.below(self.procs as u64)));
            }
            34..=35 if self.dead_slots => {
                let k = 1 + r.below(3) as i64;
                if room >= 1 && r.chance(50) {
                    let op = *r.pick(&["pop", "copy"]);
                    self.line(&format!("{op} tsp, -{k}"));
                    self.depth -= i64::from(op == "pop");
                } else {
                    self.line(&format!("push tsp, -{k}"));
                    self.depth += 1;
                }
            }
            33 if r.chance(15) => {
                let op = *r.pick(&["exit", "abort", "remove", "exit 3"]);
                self.line(op);
            }
            _ => {
                let v = r.below(100);
                self.line(&format!("push {v}"));
                self.depth += 1;
            }
        }
    }
}

/// A random program whose stack depth the compiler can bound: no handler
/// entries, no slot reads above TOS, no stack-supplied counts, nothing popped
/// below the base, depth-neutral procedures. These programs exercise the
/// compiler's store elision and bounded zero-fill, which the general
/// generator rarely reaches.
pub fn disciplined_program(r: &mut Rng) -> String {
    let s = Shape {
        vars: r.below(4),
        gvars: r.below(3),
        procs: r.below(3) as usize,
        entry: false,
    };
    let mut out = String::new();
    let _ = writeln!(out, "name = disc\nmajor = {}", 1 + r.below(5));
    let _ = writeln!(out, "vars = {}\ngvars = {}", s.vars, s.gvars);
    let _ = writeln!(out, "logmax = {}", r.pick(&[24, 100, 1024, 1024, 1024]));
    let _ = writeln!(out, "jmpmax = {}", r.pick(&[3, 20, 200, 1000]));
    let _ = writeln!(out, "autostacktrace = {}", r.pick(&["yes", "no"]));
    let mask = *r.pick(&[0x0fffu64, 0x1fff, 0x0fdf]);
    let _ = writeln!(out, "excpt_mask = 0x{mask:x}");
    let dead_slots = r.chance(30);
    let gen_body = |r: &mut Rng, s: &Shape, procs: usize, neutral: bool| -> String {
        let mut d = Disciplined {
            s,
            depth: 0,
            floor: 0,
            labels: 0,
            out: String::new(),
            nest: 0,
            procs,
            dead_slots,
        };
        for _ in 0..2 + r.below(20) {
            d.one(r);
        }
        if neutral {
            d.restore(0);
        } else if d.depth > 0 && r.chance(70) {
            let n = d.depth.min(4);
            d.line(&format!("log {n}"));
        }
        d.out
    };
    let probes = 1 + r.below(2);
    let mut all_return = true;
    for p in 0..probes {
        let _ = writeln!(
            out,
            "\naddress = 0x{:x}\nopcode = 0x55\nminor = {p}",
            0x401000 + p
        );
        let ret = return_statements(r, &mut out);
        all_return &= ret;
        out.push_str(&gen_body(r, &Shape { entry: ret, ..s }, s.procs, false));
    }
    // Procedures call nothing: no recursion.
    let proc_shape = Shape {
        entry: all_return,
        ..s
    };
    for p in 0..s.procs {
        let _ = writeln!(out, "\nproc p{p}");
        out.push_str(&gen_body(r, &proc_shape, 0, true));
    }
    out
}
