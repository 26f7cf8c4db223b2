//! latency-s3: bench/latency's emulated AWS front when S3 is served by s3s-fs (the default
//! `--s3-backend fast` of bench/latency_server.py, which builds and starts this binary).
//!
//! The same delay layer as bench/latency_server.py's Python one (classification, model, trace
//! entries, control endpoint), in Rust, so that a burst of hundreds of requests is bound by the
//! model and not by the emulator:
//!   - S3 requests are served in-process by `s3s` (the S3 protocol, SigV4 checked with the
//!     bench's `testing`/`testing` credentials) over an in-memory store (src/mem.rs) or s3s-fs;
//!   - Glue requests (`X-Amz-Target: AWSGlue.*`, and moto_server.py's `/_dms2iceberg/*`) are
//!     forwarded to moto (--glue URL: tests/support/moto_server.py in the Python parent);
//!   - every request on the delayed port is answered no earlier than its modelled time, on a
//!     tokio timer (≤ 1 ms late), and logged; the direct port neither delays nor logs.
//!
//!   latency-s3 [--store mem | --store fs --root DIR] --glue http://127.0.0.1:PORT
//!              --models MODELS.json --model NAME --port-file FILE [--host 127.0.0.1] [--threads 2]
//!
//! --store mem (default): objects in memory (src/mem.rs), the fastest; --store fs: s3s-fs, the
//! objects as files under --root (kept for comparison: ~0.5 ms of CPU per PUT, see mem.rs).
//!
//! MODELS.json: {"issue-13": {"S3 GET": [20, 10], ...}, "off": {}}; the port file gets
//! {"delayed": P, "direct": Q} once both sockets are bound.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::header::HeaderValue;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use percent_encoding::percent_decode_str;
use serde_json::{json, Map, Value};
use tokio::net::TcpListener;

mod mem;

const CONTROL: &str = "/_latency/";
const MOTO_CONTROL: &str = "/_dms2iceberg/";
const MB: f64 = 1_000_000.0;

type Table = HashMap<String, (f64, f64)>;

struct Model {
    name: String,
    table: Table,
    /// the table as given (key order kept), for /_latency/model
    json: Value,
}

struct State {
    s3: s3s::service::S3Service,
    glue: Client<HttpConnector, Full<Bytes>>,
    glue_base: String,
    models: Map<String, Value>,
    model: RwLock<Model>,
    trace: Mutex<Vec<Value>>,
}

fn parse_table(v: &Value) -> Result<Table, String> {
    let obj = v.as_object().ok_or("a model is an object {kind: [ms, ms per MB]}")?;
    let mut t = Table::new();
    for (k, x) in obj {
        let a = x.as_array().ok_or(format!("{k}: expected [ms, ms per MB]"))?;
        let f = |i: usize| a.get(i).and_then(Value::as_f64).ok_or(format!("{k}: expected numbers"));
        t.insert(k.clone(), (f(0)?, f(1)?));
    }
    Ok(t)
}

impl State {
    /// "off", "issue-13" (any name in MODELS.json), a JSON file's path, or a table.
    fn set_model(&self, m: &Value) -> Result<(), String> {
        let (name, json) = match m {
            Value::String(s) => match self.models.get(s) {
                Some(t) => (s.clone(), t.clone()),
                None => {
                    let text = std::fs::read_to_string(s).map_err(|e| format!("model {s}: {e}"))?;
                    (s.clone(), serde_json::from_str(&text).map_err(|e| format!("model {s}: {e}"))?)
                }
            },
            other => ("custom".to_string(), other.clone()),
        };
        let table = parse_table(&json)?;
        *self.model.write().unwrap() = Model { name, table, json };
        Ok(())
    }

    fn model_ms(&self, kind: &str, nbytes: u64) -> f64 {
        let m = self.model.read().unwrap();
        if m.table.is_empty() {
            return 0.0;
        }
        let fallback = if kind.starts_with("S3") { "S3 other" } else { "Glue other" };
        let (first, per_mb) = m
            .table
            .get(kind)
            .or_else(|| m.table.get(fallback))
            .copied()
            .unwrap_or((0.0, 0.0));
        first + per_mb * nbytes as f64 / MB
    }
}

fn now_epoch() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

fn round3(x: f64) -> f64 {
    (x * 1000.0).round() / 1000.0
}

