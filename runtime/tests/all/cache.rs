//! The compiled-module cache: a second load of the same module is a hit;
//! corrupt, truncated, foreign and untrusted entries fall back to compiling
//! and give a working module; `WPROBE_NO_CACHE` bypasses it; concurrent
//! writers of one key never expose a broken entry; and `wprobe run` twice
//! on the same `.rpn` says (under `WPROBE_DEBUG`) that the second run hit.
//! The size bound: least-recently-used eviction (a hit makes an entry
//! recent), the bound held after every store, the entry just written kept
//! even alone over the bound, the entry-count bound, only the cache's own
//! files removed (stale temporary files too, fresh ones never), concurrent
//! writers of different keys, `WPROBE_CACHE_MAX_BYTES` parsed, and all of
//! it through `wprobe run`. The in-process transport's plan cache (`plans/`
//! in the same directory): written by a traced run, used by the next with
//! the same trace, and neither read nor written with `--no-cache` or
//! `WPROBE_NO_CACHE=1`, nor the handlers compiled for the agent.
//! Every test uses its own directory through an explicit `Cache` value, so
//! nothing depends on (or races on) the environment of the test process.

use crate::case;
use crate::support::case::{Case, Need};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(second_load_hits_the_cache),
    case!(abi_gate_still_runs_on_a_hit),
    case!(invalid_modules_are_refused_as_without_a_cache_and_never_stored),
    case!(corrupt_entry_falls_back_to_compiling_and_is_rewritten),
    case!(truncated_entry_falls_back_to_compiling),
    case!(foreign_version_entries_fall_back_to_compiling),
    // Root: their other-owner cases chown a file to another user.
    case!(
        wrong_permission_entries_and_directories_are_not_used,
        Need::Root
    ),
    case!(an_entry_that_cannot_be_written_is_not_an_error),
    case!(no_cache_variable_bypasses_the_cache),
    case!(concurrent_writers_of_one_key_never_expose_a_broken_entry),
    case!(wprobe_run_twice_hits_the_cache_the_second_time),
    case!(eviction_removes_the_least_recently_used_and_a_hit_makes_an_entry_recent),
    case!(the_bound_holds_after_every_store),
    case!(the_entry_just_written_is_kept_even_alone_over_the_bound),
    case!(the_number_of_entries_is_bounded_too),
    case!(
        eviction_removes_only_the_caches_own_files_and_stale_temporary_files,
        Need::Root
    ),
    case!(concurrent_writers_of_different_keys_keep_the_bound),
    case!(max_bytes_variable_is_parsed_or_refused_with_a_clear_error),
    case!(wprobe_run_evicts_down_to_the_bound_and_refuses_a_bad_one),
    case!(
        the_plan_cache_is_kept_by_a_traced_run_and_not_with_no_cache,
        Need::Ptrace
    ),
    case!(a_warm_run_of_a_large_program_rewrites_no_plan, Need::Ptrace),
];

use hostabi::Outcome;
use rpn2wasm::model::{ModelEnv, probe_target as t};
use rpn2wasm::symbols::MapSymbols;
use runtime::wasm::cache::{Cache, CacheKey, CacheMiss, CacheOutcome, ENVELOPE_BYTES, Eviction};
use runtime::wasm::load::{LoadedModule, load_cached};
use runtime::wasm::runner::{RunOutcome, Runner};
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
    program(4)
}

/// The test program with its records' major code `major`: a module of its
/// own (its own key) for each `major`, all of about the same size.
fn program(major: u16) -> Vec<u8> {
    static W: std::sync::Mutex<Vec<(u16, Vec<u8>)>> = std::sync::Mutex::new(Vec::new());
    let mut built = W.lock().unwrap_or_else(|e| e.into_inner());
    if let Some((_, w)) = built.iter().find(|(m, _)| *m == major) {
        return w.clone();
    }
    let src = format!(
        "name = probe_target\nmajor = {major}\noffset = target_fn\nopcode = 0x55\nminor = 2\n        push r, rsi\n        push r, rdi\n        log 2\n"
    );
    let opts = rpn2wasm::Options {
        symbols: Some(Box::new(MapSymbols::new([("target_fn", t::TARGET_FN)]))),
        ..rpn2wasm::Options::default()
    };
    let (p, _) = rpn2wasm::frontend_str(Path::new("t.rpn"), &src, &opts)
        .unwrap_or_else(|(d, m)| panic!("{}", d.render(&m)));
    let w = rpn2wasm::compile_program(p).wasm;
    built.push((major, w.clone()));
    w
}

