//! Loading a handler module: bytes (or WAT text) → validated Wasm → ABI
//! checks (manifest, ABI version, imports, exports) → compiled
//! `wasmtime::Module`. Every rejection says what and where (byte offsets
//! for binary input); nothing here panics on any input.

use hostabi::manifest::Manifest;
use hostabi::{HOST_IMPORTS, IMPORT_MODULE, MANIFEST_SECTION, MEMORY_EXPORT};
use std::collections::HashMap;
use wasmparser::{ExternalKind, FuncType, Parser, Payload, TypeRef, ValType};

/// Why a module was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// Neither Wasm binary nor WAT text that parses.
    #[error("not a WebAssembly module: {0}")]
    NotWasm(String),
    /// The binary does not validate.
    #[error("invalid WebAssembly: {message} (at offset 0x{offset:x})")]
    Invalid {
        /// What the validator said.
        message: String,
        /// Byte offset in the module.
        offset: u64,
    },
    /// No `wprobe.manifest` section and no probe specs given on the command line.
    #[error(
        "module has no `{MANIFEST_SECTION}` custom section; give probes with --probe LOCATION=EXPORT"
    )]
    NoManifest,
    /// The manifest section appears twice.
    #[error("duplicate `{MANIFEST_SECTION}` section (at offset 0x{offset:x})")]
    DuplicateManifest {
        /// Offset of the second section.
        offset: u64,
    },
    /// The manifest does not parse.
    #[error("malformed `{MANIFEST_SECTION}` section: {message} (at offset 0x{offset:x})")]
    BadManifest {
        /// What is wrong, with the manifest line when there is one.
        message: String,
        /// Offset of the problem in the module file.
        offset: u64,
    },
    /// The module was built for another ABI version.
    #[error(
        "module built for host ABI version {found}, this wprobe runs versions {oldest} to {expected}"
    )]
    AbiVersion {
        /// The manifest's version.
        found: u32,
        /// [`hostabi::MIN_ABI_VERSION`].
        oldest: u32,
        /// [`hostabi::ABI_VERSION`].
        expected: u32,
    },
    /// An import outside the host ABI.
    #[error(
        "unknown import `{module}::{name}`: wprobe provides only the `{IMPORT_MODULE}` functions of its host ABI (at offset 0x{offset:x})"
    )]
    UnknownImport {
        /// Import module.
        module: String,
        /// Import field.
        name: String,
        /// Offset of the import.
        offset: u64,
    },
    /// An ABI import with the wrong type.
    #[error(
        "import `{IMPORT_MODULE}::{name}` has type {found}, the host ABI defines {expected} (at offset 0x{offset:x})"
    )]
    ImportType {
        /// Import field.
        name: String,
        /// The module's type.
        found: String,
        /// The ABI's type.
        expected: String,
        /// Offset of the import.
        offset: u64,
    },
    /// A probe's handler is not exported at all.
    #[error("handler export `{name}` is not exported by the module")]
    MissingHandler {
        /// Export name.
        name: String,
    },
    /// A probe's handler export is not a function `() -> i32`.
    #[error("handler export `{name}` {problem}")]
    BadHandler {
        /// Export name.
        name: String,
        /// What is wrong.
        problem: String,
    },
    /// No exported `memory` though the module imports functions taking pointers.
    #[error("module does not export its memory as `{MEMORY_EXPORT}`")]
    NoMemory,
    /// A start function would run guest code at load time.
    #[error("module has a start function (at offset 0x{offset:x}); handlers may only run at hits")]
    StartFunction {
        /// Offset of the start section.
        offset: u64,
    },
    /// Its memory is larger than the sandbox allows.
    #[error("module memory minimum {bytes} bytes exceeds the limit of {limit} bytes")]
    MemoryTooLarge {
        /// Declared minimum in bytes.
        bytes: u64,
        /// The limit.
        limit: u64,
    },
    /// wasmtime refused to compile it.
    #[error("compiling the module: {0}")]
    Compile(String),
    /// The `wprobe.events` section does not parse.
    #[error(
        "malformed `{}` section (at offset 0x{offset:x})",
        hostabi::event::EVENTS_SECTION
    )]
    BadEvents {
        /// Offset of the problem in the module file.
        offset: u64,
    },
    /// A `usdt PROVIDER:NAME` probe that could not be expanded.
    #[error("{0}")]
    Usdt(String),
    /// The manifest's maps cannot be laid out within the map service's bounds.
    #[error("the manifest's maps exceed the map service's bounds: {0}")]
    BadMaps(String),
}