/// parse_qs(keep_blank_values=True), first value of each name.
fn query(q: Option<&str>) -> HashMap<String, String> {
    let mut out = HashMap::new();
    for part in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        let dec = |s: &str| percent_decode_str(&s.replace('+', " ")).decode_utf8_lossy().into_owned();
        out.entry(dec(k)).or_insert_with(|| dec(v));
    }
    out
}

/// (kind, bucket, key) of an S3 request (path-style), as latency_server.py's classify().
fn classify_s3(method: &Method, path: &str, q: &HashMap<String, String>, copy: bool) -> (String, Option<String>, Option<String>) {
    let path = percent_decode_str(path).decode_utf8_lossy();
    let p = path.trim_start_matches('/');
    let (b, k) = match p.split_once('/') {
        Some((b, k)) => (b, k),
        None => (p, ""),
    };
    let bucket = (!b.is_empty()).then(|| b.to_string());
    let key = (!k.is_empty()).then(|| k.to_string());
    let m = method.as_str();
    let kind = if key.is_none() {
        if m == "GET" && (q.contains_key("list-type") || q.is_empty() || q.contains_key("prefix") || q.contains_key("delimiter")) {
            return ("S3 LIST".into(), bucket, q.get("prefix").cloned());
        } else if m == "POST" && q.contains_key("delete") {
            "S3 DELETE (batch)".to_string()
        } else {
            format!("S3 other ({m} bucket)")
        }
    } else {
        match m {
            "GET" => "S3 GET".into(),
            "HEAD" => "S3 HEAD".into(),
            "PUT" if q.contains_key("partNumber") => "S3 MPU part".into(),
            "PUT" if copy => "S3 COPY".into(),
            "PUT" => "S3 PUT".into(),
            "POST" if q.contains_key("uploads") => "S3 MPU create".into(),
            "POST" if q.contains_key("uploadId") => "S3 MPU complete".into(),
            "DELETE" if q.contains_key("uploadId") => "S3 MPU abort".into(),
            "DELETE" => "S3 DELETE".into(),
            _ => format!("S3 other ({m})"),
        }
    };
    (kind, bucket, key)
}

/// `database.table` (or the database) a Glue call is about.
fn glue_object(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(if body.is_empty() { b"{}" } else { body }).ok()?;
    let s = |v: Option<&Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(str::to_string);
    let name = s(v.get("Name")).or_else(|| s(v.get("TableInput").and_then(|t| t.get("Name"))));
    let db = s(v.get("DatabaseName")).or_else(|| s(v.get("DatabaseInput").and_then(|t| t.get("Name"))));
    match (db, name) {
        (Some(d), Some(n)) => Some(format!("{d}.{n}")),
        (d, n) => d.or(n),
    }
}

fn json_response(status: StatusCode, v: &Value) -> Response<Full<Bytes>> {
    let body = Bytes::from(serde_json::to_vec(v).unwrap());
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r.headers_mut().insert("content-type", HeaderValue::from_static("application/json"));
    r
}

async fn control(st: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let what = req.uri().path()[CONTROL.len()..].to_string();
    let q = query(req.uri().query());
    let method = req.method().clone();
    let not_found = json!({"error": format!("unknown control path {}", req.uri().path())});
    let model_json = |st: &State| {
        let m = st.model.read().unwrap();
        json!({"name": m.name, "model": m.json})
    };
    match (what.as_str(), method) {
        ("trace", Method::GET) => {
            let since: usize = q.get("since").and_then(|s| s.parse().ok()).unwrap_or(0);
            let t = st.trace.lock().unwrap();
            let reqs: Vec<Value> = t.get(since..).map(|s| s.to_vec()).unwrap_or_default();
            json_response(StatusCode::OK, &json!({"next": t.len(), "requests": reqs}))
        }
        ("model", Method::GET) => json_response(StatusCode::OK, &model_json(st)),
        ("config", Method::POST) => {
            let body = req.into_body().collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            let v: Value = serde_json::from_slice(if body.is_empty() { b"{}" } else { &body }).unwrap_or(json!({}));
            if let Some(m) = v.get("model") {
                if let Err(e) = st.set_model(m) {
                    return json_response(StatusCode::BAD_REQUEST, &json!({"error": e}));
                }
            }
            json_response(StatusCode::OK, &model_json(st))
        }
        _ => json_response(StatusCode::NOT_FOUND, &not_found),
    }
}

fn error_response(what: &str, e: impl std::fmt::Display) -> Response<Full<Bytes>> {
    eprintln!("latency-s3: {what}: {e}");
    let mut r = Response::new(Full::new(Bytes::from(format!("{what}: {e}"))));
    *r.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
    r
}

