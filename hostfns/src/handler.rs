//! A probe's handler export, typed once when its program is loaded and
//! called at each hit with the parameters its manifest's `args` line names
//! ([`ArgSource`]): the registers, entry state and duration a handler
//! would otherwise read with a host call each, passed in as `i64`s.

use hostabi::env::HitEnv;
use hostabi::manifest::{ArgSource, MAX_HANDLER_ARGS};
use hostabi::{Outcome, regs};
use wasmtime::{AsContextMut, Instance, TypedFunc};

macro_rules! handlers {
    ($( $o:ident $u:ident ($($t:ident),*) [$($i:tt),*] ; )*) => {
        /// A handler export of one of the types a handler may have:
        /// `(i64 × n) -> i32` (an outcome code) or `(i64 × n) -> ()` (which
        /// means EXIT), for n up to [`MAX_HANDLER_ARGS`].
        #[derive(Clone)]
        pub enum Handler {
            $(
                #[doc = "Parameters as the name's digit says, an outcome code."]
                $o(TypedFunc<($($t,)*), i32>),
                #[doc = "Parameters as the name's digit says, no result (EXIT)."]
                $u(TypedFunc<($($t,)*), ()>),
            )*
        }

        impl Handler {
            /// The export `name` of `instance` as a handler taking `n`
            /// parameters; `None` when it is not one (the load checks
            /// handler types first, with the reason).
            pub fn new<S: AsContextMut>(
                instance: &Instance,
                mut store: S,
                name: &str,
                n: usize,
            ) -> Option<Handler> {
                let mut k = 0usize;
                $(
                    if n == k {
                        if let Ok(f) = instance.get_typed_func::<($($t,)*), i32>(&mut store, name) {
                            return Some(Handler::$o(f));
                        }
                        return instance
                            .get_typed_func::<($($t,)*), ()>(&mut store, name)
                            .ok()
                            .map(Handler::$u);
                    }
                    k += 1;
                )*
                let _ = k;
                None
            }

            /// Runs the handler with the first parameters of `args`; a
            /// handler without a result returns EXIT.
            #[inline]
            pub fn call<S: AsContextMut>(
                &self,
                store: S,
                args: &[u64; MAX_HANDLER_ARGS],
            ) -> wasmtime::Result<i32> {
                let _ = args;
                match self {
                    $(
                        Handler::$o(f) => f.call(store, ($(args[$i] as i64,)*)),
                        Handler::$u(f) => {
                            f.call(store, ($(args[$i] as i64,)*)).map(|()| Outcome::Exit as i32)
                        }
                    )*
                }
            }
        }
    };
}

handlers! {
    O0 U0 () [];
    O1 U1 (i64) [0];
    O2 U2 (i64, i64) [0, 1];
    O3 U3 (i64, i64, i64) [0, 1, 2];
    O4 U4 (i64, i64, i64, i64) [0, 1, 2, 3];
    O5 U5 (i64, i64, i64, i64, i64) [0, 1, 2, 3, 4];
    O6 U6 (i64, i64, i64, i64, i64, i64) [0, 1, 2, 3, 4, 5];
}

/// The values of `sources` at this hit, in order, as `read_reg(id, 0)`,
/// `entry_reg(id)` and `elapsed_ns()` would return them (0 where the
/// environment has none: a register the transport cannot read; the load
/// refuses entry state and durations outside return probes).
#[inline]
pub fn arg_values<E: HitEnv>(env: &mut E, sources: &[ArgSource]) -> [u64; MAX_HANDLER_ARGS] {
    let mut v = [0u64; MAX_HANDLER_ARGS];
    for (slot, s) in v.iter_mut().zip(sources) {
        *slot = match *s {
            ArgSource::Reg(id) => match crate::reg_by_id(id) {
                Some(r) => {
                    let x = env.read_reg(r.base_id(), 0);
                    if r.is_alias() {
                        x.map(|x| x & 0xFFFF_FFFF)
                    } else {
                        x
                    }
                }
                None => None,
            },
            ArgSource::Entry(id) => regs::entry_index(id).and_then(|_| env.entry_reg(id)),
            ArgSource::Elapsed => env.elapsed_ns(),
        }
        .unwrap_or(0);
    }
    v
}
