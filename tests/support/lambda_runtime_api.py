#!/usr/bin/env python3
"""lambda_runtime_api: an emulator of the AWS Lambda Runtime API, for running a function binary
built on a custom runtime (here `lambda_runtime`) outside Lambda and without Docker.

  lambda_runtime_api.py [--host 127.0.0.1] [--port 0] [--port-file FILE]
                        [--event FILE_OR_DIR ...] [--results FILE] [--exit-when-done]
                        [--function-name NAME] [--timeout-s 900]

Start it, then start the function with AWS_LAMBDA_RUNTIME_API=127.0.0.1:PORT (plus the variables
Lambda sets: AWS_LAMBDA_FUNCTION_NAME, AWS_LAMBDA_FUNCTION_MEMORY_SIZE,
AWS_LAMBDA_FUNCTION_VERSION, AWS_LAMBDA_LOG_STREAM_NAME, AWS_LAMBDA_LOG_GROUP_NAME).

The Runtime API (https://docs.aws.amazon.com/lambda/latest/dg/runtimes-api.html), as the function
sees it:
  GET  /2018-06-01/runtime/invocation/next            blocks until there is an event; answers with
       the event as body and Lambda-Runtime-Aws-Request-Id, -Deadline-Ms, -Invoked-Function-Arn,
       -Trace-Id headers
  POST /2018-06-01/runtime/invocation/{id}/response   the function's result          -> 202
  POST /2018-06-01/runtime/invocation/{id}/error      {"errorType", "errorMessage"}  -> 202
  POST /2018-06-01/runtime/init/error                 initialisation failed          -> 202
Events are served one at a time, in the order given, each to one `next`.

Events come from --event (files, or directories of *.json taken in name order) and/or from the
control endpoint, which a test uses to invoke the warm function again and again:
  POST /_emulator/invoke[?timeout_s=N][&deadline_s=D]  body: the event; waits for the outcome
                                        and returns it (deadline_s: this invocation's function
                                        timeout, the Deadline-Ms header, instead of --timeout-s)
  GET  /_emulator/status                {"first_next_ms", "next_requests", "init_error", "results", ...}
  GET  /_emulator/results               every outcome so far
Each outcome is one JSON object, printed to stdout as a line and appended to --results:
  {"seq", "request_id", "outcome": "response" | "error" | "init_error" | "timeout",
   "body": <the response or error JSON>, "error_type", "served_at_ms", "finished_at_ms",
   "duration_ms"}   (served = handed to the function by `next`; finished = its response arrived)
With --exit-when-done the emulator exits once every --event has an outcome (the function's next
`next` then fails and the function exits); otherwise it keeps serving until killed.
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

PREFIX = "/2018-06-01/runtime"


def now_ms() -> int:
    return int(time.time() * 1000)


class Invocation:
    def __init__(self, seq: int, event: bytes):
        self.seq = seq
        self.event = event
        self.request_id = str(uuid.uuid4())
        self.done = threading.Event()
        self.result: dict | None = None
        self.served_at_ms: int | None = None
        # This invocation's function timeout (seconds), if not the emulator's --timeout-s.
        self.deadline_s: float | None = None


class Emulator:
    def __init__(self, a):
        self.a = a
        self.arn = f"arn:aws:lambda:us-east-1:123456789012:function:{a.function_name}"
        self.pending: queue.Queue[Invocation] = queue.Queue()
        self.inflight: dict[str, Invocation] = {}
        self.results: list[dict] = []
        self.lock = threading.Lock()
        self.seq = 0
        self.started_ms = now_ms()
        self.next_requests: list[int] = []
        self.init_error: dict | None = None
        self.preloaded: list[Invocation] = []
        self.all_done = threading.Event()

    def submit(self, event: bytes, deadline_s: float | None = None) -> Invocation:
        with self.lock:
            self.seq += 1
            inv = Invocation(self.seq, event)
            inv.deadline_s = deadline_s
        self.pending.put(inv)
        return inv

    def finish(self, inv: Invocation, outcome: str, body, error_type: str | None = None):
        fin = now_ms()
        result = {
            "seq": inv.seq, "request_id": inv.request_id, "outcome": outcome, "body": body,
            "error_type": error_type, "served_at_ms": inv.served_at_ms, "finished_at_ms": fin,
            "duration_ms": (fin - inv.served_at_ms) if inv.served_at_ms is not None else None,
        }
        with self.lock:
            if inv.result is not None:
                return  # already finished (e.g. timed out, then answered)
            inv.result = result
            self.inflight.pop(inv.request_id, None)
            self.results.append(result)
            line = json.dumps(result, ensure_ascii=False)
            print(line, flush=True)
            if self.a.results:
                with open(self.a.results, "a", encoding="utf-8") as f:
                    f.write(line + "\n")
            if self.preloaded and all(i.result is not None for i in self.preloaded):
                self.all_done.set()
        inv.done.set()

    def status(self) -> dict:
        with self.lock:
            return {
                "started_at_ms": self.started_ms,
                "first_next_ms": self.next_requests[0] if self.next_requests else None,
                "next_requests": list(self.next_requests),
                "init_error": self.init_error,
                "inflight": [i.request_id for i in self.inflight.values()],
                "queued": self.pending.qsize(),
                "results": len(self.results),
            }


def parse_body(raw: bytes):
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return raw.decode("utf-8", "replace")


def make_handler(emu: Emulator):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in two writes: with Nagle's algorithm the body waits for the
        # client's (delayed, up to 40 ms) ACK of the headers, and an invocation's event reached
        # the function ~40 ms after `served_at_ms`, on some runs and not others.
        disable_nagle_algorithm = True

        def log_message(self, fmt, *args):  # quiet: outcomes are what matter
            pass

        def send(self, code: int, body=None, headers: dict | None = None, raw: bytes | None = None):
            data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.end_headers()
            self.wfile.write(data)
            self.wfile.flush()

        def read_body(self) -> bytes:
            n = int(self.headers.get("Content-Length") or 0)
            if n:
                return self.rfile.read(n)
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                out = b""
                while True:
                    size = int(self.rfile.readline().strip().split(b";")[0], 16)
                    if size == 0:
                        while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                            pass  # trailers
                        return out
                    out += self.rfile.read(size)
                    self.rfile.readline()
            return b""

        def do_GET(self):
            path = urlparse(self.path).path
            if path == f"{PREFIX}/invocation/next":
                with emu.lock:
                    emu.next_requests.append(now_ms())
                inv = emu.pending.get()
                inv.served_at_ms = now_ms()
                with emu.lock:
                    emu.inflight[inv.request_id] = inv
                timeout_s = inv.deadline_s if inv.deadline_s is not None else emu.a.timeout_s
                deadline = inv.served_at_ms + int(timeout_s * 1000)
                self.send(200, raw=inv.event, headers={
                    "Lambda-Runtime-Aws-Request-Id": inv.request_id,
                    "Lambda-Runtime-Deadline-Ms": str(deadline),
                    "Lambda-Runtime-Invoked-Function-Arn": emu.arn,
                    "Lambda-Runtime-Trace-Id":
                        f"Root=1-{int(time.time()):08x}-{uuid.uuid4().hex[:24]};Parent={uuid.uuid4().hex[:16]};Sampled=0",
                })
            elif path == "/_emulator/status":
                self.send(200, emu.status())
            elif path == "/_emulator/results":
                with emu.lock:
                    self.send(200, list(emu.results))
            else:
                self.send(404, {"errorMessage": f"unknown path {path}", "errorType": "NotFound"})

        def do_POST(self):
            url = urlparse(self.path)
            path = url.path
            raw = self.read_body()
            parts = path[len(PREFIX):].strip("/").split("/") if path.startswith(PREFIX) else []
            if len(parts) == 3 and parts[0] == "invocation" and parts[2] in ("response", "error"):
                with emu.lock:
                    inv = emu.inflight.get(parts[1])
                if inv is None:
                    self.send(400, {"errorMessage": f"unknown or finished request id {parts[1]}",
                                    "errorType": "InvalidRequestID"})
                    return
                self.send(202, {"status": "OK"})
                emu.finish(inv, parts[2], parse_body(raw),
                           self.headers.get("Lambda-Runtime-Function-Error-Type"))
            elif parts == ["init", "error"]:
                self.send(202, {"status": "OK"})
                err = {"at_ms": now_ms(), "body": parse_body(raw),
                       "error_type": self.headers.get("Lambda-Runtime-Function-Error-Type")}
                with emu.lock:
                    emu.init_error = err
                    waiting = list(emu.inflight.values())
                print(json.dumps({"outcome": "init_error", **err}), flush=True)
                # Lambda would tear the environment down: fail whatever waits.
                while True:
                    try:
                        waiting.append(emu.pending.get_nowait())
                    except queue.Empty:
                        break
                for inv in waiting:
                    emu.finish(inv, "init_error", err["body"], err["error_type"])
            elif path == "/_emulator/invoke":
                timeout = float(parse_qs(url.query).get("timeout_s", ["600"])[0])
                with emu.lock:
                    init_error = emu.init_error
                if init_error is not None:
                    self.send(200, {"outcome": "init_error", "body": init_error["body"],
                                    "error_type": init_error["error_type"]})
                    return
                deadline_s = parse_qs(url.query).get("deadline_s")
                inv = emu.submit(raw, float(deadline_s[0]) if deadline_s else None)
                if not inv.done.wait(timeout):
                    emu.finish(inv, "timeout", None)
                self.send(200, inv.result)
            else:
                self.send(404, {"errorMessage": f"unknown path {path}", "errorType": "NotFound"})

    return Handler


def event_files(specs: list[str]) -> list[Path]:
    out = []
    for s in specs:
        p = Path(s)
        out.extend(sorted(p.glob("*.json")) if p.is_dir() else [p])
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=0, help="0: any free port")
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--event", action="append", default=[], help="event file or directory (repeatable)")
    ap.add_argument("--results", help="append each outcome to this file (JSON lines)")
    ap.add_argument("--exit-when-done", action="store_true", help="exit once every --event has an outcome")
    ap.add_argument("--function-name", default="dms2iceberg-ingest")
    ap.add_argument("--timeout-s", type=int, default=900, help="function timeout (deadline header)")
    a = ap.parse_args(argv)

    emu = Emulator(a)
    for f in event_files(a.event):
        emu.preloaded.append(emu.submit(f.read_bytes()))
    server = ThreadingHTTPServer((a.host, a.port), make_handler(emu))
    server.daemon_threads = True
    host, port = server.server_address[:2]
    print(json.dumps({"listening": f"{host}:{port}", "events": len(emu.preloaded)}), flush=True)
    if a.port_file:
        tmp = f"{a.port_file}.tmp{os.getpid()}"
        Path(tmp).write_text(f"{port}\n")
        os.replace(tmp, a.port_file)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        if a.exit_when_done:
            if emu.preloaded:
                emu.all_done.wait()
            else:
                return 0
        else:
            threading.Event().wait()
    except KeyboardInterrupt:
        pass
    failed = sum(1 for i in emu.preloaded if i.result and i.result["outcome"] != "response")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