/// A validated module and what it declares.
#[derive(Clone)]
pub struct LoadedModule {
    /// The compiled module.
    pub module: wasmtime::Module,
    /// The manifest (from the section, or synthesised from CLI probe specs).
    pub manifest: std::sync::Arc<Manifest>,
    /// Whether it imports `write_reg` or `write_mem` (refused by the perf transport).
    pub writes: bool,
    /// Whether it exports `wprobe_flush`.
    pub has_flush: bool,
    /// Its `wprobe.events` section (empty without one).
    pub events: std::sync::Arc<hostabi::event::Events>,
    /// The Wasm bytes (for what is found in the code only when needed:
    /// [`LoadedModule::registers_read`]).
    pub wasm: std::sync::Arc<[u8]>,
}

impl LoadedModule {
    /// The registers its handlers can read (scans the code; see `regscan`)
    /// or receive as parameters (`args`).
    pub fn registers_read(&self) -> crate::wasm::regscan::RegsRead {
        let mut passed = 0u128;
        for p in &self.manifest.probes {
            for a in &p.args {
                if let hostabi::manifest::ArgSource::Reg(id) = a {
                    match hostfns::reg_by_id(*id).map(|r| r.base_id()) {
                        Some(b) if b < 128 => passed |= 1 << b,
                        _ => return crate::wasm::regscan::RegsRead::All,
                    }
                }
            }
        }
        crate::wasm::regscan::registers_read(&self.wasm)
            .union(crate::wasm::regscan::RegsRead::Only(passed))
    }
}

/// Facts read from the binary before compiling it.
#[derive(Debug, Default)]
pub struct ModuleFacts {
    /// The decoded manifest, if present.
    pub manifest: Option<Manifest>,
    /// Function exports with their types.
    pub func_exports: HashMap<String, FuncType>,
    /// Whether `memory` is exported.
    pub memory_export: bool,
    /// Imported ABI function names.
    pub imports: Vec<String>,
    /// Exports that are not functions, with their kind ("a global", ...).
    pub other_exports: HashMap<String, &'static str>,
    /// The decoded `wprobe.events` section, if present.
    pub events: Option<hostabi::event::Events>,
}

fn val(v: hostabi::ValType) -> ValType {
    match v {
        hostabi::ValType::I32 => ValType::I32,
        hostabi::ValType::I64 => ValType::I64,
    }
}

fn extern_kind(t: &TypeRef) -> &'static str {
    match t {
        TypeRef::Func(_) | TypeRef::FuncExact(_) => "a function",
        TypeRef::Table(_) => "a table",
        TypeRef::Memory(_) => "a memory",
        TypeRef::Global(_) => "a global",
        TypeRef::Tag(_) => "a tag",
    }
}

fn sig_text(params: &[ValType], results: &[ValType]) -> String {
    let p: Vec<String> = params.iter().map(|t| t.to_string()).collect();
    let r: Vec<String> = results.iter().map(|t| t.to_string()).collect();
    format!("({}) -> ({})", p.join(", "), r.join(", "))
}

/// Turns file bytes into Wasm bytes: binary as is, otherwise WAT text.
pub fn to_wasm(bytes: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, LoadError> {
    to_wasm_named(bytes, None)
}

/// Like [`to_wasm`], naming `path` in WAT errors (`path:line:col`).
pub fn to_wasm_named<'a>(
    bytes: &'a [u8],
    path: Option<&std::path::Path>,
) -> Result<std::borrow::Cow<'a, [u8]>, LoadError> {
    if bytes.starts_with(b"\0asm") {
        return Ok(bytes.into());
    }
    if bytes.is_empty() {
        return Err(LoadError::NotWasm("the file is empty".into()));
    }
    if std::str::from_utf8(bytes).is_err() || bytes.contains(&0) {
        let head: Vec<String> = bytes.iter().take(4).map(|b| format!("{b:02x}")).collect();
        return Err(LoadError::NotWasm(format!(
            "it starts with bytes {}, not the Wasm magic 00 61 73 6d, and is not WAT text",
            head.join(" ")
        )));
    }
    wat::parse_bytes(bytes).map_err(|mut e| {
        if let Some(p) = path {
            e.set_path(p);
        }
        LoadError::NotWasm(format!("WAT text does not parse: {e}"))
    })
}

