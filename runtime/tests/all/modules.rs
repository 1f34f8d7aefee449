//! Which code a probe names: modules named as users write them (a short
//! library name such as `libc`, a soname, a path; in programs and in
//! `--probe`), the one symbol-matching rule of compiler and runtime (the
//! single global definition of a name), and locations checked to be
//! instruction boundaries when the program gives no `opcode =`.

use crate::case;
use crate::support::case::Case;
use crate::support::cli::*;
use std::path::{Path, PathBuf};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(libc_by_short_name_and_soname_counts_every_malloc @ every_transport),
    case!(probe_flag_takes_a_library_name @ every_transport),
    case!(a_location_inside_an_instruction_is_refused_with_the_nearest_boundaries @ every_transport),
    case!(an_ifunc_is_probed_in_the_implementation_the_process_chose @ per_transport),
    case!(probe_flag_inside_an_instruction_is_refused),
    case!(compiler_and_runtime_choose_the_single_global_definition),
    case!(list_shows_what_it_verified_and_demangles),
    case!(list_demangles_by_default_and_covers_a_process_s_libraries),
    case!(a_program_built_for_another_build_of_the_module_is_refused),
    case!(non_regular_files_are_refused_not_read),
];

fn mallocs() -> PathBuf {
    gcc("mallocs", &progs().join("mallocs.c"), &["-O1"])
}

/// The first words of the records whose first word is one of the target's
/// own malloc sizes (0x10000 + i).
fn own_sizes(lines: &[serde_json::Value]) -> Vec<u64> {
    first_words(lines)
        .into_iter()
        .filter(|v| (0x10000..0x20000).contains(v))
        .collect()
}

fn libc_by_short_name_and_soname_counts_every_malloc(tr: &str) {
    let exe = mallocs();
    for name in ["libc", "libc.so.6"] {
        let p = write(
            &format!("malloc_{}_{tr}.rpn", name.replace('.', "_")),
            format!("name = {name}\noffset = malloc\n push r, rdi\n log 1\n"),
        );
        let (lines, err, code) = run(tr, &[&p], &[exe.to_str().unwrap(), "50"]);
        assert_eq!(code, Some(0), "{name}: {err}");
        assert_eq!(
            own_sizes(&lines),
            (0x10000..0x10000 + 50).collect::<Vec<u64>>(),
            "{tr} {name}: {err}"
        );
        assert!(!err.contains("warning"), "{err}");
    }
}

/// `f` is an IFUNC whose resolver picks `impl_b` (tests/progs/ifunc.c): a
/// probe on `f` fires in `impl_b` at every call, in a non-PIE executable
/// (whose IRELATIVE slot the dynamic linker fills after the library events
/// a tracer sees) and in a PIE.
fn an_ifunc_is_probed_in_the_implementation_the_process_chose(tr: &str) {
    for (name, flags) in [
        (
            "ifunc_nopie",
            &["-O1", "-no-pie", "-fcf-protection=none"][..],
        ),
        ("ifunc_pie", &["-O1", "-fPIE", "-pie"][..]),
    ] {
        let exe = gcc(name, &progs().join("ifunc.c"), flags);
        let impl_b = sym(&exe, "impl_b");
        let p = write(
            &format!("{name}_{tr}.rpn"),
            format!(
                "name = {}\noffset = f\n push r, rip\n log 1\n",
                exe.display()
            ),
        );
        let (lines, err, code) = run(tr, &[&p], &[exe.to_str().unwrap(), "25"]);
        assert_eq!(code, Some(0), "{name}: {err}");
        let rips = first_words(&lines);
        assert_eq!(rips.len(), 25, "{tr} {name}: {err}");
        assert!(rips.iter().all(|&r| r == rips[0]), "{rips:x?}");
        if name == "ifunc_nopie" {
            assert_eq!(rips[0], impl_b, "{tr} {name}: {err}");
        } else {
            // A load bias is a multiple of the page size.
            assert_eq!(rips[0] & 0xfff, impl_b & 0xfff, "{tr} {name}: {err}");
        }
        assert!(
            err.contains("`f` is an IFUNC; probing the implementation process"),
            "{err}"
        );
        assert!(!err.contains("warning"), "{err}");
    }
}

