//! Fuzz smoke: seeded random and mutated programs through the whole front
//! end (lexer, parser, checker, code generation). Nothing may panic or hang;
//! every program that compiles must give a module that validates, and every
//! error must render. The corpus is `errors.txt` (every error) plus valid
//! one-liners; mutations insert, delete, duplicate and replace bytes and
//! splice tokens.

const VALID: &[&str] = &[
    "BEGIN { printf(\"hello %d %s\\n\", 42, comm); @x[1, \"a\"] = count(); exit(); }",
    "BEGIN { $v = 3; $v += 2; if ($v > 4 && 1 || 0) { @y = $v / 0; } else { @y = 2; } @t = (1, \"x\"); print(@t); }",
    "interval:ms:100 { @i++; if (@i > 3) { exit(); } } END { print(@i); clear(@i); zero(@i); }",
    "BEGIN { @h = hist(5); @l = lhist(5, 0, 100, 10); @s = stats(1); @a = avg(2); @m = min(3); @n = max(4); }",
    "BEGIN { $i = 0; while ($i < 10) { $i++; if ($i == 5) { continue; } @w[$i % 3] = sum($i); } unroll(4) { @u++; } }",
    "BEGIN { printf(\"%5d|%-5s|%05x|%c|%p|%lu|%hhd\\n\", 1, \"a\", 2, 65, 4, 5, 6); time(\"%H\\n\"); print(1 + 2 * 3 ? 4 : 5); }",
    "BEGIN { @s[\"k\"] = \"v\"; @s[\"k2\"] = str(0); $x = (int8)-1; @c = $x >> 1 << 2 ^ 3 | 4 & 5 % 6; delete(@s[\"k\"]); }",
];

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

const TOKENS: &[&str] = &[
    "{",
    "}",
    "(",
    ")",
    "[",
    "]",
    ";",
    ",",
    "/",
    "@",
    "$",
    "\"",
    "==",
    "+=",
    "++",
    "?",
    ":",
    ".",
    "->",
    "count()",
    "hist(",
    "printf(",
    "str(",
    "if",
    "else",
    "while",
    "unroll(",
    "exit()",
    "BEGIN",
    "END",
    "uprobe:",
    "arg0",
    "retval",
    "comm",
    "0x",
    "99999999999999999999",
    "\\",
    "@x",
    "$y",
    "(1,2)",
    "*",
    "(uint8)",
    "args->",
    "ustack",
    "print(",
    "lhist(1,0,10,1)",
];

fn mutate(r: &mut Rng, s: &str) -> String {
    let mut b = s.as_bytes().to_vec();
    for _ in 0..=r.below(4) {
        let at = r.below(b.len() + 1);
        match r.below(5) {
            0 if !b.is_empty() => {
                let end = (at + r.below(8)).min(b.len());
                b.drain(at.min(end)..end);
            }
            1 => b.insert(at, r.next() as u8),
            2 => {
                let t = TOKENS[r.below(TOKENS.len())];
                b.splice(at..at, t.bytes());
            }
            3 if !b.is_empty() => {
                let i = r.below(b.len());
                b[i] = r.next() as u8;
            }
            _ => {
                let from = r.below(b.len() + 1);
                let end = (from + r.below(16)).min(b.len());
                let piece = b[from..end].to_vec();
                b.splice(at..at, piece);
            }
        }
    }
    String::from_utf8_lossy(&b).into_owned()
}

#[test]
fn random_and_mutated_programs_never_panic() {
    let errors =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/errors.txt")).unwrap();
    let mut corpus: Vec<String> = VALID.iter().map(|s| s.to_string()).collect();
    corpus.extend(
        errors
            .split("=== ")
            .skip(1)
            .filter_map(|b| b.split_once('\n').map(|(p, _)| p.to_string()))
            // Uprobe cases need the errors test's target; keep the rest.
            .filter(|p| !p.contains("./t")),
    );
    let mut r = Rng(0x005e_edb7_2a5d);
    let (mut ok, mut err) = (0, 0);
    for i in 0..3000 {
        let base = &corpus[r.below(corpus.len())];
        let prog = if i % 5 == 1 {
            VALID[r.below(VALID.len())].to_string()
        } else if i % 10 == 0 {
            (0..r.below(40))
                .map(|_| TOKENS[r.below(TOKENS.len())])
                .collect::<Vec<_>>()
                .join(" ")
        } else {
            mutate(&mut r, base)
        };
        match bt2wasm::compile("-e", &prog, &bt2wasm::Options::default()) {
            Ok(c) => {
                wasmparser::Validator::new()
                    .validate_all(&c.wasm)
                    .unwrap_or_else(|e| panic!("{prog:?}: invalid module: {e}"));
                ok += 1;
            }
            Err((d, map)) => {
                assert!(!d.0.is_empty(), "{prog:?}: an error without a diagnostic");
                let _ = d.render(&map);
                err += 1;
            }
        }
        if i % 7 == 0 {
            let ev = mutate(
                &mut r,
                "p:ev /bin/true:main a=%di:u32 s=+8(%si):string c=$comm",
            );
            if let Err((d, map)) = bt2wasm::compile_events(&[ev], &bt2wasm::Options::default()) {
                let _ = d.render(&map);
            }
        }
    }
    assert!(ok >= 600 && err > 1000, "{ok} compiled, {err} refused");
}