/// The message of a manifest decoding error: the line and what is wrong.
fn manifest_problem(data: &[u8], e: &hostabi::record::DecodeError) -> String {
    use hostabi::record::DecodeErrorKind;
    let off = e.offset.min(data.len());
    let line_no = data[..off].iter().filter(|b| **b == b'\n').count() + 1;
    let start = data[..off]
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    let end = data[start..]
        .iter()
        .position(|b| *b == b'\n')
        .map_or(data.len(), |i| start + i);
    let line = String::from_utf8_lossy(&data[start..end]);
    let line = line.trim_end_matches('\r').escape_debug().to_string();
    match e.kind {
        DecodeErrorKind::Truncated if data.iter().all(|b| b.is_ascii_whitespace()) => {
            "the section is empty".into()
        }
        DecodeErrorKind::Truncated => format!(
            "incomplete: a manifest needs `{} {}`, `abi`, `module`, and a `location` in every probe",
            hostabi::manifest::MAGIC,
            hostabi::manifest::FORMAT_VERSION
        ),
        DecodeErrorKind::UnsupportedVersion(v) => format!(
            "line {line_no}: format version {v}, this wprobe reads version {}",
            hostabi::manifest::FORMAT_VERSION
        ),
        _ if std::str::from_utf8(data).is_err() => {
            format!("line {line_no}: not UTF-8 text")
        }
        _ if line_no == 1 => format!(
            "line 1: `{line}` is not `{} {}`",
            hostabi::manifest::MAGIC,
            hostabi::manifest::FORMAT_VERSION
        ),
        _ => format!("line {line_no}: unknown key or bad value in `{line}`"),
    }
}

/// Validates the binary and reads the facts the ABI gate needs.
pub fn inspect(wasm: &[u8]) -> Result<ModuleFacts, LoadError> {
    let mut validator = wasmparser::Validator::new();
    validator
        .validate_all(wasm)
        .map_err(|e| LoadError::Invalid {
            message: e.message().to_string(),
            offset: e.offset(),
        })?;
    read_facts(wasm)
}

