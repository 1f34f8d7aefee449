//! Builtins (`pid`, `comm`, `retval`, `argN`, `args`, `probe`, `func`,
//! `ustack`...) and the errno names known as constants.

use super::{ARG_REGS, reg};
use crate::ast::BinOp;
use crate::check::{Ctx, Fx, coerce_int};
use crate::diag::codes;
use crate::dwarf::ParamValue;
use crate::ir::{E, Fact, Part, S, Ty};
use hostabi::regs;
use rpn2wasm::Span;

impl Fx<'_, '_> {
    pub(super) fn builtin(&mut self, name: &str, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        let fact = |f| (E::Fact(f), Ty::U64);
        match name {
            "true" => (E::Int(1), Ty::I64),
            "false" => (E::Int(0), Ty::I64),
            "pid" => fact(Fact::Pid),
            "tid" => fact(Fact::Tid),
            "cpu" => fact(Fact::Cpu),
            "uid" => fact(Fact::Uid),
            "gid" => fact(Fact::Gid),
            "numaid" => fact(Fact::Numaid),
            "nsecs" => fact(Fact::Nsecs),
            "elapsed" => fact(Fact::Elapsed),
            "cpid" => {
                if !self.cx.opts.has_child {
                    self.cx.err(
                        codes::BUILTIN_CONTEXT,
                        span,
                        "cpid cannot be used without child command",
                    );
                    return bad;
                }
                fact(Fact::Cpid)
            }
            "comm" => {
                let slot = self.slot(16);
                (E::Comm(slot), Ty::Str(16))
            }
            "retval" => {
                if self.ctx != Ctx::Uretprobe {
                    self.cx.err(
                        codes::BUILTIN_CONTEXT,
                        span,
                        "The retval builtin can only be used with 'kretprobe' and 'uretprobe' and 'kfunc' probes",
                    );
                    return bad;
                }
                (E::Reg(reg::RAX), Ty::U64)
            }
            "func" | "probe" => {
                let (base, stride) = self.name_table(name == "func");
                (E::Table { base, stride }, Ty::Str(stride))
            }
            "ustack" => {
                let frames = self.cx.opts.ustack_frames;
                let mode = self.default_stack_mode();
                self.ustack(frames, mode, span)
            }
            "kstack" | "ctx" | "curtask" | "cgroup" => {
                self.cx.err_note(
                    codes::UNSUPPORTED,
                    span,
                    format!("the {name} builtin is not supported"),
                    "it describes the kernel; wprobe traces user space",
                );
                bad
            }
            "rand" => {
                // A 32-bit pseudo-random number: the monotonic clock mixed
                // (splitmix64's finalizer).
                let l = self.local();
                let mix = |e: E, sh: i64, mul: Option<i64>| {
                    let xored = E::Bin(
                        BinOp::BitXor,
                        false,
                        Box::new(e.clone()),
                        Box::new(E::Bin(BinOp::Shr, false, Box::new(e), Box::new(E::Int(sh)))),
                    );
                    match mul {
                        Some(m) => E::Bin(BinOp::Mul, false, Box::new(xored), Box::new(E::Int(m))),
                        None => xored,
                    }
                };
                let a = mix(E::Local(l), 33, Some(0xff51afd7ed558ccdu64 as i64));
                let set1 = S::SetLocal(l, a);
                let b = mix(E::Local(l), 33, Some(0xc4ceb9fe1a85ec53u64 as i64));
                let set2 = S::SetLocal(l, b);
                let c = mix(E::Local(l), 33, None);
                (
                    E::Seq(
                        vec![S::SetLocal(l, E::Fact(Fact::Nsecs)), set1, set2],
                        Box::new(E::Bin(
                            BinOp::BitAnd,
                            false,
                            Box::new(c),
                            Box::new(E::Int(0xffff_ffff)),
                        )),
                    ),
                    Ty::Int {
                        signed: false,
                        bytes: 4,
                    },
                )
            }
            // The hit's user id, named when it is printed (as bpftrace
            // resolves it in user space).
            "username" => (E::Fact(Fact::Uid), Ty::Username),
            "args" => self.args_record(span),
            _ => {
                if let Some(n) = name.strip_prefix("arg").and_then(|n| n.parse::<u32>().ok())
                    && n <= 9
                {
                    return self.arg(n, span);
                }
                if let Some(n) = name
                    .strip_prefix("sarg")
                    .and_then(|n| n.parse::<u32>().ok())
                    && n <= 9
                {
                    if self.ctx != Ctx::Uprobe {
                        self.cx.err(
                            codes::BUILTIN_CONTEXT,
                            span,
                            format!("The {name} builtin can only be used with 'kprobes' and 'uprobes' probes"),
                        );
                        return bad;
                    }
                    return self.stack_word(8 * (n + 1));
                }
                self.cx.err(
                    codes::UNDEFINED,
                    span,
                    format!("Unknown identifier: '{name}'"),
                );
                bad
            }
        }
    }

