//! Every build error of the one-liner front end, with its exact rendering
//! (`-e:line:col: error[CODE]: message`, the line, the caret, notes):
//! `errors.txt` holds one program per case and what the compiler prints.
//! Uprobe cases trace `./t`, a small gcc-built target made in a scratch
//! directory that becomes the current directory. `BLESS=1` rewrites the
//! expected renderings.

use std::path::Path;

fn build_target(dir: &Path) {
    std::fs::write(
        dir.join("t.c"),
        "__attribute__((noinline)) int add(int a, int b) { return a + b; }\n\
         int main() { return add(1, 2); }\n",
    )
    .unwrap();
    let ok = std::process::Command::new("gcc")
        .args([
            "-O0",
            "-g",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-fcf-protection=none",
            "-o",
        ])
        .arg(dir.join("t"))
        .arg(dir.join("t.c"))
        .status()
        .expect("gcc must be installed")
        .success();
    assert!(ok);
}

fn render(program: &str) -> String {
    match bt2wasm::compile("-e", program, &bt2wasm::Options::default()) {
        Ok(_) => "(compiles)\n".into(),
        Err((d, map)) => d.render(&map),
    }
}

#[test]
fn every_front_end_error_has_its_message_position_and_caret() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/errors.txt");
    let text = std::fs::read_to_string(&path).unwrap();
    let dir = std::env::temp_dir().join(format!("bt2wasm-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    build_target(&dir);
    std::env::set_current_dir(&dir).unwrap();
    let mut cases: Vec<(String, String)> = Vec::new();
    for block in text.split("=== ").skip(1) {
        let (prog, expect) = block.split_once('\n').unwrap_or((block, ""));
        cases.push((prog.to_string(), expect.to_string()));
    }
    assert!(cases.len() >= 60, "{} cases", cases.len());
    if std::env::var_os("BLESS").is_some() {
        let mut out = String::from(
            "Front-end errors of bt2wasm (tests/errors.rs; BLESS=1 rewrites the renderings).\n\n",
        );
        for (p, _) in &cases {
            out += &format!("=== {p}\n{}\n", render(p));
        }
        std::fs::write(&path, out).unwrap();
        return;
    }
    let mut bad = Vec::new();
    let mut codes = std::collections::BTreeSet::new();
    for (p, expect) in &cases {
        let got = render(p);
        for c in got
            .match_indices("error[")
            .map(|(i, _)| &got[i + 6..i + 11])
        {
            codes.insert(c.to_string());
        }
        if got.trim_end() != expect.trim_end() {
            bad.push(format!("=== {p}\n--- expected\n{expect}--- got\n{got}"));
        }
    }
    assert!(
        bad.is_empty(),
        "{} of {} differ:\n{}",
        bad.len(),
        cases.len(),
        bad.join("\n")
    );
    // Every code of the front end (but the events' and the command line's,
    // tested in runtime) occurs.
    for (code, _) in bt2wasm::diag::CODES {
        if *code != bt2wasm::diag::codes::EVENT && *code != bt2wasm::diag::codes::COMMAND_LINE {
            assert!(codes.contains(*code), "no case produces {code}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

/// A program may have at most `hostabi::maps::MAX_MAPS` maps (what the
/// manifest and the map store hold): the one beyond is refused where it is
/// first written, with its position, so that no module is written that
/// `wprobe run` would then reject.
#[test]
fn one_map_more_than_the_manifest_holds_is_refused_where_it_is_written() {
    let max = hostabi::maps::MAX_MAPS;
    let prog = |n: usize| {
        let maps: Vec<String> = (0..n).map(|i| format!("@m{i} = count();")).collect();
        format!("BEGIN {{ {} exit(); }}", maps.join(" "))
    };
    let ok = bt2wasm::compile("-e", &prog(max), &bt2wasm::Options::default());
    let module = ok.unwrap_or_else(|(d, map)| panic!("{}", d.render(&map)));
    assert_eq!(module.manifest().maps.len(), max);
    let text = prog(max + 1);
    let col = text.find(&format!("@m{max} ")).unwrap() + 1;
    let Err((d, map)) = bt2wasm::compile("-e", &text, &bt2wasm::Options::default()) else {
        panic!("{} maps compiled", max + 1);
    };
    let got = d.render(&map);
    let first = got.lines().next().unwrap();
    assert_eq!(
        first,
        format!(
            "-e:1:{col}: error[B0402]: Too many maps: @m{max} is map {} of a program that may \
             have at most {max}",
            max + 1
        )
    );
    assert_eq!(got.lines().count(), 3, "{got}");
}

/// What the run cannot place is refused at the attach point: a
/// watchpoint when no process is traced (a uprobe is system-wide then), and a probe on a symbol of size 0
/// (`_init`) without `--unsafe` (bpftrace's words), or with it where the
/// transport needs the function's bounds; `--unsafe` with a transport
/// that needs none compiles it. The probe's body then gets no second
/// error (`arg0` is checked as in a uprobe).
#[test]
fn probes_the_run_cannot_place_are_refused_at_their_attach_point() {
    let dir = std::env::temp_dir().join(format!("bt2wasm-place-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    build_target(&dir);
    let t = dir.join("t");
    let build = |func: &str, opts: &bt2wasm::Options| {
        let prog = format!(
            "uprobe:{}:{func} {{ printf(\"%d\\n\", arg0); }}",
            t.display()
        );
        match bt2wasm::compile("-e", &prog, opts) {
            Ok(_) => "(compiles)".to_string(),
            Err((d, map)) => d.render(&map),
        }
    };
    let first_line = |s: String| s.lines().next().unwrap_or_default().to_string();
    let mut opts = bt2wasm::Options {
        no_process: true,
        ..Default::default()
    };
    // With no process a uprobe is system-wide (armed on the file by the
    // runtime); a watchpoint's address means nothing without one.
    assert_eq!(build("add", &opts), "(compiles)");
    let r = match bt2wasm::compile(
        "-e",
        "watchpoint:0x10000000:8:w { printf(\"x\\n\"); }",
        &opts,
    ) {
        Ok(_) => "(compiles)".to_string(),
        Err((d, map)) => d.render(&map),
    };
    assert_eq!(
        first_line(r.clone()),
        "-e:1:1: error[B0105]: Watchpoint probes require a -c or -p argument",
    );
    assert_eq!(r.lines().count(), 3, "{r}");
    opts.no_process = false;
    assert_eq!(build("add", &opts), "(compiles)");
    let r = build("_init", &opts);
    assert_eq!(
        first_line(r.clone()),
        "-e:1:1: error[B0104]: Could not determine boundary for _init (symbol has size 0); \
         use --unsafe to force attachment"
    );
    assert_eq!(r.lines().count(), 3, "{r}");
    opts.check.unsafe_calls = true;
    assert_eq!(
        first_line(build("_init", &opts)),
        "-e:1:1: error[B0104]: _init has size 0: the in-process transport places no probe \
         in a function whose bounds it does not know; use --transport ptrace (or perf)"
    );
    opts.unsized_symbols = true;
    assert_eq!(build("_init", &opts), "(compiles)");
    let _ = std::fs::remove_dir_all(&dir);
}