/// The facts of [`inspect`] without validating first. Never panics; on
/// invalid input it may return an error, or facts of whatever parses.
/// Used only for bytes known to be valid (a hit in the module cache).
fn read_facts(wasm: &[u8]) -> Result<ModuleFacts, LoadError> {
    let mut facts = ModuleFacts::default();
    let mut types: Vec<Option<FuncType>> = Vec::new();
    let mut func_types: Vec<u32> = Vec::new();
    let mut exports: Vec<(String, u32)> = Vec::new();
    let abi: HashMap<&str, &hostabi::HostImport> =
        HOST_IMPORTS.iter().map(|i| (i.name, i)).collect();
    for payload in Parser::new(0).parse_all(wasm) {
        let payload = payload.map_err(|e| LoadError::Invalid {
            message: e.message().to_string(),
            offset: e.offset(),
        })?;
        let bad = |e: wasmparser::BinaryReaderError| LoadError::Invalid {
            message: e.message().to_string(),
            offset: e.offset(),
        };
        match payload {
            Payload::TypeSection(r) => {
                for rec in r {
                    for st in rec.map_err(bad)?.into_types() {
                        types.push(match &st.composite_type.inner {
                            wasmparser::CompositeInnerType::Func(f) => Some(f.clone()),
                            _ => None,
                        });
                    }
                }
            }
            Payload::ImportSection(r) => {
                for imp in r.into_imports_with_offsets() {
                    let (offset, imp) = imp.map_err(bad)?;
                    let known = (imp.module == IMPORT_MODULE)
                        .then(|| abi.get(imp.name))
                        .flatten();
                    let Some(def) = known else {
                        return Err(LoadError::UnknownImport {
                            module: imp.module.to_string(),
                            name: imp.name.to_string(),
                            offset,
                        });
                    };
                    let want_p: Vec<ValType> = def.params.iter().map(|(_, t)| val(*t)).collect();
                    let want_r: Vec<ValType> = def.results.iter().map(|t| val(*t)).collect();
                    let ti = match imp.ty {
                        TypeRef::Func(ti) | TypeRef::FuncExact(ti) => ti,
                        other => {
                            return Err(LoadError::ImportType {
                                name: imp.name.to_string(),
                                found: format!("{} import", extern_kind(&other)),
                                expected: format!("function {}", sig_text(&want_p, &want_r)),
                                offset,
                            });
                        }
                    };
                    let found = types.get(ti as usize).cloned().flatten();
                    let ok = found.as_ref().is_some_and(|f| {
                        f.params() == want_p.as_slice() && f.results() == want_r.as_slice()
                    });
                    if !ok {
                        return Err(LoadError::ImportType {
                            name: imp.name.to_string(),
                            found: found
                                .map(|f| sig_text(f.params(), f.results()))
                                .unwrap_or_else(|| "not a function".into()),
                            expected: sig_text(&want_p, &want_r),
                            offset,
                        });
                    }
                    func_types.push(ti);
                    facts.imports.push(imp.name.to_string());
                }
            }
            Payload::FunctionSection(r) => {
                for f in r {
                    func_types.push(f.map_err(bad)?);
                }
            }
            Payload::MemorySection(r) => {
                for m in r {
                    let m = m.map_err(bad)?;
                    let bytes = m.initial.saturating_mul(65536);
                    if bytes > crate::wasm::engine::MAX_MEMORY_BYTES as u64 {
                        return Err(LoadError::MemoryTooLarge {
                            bytes,
                            limit: crate::wasm::engine::MAX_MEMORY_BYTES as u64,
                        });
                    }
                }
            }
            Payload::ExportSection(r) => {
                for e in r {
                    let e = e.map_err(bad)?;
                    match e.kind {
                        ExternalKind::Func => exports.push((e.name.to_string(), e.index)),
                        ExternalKind::Memory if e.name == MEMORY_EXPORT => {
                            facts.memory_export = true
                        }
                        kind => {
                            let what = match kind {
                                ExternalKind::Memory => "a memory",
                                ExternalKind::Table => "a table",
                                ExternalKind::Global => "a global",
                                _ => "not a function",
                            };
                            facts.other_exports.insert(e.name.to_string(), what);
                        }
                    }
                }
            }
            Payload::StartSection { range, .. } => {
                return Err(LoadError::StartFunction {
                    offset: range.start,
                });
            }
            Payload::CustomSection(c) if c.name() == MANIFEST_SECTION => {
                if facts.manifest.is_some() {
                    return Err(LoadError::DuplicateManifest {
                        offset: c.range().start,
                    });
                }
                let m = Manifest::decode(c.data()).map_err(|e| LoadError::BadManifest {
                    message: manifest_problem(c.data(), &e),
                    offset: c.data_offset() + e.offset.min(c.data().len()) as u64,
                })?;
                facts.manifest = Some(m);
            }
            Payload::CustomSection(c) if c.name() == hostabi::event::EVENTS_SECTION => {
                let ev =
                    hostabi::event::Events::decode(c.data()).map_err(|e| LoadError::BadEvents {
                        offset: c.data_offset() + e.offset.min(c.data().len()) as u64,
                    })?;
                facts.events = Some(ev);
            }
            _ => {}
        }
    }
    for (name, idx) in exports {
        if let Some(ft) = func_types
            .get(idx as usize)
            .and_then(|t| types.get(*t as usize))
            .cloned()
            .flatten()
        {
            facts.func_exports.insert(name, ft);
        }
    }
    Ok(facts)
}

/// Full load: inspect, check against the manifest (or `cli_manifest`), compile.
pub fn load(
    engine: &wasmtime::Engine,
    bytes: &[u8],
    cli_manifest: Option<Manifest>,
) -> Result<LoadedModule, LoadError> {
    load_named(engine, bytes, None, cli_manifest)
}

/// [`load`] of a file: WAT errors name `path` (`path:line:col`).
pub fn load_named(
    engine: &wasmtime::Engine,
    bytes: &[u8],
    path: Option<&std::path::Path>,
    cli_manifest: Option<Manifest>,
) -> Result<LoadedModule, LoadError> {
    let checked = check(bytes, path, cli_manifest)?;
    let module = wasmtime::Module::new(engine, &*checked.wasm)
        .map_err(|e| LoadError::Compile(e.to_string()))?;
    Ok(checked.into_loaded(module))
}

