//! `wprobe_agent_load`: a precompiled handler module deserialized and
//! instantiated in the one store, its probes' handlers, parameters and
//! USDT arguments resolved.

use agent_abi::{AgentError, ControlHeader, LoadRequest, ProbeEntry};
use alloc::boxed::Box;
use alloc::vec::Vec;
use core::sync::atomic::Ordering;
use hostabi::usdt::UsdtArg;
use hostfns::Handler;
use wasmtime::{Engine, Instance, Module, Store};

use crate::control::{control_call, read_req};
use crate::host::AgentHost;
use crate::params::{Param, arg_source};
use crate::{FLUSH_FUEL, ProbeFn, Program, agent, ctrl, err};

/// Loads the program described by the [`LoadRequest`] at offset `req_off`
/// of the control region. Returns the program index or an [`AgentError`] code.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn wprobe_agent_load(req_off: usize) -> i32 {
    control_call(load_inner, req_off)
}

extern "C" fn load_inner(arg: *mut u8) -> i64 {
    // SAFETY: `control_call` passes a pointer to the offset.
    let req_off = unsafe { *(arg as *const usize) } as u64;
    let (Some(c), Some(a)) = (ctrl::get(), agent()) else {
        return AgentError::NotInitialized as i64;
    };
    let req: LoadRequest = match read_req(c, req_off, "request") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let Some(bytes) = ctrl::bytes(c, req.module_off, req.module_len) else {
        return err(
            AgentError::BadRequest,
            format_args!("module outside the region"),
        );
    };
    if u64::from(req.gvars) > c.gvars_cap {
        return err(
            AgentError::BadRequest,
            format_args!(
                "{} gvars, the region has room for {}",
                req.gvars, c.gvars_cap
            ),
        );
    }
    if req.map_len != 0
        && (req.map_off < c.maps_off
            || req
                .map_off
                .checked_add(req.map_len)
                .is_none_or(|e| e > c.maps_off + c.maps_size))
    {
        return err(
            AgentError::BadRequest,
            format_args!("map region outside the region's map area"),
        );
    }
    if Engine::detect_precompiled(bytes) != Some(wasmtime::Precompiled::Module) {
        return err(
            AgentError::NotPrecompiled,
            format_args!("not a precompiled wasmtime module"),
        );
    }
    // SAFETY: the bytes come from the tracer's `Engine::precompile_module`
    // (trusted input); wasmtime copies them into its own code memory.
    let module = match unsafe { Module::deserialize(&a.engine, &*bytes) } {
        Ok(m) => m,
        Err(e) => return err(AgentError::Incompatible, format_args!("{e:#}")),
    };
    // Start functions run under fuel too.
    let _ = a.store.set_fuel(FLUSH_FUEL);
    let instance = match a.linker.instantiate(&mut a.store, &module) {
        Ok(i) => i,
        Err(e) => return err(AgentError::Instantiate, format_args!("{e:#}")),
    };
    let memory = instance.get_memory(&mut a.store, hostabi::MEMORY_EXPORT);
    let program = a.programs.len();
    if program > u16::MAX as usize {
        return err(AgentError::BadRequest, format_args!("too many programs"));
    }
    // Room for every entry the region can hold (a count past it fails at
    // the entry past the region's end, not at this allocation).
    let fit = c.region_size as usize / core::mem::size_of::<ProbeEntry>();
    let mut new_probes = Vec::with_capacity((req.n_probes as usize).min(fit));
    // Each export typed once (`wprobe trace`'s thousands of probes share
    // two) rather than looked up by name for every probe; wprobe's
    // `Runner::add` does the same (hostfns, which both share, allocates
    // nothing, so each keeps its own).
    let mut typed = Vec::new();
    for i in 0..u64::from(req.n_probes) {
        match probe_entry(c, &req, i, &instance, &mut a.store, &mut typed) {
            Ok(p) => new_probes.push(p),
            Err(e) => return e,
        }
    }
    let flush = instance
        .get_typed_func::<(), i32>(&mut a.store, hostabi::FLUSH_EXPORT)
        .ok();
    a.programs.push(Program {
        memory,
        flush,
        fuel: req.fuel,
        map: (req.map_off, req.map_len),
        writes_allowed: req.writes_allowed != 0,
    });
    let top = new_probes
        .iter()
        .map(|p| p.0 as usize + 1)
        .max()
        .unwrap_or(0);
    if a.probes.len() < top {
        a.probes.resize_with(top, || None);
    }
    for (probe, load_bias, handler, args, usdt) in new_probes {
        a.probes[probe as usize] = Some(ProbeFn {
            program: program as u16,
            handler,
            args,
            load_bias,
            usdt,
        });
    }
    let g = c
        .gvars_len
        .load(Ordering::Relaxed)
        .max(u64::from(req.gvars));
    c.gvars_len.store(g, Ordering::Release);
    program as i64
}