fn probe_flag_takes_a_library_name(tr: &str) {
    let exe = mallocs();
    let wat = write(
        "log_rdi.wat",
        format!(
            "(module (import \"wprobe\" \"read_reg\" (func $r (param i32 i32) (result i64)))\n\
             (import \"wprobe\" \"emit_log\" (func $log (param i32 i32 i32 i32 i32 i32) (result i32)))\n\
             (memory (export \"memory\") 1)\n\
             (func (export \"on_malloc\") (result i32)\n\
               (i64.store (i32.const 0) (call $r (i32.const {rdi}) (i32.const 0)))\n\
               (i32.store (i32.const 16) (i32.const 0x800000))\n\
               (drop (call $log (i32.const 1) (i32.const 0) (i32.const 0) (i32.const 8) (i32.const 16) (i32.const 1)))\n\
               (i32.const 0)))\n",
            rdi = hostabi::regs::by_name("rdi").unwrap().id
        ),
    );
    let mut c = wprobe();
    c.arg("run")
        .arg(&wat)
        .args([
            "--probe",
            "libc:malloc=on_malloc",
            "--transport",
            tr,
            "--format",
            "json",
            "--",
        ])
        .arg(&exe)
        .arg("20");
    let o = output_within(c, 60);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.starts_with('{'))
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(
        own_sizes(&lines),
        (0x10000..0x10000 + 20).collect::<Vec<u64>>(),
        "{tr}"
    );
}

/// `func` of `file` (decoded from the file) and its first instruction
/// longer than one byte: `(function, its address, its length)`.
fn multi_byte_insn(file: &Path, func: &str) -> (wprobe_elf::Symbol, u64, u64) {
    let info = wprobe_elf::ElfInfo::open(file).unwrap();
    let f = match info.lookup(func) {
        wprobe_elf::Lookup::Found(s) => s.clone(),
        other => panic!("{other:?}"),
    };
    let (insns, _) = wprobe_elf::disasm::decode_function(&info, &f);
    let (at, len) = insns.iter().copied().find(|(_, l)| *l > 1).unwrap();
    (f, at, len as u64)
}

fn a_location_inside_an_instruction_is_refused_with_the_nearest_boundaries(tr: &str) {
    // One byte into target()'s first multi-byte instruction.
    let exe = gcc(
        "calls_O0_nocet",
        &progs().join("calls.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    );
    let (f, at, len) = multi_byte_insn(&exe, "target");
    let off = at - f.value + 1;
    let p = write(
        &format!("mid_{tr}.rpn"),
        format!(
            "name = {}\noffset = target+{off}\n push 1\n log 1\n",
            exe.display()
        ),
    );
    let (lines, err, code) = run(tr, &[&p], &[exe.to_str().unwrap(), "5"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "wprobe: warning: probe mid_{tr}:target+{off:#x} not applied in pid "
        )) && err.contains(&format!(
            ": {:#x} is not an instruction boundary: it is inside the instruction at {at:#x} \
             (target+{}); the nearest boundaries are {at:#x} and {:#x} (target+{})\n",
            at + 1,
            at - f.value,
            at + len,
            at + len - f.value
        )),
        "{err}"
    );
    assert!(err.contains("error: no probe could be armed"), "{err}");
    assert!(lines.is_empty());
}

fn probe_flag_inside_an_instruction_is_refused() {
    let exe = gcc(
        "calls_O0_nocet",
        &progs().join("calls.c"),
        &["-O0", "-fno-pie", "-no-pie", "-fcf-protection=none"],
    );
    let (f, at, _) = multi_byte_insn(&exe, "main");
    let mid = at - f.value + 1;
    let wat = write(
        "nothing.wat",
        "(module (func (export \"h\") (result i32) (i32.const 0)))",
    );
    let mut c = wprobe();
    c.arg("run")
        .arg(&wat)
        .arg("--probe")
        .arg(format!("main+{mid}=h"))
        .arg("--")
        .arg(&exe)
        .arg("3");
    let o = output_within(c, 60);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("is not an instruction boundary"), "{err}");
    assert!(
        !String::from_utf8_lossy(&o.stdout).contains("sum="),
        "the target was not run with a broken probe"
    );
}

