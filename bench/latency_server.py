#!/usr/bin/env python3
"""latency_server.py: the local S3 + Glue emulator behind a delay layer that answers like AWS
answers, and logs every request it serves with its start and end.

  latency_server.py serve [--port-file FILE] [--model off|issue-13|FILE.json] [--quiet]
                          [--s3-backend auto|fast|moto] [--s3-store mem|fs] [--s3-root DIR]
  latency_server.py selftest [--s3-backend auto|fast|moto] [--s3-store mem|fs]
  latency_server.py model            print the model (JSON)

One emulated AWS, two ports:
  delayed  what the function under test talks to: every request is classified (S3 GET, PUT,
           LIST, ...; Glue GetTable, UpdateTable, ...), served by the emulator at once, and its
           response is held back until `start + first_byte_ms + per_mb_ms * MB` (MB: bytes of the
           response body for reads, of the request body for writes; 1 MB = 10^6 bytes). The
           modelled time is a floor: if the emulator itself takes longer, the request ends when
           it is done (the trace records the emulator's own time as `emu_ms`, so such requests
           can be found).
  direct   no delay, no trace: for the benchmark driver (uploading DMS files, loading base tables,
           verifying with PyIceberg), so that setting up never pollutes what is measured. Same
           storage as the delayed port.

Backends (--s3-backend; bench/latency passes `auto`):
  fast  (default) bench/fast_s3, a Rust binary (`latency-s3`; s3s for the S3 protocol) that is
        the delay layer and the S3 server in one process: S3 objects in memory (--s3-store mem;
        `fs` keeps them as files through s3s-fs), SigV4 checked (testing/testing), Glue and
        moto_server.py's /_dms2iceberg/* forwarded to moto (tests/support/moto_server.py, Glue
        VersionId enforced), which runs in this Python process on a loopback port of its own.
        The same classification, model, trace entries and control endpoint as the Python layer
        (the selftest runs the same checks on both). Built with `cargo build --release --locked`
        on first use (~3 min on 2 busy cores; then a no-op check of ~0.3 s), in
        bench/fast_s3/target. Concurrency: a tokio task per connection, a timer per request
        (≤ 1 ms late: tokio's timer wheel ticks in ms).
  moto  moto serves S3 and Glue behind this file's Python delay layer (werkzeug, a thread per
        connection, a sleep per request): the original setup.
  auto  fast if bench/fast_s3 builds here, else moto, with a FALLBACK note that bench/latency
        prints and puts at the top of the result file (burst figures are then moto's).

Why the fast backend (per-request CPU of the emulator itself, 4 KB objects, loopback, measured
on the 2-core bench machine with bench/fast_s3/burst.py: the emulator process's utime + stime
over 404-1000 requests, / requests; 64 client threads / 1 thread):

  moto, Python layer                          PUT 5.2 / 3.2 ms   GET 3.8 / 3.2 ms
  moto, S3 routed straight to moto's S3 app   PUT 3.3 / 2.7 ms   GET 2.6 / 2.6 ms
  Python layer alone, a do-nothing backend    PUT 1.2 / 1.0 ms
  latency-s3, s3s-fs files (tmpfs)            PUT 0.57 (0.44) / 0.59 ms   GET 0.27 / 0.27 ms
  latency-s3, in memory                       PUT 0.14 / 0.12 ms GET 0.09 / 0.07 ms

The ingest function writes a 200-partition change file as a burst of ~400 PUTs, up to 128 in
flight; the model answers each after 35 ms, so an emulator that is not to be the bottleneck must
spend well under 35 / 64 ≈ 0.5 ms per request, on 2 cores it shares with the function. Moto does
not come close: py-spy puts 2/3 of its time in DomainDispatcherApplication.get_application (it
lists moto's ~150 service packages on every request, under a lock) and the rest in werkzeug,
Flask and moto's S3 responses, all under the GIL. Routing S3 straight to moto's S3 app removes
the listing but leaves 2.7-3.3 ms; no Python front gets under ~1 ms. s3s-fs behind the Rust
layer gets to 0.57 ms, most of it in the kernel (3 files per object, each through tokio's
blocking pool: ~120 futex calls per PUT); in memory 0.14 ms.

In bench/latency, same sitting, same binaries (bench/results/2026-12-02-{fast,moto}-s3.md),
10,000-row file into the 200-partition table, warm: fast 840 ms per file (unpartitioned 472:
1.78x), the emulator's own time per PUT in the burst 0.04 ms median / 0.18 ms p95, no request
outlasting its model, 93 in flight at most; moto 1,928 ms (unpartitioned 506: 3.8x), moto's own
time per PUT 29 ms median / 58 ms p95 (a lower bound: the trace starts when a werkzeug thread
gets to the request), 158 of 411 requests per file outlasting their model, 21 in flight at most
(an earlier run, bench/RESULTS.md section 7, saw 512 ms per PUT). Cold, 200 partitions: fast
1,805 ms, moto 4,936 ms.

Memory: with --s3-store mem every object of the run stays in RAM until the server exits.

The model (`issue-13`, from issue 13; values the issue does not give are picked from the same
scale and documented here): milliseconds to the first byte, plus milliseconds per MB moved.

  S3 GET 20 + 10/MB      S3 PUT 35 + 10/MB     S3 LIST 30          S3 HEAD 20
  S3 DELETE 30           S3 DELETE (batch) 50  S3 MPU create 35    S3 MPU part 35 + 10/MB
  S3 MPU complete 60     S3 COPY 50 + 10/MB    S3 other 30
  Glue GetTable 60       Glue UpdateTable 120  Glue CreateTable 150  Glue GetDatabase 40
  Glue CreateDatabase 100  Glue GetTables 80   Glue DeleteTable 100  Glue other 60

10 ms/MB is ~100 MB/s per request, what one S3 connection sustains in-region; first-byte times
are typical in-region medians of small requests (S3 writes and Glue writes are slower than reads).
Not modelled: TLS handshakes of new connections (the trace records each request's client port,
so new connections can be counted), throttling (503 SlowDown), tail latency (every request
takes exactly its modelled time: the figures are a median case, not a p99).

Control endpoint on both ports (paths no bucket can have):
  GET  /_latency/trace[?since=N]  {"next": M, "requests": [...]}: trace entries N.. (delayed port)
  POST /_latency/config           {"model": "off" | "issue-13" | {...}}: switch the model
  GET  /_latency/model            the model in force
  /_dms2iceberg/*                 moto_server.py's own control endpoint (stats, UpdateTable delay;
                                  with the fast backend its request counts are Glue's only)

A trace entry: {"i", "kind", "bucket", "key", "start", "end" (epoch seconds, float), "emu_ms",
"model_ms", "bytes_in", "bytes_out", "status", "range", "port" (client port = connection)}.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from urllib.parse import parse_qs, unquote

HERE = Path(__file__).resolve().parent
SUPPORT = HERE.parent / "tests" / "support"
sys.path.insert(0, str(SUPPORT))

import moto_server  # noqa: E402  (tests/support: moto in server mode, Glue VersionId patch)

CONTROL = "/_latency/"
MB = 1_000_000.0

# kind -> (first-byte ms, ms per MB)
ISSUE_13 = {
    "S3 GET": (20, 10), "S3 PUT": (35, 10), "S3 LIST": (30, 0), "S3 HEAD": (20, 0),
    "S3 DELETE": (30, 0), "S3 DELETE (batch)": (50, 0), "S3 MPU create": (35, 0),
    "S3 MPU part": (35, 10), "S3 MPU complete": (60, 0), "S3 MPU abort": (30, 0),
    "S3 COPY": (50, 10), "S3 other": (30, 0),
    "Glue GetTable": (60, 0), "Glue UpdateTable": (120, 0), "Glue CreateTable": (150, 0),
    "Glue GetDatabase": (40, 0), "Glue CreateDatabase": (100, 0), "Glue GetTables": (80, 0),
    "Glue DeleteTable": (100, 0), "Glue other": (60, 0),
}
MODELS = {"issue-13": ISSUE_13, "off": {}}


class Layer:
    def __init__(self, model="off"):
        self.lock = threading.Lock()
        self.trace: list[dict] = []
        self.set_model(model)

    def set_model(self, model) -> None:
        if isinstance(model, str) and model in MODELS:
            name, table = model, MODELS[model]
        elif isinstance(model, str):
            name, table = model, json.loads(Path(model).read_text())
        else:
            name, table = "custom", model
        table = {k: (float(v[0]), float(v[1])) for k, v in table.items()}
        with self.lock:
            self.model_name, self.model = name, table

    def model_ms(self, kind: str, nbytes: int) -> float:
        m = self.model.get(kind)
        if m is None and self.model:
            m = self.model.get("S3 other" if kind.startswith("S3") else "Glue other", (0.0, 0.0))
        if not m:
            return 0.0
        return m[0] + m[1] * nbytes / MB


def classify(environ) -> tuple[str, str | None, str | None]:
    """(kind, bucket, key) of a request to the emulated AWS (S3 path-style, or Glue JSON)."""
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target.startswith("AWSGlue."):
        return "Glue " + target.split(".", 1)[1], None, None
    if target:
        return "other " + target, None, None
    method = environ.get("REQUEST_METHOD", "GET")
    path = unquote(environ.get("PATH_INFO", "/"))
    q = parse_qs(environ.get("QUERY_STRING", ""), keep_blank_values=True)
    parts = path.lstrip("/").split("/", 1)
    bucket = parts[0] or None
    key = parts[1] if len(parts) > 1 and parts[1] else None
    if key is None:  # bucket-level
        if method == "GET" and ("list-type" in q or not q or "prefix" in q or "delimiter" in q):
            return "S3 LIST", bucket, q.get("prefix", [None])[0]
        if method == "POST" and "delete" in q:
            return "S3 DELETE (batch)", bucket, None
        return f"S3 other ({method} bucket)", bucket, None
    if method == "GET":
        return "S3 GET", bucket, key
    if method == "HEAD":
        return "S3 HEAD", bucket, key
    if method == "PUT":
        if "partNumber" in q:
            return "S3 MPU part", bucket, key
        if environ.get("HTTP_X_AMZ_COPY_SOURCE"):
            return "S3 COPY", bucket, key
        return "S3 PUT", bucket, key
    if method == "POST":
        if "uploads" in q:
            return "S3 MPU create", bucket, key
        if "uploadId" in q:
            return "S3 MPU complete", bucket, key
    if method == "DELETE":
        return ("S3 MPU abort" if "uploadId" in q else "S3 DELETE"), bucket, key
    return f"S3 other ({method})", bucket, key


def glue_object(environ) -> str | None:
    """`database.table` (or the database) a Glue call is about; the body is put back for moto."""
    n = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(n) if n else b""
    environ["wsgi.input"] = io.BytesIO(raw)
    try:
        body = json.loads(raw or b"{}")
    except ValueError:
        return None
    name = body.get("Name") or (body.get("TableInput") or {}).get("Name")
    db = body.get("DatabaseName") or (body.get("DatabaseInput") or {}).get("Name")
    return f"{db}.{name}" if db and name else db or name


def control(layer: Layer, environ, start_response):
    what = environ["PATH_INFO"][len(CONTROL):]
    method = environ.get("REQUEST_METHOD", "GET")
    status, body = "404 Not Found", {"error": f"unknown control path {environ['PATH_INFO']}"}
    if what == "trace" and method == "GET":
        since = int(parse_qs(environ.get("QUERY_STRING", "")).get("since", ["0"])[0])
        with layer.lock:
            status, body = "200 OK", {"next": len(layer.trace), "requests": layer.trace[since:]}
    elif what == "model" and method == "GET":
        status, body = "200 OK", {"name": layer.model_name, "model": layer.model}
    elif what == "config" and method == "POST":
        n = int(environ.get("CONTENT_LENGTH") or 0)
        req = json.loads(environ["wsgi.input"].read(n) or b"{}")
        if "model" in req:
            layer.set_model(req["model"])
        status, body = "200 OK", {"name": layer.model_name, "model": layer.model}
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def delayed_app(inner, layer: Layer, traced: bool):
    """WSGI middleware: serve with moto now, answer at the modelled time, log the request."""

    def app(environ, start_response):
        if environ.get("PATH_INFO", "").startswith(CONTROL):
            return control(layer, environ, start_response)
        if not traced or environ.get("PATH_INFO", "").startswith(moto_server.CONTROL_PREFIX):
            return inner(environ, start_response)
        start = time.time()
        kind, bucket, key = classify(environ)
        if kind.startswith("Glue"):
            key = glue_object(environ)
        got = {}

        def capture(status, headers, exc_info=None):
            got["status"], got["headers"] = status, headers
            return lambda data: got.setdefault("written", []).append(data)

        result = inner(environ, capture)
        try:
            body = b"".join(got.pop("written", []) + list(result))
        finally:
            if hasattr(result, "close"):
                result.close()
        served = time.time()
        length = environ.get("HTTP_X_AMZ_DECODED_CONTENT_LENGTH") or environ.get("CONTENT_LENGTH")
        bytes_in = int(length or 0)
        bytes_out = len(body) if environ.get("REQUEST_METHOD") != "HEAD" else 0
        moved = bytes_out if kind in ("S3 GET",) else bytes_in
        model_ms = layer.model_ms(kind, moved)
        wait = start + model_ms / 1000.0 - time.time()
        if wait > 0:
            time.sleep(wait)
        end = time.time()
        entry = {"kind": kind, "bucket": bucket, "key": key, "start": start, "end": end,
                 "emu_ms": round((served - start) * 1000, 3), "model_ms": round(model_ms, 3),
                 "bytes_in": bytes_in, "bytes_out": bytes_out,
                 "status": int(got["status"].split()[0]),
                 "range": environ.get("HTTP_RANGE"), "port": environ.get("REMOTE_PORT")}
        with layer.lock:
            entry["i"] = len(layer.trace)
            layer.trace.append(entry)
        start_response(got["status"], got["headers"])
        return [body]

    return app


def make_servers(host: str = "127.0.0.1", model="off", quiet: bool = True):
    """(delayed server, direct server, layer): both on one moto backend."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    moto_server.patch_glue()
    handler = MotoRequestHandler
    if quiet:
        class QuietHandler(MotoRequestHandler):
            def log_request(self, *a, **k):
                pass
        handler = QuietHandler
    inner = moto_server.control_app(DomainDispatcherApplication(create_backend_app))
    layer = Layer(model)
    delayed = make_server(host, 0, delayed_app(inner, layer, True), threaded=True,
                          request_handler=handler)
    direct = make_server(host, 0, delayed_app(inner, layer, False), threaded=True,
                         request_handler=handler)
    return delayed, direct, layer


