//! The outputs of `wprobe trace`, each fed the same well-nested steps of
//! the call trees ([`super::tree::Step`]): uftrace's duration view (the
//! default), tracef's call tree (`-T`), the per-function report
//! (`--report`), Chrome trace events (`--chrome`) and a flame graph
//! (`--flame`). Names, lines and addresses come from the function table
//! built at start.

pub mod calltree;
pub mod chrome;
pub mod duration;
pub mod flame;
pub mod report;

use std::fmt::Write as _;
use std::rc::Rc;

use super::funcs::Func;
use super::tree::{Sink, Step};
use crate::out::format::push_decimal;

/// The traced functions, by [`super::tree::FuncId`].
pub type Table = Rc<Vec<Func>>;

/// One output.
pub trait View {
    /// A step of a thread's tree.
    fn step(&mut self, s: &Step);

    /// Something happened to a process (a line of the tracef view).
    fn process(&mut self, _pid: i32, _text: &str) {}

    /// The session's tick: lines held back go to their destination.
    fn tick(&mut self) {}

    /// The trace ended: write what is written at the end; an error says
    /// what could not be written.
    fn finish(&mut self) -> Result<(), String>;
}

/// Every output of the run.
#[derive(Default)]
pub struct Views {
    /// The outputs.
    pub list: Vec<Box<dyn View>>,
}

impl Sink for Views {
    fn step(&mut self, s: &Step) {
        for v in &mut self.list {
            v.step(s);
        }
    }
}

impl Views {
    /// A process event, for the views that show them.
    pub fn process(&mut self, pid: i32, text: &str) {
        for v in &mut self.list {
            v.process(pid, text);
        }
    }

    /// The session's tick, for every view.
    pub fn tick(&mut self) {
        for v in &mut self.list {
            v.tick();
        }
    }

    /// Finishes every view; the errors, one per view that failed.
    pub fn finish(&mut self) -> Vec<String> {
        self.list
            .iter_mut()
            .filter_map(|v| v.finish().err())
            .collect()
    }
}

/// Appends a duration as uftrace prints it: `%3u.%03u` and a unit
/// (`us`, `ms`, ` s`, ` m`, ` h`), ten characters; blanks for 0.
pub fn time_unit(out: &mut String, ns: u64) {
    if ns == 0 {
        out.push_str("          ");
        return;
    }
    const UNITS: [&str; 5] = ["us", "ms", " s", " m", " h"];
    const LIMIT: [u64; 6] = [1000, 1000, 1000, 60, 24, u64::MAX];
    let mut delta = ns;
    let mut small = 0;
    let mut idx = 0;
    while idx < UNITS.len() {
        small = delta % LIMIT[idx];
        delta /= LIMIT[idx];
        if delta < LIMIT[idx + 1] {
            break;
        }
        idx += 1;
    }
    let idx = idx.min(UNITS.len() - 1);
    if delta > 999 {
        delta = 999;
        small = 999;
    }
    // `{delta:3}.{small:03} {unit}` without the formatting machinery (a
    // line per call): both are below 1,000.
    push_decimal(out, delta, 3, b' ');
    out.push('.');
    push_decimal(out, small, 3, b'0');
    out.push(' ');
    out.push_str(UNITS[idx]);
}

/// Appends `v` in hexadecimal with a `0x` prefix and at least `min_digits`
/// digits, zero-padded (`{v:#x}` is `min_digits` 1, `{v:#010x}` 8).
pub fn push_hex(out: &mut String, v: u64, min_digits: usize) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let mut digits = [0u8; 16];
    let mut at = digits.len();
    let mut rest = v;
    while rest != 0 || digits.len() - at < min_digits.clamp(1, 16) {
        at -= 1;
        digits[at] = HEX[(rest & 0xf) as usize];
        rest >>= 4;
    }
    out.push_str("0x");
    // One checked copy: cheaper than a push per digit for an address.
    out.push_str(std::str::from_utf8(&digits[at..]).expect("invariant: ASCII digits"));
}

/// Appends `n` spaces (a call's indentation).
pub fn push_spaces(out: &mut String, n: usize) {
    const SPACES: &str = "                                                                ";
    let mut left = n;
    while left > 0 {
        let k = left.min(SPACES.len());
        out.push_str(&SPACES[..k]);
        left -= k;
    }
}

/// A thread's column, formatted once and reused while the lines are of
/// the same thread (most lines are: a line per call).
#[derive(Debug, Default)]
pub struct TidColumn {
    tid: Option<i32>,
    text: String,
}

impl TidColumn {
    /// The column of `tid`, made by `make` when it is not the last one's.
    pub fn get(&mut self, tid: i32, make: impl FnOnce(&mut String, i32)) -> &str {
        if self.tid != Some(tid) {
            self.text.clear();
            make(&mut self.text, tid);
            self.tid = Some(tid);
        }
        &self.text
    }
}

