#!/usr/bin/env python3
"""fault_proxy: a fault-injecting HTTP/1.1 reverse proxy for an Iceberg REST catalog.

  fault_proxy.py serve --upstream http://127.0.0.1:PORT [--host 127.0.0.1] [--port 0]
                       [--port-file FILE] [--rate R] [--seed N] [--after-share S]
                       [--fault-reads] [--quiet]
  fault_proxy.py selftest

serve      Listens on HOST:PORT (0: any free port), prints `fault_proxy listening on HOST:PORT`
           and, with --port-file, writes the port to FILE (atomically, once listening). Every
           request is forwarded to the upstream catalog (method, path and query, headers but
           hop-by-hop ones, body); the answer comes back with an exact Content-Length, so
           clients keep their connections (keep-alive, as reqwest pools them).
selftest   An in-process upstream and the proxy in front of it: forwarding, both fault kinds,
           reproducibility, keep-alive, stats.

Faults (rate 0, the default: none) are injected on requests that change catalog state:
POST / PUT / DELETE / PATCH under /v1/ (commits `POST /v1/{prefix}/namespaces/{ns}/tables/{t}`,
creates, drops, renames, `POST /v1/{prefix}/transactions/commit`, namespace creation and
properties, views), except the ones that change nothing (`POST /v1/oauth/tokens`, `.../metrics`,
scan planning `.../plan`, `.../tasks`). With --fault-reads (or "fault_reads": true) GET / HEAD
under /v1/ are faulted too, "before" only.

  before  not forwarded; 503 {"error": {"message": "injected: service unavailable",
          "type": "ServiceUnavailableException", "code": 503}}
  after   forwarded, the upstream's whole answer read (the change is made), then
          500 {"error": {"message": "injected: answer lost", "type": "ServerErrorException",
          "code": 500}}

Decision, reproducible from the seed whatever the thread interleaving: for a request with
signature SIG (`METHOD PATH`, the path as sent, without the query) seen for the N-th time
(N = 1, 2, ... counted per signature since the last configuration change),
D = blake2b("{seed}\\0{SIG}\\0{N}", digest_size=16); u1 = D[0:8], u2 = D[8:16] as big-endian
integers / 2**64. u1 < rate: fault; then u2 < after_share: "after", otherwise "before".

Control endpoint (paths no catalog uses; never faulted, never forwarded):
  GET  /_faults/stats   {"requests": n, "considered": n, "before": n, "after": n,
                         "by": {"updateTable after": n, ...}, "ops": {"loadTable": n, ...},
                         "last": [{"kind", "signature", "n", "op", "status"}, ...],
                         "config": {...}}
  GET  /_faults/config  {"rate", "seed", "after_share", "fault_reads"}
  POST /_faults/config  the keys given replace the current ones (the others stay); `null` or
                        {"reset": true} puts the defaults back (no faults). Every POST restarts
                        the occurrence counts N. Answers the resulting config.
"""
from __future__ import annotations

import argparse
import hashlib
import http.client
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

# --------------------------------------------------------------------------------------------
# The decision scheme (shared with moto_server.py, which imports this class)


def draw(seed: int, signature: str, n: int) -> tuple[float, float]:
    """Two independent uniform numbers in [0, 1) for occurrence n of signature under seed."""
    d = hashlib.blake2b(f"{seed}\0{signature}\0{n}".encode("utf-8", "surrogateescape"),
                        digest_size=16).digest()
    return int.from_bytes(d[:8], "big") / 2.0**64, int.from_bytes(d[8:], "big") / 2.0**64