fn compiler_and_runtime_choose_the_single_global_definition() {
    // `dup_sym` is defined twice: a local (static) one, first in the symbol
    // table, called 3 times, and the global one, called 5 times. Compiled
    // symbol values (in the manifest and in `push dup_sym`) and run-time
    // resolution both mean the global one.
    let exe = scratch().join("dup");
    let st = std::process::Command::new("gcc")
        .args(["-O0", "-fcf-protection=none", "-o"])
        .arg(&exe)
        .arg(progs().join("dup_global.c"))
        .arg(progs().join("dup_local.c"))
        .status()
        .unwrap();
    assert!(st.success());
    let global = {
        let info = wprobe_elf::ElfInfo::open(&exe).unwrap();
        let all: Vec<_> = info
            .symbols
            .iter()
            .filter(|s| s.name == "dup_sym")
            .collect();
        assert_eq!(all.len(), 2, "{all:?}");
        all.iter().find(|s| s.global).unwrap().value
    };
    let p = write(
        "dup.rpn",
        format!(
            "name = {}\noffset = dup_sym\n push r, rip\n push dup_sym\n sub\n push r, rdi\n log 2\n",
            exe.display()
        ),
    );
    let (lines, err, code) = run("ptrace", &[&p], &[exe.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{err}");
    let logged: Vec<&serde_json::Value> = lines
        .iter()
        .filter(|v| v["kind"] == "log")
        .map(|v| &v["items"][0]["values"])
        .collect();
    // rdi of the 5 calls of the global one; dup_sym - rip = 0.
    let want: Vec<serde_json::Value> = (0..5).map(|i| serde_json::json!([i, 0])).collect();
    assert_eq!(logged, want.iter().collect::<Vec<_>>(), "{err}");
    let _ = global;
}

fn list_shows_what_it_verified_and_demangles() {
    let o = wprobe().args(["list", "libc", "malloc"]).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{}", stderr(&o));
    let row = out
        .lines()
        .find(|l| l.ends_with(" malloc"))
        .unwrap_or_else(|| panic!("{out}"));
    assert!(row.contains(" insns "), "{row}");
    // strlen is an IFUNC in glibc: the symbol is the resolver.
    let o = wprobe()
        .args(["list", "libc.so.6", "strlen"])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.lines()
            .any(|l| l.ends_with(" strlen") && l.contains("ifunc")),
        "{out}"
    );
}

/// A program built against one file of a module, run where the process
/// maps another build of it (another version of a library): the symbol is
/// elsewhere, and the probe is refused with both addresses instead of
/// landing on whatever the old address holds now.
fn a_program_built_for_another_build_of_the_module_is_refused() {
    let dir_a = scratch().join("build_a");
    let dir_b = scratch().join("build_b");
    for (d, opt) in [(&dir_a, "-O0"), (&dir_b, "-O2")] {
        std::fs::create_dir_all(d).unwrap();
        let st = std::process::Command::new("gcc")
            .args([opt, "-fno-pie", "-no-pie", "-pthread", "-I"])
            .arg(progs())
            .arg("-o")
            .arg(d.join("calls_mc"))
            .arg(progs().join("calls.c"))
            .status()
            .unwrap();
        assert!(st.success());
    }
    let a = sym(&dir_a.join("calls_mc"), "target");
    let b = sym(&dir_b.join("calls_mc"), "target");
    assert_ne!(a, b, "the two builds must differ");
    std::fs::write(
        dir_a.join("mc.rpn"),
        "name = calls_mc\noffset = target\n push 1\n log 1\n",
    )
    .unwrap();
    let o = wprobe()
        .args(["compile", "mc.rpn", "-o", "mc.wasm"])
        .current_dir(&dir_a)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let o = output_within(
        {
            let mut c = wprobe();
            c.arg("run")
                .arg(dir_a.join("mc.wasm"))
                .arg("--")
                .arg(dir_b.join("calls_mc"))
                .arg("3");
            c
        },
        60,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!(
            ": `target` is at {b:#x} in {}, but the program was built for it at {a:#x}: the \
             process maps another build of the module; rebuild the program against it\n",
            dir_b.join("calls_mc").display()
        )),
        "{err}"
    );
}