# ---------------------------------------------------------------------------------------------
# The fast S3 backend: bench/fast_s3 (Rust: this delay layer + s3s-fs), Glue on moto


FAST_DIR = HERE / "fast_s3"
FAST_BIN = FAST_DIR / "target" / "release" / "latency-s3"
BACKENDS = ("auto", "fast", "moto")


class FastS3Unavailable(RuntimeError):
    pass


def ensure_fast_s3(quiet: bool = False) -> tuple[Path, float]:
    """Builds bench/fast_s3 (cargo, --locked, cached in bench/fast_s3/target: a no-op once built)
    and returns (binary, seconds the build took). FastS3Unavailable if it cannot be built."""
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    if not Path(cargo).exists() and not shutil.which(cargo):
        raise FastS3Unavailable("cargo not found (bench/fast_s3 is a Rust crate; install Rust "
                                "with rustup, or run with --s3-backend moto)")
    t = time.time()
    if not quiet:
        print(f"latency_server: cargo build --release --locked --manifest-path {FAST_DIR}/Cargo.toml"
              + ("" if FAST_BIN.exists() else " (first build: a few minutes)"), file=sys.stderr,
              flush=True)
    r = subprocess.run(["nice", "-n", "10", cargo, "build", "--release", "--locked", "-q",
                        "--manifest-path", str(FAST_DIR / "Cargo.toml")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0 or not FAST_BIN.exists():
        raise FastS3Unavailable(f"building bench/fast_s3 failed (exit {r.returncode}):\n"
                                f"{r.stdout[-3000:]}")
    return FAST_BIN, time.time() - t


def resolve_backend(backend: str, quiet: bool = False) -> tuple[str, str]:
    """(backend, note): `auto` is `fast` if bench/fast_s3 builds here, else `moto` (the note
    says why, loudly: S3 figures are then the emulator's, see the docstring)."""
    if backend == "moto":
        return "moto", "moto serves S3 (--s3-backend moto)"
    try:
        binary, took = ensure_fast_s3(quiet)
    except FastS3Unavailable as e:
        if backend == "fast":
            raise
        return "moto", (f"FALLBACK: bench/fast_s3 could not be built, moto serves S3, and a "
                        f"burst of S3 requests measures moto's throughput, not the model: {e}")
    return "fast", f"bench/fast_s3 ({binary.name}; cargo build check {took:.1f} s)"


def _die_with_parent() -> None:
    """preexec_fn: the Rust child gets SIGTERM when this process dies (Linux prctl)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except OSError:
        pass


class Emulator:
    """The emulated AWS, either backend: .delayed / .direct URLs, .stop().

    moto: make_servers() in this process (the Python delay layer, moto for S3 and Glue).
    fast: moto (Glue only, tests/support/moto_server.py) on a loopback port in this process, and
    bench/fast_s3's latency-s3 as a child: the two ports the function and the driver use, S3
    served by s3s-fs from `s3_root`, Glue forwarded to moto."""

    def __init__(self, backend: str = "fast", model="issue-13", s3_root: str | None = None,
                 host: str = "127.0.0.1", quiet: bool = True, s3_store: str = "mem"):
        self.backend, self.proc, self.servers, self.tmp = backend, None, [], None
        if backend == "moto":
            delayed, direct, self.layer = make_servers(host, model, quiet)
            self.servers = [delayed, direct]
            for srv in self.servers:
                threading.Thread(target=srv.serve_forever, daemon=True).start()
            self.ports = {"delayed": delayed.server_address[1], "direct": direct.server_address[1]}
        elif backend == "fast":
            glue = moto_server.make_server(host, 0, quiet=quiet)
            self.servers = [glue]
            threading.Thread(target=glue.serve_forever, daemon=True).start()
            store = ["--store", "mem"]
            if s3_store == "fs":
                if s3_root is None:
                    self.tmp = tempfile.mkdtemp(prefix="latency-s3-")
                    s3_root = self.tmp
                Path(s3_root).mkdir(parents=True, exist_ok=True)
                store = ["--store", "fs", "--root", str(s3_root)]
            side = Path(tempfile.mkdtemp(prefix="latency-s3-run-"))
            models = side / "models.json"
            models.write_text(json.dumps({k: {kk: list(vv) for kk, vv in v.items()}
                                          for k, v in MODELS.items()}))
            if isinstance(model, dict):
                (side / "model.json").write_text(json.dumps(model))
                model = str(side / "model.json")
            port_file = side / "ports.json"
            self.proc = subprocess.Popen(
                [str(FAST_BIN), *store,
                 "--glue", f"http://{host}:{glue.server_address[1]}", "--models", str(models),
                 "--model", model, "--port-file", str(port_file), "--host", host],
                stdout=subprocess.DEVNULL, preexec_fn=_die_with_parent)
            end = time.time() + 60
            while not port_file.exists():
                if self.proc.poll() is not None or time.time() > end:
                    self.stop()
                    raise RuntimeError(f"latency-s3 did not start (exit {self.proc.returncode})")
                time.sleep(0.02)
            self.ports = json.loads(port_file.read_text())
            shutil.rmtree(side, ignore_errors=True)
        else:
            raise ValueError(f"unknown S3 backend {backend!r}")
        self.delayed = f"http://{host}:{self.ports['delayed']}"
        self.direct = f"http://{host}:{self.ports['direct']}"

    def wait(self) -> int:
        """Serve until the child ends (fast) or forever (moto)."""
        if self.proc is not None:
            return self.proc.wait()
        threading.Event().wait()
        return 0

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for srv in self.servers:
            srv.shutdown()
        if self.tmp:
            shutil.rmtree(self.tmp, ignore_errors=True)


def cmd_serve(a) -> int:
    backend, note = resolve_backend(a.s3_backend, quiet=a.quiet)
    if backend == "moto" and a.s3_backend != "moto":
        print(f"latency_server: {note}", file=sys.stderr, flush=True)
    emu = Emulator(backend, a.model, a.s3_root, a.host, a.quiet, a.s3_store)
    print(json.dumps({"latency_server": emu.ports, "model": a.model, "s3_backend": backend,
                      "note": note}), flush=True)
    if a.port_file:
        tmp = f"{a.port_file}.tmp{os.getpid()}"
        Path(tmp).write_text(json.dumps({**emu.ports, "s3_backend": backend, "note": note}))
        os.replace(tmp, a.port_file)
    try:
        rc = emu.wait()
        print(f"latency_server: the S3 backend exited ({rc})", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt:
        emu.stop()
    return 0


def cmd_selftest(a) -> int:
    """Checks what the benchmark relies on: the delay is the model's, requests in flight
    overlap (8 concurrent GETs take ~one GET), the direct port neither delays nor traces, Glue
    calls are classified and delayed, S3 calls the function and the driver make (ranged GET,
    HEAD, LIST v2 with a prefix, DELETE, multipart) are classified and served, the model can be
    switched off."""
    backends = ["fast", "moto"] if a.s3_backend == "auto" else [a.s3_backend]
    for b in backends:
        if b == "fast":
            ensure_fast_s3()
        selftest_one(b, a.s3_store)
    return 0


def selftest_one(backend: str, store: str = "mem") -> None:
    import concurrent.futures as cf
    import urllib.request

    import boto3
    from botocore.config import Config

    emu = Emulator(backend, "issue-13", s3_store=store)
    cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                 max_pool_connections=16)
    kw = dict(region_name="us-east-1", aws_access_key_id="testing",
              aws_secret_access_key="testing", config=cfg)
    s3d, s3 = boto3.client("s3", endpoint_url=emu.direct, **kw), boto3.client(
        "s3", endpoint_url=emu.delayed, **kw)
    glue = boto3.client("glue", endpoint_url=emu.delayed, **kw)
    checks = 0
    # Lower bounds are the model (a response never comes earlier); upper bounds leave room for
    # a loaded 2-core machine, where the emulator and the Python client wait for the CPU.
    SLACK = 0.080

    def check(cond, what):
        nonlocal checks
        if not cond:
            emu.stop()
            raise AssertionError(f"[{backend}] {what}")
        checks += 1

    def trace():
        with urllib.request.urlopen(f"{emu.delayed}/_latency/trace") as r:
            return json.load(r)["requests"]

    s3d.create_bucket(Bucket="bkt")
    s3d.put_object(Bucket="bkt", Key="small", Body=b"x" * 100)
    s3d.put_object(Bucket="bkt", Key="big", Body=b"y" * 3_000_000)
    check(trace() == [], "the direct port is not traced")
    t = time.time()
    s3.get_object(Bucket="bkt", Key="small")["Body"].read()
    el = time.time() - t
    check(0.020 <= el < 0.020 + SLACK, f"a small GET takes ~20 ms: {el * 1000:.1f} ms")
    t = time.time()
    s3.get_object(Bucket="bkt", Key="big")["Body"].read()
    el = time.time() - t
    check(0.050 <= el < 0.050 + SLACK, f"a 3 MB GET takes ~20 + 30 ms: {el * 1000:.1f} ms")
    t = time.time()
    s3.put_object(Bucket="bkt", Key="w", Body=b"z" * 1_000_000)
    el = time.time() - t
    check(0.045 <= el < 0.045 + SLACK, f"a 1 MB PUT takes ~35 + 10 ms: {el * 1000:.1f} ms")
    t = time.time()
    s3.list_objects_v2(Bucket="bkt", Prefix="")
    el = time.time() - t
    check(0.030 <= el < 0.030 + SLACK, f"a LIST takes ~30 ms: {el * 1000:.1f} ms")
    with cf.ThreadPoolExecutor(8) as ex:
        # first round opens the connections; the second measures
        list(ex.map(lambda _: s3.get_object(Bucket="bkt", Key="small")["Body"].read(), range(8)))
        t = time.time()
        list(ex.map(lambda _: s3.get_object(Bucket="bkt", Key="small")["Body"].read(), range(8)))
        el = time.time() - t
    # The client (Python threads under the GIL) staggers the starts on a loaded machine: the
    # figure that matters is that the layer overlaps what is in flight, not a serial 8 x 20 ms.
    check(el < 0.160, f"8 concurrent GETs overlap (~20 ms, not 160): {el * 1000:.1f} ms")
    db = f"db_{backend}"  # moto's Glue state is per process: the backends run one after another
    glue.create_database(DatabaseInput={"Name": db})
    glue.create_table(DatabaseName=db, TableInput={"Name": "t"})
    t = time.time()
    glue.get_table(DatabaseName=db, Name="t")
    el = time.time() - t
    check(0.060 <= el < 0.060 + SLACK, f"Glue GetTable ~60 ms: {el * 1000:.1f} ms")
    tr = trace()
    kinds = [e["kind"] for e in tr]
    check(kinds[:4] == ["S3 GET", "S3 GET", "S3 PUT", "S3 LIST"], f"classified: {kinds}")
    check(kinds.count("S3 GET") == 18 and "Glue CreateTable" in kinds and "Glue GetTable" in kinds,
          f"classified: {kinds}")
    gt = [e for e in tr if e["kind"] == "Glue GetTable"]
    check(gt and gt[0]["key"] == f"{db}.t", f"a Glue call names its table: {gt}")
    big = tr[1]
    check(big["bytes_out"] == 3_000_000 and abs(big["model_ms"] - 50) < 1e-6,
          f"GET bytes and model: {big}")
    check(tr[2]["bytes_in"] >= 1_000_000 and tr[2]["key"] == "w", f"PUT bytes: {tr[2]}")
    check(all(isinstance(e["port"], int) and e["emu_ms"] >= 0 and e["end"] > e["start"]
              for e in tr), f"trace entries: {tr[0]}")
    conc = tr[12:20]
    inflight = max(sum(1 for o in conc if o["start"] <= e["start"] < o["end"]) for e in conc)
    check(inflight >= 4, f"at least 4 of the 8 concurrent GETs in flight at once: {inflight}")
    # What the function and the driver use besides: a ranged GET, HEAD, LIST v2 under a prefix,
    # DELETE, a multipart upload (the SDKs' uploads of large files), errors with their status.
    n0 = len(tr)
    s3.put_object(Bucket="bkt", Key="dms/a/one.csv", Body=b"0123456789" * 10)
    s3.put_object(Bucket="bkt", Key="dms/b/two.csv", Body=b"x")
    got = s3.get_object(Bucket="bkt", Key="dms/a/one.csv", Range="bytes=10-19")["Body"].read()
    check(got == b"0123456789", f"ranged GET: {got!r}")
    check(s3.head_object(Bucket="bkt", Key="dms/a/one.csv")["ContentLength"] == 100, "HEAD")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="bkt", Prefix="dms/a/")["Contents"]]
    check(keys == ["dms/a/one.csv"], f"LIST v2 under a prefix: {keys}")
    try:
        s3.get_object(Bucket="bkt", Key="missing")
        check(False, "a missing key is an error")
    except s3.exceptions.NoSuchKey:
        pass
    up = s3.create_multipart_upload(Bucket="bkt", Key="mpu")["UploadId"]
    part = s3.upload_part(Bucket="bkt", Key="mpu", UploadId=up, PartNumber=1,
                          Body=b"m" * 5_300_000)
    s3.complete_multipart_upload(Bucket="bkt", Key="mpu", UploadId=up, MultipartUpload={
        "Parts": [{"PartNumber": 1, "ETag": part["ETag"]}]})
    check(len(s3d.get_object(Bucket="bkt", Key="mpu")["Body"].read()) == 5_300_000,
          "multipart upload, read back on the direct port")
    s3.delete_object(Bucket="bkt", Key="dms/b/two.csv")
    tr2 = trace()[n0:]
    kinds2 = [e["kind"] for e in tr2]
    want = ["S3 PUT", "S3 PUT", "S3 GET", "S3 HEAD", "S3 LIST", "S3 GET", "S3 MPU create",
            "S3 MPU part", "S3 MPU complete", "S3 DELETE"]
    check(kinds2 == want, f"classified: {kinds2}")
    ranged = tr2[2]
    check(ranged["range"] == "bytes=10-19" and ranged["bytes_out"] == 10
          and ranged["status"] == 206, f"ranged GET traced: {ranged}")
    check(tr2[3]["bytes_out"] == 0 and tr2[4]["key"] == "dms/a/" and tr2[5]["status"] == 404,
          f"HEAD / LIST / error traced: {tr2[3:6]}")
    check(tr2[7]["bytes_in"] == 5_300_000 and abs(tr2[7]["model_ms"] - 88) < 1e-6,
          f"MPU part bytes and model: {tr2[7]}")
    req = urllib.request.Request(f"{emu.delayed}/_latency/config", data=b'{"model": "off"}',
                                 method="POST")
    urllib.request.urlopen(req).read()
    t = time.time()
    glue.get_table(DatabaseName=db, Name="t")
    el = time.time() - t
    check(el < SLACK, f"model off: no delay ({el * 1000:.1f} ms)")
    check(len(trace()) == len(tr2) + n0 + 1, "model off: still traced")
    with urllib.request.urlopen(f"{emu.direct}/_latency/model") as r:
        check(json.load(r)["name"] == "off", "the model in force, on the direct port")
    emu.stop()
    what = f"fast S3, {store} store" if backend == "fast" else "moto S3"
    print(f"latency_server selftest ({what}): {checks} checks passed")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port-file")
    p.add_argument("--model", default="issue-13", help="off, issue-13 or a JSON file {kind: [ms, ms/MB]}")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--s3-backend", choices=BACKENDS, default="auto",
                   help="fast: bench/fast_s3 (s3s-fs) serves S3; moto: moto does; auto: fast if "
                        "it builds here, else moto with a warning")
    p.add_argument("--s3-store", choices=("mem", "fs"), default="mem",
                   help="fast: objects in memory (default), or as files through s3s-fs")
    p.add_argument("--s3-root", help="fast, --s3-store fs: the directory s3s-fs keeps the "
                   "objects in (default: a temporary directory)")
    t = sub.add_parser("selftest")
    t.add_argument("--s3-backend", choices=BACKENDS, default="auto",
                   help="auto: both backends, one after the other")
    t.add_argument("--s3-store", choices=("mem", "fs"), default="mem")
    sub.add_parser("model")
    a = ap.parse_args(argv)
    if a.cmd == "model":
        print(json.dumps(ISSUE_13, indent=1))
        return 0
    return {"serve": cmd_serve, "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
