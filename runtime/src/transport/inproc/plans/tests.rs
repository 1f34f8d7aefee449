//! The plan cache's unit tests.

use super::codec::encode;
use super::*;
use crate::transport::inproc::code::ModuleCode;
use agent_loader::window::{self, Function};

/// A directory of its own under the system's temporary directory.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("wprobe-plans-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("scratch directory");
    d
}

/// A small executable of the system's, read and swept fresh.
const MODULE: &str = "/usr/bin/ls";

fn fresh() -> (Key, Sweep) {
    let path = Path::new(MODULE);
    let bytes = std::fs::read(path).expect("read the module");
    let key = Key::of(&std::fs::metadata(path).expect("metadata"), &bytes);
    let elf = wprobe_elf::info::ElfInfo::open(path).expect("open the module");
    let parsed = goblin::elf::Elf::parse(elf.file_bytes()).expect("parse");
    (key, ModuleCode::sweep(&elf, &parsed))
}

/// The sweep part of a payload ([`codec::encode_sweep`]).
fn swept(sweep: &Sweep) -> Vec<u8> {
    encode_sweep(&sweep.funcs, &sweep.targets, &sweep.tail_jumps)
}

/// [`save_in`] of `sweep` and no plans for the test module.
fn save_sweep(dir: &Path, key: &Key, sweep: &Sweep) -> Result<(), String> {
    save_in(
        dir,
        Path::new(MODULE),
        key,
        &swept(sweep),
        &Plans::default(),
    )
}

fn same_sweep(a: &Sweep, b: &Sweep) {
    assert_eq!(a.funcs, b.funcs);
    assert_eq!(a.targets.0, b.targets.0);
    assert_eq!(a.targets.1, b.targets.1);
    assert_eq!(a.targets.2, b.targets.2);
    assert_eq!(a.targets.3, b.targets.3);
    assert_eq!(a.tail_jumps, b.tail_jumps);
}

fn same_site(a: &Site, b: &Site) {
    assert_eq!((a.probe, a.addr, a.len), (b.probe, b.addr, b.len));
    let ips = |s: &Site| -> Vec<(u64, usize, iced_x86::Code)> {
        s.displaced
            .iter()
            .chain(s.ret.iter())
            .map(|i| (i.ip(), i.len(), i.code()))
            .collect()
    };
    assert_eq!(ips(a), ips(b));
    assert_eq!(a.ret.is_some(), b.ret.is_some());
    assert_eq!(a.displaced, b.displaced);
    assert_eq!(a.ret, b.ret);
}

