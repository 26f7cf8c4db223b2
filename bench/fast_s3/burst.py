#!/usr/bin/env python3
"""burst.py: N concurrent S3 PUTs (then GETs) against an S3 endpoint, from a light client
(raw http.client, one connection per thread, unsigned path-style requests), to measure an
emulator's own cost per request. With bench/latency_server.py's delayed port and the model off,
the trace's emu_ms is the emulator's time per request.

  burst.py --endpoint http://127.0.0.1:PORT [--n 404] [--threads 64] [--size 4000] [--bucket b]
           [--op PUT,GET] [--server-pid PID] [--sign]

--server-pid: the emulator's own CPU per request (its utime + stime over the run / requests),
the figure in latency_server.py's docstring. --sign: SigV4 with botocore (latency-s3 checks
signatures; moto does not, and takes a static header, which costs the client less). E.g.
  latency_server.py serve --model off --port-file /tmp/p &   # then the Rust child's pid:
  burst.py --endpoint http://127.0.0.1:$(jq .delayed /tmp/p) --server-pid PID --sign
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import statistics
import threading
import time
import urllib.request
from urllib.parse import urlparse


def cpu(pid: int | None) -> float:
    """CPU seconds of a process and its threads (and waited-for children), from /proc."""
    if not pid:
        return 0.0
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--n", type=int, default=404)
    ap.add_argument("--threads", type=int, default=64)
    ap.add_argument("--size", type=int, default=4000)
    ap.add_argument("--bucket", default="burst")
    ap.add_argument("--op", default="PUT,GET")
    ap.add_argument("--server-pid", type=int, help="report this process's CPU time per request "
                    "(utime + stime from /proc, children included)")
    ap.add_argument("--sign", action="store_true", help="SigV4-sign (botocore) instead of a "
                    "static Authorization header (moto does not check signatures)")
    a = ap.parse_args()
    sign = None
    if a.sign:
        from botocore.auth import S3SigV4Auth
        from botocore.awsrequest import AWSRequest
        from botocore.credentials import Credentials
        signer = S3SigV4Auth(Credentials("testing", "testing"), "s3", "us-east-1")

        def sign(method, path, headers, data):
            r = AWSRequest(method=method, url=a.endpoint + path, data=data, headers=headers)
            r.headers["x-amz-content-sha256"] = "UNSIGNED-PAYLOAD"
            signer.add_auth(r)
            return dict(r.headers.items())
    STATIC = {"Authorization": "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/"
              "aws4_request, SignedHeaders=host, Signature=00",
              "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": "20260101T000000Z"}

    def req(cc, method, path, data=None, headers=None):
        h = dict(headers or {})
        h = sign(method, path, h, data) if sign else {**h, **STATIC}
        cc.request(method, path, body=data, headers=h)
        r = cc.getresponse()
        r.read()
        return r.status
    u = urlparse(a.endpoint)
    body = b"x" * a.size

    def conn():
        return http.client.HTTPConnection(u.hostname, u.port, timeout=120)

    st = req(conn(), "PUT", f"/{a.bucket}")
    assert st < 300 or st == 409, f"create bucket: {st}"
    out = {}
    for op in a.op.split(","):
        lock = threading.Lock()
        todo = list(range(a.n))
        lat, errors = [], []

        def worker():
            cc = conn()
            while True:
                with lock:
                    if not todo:
                        return
                    i = todo.pop()
                t = time.perf_counter()
                key = f"/{a.bucket}/prefix/part={i % 200}/obj-{i:05d}.parquet"
                if op == "PUT":
                    st = req(cc, "PUT", key, body, {"Content-Length": str(len(body))})
                else:
                    st = req(cc, "GET", key, None, {"Range": f"bytes=0-{a.size // 2}"})
                with lock:
                    lat.append((time.perf_counter() - t) * 1000)
                    if st >= 300:
                        errors.append(st)

        cpu0 = cpu(a.server_pid)
        t0 = time.perf_counter()
        ts = [threading.Thread(target=worker) for _ in range(a.threads)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        wall = (time.perf_counter() - t0) * 1000
        cpu1 = cpu(a.server_pid)
        lat.sort()
        out[op] = {"n": a.n, "threads": a.threads, "size": a.size, "wall_ms": round(wall, 1),
                   "errors": len(errors), "per_request_ms": round(wall / a.n, 3),
                   "client_latency_ms_median": round(statistics.median(lat), 1),
                   "client_latency_ms_p95": round(lat[int(0.95 * len(lat))], 1)}
        if a.server_pid:
            out[op]["server_cpu_ms_per_request"] = round((cpu1 - cpu0) * 1000 / a.n, 3)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
