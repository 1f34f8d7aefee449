//! `wprobe run`'s command-line errors at their place: an option wprobe
//! refuses, a bad value or an unknown option is reported as the compiler
//! reports a program's errors (`command line:1:COL: error[B0600]: …`, the
//! command line, a caret under the argument), so that every refusal names
//! what is refused and where. The command line is shown with the program's
//! own name (a link named `bpftrace` shows `bpftrace`) and each argument
//! quoted as a shell would need it.

use std::ffi::OsString;

use bt2wasm::diag::codes;
use rpn2wasm::SourceMap;
use rpn2wasm::Span;
use rpn2wasm::diag::{Diagnostic, Diagnostics};

/// The name the command line is shown under in diagnostics.
pub const FILE_NAME: &str = "command line";

/// Largest pid bpftrace accepts (the kernel's `PID_MAX_LIMIT`).
pub const PID_MAX: u64 = 4_194_304;

/// What the command line asks before anything is parsed.
#[derive(Debug, PartialEq, Eq)]
pub enum Early {
    /// Nothing: parse it as usual.
    Parse,
    /// `run --version` / `run -V`: this text on standard output, exit 0.
    Version(String),
    /// A refusal or a bad value: these diagnostics, exit 1.
    Refused(String),
}

/// An argument as a shell would need it written.
fn quoted(a: &str) -> String {
    let plain = !a.is_empty()
        && a.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_./=:,+@%^".contains(&b));
    if plain {
        a.to_string()
    } else {
        format!("'{}'", a.replace('\'', "'\\''"))
    }
}

/// The command line as shown: the program's file name, then each argument
/// quoted; and the byte range of each argument in it.
fn shown(args: &[OsString]) -> (String, Vec<(u32, u32)>) {
    let mut line = String::new();
    let mut at = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        let s = a.to_string_lossy();
        let s = if i == 0 {
            std::path::Path::new(&*s)
                .file_name()
                .map_or_else(|| s.to_string(), |n| n.to_string_lossy().into_owned())
        } else {
            quoted(&s)
        };
        if i > 0 {
            line.push(' ');
        }
        let lo = line.len() as u32;
        line.push_str(&s);
        at.push((lo, line.len() as u32));
    }
    (line, at)
}

/// A diagnostic at argument `index` of `args` (its bytes `from..` within
/// the argument as shown, when given), rendered with the command line and
/// a caret.
pub fn at_arg(args: &[OsString], index: usize, from: Option<usize>, msg: &str) -> String {
    let (line, at) = shown(args);
    let (mut lo, hi) = at.get(index).copied().unwrap_or((0, line.len() as u32));
    if let Some(f) = from {
        lo = (lo + f as u32).min(hi);
    }
    let mut map = SourceMap::default();
    let file = map.add(FILE_NAME.into(), line.into_bytes());
    Diagnostics(vec![Diagnostic::new(
        codes::COMMAND_LINE,
        Span { file, lo, hi },
        msg,
    )])
    .render(&map)
}

/// A diagnostic at the first argument of this process's own command line
/// equal to `arg` (the start of the line when none is).
pub fn at_own_arg(arg: &std::ffi::OsStr, msg: &str) -> String {
    let args: Vec<OsString> = std::env::args_os().collect();
    let index = args
        .iter()
        .skip(1)
        .position(|a| a == arg)
        .map_or(0, |i| i + 1);
    at_arg(&args, index, None, msg)
}

/// Checks `wprobe run`'s arguments (as given, before any rewriting) for
/// what clap cannot say well: `--version`, bpftrace's options wprobe
/// refuses (`-k`, `--info`), and the pid and format values bpftrace
/// checks, with bpftrace's words. Arguments after `--` are the command's.
pub fn check_run(args: &[OsString]) -> Early {
    if args.get(1).is_none_or(|a| a != "run") {
        return Early::Parse;
    }
    let name = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .map_or_else(|| "wprobe".into(), |n| n.to_string_lossy().into_owned());
    let bpftrace_mode = args
        .iter()
        .any(|a| a == "-e" || a == "-" || a.to_string_lossy().ends_with(".bt"));
    let mut i = 2;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        match &*a {
            "--" => break,
            // Values that could look like options.
            "-e" | "-c" | "-o" | "--event" | "--include" | "--probe" => i += 1,
            "--version" | "-V" => {
                return Early::Version(format!("{name} v{}\n", env!("CARGO_PKG_VERSION")));
            }
            "--info" => {
                return Early::Refused(at_arg(
                    args,
                    i,
                    None,
                    "bpftrace's --info (the kernel's BPF features and the build) is not supported: \
                     wprobe uses none of them (`wprobe --version` names the build)",
                ));
            }
            "-k" | "-kk" => {
                return Early::Refused(at_arg(
                    args,
                    i,
                    None,
                    "bpftrace's -k (warnings when a BPF helper fails at run time) is not supported: \
                     a failed read gives 0, and a map lookup of a missing key its zero value, \
                     without a warning",
                ));
            }
            _ => {
                if let Some((value, index, from)) = pid_value(args, i) {
                    if let Err(msg) = parse_pid(&value) {
                        return Early::Refused(at_arg(args, index, from, &msg));
                    }
                } else if bpftrace_mode && (a == "-f" || a == "--format") {
                    let value = args.get(i + 1).map(|v| v.to_string_lossy().into_owned());
                    if let Some(v) = value
                        && v != "text"
                        && v != "json"
                    {
                        return Early::Refused(at_arg(
                            args,
                            i + 1,
                            None,
                            &format!("Invalid output format \"{v}\" (one of: text, json)"),
                        ));
                    }
                }
            }
        }
        i += 1;
    }
    Early::Parse
}

