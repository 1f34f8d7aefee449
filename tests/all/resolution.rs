//! Probe resolution on real processes: PIE and non-PIE executables, -O0 and
//! -O2, CET (`endbr64` first), a probe in a shared library (by soname-like
//! base name), and one in a library loaded with dlopen after start (armed
//! when the dynamic linker reports it). Each run must produce exactly the
//! expected arguments at every call.

use runtime::out::format::Format;
use runtime::session::{LoadedProgram, RunOptions, Session};
use runtime::transport::ptrace::{ExitStatus, PtraceTracer, TraceOptions};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use wprobe_tests::{SharedBuf, build_c, engine, scratch_dir};

fn progs() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("progs")
}

/// First byte of `sym` in `elf` (what `opcode =` must say).
fn first_byte(elf: &Path, sym: &str) -> u8 {
    let info = wprobe_elf::ElfInfo::open(elf).unwrap();
    let s = match info.lookup(sym) {
        wprobe_elf::Lookup::Found(s) => s.clone(),
        other => panic!("{sym}: {other:?}"),
    };
    info.first_byte(s.value).unwrap()
}

/// Compiles `src` (RPN text) against the symbols of `module_file` and traces `argv`.
fn trace(
    src: &str,
    module_file: &Path,
    argv: &[&str],
    cwd: &Path,
) -> (Vec<serde_json::Value>, Option<ExitStatus>) {
    let opts = rpn2wasm::Options {
        symbols: Some(Box::new(rpn2wasm::symbols::ElfSymbols::new(
            &module_file.to_string_lossy(),
        ))),
        ..Default::default()
    };
    let (program, _) = match rpn2wasm::frontend_str(Path::new("t.rpn"), src, &opts) {
        Ok(x) => x,
        Err((d, m)) => panic!("{}", d.render(&m)),
    };
    let wasm = wprobe_tests::compile(&program);
    let module = runtime::wasm::load::load(engine(), &wasm, None).unwrap();
    let buf = SharedBuf::default();
    let ropts = RunOptions {
        follow_forks: false,
        verify_opcodes: true,
        groups: vec![],
        types: vec![],
        fuel: None,
        format: Format::Json,
        text: Default::default(),
    };
    let input = LoadedProgram {
        label: "t".into(),
        module,
    };
    let mut session = Session::new(engine(), vec![input], ropts, Box::new(buf.clone())).unwrap();
    let cmd = format!(
        "cd {} && exec {} > /dev/null",
        cwd.display(),
        argv.join(" ")
    );
    let argv: Vec<std::ffi::OsString> = ["/bin/sh", "-c", &cmd].iter().map(Into::into).collect();
    let mut tracer = PtraceTracer::launch(
        &argv,
        TraceOptions {
            follow_forks: false,
            verify_opcodes: true,
        },
    )
    .unwrap();
    let main = tracer.main_pid();
    session.arm(&mut tracer, main, true);
    let status = session.run(&mut tracer, &AtomicBool::new(false)).unwrap();
    assert!(session.warnings.is_empty(), "{:?}", session.warnings);
    (buf.json_lines(), status)
}

fn logged_words(lines: &[serde_json::Value]) -> Vec<Vec<u64>> {
    lines
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| {
            v["items"][0]["values"]
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn executables_built_every_way() {
    let variants: [(&str, &[&str]); 5] = [
        (
            "args_nopie_O0",
            &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
        ),
        (
            "args_pie_O0",
            &["-O0", "-fpie", "-pie", "-fcf-protection=none"],
        ),
        (
            "args_pie_O2",
            &["-O2", "-fpie", "-pie", "-fcf-protection=none"],
        ),
        (
            "args_nopie_O2_cet",
            &["-O2", "-fno-pie", "-no-pie", "-fcf-protection=full"],
        ),
        (
            "args_pie_O0_cet",
            &["-O0", "-fpie", "-pie", "-fcf-protection=full"],
        ),
    ];
    for (name, flags) in variants {
        let exe = build_c(&progs().join("args_target.c"), name, flags);
        let op = first_byte(&exe, "work");
        if flags.contains(&"-fcf-protection=full") {
            assert_eq!(op, 0xf3, "{name}: CET functions start with endbr64");
        }
        let src = format!(
            "name = {name}\noffset = work\nopcode = 0x{op:02x}\n push r, rsi\n push r, rdi\n log 2\n"
        );
        let (lines, status) = trace(&src, &exe, &[&format!("./{name}"), "4"], &scratch_dir());
        assert_eq!(status, Some(ExitStatus::Code(0)), "{name}");
        assert_eq!(
            logged_words(&lines),
            [[0, 7], [1, 7], [2, 7], [3, 7]],
            "{name}"
        );
    }
}

#[test]
fn probe_in_a_linked_shared_library() {
    let dir = scratch_dir();
    let lib = build_c(
        &progs().join("libshared.c"),
        "libshared.so",
        &["-O0", "-shared", "-fpic"],
    );
    let exe = dir.join("lib_linked");
    if !exe.exists() {
        let st = std::process::Command::new("gcc")
            .args(["-O0", "-DLINKED", "-o"])
            .arg(&exe)
            .arg(progs().join("lib_user.c"))
            .arg(format!("-L{}", dir.display()))
            .args(["-lshared", "-Wl,-rpath,$ORIGIN"])
            .status()
            .unwrap();
        assert!(st.success());
    }
    let op = first_byte(&lib, "lib_fn");
    let src = format!(
        "name = libshared.so\noffset = lib_fn\nopcode = 0x{op:02x}\n push r, rdi\n log 1\n"
    );
    let (lines, status) = trace(&src, &lib, &["./lib_linked", "5"], &dir);
    assert_eq!(status, Some(ExitStatus::Code(0)));
    assert_eq!(logged_words(&lines), [[0], [1], [2], [3], [4]]);
}

#[test]
fn probe_in_a_library_loaded_with_dlopen_after_start() {
    let dir = scratch_dir();
    let lib = build_c(
        &progs().join("libshared.c"),
        "libshared.so",
        &["-O0", "-shared", "-fpic"],
    );
    let exe = build_c(&progs().join("lib_user.c"), "lib_dlopen", &["-O0", "-ldl"]);
    let op = first_byte(&lib, "lib_fn");
    let src = format!(
        "name = {}\noffset = lib_fn\nopcode = 0x{op:02x}\n push r, rdi\n log 1\n",
        lib.display()
    );
    let (lines, status) = trace(
        &src,
        &lib,
        &[exe.to_str().unwrap(), "6", lib.to_str().unwrap()],
        &dir,
    );
    assert_eq!(status, Some(ExitStatus::Code(0)));
    assert_eq!(logged_words(&lines), [[0], [1], [2], [3], [4], [5]]);
}