/// Every window of every function's entry and `ret`s planned fresh at
/// a load bias, kept, saved, read back and rebuilt at another bias is
/// the window planned fresh there.
#[test]
fn plans_from_the_cache_are_the_fresh_ones() {
    let dir = scratch("same");
    let (key, sweep) = fresh();
    let elf = wprobe_elf::info::ElfInfo::open(Path::new(MODULE)).expect("open");
    let mut plans = Plans::default();
    let fresh_at = |bias: u64, plans: Option<&mut Plans>| {
        let mut out = Vec::new();
        let mut plans = plans;
        for &(s, e) in &sweep.funcs {
            let Some(code) = elf.bytes_at(s, (e - s) as usize) else {
                continue;
            };
            let func = Function {
                start: s.wrapping_add(bias),
                code,
                bias,
            };
            let after = elf.bytes_at(e, 16).unwrap_or(&[]);
            let mut planned = vec![(
                WindowShape::Probe,
                s,
                window::plan(func.start, func, &sweep.targets),
            )];
            let d = window::Decoded::new(func, &sweep.targets);
            let mut dec = Decoder::with_ip(64, code, func.start, DecoderOptions::NONE);
            for i in &mut dec {
                if i.flow_control() == FlowControl::Return {
                    let w = window::plan_ret_in(i.ip(), func, &d, after, &sweep.targets, 5);
                    planned.push((WindowShape::Ret, i.ip().wrapping_sub(bias), w));
                }
            }
            planned.push((
                WindowShape::Whole,
                s,
                window::plan_whole(func.start, func, after, &sweep.targets),
            ));
            for (shape, link, w) in planned {
                if let Ok(site) = w {
                    if let Some(p) = plans.as_deref_mut() {
                        p.windows.insert((shape, link), Window::of(&site, bias));
                    }
                    out.push((shape, link, site));
                }
            }
        }
        out
    };
    let first = fresh_at(0x5555_0000_0000, Some(&mut plans));
    assert!(first.len() > 100, "{} windows", first.len());
    save_in(&dir, Path::new(MODULE), &key, &swept(&sweep), &plans).expect("saved");
    let (kept_sweep, kept) = load_in(&dir, Path::new(MODULE), &key)
        .expect("read")
        .expect("found");
    same_sweep(&sweep, &kept_sweep);
    assert_eq!(kept.windows, plans.windows);
    let bias = 0x7f00_1234_0000;
    let second = fresh_at(bias, None);
    assert_eq!(first.len(), second.len());
    for (shape, link, site) in second {
        let win = kept.windows[&(shape, link)];
        let code = elf
            .bytes_at(win.link_addr(), win.len())
            .expect("window's bytes");
        same_site(&win.site(code, bias).expect("rebuilt"), &site);
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn roundtrip_of_return_sites_and_windows() {
    let dir = scratch("roundtrip");
    let (key, sweep) = fresh();
    let mut plans = Plans::default();
    plans.rets.insert(
        0x1040,
        std::sync::Arc::new(ReturnSites {
            function: "f".into(),
            rets: vec![0x1050, 0x1060],
            followed: vec!["f".into(), "g".into()],
            outside: vec!["malloc".into()],
            indirect: vec![0x1070],
            never_returns: false,
        }),
    );
    plans.windows.insert(
        (WindowShape::Ret, 0x1050),
        Window {
            probe: 0x1050,
            addr: 0x104c,
            len: 5,
            displaced: 1,
            ret: true,
        },
    );
    plans.windows.insert(
        (WindowShape::Probe, 0x1040),
        Window {
            probe: 0x1040,
            addr: 0x1040,
            len: 6,
            displaced: 2,
            ret: false,
        },
    );
    plans.windows.insert(
        (WindowShape::NearRet, 0x1060),
        Window {
            probe: 0x1060,
            addr: 0x105f,
            len: 2,
            displaced: 1,
            ret: true,
        },
    );
    // Refusals, each at its load bias, two sharing a reason.
    let why = "0x401053, inside the 5 bytes the jump replaces, is a branch target";
    plans
        .refusals
        .insert((WindowShape::Ret, 0x1050), (0, why.to_string()));
    plans
        .refusals
        .insert((WindowShape::NearProbe, 0x1040), (0, why.to_string()));
    plans.refusals.insert(
        (WindowShape::Whole, 0x1040),
        (0x7eff_0000_0000, "function too short".to_string()),
    );
    plans.calls.insert(0x1040, vec![0x900, 0x1100, 0x2f00]);
    plans.calls.insert(0x4000, Vec::new());
    plans.jumps.insert(0x1100, vec![0x2000, 0x3004]);
    plans.jumps.insert(0x5000, Vec::new());
    plans.blocks.insert(0x1080, 12);
    plans.blocks.insert(0x2000, 0);
    plans.inner.insert(0x1040, vec![(0x1070, 9), (0x1078, 3)]);
    let site = five_bytes_at(0x40_1040);
    let k = StubKey::of(&site, 7, 0x3c_0000, 0x3c_0250, 0);
    plans.stubs.keep(k, &[0xe8, 1, 2, 3, 4, 0xc3]);
    let k = StubKey::of(
        &site,
        8,
        0x7f00_0000_0000,
        0x7f00_0000_0250,
        0x7eff_0000_0000,
    );
    plans.stubs.keep(k, &[0x90; 40]);
    for (link, bias) in [(0x1040, 0), (0x2000, 0x7eff_0000_0000)] {
        let start = link + bias;
        plans.copies.keep(KeptCopy {
            key: CopyKey {
                link,
                bias,
                window: (start, 5, 1),
                id: 9,
                base: 0x3c_0000,
                at: 0x3c_0800,
                ret_stubs: vec![(start + 0x20, 0x3c_0300), (start + 0x28, 0x3c_0320)],
            },
            code: vec![0x90, 0xe9, 1, 2, 3, 4],
            returns: vec![(start + 0x10, 0x3c_0810)],
        });
    }
    save_in(&dir, Path::new(MODULE), &key, &swept(&sweep), &plans).expect("saved");
    let (s, p) = load_in(&dir, Path::new(MODULE), &key)
        .expect("read")
        .expect("found");
    same_sweep(&sweep, &s);
    assert_eq!(p.rets, plans.rets);
    assert_eq!(p.windows, plans.windows);
    assert_eq!(p.refusals, plans.refusals);
    assert_eq!(p.calls, plans.calls);
    assert_eq!(p.jumps, plans.jumps);
    assert_eq!(p.blocks, plans.blocks);
    assert_eq!(p.inner, plans.inner);
    assert_eq!(p.stubs, plans.stubs);
    assert_eq!(p.copies, plans.copies);
    assert_eq!(p.copies.sorted().len(), 2);
    assert!(!p.added);
    // None for another module's path.
    assert!(
        load_in(&dir, Path::new("/usr/bin/other"), &key)
            .expect("read")
            .is_none()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Branch targets of every kind (a jump table's, a target without a
/// count, the unknown jumps) and numbers at the ends of their range
/// read back as they were.
#[test]
fn roundtrip_of_extreme_values() {
    let mut sweep = Sweep {
        funcs: vec![(0, 0), (0x10, u64::MAX)],
        ..Default::default()
    };
    sweep.targets.0.extend([1, u64::MAX, 0x500]);
    sweep
        .targets
        .2
        .extend([(1, u32::MAX), (u64::MAX, 3), (7, 0)]);
    sweep.targets.0.insert(7);
    sweep.targets.1.extend([0x20, 0x10]);
    sweep.targets.3 = Some([(0x10, 0x8), (0x30, u64::MAX)].into_iter().collect());
    sweep.tail_jumps.extend([u64::MAX - 1, 2]);
    let plans = Plans {
        windows: [(
            (WindowShape::Whole, u64::MAX - 4),
            Window {
                probe: u64::MAX - 4,
                addr: 0,
                len: u32::MAX,
                displaced: u32::MAX >> 1,
                ret: true,
            },
        )]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let (s, p) = decode(&encode(&sweep, &plans)).expect("decoded");
    same_sweep(&sweep, &s);
    assert_eq!(p.windows, plans.windows);
    // Not sorted: not a sweep's.
    let unsorted = Sweep {
        funcs: vec![(0x20, 0x30), (0x10, 0x18)],
        ..Default::default()
    };
    assert!(decode(&encode(&unsorted, &Plans::default())).is_none());
    // Any byte cut off: never decoded (nor a panic).
    let full = encode(&sweep, &plans);
    for n in 0..full.len() {
        assert!(decode(&full[..n]).is_none(), "{n} bytes");
    }
}

/// The plan file of a system binary takes each branch target once:
/// far less than the 8-byte numbers of the first format (4.3 MB for
/// python3.11).
#[test]
fn plan_files_are_compact() {
    let (_, sweep) = fresh();
    let payload = encode(&sweep, &Plans::default());
    let t = &sweep.targets;
    assert!(t.2.len() > 1000, "{} targets", t.2.len());
    // The first format: every number in 8 bytes, the targets twice.
    let unknown = t.3.as_ref().map_or(0, |m| m.len());
    let first = 8
        * (2 * sweep.funcs.len()
            + t.0.len()
            + t.1.len()
            + 2 * t.2.len()
            + 2 * unknown
            + sweep.tail_jumps.len());
    assert!(
        payload.len() * 4 < first,
        "{} bytes, against {first} in the first format",
        payload.len()
    );
}

/// Past the bound, the plan files used least recently go first; the one
/// just saved, other files and young temporary files stay.
#[test]
fn the_directory_is_bounded_least_recently_used_first() {
    use std::time::{Duration, SystemTime};
    let dir = scratch("evict");
    let name = |c: char| format!("{}.plan", c.to_string().repeat(64));
    let now = SystemTime::now();
    let put = |file: &str, len: usize, age_s: u64| {
        let p = dir.join(file);
        std::fs::write(&p, vec![0u8; len]).expect("write");
        std::fs::File::options()
            .write(true)
            .open(&p)
            .and_then(|f| f.set_modified(now - Duration::from_secs(age_s)))
            .expect("set its time");
        p
    };
    // Used oldest first: a, b, c, d (the one just saved: e, the oldest).
    put(&name('a'), 1000, 400);
    put(&name('b'), 1000, 300);
    put(&name('c'), 1000, 200);
    put(&name('d'), 1000, 100);
    let keep = put(&name('e'), 1000, 500);
    let other = put("notes.txt", 100_000, 900);
    let stale = put(&format!("{}.7.tmp", name('f')), 10, 7200);
    let young = put(&format!("{}.8.tmp", name('f')), 10, 10);
    // 5,000 bytes of plans: 2,500 at most keeps d and e only.
    assert_eq!(evict_in(&dir, &keep, 2500), 3);
    let left = |c: char| dir.join(name(c)).exists();
    assert!(!left('a') && !left('b') && !left('c'));
    assert!(left('d') && left('e'));
    assert!(other.exists() && young.exists());
    assert!(!stale.exists());
    // Within the bound: nothing more.
    assert_eq!(evict_in(&dir, &keep, 2500), 0);
    // Room for one: d goes, e (just saved) stays though it is older.
    assert_eq!(evict_in(&dir, &keep, 1000), 1);
    assert!(!left('d') && left('e'));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A save evicts; a load makes its file the most recently used.
#[test]
fn a_load_makes_its_file_recent() {
    use std::time::{Duration, SystemTime};
    let dir = scratch("recent");
    let (key, sweep) = fresh();
    save_sweep(&dir, &key, &sweep).expect("saved");
    let file = file_of(&dir, Path::new(MODULE));
    let old = SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options()
        .write(true)
        .open(&file)
        .and_then(|f| f.set_modified(old))
        .expect("set its time");
    assert!(
        load_in(&dir, Path::new(MODULE), &key)
            .expect("read")
            .is_some()
    );
    let t = std::fs::metadata(&file)
        .and_then(|m| m.modified())
        .expect("time");
    assert!(t > old + Duration::from_secs(60), "{t:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_stale_key_is_ignored() {
    let dir = scratch("stale");
    let (key, sweep) = fresh();
    save_sweep(&dir, &key, &sweep).expect("saved");
    let mut other = key.clone();
    other.0[0] ^= 1;
    let e = load_in(&dir, Path::new(MODULE), &other).expect_err("stale");
    assert!(e.contains("stale"), "{e}");
    // The file's own key: another modification time or size is another key.
    let m = std::fs::metadata("/bin/true").expect("metadata");
    assert_ne!(Key::of(&m, b""), key);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_corrupt_file_is_ignored() {
    let dir = scratch("corrupt");
    let (key, sweep) = fresh();
    save_sweep(&dir, &key, &sweep).expect("saved");
    let file = file_of(&dir, Path::new(MODULE));
    let good = std::fs::read(&file).expect("read");
    let mut flipped = good.clone();
    let n = flipped.len();
    flipped[n - 3] ^= 0x40;
    let cases: [(&[u8], &str); 4] = [
        (&flipped, "corrupt"),
        (&good[..good.len() / 2], "truncated"),
        (&good[..10], "truncated"),
        (
            b"not a plan file at all, but long enough to have an envelope's bytes in it...........",
            "not a plan file",
        ),
    ];
    for (bytes, why) in cases {
        std::fs::write(&file, bytes).expect("write");
        let e = load_in(&dir, Path::new(MODULE), &key).expect_err(why);
        assert!(e.contains(why), "{e} (expected {why})");
    }
    // A payload whose hash matches but does not decode.
    assert!(decode(&[1, 2, 3]).is_none());
    assert!(decode(&[0xff; 64]).is_none());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unwritable_directory_fails_no_trace() {
    let dir = scratch("unwritable");
    let (key, sweep) = fresh();
    // A file where the directory would be: it cannot be created.
    let blocked = dir.join("file");
    std::fs::write(&blocked, b"").expect("write");
    let plans_dir = blocked.join("plans");
    assert!(save_sweep(&plans_dir, &key, &sweep).is_err());
    assert!(load_in(&plans_dir, Path::new(MODULE), &key).is_err());
    // A symbolic link as the directory is not used.
    let link = dir.join("link");
    std::os::unix::fs::symlink(&dir, &link).expect("symlink");
    assert!(save_sweep(&link, &key, &sweep).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A site of a 5-byte window at `at`, nothing displaced.
fn five_bytes_at(at: u64) -> Site {
    Site {
        probe: at,
        addr: at,
        displaced: Vec::new(),
        len: 5,
        ret: None,
    }
}

/// A window keeps its newest few stubs at one load bias: the same stub
/// again changes nothing, another id is one more (the oldest dropped past
/// four), new code for a key replaces its code, and a stub at another
/// bias is not kept beside them.
#[test]
fn a_window_keeps_its_newest_stubs_at_one_bias() {
    let site = five_bytes_at(0x40_1040);
    // The same window wherever the module loads: its run-time addresses
    // moved by the bias.
    let key = |id, bias: u64| {
        let moved = Site {
            probe: site.probe + bias,
            addr: site.addr + bias,
            ..site.clone()
        };
        StubKey::of(&moved, id, 0x3c_0000, 0x3c_0250, bias)
    };
    let mut s = KeptStubs::default();
    assert!(s.keep(key(1, 0), &[1, 1]));
    assert!(!s.keep(key(1, 0), &[1, 1]));
    assert!(s.keep(key(1, 0), &[1, 2]));
    assert_eq!(s.get(&key(1, 0)), Some(&[1u8, 2][..]));
    for id in 2..=5 {
        assert!(s.keep(key(id, 0), &[id as u8]));
    }
    assert_eq!(s.get(&key(1, 0)), None, "the oldest of five dropped");
    assert_eq!(s.get(&key(5, 0)), Some(&[5u8][..]));
    assert!(!s.keep(key(6, 0x1000), &[6]));
    assert_eq!(s.get(&key(6, 0x1000)), None);
    assert_eq!(s.iter().count(), 4);
}

/// Stubs come back in the order they were kept (a plan is written in it),
/// each found whatever the order it is asked for in, and a stub replaced
/// is gone from both.
#[test]
fn kept_stubs_in_the_order_kept() {
    let site = Site {
        probe: 0x40_1000,
        addr: 0x40_1000,
        displaced: Vec::new(),
        len: 5,
        ret: None,
    };
    let key = |n: u64, id: u32| {
        let s = Site {
            probe: site.probe + 0x20 * n,
            addr: site.addr + 0x20 * n,
            ..site.clone()
        };
        StubKey::of(&s, id, 0x3c_0000, 0x3c_0100 + 0x40 * n, 0)
    };
    let mut s = KeptStubs::default();
    // Kept out of address order, as a planner may ask for them.
    let order = [3u64, 1, 4, 0, 2];
    for &n in &order {
        assert!(s.keep(key(n, n as u32), &[n as u8; 3]));
    }
    let firsts: Vec<u64> = s
        .iter()
        .map(|(k, _)| (k.link().0 - 0x40_1000) / 0x20)
        .collect();
    assert_eq!(firsts, order);
    for &n in order.iter().chain(&[2, 2, 0, 4, 1, 3]) {
        assert_eq!(s.get(&key(n, n as u32)), Some(&[n as u8; 3][..]), "{n}");
    }
    // Replaced: the new code found, the old gone from the order.
    assert!(s.keep(key(1, 1), &[9; 2]));
    assert_eq!(s.get(&key(1, 1)), Some(&[9u8; 2][..]));
    let codes: Vec<&[u8]> = s.iter().map(|(_, c)| c).collect();
    assert_eq!(codes, [&[3u8; 3][..], &[4; 3], &[0; 3], &[2; 3], &[9; 2]]);
    assert_eq!(s.get(&key(7, 7)), None);
}
