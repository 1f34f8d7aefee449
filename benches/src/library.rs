//! Shared pieces of the library-path benchmarks (bench stage: measures,
//! never ships): the 100-probe program, the per-program load path of
//! `wprobe run` (RPN front end, code generation, ABI gate, module creation,
//! with or without the compiled-module cache), and typical records for the
//! decoding and formatting benchmarks, produced by running example programs
//! in the reference interpreter.
//!
//! The unit tests at the bottom check that the cached and the cold load
//! give a module that behaves the same, and that every typical record
//! formats to valid JSON.

use crate::{hit, options, symbols};
use hostabi::record::{Item, decode_log, decode_stacktrace};
use rpn2wasm::interp::{self, Limits, ProgramState, RecordKind};
use runtime::out::format::RecordView;
use runtime::wasm::cache::{Cache, CacheOutcome};
use runtime::wasm::load::LoadedModule;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// A program of `probes` breakpoint probes, all on `target_fn` (as when
/// one program watches many call sites of the same function): each logs
/// rdi, rsi and a word of `.data` under its own minor code.
pub fn many_probe_program(probes: usize) -> String {
    let mut s = String::from("name = probe_target\nmajor = 5\n");
    for i in 0..probes {
        let _ = writeln!(s, "\noffset = target_fn\nopcode = 0x55\nminor = {i}");
        let _ = writeln!(s, "        push r, rsi");
        let _ = writeln!(s, "        push r, rdi");
        let _ = writeln!(s, "        push greeting + {}", i % 24);
        let _ = writeln!(s, "        push mem, u{}", [8, 16, 32, 64][i % 4]);
        let _ = writeln!(s, "        log 3");
    }
    s
}

/// What `wprobe run` does for one `.rpn` program before tracing starts:
/// front end (with the benches' symbol table instead of reading the ELF
/// file), code generation, then `runtime::wasm::load::load_cached` (validation,
/// ABI gate, manifest checks, and `Module::new` or a cache hit).
pub fn load_rpn(
    engine: &wasmtime::Engine,
    source: &str,
    cache: &Cache,
) -> (LoadedModule, CacheOutcome) {
    let program = match rpn2wasm::frontend_str(Path::new("bench.rpn"), source, &options()) {
        Ok((p, _)) => p,
        Err((d, map)) => panic!("bench program does not build:\n{}", d.render(&map)),
    };
    let wasm = rpn2wasm::compile_program(program).wasm;
    runtime::wasm::load::load_cached(engine, &wasm, None, None, cache).expect("bench program loads")
}

/// A cache directory of its own for one benchmark process, removed on drop.
pub struct TempCache {
    /// The directory.
    pub dir: PathBuf,
    /// The cache in it.
    pub cache: Cache,
}

impl TempCache {
    /// An empty cache under the system's temporary directory.
    pub fn new(name: &str) -> TempCache {
        let dir =
            std::env::temp_dir().join(format!("wprobe-bench-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        TempCache {
            cache: Cache::at(&dir),
            dir,
        }
    }
}

impl Drop for TempCache {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A record as the sink holds it: kind, codes, data area, item descriptors.
#[derive(Clone, Debug)]
pub struct TypicalRecord {
    /// Where it comes from (example program and record index).
    pub origin: String,
    /// Stack-trace record.
    pub stacktrace: bool,
    /// Major code.
    pub major: u16,
    /// Minor code.
    pub minor: u16,
    /// Data area.
    pub data: Vec<u8>,
    /// Item descriptors (log records).
    pub items: Vec<u32>,
}

impl TypicalRecord {
    /// The formatter's view of the record, as the session builds it.
    pub fn view(&self, seq: u64) -> RecordView<'_> {
        RecordView {
            seq,
            stacktrace: self.stacktrace,
            probe: "probe_target:target_fn",
            pid: 4242,
            tid: 4242,
            cpu: 3,
            major: self.major,
            minor: self.minor,
            time_ns: 1_763_800_000_123_456_789,
            data: &self.data,
            items: &self.items,
        }
    }
}

/// The examples whose records make the typical mix (each run once on
/// [`hit`]): register words with a counted group (01), strings, memory,
/// bytes and a word (02), and variables with a stack trace (10).
pub const TYPICAL_EXAMPLES: [&str; 3] = [
    "01_log_args.rpn",
    "02_strings_memory.rpn",
    "10_stacktrace.rpn",
];

/// The most common record: two register words (`push r, rsi` · `push r, rdi` · `log 2`).
pub fn two_words_record() -> TypicalRecord {
    let mut data = 2u64.to_le_bytes().to_vec();
    data.extend(7u64.to_le_bytes());
    TypicalRecord {
        origin: "log 2".into(),
        stacktrace: false,
        major: 9,
        minor: 1,
        data,
        items: vec![
            hostabi::record::LogItem {
                offset: 0,
                kind: hostabi::record::ItemKind::RawWords,
            }
            .encode(),
        ],
    }
}

/// Every record that probe 0 of each of [`TYPICAL_EXAMPLES`] produces on [`hit`].
pub fn typical_records() -> Vec<TypicalRecord> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/examples");
    let mut out = Vec::new();
    for name in TYPICAL_EXAMPLES {
        let path = dir.join(name);
        let opts = rpn2wasm::Options {
            symbols: Some(Box::new(symbols())),
            ..options()
        };
        let program = match rpn2wasm::frontend(&path, &opts) {
            Ok((p, _)) => p,
            Err((d, map)) => panic!("{name} does not build:\n{}", d.render(&map)),
        };
        let mut state = ProgramState::new(&program);
        let mut env = hit();
        let r = interp::run(&program, 0, &mut state, &mut env, &Limits::default());
        for (i, rec) in r.records.into_iter().enumerate() {
            let (stacktrace, major, minor) = match rec.kind {
                RecordKind::Log { major, minor } => (false, major, minor),
                RecordKind::StackTrace => (true, 0, 0),
            };
            out.push(TypicalRecord {
                origin: format!("{name} #{i}"),
                stacktrace,
                major,
                minor,
                data: rec.data,
                items: rec.items,
            });
        }
    }
    out
}

