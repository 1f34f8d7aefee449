//! The compiled-module cache: a second load of the same module is a hit;
//! corrupt, truncated, foreign and untrusted entries fall back to compiling
//! and give a working module; `WPROBE_NO_CACHE` bypasses it; concurrent
//! writers of one key never expose a broken entry; and `wprobe run` twice
//! on the same `.rpn` says (under `WPROBE_DEBUG`) that the second run hit.
//! Every test uses its own directory through an explicit `Cache` value, so
//! nothing depends on (or races on) the environment of the test process.

use crate::case;
use crate::support::case::Case;

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(second_load_hits_the_cache),
    case!(abi_gate_still_runs_on_a_hit),
    case!(invalid_modules_are_refused_as_without_a_cache_and_never_stored),
    case!(corrupt_entry_falls_back_to_compiling_and_is_rewritten),
    case!(truncated_entry_falls_back_to_compiling),
    case!(foreign_version_entries_fall_back_to_compiling),
    case!(wrong_permission_entries_and_directories_are_not_used),
    case!(an_entry_that_cannot_be_written_is_not_an_error),
    case!(no_cache_variable_bypasses_the_cache),
    case!(concurrent_writers_of_one_key_never_expose_a_broken_entry),
    case!(wprobe_run_twice_hits_the_cache_the_second_time),
];

use hostabi::Outcome;
use rpn2wasm::model::{ModelEnv, probe_target as t};
use rpn2wasm::symbols::MapSymbols;
use runtime::cache::{Cache, CacheKey, CacheMiss, CacheOutcome, ENVELOPE_BYTES};
use runtime::handlers::{RunOutcome, Runner};
use runtime::load::{LoadedModule, load_cached};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

/// A fresh, empty directory for one test.
fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wprobe-cache-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// The test program: logs rdi and rsi at `target_fn` of the examples' target.
fn wasm() -> Vec<u8> {
    static W: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    W.get_or_init(|| {
        let src = "name = probe_target\nmajor = 4\noffset = target_fn\nopcode = 0x55\nminor = 2\n        push r, rsi\n        push r, rdi\n        log 2\n";
        let opts = rpn2wasm::Options {
            symbols: Some(Box::new(MapSymbols::new([("target_fn", t::TARGET_FN)]))),
            ..rpn2wasm::Options::default()
        };
        let (p, _) = rpn2wasm::frontend_str(Path::new("t.rpn"), src, &opts)
            .unwrap_or_else(|(d, m)| panic!("{}", d.render(&m)));
        rpn2wasm::compile_program(p).wasm
    })
    .clone()
}

fn engine() -> wasmtime::Engine {
    runtime::engine::new_engine().unwrap()
}

fn load(engine: &wasmtime::Engine, cache: &Cache) -> (LoadedModule, CacheOutcome) {
    load_cached(engine, &wasm(), None, None, cache).expect("the module loads")
}

/// Instantiates the module and runs its handler on `target_fn(2, 7, …)`:
/// a module from the cache must behave exactly like a compiled one.
fn assert_works(engine: &wasmtime::Engine, m: &LoadedModule) {
    let mut r = Runner::new(engine, ModelEnv::probe_target_hit(2)).unwrap();
    r.add(m, None).unwrap();
    assert_eq!(r.run(0, 0), RunOutcome::Returned(Outcome::Exit));
    let sink = &r.store.data().sink;
    assert_eq!(sink.records.len(), 1);
    let rec = &sink.records[0];
    assert_eq!((rec.major, rec.minor), (4, 2));
    let mut want = 2u64.to_le_bytes().to_vec();
    want.extend(7u64.to_le_bytes());
    assert_eq!(sink.data(rec), want.as_slice());
}

fn entry(engine: &wasmtime::Engine, cache: &Cache) -> PathBuf {
    cache.entry_path(&CacheKey::new(engine, &wasm())).unwrap()
}

fn refused(o: &CacheOutcome) -> String {
    match o {
        CacheOutcome::Miss {
            why: CacheMiss::Refused { problem, .. },
            stored: Ok(()),
        } => problem.clone(),
        other => panic!("expected a refused entry, rewritten; got {other:?}"),
    }
}

