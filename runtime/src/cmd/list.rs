//! `wprobe list (BINARY | -p PID) [GLOB]`: the probe-able symbols with their
//! address, size and first opcode byte — what `offset =` and `opcode =` need
//! — what decoding each function from its start verified (its instruction
//! count: a probe without `opcode =` is armed only at one of those
//! starts), its kind (an IFUNC symbol is a resolver, not the function), and
//! its name demangled (C++, Rust) unless `--no-demangle`.

use std::fmt::Write as _;
use std::process::ExitCode;

use crate::cmd::{CliError, CmdResult};
use crate::probe::resolve::{Located, ResolveError};
use wprobe_elf::{ElfInfo, Matcher, NameForm, SymKind};

/// What decoding a function from its start found, for the listing: the
/// number of instructions when every byte decodes (any of their starts is
/// a valid probe location without `opcode =`), else where decoding stops.
fn code_column(elf: &ElfInfo, s: &wprobe_elf::Symbol) -> String {
    if !s.is_code() || s.size == 0 {
        return "-".into();
    }
    match wprobe_elf::disasm::decode_function(elf, s) {
        (insns, None) => format!("{} insns", insns.len()),
        (_, Some(bad)) => format!("bad@+{:#x}", bad - s.value),
    }
}

/// Appends the listing of one module (run-time addresses = link-time + bias):
/// one row per name of each function of the project's one rule
/// ([`wprobe_elf::functions`]; aliases of one address are rows of their
/// own, as `bpftrace -l` and `nm` list them), with `all` the other
/// symbols too, by address then name; `glob` matches a name as it is or
/// as shown.
pub fn list_module(
    out: &mut String,
    elf: &ElfInfo,
    bias: u64,
    glob: Option<&str>,
    all: bool,
    demangle: bool,
) -> usize {
    let shown = |s: &wprobe_elf::Symbol| -> String {
        if demangle {
            wprobe_elf::demangle(&s.name).into_owned()
        } else {
            s.name.clone()
        }
    };
    let forms: &[NameForm] = if demangle {
        &[NameForm::Raw, NameForm::Demangled]
    } else {
        &[NameForm::Raw]
    };
    let matcher = glob.map(|g| Matcher::new(g, forms));
    let hit = |s: &wprobe_elf::Symbol| matcher.is_none_or(|m| m.matches_name(&s.name));
    let functions = wprobe_elf::functions::named(elf);
    let mut rows: Vec<&wprobe_elf::Symbol> = functions
        .iter()
        .flat_map(|f| f.aliases.iter())
        .chain(elf.symbols.iter().filter(|s| all && !s.is_code()))
        .filter(|s| hit(s))
        .collect();
    rows.sort_by(|a, b| (a.value, &a.name).cmp(&(b.value, &b.name)));
    rows.dedup_by(|a, b| a.value == b.value && a.name == b.name);
    for s in &rows {
        let op = elf
            .first_byte(s.value)
            .map(|b| format!("0x{b:02x}"))
            .unwrap_or_else(|| "  - ".into());
        let kind = match s.kind {
            SymKind::Func => "func",
            SymKind::Ifunc => "ifunc",
            SymKind::Object => "object",
            SymKind::Other => "other",
        };
        let _ = writeln!(
            out,
            "{:#018x} {:>8} {op} {:>12} {kind:<6} {}",
            bias.wrapping_add(s.value),
            s.size,
            code_column(elf, s),
            shown(s)
        );
    }
    rows.len()
}

/// Appends the USDT sites of one module whose `provider:name` matches
/// `glob` (the part after `usdt:`): address (run-time = link-time + bias),
/// semaphore, probe, argument specs with the types they give `argN`.
pub fn list_usdt(out: &mut String, elf: &ElfInfo, bias: u64, glob: &str) -> usize {
    let (prov, name) = match glob.split_once(':') {
        Some((p, n)) => (Some(p), n),
        None => (None, glob),
    };
    let mut n = 0;
    for s in wprobe_elf::usdt::sites(elf) {
        let full = s.full_name();
        let hit = wprobe_elf::usdt::matches(&s, prov, if name.is_empty() { "*" } else { name })
            || (prov.is_none() && wprobe_elf::glob(glob, &full));
        if !hit {
            continue;
        }
        let sem = s
            .semaphore
            .map(|v| format!("{:#x}", bias.wrapping_add(v)))
            .unwrap_or_else(|| "-".into());
        let args = match &s.args {
            Ok(a) => a
                .iter()
                .zip(s.args_text.split_ascii_whitespace())
                .enumerate()
                .map(|(i, (a, t))| format!("arg{i}={t}:{}", a.type_name()))
                .collect::<Vec<_>>()
                .join(" "),
            Err(e) => format!("{} (unreadable: {e})", s.args_text),
        };
        let _ = writeln!(
            out,
            "{:#018x} sem {sem:<10} usdt:{full} {args}",
            bias.wrapping_add(s.addr)
        );
        n += 1;
    }
    n
}

/// An executable file a process maps: its path, and where it is (its ELF
/// and load bias) or why that is not known.
type ProcessModule = (String, Result<Located, ResolveError>);

