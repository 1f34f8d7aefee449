//! `config = { key = value; ... }` (bpftrace 0.23): each key by its name or
//! its `BPFTRACE_*` environment spelling. An environment variable set for
//! the run wins over the block (bpftrace's precedence). Keys that only tune
//! the kernel side of bpftrace (ring sizes, BPF program limits, the
//! verifier's log, symbol caches) change nothing in wprobe and are taken
//! as they are; keys whose meaning wprobe does not have are refused at
//! the key, naming it.

use super::Options;
use crate::diag::{Sink, codes};
use rpn2wasm::Span;

/// What the block decides beyond the compile options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunConfig {
    /// `print_maps_on_exit`.
    pub print_maps_on_exit: bool,
    /// `missing_probes`: `ignore`, `warn` (the default) or `error`.
    pub missing_probes: String,
    /// `cpp_demangle`: C++ (and Rust) names in `ustack`, `usym` and
    /// `func` output demangled (the default).
    pub cpp_demangle: bool,
}

impl Default for RunConfig {
    fn default() -> RunConfig {
        RunConfig {
            print_maps_on_exit: true,
            missing_probes: "warn".into(),
            cpp_demangle: true,
        }
    }
}

/// Keys that tune only bpftrace's kernel side or its caches.
const NO_EFFECT: &[&str] = &[
    "cache_user_symbols",
    "lazy_symbolication",
    "log_size",
    "max_bpf_progs",
    "max_probes",
    "max_type_res_iterations",
    "on_stack_limit",
    "perf_rb_pages",
    "license",
    "symbol_source",
    "show_debug_info",
];

/// Keys bpftrace reads only from the environment.
const ENV_ONLY: &[&str] = &["debug_output", "verify_llvm_ir", "kernel_build", "btf"];

/// The short name of a key (`BPFTRACE_STACK_MODE` is `stack_mode`).
fn short(key: &str) -> String {
    let k = key.strip_prefix("BPFTRACE_").unwrap_or(key);
    let k = k.to_ascii_lowercase();
    match k.as_str() {
        "strlen" => "max_strlen".into(),
        "map_keys_max" => "max_map_keys".into(),
        _ => k,
    }
}

/// The environment variable of a key.
fn env_name(short: &str) -> String {
    format!("BPFTRACE_{}", short.to_ascii_uppercase())
}

/// Applies the block to `opts`; returns what the run needs to know.
pub fn apply(
    entries: &[(String, String, Span)],
    opts: &mut Options,
    diags: &mut Sink,
) -> RunConfig {
    let mut rc = RunConfig::default();
    for (key, value, span) in entries {
        let k = short(key);
        if std::env::var_os(env_name(&k)).is_some() {
            continue;
        }
        let bad_value = |diags: &mut Sink, want: &str| {
            diags.error(
                codes::LITERAL,
                *span,
                format!("Invalid value for {key}: {value} ({want})"),
            );
        };
        match k.as_str() {
            "stack_mode" => match value.as_str() {
                "bpftrace" | "perf" | "raw" => opts.stack_mode = value.clone(),
                _ => bad_value(diags, "bpftrace, perf or raw"),
            },
            "max_strlen" => match value.parse::<u32>() {
                Ok(n) if n > 0 => opts.strlen = n.min(4096),
                _ => bad_value(diags, "a positive integer"),
            },
            "max_map_keys" => match value.parse::<u32>() {
                Ok(n) if n > 0 => opts.map_keys = n.min(hostabi::maps::MAX_KEYS_PER_MAP),
                _ => bad_value(diags, "a positive integer"),
            },
            "print_maps_on_exit" => match value.as_str() {
                "0" | "false" => rc.print_maps_on_exit = false,
                "1" | "true" => rc.print_maps_on_exit = true,
                _ => bad_value(diags, "0 or 1"),
            },
            "cpp_demangle" => match value.as_str() {
                "0" | "false" => rc.cpp_demangle = false,
                "1" | "true" => rc.cpp_demangle = true,
                _ => bad_value(diags, "0 or 1"),
            },
            "missing_probes" => match value.as_str() {
                "ignore" | "warn" | "error" => rc.missing_probes = value.clone(),
                _ => bad_value(diags, "ignore, warn or error"),
            },
            k if NO_EFFECT.contains(&k) => {}
            "probe_inline" if value == "0" => {}
            "probe_inline" => diags.error_note(
                codes::UNSUPPORTED,
                *span,
                "probe_inline is not supported: wprobe probes a function's own code, not the copies inlined into its callers",
                "probe the callers, or build the program with -fno-inline",
            ),
            "str_trunc_trailer" | "max_cat_bytes" | "max_ast_nodes" => diags.error(
                codes::UNSUPPORTED,
                *span,
                format!("the config key {key} is not supported"),
            ),
            k if ENV_ONLY.contains(&k) => diags.error(
                codes::ATTACH_POINT,
                *span,
                format!("{key} can only be set as an environment variable"),
            ),
            _ => diags.error(
                codes::UNDEFINED,
                *span,
                format!("Unrecognized config variable: {key}"),
            ),
        }
    }
    rc
}
