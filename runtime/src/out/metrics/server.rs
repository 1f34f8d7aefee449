//! The HTTP side: a `tiny_http` server on its own thread answering
//! `GET /metrics` (and `HEAD`) with the latest snapshot's families in the
//! format the scraper accepts; `/` points to `/metrics`, anything else is
//! 404, other methods 405. The session's thread never waits for it: a
//! scrape asks the [`Feed`] for a snapshot and renders it here.

use std::net::{SocketAddr, TcpListener, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::expose::{self, Format};
use super::families::{self, Options};
use super::snapshot::Feed;

/// How long a scrape waits for the session's next snapshot before it is
/// served the latest one (the session's tick is [`super::TICK`]).
const WAIT: Duration = Duration::from_secs(2);

/// A running server.
pub struct Server {
    addr: SocketAddr,
    http: Arc<tiny_http::Server>,
    stop: Arc<AtomicBool>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

/// `ADDR` as given to `--metrics`: `HOST:PORT`, `[V6]:PORT`, or `:PORT`
/// (every IPv4 interface).
pub fn resolve(addr: &str) -> Result<Vec<SocketAddr>, String> {
    let a = addr.trim();
    let full = match a.strip_prefix(':') {
        Some(port) if !port.contains(':') => format!("0.0.0.0:{port}"),
        _ => a.to_string(),
    };
    let v: Vec<SocketAddr> = full
        .to_socket_addrs()
        .map_err(|e| format!("--metrics {addr}: not an address such as 127.0.0.1:9100 ({e})"))?
        .collect();
    if v.is_empty() {
        return Err(format!("--metrics {addr}: names no address"));
    }
    Ok(v)
}

impl Server {
    /// Binds `addr` and starts serving the snapshots of `feed`.
    pub fn start(addr: &str, feed: Arc<Feed>, opts: Options) -> Result<Server, String> {
        let addrs = resolve(addr)?;
        let listener = TcpListener::bind(&addrs[..])
            .map_err(|e| format!("--metrics {addr}: cannot listen there: {e}"))?;
        let bound = listener
            .local_addr()
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        let http = tiny_http::Server::from_listener(listener, None)
            .map_err(|e| format!("--metrics {addr}: {e}"))?;
        let http = Arc::new(http);
        let stop = Arc::new(AtomicBool::new(false));
        let (h, s) = (http.clone(), stop.clone());
        let thread = std::thread::Builder::new()
            .name("wprobe-metrics".into())
            .spawn(move || serve(&h, &s, &feed, &opts))
            .map_err(|e| format!("--metrics: starting the server thread: {e}"))?;
        Ok(Server {
            addr: bound,
            http,
            stop,
            thread: Mutex::new(Some(thread)),
        })
    }

    /// The address it listens on (the port chosen for port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops serving (a scrape being answered is finished first).
    pub fn stop(&self) {
        self.stop.store(true, Ordering::SeqCst);
        self.http.unblock();
        let t = self.thread.lock().ok().and_then(|mut t| t.take());
        if let Some(t) = t {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

fn serve(http: &tiny_http::Server, stop: &AtomicBool, feed: &Feed, opts: &Options) {
    let dropped_total = AtomicU64::new(0);
    while !stop.load(Ordering::SeqCst) {
        let req = match http.recv_timeout(Duration::from_millis(200)) {
            Ok(Some(r)) => r,
            Ok(None) => continue,
            Err(_) => break,
        };
        let resp = respond(&req, feed, opts, &dropped_total);
        // A scraper that went away is its business.
        let _ = req.respond(resp);
    }
}

type Response = tiny_http::Response<std::io::Cursor<Vec<u8>>>;

fn plain(status: u16, body: &str) -> Response {
    with_header(
        tiny_http::Response::from_string(body).with_status_code(status),
        "Content-Type",
        "text/plain; charset=utf-8",
    )
}

/// `r` with header `k: v` (ASCII here, which is all `from_bytes` refuses).
fn with_header(r: Response, k: &str, v: &str) -> Response {
    match tiny_http::Header::from_bytes(k.as_bytes(), v.as_bytes()) {
        Ok(h) => r.with_header(h),
        Err(()) => r,
    }
}

fn respond(
    req: &tiny_http::Request,
    feed: &Feed,
    opts: &Options,
    dropped_total: &AtomicU64,
) -> Response {
    use tiny_http::Method;
    let path = req.url().split(['?', '#']).next().unwrap_or("");
    if !matches!(req.method(), Method::Get | Method::Head) {
        return with_header(plain(405, "only GET and HEAD\n"), "Allow", "GET, HEAD");
    }
    match path {
        "/metrics" => {}
        "/" => {
            return plain(
                200,
                "wprobe: the run's maps and probe counters are at /metrics\n",
            );
        }
        _ => return plain(404, "not found: the metrics are at /metrics\n"),
    }
    let accept = req
        .headers()
        .iter()
        .find(|h| h.field.equiv("Accept"))
        .map(|h| h.value.as_str());
    let format = Format::from_accept(accept);
    let Some(snap) = feed.fresh(WAIT) else {
        return plain(503, "wprobe: no snapshot of the maps yet, try again\n");
    };
    let built = families::build(&snap, opts);
    let total =
        dropped_total.fetch_add(built.dropped_series, Ordering::Relaxed) + built.dropped_series;
    let mut fams = built.families;
    fams.push(families::series_dropped(total));
    match expose::encode(fams, format) {
        Ok(body) => with_header(
            tiny_http::Response::from_data(body.into_bytes()),
            "Content-Type",
            format.content_type(),
        ),
        Err(_) => plain(500, "wprobe: encoding the metrics failed\n"),
    }
}