/// A probe of a [`LoadRequest`], read and resolved: its id, load bias,
/// handler, parameters and USDT arguments.
type NewProbe = (u32, u64, Handler, Box<[Param]>, Box<[UsdtArg]>);

/// The `i`th probe entry of `req`: its handler looked up in `instance`
/// (or among those `typed` already: export, parameters, handler), its
/// parameters and USDT arguments resolved. `Err` holds the error code (the
/// message is in the region).
fn probe_entry(
    c: &ControlHeader,
    req: &LoadRequest,
    i: u64,
    instance: &Instance,
    store: &mut Store<AgentHost>,
    typed: &mut Vec<(Box<str>, usize, Handler)>,
) -> Result<NewProbe, i64> {
    let e: ProbeEntry = read_req(
        c,
        req.probes_off + i * core::mem::size_of::<ProbeEntry>() as u64,
        "probe entry",
    )?;
    if u64::from(e.probe) >= c.probes_cap {
        return Err(err(
            AgentError::TooManySites,
            format_args!("probe {} >= {}", e.probe, c.probes_cap),
        ));
    }
    let Some(name) = ctrl::bytes(c, e.name_off, u64::from(e.name_len))
        .and_then(|b| core::str::from_utf8(b).ok())
    else {
        return Err(err(
            AgentError::BadRequest,
            format_args!("probe {} export name", e.probe),
        ));
    };
    let n = e.n_args as usize;
    let mut args = Vec::new();
    for &code in e.args.get(..n).unwrap_or(&[]) {
        match arg_source(code) {
            Some(s) => args.push(Param::new(s)),
            None => {
                return Err(err(
                    AgentError::BadRequest,
                    format_args!("probe {} parameter code 0x{code:x}", e.probe),
                ));
            }
        }
    }
    if args.len() != n {
        return Err(err(
            AgentError::BadRequest,
            format_args!("probe {}: {n} parameters", e.probe),
        ));
    }
    let known = typed
        .iter()
        .find(|(e, k, _)| **e == *name && *k == n)
        .map(|(_, _, h)| h.clone());
    let handler = match known {
        Some(h) => h,
        None => {
            let Some(h) = Handler::new(instance, store, name, n) else {
                return Err(err(
                    AgentError::MissingExport,
                    format_args!("export {name:?}: not a handler taking {n} i64 parameters"),
                ));
            };
            typed.push((name.into(), n, h.clone()));
            h
        }
    };
    let mut usdt = Box::default();
    if e.usdt_len != 0 {
        let parsed = ctrl::bytes(c, e.usdt_off, u64::from(e.usdt_len))
            .and_then(|b| core::str::from_utf8(b).ok())
            .and_then(|t| hostabi::usdt::parse_args(t, &mut |_| None).ok())
            .filter(|p| p.len() <= hostabi::usdt::MAX_USDT_ARGS);
        let Some(parsed) = parsed else {
            return Err(err(
                AgentError::BadRequest,
                format_args!("probe {}: USDT argument specs", e.probe),
            ));
        };
        usdt = parsed.into_boxed_slice();
    }
    Ok((e.probe, e.load_bias, handler, args.into_boxed_slice(), usdt))
}