/// Files that are not regular files are never read as modules: listing
/// `/dev/zero`, running it as a program, or a `--probe` on a process that
/// maps `/dev/zero` executable (which once read gigabytes until the OOM
/// killer came) are immediate, clear errors.
fn non_regular_files_are_refused_not_read() {
    let o = wprobe().args(["list", "/dev/zero"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "error: module file `/dev/zero` is not a regular file\n"
    );
    let o = wprobe()
        .args(["run", "/dev/zero", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(stderr(&o), "error: reading /dev/zero: not a regular file\n");
    let exe = gcc("map_devzero", &progs().join("map_devzero.c"), &["-O1"]);
    let mut target = std::process::Command::new(&exe)
        .arg("30")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(target.stdout.as_mut().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line, "mapped\n");
    let wat = write(
        "zero.wat",
        "(module (func (export \"h\") (result i32) (i32.const 0)))",
    );
    let t0 = std::time::Instant::now();
    let o = output_within(
        {
            let mut c = wprobe();
            c.arg("run")
                .arg(&wat)
                .args(["--probe", "zero:foo=h", "-p", &target.id().to_string()]);
            c
        },
        30,
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(err.contains("/dev/zero: not a regular file"), "{err}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(10),
        "{:?}",
        t0.elapsed()
    );
    assert!(target.try_wait().unwrap().is_none(), "the process runs on");
    target.kill().unwrap();
    target.wait().unwrap();
}

/// `wprobe list` shows C++ names demangled by default (globs match either
/// form), as written with `--no-demangle`; `list -p PID` covers the
/// process's executable and the libraries it maps.
fn list_demangles_by_default_and_covers_a_process_s_libraries() {
    let exe = gcc(
        "throw3_list",
        &progs().join("throw3.cc"),
        &["-O1", "-fno-inline", "-lstdc++"],
    );
    let list = |args: &[&str]| {
        let o = wprobe().arg("list").args(args).output().unwrap();
        assert!(o.status.success(), "{}", stderr(&o));
        String::from_utf8(o.stdout).unwrap()
    };
    // The symbol is the last column; rows are in address order.
    let names = |out: &str| -> Vec<String> {
        out.lines()
            .filter(|l| l.starts_with("0x"))
            .filter_map(|l| l.rsplit_once("  ").map(|(_, n)| n.trim().to_string()))
            .collect()
    };
    let e = exe.to_str().unwrap();
    let shown = list(&[e, "t?(*"]);
    assert_eq!(names(&shown), ["t3(int)", "t2(int)", "t1(int)"], "{shown}");
    // A glob on the mangled form finds the same functions, shown demangled.
    assert_eq!(names(&list(&[e, "_Z2t*"])), names(&shown));
    let raw = list(&["--no-demangle", e, "_Z2t*"]);
    assert_eq!(names(&raw), ["_Z2t3i", "_Z2t2i", "_Z2t1i"], "{raw}");
    // A running process: `malloc` is in libc, not in the executable.
    let mut child = std::process::Command::new(slow_target())
        .arg("5000")
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let pid = child.id().to_string();
    std::thread::sleep(std::time::Duration::from_millis(100));
    let out = list(&["-p", &pid, "malloc"]);
    let _ = child.kill();
    let _ = child.wait();
    // Listed under the libc the process maps, at a run-time address
    // (its load bias plus the symbol's offset).
    let lines: Vec<&str> = out.lines().collect();
    let libc = lines
        .iter()
        .position(|l| l.starts_with("# ") && l.contains("/libc.so.6 (bias 0x"))
        .unwrap_or_else(|| panic!("{out}"));
    let bias = u64::from_str_radix(
        lines[libc]
            .rsplit_once("(bias 0x")
            .unwrap()
            .1
            .trim_end_matches(')'),
        16,
    )
    .unwrap();
    let row = lines[libc + 1..]
        .iter()
        .take_while(|l| !l.starts_with('#'))
        .find(|l| l.ends_with(" malloc"))
        .unwrap_or_else(|| panic!("{out}"));
    let addr = u64::from_str_radix(&row[2..18], 16).unwrap();
    assert!(bias > 0 && addr > bias, "{out}");
}