    pub(super) fn arg(&mut self, n: u32, span: Span) -> (E, Ty) {
        if self.ctx == Ctx::Usdt {
            return self.usdt_arg(n, span);
        }
        if self.ctx != Ctx::Uprobe {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                format!("The arg{n} builtin can only be used with 'kprobes', 'uprobes' and 'usdt' probes"),
            );
            return (E::Int(0), Ty::None);
        }
        if n < 6 {
            (E::Reg(ARG_REGS[n as usize]), Ty::U64)
        } else {
            // Stack arguments: above the return address at the entry.
            self.stack_word(8 * (n - 5))
        }
    }

    /// `argN` of a USDT probe: read by the `usdt_arg` import with the
    /// site's spec, typed by the first site's note (bpftrace's rule).
    pub(super) fn usdt_arg(&mut self, n: u32, span: Span) -> (E, Ty) {
        let mut ty = None;
        for c in self.concrete {
            if let crate::probes::Kind::Usdt { args, .. } = &c.kind {
                match args {
                    Err(e) => {
                        self.cx.err(
                            codes::UNSUPPORTED,
                            span,
                            format!("{}: cannot read its arguments: {e}", c.name),
                        );
                        return (E::Int(0), Ty::None);
                    }
                    Ok(a) if (n as usize) >= a.len() => {
                        self.cx.err(
                            codes::BUILTIN_CONTEXT,
                            span,
                            format!(
                                "{}: arg{n} does not exist: the probe has {} argument(s)",
                                c.name,
                                a.len()
                            ),
                        );
                        return (E::Int(0), Ty::None);
                    }
                    Ok(a) => {
                        ty.get_or_insert((a[n as usize].signed, a[n as usize].size));
                    }
                }
            }
        }
        let (signed, bytes) = ty.unwrap_or((false, 8));
        (E::UsdtArg(n), Ty::Int { signed, bytes })
    }

    /// The u64 at `rsp + off` of the hit thread.
    pub(super) fn stack_word(&mut self, off: u32) -> (E, Ty) {
        let slot = self.slot(8);
        (
            E::Load {
                addr: Box::new(E::Bin(
                    BinOp::Add,
                    false,
                    Box::new(E::Reg(regs::RSP)),
                    Box::new(E::Int(off as i64)),
                )),
                bytes: 8,
                signed: false,
                slot,
            },
            Ty::U64,
        )
    }

    pub(crate) fn ustack(
        &mut self,
        frames: u32,
        mode: Option<hostabi::layout::StackMode>,
        span: Span,
    ) -> (E, Ty) {
        let t = Ty::Ustack(frames, mode);
        if self.ctx == Ctx::Special {
            // BEGIN, END and intervals run in no traced thread: an empty
            // stack (bpftrace shows its own process's frames there).
            let _ = span;
            let slot = self.slot(t.size());
            let set = S::SetSlot {
                slot,
                e: E::Slot(slot),
                size: t.size(),
                src_size: 0,
            };
            return (E::Seq(vec![set], Box::new(E::Slot(slot))), t);
        }
        let slot = self.slot(t.size());
        let entry_fixup = self.ctx == Ctx::Uprobe;
        (
            E::Ustack {
                slot,
                frames,
                entry_fixup,
            },
            t,
        )
    }

    /// `args` alone: every parameter of the probed function (from DWARF),
    /// as a structure value (`{ .n = 0x7ffd…, .c = 120 }`).
    pub(super) fn args_record(&mut self, span: Span) -> (E, Ty) {
        let bad = (E::Int(0), Ty::None);
        if self.ctx != Ctx::Uprobe {
            self.cx.err(
                codes::BUILTIN_CONTEXT,
                span,
                "The args builtin can only be used with tracepoint/kfunc/uprobe probes (uprobes only, here: not uretprobes)",
            );
            return bad;
        }
        let Some(params) = self.concrete.first().and_then(|c| c.params.clone()) else {
            self.cx.err_note(
                codes::DWARF,
                span,
                "No debuginfo found for the probed function",
                "args needs DWARF for the function (build the binary with -g)",
            );
            return bad;
        };
        let mut parts = Vec::new();
        let mut fields = Vec::new();
        let mut off = 0;
        for (i, p) in params.iter().enumerate().take(6) {
            if p.by_ref {
                self.cx.err(
                    codes::UNSUPPORTED,
                    span,
                    format!(
                        "parameter {} is a C++ reference, which args as a whole does not hold \
                         (args.{} reads what it refers to)",
                        p.name, p.name
                    ),
                );
                return bad;
            }
            let (e, t) = match (&p.ctype, p.value) {
                (Some(crate::ctypes::CType::Ptr(c)), _) => {
                    (E::Reg(ARG_REGS[i]), Ty::Ptr(c.clone()))
                }
                (_, ParamValue::Int { signed, bytes }) => {
                    let t = Ty::Int { signed, bytes };
                    (coerce_int(E::Reg(ARG_REGS[i]), &Ty::U64, &t), t)
                }
                _ => {
                    self.cx.err(
                        codes::UNSUPPORTED,
                        span,
                        format!(
                            "parameter {} is not an integer or pointer, which args does not hold",
                            p.name
                        ),
                    );
                    return bad;
                }
            };
            let sz = t.size();
            fields.push((p.name.clone(), t.clone()));
            parts.push(Part { e, ty: t, off });
            off += sz;
        }
        let slot = self.slot(off.max(8));
        let c_size = fields
            .iter()
            .map(|(_, t)| crate::check::types::c_size(t).max(8) as u32)
            .sum();
        (
            E::Tuple { slot, parts },
            Ty::Record(std::rc::Rc::new(crate::ir::RecordTy {
                name: "struct uprobe_args".into(),
                fields,
                c_size,
            })),
        )
    }

    /// The stack mode of the run (`BPFTRACE_STACK_MODE`, `config`).
    pub(crate) fn default_stack_mode(&self) -> Option<hostabi::layout::StackMode> {
        match self.cx.opts.stack_mode.as_str() {
            "perf" => Some(hostabi::layout::StackMode::Perf),
            "raw" => Some(hostabi::layout::StackMode::Raw),
            _ => None,
        }
    }

    /// The `probe` or `func` table of this handler: strings of one stride.
    pub(super) fn name_table(&mut self, func: bool) -> (u32, u32) {
        if self.tables.is_none() {
            let mk = |cx: &mut crate::check::Cx<'_>, names: Vec<&str>| {
                let stride = names.iter().map(|n| n.len() as u32 + 1).max().unwrap_or(1);
                let stride8 = stride.div_ceil(8) * 8;
                let mut bytes = Vec::new();
                for n in &names {
                    let mut b = n.as_bytes().to_vec();
                    b.resize(stride8 as usize, 0);
                    bytes.extend(b);
                }
                // Stored as one string whose bytes are the table.
                let base = cx.string(&bytes);
                (base, stride8)
            };
            let probes: Vec<&str> = self.concrete.iter().map(|c| c.name.as_str()).collect();
            let funcs: Vec<&str> = self.concrete.iter().map(|c| c.func.as_str()).collect();
            let p = mk(self.cx, probes);
            let f = mk(self.cx, funcs);
            self.tables = Some((p, f));
        }
        let (p, f) = self.tables.unwrap_or_default();
        if func { f } else { p }
    }
}

/// Linux's errno names (bpftrace knows them as constants, for `strerror`).
pub(super) fn errno(name: &str) -> Option<i64> {
    const NAMES: &[&str] = &[
        "EPERM",
        "ENOENT",
        "ESRCH",
        "EINTR",
        "EIO",
        "ENXIO",
        "E2BIG",
        "ENOEXEC",
        "EBADF",
        "ECHILD",
        "EAGAIN",
        "ENOMEM",
        "EACCES",
        "EFAULT",
        "ENOTBLK",
        "EBUSY",
        "EEXIST",
        "EXDEV",
        "ENODEV",
        "ENOTDIR",
        "EISDIR",
        "EINVAL",
        "ENFILE",
        "EMFILE",
        "ENOTTY",
        "ETXTBSY",
        "EFBIG",
        "ENOSPC",
        "ESPIPE",
        "EROFS",
        "EMLINK",
        "EPIPE",
        "EDOM",
        "ERANGE",
        "EDEADLK",
        "ENAMETOOLONG",
        "ENOLCK",
        "ENOSYS",
        "ENOTEMPTY",
        "ELOOP",
    ];
    NAMES.iter().position(|n| *n == name).map(|i| i as i64 + 1)
}