const HOP_BY_HOP: [&str; 5] = ["connection", "keep-alive", "transfer-encoding", "proxy-connection", "upgrade"];

/// Glue (and moto_server.py's control paths): forwarded to moto, body and all.
async fn forward_glue(st: &State, parts: hyper::http::request::Parts, body: Bytes) -> Response<Full<Bytes>> {
    let pq = parts.uri.path_and_query().map(|x| x.as_str()).unwrap_or("/");
    let mut b = Request::builder().method(parts.method.clone()).uri(format!("{}{}", st.glue_base, pq));
    for (k, v) in parts.headers.iter() {
        if !HOP_BY_HOP.contains(&k.as_str()) {
            b = b.header(k, v);
        }
    }
    let fwd = match b.body(Full::new(body)) {
        Ok(r) => r,
        Err(e) => return error_response("glue request", e),
    };
    let resp = match st.glue.request(fwd).await {
        Ok(r) => r,
        Err(e) => return error_response("glue (moto) unreachable", e),
    };
    let (mut rp, rb) = resp.into_parts();
    let bytes = match rb.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return error_response("glue (moto) response", e),
    };
    for h in HOP_BY_HOP {
        rp.headers.remove(h);
    }
    Response::from_parts(rp, Full::new(bytes))
}

async fn serve_s3(st: &State, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let req = req.map(s3s::Body::from);
    match st.s3.call(req).await {
        Ok(resp) => {
            let (p, b) = resp.into_parts();
            match b.collect().await {
                Ok(c) => Response::from_parts(p, Full::new(c.to_bytes())),
                Err(e) => error_response("s3 response body", e),
            }
        }
        Err(e) => error_response("s3", format!("{e:?}")),
    }
}

fn header_str<'a>(req: &'a Request<Incoming>, name: &str) -> Option<&'a str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

async fn handle(st: Arc<State>, req: Request<Incoming>, port: u16, traced: bool) -> Result<Response<Full<Bytes>>, Infallible> {
    let path = req.uri().path().to_string();
    if path.starts_with(CONTROL) {
        return Ok(control(&st, req).await);
    }
    let target = header_str(&req, "x-amz-target").unwrap_or("").to_string();
    let is_glue = !target.is_empty() || path.starts_with(MOTO_CONTROL);
    if !traced || path.starts_with(MOTO_CONTROL) {
        return Ok(if is_glue {
            let (parts, body) = req.into_parts();
            let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
            forward_glue(&st, parts, body).await
        } else {
            serve_s3(&st, req).await
        });
    }
    let start = now_epoch();
    let t0 = Instant::now();
    let method = req.method().clone();
    let range = header_str(&req, "range").map(str::to_string);
    let bytes_in: u64 = header_str(&req, "x-amz-decoded-content-length")
        .or_else(|| header_str(&req, "content-length"))
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(0);
    let (kind, bucket, key, resp) = if is_glue {
        let kind = match target.strip_prefix("AWSGlue.") {
            Some(op) => format!("Glue {op}"),
            None => format!("other {target}"),
        };
        let (parts, body) = req.into_parts();
        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
        let key = if kind.starts_with("Glue") { glue_object(&body) } else { None };
        let resp = forward_glue(&st, parts, body).await;
        (kind, None, key, resp)
    } else {
        let q = query(req.uri().query());
        let copy = req.headers().get("x-amz-copy-source").is_some_and(|v| !v.is_empty());
        let (kind, bucket, key) = classify_s3(&method, &path, &q, copy);
        (kind, bucket, key, serve_s3(&st, req).await)
    };
    let emu = t0.elapsed();
    let bytes_out: u64 = if method == Method::HEAD { 0 } else { hyper::body::Body::size_hint(resp.body()).exact().unwrap_or(0) };
    let moved = if kind == "S3 GET" { bytes_out } else { bytes_in };
    let model_ms = st.model_ms(&kind, moved);
    let deadline = t0 + Duration::from_secs_f64(model_ms / 1000.0);
    if deadline > Instant::now() {
        tokio::time::sleep_until(deadline.into()).await;
    }
    let end = now_epoch();
    let mut entry = json!({
        "kind": kind, "bucket": bucket, "key": key, "start": start, "end": end,
        "emu_ms": round3(emu.as_secs_f64() * 1000.0), "model_ms": round3(model_ms),
        "bytes_in": bytes_in, "bytes_out": bytes_out, "status": resp.status().as_u16(),
        "range": range, "port": port,
    });
    {
        let mut t = st.trace.lock().unwrap();
        entry["i"] = json!(t.len());
        t.push(entry);
    }
    Ok(resp)
}

