//! The suite's test programs and libraries, built once as bpftrace's CMake
//! builds them (`-g -O0 -fno-omit-frame-pointer -mno-omit-leaf-frame-pointer
//! -no-pie`, `HAVE_SYSTEMTAP_SYS_SDT_H` where `sys/sdt.h` exists; libraries
//! `-fPIC -shared`, not executable) into a directory named by a hash of the
//! sources and flags: a second run reuses it. A program that does not build
//! here (a Go program without `go`) is left out; the tests that run it fail
//! or are skipped by their `REQUIRES`.

use std::path::{Path, PathBuf};
use std::process::Command;

const CFLAGS: &[&str] = &[
    "-g",
    "-O0",
    "-fno-omit-frame-pointer",
    "-mno-omit-leaf-frame-pointer",
];

/// One thing to build.
struct Unit {
    src: PathBuf,
    out: PathBuf,
    cmd: Command,
}

/// Whether `sys/sdt.h` is installed (Debian: `systemtap-sdt-dev`).
fn sdt() -> bool {
    [
        "/usr/include/sys/sdt.h",
        "/usr/include/x86_64-linux-gnu/sys/sdt.h",
    ]
    .iter()
    .any(|p| Path::new(p).exists())
}

fn sources(dir: &Path, exts: &[&str]) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| exts.iter().any(|x| e == *x)))
        .collect();
    v.sort();
    v
}

/// Builds `testprogs/` and `testlibs/` of the suite at `suite` under
/// `cache`; returns the directory holding both (built now or before), and
/// the programs that failed to build, with gcc's first error line.
pub fn build(suite: &Path, cache: &Path) -> Result<(PathBuf, Vec<String>), String> {
    let progs_src = suite.join("testprogs");
    let libs_src = suite.join("testlibs");
    let mut all = sources(&progs_src, &["c", "cpp", "rs", "go"]);
    all.extend(sources(&libs_src, &["c", "h"]));
    let mut h = blake3::Hasher::new();
    h.update(CFLAGS.join(" ").as_bytes());
    h.update(if sdt() { b"sdt" } else { b"nosdt" });
    // The programs name their libraries by absolute path (`-rpath`): a
    // cache copied from another checkout (a worktree made with a copy of
    // `target/`) would load that checkout's libraries, where this one's
    // probes are not.
    h.update(cache.as_os_str().as_encoded_bytes());
    for p in &all {
        h.update(p.file_name().unwrap_or_default().as_encoded_bytes());
        h.update(&std::fs::read(p).unwrap_or_default());
    }
    let key = h.finalize().to_hex();
    let dir = cache.join(format!("progs-{}", &key[..16]));
    let done = dir.join(".built");
    if let Ok(failed) = std::fs::read_to_string(&done) {
        return Ok((dir, failed.lines().map(String::from).collect()));
    }
    let tmp = cache.join(format!("progs-{}.tmp{}", &key[..16], std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(tmp.join("testprogs")).map_err(|e| e.to_string())?;
    std::fs::create_dir_all(tmp.join("testlibs")).map_err(|e| e.to_string())?;
    let mut failed = Vec::new();
    // Libraries first: usdt_lib links with libusdt_tp.
    let mut libs = Vec::new();
    for src in sources(&libs_src, &["c"]) {
        let stem = src.file_stem().unwrap_or_default().to_string_lossy();
        let out = tmp.join("testlibs").join(format!("lib{stem}.so"));
        let mut cmd = Command::new("gcc");
        cmd.args(["-g", "-O0", "-fPIC", "-shared"]);
        if sdt() {
            cmd.arg("-DHAVE_SYSTEMTAP_SYS_SDT_H");
        }
        cmd.arg(&src).arg("-o").arg(&out);
        libs.push(Unit { src, out, cmd });
    }
    run_all(libs, &mut failed, true);
    let mut progs = Vec::new();
    let libdir = dir.join("testlibs");
    for src in sources(&progs_src, &["c", "cpp", "rs", "go"]) {
        let stem = src
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let out = tmp.join("testprogs").join(&stem);
        let ext = src
            .extension()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut cmd = match ext.as_str() {
            "rs" => {
                let mut c = Command::new("rustc");
                c.args(["-C", "symbol_mangling_version=v0", "-o"])
                    .arg(&out)
                    .arg(&src);
                c
            }
            "go" => {
                let mut c = Command::new("go");
                c.arg("build").arg("-o").arg(&out).arg(&src);
                c
            }
            _ => {
                let mut c = Command::new(if ext == "cpp" { "g++" } else { "gcc" });
                c.args(CFLAGS).arg("-no-pie");
                if sdt() {
                    c.arg("-DHAVE_SYSTEMTAP_SYS_SDT_H");
                }
                c.arg(&src).arg("-o").arg(&out);
                c
            }
        };
        if stem == "usdt_lib" {
            cmd.arg("-fPIC")
                .arg("-I")
                .arg(&libs_src)
                .arg("-L")
                .arg(tmp.join("testlibs"))
                .arg("-lusdt_tp")
                .arg(format!("-Wl,-rpath,{}", libdir.display()));
        }
        progs.push(Unit { src, out, cmd });
    }
    run_all(progs, &mut failed, false);
    std::fs::write(tmp.join(".built"), failed.join("\n")).map_err(|e| e.to_string())?;
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => {}
        // Another run built it meanwhile: use that one.
        Err(_) if dir.join(".built").exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
        }
        Err(e) => return Err(format!("{}: {e}", dir.display())),
    }
    Ok((dir, failed))
}

/// Runs the builds two at a time; failures are recorded by name.
fn run_all(units: Vec<Unit>, failed: &mut Vec<String>, lib: bool) {
    let mut units = units.into_iter();
    loop {
        let batch: Vec<Unit> = units.by_ref().take(2).collect();
        if batch.is_empty() {
            return;
        }
        let mut running = Vec::new();
        for mut u in batch {
            u.cmd
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::piped());
            running.push((u.cmd.spawn(), u.src, u.out));
        }
        for (child, src, out) in running {
            let ok = match child {
                Ok(c) => match c.wait_with_output() {
                    Ok(o) if o.status.success() => true,
                    Ok(o) => {
                        let first = String::from_utf8_lossy(&o.stderr)
                            .lines()
                            .find(|l| l.contains("error"))
                            .unwrap_or("")
                            .to_string();
                        failed.push(format!(
                            "{}: {first}",
                            src.file_name().unwrap_or_default().to_string_lossy()
                        ));
                        false
                    }
                    Err(_) => false,
                },
                Err(e) => {
                    failed.push(format!(
                        "{}: {e}",
                        src.file_name().unwrap_or_default().to_string_lossy()
                    ));
                    false
                }
            };
            if ok && lib {
                // bpftrace traces libraries that are not executable.
                use std::os::unix::fs::PermissionsExt;
                let _ = std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o644));
            }
        }
    }
}
