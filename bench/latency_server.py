#!/usr/bin/env python3
"""latency_server.py: the local S3 + Glue emulator (tests/support/moto_server.py: moto in server
mode, Glue VersionId enforced) behind a delay layer that answers like AWS answers, and logs every
request it serves with its start and end.

  latency_server.py serve [--port-file FILE] [--model off|issue-13|FILE.json] [--quiet]
  latency_server.py selftest
  latency_server.py model            print the model (JSON)

One process, one emulated AWS (one moto backend), two ports:
  delayed  what the function under test talks to: every request is classified (S3 GET, PUT,
           LIST, ...; Glue GetTable, UpdateTable, ...), served by moto at once, and its response
           is held back until `start + first_byte_ms + per_mb_ms * MB` (MB: bytes of the response
           body for reads, of the request body for writes; 1 MB = 10^6 bytes). The modelled time is
           a floor: if moto itself takes longer, the request ends when moto is done (the trace
           records moto's own time as `emu_ms`, so such requests can be found).
  direct   no delay, no trace: for the benchmark driver (uploading DMS files, loading base tables,
           verifying with PyIceberg), so that setting up never pollutes what is measured.

Concurrency is AWS-like: every connection has its own thread (werkzeug's threaded server) and a
delay is a sleep of that thread alone, so requests in flight at once overlap and eight concurrent
GETs of 20 ms end together after ~20 ms. Moto's own work runs under Python's GIL, which is why the
model is a floor rather than an addition: moto's ~1 ms per request hides inside the modelled time.

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
  /_dms2iceberg/*                 moto_server.py's own control endpoint (stats, UpdateTable delay)

A trace entry: {"i", "kind", "bucket", "key", "start", "end" (epoch seconds, float), "emu_ms",
"model_ms", "bytes_in", "bytes_out", "status", "range", "port" (client port = connection)}.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import sys
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


def cmd_serve(a) -> int:
    delayed, direct, layer = make_servers(a.host, a.model, a.quiet)
    ports = {"delayed": delayed.server_address[1], "direct": direct.server_address[1]}
    threading.Thread(target=direct.serve_forever, daemon=True).start()
    print(json.dumps({"latency_server": ports, "model": layer.model_name}), flush=True)
    if a.port_file:
        tmp = f"{a.port_file}.tmp{os.getpid()}"
        Path(tmp).write_text(json.dumps(ports))
        os.replace(tmp, a.port_file)
    try:
        delayed.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


def cmd_selftest(_a) -> int:
    """Checks what the benchmark relies on: the delay is the model's, requests in flight
    overlap (8 concurrent GETs take ~one GET), the direct port neither delays nor traces, Glue
    calls are classified and delayed, the model can be switched off."""
    import concurrent.futures as cf
    import urllib.request

    import boto3
    from botocore.config import Config

    delayed, direct, layer = make_servers(model="issue-13")
    for s in (delayed, direct):
        threading.Thread(target=s.serve_forever, daemon=True).start()
    ep = lambda s: f"http://127.0.0.1:{s.server_address[1]}"  # noqa: E731
    cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1},
                 max_pool_connections=16)
    kw = dict(region_name="us-east-1", aws_access_key_id="testing",
              aws_secret_access_key="testing", config=cfg)
    s3d, s3 = boto3.client("s3", endpoint_url=ep(direct), **kw), boto3.client(
        "s3", endpoint_url=ep(delayed), **kw)
    glue = boto3.client("glue", endpoint_url=ep(delayed), **kw)
    checks = 0
    # Lower bounds are the model (a response never comes earlier); upper bounds leave room for
    # a loaded 2-core machine, where moto and the Python client wait for the CPU.
    SLACK = 0.080

    def check(cond, what):
        nonlocal checks
        if not cond:
            raise AssertionError(what)
        checks += 1

    def trace():
        with urllib.request.urlopen(f"{ep(delayed)}/_latency/trace") as r:
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
    glue.create_database(DatabaseInput={"Name": "db"})
    glue.create_table(DatabaseName="db", TableInput={"Name": "t"})
    t = time.time()
    glue.get_table(DatabaseName="db", Name="t")
    el = time.time() - t
    check(0.060 <= el < 0.060 + SLACK, f"Glue GetTable ~60 ms: {el * 1000:.1f} ms")
    tr = trace()
    kinds = [e["kind"] for e in tr]
    check(kinds[:4] == ["S3 GET", "S3 GET", "S3 PUT", "S3 LIST"], f"classified: {kinds}")
    check(kinds.count("S3 GET") == 18 and "Glue CreateTable" in kinds and "Glue GetTable" in kinds,
          f"classified: {kinds}")
    gt = [e for e in tr if e["kind"] == "Glue GetTable"]
    check(gt and gt[0]["key"] == "db.t", f"a Glue call names its table: {gt}")
    big = tr[1]
    check(big["bytes_out"] == 3_000_000 and abs(big["model_ms"] - 50) < 1e-6,
          f"GET bytes and model: {big}")
    check(tr[2]["bytes_in"] >= 1_000_000 and tr[2]["key"] == "w", f"PUT bytes: {tr[2]}")
    conc = tr[12:20]
    inflight = max(sum(1 for o in conc if o["start"] <= e["start"] < o["end"]) for e in conc)
    check(inflight >= 4, f"at least 4 of the 8 concurrent GETs in flight at once: {inflight}")
    req = urllib.request.Request(f"{ep(delayed)}/_latency/config", data=b'{"model": "off"}',
                                 method="POST")
    urllib.request.urlopen(req).read()
    t = time.time()
    glue.get_table(DatabaseName="db", Name="t")
    el = time.time() - t
    check(el < SLACK, f"model off: no delay ({el * 1000:.1f} ms)")
    check(len(trace()) == len(tr) + 1, "model off: still traced")
    delayed.shutdown()
    direct.shutdown()
    print(f"latency_server selftest: {checks} checks passed")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port-file")
    p.add_argument("--model", default="issue-13", help="off, issue-13 or a JSON file {kind: [ms, ms/MB]}")
    p.add_argument("--quiet", action="store_true")
    sub.add_parser("selftest")
    sub.add_parser("model")
    a = ap.parse_args(argv)
    if a.cmd == "model":
        print(json.dumps(ISSUE_13, indent=1))
        return 0
    return {"serve": cmd_serve, "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
