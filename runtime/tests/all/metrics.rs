//! `wprobe run --metrics` on real processes: a real Prometheus (Debian's
//! 2.42, started here with a scratch configuration and storage on
//! 127.0.0.1) scrapes wprobe every second, and the values it stores — the
//! counter of a first half of known calls while the target waits, then
//! every counter and every histogram bucket once the target is gone —
//! equal what wprobe prints at exit, under every transport; `promtool check
//! metrics` parses (and lints) what every map kind gives, with keys that
//! need escapes; modules with maps and RPN programs; attaching with `-p`
//! until a signal, the process left intact and attachable again; the series
//! limit; refused options.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::case;
use crate::support::case::{Case, Need};
use crate::support::cli::{gcc, output_within, progs, scratch, wprobe};

/// The tests of this module.
pub(crate) const CASES: &[Case] = &[
    case!(prometheus_stores_the_values_printed_at_exit @ every_transport, Need::Prometheus),
    case!(
        promtool_parses_every_map_kind_and_keys_that_need_escapes,
        Need::Prometheus,
        Need::Ptrace
    ),
    case!(modules_with_maps_and_rpn_programs_are_served, Need::Ptrace),
    case!(attached_runs_serve_until_a_signal_and_leave_the_process_intact @ every_transport),
    case!(
        series_beyond_the_limit_are_left_out_and_counted,
        Need::Ptrace
    ),
    case!(followed_children_count_in_the_same_maps, Need::Ptrace),
    case!(bad_metrics_options_are_refused_before_tracing, Need::Ptrace),
];

fn target() -> PathBuf {
    gcc(
        "metrics_target",
        &progs().join("metrics_target.c"),
        &[
            "-O0",
            "-g",
            "-fno-omit-frame-pointer",
            "-no-pie",
            "-fcf-protection=none",
        ],
    )
}

/// A unique scratch directory.
fn scratch_dir(what: &str) -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let d = scratch().join(format!("{what}-{}", N.fetch_add(1, Ordering::SeqCst)));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// `wprobe run ARGS`, its output read as it comes.
struct Running {
    child: Child,
    out: Arc<Mutex<String>>,
    err: Arc<Mutex<String>>,
    readers: Vec<std::thread::JoinHandle<()>>,
}

impl Running {
    fn start(args: &[&str]) -> Running {
        let mut child = wprobe()
            .arg("run")
            .args(args)
            .env("WPROBE_PERF_RING_PAGES", "8192")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let out = Arc::new(Mutex::new(String::new()));
        let err = Arc::new(Mutex::new(String::new()));
        let mut readers = Vec::new();
        type Pipe = (Box<dyn Read + Send>, Arc<Mutex<String>>);
        let pipes: [Pipe; 2] = [
            (Box::new(child.stdout.take().unwrap()), out.clone()),
            (Box::new(child.stderr.take().unwrap()), err.clone()),
        ];
        for (mut pipe, buf) in pipes {
            readers.push(std::thread::spawn(move || {
                let mut b = [0u8; 4096];
                while let Ok(n) = pipe.read(&mut b) {
                    if n == 0 {
                        break;
                    }
                    buf.lock()
                        .unwrap()
                        .push_str(&String::from_utf8_lossy(&b[..n]));
                }
            }));
        }
        Running {
            child,
            out,
            err,
            readers,
        }
    }

    fn stderr(&self) -> String {
        self.err.lock().unwrap().clone()
    }

    fn stdout(&self) -> String {
        self.out.lock().unwrap().clone()
    }