/// Wall-clock prefixes (`-t`: `HH:MM:SS`, `-u`: `HH:MM:SS.uuuuuu`), in
/// local time.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Clock {
    /// No time.
    #[default]
    None,
    /// Seconds.
    Seconds,
    /// Microseconds.
    Micros,
}

/// Formats wall-clock times in the local time zone (its offset read once).
#[derive(Clone, Copy, Debug, Default)]
pub struct TimeFmt {
    /// Which form.
    pub clock: Clock,
    /// Seconds east of UTC.
    pub offset_s: i64,
}

impl TimeFmt {
    /// The form `clock`, with the local zone's current offset.
    pub fn local(clock: Clock) -> TimeFmt {
        let z = crate::sys::time::strftime_now(c"%z");
        let z = String::from_utf8_lossy(&z);
        let offset_s = parse_zone(&z).unwrap_or(0);
        TimeFmt { clock, offset_s }
    }

    /// Appends the time of `ns` (since the epoch) and a space, if any.
    pub fn push(&self, out: &mut String, ns: u64) {
        if self.clock == Clock::None {
            return;
        }
        let local = (ns / 1_000_000_000) as i64 + self.offset_s;
        let day = local.rem_euclid(86_400);
        let _ = write!(
            out,
            "{:02}:{:02}:{:02}",
            day / 3600,
            day / 60 % 60,
            day % 60
        );
        if self.clock == Clock::Micros {
            let _ = write!(out, ".{:06}", ns % 1_000_000_000 / 1000);
        }
        out.push(' ');
    }
}

/// `+0100` → 3600.
fn parse_zone(z: &str) -> Option<i64> {
    let (sign, rest) = match z.as_bytes().first()? {
        b'+' => (1, &z[1..]),
        b'-' => (-1, &z[1..]),
        _ => return None,
    };
    if rest.len() != 4 || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let h: i64 = rest[..2].parse().ok()?;
    let m: i64 = rest[2..].parse().ok()?;
    Some(sign * (h * 3600 + m * 60))
}

/// Appends `(a, b, …)`: words as `wprobe run` prints them; nothing when
/// there are none and the name (demangled C++, `--demangle=full`) already
/// ends with its parameter list and its qualifiers (`f(int) const`), or
/// with them and `@plt` (`operator new(unsigned long)@plt`).
pub fn push_args(out: &mut String, args: &[u64]) {
    const QUALIFIERS: [&str; 5] = [" const", " volatile", " &", " &&", "@plt"];
    let mut end = out.as_str();
    while let Some(q) = QUALIFIERS.iter().find(|q| end.ends_with(*q)) {
        end = &end[..end.len() - q.len()];
    }
    if args.is_empty() && end.ends_with(')') {
        return;
    }
    out.push('(');
    for (i, a) in args.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        crate::out::format::word(out, *a);
    }
    out.push(')');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_as_uftrace_prints_them() {
        let cases = [
            (0, "          "),
            (150, "  0.150 us"),
            (42_343, " 42.343 us"),
            (250_343, "250.343 us"),
            (1_250_343, "  1.250 ms"),
            (12_000_000_000, " 12.000  s"),
            (125_000_000_000, "  2.005  m"),
        ];
        for (ns, want) in cases {
            let mut s = String::new();
            time_unit(&mut s, ns);
            assert_eq!(s, want, "{ns}");
        }
    }

    #[test]
    fn numbers_print_as_the_formatting_machinery_prints_them() {
        for v in [0, 1, 9, 10, 99, 100, 999, 1000, 123_456, u64::MAX] {
            let mut s = String::new();
            push_decimal(&mut s, v, 3, b' ');
            assert_eq!(s, format!("{v:3}"));
            s.clear();
            push_decimal(&mut s, v, 3, b'0');
            assert_eq!(s, format!("{v:03}"));
            s.clear();
            push_hex(&mut s, v, 1);
            assert_eq!(s, format!("{v:#x}"));
            s.clear();
            push_hex(&mut s, v, 8);
            assert_eq!(s, format!("{v:#010x}"));
        }
    }

    #[test]
    fn local_clock_forms() {
        let t = TimeFmt {
            clock: Clock::Micros,
            offset_s: 3600,
        };
        let mut s = String::new();
        t.push(&mut s, 45_296_000_123_456);
        // 45296.000123456 s since the epoch: 12:34:56 UTC, 13:34:56 here.
        assert_eq!(s, "13:34:56.000123 ");
        assert_eq!(parse_zone("-0230"), Some(-9000));
        assert_eq!(parse_zone("UTC"), None);
    }
}