/// [`load_named`] with the wasmtime compilation taken from `cache` when it
/// has it (and stored there when not). The ABI gate runs as in
/// [`load_named`]; the cache only replaces `Module::new`, and its problems
/// are never errors: the outcome says what it did.
///
/// On a hit the Wasm is not validated again: the cache key is the BLAKE3 hash
/// of exactly these bytes (with the wprobe version and engine settings),
/// and an entry exists only for bytes that wasmtime compiled, which
/// validates them (in this function, after this validator accepted them).
/// Validation is two thirds of the gate's cost (0.3 ms of a cached
/// 100-probe program's 1.7 ms, `docs/BENCHMARKS.md`).
pub fn load_cached(
    engine: &wasmtime::Engine,
    bytes: &[u8],
    path: Option<&std::path::Path>,
    cli_manifest: Option<Manifest>,
    cache: &crate::wasm::cache::Cache,
) -> Result<(LoadedModule, crate::wasm::cache::CacheOutcome), LoadError> {
    use crate::wasm::cache::{CacheOutcome, Lookup};
    let wasm = to_wasm_named(bytes, path)?;
    match cache.lookup(engine, &wasm) {
        Lookup::Hit(module) => {
            let facts = read_facts(&wasm)?;
            let checked = gate(wasm, facts, cli_manifest)?;
            Ok((checked.into_loaded(module), CacheOutcome::Hit))
        }
        Lookup::Miss(pending) => {
            let facts = inspect(&wasm)?;
            let checked = gate(wasm, facts, cli_manifest)?;
            let module = wasmtime::Module::new(engine, &*checked.wasm)
                .map_err(|e| LoadError::Compile(e.to_string()))?;
            let outcome = pending.store(&module);
            Ok((checked.into_loaded(module), outcome))
        }
    }
}

/// A module that passed the ABI gate, not yet compiled.
struct Checked<'a> {
    wasm: std::borrow::Cow<'a, [u8]>,
    manifest: Manifest,
    writes: bool,
    has_flush: bool,
    events: hostabi::event::Events,
}

impl Checked<'_> {
    fn into_loaded(self, module: wasmtime::Module) -> LoadedModule {
        LoadedModule {
            module,
            manifest: std::sync::Arc::new(self.manifest),
            writes: self.writes,
            has_flush: self.has_flush,
            events: std::sync::Arc::new(self.events),
            wasm: self.wasm.into(),
        }
    }
}

/// The ABI gate: inspect, check against the manifest (or `cli_manifest`).
fn check<'a>(
    bytes: &'a [u8],
    path: Option<&std::path::Path>,
    cli_manifest: Option<Manifest>,
) -> Result<Checked<'a>, LoadError> {
    let wasm = to_wasm_named(bytes, path)?;
    let facts = inspect(&wasm)?;
    gate(wasm, facts, cli_manifest)
}

/// Replaces each `usdt PROVIDER:NAME` probe by one probe per site of the
/// module's `.note.stapsdt` (its address, `usdt_args` and `semaphore`).
fn expand_usdt(m: &mut Manifest) -> Result<(), String> {
    if m.probes.iter().all(|p| p.usdt_probe.is_none()) {
        return Ok(());
    }
    let mut out = Vec::with_capacity(m.probes.len());
    for p in std::mem::take(&mut m.probes) {
        let Some(u) = p.usdt_probe.clone() else {
            out.push(p);
            continue;
        };
        let (prov, name) = u.split_once(':').unwrap_or(("", &u));
        let module = p.module.clone().unwrap_or_else(|| m.module.clone());
        let path = wprobe_elf::locate::locate_file(&module, &[])
            .map_err(|e| format!("probe {}: usdt {u}: {e}", p.export))?;
        let elf = wprobe_elf::ElfInfo::open(&path)
            .map_err(|e| format!("probe {}: usdt {u}: {e}", p.export))?;
        let sites: Vec<_> = wprobe_elf::usdt::sites(&elf)
            .into_iter()
            .filter(|s| s.provider == prov && s.name == name)
            .collect();
        if sites.is_empty() {
            return Err(format!(
                "probe {}: no USDT probe `{u}` in {} (`wprobe list {} 'usdt:*'` lists them)",
                p.export,
                path.display(),
                path.display()
            ));
        }
        for s in sites {
            let args = s
                .args
                .map_err(|e| format!("probe {}: usdt {u}: argument specs: {e}", p.export))?;
            out.push(hostabi::manifest::ProbeSpec {
                location: hostabi::manifest::Location {
                    kind: hostabi::manifest::LocationKind::Offset,
                    symbol: None,
                    addend: s.addr,
                },
                value: Some(s.addr),
                usdt_args: args,
                semaphore: s.semaphore,
                usdt_probe: None,
                ..p.clone()
            });
        }
    }
    m.probes = out;
    Ok(())
}

