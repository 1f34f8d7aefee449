//! The stages of `runtime/src` (its top-level modules) import downward
//! only: each names, through `crate::` paths (`use` or not, grouped or
//! not), `super::` chains and the macros it uses, only the stages below it
//! in [`STAGES`]; so no import cycle runs through two stages, and none
//! through files (a module's own submodules aside: a parent and its child
//! are one unit) (docs/architecture.md, "Stages and their order").

use crate::case;
use crate::support::case::Case;
use crate::support::cli::repo;
use crate::support::crate_paths::{CratePath, crate_paths, exported_macros};
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

pub const CASES: &[Case] = &[
    case!(each_stage_imports_only_the_stages_below_it),
    case!(no_import_cycle_runs_through_files),
    case!(crate_paths_are_read_in_every_form_the_sources_use),
];

/// The stages of `runtime/src`, lowest first: each may import only those
/// before it.
const STAGES: [&str; 10] = [
    "sys",
    "arch",
    "proc",
    "out",
    "wasm",
    "probe",
    "transport",
    "plan",
    "session",
    "cmd",
];

/// One source file of `runtime/src`.
struct Source {
    /// Its path from `runtime/src`: `transport/inproc/seam.rs`.
    rel: String,
    /// Its stage (`None`: `lib.rs`, `main.rs`).
    stage: Option<String>,
    /// The paths into the crate it names.
    paths: Vec<CratePath>,
}

/// The crate's sources, with the macros they export (name → file).
struct Crate {
    sources: Vec<Source>,
    /// Module path (`transport::inproc`) → its file.
    modules: BTreeMap<String, String>,
    macros: BTreeMap<String, String>,
}

fn rs_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().filter_map(Result::ok) {
        let p = e.path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of a file (`transport/inproc.rs`: `transport`,
/// `inproc`; `lib.rs`: none).
fn module_of(rel: &str) -> Vec<&str> {
    let mut m: Vec<&str> = rel.trim_end_matches(".rs").split('/').collect();
    if m.last() == Some(&"mod") || rel == "lib.rs" || rel == "main.rs" {
        m.pop();
    }
    m
}

fn read_crate(src: &Path) -> Crate {
    let mut files = Vec::new();
    rs_files(src, &mut files);
    files.sort();
    let mut c = Crate {
        sources: Vec::new(),
        modules: BTreeMap::new(),
        macros: BTreeMap::new(),
    };
    for f in files {
        let rel = f.strip_prefix(src).unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(&f).unwrap();
        let module = module_of(&rel);
        for m in exported_macros(&text) {
            c.macros.insert(m, rel.clone());
        }
        c.modules.insert(module.join("::"), rel.clone());
        c.sources.push(Source {
            stage: module.first().map(|s| s.to_string()),
            paths: crate_paths(&text, &module),
            rel,
        });
    }
    c
}

impl Crate {
    /// The file that defines what `path` names: the deepest module file
    /// along it, or the file exporting the macro it names.
    fn file_of(&self, path: &CratePath) -> Option<&str> {
        if let Some(f) = self.macros.get(&path.segments[0]) {
            return Some(f.as_str());
        }
        let mut found = None;
        for k in 1..=path.segments.len() {
            match self.modules.get(&path.segments[..k].join("::")) {
                Some(f) => found = Some(f.as_str()),
                None => break,
            }
        }
        found
    }

    /// The stage of the file that defines what `path` names.
    fn stage_of(&self, path: &CratePath) -> Option<String> {
        let f = self.file_of(path)?;
        module_of(f).first().map(|s| s.to_string())
    }
}

fn runtime_src() -> std::path::PathBuf {
    repo().join("runtime/src")
}

fn each_stage_imports_only_the_stages_below_it() {
    let src = runtime_src();
    let c = read_crate(&src);
    let rank = |s: &str| STAGES.iter().position(|&x| x == s);
    let mut bad = Vec::new();
    // Every top-level module is a stage of the order, and every stage of
    // the order is one.
    let tops: BTreeSet<&str> = c
        .sources
        .iter()
        .filter_map(|s| s.stage.as_deref())
        .collect();
    for &t in &tops {
        if rank(t).is_none() {
            bad.push(format!(
                "runtime/src/{t}: a top-level module STAGES does not place"
            ));
        }
    }
    for s in STAGES.iter().filter(|s| !tops.contains(*s)) {
        bad.push(format!(
            "{s}: in STAGES, but runtime/src has no such module"
        ));
    }
    let mut read = 0;
    for s in &c.sources {
        let Some(from) = s.stage.as_deref().and_then(rank) else {
            continue;
        };
        for p in &s.paths {
            read += 1;
            let at = format!("runtime/src/{}:{}: `{}`", s.rel, p.line, p.text());
            match c.stage_of(p) {
                Some(to) if rank(to.as_str()).is_some_and(|r| r <= from) => {}
                Some(to) => bad.push(format!("{at}: {} imports {to}, above it", STAGES[from])),
                None => bad.push(format!("{at}: names no module or macro of the crate")),
            }
        }
    }
    // The sources do name the crate's paths: the check reads them.
    assert!(
        read > 1000,
        "only {read} crate paths read in {}",
        src.display()
    );
    assert!(
        bad.is_empty(),
        "{} against the order {}:\n{}",
        bad.len(),
        STAGES.join(" < "),
        bad.join("\n")
    );
}

/// The strongly connected components of more than one file of `edges`
/// (Tarjan's algorithm).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Walk<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    impl<'a> Walk<'a> {
        fn visit(&mut self, v: &'a str) {
            let edges: &'a BTreeMap<String, BTreeSet<String>> = self.edges;
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for w in edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w.as_str());
                    let lw = self.low[w.as_str()];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(lw);
                } else if self.on.contains(w.as_str()) {
                    let iw = self.index[w.as_str()];
                    let lv = self.low.get_mut(v).unwrap();
                    *lv = (*lv).min(iw);
                }
            }
            if self.low[v] == self.index[v] {
                let mut comp = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    comp.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if comp.len() > 1 {
                    comp.sort();
                    self.out.push(comp);
                }
            }
        }
    }
    let mut walk = Walk {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for v in edges.keys() {
        if !walk.index.contains_key(v.as_str()) {
            walk.visit(v.as_str());
        }
    }
    walk.out
}