class Faults:
    """Fault configuration, per-signature occurrence counts and stats, thread-safe.

    `defaults` holds every configurable key and its default; rate, seed and after_share are
    always there. `on` is read without the lock (a single attribute read) so that requests
    pay nothing while faults are off."""

    LAST = 50

    def __init__(self, **extra):
        self.defaults = {"rate": 0.0, "seed": 0, "after_share": 0.5, **extra}
        self.lock = threading.Lock()
        self.config = dict(self.defaults)
        self.counts: dict[str, int] = {}
        self.on = False
        self.stats = {"considered": 0, "before": 0, "after": 0, "by": {}, "last": []}

    @staticmethod
    def _coerce(key, value, default):
        if key in ("rate", "after_share"):
            v = float(value)
            if not 0.0 <= v <= 1.0:
                raise ValueError(f"{key} must be within [0, 1], got {value!r}")
            return v
        if key == "seed":
            return int(value)
        if isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"{key} must be true or false, got {value!r}")
            return value
        if isinstance(default, list):
            if isinstance(value, str):
                value = [v for v in value.split(",") if v]
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{key} must be a list of strings, got {value!r}")
            return list(value)
        return value

    def configure(self, changes: dict | None) -> dict:
        """Merge `changes` into the configuration (None / {"reset": true}: the defaults), restart
        the occurrence counts and answer the resulting configuration. ValueError if invalid."""
        if changes is not None and not isinstance(changes, dict):
            raise ValueError(f"fault configuration must be an object or null, got {changes!r}")
        reset = changes is None
        changes = dict(changes or {})
        reset = bool(changes.pop("reset", False)) or reset
        unknown = set(changes) - set(self.defaults)
        if unknown:
            raise ValueError(f"unknown fault setting(s) {sorted(unknown)}; known: {sorted(self.defaults)}")
        with self.lock:
            new = dict(self.defaults) if reset else dict(self.config)
            for k, v in changes.items():
                new[k] = self._coerce(k, v, self.defaults[k])
            self.config = new
            self.counts = {}
            self.on = new["rate"] > 0
            return dict(new)

    def get(self, key):
        return self.config[key]

    def decide(self, signature: str, after_allowed: bool = True) -> tuple[str | None, int]:
        """(None | "before" | "after", occurrence number) for one more request `signature`."""
        with self.lock:
            n = self.counts.get(signature, 0) + 1
            self.counts[signature] = n
            cfg = self.config
            self.stats["considered"] += 1
        u1, u2 = draw(cfg["seed"], signature, n)
        if u1 >= cfg["rate"]:
            return None, n
        return ("after" if after_allowed and u2 < cfg["after_share"] else "before"), n

    def record(self, kind: str, label: str, signature: str, n: int, status=None, **extra) -> None:
        """Count a fault: by[f"{label} {kind}"], and remember it among the last ones."""
        with self.lock:
            s = self.stats
            s[kind] += 1
            key = f"{label} {kind}"
            s["by"][key] = s["by"].get(key, 0) + 1
            s["last"].append({"kind": kind, "signature": signature, "n": n, "status": status, **extra})
            del s["last"][:-self.LAST]

    def snapshot(self) -> dict:
        with self.lock:
            out = json.loads(json.dumps(self.stats))
            out["config"] = dict(self.config)
            return out


# --------------------------------------------------------------------------------------------
# The proxy

CONTROL_PREFIX = "/_faults/"
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te",
              "trailer", "trailers", "transfer-encoding", "upgrade", "proxy-connection"}
# Writes (by method) that change no catalog state: never faulted.
NOT_STATE_CHANGING = {"oauthTokens", "reportMetrics", "planTableScan", "fetchPlanningResult",
                      "cancelPlanning", "fetchScanTasks"}
TOP = {"namespaces", "tables", "transactions", "views", "config", "oauth"}


def iceberg_op(method: str, path: str) -> str:
    """The Iceberg REST operation (its OpenAPI operationId) a request is, `METHOD other` if none."""
    segs = [s for s in path.split("?", 1)[0].split("/")]
    if len(segs) < 3 or segs[1] != "v1":
        return f"{method} other"
    segs = segs[2:]
    if segs and segs[-1] == "":
        segs = segs[:-1]
    if segs and segs[0] == "config":
        return "getConfig"
    if segs[:2] == ["oauth", "tokens"]:
        return "oauthTokens"
    if len(segs) > 1 and segs[0] not in TOP:
        segs = segs[1:]  # the catalog's prefix
    n = len(segs)
    ops = {}
    if n >= 1 and segs[0] == "namespaces":
        if n == 1:
            ops = {"GET": "listNamespaces", "POST": "createNamespace"}
        elif n == 2:
            ops = {"GET": "loadNamespaceMetadata", "HEAD": "namespaceExists", "DELETE": "dropNamespace"}
        elif n == 3:
            ops = {"properties": {"POST": "updateProperties"},
                   "tables": {"GET": "listTables", "POST": "createTable"},
                   "register": {"POST": "registerTable"},
                   "register-view": {"POST": "registerView"},
                   "views": {"GET": "listViews", "POST": "createView"}}.get(segs[2], {})
        elif n == 4 and segs[2] == "tables":
            ops = {"GET": "loadTable", "HEAD": "tableExists", "POST": "updateTable", "DELETE": "dropTable"}
        elif n == 4 and segs[2] == "views":
            ops = {"GET": "loadView", "HEAD": "viewExists", "POST": "replaceView", "DELETE": "dropView"}
        elif n >= 5 and segs[2] == "tables":
            ops = {"credentials": {"GET": "loadCredentials"},
                   "metrics": {"POST": "reportMetrics"},
                   "tasks": {"POST": "fetchScanTasks"},
                   "plan": ({"POST": "planTableScan"} if n == 5 else
                            {"GET": "fetchPlanningResult", "DELETE": "cancelPlanning"})}.get(segs[4], {})
    elif segs == ["tables", "rename"]:
        ops = {"POST": "renameTable"}
    elif segs == ["views", "rename"]:
        ops = {"POST": "renameView"}
    elif segs == ["transactions", "commit"]:
        ops = {"POST": "commitTransaction"}
    return ops.get(method, f"{method} other")