fn engine() -> wasmtime::Engine {
    runtime::wasm::engine::new_engine().unwrap()
}

fn load(engine: &wasmtime::Engine, cache: &Cache) -> (LoadedModule, CacheOutcome) {
    load_cached(engine, &wasm(), None, None, cache).expect("the module loads")
}

/// Instantiates the module and runs its handler on `target_fn(2, 7, …)`:
/// a module from the cache must behave exactly like a compiled one.
fn assert_works(engine: &wasmtime::Engine, m: &LoadedModule) {
    assert_works_major(engine, m, 4);
}

/// [`assert_works`] for `program(major)`.
fn assert_works_major(engine: &wasmtime::Engine, m: &LoadedModule, major: u16) {
    let mut r = Runner::new(engine, ModelEnv::probe_target_hit(2)).unwrap();
    r.add(m, None).unwrap();
    assert_eq!(r.run(0, 0), RunOutcome::Returned(Outcome::Exit));
    let sink = &r.store.data().sink;
    assert_eq!(sink.records.len(), 1);
    let rec = &sink.records[0];
    assert_eq!((rec.major, rec.minor), (major, 2));
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
            evicted,
        } if evicted.is_empty() => problem.clone(),
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
            stored: Ok(()),
            evicted: Eviction::default(),
        }
    );
    assert_works(&engine, &m);
    let (m, o) = load(&engine, &cache);
    assert_eq!(o, CacheOutcome::Hit);
    assert_works(&engine, &m);
    // A new engine with the same settings (a new `wprobe run`) hits too.
    let engine2 = runtime::wasm::engine::new_engine().unwrap();
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
    let mut bad = (*m.manifest).clone();
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
        let without = runtime::wasm::load::load(&engine, &w[..cut], None).err();
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
    std::os::unix::fs::chown(&path, Some(65534), None).expect("chown (the case needs root)");
    let (m, o) = load(&engine, &cache);
    assert!(refused(&o).starts_with("owned by uid 65534"), "{o:?}");
    assert_works(&engine, &m);
    // A directory writable by others: not used at all, nothing written.
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::fs::remove_file(&path).unwrap();
    let (m, o) = load(&engine, &cache);
    match &o {
        CacheOutcome::Miss {
            why: CacheMiss::Directory { problem, .. },
            stored: Err(_),
            evicted,
        } if evicted.is_empty() => assert!(problem.starts_with("mode 777 lets"), "{problem}"),
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
                evicted,
            } if evicted.is_empty() => {
                assert_eq!(problem, "not a regular file");
                // The rename over the directory in its place.
                assert_eq!(
                    e,
                    &runtime::wasm::cache::StoreError::Io {
                        what: "writing",
                        path: path.clone(),
                        errno: Some(libc::EISDIR),
                        message: std::io::Error::from_raw_os_error(libc::EISDIR).to_string(),
                    }
                );
                assert_eq!(
                    e.to_string(),
                    format!("writing {}: Is a directory (os error 21)", path.display())
                );
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
    let cache = Cache::from_vars(vars).unwrap();
    assert_eq!(cache, Cache::disabled());
    let engine = engine();
    for _ in 0..2 {
        let (m, o) = load(&engine, &cache);
        assert!(
            matches!(
                o,
                CacheOutcome::Miss {
                    why: CacheMiss::Disabled,
                    stored: Err(_),
                    ..
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
                            stored: Ok(()),
                            ..
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

/// Loads `program(major)` through `cache`, checks that the module works,
/// returns what the cache did.
fn load_major(engine: &wasmtime::Engine, cache: &Cache, major: u16) -> CacheOutcome {
    let (m, o) = load_cached(engine, &program(major), None, None, cache).expect("the module loads");
    assert_works_major(engine, &m, major);
    o
}

/// The file name of the entry of `program(major)`.
fn name_of(engine: &wasmtime::Engine, major: u16) -> String {
    format!("{}.cwasm", CacheKey::new(engine, &program(major)).hex())
}

/// Sorted file names of the entries of `majors`.
fn names_of(engine: &wasmtime::Engine, majors: &[u16]) -> Vec<String> {
    let mut v: Vec<String> = majors.iter().map(|m| name_of(engine, *m)).collect();
    v.sort();
    v
}

/// Entry sizes of `majors`, measured in a scratch cache of their own.
fn entry_sizes(engine: &wasmtime::Engine, majors: &[u16]) -> Vec<(u16, u64)> {
    let dir = temp_dir(&format!("sizes-{}", majors[0]));
    let cache = Cache::at(&dir);
    let sizes = majors
        .iter()
        .map(|&m| {
            load_major(engine, &cache, m);
            (
                m,
                std::fs::metadata(dir.join(name_of(engine, m)))
                    .unwrap()
                    .len(),
            )
        })
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    sizes
}

fn size_of(sizes: &[(u16, u64)], major: u16) -> u64 {
    sizes.iter().find(|(m, _)| *m == major).unwrap().1
}

/// A miss of an absent entry, stored, with this eviction.
fn stored_evicting(evicted: Eviction) -> CacheOutcome {
    CacheOutcome::Miss {
        why: CacheMiss::Absent,
        stored: Ok(()),
        evicted,
    }
}

/// An eviction of `entries` entries of `bytes` bytes in total.
fn evicted(entries: usize, bytes: u64) -> Eviction {
    Eviction {
        entries,
        bytes,
        ..Eviction::default()
    }
}

fn eviction_removes_the_least_recently_used_and_a_hit_makes_an_entry_recent() {
    let engine = engine();
    let sizes = entry_sizes(&engine, &[10, 11, 12, 13]);
    let sz = |m| size_of(&sizes, m);
    let dir = temp_dir("lru");
    let unbounded = Cache::at(&dir);
    for m in [10, 11, 12] {
        assert_eq!(
            load_major(&engine, &unbounded, m),
            stored_evicting(Eviction::default())
        );
    }
    // 10 is the oldest store, but a hit makes it the most recent.
    assert_eq!(load_major(&engine, &unbounded, 10), CacheOutcome::Hit);
    // Room for exactly 10, 12 and 13: storing 13 evicts 11, the least
    // recently used, and only it.
    let cache = Cache::at(&dir).with_max_bytes(sz(10) + sz(12) + sz(13));
    assert_eq!(
        load_major(&engine, &cache, 13),
        stored_evicting(evicted(1, sz(11)))
    );
    assert_eq!(files(&dir), names_of(&engine, &[10, 12, 13]));
    // Now 12 is: storing 11 again (a miss) evicts it.
    let cache = Cache::at(&dir).with_max_bytes(sz(10) + sz(13) + sz(11));
    assert_eq!(
        load_major(&engine, &cache, 11),
        stored_evicting(evicted(1, sz(12)))
    );
    assert_eq!(files(&dir), names_of(&engine, &[10, 11, 13]));
    // Hits on 13 then 10 leave 11 the oldest; with room for two entries,
    // storing 12 evicts 11 and then 13.
    assert_eq!(load_major(&engine, &cache, 13), CacheOutcome::Hit);
    assert_eq!(load_major(&engine, &cache, 10), CacheOutcome::Hit);
    let cache = Cache::at(&dir).with_max_bytes(sz(10) + sz(12));
    assert_eq!(
        load_major(&engine, &cache, 12),
        stored_evicting(evicted(2, sz(11) + sz(13)))
    );
    assert_eq!(files(&dir), names_of(&engine, &[10, 12]));
    // Every entry left is whole: both hit.
    assert_eq!(load_major(&engine, &cache, 10), CacheOutcome::Hit);
    assert_eq!(load_major(&engine, &cache, 12), CacheOutcome::Hit);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Total size of the files `names` in `dir`.
fn total_size(dir: &Path, names: &[String]) -> u64 {
    names
        .iter()
        .map(|n| std::fs::metadata(dir.join(n)).unwrap().len())
        .sum()
}

fn the_bound_holds_after_every_store() {
    let engine = engine();
    let majors = [20, 21, 22, 23, 24, 25];
    let sizes = entry_sizes(&engine, &majors);
    let bound = sizes[0].1 * 5 / 2;
    let dir = temp_dir("bound");
    let cache = Cache::at(&dir).with_max_bytes(bound);
    for (i, &m) in majors.iter().enumerate() {
        load_major(&engine, &cache, m);
        // Without hits, recency is the order of the stores: what stays is
        // the newest run of entries that fits.
        let mut want = Vec::new();
        let mut total = 0;
        for &(older, size) in sizes[..=i].iter().rev() {
            if total + size > bound {
                break;
            }
            total += size;
            want.push(older);
        }
        let want = names_of(&engine, &want);
        assert_eq!(files(&dir), want, "after storing {m}");
        assert!(total_size(&dir, &want) <= bound);
        if i >= 2 {
            assert_eq!(want.len(), 2, "two entries fit in 2.5 entries' size");
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn the_entry_just_written_is_kept_even_alone_over_the_bound() {
    let engine = engine();
    for bound in [0, 1] {
        let dir = temp_dir(&format!("over-{bound}"));
        let cache = Cache::at(&dir).with_max_bytes(bound);
        assert_eq!(
            load_major(&engine, &cache, 30),
            stored_evicting(Eviction::default())
        );
        assert_eq!(files(&dir), names_of(&engine, &[30]));
        let size30 = std::fs::metadata(dir.join(name_of(&engine, 30)))
            .unwrap()
            .len();
        assert!(size30 > bound);
        // A hit keeps it (and evicts nothing: hits never do).
        assert_eq!(load_major(&engine, &cache, 30), CacheOutcome::Hit);
        // The next store replaces it.
        assert_eq!(
            load_major(&engine, &cache, 31),
            stored_evicting(evicted(1, size30))
        );
        assert_eq!(files(&dir), names_of(&engine, &[31]));
        assert_eq!(load_major(&engine, &cache, 31), CacheOutcome::Hit);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// Creates `dir` as the cache creates it (mode 0700).
fn make_cache_dir(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700)).unwrap();
}

/// Writes `len` bytes at `dir/name` (mode 0600) last modified `secs_ago`
/// seconds ago.
fn plant(dir: &Path, name: &str, len: usize, secs_ago: u64) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, vec![0x5a; len]).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    set_age(&p, secs_ago);
    p
}

fn set_age(p: &Path, secs_ago: u64) {
    let t = std::time::SystemTime::now() - std::time::Duration::from_secs(secs_ago);
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

/// An entry-shaped file name for `n`.
fn fake_entry_name(n: u64) -> String {
    format!("{n:064x}.cwasm")
}

fn the_number_of_entries_is_bounded_too() {
    use runtime::wasm::cache::MAX_ENTRIES;
    let engine = engine();
    let dir = temp_dir("count");
    make_cache_dir(&dir);
    // MAX_ENTRIES + 4 one-byte entries, the first ones the oldest: with the
    // new entry, 5 too many, far under the size bound.
    let extra = 5;
    let planted = (MAX_ENTRIES + extra - 1) as u64;
    for n in 0..planted {
        plant(&dir, &fake_entry_name(n), 1, 10_000 - n);
    }
    assert_eq!(
        load_major(&engine, &Cache::at(&dir), 40),
        stored_evicting(evicted(extra, extra as u64))
    );
    let mut want: Vec<String> = (extra as u64..planted).map(fake_entry_name).collect();
    want.push(name_of(&engine, 40));
    want.sort();
    assert_eq!(files(&dir), want);
    std::fs::remove_dir_all(&dir).unwrap();
}

fn eviction_removes_only_the_caches_own_files_and_stale_temporary_files() {
    let engine = engine();
    let dir = temp_dir("own");
    make_cache_dir(&dir);
    let elsewhere = temp_dir("own-elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let key = "0123456789abcdef".repeat(4);
    const HOUR: u64 = 3600;
    // Removed: an old entry of ours (its content is not read), a stale
    // temporary file.
    plant(&dir, &fake_entry_name(1), 1000, 3 * HOUR);
    plant(&dir, &format!(".tmp-{key}-77-0-0"), 500, 2 * HOUR);
    // Kept: files the cache did not create, or could not trust.
    let mut kept = vec![
        plant(&dir, "notes.txt", 1000, 3 * HOUR),
        plant(
            &dir,
            &format!("{}.cwasm", key.to_uppercase()),
            1000,
            3 * HOUR,
        ),
        plant(&dir, &format!("{key}.cwasm.bak"), 1000, 3 * HOUR),
        plant(&dir, &format!("{key}0.cwasm"), 1000, 3 * HOUR),
        plant(&dir, ".tmp-notes", 1000, 3 * HOUR),
        // Another process's entry being written: young.
        plant(&dir, &format!(".tmp-{key}-78-0-0"), 500, 60),
    ];
    // Writable by others: not the cache's own (a lookup refuses it too).
    let open = plant(&dir, &fake_entry_name(2), 1000, 3 * HOUR);
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o666)).unwrap();
    kept.push(open);
    // A symlink and a directory with entry names.
    let target = plant(&elsewhere, "t", 1000, 3 * HOUR);
    std::os::unix::fs::symlink(&target, dir.join(fake_entry_name(3))).unwrap();
    kept.push(dir.join(fake_entry_name(3)));
    std::fs::create_dir(dir.join(fake_entry_name(4))).unwrap();
    kept.push(dir.join(fake_entry_name(4)));
    // Another user's entry and temporary file (only root can set this up).
    let foreign = [
        plant(&dir, &fake_entry_name(5), 1000, 3 * HOUR),
        plant(&dir, &format!(".tmp-{key}-79-0-0"), 500, 2 * HOUR),
    ];
    for p in &foreign {
        std::os::unix::fs::chown(p, Some(65534), None).expect("chown (the case needs root)");
    }
    kept.extend(foreign);
    // A bound of 0: everything of ours but the new entry goes.
    let o = load_major(&engine, &Cache::at(&dir).with_max_bytes(0), 50);
    assert_eq!(
        o,
        stored_evicting(Eviction {
            entries: 1,
            bytes: 1000,
            stale_temp_files: 1,
            problems: vec![],
        })
    );
    let mut want: Vec<String> = kept
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    want.push(name_of(&engine, 50));
    want.sort();
    assert_eq!(files(&dir), want);
    assert!(target.exists());
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&elsewhere).unwrap();
}

fn concurrent_writers_of_different_keys_keep_the_bound() {
    let engine = engine();
    let majors = [60, 61, 62, 63];
    let sizes = entry_sizes(&engine, &majors);
    let mut by_size: Vec<u64> = sizes.iter().map(|s| s.1).collect();
    by_size.sort();
    // Room for two entries, never three.
    let bound = by_size[2] + by_size[3];
    assert!(by_size[0] + by_size[1] + by_size[2] > bound);
    let dir = temp_dir("race-bound");
    for round in 0..3 {
        let _ = std::fs::remove_dir_all(&dir);
        let cache = Cache::at(&dir).with_max_bytes(bound);
        // Four writers of different keys, and a reader of a fifth entry
        // that the writers may evict under it.
        assert_eq!(
            load_major(&engine, &cache, 64),
            stored_evicting(Eviction::default())
        );
        let barrier = std::sync::Barrier::new(5);
        let outcomes: Vec<CacheOutcome> = std::thread::scope(|s| {
            let writers: Vec<_> = majors
                .iter()
                .map(|&m| {
                    let (engine, cache, barrier) = (&engine, &cache, &barrier);
                    s.spawn(move || {
                        barrier.wait();
                        load_major(engine, cache, m)
                    })
                })
                .collect();
            let reader = s.spawn(|| {
                barrier.wait();
                for _ in 0..5 {
                    let o = load_major(&engine, &cache, 64);
                    assert!(
                        matches!(
                            o,
                            CacheOutcome::Hit
                                | CacheOutcome::Miss {
                                    why: CacheMiss::Absent,
                                    stored: Ok(()),
                                    ..
                                }
                        ),
                        "round {round}: reader {o:?}"
                    );
                }
            });
            reader.join().unwrap();
            writers.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for o in &outcomes {
            assert!(
                matches!(
                    o,
                    CacheOutcome::Miss {
                        why: CacheMiss::Absent,
                        stored: Ok(()),
                        evicted,
                    } if evicted.problems.is_empty()
                ),
                "round {round}: {o:?}"
            );
        }
        // Whatever the interleaving: within the bound, at least the newest
        // entry, no temporary file, and every entry left is whole.
        let left = files(&dir);
        assert!((1..=2).contains(&left.len()), "round {round}: {left:?}");
        assert!(total_size(&dir, &left) <= bound, "round {round}");
        for name in &left {
            let major = [60, 61, 62, 63, 64]
                .into_iter()
                .find(|m| name_of(&engine, *m) == *name)
                .unwrap_or_else(|| panic!("round {round}: unexpected file {name}"));
            let unbounded = Cache::at(&dir);
            assert_eq!(load_major(&engine, &unbounded, major), CacheOutcome::Hit);
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

fn max_bytes_variable_is_parsed_or_refused_with_a_clear_error() {
    use runtime::wasm::cache::{CacheConfigError, DEFAULT_MAX_BYTES};
    let with = |max: Option<&str>, no_cache: bool| {
        let max = max.map(std::ffi::OsString::from);
        Cache::from_vars(move |k| match k {
            "WPROBE_CACHE_DIR" => Some("/c".into()),
            "WPROBE_CACHE_MAX_BYTES" => max.clone(),
            "WPROBE_NO_CACHE" if no_cache => Some("1".into()),
            _ => None,
        })
    };
    assert_eq!(DEFAULT_MAX_BYTES, 256 << 20);
    assert_eq!(with(None, false), Ok(Cache::at("/c")));
    assert_eq!(with(None, false).unwrap().max_bytes(), DEFAULT_MAX_BYTES);
    // Empty is unset, as for the other variables.
    assert_eq!(
        with(Some(""), false).unwrap().max_bytes(),
        DEFAULT_MAX_BYTES
    );
    for (text, want) in [
        ("0", 0),
        ("123456", 123_456),
        ("64K", 64 << 10),
        ("64k", 64 << 10),
        ("100MiB", 100 << 20),
        ("1G", 1 << 30),
    ] {
        assert_eq!(
            with(Some(text), false),
            Ok(Cache::at("/c").with_max_bytes(want)),
            "{text}"
        );
    }
    for bad in ["12X", "-1", "1.5G", "10 M", "99999999999999999999", "M"] {
        let e = with(Some(bad), false).unwrap_err();
        assert_eq!(
            e,
            CacheConfigError::BadMaxBytes {
                value: bad.to_string()
            }
        );
        assert_eq!(
            e.to_string(),
            format!(
                "WPROBE_CACHE_MAX_BYTES=`{bad}`: expected a size in bytes, optionally with a K, M or G suffix (powers of 1024), such as 256M"
            )
        );
    }
    // Not read when the cache is off.
    assert_eq!(with(Some("12X"), true), Ok(Cache::disabled()));
    // Not UTF-8: refused, shown lossily.
    let bytes = std::ffi::OsString::from(
        <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"1\xffM"),
    );
    let e = Cache::from_vars(|k| match k {
        "WPROBE_CACHE_MAX_BYTES" => Some(bytes.clone()),
        "HOME" => Some("/h".into()),
        _ => None,
    })
    .unwrap_err();
    assert_eq!(
        e,
        CacheConfigError::BadMaxBytes {
            value: "1\u{fffd}M".to_string()
        }
    );
}

fn wprobe_run_evicts_down_to_the_bound_and_refuses_a_bad_one() {
    let scratch = temp_dir("cli-bound");
    std::fs::create_dir_all(&scratch).unwrap();
    let target = crate::support::cli::probe_target();
    let rpn = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/examples/01_log_args.rpn");
    // Under ptrace: one entry per program (the in-process transport adds
    // the agent engine's artifact).
    let run = |cache_dir: &Path, env: &[(&str, &str)]| {
        let mut c = crate::support::cli::wprobe();
        c.args(["run", "--transport", "ptrace"])
            .arg(&rpn)
            .args(["--format", "json", "--"])
            .arg(&target)
            .current_dir(&scratch)
            .env("WPROBE_DEBUG", "1")
            .env("WPROBE_CACHE_DIR", cache_dir)
            .env_remove("WPROBE_NO_CACHE")
            .env_remove("WPROBE_CACHE_MAX_BYTES");
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().unwrap()
    };
    let cache_line = |o: &std::process::Output| -> String {
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{err}");
        let lines: Vec<&str> = err
            .lines()
            .filter(|l| l.starts_with("wprobe: debug: module cache"))
            .collect();
        assert_eq!(lines.len(), 1, "{err}");
        lines[0].to_string()
    };
    // The size of this program's entry.
    let measure = scratch.join("measure");
    cache_line(&run(&measure, &[]));
    let entry = files(&measure);
    assert_eq!(entry.len(), 1);
    let size = std::fs::metadata(measure.join(&entry[0])).unwrap().len();

    // Three old entries of 100,000 bytes, a stale temporary file, a file
    // of the user's; room for the new entry and one old one.
    let dir = scratch.join("cache");
    make_cache_dir(&dir);
    for (n, age) in [(1, 3 * 3600), (2, 2 * 3600), (3, 3600)] {
        plant(&dir, &fake_entry_name(n), 100_000, age);
    }
    plant(
        &dir,
        &format!(".tmp-{}-1-0-0", "ab".repeat(32)),
        10,
        2 * 3600,
    );
    plant(&dir, "notes.txt", 10, 3 * 3600);
    let bound = (size + 150_000).to_string();
    let line = cache_line(&run(&dir, &[("WPROBE_CACHE_MAX_BYTES", &bound)]));
    assert_eq!(
        line,
        format!(
            "wprobe: debug: module cache miss: {} (no entry; stored; evicted 2 entries (200000 bytes); removed 1 stale temporary file)",
            rpn.display()
        )
    );
    let mut want = vec![
        fake_entry_name(3),
        entry[0].clone(),
        "notes.txt".to_string(),
    ];
    want.sort();
    assert_eq!(files(&dir), want);
    // The next run hits and removes nothing.
    let line = cache_line(&run(&dir, &[("WPROBE_CACHE_MAX_BYTES", &bound)]));
    assert_eq!(
        line,
        format!("wprobe: debug: module cache hit: {}", rpn.display())
    );
    assert_eq!(files(&dir), want);

    // A bound that is not a size: exit status 1 before anything runs.
    let o = run(&dir, &[("WPROBE_CACHE_MAX_BYTES", "12X")]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        String::from_utf8_lossy(&o.stderr),
        "error: WPROBE_CACHE_MAX_BYTES=`12X`: expected a size in bytes, optionally with a K, M or G suffix (powers of 1024), such as 256M\n"
    );
    assert!(o.stdout.is_empty());
    // Unless the cache is off.
    let o = run(
        &dir,
        &[("WPROBE_CACHE_MAX_BYTES", "12X"), ("WPROBE_NO_CACHE", "1")],
    );
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert_eq!(files(&dir), want);
    std::fs::remove_dir_all(&scratch).unwrap();
}

/// `wprobe trace --transport inproc -- /bin/true` with the cache in `dir`
/// and `extra` arguments and variables: its standard error.
fn trace_true(dir: &Path, args: &[&str], vars: &[(&str, &str)]) -> String {
    let mut c = crate::support::cli::wprobe();
    c.args(["trace", "--transport", "inproc", "-o", "/dev/null"])
        .args(args)
        .args(["--", "/bin/true"])
        .env("WPROBE_CACHE_DIR", dir)
        .env_remove("WPROBE_NO_CACHE")
        .env_remove("WPROBE_DEBUG");
    for (k, v) in vars {
        c.env(k, v);
    }
    let o = crate::support::cli::output_within(c, 60);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    err
}

/// The `.plan` files under `dir/plans`, sorted (none when it is absent).
fn plan_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir.join("plans"))
        .map(|rd| {
            rd.filter_map(Result::ok)
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.ends_with(".plan"))
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn the_plan_cache_is_kept_by_a_traced_run_and_not_with_no_cache() {
    let on = temp_dir("plans-on");
    let first = trace_true(&on, &[], &[]);
    assert!(
        first.ends_with("wprobe: trace: 1 calls (1 returned, 0 unwound)\n"),
        "{first}"
    );
    let kept = plan_files(&on);
    // /bin/true's plans at least (and the dynamic linker's, its library).
    assert!(!kept.is_empty(), "no plan kept in {}", on.display());
    // The second run reads them and traces the same call; nothing new is
    // written for the same files.
    let second = trace_true(&on, &[], &[]);
    assert_eq!(second, first);
    assert_eq!(plan_files(&on), kept);
    // Nor by a third: /bin/true is position-independent, and it and its
    // libraries load elsewhere at each run under address space layout
    // randomisation (stubs, copies and refusals kept for another load
    // bias stay as they are; a plan file written again is a new file).
    let inodes = || -> Vec<u64> {
        use std::os::unix::fs::MetadataExt;
        kept.iter()
            .map(|n| std::fs::metadata(on.join("plans").join(n)).unwrap().ino())
            .collect()
    };
    let before = inodes();
    assert_eq!(trace_true(&on, &[], &[]), first);
    assert_eq!(inodes(), before, "a plan file written again");

    for (name, args, vars) in [
        ("plans-flag", &["--no-cache"][..], &[][..]),
        ("plans-var", &[][..], &[("WPROBE_NO_CACHE", "1")][..]),
    ] {
        let off = temp_dir(name);
        let err = trace_true(&off, args, vars);
        assert_eq!(err, first, "{name}");
        // Not even the directory is made.
        assert!(!off.exists(), "{name}: {:?}", plan_files(&off));
    }
    std::fs::remove_dir_all(&on).unwrap();
}

/// Debian's /usr/bin/python3 (about 10,000 functions; some of its windows are
/// planned twice in a run, a site dropped and planned again in another
/// stub area) traced three times with one cache: the second run reads the
/// plans the first wrote and the third finds every plan file as the
/// second left it — none written again (each used to be, when the two
/// stubs of such a window replaced each other in the plan: 1.5 MB
/// encoded and written at every run, an eighth of a warm run's time).
fn a_warm_run_of_a_large_program_rewrites_no_plan() {
    let dir = temp_dir("plans-warm");
    let run = || {
        let mut c = crate::support::cli::wprobe();
        c.args([
            "trace",
            "--transport",
            "inproc",
            "--report",
            "-o",
            "/dev/null",
        ])
        .args(["--", "/usr/bin/python3", "--version"])
        .env("WPROBE_CACHE_DIR", &dir)
        .env_remove("WPROBE_NO_CACHE")
        .env_remove("WPROBE_DEBUG");
        let o = crate::support::cli::output_within(c, 120);
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(0), "{err}");
        assert!(
            String::from_utf8_lossy(&o.stdout).starts_with("Python 3."),
            "{err}"
        );
    };
    // (name, inode) of each plan file: a file written again is a new one
    // (written aside and renamed over the old).
    let files = || -> Vec<(String, u64)> {
        use std::os::unix::fs::MetadataExt;
        plan_files(&dir)
            .into_iter()
            .map(|n| {
                let ino = std::fs::metadata(dir.join("plans").join(&n)).unwrap().ino();
                (n, ino)
            })
            .collect()
    };
    run();
    run();
    let second = files();
    // The premise: python3's plans and its libraries'.
    assert!(second.len() >= 3, "{second:?}");
    run();
    assert_eq!(files(), second);
    std::fs::remove_dir_all(&dir).unwrap();
}