fn no_import_cycle_runs_through_files() {
    let c = read_crate(&runtime_src());
    // File → the files it imports from (its own left out), with one path
    // per edge for the message.
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
    for s in c.sources.iter().filter(|s| s.stage.is_some()) {
        for p in &s.paths {
            let Some(to) = c.file_of(p) else {
                continue;
            };
            // A module and its submodules import each other freely: a
            // parent names its children's items, a child its parent's.
            let (a, b) = (module_of(&s.rel), module_of(to));
            let kin = a.starts_with(&b) || b.starts_with(&a);
            if to != s.rel && !kin {
                edges
                    .entry(s.rel.clone())
                    .or_default()
                    .insert(to.to_string());
                why.entry((s.rel.clone(), to.to_string()))
                    .or_insert_with(|| format!("{}:{}: `{}`", s.rel, p.line, p.text()));
            }
        }
    }
    assert!(
        edges.len() > 100,
        "only {} files import others",
        edges.len()
    );
    let stage = |f: &str| module_of(f)[0].to_string();
    let mut bad = Vec::new();
    for comp in cycles(&edges) {
        let stages: BTreeSet<String> = comp.iter().map(|f| stage(f.as_str())).collect();
        {
            let inside: Vec<&String> = why
                .iter()
                .filter(|((a, b), _)| comp.contains(a) && comp.contains(b))
                .map(|(_, w)| w)
                .collect();
            bad.push(format!(
                "a cycle through {} ({}):\n  {}",
                comp.join(", "),
                stages.into_iter().collect::<Vec<_>>().join(", "),
                inside
                    .iter()
                    .map(|w| w.as_str())
                    .collect::<Vec<_>>()
                    .join("\n  ")
            ));
        }
    }
    assert!(bad.is_empty(), "{}", bad.join("\n"));
}

fn crate_paths_are_read_in_every_form_the_sources_use() {
    let src = r##"
//! Docs name crate::cmd, and so do comments.
use crate::{a::{b, c::{self, D}}, e as f};
use crate::g::*;
use super::super::h::I;
fn x() -> u64 { /* crate::cmd /* nested */ crate::cmd */
    let s = "crate::cmd"; let r = r#"crate::cmd "quoted""#; let q = '"'; let e = '\'';
    let t: &'static str = "";
    crate::j::k(s) + $crate::l::M as u64 + crate::n::O::<u8>::new()
}
mod tests {
    use super::super::P;
    mod deeper {
        use super::super::super::Q;
    }
}
use super::R;
"##;
    let got: Vec<(usize, String)> = crate_paths(src, &["st", "sub"])
        .into_iter()
        .map(|p| (p.line, p.text()))
        .collect();
    let want = [
        (3, "crate::a::b"),
        (3, "crate::a::c"),
        (3, "crate::a::c::D"),
        (3, "crate::e"),
        (4, "crate::g"),
        (5, "crate::h::I"),
        (9, "crate::j::k"),
        (9, "crate::l::M"),
        (9, "crate::n::O"),
        (12, "crate::st::P"),
        (14, "crate::st::Q"),
        (17, "crate::st::R"),
    ];
    let want: Vec<(usize, String)> = want.iter().map(|(l, p)| (*l, p.to_string())).collect();
    assert_eq!(got, want);
    let macros = exported_macros("/// m\n#[macro_export]\nmacro_rules! m { () => {} }");
    assert_eq!(macros, ["m"]);
}