/// The value of a pid option at argument `i` (`-p N`, `-pN`, `--pid N`,
/// `--pid=N`): the value, the argument holding it and where it starts
/// within that argument as shown.
fn pid_value(args: &[OsString], i: usize) -> Option<(String, usize, Option<usize>)> {
    let a = args[i].to_string_lossy();
    if a == "-p" || a == "--pid" {
        let v = args.get(i + 1)?.to_string_lossy().into_owned();
        return Some((v, i + 1, None));
    }
    if let Some(v) = a.strip_prefix("--pid=") {
        return Some((v.to_string(), i, Some("--pid=".len())));
    }
    let v = a
        .strip_prefix("-p")
        .filter(|v| !v.is_empty() && !v.starts_with('-'))?;
    // `-p` joined to its value (quoted when shown only if the value needs it).
    let from = quoted(&a).find(v).unwrap_or(2);
    Some((v.to_string(), i, Some(from)))
}

/// A pid as bpftrace reads it: a decimal number in `[1, PID_MAX]`.
pub fn parse_pid(v: &str) -> Result<i32, String> {
    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "Failed to parse pid: pid '{v}' is not a valid decimal number"
        ));
    }
    match v.parse::<u64>() {
        Ok(n) if (1..=PID_MAX).contains(&n) => Ok(n as i32),
        _ => Err(format!(
            "Failed to parse pid: pid '{v}' out of valid pid range [1,{PID_MAX}]"
        )),
    }
}

/// A clap error of `wprobe run` at its place: an unknown option, or a bad
/// value, with clap's own words; `None` for the other errors (and for
/// other subcommands), which clap prints itself.
pub fn clap_error(args: &[OsString], e: &clap::Error) -> Option<String> {
    use clap::error::{ContextKind, ContextValue, ErrorKind};
    if args.get(1).is_none_or(|a| a != "run") {
        return None;
    }
    let end = args.iter().position(|a| a == "--").unwrap_or(args.len());
    let get = |k: ContextKind| match e.get(k) {
        Some(ContextValue::String(s)) => Some(s.clone()),
        _ => None,
    };
    let (needle, msg) = match e.kind() {
        ErrorKind::UnknownArgument => {
            let arg = get(ContextKind::InvalidArg)?;
            let msg = format!("unknown option {arg} (`wprobe run --help` lists the options)");
            (arg, msg)
        }
        ErrorKind::InvalidValue | ErrorKind::ValueValidation => {
            let value = get(ContextKind::InvalidValue)?;
            let first = e.to_string();
            let first = first.lines().next().unwrap_or_default();
            let mut msg = first.strip_prefix("error: ").unwrap_or(first).to_string();
            if let Some(ContextValue::Strings(valid)) = e.get(ContextKind::ValidValue) {
                msg.push_str(&format!(" (one of: {})", valid.join(", ")));
            }
            (value, msg)
        }
        _ => return None,
    };
    let index = (2..end).find(|&i| args[i] == needle.as_str()).or_else(|| {
        (2..end).find(|&i| {
            let a = args[i].to_string_lossy();
            a.starts_with(needle.as_str()) || a.ends_with(needle.as_str())
        })
    })?;
    Some(at_arg(args, index, None, &msg))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn refusals_point_at_their_argument() {
        let a = args(&["/x/bpftrace", "run", "-k", "-e", "BEGIN { exit(); }"]);
        let Early::Refused(r) = check_run(&a) else {
            panic!("not refused")
        };
        assert!(
            r.starts_with("command line:1:14: error[B0600]: bpftrace's -k "),
            "{r}"
        );
        assert!(
            r.contains("\n  | bpftrace run -k -e 'BEGIN { exit(); }'\n  |              ^^\n"),
            "{r}"
        );
    }

    #[test]
    fn pids_are_checked_as_bpftrace_checks_them() {
        let r = |v: &[&str]| match check_run(&args(v)) {
            Early::Refused(r) => r,
            e => panic!("{e:?}"),
        };
        let s = r(&["bpftrace", "run", "-p", "a1111", "file.bt"]);
        assert!(
            s.starts_with("command line:1:17: error[B0600]: Failed to parse pid: pid 'a1111' is not a valid decimal number"),
            "{s}"
        );
        let s = r(&["bpftrace", "run", "--pid=5000000", "file.bt"]);
        assert!(s.contains("1:20: error[B0600]: Failed to parse pid: pid '5000000' out of valid pid range [1,4194304]"), "{s}");
        assert!(s.contains("\n  |                    ^^^^^^^\n"), "{s}");
        assert_eq!(
            check_run(&args(&["wprobe", "run", "-p", "1", "x.bt"])),
            Early::Parse
        );
        // The command's own arguments are not wprobe's.
        assert_eq!(
            check_run(&args(&[
                "wprobe", "run", "-e", "x", "--", "ls", "-k", "-p", "a"
            ])),
            Early::Parse
        );
    }

    #[test]
    fn version_and_format() {
        assert_eq!(
            check_run(&args(&["/usr/bin/bpftrace", "run", "--version"])),
            Early::Version(format!("bpftrace v{}\n", env!("CARGO_PKG_VERSION")))
        );
        let Early::Refused(r) = check_run(&args(&["bpftrace", "run", "-f", "jsonx", "-e", "x"]))
        else {
            panic!()
        };
        assert!(
            r.starts_with("command line:1:17: error[B0600]: Invalid output format \"jsonx\""),
            "{r}"
        );
    }
}
