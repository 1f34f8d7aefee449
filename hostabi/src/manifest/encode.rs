//! Rendering a [`Manifest`] as its text.

use alloc::string::String;
use core::fmt::Write as _;

use super::*;

fn yes_no(b: bool) -> &'static str {
    if b { "yes" } else { "no" }
}

impl Manifest {
    /// Renders the manifest text.
    pub fn encode(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{MAGIC} {FORMAT_VERSION}");
        let _ = writeln!(s, "abi {}", self.abi);
        let _ = writeln!(s, "module {}", self.module);
        let _ = writeln!(s, "major {}", self.major);
        let _ = writeln!(s, "id {}", self.id);
        let _ = writeln!(s, "vars {}", self.vars);
        let _ = writeln!(s, "gvars {}", self.gvars);
        let _ = writeln!(s, "logmax {}", self.logmax);
        let _ = writeln!(s, "jmpmax {}", self.jmpmax);
        let _ = writeln!(s, "excpt_log {}", self.excpt_log);
        let _ = writeln!(s, "autostacktrace {}", yes_no(self.autostacktrace));
        let _ = writeln!(s, "fuel {}", self.fuel);
        if !self.groups.is_empty() {
            let _ = writeln!(s, "groups {}", self.groups.join(" "));
        }
        if !self.types.is_empty() {
            let _ = writeln!(s, "types {}", self.types.join(" "));
        }
        if !self.stops.is_empty() {
            let v: Vec<String> = self.stops.iter().map(u8::to_string).collect();
            let _ = writeln!(s, "stops {}", v.join(" "));
        }
        for m in &self.maps {
            let _ = write!(s, "map {} {} key=", m.name, m.kind.name());
            crate::layout::render_list_into(&m.key, &mut s);
            if let Some(v) = &m.value {
                s.push_str(" value=");
                v.render_into(&mut s);
            }
            let _ = write!(s, " maxkeys={}", m.max_keys);
            if let Some((a, b, c)) = m.lhist {
                let _ = write!(s, " lhist={a},{b},{c}");
            }
            if m.hist_bits != 0 {
                let _ = write!(s, " bits={}", m.hist_bits);
            }
            s.push('\n');
        }
        for p in &self.probes {
            let _ = writeln!(s, "probe {}", p.export);
            match p.trigger {
                Trigger::Hit => {}
                Trigger::Begin => {
                    let _ = writeln!(s, "  trigger begin");
                }
                Trigger::End => {
                    let _ = writeln!(s, "  trigger end");
                }
                Trigger::Interval { period_ns } => {
                    let _ = writeln!(s, "  trigger interval {period_ns}");
                }
            }
            if let Some(m) = &p.module {
                let _ = writeln!(s, "  module {m}");
            }
            let kind = match p.location.kind {
                LocationKind::Offset => "offset",
                LocationKind::Address => "address",
            };
            let _ = writeln!(s, "  location {kind} {}", p.location.render());
            if let Some(v) = p.value {
                let _ = writeln!(s, "  value 0x{v:x}");
            }
            if let Some(o) = p.opcode {
                let _ = writeln!(s, "  opcode 0x{o:02x}");
            }
            let _ = writeln!(s, "  watch {}", p.kind.as_str());
            let _ = writeln!(s, "  length {}", p.length);
            if let Some(g) = &p.group {
                let _ = writeln!(s, "  group {g}");
            }
            if let Some(t) = &p.r#type {
                let _ = writeln!(s, "  type {t}");
            }
            let _ = writeln!(s, "  minor {}", p.minor);
            let _ = writeln!(s, "  ignore {}", p.ignore);
            let _ = writeln!(s, "  maxhits {}", p.maxhits);
            let _ = writeln!(s, "  logonfault {}", yes_no(p.logonfault));
            let _ = writeln!(s, "  excpt_mask 0x{:04x}", p.excpt_mask);
            let _ = writeln!(s, "  heap {}", p.heap);
            if p.r#return {
                let _ = writeln!(s, "  return yes");
            }
            if p.maxactive != 0 {
                let _ = writeln!(s, "  maxactive {}", p.maxactive);
            }
            if !p.args.is_empty() {
                let words: Vec<String> = p.args.iter().map(|a| a.render()).collect();
                let _ = writeln!(s, "  args {}", words.join(" "));
            }
            if !p.usdt_args.is_empty() {
                let _ = writeln!(s, "  usdt_args {}", crate::usdt::render_args(&p.usdt_args));
            }
            if let Some(sem) = p.semaphore {
                let _ = writeln!(s, "  semaphore 0x{sem:x}");
            }
            if let Some(u) = &p.usdt_probe {
                let _ = writeln!(s, "  usdt {u}");
            }
        }
        s
    }
}