def faultable(method: str, path: str, op: str, fault_reads: bool) -> tuple[bool, bool]:
    """(fault this request?, may it be an "after" fault?)"""
    if not path.startswith("/v1/"):
        return False, False
    if method in ("POST", "PUT", "DELETE", "PATCH"):
        return op not in NOT_STATE_CHANGING, True
    if method in ("GET", "HEAD") and fault_reads:
        return True, False
    return False, False


def error_body(code: int, typ: str, message: str) -> bytes:
    return json.dumps({"error": {"message": message, "type": typ, "code": code}}).encode()


BEFORE = (503, "ServiceUnavailableException", "injected: service unavailable")
AFTER = (500, "ServerErrorException", "injected: answer lost")


class ProxyServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, upstream: str, faults: Faults, quiet: bool):
        u = urlsplit(upstream)
        if u.scheme not in ("http", "") or not u.hostname:
            raise SystemExit(f"--upstream must be http://HOST:PORT, got {upstream!r}")
        self.upstream = (u.hostname, u.port or 80)
        self.upstream_base = u.path.rstrip("/")
        self.faults = faults
        self.quiet = quiet
        self.lock = threading.Lock()
        self.requests = 0
        self.ops: dict[str, int] = {}
        super().__init__(addr, Handler)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle's algorithm and the
    # client's delayed ACK would hold every body back ~40 ms.
    disable_nagle_algorithm = True
    server_version = "fault_proxy"
    sys_version = ""
    server: ProxyServer

    def setup(self):
        super().setup()
        self.upstream_conn: http.client.HTTPConnection | None = None
        self.upstream_used = False

    def finish(self):
        try:
            super().finish()
        finally:
            if self.upstream_conn is not None:
                self.upstream_conn.close()

    def log_message(self, fmt, *args):
        if not self.server.quiet:
            sys.stderr.write(f"fault_proxy {self.address_string()} {fmt % args}\n")

    # one handler for every method
    def do_any(self):
        body = self.read_body()
        if body is None:
            return
        path = self.path
        if path.startswith(CONTROL_PREFIX):
            return self.control(path[len(CONTROL_PREFIX):].split("?", 1)[0], body)
        method = self.command
        op = iceberg_op(method, path)
        srv = self.server
        with srv.lock:
            srv.requests += 1
            srv.ops[op] = srv.ops.get(op, 0) + 1
        kind, n, signature = None, 0, None
        faults = srv.faults
        if faults.on:
            eligible, after_ok = faultable(method, path, op, faults.get("fault_reads"))
            if eligible:
                signature = f"{method} {path.split('?', 1)[0]}"
                kind, n = faults.decide(signature, after_allowed=after_ok)
        if kind == "before":
            faults.record("before", op, signature, n, op=op)
            return self.send_json(BEFORE[0], error_body(*BEFORE))
        try:
            status, reason, headers, data = self.forward(method, path, body)
        except OSError as e:
            return self.send_json(502, error_body(502, "BadGatewayException",
                                                  f"fault_proxy: upstream {srv.upstream}: {e}"))
        if kind == "after":
            faults.record("after", op, signature, n, status=status, op=op)
            return self.send_json(AFTER[0], error_body(*AFTER))
        self.log_request(status)
        self.send_response_only(status, reason)  # the upstream's own Date / Server go through
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        if data and method != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_any

    def read_body(self) -> bytes | None:
        te = self.headers.get("Transfer-Encoding", "")
        if "chunked" in te.lower():
            out = bytearray()
            while True:
                line = self.rfile.readline(65537)
                if not line:
                    self.close_connection = True
                    return None
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return bytes(out)
                out += self.rfile.read(size)
                self.rfile.readline(65537)
        n = self.headers.get("Content-Length")
        if n is None:
            return b""
        try:
            n = int(n)
        except ValueError:
            self.send_error(400, "bad Content-Length")
            return None
        return self.rfile.read(n) if n > 0 else b""

    def forward(self, method: str, path: str, body: bytes):
        srv = self.server
        connection_tokens = {t.strip().lower() for t in self.headers.get("Connection", "").split(",")}
        headers = {}
        for k, v in self.headers.items():
            lk = k.lower()
            if lk in HOP_BY_HOP or lk in connection_tokens or lk in ("content-length", "expect"):
                continue
            headers[k] = v if k not in headers else f"{headers[k]}, {v}"
        if body or method in ("POST", "PUT", "PATCH"):
            headers["Content-Length"] = str(len(body))
        target = srv.upstream_base + path
        for attempt in (0, 1):
            reused = self.upstream_conn is not None and self.upstream_used
            if self.upstream_conn is None:
                self.upstream_conn = http.client.HTTPConnection(*srv.upstream, timeout=600)
                self.upstream_used = False
            conn = self.upstream_conn
            try:
                conn.request(method, target, body=body if body or "Content-Length" in headers else None,
                             headers=headers)
                resp = conn.getresponse()
                data = resp.read()
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError,
                    ConnectionAbortedError) as e:
                conn.close()
                self.upstream_conn = None
                # An idle pooled connection the upstream closed meanwhile: once more on a fresh one.
                if reused and attempt == 0:
                    continue
                raise OSError(f"{type(e).__name__}: {e}") from e
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                self.upstream_conn = None
                raise OSError(f"{type(e).__name__}: {e}") from e
            self.upstream_used = True
            if resp.will_close:
                conn.close()
                self.upstream_conn = None
            out = []
            upstream_tokens = {t.strip().lower() for t in (resp.getheader("Connection") or "").split(",")}
            for k, v in resp.getheaders():
                lk = k.lower()
                if lk in HOP_BY_HOP or lk in upstream_tokens:
                    continue
                if lk == "content-length" and method != "HEAD":
                    continue
                out.append((k, v))
            if method != "HEAD" and not (100 <= resp.status < 200 or resp.status in (204, 304)):
                out.append(("Content-Length", str(len(data))))
            return resp.status, resp.reason, out, data
        raise AssertionError("unreachable")

    def send_json(self, status: int, data: bytes, reason: str | None = None):
        self.send_response(status, reason)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def control(self, what: str, body: bytes):
        srv = self.server
        method = self.command
        if what == "stats" and method == "GET":
            out = srv.faults.snapshot()
            with srv.lock:
                out["requests"] = srv.requests
                out["ops"] = dict(srv.ops)
            return self.send_json(200, json.dumps(out).encode())
        if what == "config" and method == "GET":
            return self.send_json(200, json.dumps(srv.faults.snapshot()["config"]).encode())
        if what == "config" and method == "POST":
            try:
                req = json.loads(body or b"{}")
                cfg = srv.faults.configure(req)
            except ValueError as e:
                return self.send_json(400, json.dumps({"error": str(e)}).encode())
            return self.send_json(200, json.dumps(cfg).encode())
        return self.send_json(404, json.dumps({"error": f"unknown control path {self.path}"}).encode())