/// Files of the cache directory (no temporary file may be left behind).
fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn second_load_hits_the_cache() {
    let dir = temp_dir("hit");
    let cache = Cache::at(&dir);
    let engine = engine();
    let (m, o) = load(&engine, &cache);
    assert_eq!(
        o,
        CacheOutcome::Miss {
            why: CacheMiss::Absent,
            stored: Ok(())
        }
    );
    assert_works(&engine, &m);
    let (m, o) = load(&engine, &cache);
    assert_eq!(o, CacheOutcome::Hit);
    assert_works(&engine, &m);
    // A new engine with the same settings (a new `wprobe run`) hits too.
    let engine2 = runtime::engine::new_engine().unwrap();
    let (m, o) = load(&engine2, &cache);
    assert_eq!(o, CacheOutcome::Hit);
    assert_works(&engine2, &m);
    // Created 0700, one entry, named by the key.
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700);
    let key = CacheKey::new(&engine, &wasm());
    assert_eq!(files(&dir), [format!("{}.cwasm", key.hex())]);
    let emode = std::fs::metadata(entry(&engine, &cache))
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(emode & 0o777, 0o600);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn abi_gate_still_runs_on_a_hit() {
    let dir = temp_dir("gate");
    let cache = Cache::at(&dir);
    let engine = engine();
    load(&engine, &cache);
    // The same module with its manifest replaced by one naming a missing
    // export: the cached compilation exists, the load is refused anyway.
    let (m, o) = load(&engine, &cache);
    assert_eq!(o, CacheOutcome::Hit);
    let mut bad = m.manifest.clone();
    bad.probes[0].export = "nope".into();
    let err = load_cached(&engine, &wasm(), None, Some(bad), &cache)
        .err()
        .expect("refused");
    assert_eq!(
        err.to_string(),
        "handler export `nope` is not exported by the module"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

fn invalid_modules_are_refused_as_without_a_cache_and_never_stored() {
    let dir = temp_dir("invalid");
    let cache = Cache::at(&dir);
    let engine = engine();
    let w = wasm();
    for cut in [8, w.len() / 2, w.len() - 1] {
        let with = load_cached(&engine, &w[..cut], None, None, &cache).err();
        let without = runtime::load::load(&engine, &w[..cut], None).err();
        let with = with.expect("a truncated module is refused").to_string();
        assert_eq!(Some(with), without.map(|e| e.to_string()), "cut {cut}");
    }
    assert_eq!(files(&dir), Vec::<String>::new());
    std::fs::remove_dir_all(&dir).unwrap();
}

fn corrupt_entry_falls_back_to_compiling_and_is_rewritten() {
    let dir = temp_dir("corrupt");
    let cache = Cache::at(&dir);
    let engine = engine();
    load(&engine, &cache);
    let path = entry(&engine, &cache);
    let good = std::fs::read(&path).unwrap();
    // A flipped bit anywhere: in the envelope, at the start of the payload
    // (wasmtime's ELF header), in the middle (code), at the end.
    let n = good.len();
    for at in [
        0,
        9,
        20,
        50,
        ENVELOPE_BYTES,
        ENVELOPE_BYTES + 64,
        n / 2,
        n - 1,
    ] {
        let mut bad = good.clone();
        bad[at] ^= 0x10;
        std::fs::write(&path, &bad).unwrap();
        let (m, o) = load(&engine, &cache);
        let why = refused(&o);
        assert!(
            why.contains("corrupt")
                || why.contains("bad magic")
                || why.contains("another entry format")
                || why.contains("another key")
                || why.contains("payload length"),
            "flip at {at}: {why}"
        );
        if at >= ENVELOPE_BYTES {
            assert_eq!(
                why, "corrupt: the payload checksum differs from the envelope's",
                "flip at {at}"
            );
        }
        assert_works(&engine, &m);
        // Rewritten: the next load hits again.
        assert_eq!(std::fs::read(&path).unwrap(), good);
        assert_eq!(load(&engine, &cache).1, CacheOutcome::Hit);
    }
    // Garbage of any length, and an empty file.
    for garbage in [vec![], vec![0u8; 7], vec![0xAB; 5000]] {
        std::fs::write(&path, &garbage).unwrap();
        let (m, o) = load(&engine, &cache);
        refused(&o);
        assert_works(&engine, &m);
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn truncated_entry_falls_back_to_compiling() {
    let dir = temp_dir("truncated");
    let cache = Cache::at(&dir);
    let engine = engine();
    load(&engine, &cache);
    let path = entry(&engine, &cache);
    let good = std::fs::read(&path).unwrap();
    for cut in [
        0,
        1,
        ENVELOPE_BYTES - 1,
        ENVELOPE_BYTES,
        good.len() / 2,
        good.len() - 1,
    ] {
        std::fs::write(&path, &good[..cut]).unwrap();
        let (m, o) = load(&engine, &cache);
        let why = refused(&o);
        assert!(
            why.starts_with("truncated"),
            "cut at {cut} of {}: {why}",
            good.len()
        );
        assert_works(&engine, &m);
    }
    // Extended by a byte: refused as well.
    let mut long = good.clone();
    long.push(0);
    std::fs::write(&path, &long).unwrap();
    let why = refused(&load(&engine, &cache).1);
    assert!(why.contains("payload length"), "{why}");
    assert_eq!(load(&engine, &cache).1, CacheOutcome::Hit);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// An entry with a valid envelope around `payload` (as `cache.rs` writes it).
fn entry_bytes(key: &CacheKey, version: u32, payload: &[u8]) -> Vec<u8> {
    let mut e = b"WPRBMOD\0".to_vec();
    e.extend(version.to_le_bytes());
    e.extend(key.0);
    e.extend((payload.len() as u64).to_le_bytes());
    e.extend(blake3::hash(payload).as_bytes());
    assert_eq!(e.len(), ENVELOPE_BYTES);
    e.extend(payload);
    e
}

fn foreign_version_entries_fall_back_to_compiling() {
    let dir = temp_dir("foreign");
    let cache = Cache::at(&dir);
    let engine = engine();
    load(&engine, &cache);
    let path = entry(&engine, &cache);
    let key = CacheKey::new(&engine, &wasm());
    let good = std::fs::read(&path).unwrap();
    let payload = &good[ENVELOPE_BYTES..];
    // The envelope format of another wprobe.
    assert_eq!(entry_bytes(&key, 1, payload), good, "format pinned");
    std::fs::write(&path, entry_bytes(&key, 2, payload)).unwrap();
    let (m, o) = load(&engine, &cache);
    assert_eq!(refused(&o), "written by a wprobe with another entry format");
    assert_works(&engine, &m);
    // A well-formed entry whose payload another engine configuration made
    // (no fuel): wasmtime's own compatibility check refuses it.
    let mut c = wasmtime::Config::new();
    c.consume_fuel(false);
    let other = wasmtime::Engine::new(&c).unwrap();
    let foreign = wasmtime::Module::new(&other, wasm())
        .unwrap()
        .serialize()
        .unwrap();
    std::fs::write(&path, entry_bytes(&key, 1, &foreign)).unwrap();
    let (m, o) = load(&engine, &cache);
    let why = refused(&o);
    assert!(why.starts_with("wasmtime refused it: "), "{why}");
    assert_works(&engine, &m);
    // Such an engine has its own key, so it never looks at our entry.
    assert_ne!(CacheKey::new(&other, &wasm()), key);
    assert_eq!(load(&engine, &cache).1, CacheOutcome::Hit);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn wrong_permission_entries_and_directories_are_not_used() {
    let dir = temp_dir("perm");
    let cache = Cache::at(&dir);
    let engine = engine();
    load(&engine, &cache);
    let path = entry(&engine, &cache);
    // Writable by others: refused, replaced by a 0600 entry.
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o666)).unwrap();
    let (m, o) = load(&engine, &cache);
    assert_eq!(
        refused(&o),
        "mode 666 lets group or others write it; only files no one else can change are used"
    );
    assert_works(&engine, &m);
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(load(&engine, &cache).1, CacheOutcome::Hit);
    // A symlink to a good entry: not followed.
    let elsewhere = temp_dir("perm-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let target = elsewhere.join("e.cwasm");
    std::fs::rename(&path, &target).unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let (m, o) = load(&engine, &cache);
    assert!(refused(&o).starts_with("cannot open it: "), "{o:?}");
    assert_works(&engine, &m);
    assert!(!std::fs::symlink_metadata(&path).unwrap().is_symlink());
    // Owned by another user (only root can set this up).
    match std::os::unix::fs::chown(&path, Some(65534), None) {
        Ok(()) => {
            let (m, o) = load(&engine, &cache);
            assert!(refused(&o).starts_with("owned by uid 65534"), "{o:?}");
            assert_works(&engine, &m);
        }
        Err(e) => eprintln!("skipping the other-owner case: chown: {e}"),
    }
    // A directory writable by others: not used at all, nothing written.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (m, o) = load(&engine, &cache);
    match &o {
        CacheOutcome::Miss {
            why: CacheMiss::Directory { problem, .. },
            stored: Err(_),
        } => assert!(problem.starts_with("mode 777 lets"), "{problem}"),
        other => panic!("{other:?}"),
    }
    assert_works(&engine, &m);
    assert_eq!(files(&dir), Vec::<String>::new());
    // A file where the directory should be.
    let file = elsewhere.join("not-a-dir");
    std::fs::write(&file, b"x").unwrap();
    let (m, o) = load(&engine, &Cache::at(&file));
    assert!(
        matches!(
            o,
            CacheOutcome::Miss {
                why: CacheMiss::Directory { .. },
                ..
            }
        ),
        "{o:?}"
    );
    assert_works(&engine, &m);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&elsewhere).unwrap();
}

fn an_entry_that_cannot_be_written_is_not_an_error() {
    // A directory where the entry should be: it cannot be read as an entry
    // nor replaced by one (the rename fails, as a full disk makes the write
    // fail); the load still succeeds and leaves no temporary file.
    let dir = temp_dir("unwritable");
    let cache = Cache::at(&dir);
    let engine = engine();
    let path = entry(&engine, &cache);
    std::fs::create_dir_all(&path).unwrap();
    for _ in 0..2 {
        let (m, o) = load(&engine, &cache);
        match &o {
            CacheOutcome::Miss {
                why: CacheMiss::Refused { problem, .. },
                stored: Err(e),
            } => {
                assert_eq!(problem, "not a regular file");
                assert!(e.starts_with("writing "), "{e}");
            }
            other => panic!("{other:?}"),
        }
        assert_works(&engine, &m);
    }
    let key = CacheKey::new(&engine, &wasm());
    assert_eq!(files(&dir), [format!("{}.cwasm", key.hex())]);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn no_cache_variable_bypasses_the_cache() {
    let dir = temp_dir("off");
    let vars = |k: &str| match k {
        "WPROBE_NO_CACHE" => Some("1".into()),
        "WPROBE_CACHE_DIR" => Some(dir.clone().into_os_string()),
        _ => None,
    };
    let cache = Cache::from_vars(vars);
    assert_eq!(cache, Cache::disabled());
    let engine = engine();
    for _ in 0..2 {
        let (m, o) = load(&engine, &cache);
        assert!(
            matches!(
                o,
                CacheOutcome::Miss {
                    why: CacheMiss::Disabled,
                    stored: Err(_)
                }
            ),
            "{o:?}"
        );
        assert_works(&engine, &m);
    }
    assert!(!dir.exists());
}

fn concurrent_writers_of_one_key_never_expose_a_broken_entry() {
    let dir = temp_dir("race");
    let cache = Cache::at(&dir);
    let engine = engine();
    let path = entry(&engine, &cache);
    for round in 0..3 {
        let _ = std::fs::remove_file(&path);
        let barrier = std::sync::Barrier::new(4);
        let outcomes: Vec<CacheOutcome> = std::thread::scope(|s| {
            let hs: Vec<_> = (0..4)
                .map(|_| {
                    s.spawn(|| {
                        barrier.wait();
                        let (m, o) = load(&engine, &cache);
                        assert_works(&engine, &m);
                        o
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for o in &outcomes {
            assert!(
                matches!(
                    o,
                    CacheOutcome::Hit
                        | CacheOutcome::Miss {
                            why: CacheMiss::Absent,
                            stored: Ok(())
                        }
                ),
                "round {round}: {o:?}"
            );
        }
        assert!(outcomes.iter().any(|o| !o.is_hit()), "round {round}");
        assert_eq!(load(&engine, &cache).1, CacheOutcome::Hit, "round {round}");
        // One entry, no temporary file left behind.
        assert_eq!(files(&dir).len(), 1, "{:?}", files(&dir));
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn wprobe_run_twice_hits_the_cache_the_second_time() {
    let scratch = temp_dir("cli");
    std::fs::create_dir_all(&scratch).unwrap();
    let cache_dir = scratch.join("cache");
    let target = crate::support::cli::probe_target();
    let rpn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/examples/01_log_args.rpn");
    let run = |extra_env: &[(&str, &str)]| {
        let mut c = crate::support::cli::wprobe();
        c.arg("run")
            .arg(&rpn)
            .args(["--format", "json", "--"])
            .arg(&target)
            .current_dir(&scratch)
            .env("WPROBE_DEBUG", "1")
            .env("WPROBE_CACHE_DIR", &cache_dir)
            .env_remove("WPROBE_NO_CACHE");
        for (k, v) in extra_env {
            c.env(k, v);
        }
        let o = c.output().unwrap();
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{err}");
        let out = String::from_utf8(o.stdout).unwrap();
        let logs = out
            .lines()
            .filter(|l| l.contains("\"kind\":\"log\""))
            .count();
        assert_eq!(logs, 3, "{out}");
        err
    };
    let cache_lines = |err: &str| -> Vec<String> {
        err.lines()
            .filter(|l| l.starts_with("wprobe: debug: module cache"))
            .map(str::to_string)
            .collect()
    };
    let first = run(&[]);
    assert_eq!(
        cache_lines(&first),
        [format!(
            "wprobe: debug: module cache miss: {} (no entry; stored)",
            rpn.display()
        )],
        "{first}"
    );
    let second = run(&[]);
    assert_eq!(
        cache_lines(&second),
        [format!(
            "wprobe: debug: module cache hit: {}",
            rpn.display()
        )],
        "{second}"
    );
    let off = run(&[("WPROBE_NO_CACHE", "1")]);
    assert_eq!(
        cache_lines(&off),
        [format!(
            "wprobe: debug: module cache miss: {} (the cache is disabled; not stored: the cache is not in use)",
            rpn.display()
        )],
        "{off}"
    );
    std::fs::remove_dir_all(&scratch).unwrap();
}