/// Decodes a record completely, the way the formatter reads it, and
/// returns a number that depends on every item (so nothing is optimised away).
#[inline]
pub fn decode(r: &TypicalRecord) -> u64 {
    let mut n = 0u64;
    if r.stacktrace {
        let res = decode_stacktrace(&r.data, |st| {
            n = n.wrapping_add(st.code);
            for f in st.frames().flatten() {
                n = n.wrapping_add(f.called).wrapping_add(f.slots.len() as u64);
            }
        });
        if let Ok(h) = res {
            n = n.wrapping_add(h.location).wrapping_add(h.name.len() as u64);
        }
        return n;
    }
    for item in decode_log(&r.data, &r.items) {
        n = n.wrapping_add(match item {
            Ok(Item::Fault(a)) => a,
            Ok(
                Item::Words(p)
                | Item::Bytes(p)
                | Item::CountedWords(p)
                | Item::Str(p)
                | Item::Memory(p)
                | Item::LocalVars(p)
                | Item::GlobalVars(p)
                | Item::Raw(p),
            ) => hostabi::record::words(p).fold(p.len() as u64, u64::wrapping_add),
            Err(e) => e.offset as u64,
        });
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use runtime::out::format::{Format, record};

    #[test]
    fn cached_and_cold_loads_give_the_same_module() {
        let engine = runtime::wasm::engine::new_engine().expect("engine");
        let src = many_probe_program(100);
        let tmp = TempCache::new("test");
        let (cold, o) = load_rpn(&engine, &src, &tmp.cache);
        assert!(!o.is_hit(), "{o:?}");
        let (warm, o) = load_rpn(&engine, &src, &tmp.cache);
        assert!(o.is_hit(), "{o:?}");
        assert_eq!(warm.manifest.probes.len(), 100);
        assert_eq!(warm.manifest, cold.manifest);
        for m in [cold, warm] {
            let mut r = runtime::wasm::runner::Runner::new(&engine, hit()).expect("runner");
            r.add(&m, None).expect("instantiates");
            for probe in [0, 57, 99] {
                r.store.data_mut().sink.clear();
                let out = r.run(0, probe);
                assert_eq!(
                    out,
                    runtime::wasm::runner::RunOutcome::Returned(hostabi::Outcome::Exit)
                );
                let sink = &r.store.data().sink;
                assert_eq!(sink.records[0].minor as usize, probe);
                assert_eq!(sink.data(&sink.records[0]).len(), 24);
            }
        }
        // The 1,000-instruction program loads both ways too.
        let big = crate::generated_program(100);
        assert!(!load_rpn(&engine, &big, &tmp.cache).1.is_hit());
        assert!(load_rpn(&engine, &big, &tmp.cache).1.is_hit());
        drop(tmp);
    }

    #[test]
    fn typical_records_decode_and_format_as_json() {
        let mut recs = typical_records();
        assert!(
            recs.iter().any(|r| r.stacktrace),
            "a stack trace is in the mix"
        );
        assert!(recs.len() >= 4, "{recs:?}");
        recs.push(two_words_record());
        for (i, r) in recs.iter().enumerate() {
            assert!(decode(r) != 0, "{}", r.origin);
            let mut s = String::new();
            record(&mut s, Format::Json, &r.view(i as u64));
            let v: serde_json::Value = serde_json::from_str(s.trim_end())
                .unwrap_or_else(|e| panic!("{}: {e}: {s}", r.origin));
            assert!(!s.contains("malformed"), "{}: {s}", r.origin);
            assert_eq!(v["seq"], i as u64);
            let mut t = String::new();
            record(&mut t, Format::Text, &r.view(i as u64));
            assert!(!t.contains("bad items") && !t.contains("malformed"), "{t}");
        }
    }
}