/// The executable files process `pid` maps, each once, in the order of
/// its maps.
fn process_modules(pid: i32) -> Result<Vec<ProcessModule>, CliError> {
    let maps = crate::proc::procmaps::read(pid).map_err(|e| CliError::user(e.to_string()))?;
    let mut resolver = crate::probe::resolve::Resolver::default();
    let mut seen = Vec::new();
    let mut modules = Vec::new();
    for m in maps.iter().filter(|m| m.exec && m.is_file()) {
        if seen.contains(&m.path) {
            continue;
        }
        seen.push(m.path.clone());
        modules.push((m.path.clone(), resolver.locate(&maps, &m.path, None)));
    }
    Ok(modules)
}

/// Runs the command.
pub fn list(a: ListArgs) -> CmdResult {
    let mut out = String::new();
    let usdt = a
        .args
        .iter()
        .find_map(|g| g.strip_prefix("usdt:").or((g == "usdt").then_some("*")))
        .map(str::to_string);
    if let Some(glob) = usdt {
        return list_usdt_cmd(&a, &glob);
    }
    let _ = writeln!(
        out,
        "{:<18} {:>8} op   {:>12} kind   symbol",
        "address", "size", "code"
    );
    let (binary, glob) = match a.pid {
        Some(_) => (None, a.args.first().cloned()),
        None => (a.args.first().cloned(), a.args.get(1).cloned()),
    };
    let mut total = 0;
    if let Some(pid) = a.pid {
        for (path, located) in process_modules(pid)? {
            match located {
                Ok(loc) => {
                    let _ = writeln!(out, "# {} (bias {:#x})", path, loc.bias);
                    total += list_module(
                        &mut out,
                        &loc.elf,
                        loc.bias,
                        glob.as_deref(),
                        a.all,
                        !a.no_demangle,
                    );
                }
                Err(e) => {
                    let _ = writeln!(out, "# {}: {e}", path);
                }
            }
        }
    } else {
        let Some(b) = binary else {
            return Err(CliError::user("give a BINARY or -p PID"));
        };
        let path =
            wprobe_elf::locate::locate_file(&b, &[]).map_err(|e| CliError::user(e.to_string()))?;
        match ElfInfo::open(&path) {
            Ok(elf) => {
                if elf.is_dyn {
                    let _ = writeln!(
                        out,
                        "# {}: position-independent; addresses are link-time (offset =)",
                        path.display()
                    );
                }
                total += list_module(&mut out, &elf, 0, glob.as_deref(), a.all, !a.no_demangle);
            }
            Err(e) => {
                return Err(CliError::user(e.to_string()));
            }
        }
    }
    if let Err(e) = crate::out::output::print_stdout(&out) {
        return Err(CliError::user(format!("writing the listing: {e}")));
    }
    if total == 0 {
        crate::elog!("wprobe: no matching symbols");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// `wprobe list (BINARY | -p PID) 'usdt:GLOB'`.
fn list_usdt_cmd(a: &ListArgs, glob: &str) -> CmdResult {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<18} {:<14} probe and arguments",
        "address", "semaphore"
    );
    let mut total = 0;
    if let Some(pid) = a.pid {
        for (path, located) in process_modules(pid)? {
            if let Ok(loc) = located {
                let mut part = String::new();
                let n = list_usdt(&mut part, &loc.elf, loc.bias, glob);
                if n > 0 {
                    let _ = writeln!(out, "# {} (bias {:#x})", path, loc.bias);
                    out += &part;
                    total += n;
                }
            }
        }
    } else {
        let Some(b) = a.args.first().filter(|b| !b.starts_with("usdt")) else {
            return Err(CliError::user("give a BINARY or -p PID"));
        };
        let path =
            wprobe_elf::locate::locate_file(b, &[]).map_err(|e| CliError::user(e.to_string()))?;
        let elf = ElfInfo::open(&path).map_err(|e| CliError::user(e.to_string()))?;
        if elf.is_dyn {
            let _ = writeln!(
                out,
                "# {}: position-independent; addresses are link-time",
                path.display()
            );
        }
        total += list_usdt(&mut out, &elf, 0, glob);
    }
    if let Err(e) = crate::out::output::print_stdout(&out) {
        return Err(CliError::user(format!("writing the listing: {e}")));
    }
    if total == 0 {
        crate::elog!("wprobe: no matching USDT probes");
        return Ok(ExitCode::from(1));
    }
    Ok(ExitCode::SUCCESS)
}

/// Examples shown under `--help`.
const EXAMPLES: &str = "\
Examples:
  wprobe list ./prog 'target_*'     functions of a binary matching a glob
  wprobe list libc 'str*'           a library by short name or soname
  wprobe list -p 1234 'mall*'       a process: its executable and libraries
  wprobe list python3.11 'usdt:*'   USDT probes: sites, semaphores, argument specs";

/// `wprobe list`.
#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct ListArgs {
    /// `BINARY [GLOB]`, or `[GLOB]` with `-p PID`.
    #[arg(value_name = "BINARY|GLOB", num_args = 0..=2)]
    pub args: Vec<String>,
    /// A process: its executable and every mapped library.
    #[arg(short = 'p', long = "pid", value_name = "PID")]
    pub pid: Option<i32>,
    /// Include data objects, not only functions.
    #[arg(long)]
    pub all: bool,
    /// Show symbol names as they are in the file (C++ and Rust names are
    /// demangled by default; globs match either form).
    #[arg(long)]
    pub no_demangle: bool,
    /// Demangle C++ and Rust names (the default; kept for tracef and
    /// uftrace habits).
    #[arg(short = 'C', long = "demangle", overrides_with = "no_demangle")]
    pub demangle: bool,
}