def make_faults(rate=0.0, seed=0, after_share=0.5, fault_reads=False) -> Faults:
    f = Faults(fault_reads=False)
    f.configure({"rate": rate, "seed": seed, "after_share": after_share, "fault_reads": fault_reads})
    return f


def make_server(upstream: str, host="127.0.0.1", port=0, faults: Faults | None = None,
                quiet=False) -> ProxyServer:
    return ProxyServer((host, port), upstream, faults or make_faults(), quiet)


def write_port_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    Path(tmp).write_text(f"{port}\n")
    os.replace(tmp, path)


def cmd_serve(a) -> int:
    faults = make_faults(a.rate, a.seed, a.after_share, a.fault_reads)
    server = make_server(a.upstream, a.host, a.port, faults, a.quiet)
    host, port = server.server_address[:2]
    print(f"fault_proxy listening on {host}:{port}", flush=True)
    if a.port_file:
        write_port_file(a.port_file, port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


# --------------------------------------------------------------------------------------------
# Self-test


class _Upstream(BaseHTTPRequestHandler):
    """A tiny catalog stand-in: records every request, answers JSON (keep-alive)."""
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True
    seen: list = []

    def log_message(self, *a):
        pass

    def do_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        _Upstream.seen.append((self.command, self.path, body, dict(self.headers)))
        if self.path.startswith("/v1/missing"):
            status, out = 404, {"error": {"message": "no such table", "type": "NoSuchTableException", "code": 404}}
        elif self.path.startswith("/v1/chunked"):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for part in (b'{"chunked"', b': true}'):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
            self.wfile.write(b"0\r\n\r\n")
            return
        elif self.command == "DELETE":
            self.send_response(204)
            self.end_headers()
            return
        else:
            status, out = 200, {"method": self.command, "path": self.path,
                                "body": body.decode() if body else None}
        data = json.dumps(out).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("X-Upstream", "yes")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_HEAD = do_POST = do_PUT = do_DELETE = do_any


def cmd_selftest(a) -> int:
    up = ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    up.daemon_threads = True
    threading.Thread(target=up.serve_forever, daemon=True).start()
    proxy = make_server(f"http://127.0.0.1:{up.server_address[1]}", quiet=True)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    port = proxy.server_address[1]
    checks = 0

    def check(cond, what):
        nonlocal checks
        if not cond:
            raise AssertionError(what)
        checks += 1

    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    socks = set()

    def call(method, path, body=None, headers=None, c=None):
        c = c or conn
        hdrs = {"Content-Type": "application/json", **(headers or {})}
        data = json.dumps(body).encode() if body is not None else None
        c.request(method, path, body=data, headers=hdrs)
        if c is conn:
            socks.add(conn.sock.getsockname()[1])
        r = c.getresponse()
        raw = r.read()
        return r.status, (json.loads(raw) if raw else None), r

    def configure(cfg):
        req = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        req.request("POST", "/_faults/config", body=json.dumps(cfg).encode(),
                    headers={"Content-Type": "application/json"})
        r = req.getresponse()
        out = json.loads(r.read())
        req.close()
        return r.status, out

    def stats():
        status, out, _ = call("GET", "/_faults/stats")
        return out

    seen = _Upstream.seen
    # forwarding, faults off
    s, out, r = call("GET", "/v1/config?warehouse=w", headers={"Authorization": "Bearer k"})
    check(s == 200 and out["path"] == "/v1/config?warehouse=w" and r.getheader("X-Upstream") == "yes",
          f"GET forwarded with its query and the upstream's headers: {s} {out}")
    check(seen[-1][3].get("Authorization") == "Bearer k", "request headers are forwarded")
    payload = {"requirements": [{"type": "assert-table-uuid", "uuid": "u"}], "updates": []}
    s, out, _ = call("POST", "/v1/cat/namespaces/ns/tables/t", payload)
    check(s == 200 and json.loads(out["body"]) == payload, f"POST body forwarded: {out}")
    s, out, _ = call("GET", "/v1/missing")
    check(s == 404 and out["error"]["type"] == "NoSuchTableException", "upstream status codes pass through")
    s, out, r = call("DELETE", "/v1/cat/namespaces/ns/tables/gone")
    check(s == 204 and out is None, f"204 without a body: {s}")
    s, out, _ = call("GET", "/v1/chunked")
    check(s == 200 and out == {"chunked": True}, f"a chunked upstream answer is re-sent with a length: {out}")
    s, out, r = call("HEAD", "/v1/cat/namespaces/ns/tables/t")
    check(s == 200 and out is None, "HEAD")
    check(len(socks) == 1,
          f"one client connection served every request (keep-alive): {len(socks)} sockets")

    # a chunked request body
    c2 = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c2.putrequest("POST", "/v1/cat/namespaces")
    c2.putheader("Transfer-Encoding", "chunked")
    c2.putheader("Content-Type", "application/json")
    c2.endheaders()
    for part in (b'{"namespace": ', b'["ns2"]}'):
        c2.send(b"%x\r\n%s\r\n" % (len(part), part))
    c2.send(b"0\r\n\r\n")
    r = c2.getresponse()
    out = json.loads(r.read())
    check(r.status == 200 and out["body"] == '{"namespace": ["ns2"]}', f"chunked request body: {out}")
    c2.close()

    # before: the upstream does not see the request
    st, cfg = configure({"rate": 1.0, "after_share": 0.0, "seed": 3})
    check(st == 200 and cfg == {"rate": 1.0, "seed": 3, "after_share": 0.0, "fault_reads": False},
          f"config answer: {cfg}")
    n_seen = len(seen)
    s, out, _ = call("POST", "/v1/cat/namespaces/ns/tables/t", payload)
    check(s == 503 and out == {"error": {"message": "injected: service unavailable",
                                         "type": "ServiceUnavailableException", "code": 503}},
          f"before: 503 ServiceUnavailableException: {s} {out}")
    check(len(seen) == n_seen, "before: not forwarded")
    s, out, _ = call("GET", "/v1/cat/namespaces/ns/tables/t")
    check(s == 200 and len(seen) == n_seen + 1, "reads are not faulted without fault_reads")
    s, _, _ = call("POST", "/v1/oauth/tokens", {"grant_type": "client_credentials"})
    check(s == 200, "token requests are not faulted")
    s, _, _ = call("POST", "/v1/cat/namespaces/ns/tables/t/metrics", {"report-type": "scan-report"})
    check(s == 200, "metrics reports are not faulted")
    configure({"fault_reads": True})
    s, out, _ = call("GET", "/v1/cat/namespaces/ns/tables/t")
    check(s == 503, "fault_reads: GETs are faulted")
    configure({"after_share": 1.0})
    n_seen = len(seen)
    s, out, _ = call("GET", "/v1/cat/namespaces/ns/tables/t")
    check(s == 503 and len(seen) == n_seen, "fault_reads: reads are only ever faulted before")

    # after: the upstream saw it, the client gets 500
    configure({"fault_reads": False})
    n_seen = len(seen)
    s, out, _ = call("POST", "/v1/cat/transactions/commit", {"table-changes": []})
    check(s == 500 and out == {"error": {"message": "injected: answer lost",
                                         "type": "ServerErrorException", "code": 500}},
          f"after: 500 ServerErrorException: {s} {out}")
    check(len(seen) == n_seen + 1 and seen[-1][:2] == ("POST", "/v1/cat/transactions/commit"),
          "after: the upstream got the request")
    s, out, _ = call("DELETE", "/v1/cat/namespaces/ns/tables/gone")
    check(s == 500 and seen[-1][0] == "DELETE", "after: a DELETE is forwarded, its 204 lost")
    check(len(socks) == 1, f"faults keep the client connection: {len(socks)} sockets")

    # reproducibility: the same seed and the same sequence of requests give the same decisions
    seq = [("POST", f"/v1/cat/namespaces/ns/tables/t{i % 3}") for i in range(24)] + \
          [("DELETE", "/v1/cat/namespaces/ns/tables/t0"), ("POST", "/v1/cat/namespaces")] * 4

    def run(seed, threads=1):
        configure({"rate": 0.5, "after_share": 0.5, "seed": seed})
        results = [None] * len(seq)

        def worker(idx):
            c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            for i in idx:
                s, _, _ = call(seq[i][0], seq[i][1], {"i": i}, c=c)
                results[i] = s
            c.close()

        if threads == 1:
            worker(range(len(seq)))
            return results
        ts = [threading.Thread(target=worker, args=(range(k, len(seq), threads),)) for k in range(threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        return results

    r1, r2, r3 = run(11), run(11), run(12)
    check(r1 == r2, f"same seed, same decisions: {r1} vs {r2}")
    check(r1 != r3, "another seed, other decisions")
    check({503, 500, 200} <= set(r1), f"rate 0.5 / after_share 0.5 gives every outcome: {r1}")
    expected = []
    counts: dict[str, int] = {}
    for m, p in seq:
        sig = f"{m} {p}"
        counts[sig] = counts.get(sig, 0) + 1
        u1, u2 = draw(11, sig, counts[sig])
        ok = 204 if m == "DELETE" else 200
        expected.append(ok if u1 >= 0.5 else (500 if u2 < 0.5 else 503))
    check(r1 == expected, f"the decisions are the documented blake2b scheme: {r1} vs {expected}")
    # Interleaving does not change the multiset per signature; here every signature is used by
    # one thread in order, so the outcomes are exactly the same.
    seq = [("POST", f"/v1/cat/namespaces/ns/tables/p{i % 4}") for i in range(32)]
    a1 = run(5)
    a2 = run(5, threads=4)
    check(a1 == a2, f"4 threads, one signature each: the same decisions: {a1} vs {a2}")

    # stats
    configure(None)
    st = stats()
    check(st["config"]["rate"] == 0.0 and st["before"] >= 4 and st["after"] >= 2,
          f"stats count faults: {st['before']} before, {st['after']} after")
    check(st["by"].get("updateTable before", 0) >= 1 and st["by"].get("commitTransaction after", 0) == 1
          and st["by"].get("dropTable after", 0) >= 1 and st["by"].get("loadTable before", 0) == 2,
          f"stats by operation and kind: {st['by']}")
    check(st["requests"] >= 100 and st["ops"].get("updateTable", 0) >= 50, f"requests counted: {st['ops']}")
    last = st["last"][-1]
    check(len(st["last"]) == Faults.LAST and set(last) >= {"kind", "signature", "n", "status", "op"},
          f"last faults: {last}")
    n_seen = len(seen)
    s, _, _ = call("POST", "/v1/cat/namespaces/ns/tables/t", payload)
    check(s == 200 and len(seen) == n_seen + 1, "config null: faults off")
    st, out = configure({"rate": 2})
    check(st == 400 and "rate" in out["error"], f"a bad config is refused: {out}")
    st, out = configure({"bogus": 1})
    check(st == 400, f"an unknown key is refused: {out}")

    # an unreachable upstream answers 502
    dead = make_server("http://127.0.0.1:9", quiet=True)
    threading.Thread(target=dead.serve_forever, daemon=True).start()
    c3 = http.client.HTTPConnection("127.0.0.1", dead.server_address[1], timeout=10)
    s, out, _ = call("GET", "/v1/config", c=c3)
    check(s == 502 and out["error"]["code"] == 502, f"unreachable upstream: {s} {out}")
    c3.close()
    dead.shutdown()

    # serve: the port file and the banner
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as d:
        pf = Path(d, "port")
        p = subprocess.Popen([sys.executable, __file__, "serve", "--upstream",
                              f"http://127.0.0.1:{up.server_address[1]}", "--port-file", str(pf),
                              "--quiet", "--rate", "1", "--after-share", "1", "--seed", "4"],
                             stdout=subprocess.PIPE, text=True)
        try:
            line = p.stdout.readline()
            deadline = time.time() + 10
            while not pf.exists() and time.time() < deadline:
                time.sleep(0.02)
            sport = int(pf.read_text())
            check(line.strip() == f"fault_proxy listening on 127.0.0.1:{sport}", f"banner: {line!r}")
            c4 = http.client.HTTPConnection("127.0.0.1", sport, timeout=10)
            n_seen = len(seen)
            s, _, _ = call("POST", "/v1/namespaces", {"namespace": ["x"]}, c=c4)
            check(s == 500 and len(seen) == n_seen + 1, "serve --rate 1 --after-share 1: after faults")
            s, cfg, _ = call("GET", "/_faults/config", c=c4)
            check(cfg == {"rate": 1.0, "seed": 4, "after_share": 1.0, "fault_reads": False},
                  f"serve flags are the config: {cfg}")
            c4.close()
        finally:
            p.terminate()
            p.wait(10)

    conn.close()
    proxy.shutdown()
    up.shutdown()
    print(f"fault_proxy selftest: {checks} checks passed (forwarding, keep-alive, before/after "
          f"faults, reproducible decisions, stats, serve)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="run the proxy")
    p.add_argument("--upstream", required=True, help="http://HOST:PORT of the catalog")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--rate", type=float, default=0.0, help="share of eligible requests faulted (0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--after-share", type=float, default=0.5,
                   help="share of the faults that are 'after' (applied, answer lost)")
    p.add_argument("--fault-reads", action="store_true", help="also fault GET/HEAD (before only)")
    p.add_argument("--quiet", action="store_true", help="no request log")
    sub.add_parser("selftest", help="check the proxy against an in-process upstream")
    a = ap.parse_args(argv)
    return {"serve": cmd_serve, "selftest": cmd_selftest}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