async fn accept_loop(st: Arc<State>, listener: TcpListener, traced: bool) {
    loop {
        let (stream, peer): (_, SocketAddr) = match listener.accept().await {
            Ok(x) => x,
            Err(e) => {
                eprintln!("latency-s3: accept: {e}");
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let st = st.clone();
        tokio::spawn(async move {
            let port = peer.port();
            let svc = service_fn(move |req| handle(st.clone(), req, port, traced));
            let _ = http1::Builder::new().keep_alive(true).serve_connection(TokioIo::new(stream), svc).await;
        });
    }
}

struct Args {
    store: String,
    root: PathBuf,
    glue: String,
    models: PathBuf,
    model: String,
    port_file: PathBuf,
    host: String,
    threads: usize,
}

fn args() -> Result<Args, String> {
    let mut m: HashMap<String, String> = HashMap::new();
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let Some(name) = a.strip_prefix("--") else { return Err(format!("unexpected argument {a}")) };
        let v = it.next().ok_or(format!("--{name} needs a value"))?;
        m.insert(name.to_string(), v);
    }
    let need = |k: &str| m.get(k).cloned().ok_or(format!("--{k} is required"));
    Ok(Args {
        store: m.get("store").cloned().unwrap_or_else(|| "mem".into()),
        root: m.get("root").cloned().unwrap_or_default().into(),
        glue: need("glue")?.trim_end_matches('/').to_string(),
        models: need("models")?.into(),
        model: m.get("model").cloned().unwrap_or_else(|| "off".into()),
        port_file: need("port-file")?.into(),
        host: m.get("host").cloned().unwrap_or_else(|| "127.0.0.1".into()),
        threads: m.get("threads").map(|s| s.parse().map_err(|_| "--threads: a number")).transpose()?.unwrap_or(2),
    })
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("latency-s3: {e}\nusage: latency-s3 [--store mem | --store fs --root DIR] --glue URL --models MODELS.json --model NAME --port-file FILE [--host H] [--threads N]");
            std::process::exit(2);
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(a.threads).enable_all().build().unwrap();
    if let Err(e) = rt.block_on(run(a)) {
        eprintln!("latency-s3: {e}");
        std::process::exit(1);
    }
}

async fn run(a: Args) -> Result<(), Box<dyn std::error::Error>> {
    let mut b = match a.store.as_str() {
        "mem" => s3s::service::S3ServiceBuilder::new(mem::MemS3::default()),
        "fs" => {
            std::fs::create_dir_all(&a.root)?;
            let fs = s3s_fs::FileSystem::new(&a.root).map_err(|e| format!("s3s-fs at {}: {e:?}", a.root.display()))?;
            s3s::service::S3ServiceBuilder::new(fs)
        }
        other => return Err(format!("--store {other}: mem or fs").into()),
    };
    b.set_auth(s3s::auth::SimpleAuth::from_single("testing", "testing"));
    let s3 = b.build();
    let models: Value = serde_json::from_str(&std::fs::read_to_string(&a.models)?)?;
    let models = models.as_object().ok_or("MODELS.json: an object {name: model}")?.clone();
    let glue = Client::builder(TokioExecutor::new()).pool_idle_timeout(Duration::from_secs(30)).build_http();
    let st = Arc::new(State {
        s3,
        glue,
        glue_base: a.glue.clone(),
        models,
        model: RwLock::new(Model { name: "off".into(), table: Table::new(), json: json!({}) }),
        trace: Mutex::new(Vec::new()),
    });
    st.set_model(&Value::String(a.model.clone()))?;
    let delayed = TcpListener::bind((a.host.as_str(), 0)).await?;
    let direct = TcpListener::bind((a.host.as_str(), 0)).await?;
    let ports = json!({"delayed": delayed.local_addr()?.port(), "direct": direct.local_addr()?.port()});
    let tmp = a.port_file.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, ports.to_string())?;
    std::fs::rename(&tmp, &a.port_file)?;
    println!("{}", json!({"latency_s3": ports, "model": a.model, "store": a.store, "root": a.root, "glue": a.glue}));
    tokio::spawn(accept_loop(st.clone(), direct, false));
    accept_loop(st, delayed, true).await;
    Ok(())
}
