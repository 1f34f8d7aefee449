//! Running handlers: one store per run holding every program's instance
//! (so global variables are shared and local variables persist), fuel set
//! before each call, traps and fuel exhaustion turned into counted outcomes.
//! A trapping or runaway handler never stops the run.

use crate::wasm::engine;
use crate::wasm::host::{HostState, add_to_linker};
use crate::wasm::load::LoadedModule;
use hostabi::Outcome;
use hostabi::env::HitEnv;
use hostabi::manifest::Manifest;
use hostfns::Handler;
use wasmtime::{Engine, Instance, Linker, Memory, Store, StoreLimitsBuilder, Trap, TypedFunc};

/// How a handler run ended, from the runtime's point of view.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunOutcome {
    /// The handler returned this outcome.
    Returned(Outcome),
    /// Fuel ran out; records of the interrupted run were flushed when the module could.
    FuelExhausted,
    /// The handler trapped (the message says why, on one line). Records it
    /// emitted through host calls before the trap are kept; compiled RPN
    /// emits its records at the end of a run, so a trap loses them.
    Trapped(String),
    /// Interrupted because wprobe was asked to stop (SIGINT, SIGTERM).
    Interrupted,
}

/// One loaded program: its instance and handler functions.
pub struct Program {
    /// The manifest.
    pub manifest: std::sync::Arc<Manifest>,
    /// Whether it writes registers or memory.
    pub writes: bool,
    /// `None` for a module that exports no memory (it imports no host
    /// function taking pointers: the loader checks that).
    memory: Option<Memory>,
    handlers: Vec<Handler>,
    flush: Option<TypedFunc<(), i32>>,
    /// Fuel per hit.
    pub fuel: u64,
    /// The instance (for tests that inspect exports).
    pub instance: Instance,
}

/// The handlers of a run.
pub struct Runner<E: HitEnv + 'static> {
    /// The store (its data holds the hit environment and the sink).
    pub store: Store<HostState<E>>,
    linker: Linker<HostState<E>>,
    /// Loaded programs, in load order.
    pub programs: Vec<Program>,
}

impl<E: HitEnv + 'static> Runner<E> {
    /// An empty runner around `env`.
    pub fn new(engine: &Engine, env: E) -> anyhow::Result<Self> {
        let limits = StoreLimitsBuilder::new()
            .memory_size(engine::MAX_MEMORY_BYTES)
            .trap_on_grow_failure(false)
            .build();
        let mut store = Store::new(engine, HostState::new(env, limits));
        store.limiter(|s| &mut s.limits);
        // Calls outside `run` (instantiation, tests calling exports) also
        // run until the engine's next epoch.
        store.set_epoch_deadline(1);
        let mut linker = Linker::new(engine);
        add_to_linker(&mut linker)?;
        Ok(Runner {
            store,
            linker,
            programs: Vec::new(),
        })
    }

    /// Instantiates a loaded module; returns its program index.
    pub fn add(&mut self, m: &LoadedModule, fuel_override: Option<u64>) -> anyhow::Result<usize> {
        self.store.set_fuel(engine::FLUSH_FUEL)?;
        self.store
            .data_mut()
            .services
            .add_program(&m.manifest.maps)?;
        let instance = self.linker.instantiate(&mut self.store, &m.module)?;
        let memory = instance.get_memory(&mut self.store, hostabi::MEMORY_EXPORT);
        let mut handlers = Vec::with_capacity(m.manifest.probes.len());
        // Each export typed once: the probes of `wprobe trace` (thousands)
        // share two.
        let mut typed: rustc_hash::FxHashMap<(&str, usize), Handler> = Default::default();
        for p in &m.manifest.probes {
            // A handler export: `(i64 × args) -> i32` returns an outcome
            // code; `(i64 × args) -> ()` returns nothing, which means EXIT
            // (docs/hostabi.md). The load checked the type.
            let key = (p.export.as_str(), p.args.len());
            let h = match typed.get(&key) {
                Some(h) => h.clone(),
                None => {
                    let h = Handler::new(&instance, &mut self.store, &p.export, p.args.len())
                        .ok_or_else(|| {
                            anyhow::anyhow!("handler export `{}` has another type", p.export)
                        })?;
                    typed.insert(key, h.clone());
                    h
                }
            };
            handlers.push(h);
        }
        let flush = if m.has_flush {
            Some(instance.get_typed_func::<(), i32>(&mut self.store, hostabi::FLUSH_EXPORT)?)
        } else {
            None
        };
        let fuel = engine::fuel_for(m.manifest.jmpmax, m.manifest.fuel, fuel_override);
        self.programs.push(Program {
            manifest: m.manifest.clone(),
            writes: m.writes,
            memory,
            handlers,
            flush,
            fuel,
            instance,
        });
        Ok(self.programs.len() - 1)
    }

    /// Runs handler `probe` of program `prog` against the store's current environment.
    pub fn run(&mut self, prog: usize, probe: usize) -> RunOutcome {
        // No clones on this path: a `TypedFunc` clone takes a reference on
        // its registered type (measurable per hit).
        let p = &self.programs[prog];
        self.store.data_mut().memory = p.memory;
        self.store.data_mut().services.prog = prog;
        if self.store.set_fuel(p.fuel).is_err() {
            return RunOutcome::Trapped("fuel is not enabled".into());
        }
        // Runs until the engine's next epoch: `engine::interrupt_on` bumps
        // it when wprobe is asked to stop.
        self.store.set_epoch_deadline(1);
        let spec = &p.manifest.probes[probe];
        let usdt = &spec.usdt_args[..spec.usdt_args.len().min(hostabi::usdt::MAX_USDT_ARGS)];
        let data = self.store.data_mut();
        data.usdt[..usdt.len()].copy_from_slice(usdt);
        data.usdt_len = usdt.len();
        let sources = &spec.args;
        let args = if sources.is_empty() {
            [0; hostabi::manifest::MAX_HANDLER_ARGS]
        } else {
            hostfns::arg_values(&mut self.store.data_mut().env, sources)
        };
        let res = p.handlers[probe].call(&mut self.store, &args);
        match res {
            Ok(code) => match Outcome::from_code(code) {
                Some(o) => RunOutcome::Returned(o),
                None => {
                    RunOutcome::Trapped(format!("handler returned {code}, not an outcome code"))
                }
            },
            Err(e) => {
                if e.downcast_ref::<Trap>() == Some(&Trap::Interrupt) {
                    RunOutcome::Interrupted
                } else if e.downcast_ref::<Trap>() == Some(&Trap::OutOfFuel) {
                    if let Some(f) = &p.flush {
                        let _ = self.store.set_fuel(engine::FLUSH_FUEL);
                        let _ = f.call(&mut self.store, ());
                    }
                    RunOutcome::FuelExhausted
                } else {
                    RunOutcome::Trapped(trap_message(&e))
                }
            }
        }
    }

    /// Linear memory of a program (tests read local variables through it);
    /// empty when it exports none.
    pub fn memory(&self, prog: usize) -> &[u8] {
        match self.programs[prog].memory {
            Some(m) => m.data(&self.store),
            None => &[],
        }
    }
}

fn trap_message(e: &wasmtime::Error) -> String {
    match e.downcast_ref::<Trap>() {
        Some(t) => t.to_string(),
        // Host-raised errors carry a backtrace; the root cause is the message.
        None => e.root_cause().to_string(),
    }
}