    /// Standard output once it holds `pat` (its reader runs apart from
    /// standard error's: a line on one says nothing of the other yet).
    fn wait_stdout(&self, pat: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let out = self.stdout();
            if out.contains(pat) || Instant::now() > deadline {
                return out;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until standard error holds `pat`; the text after it on its line.
    fn wait_stderr(&mut self, pat: &str, secs: u64) -> String {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let err = self.stderr();
            if let Some(i) = err.find(pat) {
                let rest = &err[i + pat.len()..];
                return rest.lines().next().unwrap_or("").to_string();
            }
            if let Ok(Some(st)) = self.child.try_wait() {
                std::thread::sleep(Duration::from_millis(100));
                panic!(
                    "wprobe exited ({st}) before printing {pat:?}:\n{}\n{}",
                    self.stderr(),
                    self.stdout()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no {pat:?} after {secs} s: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The address `--metrics` bound.
    fn metrics_addr(&mut self) -> String {
        let rest = self.wait_stderr("wprobe: metrics at http://", 120);
        rest.strip_suffix("/metrics").unwrap().to_string()
    }

    fn signal(&self, sig: &str) {
        let st = Command::new("kill")
            .args([&format!("-{sig}"), &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
    }

    /// Waits for the exit: (stdout, stderr, exit code).
    fn finish(mut self, secs: u64) -> (String, String, Option<i32>) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        let st = loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                break st;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                panic!("wprobe still running after {secs} s: {}", self.stderr());
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        for r in self.readers.drain(..) {
            r.join().unwrap();
        }
        (self.stdout(), self.stderr(), st.code())
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A GET of `path` at `addr` (HTTP/1.0, the connection closed by the
/// server): status, content type, body.
fn http_get(addr: &str, path: &str, accept: Option<&str>) -> (u16, String, String) {
    let mut s = TcpStream::connect(addr).unwrap_or_else(|e| panic!("connecting {addr}: {e}"));
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("GET {path} HTTP/1.0\r\nHost: {addr}\r\n");
    if let Some(a) = accept {
        req += &format!("Accept: {a}\r\n");
    }
    req += "\r\n";
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let raw = String::from_utf8(raw).unwrap();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap();
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    let ctype = head
        .lines()
        .find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case("content-type")
                .then(|| v.trim().to_string())
        })
        .unwrap_or_default();
    (status, ctype, body.to_string())
}

/// The text-format scrape of `addr`.
fn scrape(addr: &str) -> String {
    let (status, ctype, body) = http_get(addr, "/metrics", None);
    assert_eq!(status, 200, "{body}");
    assert_eq!(ctype, "text/plain; version=0.0.4; charset=utf-8");
    body
}

/// The value of the sample line `name{labels}` (the whole text before the
/// value) in a text-format scrape.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let (s, v) = l.rsplit_once(' ')?;
        (s == series).then(|| v.parse().unwrap())
    })
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A Prometheus of the test's own: scratch configuration and storage,
/// 127.0.0.1 and a free port, scraping every second the targets of a file
/// the test writes.
struct Prometheus {
    child: Child,
    addr: String,
    dir: PathBuf,
}

impl Prometheus {
    fn start() -> Prometheus {
        let dir = scratch_dir("prometheus");
        let targets = dir.join("targets.json");
        std::fs::write(&targets, "[]").unwrap();
        std::fs::write(
            dir.join("prometheus.yml"),
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
                 scrape_configs:\n  - job_name: wprobe\n    file_sd_configs:\n      - files: [{}]\n        refresh_interval: 1s\n",
                targets.display()
            ),
        )
        .unwrap();
        // The port may be taken between the probe and the bind: retry.
        for _ in 0..5 {
            let addr = format!("127.0.0.1:{}", free_port());
            let log = std::fs::File::create(dir.join("log")).unwrap();
            let mut child = Command::new("prometheus")
                .arg(format!(
                    "--config.file={}",
                    dir.join("prometheus.yml").display()
                ))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address={addr}"))
                .arg("--log.level=warn")
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .expect("prometheus (scripts/setup.sh installs it)");
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = child.try_wait() {
                    break;
                }
                if TcpStream::connect(&addr).is_ok() && http_get(&addr, "/-/ready", None).0 == 200 {
                    return Prometheus { child, addr, dir };
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        panic!(
            "prometheus did not start: {}",
            std::fs::read_to_string(dir.join("log")).unwrap_or_default()
        );
    }

    /// Scrapes `addr` from now on (file service discovery: the file
    /// replaced whole).
    fn scrape(&self, addr: &str) {
        let tmp = self.dir.join("targets.tmp");
        std::fs::write(&tmp, format!("[{{\"targets\": [\"{addr}\"]}}]")).unwrap();
        std::fs::rename(&tmp, self.dir.join("targets.json")).unwrap();
    }

    /// An instant query: each series' labels and value.
    fn query(&self, q: &str) -> Vec<(BTreeMap<String, String>, f64)> {
        let enc: String = q
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                    (b as char).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        let (status, _, body) = http_get(&self.addr, &format!("/api/v1/query?query={enc}"), None);
        assert_eq!(status, 200, "{q}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{body}");
        v["data"]["result"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let labels = r["metric"]
                    .as_object()
                    .unwrap()
                    .iter()
                    .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_string()))
                    .collect();
                let val = r["value"][1].as_str().unwrap();
                let val = if val == "+Inf" {
                    f64::INFINITY
                } else {
                    val.parse().unwrap()
                };
                (labels, val)
            })
            .collect()
    }

    /// The single value of `q`, once it is `want` (waiting for scrapes).
    fn wait_value(&self, q: &str, want: f64, secs: u64) {
        let deadline = Instant::now() + Duration::from_secs(secs);
        loop {
            let r = self.query(q);
            if r.len() == 1 && r[0].1 == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{q} is {r:?}, not {want}, after {secs} s; prometheus: {}; targets: {}",
                std::fs::read_to_string(self.dir.join("log")).unwrap_or_default(),
                http_get(&self.addr, "/api/v1/targets", None).2
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                let _ = std::fs::remove_dir_all(&self.dir);
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A value of bpftrace's bucket labels (`4K` is 4096).
fn bucket_value(s: &str) -> i64 {
    let s = s.trim();
    let (num, mul) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1i64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        Some('T') => (&s[..s.len() - 1], 1 << 40),
        _ => (s, 1),
    };
    num.parse::<i64>().unwrap() * mul
}

/// The histogram `@name` as wprobe printed it at exit: each printed
/// bucket's `le` (its upper bound − 1; `None` for lhist's `[max, ...)`,
/// which only `+Inf` holds) and its count.
fn printed_histogram(out: &str, name: &str) -> Vec<(Option<i64>, u64)> {
    // `@name:` on a line of its own (bpftrace 0.23 prints no space after
    // the colon).
    let start = out
        .find(&format!("\n{name}:\n"))
        .unwrap_or_else(|| panic!("no {name} in {out}"));
    let mut v = Vec::new();
    for l in out[start..].lines().skip(2) {
        let Some((head, rest)) = l.split_once('|').map(|(a, b)| (a.trim_end(), b)) else {
            break;
        };
        let _ = rest;
        let (range, count) = head.rsplit_once(' ').unwrap();
        let count: u64 = count.trim().parse().unwrap();
        let range = range.trim();
        let le = if let Some(x) = range.strip_prefix("(..., ") {
            Some(bucket_value(x.strip_suffix(')').unwrap()) - 1)
        } else if range.ends_with(", ...)") {
            None
        } else if let Some(x) = range.strip_prefix('[').and_then(|x| x.strip_suffix(']')) {
            Some(bucket_value(x))
        } else {
            let (_, hi) = range
                .strip_prefix('[')
                .and_then(|x| x.strip_suffix(')'))
                .and_then(|x| x.split_once(", "))
                .unwrap_or_else(|| panic!("bucket {range:?}"));
            Some(bucket_value(hi) - 1)
        };
        v.push((le, count));
    }
    assert!(!v.is_empty(), "{name} has no bucket in {out}");
    v
}

/// The cumulative buckets Prometheus must hold for a printed histogram:
/// `le` → count, `+Inf` last.
fn cumulative(printed: &[(Option<i64>, u64)]) -> Vec<(f64, f64)> {
    let mut v = Vec::new();
    let mut acc = 0;
    for (le, c) in printed {
        acc += c;
        if let Some(le) = le {
            v.push((*le as f64, acc as f64));
        }
    }
    v.push((f64::INFINITY, acc as f64));
    v
}

/// The buckets of `family` in Prometheus, sorted by `le`.
fn stored_buckets(p: &Prometheus, family: &str) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = p
        .query(&format!("{family}_bucket"))
        .into_iter()
        .map(|(l, v)| {
            let le = &l["le"];
            let le = if le == "+Inf" {
                f64::INFINITY
            } else {
                le.parse().unwrap()
            };
            (le, v)
        })
        .collect();
    v.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap());
    v
}

/// The scalar `@name: V` lines of an exit output, by key (`""` for none).
fn printed_scalars(out: &str, name: &str) -> BTreeMap<String, f64> {
    out.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (key, v) = rest.split_once(": ")?;
            let key = key
                .strip_prefix('[')
                .and_then(|k| k.strip_suffix(']'))
                .unwrap_or(key);
            Some((key.to_string(), v.trim().parse().ok()?))
        })
        .collect()
}

/// N known calls (sizes cycling through 8 values): Prometheus stores the
/// first half exactly while the target waits, then, once it is gone (the
/// run lingering), every counter, every bucket of a `hist` and an `lhist`,
/// `_count` and the exact `_sum` equal what wprobe printed at exit.
fn prometheus_stores_the_values_printed_at_exit(transport: &str) {
    const N: u64 = 2000;
    const SIZES: [u64; 8] = [0, 1, 3, 8, 100, 1000, 4096, 70000];
    let prom = Prometheus::start();
    let t = target();
    let go = scratch_dir("go").join("go");
    let prog = format!(
        "uprobe:{}:alloc {{ @calls = count(); @bytes = hist(arg0); @sizes[arg0] = count(); \
         @lin = lhist(arg0, 0, 1000, 100); @sum_bytes_total = sum(arg0); }}",
        t.display()
    );
    let cmd = format!("{} {N} {}", t.display(), go.display());
    let mut w = Running::start(&[
        "--transport",
        transport,
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "120s",
        "-e",
        &prog,
        "-c",
        &cmd,
    ]);
    let addr = w.metrics_addr();
    prom.scrape(&addr);
    // While the target waits after the first half: scraped live, exact.
    prom.wait_value("wprobe_calls_total", (N / 2) as f64, 90);
    prom.wait_value("wprobe_probe_hits_total", (N / 2) as f64, 30);
    std::fs::write(&go, "").unwrap();
    w.wait_stderr("wprobe: the run is over", 120);
    let out = w.wait_stdout("@calls:", 30);
    prom.wait_value("wprobe_calls_total", N as f64, 60);

    let calls = printed_scalars(&out, "@calls");
    assert_eq!(calls[""], N as f64, "{out}");
    let sum: u64 = SIZES.iter().sum::<u64>() * (N / 8);
    assert_eq!(printed_scalars(&out, "@sum_bytes_total")[""], sum as f64);
    // `@sum_bytes_total` is a counter: its own `_total` is not doubled.
    prom.wait_value("wprobe_sum_bytes_total", sum as f64, 10);
    prom.wait_value("wprobe_probe_hits_total", N as f64, 10);
    prom.wait_value("wprobe_probe_runs_total", N as f64, 10);

    let sizes = printed_scalars(&out, "@sizes");
    assert_eq!(sizes.len(), 8, "{out}");
    let stored: BTreeMap<String, f64> = prom
        .query("wprobe_sizes_total")
        .into_iter()
        .map(|(l, v)| (l["key"].clone(), v))
        .collect();
    assert_eq!(stored, sizes);

    // Prometheus negotiated OpenMetrics: its `le` values are floats there
    // (`1023.0`; the text format writes `1023`), kept as written by 2.42.
    let le: Vec<String> = prom
        .query("wprobe_bytes_bucket")
        .into_iter()
        .map(|(l, _)| l["le"].clone())
        .collect();
    assert!(le.iter().any(|l| l == "1023.0"), "{le:?}");
    for (name, family, printed_sum) in
        [("@bytes", "wprobe_bytes", sum), ("@lin", "wprobe_lin", sum)]
    {
        let printed = printed_histogram(&out, name);
        assert_eq!(
            stored_buckets(&prom, family),
            cumulative(&printed),
            "{name}: {out}"
        );
        prom.wait_value(&format!("{family}_count"), N as f64, 10);
        prom.wait_value(&format!("{family}_sum"), printed_sum as f64, 10);
    }
    // A signal ends the linger; wprobe exits with the command's status.
    w.signal("TERM");
    let (_, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
}

/// Every map kind, keys of strings that need escapes, tuples, stacks and
/// symbols: `promtool check metrics` parses and lints the text format
/// without a complaint, and the escapes are the exact ones; the OpenMetrics
/// answer (for a scraper that asks) ends with `# EOF` and types counters by
/// their family name.
fn promtool_parses_every_map_kind_and_keys_that_need_escapes() {
    let t = target();
    let b = t.display();
    let prog = format!(
        "uprobe:{b}:named {{ @by_name[str(arg0)] = count(); @pair[str(arg0), arg1] = sum(arg1 + 10); \
         @lo = min(arg1); @hi = max(arg1); @mean = avg(arg1); @st[arg1 > 0] = stats(arg1); \
         @histo = hist(arg1); @linear = lhist(arg1 + 3, 0, 10, 2); @last = arg1; \
         @text = str(arg0); @stack[ustack] = count(); @where[usym(reg(\"ip\"))] = count(); \
         @tuple[(arg1, str(arg0))] = count(); }}"
    );
    let cmd = format!("{b} names");
    let mut w = Running::start(&[
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "120s",
        "-e",
        &prog,
        "-c",
        &cmd,
    ]);
    let addr = w.metrics_addr();
    w.wait_stderr("wprobe: the run is over", 120);
    let text = scrape(&addr);
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    check
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let o = output_within_child(check);
    assert!(
        o.status.success() && o.stdout.is_empty() && o.stderr.is_empty(),
        "promtool: {:?}\n{}{}\n{text}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    for (series, want) in [
        ("wprobe_by_name_total{key=\"plain\"}", 2.0),
        ("wprobe_by_name_total{key=\"quote\\\"d\"}", 1.0),
        ("wprobe_by_name_total{key=\"back\\\\\\\\slash\"}", 1.0),
        ("wprobe_by_name_total{key=\"new\\nline\"}", 1.0),
        ("wprobe_by_name_total{key=\"bad\\\\xff\\\\xfe\"}", 1.0),
        ("wprobe_by_name_total{key=\"tab\there\"}", 1.0),
        // arg1 is -3..3; sums of arg1 + 10.
        ("wprobe_pair_total{key0=\"plain\",key1=\"-3\"}", 7.0),
        ("wprobe_pair_total{key0=\"plain\",key1=\"3\"}", 13.0),
        ("wprobe_hi", 3.0),
        ("wprobe_mean", 0.0),
        ("wprobe_last", 3.0),
        // arg1 is a u64: -3..-1 are above 0 (as bpftrace has it).
        ("wprobe_st{key=\"1\",stat=\"count\"}", 6.0),
        ("wprobe_st{key=\"1\",stat=\"total\"}", 0.0),
        ("wprobe_st{key=\"0\",stat=\"count\"}", 1.0),
        ("wprobe_st{key=\"0\",stat=\"average\"}", 0.0),
        // hist of -3..3 (samples are signed): three negatives, 0, 1, then
        // [2, 4) twice.
        ("wprobe_histo_bucket{le=\"-1\"}", 3.0),
        ("wprobe_histo_bucket{le=\"0\"}", 4.0),
        ("wprobe_histo_bucket{le=\"1\"}", 5.0),
        ("wprobe_histo_bucket{le=\"3\"}", 7.0),
        ("wprobe_histo_bucket{le=\"+Inf\"}", 7.0),
        ("wprobe_histo_sum", 0.0),
        ("wprobe_histo_count", 7.0),
        // lhist of 0..6 by 2.
        ("wprobe_linear_bucket{le=\"1\"}", 2.0),
        ("wprobe_linear_bucket{le=\"3\"}", 4.0),
        ("wprobe_linear_bucket{le=\"5\"}", 6.0),
        ("wprobe_linear_bucket{le=\"7\"}", 7.0),
        ("wprobe_linear_bucket{le=\"+Inf\"}", 7.0),
        ("wprobe_linear_sum", 21.0),
        // A tuple key is a key of several fields (`@m[(a, b)]` is
        // `@m[a, b]`, as bpftrace prints it): a label each, integers signed
        // as at exit.
        ("wprobe_tuple_total{key0=\"-3\",key1=\"plain\"}", 1.0),
        ("wprobe_tuple_total{key0=\"3\",key1=\"plain\"}", 1.0),
        (
            "wprobe_map_entries_skipped{map=\"@text\",program=\"-e\",reason=\"not a number\"}",
            1.0,
        ),
        ("wprobe_probe_hits_total{probe=\"-e:named\"}", 7.0),
        ("wprobe_series_dropped_total", 0.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series} in\n{text}");
    }
    // min() of a u64 is as printed: unsigned, exact.
    assert!(
        text.contains("\nwprobe_lo 18446744073709551613\n"),
        "{text}"
    );
    // Stacks and symbols are resolved: `named`'s caller is main.
    let stack = text
        .lines()
        .find(|l| l.starts_with("wprobe_stack_total{key=\""))
        .unwrap_or_else(|| panic!("no stack key in {text}"));
    assert!(stack.contains("main+"), "{stack}");
    assert_eq!(
        sample(&text, "wprobe_where_total{key=\"named\"}"),
        Some(7.0),
        "{text}"
    );

    let (status, ctype, om) = http_get(
        &addr,
        "/metrics",
        Some("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"),
    );
    assert_eq!(status, 200);
    assert_eq!(
        ctype,
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    assert!(om.ends_with("# EOF\n"), "{om}");
    assert!(om.contains("# TYPE wprobe_by_name counter\n"), "{om}");
    assert!(
        text.contains("# TYPE wprobe_by_name_total counter\n"),
        "{text}"
    );
    // Other paths and methods.
    assert_eq!(http_get(&addr, "/nothing", None).0, 404);
    assert_eq!(http_get(&addr, "/", None).0, 200);
    w.signal("INT");
    let (_, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
}

fn output_within_child(c: Child) -> std::process::Output {
    crate::support::cli::output_within_child(c, 60)
}

/// A C module declaring maps in its manifest (the guide's `map_args`), and
/// an RPN program (no maps: its probe counters), are served as one-liners are.
fn modules_with_maps_and_rpn_programs_are_served() {
    let dir = scratch_dir("c-guest");
    let wasm = dir.join("map_args.wasm");
    let c = crate::support::cli::repo().join("guests/c");
    let st = Command::new("clang")
        .args([
            "--target=wasm32",
            "-O2",
            "-nostdlib",
            "-mbulk-memory",
            "-fuse-ld=lld",
            "-Wl,--no-entry",
            "-I",
        ])
        .arg(&c)
        .arg("-o")
        .arg(&wasm)
        .arg(c.join("examples/map_args.c"))
        .status()
        .expect("clang (scripts/setup.sh installs it)");
    assert!(st.success());
    let pt = crate::support::cli::probe_target();
    let mut w = Running::start(&[
        wasm.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "120s",
        "--",
        pt.to_str().unwrap(),
        "9",
    ]);
    let addr = w.metrics_addr();
    w.wait_stderr("wprobe: the run is over", 120);
    let text = scrape(&addr);
    // As the exit output says: @calls[0]: 5, @calls[1]: 4, and target_fn's
    // first arguments 0..8 in @sizes.
    for (series, want) in [
        ("wprobe_calls_total{key=\"0\"}", 5.0),
        ("wprobe_calls_total{key=\"1\"}", 4.0),
        ("wprobe_sizes_bucket{le=\"0\"}", 1.0),
        ("wprobe_sizes_bucket{le=\"7\"}", 8.0),
        ("wprobe_sizes_bucket{le=\"15\"}", 9.0),
        ("wprobe_sizes_count", 9.0),
        ("wprobe_sizes_sum", 36.0),
        ("wprobe_probe_hits_total{probe=\"map_args:target_fn\"}", 9.0),
    ] {
        assert_eq!(sample(&text, series), Some(want), "{series} in\n{text}");
    }
    w.signal("TERM");
    let (out, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("@calls[0]: 5\n@calls[1]: 4") || out.contains("@calls[1]: 4\n@calls[0]: 5"),
        "{out}"
    );

    let rpn = crate::support::cli::examples().join("01_log_args.rpn");
    let mut w = Running::start(&[
        rpn.to_str().unwrap(),
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "120s",
        "--",
        pt.to_str().unwrap(),
        "9",
    ]);
    let addr = w.metrics_addr();
    w.wait_stderr("wprobe: the run is over", 120);
    let text = scrape(&addr);
    let hits = text
        .lines()
        .find(|l| l.starts_with("wprobe_probe_hits_total{probe=\"01_log_args:"))
        .unwrap_or_else(|| panic!("{text}"));
    let runs = hits.replace("hits", "runs");
    assert!(hits.ends_with(" 9"), "{hits}");
    assert!(text.contains(&runs), "{text}");
    w.signal("TERM");
    let (_, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
}

/// The state letter of `pid` (`/proc/PID/stat`) and its tracer.
fn proc_state(pid: u32) -> (char, u32) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let state = stat.rsplit_once(") ").unwrap().1.chars().next().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let tracer = status
        .lines()
        .find_map(|l| l.strip_prefix("TracerPid:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (state, tracer)
}

/// A process the test started, killed if the test fails first.
struct Victim(Child);

impl Drop for Victim {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

/// `-p PID --metrics`: served until SIGTERM (a linger is cut short by
/// it), the process runs on untraced and unharmed, a second wprobe attaches
/// and counts again; when the process exits, the run ends and the final
/// values are served for the linger.
fn attached_runs_serve_until_a_signal_and_leave_the_process_intact(transport: &str) {
    let t = target();
    let stop = scratch_dir("until").join("stop");
    let mut victim = Victim(
        Command::new(&t)
            .arg("until")
            .arg(&stop)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let pid = victim.0.id();
    let prog = format!("uprobe:{}:alloc {{ @n = count(); }}", t.display());
    let pids = pid.to_string();
    for round in 0..2 {
        let mut w = Running::start(&[
            "--transport",
            transport,
            "--metrics",
            "127.0.0.1:0",
            "--metrics-linger",
            "120s",
            "-e",
            &prog,
            "-p",
            &pids,
        ]);
        let addr = w.metrics_addr();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let text = scrape(&addr);
            if sample(&text, "wprobe_n_total").is_some_and(|n| n >= 5.0) {
                break;
            }
            assert!(Instant::now() < deadline, "round {round}: {text}");
            std::thread::sleep(Duration::from_millis(100));
        }
        w.signal("TERM");
        let (out, err, code) = w.finish(30);
        assert_eq!(code, Some(0), "round {round}: {err}");
        assert!(out.contains("@n: "), "{out}");
        assert!(victim.0.try_wait().unwrap().is_none(), "the process died");
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let (state, tracer) = proc_state(pid);
            if tracer == 0 && matches!(state, 'S' | 'R') {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "process {pid} left in state {state}, tracer {tracer}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    // Attached when the process exits: the run ends, the final count is
    // served during the linger, wprobe exits after it.
    let mut w = Running::start(&[
        "--transport",
        transport,
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "3s",
        "-e",
        &prog,
        "-p",
        &pids,
    ]);
    let addr = w.metrics_addr();
    let deadline = Instant::now() + Duration::from_secs(60);
    while sample(&scrape(&addr), "wprobe_n_total").is_none_or(|n| n < 3.0) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(100));
    }
    std::fs::write(&stop, "").unwrap();
    assert!(victim.0.wait().unwrap().success());
    w.wait_stderr("wprobe: the run is over", 60);
    let text = scrape(&addr);
    let (out, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
    let printed = printed_scalars(&out, "@n")[""];
    assert_eq!(
        sample(&text, "wprobe_n_total"),
        Some(printed),
        "{out}\n{text}"
    );
}

/// `-f`: the calls of a process and of the 3 children it forks are in the
/// same maps, served as printed.
fn followed_children_count_in_the_same_maps() {
    let t = target();
    let prog = format!("uprobe:{}:alloc {{ @calls = count(); }}", t.display());
    let cmd = format!("{} forks 500", t.display());
    let mut w = Running::start(&[
        "--follow",
        "--metrics",
        "127.0.0.1:0",
        "--metrics-linger",
        "120s",
        "-e",
        &prog,
        "-c",
        &cmd,
    ]);
    let addr = w.metrics_addr();
    w.wait_stderr("wprobe: the run is over", 120);
    let text = scrape(&addr);
    assert_eq!(sample(&text, "wprobe_calls_total"), Some(2000.0), "{text}");
    w.signal("TERM");
    let (out, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(printed_scalars(&out, "@calls")[""], 2000.0, "{out}");
}

/// With `--metrics-max-series 5`, 5 of 8 keys (the first inserted) are
/// served; the other keys' series and the probe counters are counted in
/// `wprobe_series_dropped_total`, at each scrape.
fn series_beyond_the_limit_are_left_out_and_counted() {
    let t = target();
    let prog = format!("uprobe:{}:alloc {{ @k[arg0] = count(); }}", t.display());
    let cmd = format!("{} 16", t.display());
    let mut w = Running::start(&[
        "--metrics",
        "127.0.0.1:0",
        "--metrics-max-series",
        "5",
        "--metrics-linger",
        "120s",
        "-e",
        &prog,
        "-c",
        &cmd,
    ]);
    let addr = w.metrics_addr();
    w.wait_stderr("wprobe: the run is over", 120);
    let first = scrape(&addr);
    let keys: Vec<&str> = first
        .lines()
        .filter(|l| l.starts_with("wprobe_k_total{"))
        .collect();
    assert_eq!(
        keys,
        [
            "wprobe_k_total{key=\"0\"} 2",
            "wprobe_k_total{key=\"1\"} 2",
            "wprobe_k_total{key=\"3\"} 2",
            "wprobe_k_total{key=\"8\"} 2",
            "wprobe_k_total{key=\"100\"} 2",
        ],
        "{first}"
    );
    // 3 keys and 7 probe counters per scrape.
    assert_eq!(sample(&first, "wprobe_series_dropped_total"), Some(10.0));
    let second = scrape(&addr);
    assert_eq!(sample(&second, "wprobe_series_dropped_total"), Some(20.0));
    w.signal("TERM");
    let (_, err, code) = w.finish(30);
    assert_eq!(code, Some(0), "{err}");
}

/// Errors that stop the run before anything is traced: each says what
/// is wrong.
fn bad_metrics_options_are_refused_before_tracing() {
    let t = target();
    let prog = format!("uprobe:{}:alloc {{ @k = count(); }}", t.display());
    let cmd = format!("{} 4", t.display());
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let taken_addr = taken.local_addr().unwrap().to_string();
    for (args, want) in [
        (
            vec!["--metrics", "nowhere"],
            "--metrics nowhere: not an address",
        ),
        (vec!["--metrics", &taken_addr], "cannot listen there"),
        (
            vec!["--metrics", "127.0.0.1:0", "--metrics-prefix", "1x"],
            "--metrics-prefix \"1x\"",
        ),
        (
            vec!["--metrics-linger", "5s"],
            "--metrics-linger needs --metrics ADDR",
        ),
        (
            vec!["--metrics", "127.0.0.1:0", "--metrics-linger", "5h"],
            "5h: a duration",
        ),
        (
            vec!["--metrics", "127.0.0.1:0", "--metrics-max-series", "0"],
            "--metrics-max-series must be at least 1",
        ),
    ] {
        let mut c = wprobe();
        c.arg("run").args(&args).args(["-e", &prog, "-c", &cmd]);
        let o = output_within(c, 60);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_ne!(o.status.code(), Some(0), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert!(!err.contains("Attaching"), "{args:?}: {err}");
        assert!(o.stdout.is_empty(), "{args:?}: traced anyway");
    }
    drop(taken);
}