/// The ABI checks on the module's facts: manifest (or `cli_manifest`),
/// ABI version, memory export, handler exports.
fn gate<'a>(
    wasm: std::borrow::Cow<'a, [u8]>,
    facts: ModuleFacts,
    cli_manifest: Option<Manifest>,
) -> Result<Checked<'a>, LoadError> {
    let mut manifest = match (facts.manifest.clone(), cli_manifest) {
        (_, Some(m)) => m,
        (Some(m), None) => m,
        (None, None) => return Err(LoadError::NoManifest),
    };
    expand_usdt(&mut manifest).map_err(LoadError::Usdt)?;
    if !(hostabi::MIN_ABI_VERSION..=hostabi::ABI_VERSION).contains(&manifest.abi) {
        return Err(LoadError::AbiVersion {
            found: manifest.abi,
            oldest: hostabi::MIN_ABI_VERSION,
            expected: hostabi::ABI_VERSION,
        });
    }
    // Memory is how pointers reach the host: a module that imports no
    // function taking one needs none.
    let takes_pointers = facts.imports.iter().any(|n| {
        HOST_IMPORTS
            .iter()
            .any(|i| i.name == n && i.params.iter().any(|(p, _)| p.ends_with("_ptr")))
    });
    if takes_pointers && !facts.memory_export {
        return Err(LoadError::NoMemory);
    }
    for p in &manifest.probes {
        match facts.func_exports.get(&p.export) {
            None => {
                return Err(match facts.other_exports.get(&p.export) {
                    Some(what) => LoadError::BadHandler {
                        name: p.export.clone(),
                        problem: format!(
                            "is {what}, handlers must be functions () -> (i32) or () -> ()"
                        ),
                    },
                    None => LoadError::MissingHandler {
                        name: p.export.clone(),
                    },
                });
            }
            Some(ft)
                if !(ft.params().len() == p.args.len()
                    && ft.params().iter().all(|t| *t == ValType::I64)
                    && (ft.results() == [ValType::I32] || ft.results().is_empty())) =>
            {
                let params = vec![ValType::I64; p.args.len()];
                let want = sig_text(&params, &[ValType::I32]);
                let unit = sig_text(&params, &[]);
                let args = if p.args.is_empty() {
                    String::new()
                } else {
                    let words: Vec<String> = p.args.iter().map(|a| a.render()).collect();
                    format!(" (its manifest's `args {}`)", words.join(" "))
                };
                return Err(LoadError::BadHandler {
                    name: p.export.clone(),
                    problem: format!(
                        "has type {}, handlers{args} must be {want}, or {unit} (which means EXIT)",
                        sig_text(ft.params(), ft.results())
                    ),
                });
            }
            Some(_) => {}
        }
    }
    let writes = facts
        .imports
        .iter()
        .any(|n| n == "write_reg" || n == "write_mem");
    let has_flush = facts
        .func_exports
        .get(hostabi::FLUSH_EXPORT)
        .is_some_and(|ft| ft.params().is_empty() && ft.results() == [ValType::I32]);
    crate::wasm::services::map_specs(&manifest.maps)
        .and_then(|specs| mapstore::region_size(&specs).map_err(|e| e.to_string()))
        .map_err(LoadError::BadMaps)?;
    Ok(Checked {
        wasm,
        manifest,
        writes,
        has_flush,
        events: facts.events.unwrap_or_default(),
    })
}
