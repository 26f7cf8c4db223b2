#!/usr/bin/env python3
"""latency.py: the real ingest Lambda against S3 + Glue answering with AWS-like latency.
Run through `bench/latency` (bench/run's venv and release build, then this script).

What it does:
1. starts bench/latency_server.py (S3 + Glue behind the delay layer: by default S3 in memory in
   bench/fast_s3's Rust server, built with cargo on first use, and Glue on moto; `--s3-backend
   moto` for moto behind the Python layer, as before; the model and the reasons are in its
   docstring, the model in every result file) and generates the DMS workloads (bench/gen.py);
2. loads each base table once (the release CLI, `--catalog glue`, on the emulator's undelayed
   port), then gives every case its own copy: a Glue database per case whose `orders` table
   points at the base's metadata.json (files are immutable and uniquely named, so copies can
   write next to each other), and its own landing bucket;
3. drives the release `dms2iceberg-ingest` through the Runtime API emulator
   (tests/support/lambda_runtime_api.py): for each change file, upload it, send the EventBridge
   `Object Created` event, wait for the response:
     warm  one function process for the K files (the first is reported apart: it fills the
           caches, as the first invocation of a new sandbox does);
     cold  a fresh process (and Runtime API) per file; latency from process spawn;
4. verifies each case's final table (PyIceberg through Glue, against gen.py's expected state:
   every row and column up to 1M rows, count + checksums above) before any figure counts;
5. analyses each file's request trace (see `analyse`): requests by kind, bytes, waves (groups of
   requests in flight together), longest chain, time not covered by any request (CPU), the
   model's floor for the protocol, and which sequential waves no dependency forces.

Results: bench/results/<date>-latency.{json,md}; full traces of every file in
bench/work/latency/traces/<case>.jsonl.

Parallel full load (`--full-load FILES:MB [--functions 1,4,16]`, bench/latency_fullload.py; the
change-file cases above do not run then): one DMS full load of FILES CSV files of MB MiB into a
new table, applied by N concurrent ingest functions (each under its own Runtime API emulator,
the events in a queue) for each N; measures wall time, GB/s, commits, lost swaps and replans,
peak RSS per function and every invocation's latency and CPU, verifies each table, and models
what N functions with a vCPU each do (this machine has 2 cores), with a projection to a 1 TB
load. Results: bench/results/<date>-latency-fullload.{json,md} (or -<tag> with --tag).
"""
from __future__ import annotations

import argparse
import bisect
import datetime as dt
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench as B  # noqa: E402  (workloads, measuring helpers, machine/versions)
import latency_server as LS  # noqa: E402

ROOT = HERE.parent
PY = sys.executable
EMULATOR = ROOT / "tests" / "support" / "lambda_runtime_api.py"
WAREHOUSE = "s3://warehouse/wh"
CONFIG_BUCKET = "bench-config"
PRIMARY_KEY = 'primary_key = ["order_id"]'
ORDERING = 'ordering_column = "updated_at"'
PARTITION = 'partition_by = ["bucket({n}, order_id)"]'
CREDS = {"AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
         "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
log = B.log


# ---------------------------------------------------------------------------------------------
# Cases


def label_rows(n: int) -> str:
    return f"{n // 1_000_000}m" if n >= 1_000_000 else f"{n // 1000}k"


class Case:
    def __init__(self, rows, mode, model, files, partitions=0, ordering=False, changes=10_000):
        self.rows, self.mode, self.model, self.files = rows, mode, model, files
        self.partitions, self.ordering, self.changes = partitions, ordering, changes
        self.name = (f"n{label_rows(rows)}" + (f"_p{partitions}" if partitions else "")
                     + ("_ord" if ordering else "") + f"_{mode}_{'on' if model != 'off' else 'off'}")

    @property
    def base(self) -> tuple[int, int]:
        return (self.rows, self.partitions)

    def describe(self) -> dict:
        return {"case": self.name, "rows": self.rows, "mode": self.mode, "model": self.model,
                "files": self.files, "partitions": self.partitions, "ordering": self.ordering,
                "changes": self.changes}


def plan(a) -> list[Case]:
    sizes = [int(x) for x in a.sizes.split(",")]
    if a.big and 10_000_000 not in sizes:
        sizes.append(10_000_000)
    cases = []
    for model in ("issue-13", "off"):
        if model == "off" and a.model_only:
            continue
        for n in sizes:
            for mode in ("warm", "cold"):
                cases.append(Case(n, mode, model, a.files, changes=a.changes))
        if a.partitions:
            cases.append(Case(100_000, "warm", model, a.files, a.partitions, changes=a.changes))
            cases.append(Case(100_000, "cold", model, a.partition_cold_files, a.partitions,
                              changes=a.changes))
    # The ordering-column and table-size baselines (issue 13 goals 2 and 3): model off.
    if not a.no_ordering:
        for n in sizes:
            if n < 1_000_000:
                continue
            for mode in ("warm", "cold"):
                cases.append(Case(n, mode, "off", a.files, ordering=True, changes=a.changes))
    if a.only:
        keep = set(a.only.split(","))
        cases = [c for c in cases if c.name in keep]
    return cases


# ---------------------------------------------------------------------------------------------
# The emulated AWS


class Aws:
    def __init__(self, work: Path, model: str, s3_backend: str = "fast", s3_store: str = "mem"):
        import boto3
        from botocore.config import Config
        self.port_file = work / "latency-server.port"
        self.port_file.unlink(missing_ok=True)
        self.proc = subprocess.Popen([PY, HERE / "latency_server.py", "serve", "--quiet",
                                      "--port-file", self.port_file, "--model", model,
                                      "--s3-backend", s3_backend, "--s3-store", s3_store,
                                      "--s3-root", work / "s3"],
                                     stdout=open(work / "latency-server.log", "w"),
                                     stderr=subprocess.STDOUT, start_new_session=True)
        end = time.time() + 120
        while not (self.port_file.exists() and self.port_file.read_text().strip()):
            if self.proc.poll() is not None or time.time() > end:
                raise SystemExit(f"latency_server.py did not start: "
                                 f"{(work / 'latency-server.log').read_text()[-2000:]}")
            time.sleep(0.05)
        ports = json.loads(self.port_file.read_text())
        self.s3_backend = ports.get("s3_backend", "moto")
        self.delayed = f"http://127.0.0.1:{ports['delayed']}"
        self.direct = f"http://127.0.0.1:{ports['direct']}"
        cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 3})
        kw = dict(endpoint_url=self.direct, region_name="us-east-1",
                  aws_access_key_id="testing", aws_secret_access_key="testing", config=cfg)
        self.s3 = boto3.client("s3", **kw)
        self.glue = boto3.client("glue", **kw)
        for b in ("warehouse", CONFIG_BUCKET):
            self.s3.create_bucket(Bucket=b)

    def stop(self):
        B.stop(self.proc)

    def control(self, path: str, body: dict | None = None) -> dict:
        req = urllib.request.Request(f"{self.direct}/_latency/{path}",
                                     data=None if body is None else json.dumps(body).encode(),
                                     method="GET" if body is None else "POST")
        with urllib.request.urlopen(req, timeout=120) as r:
            return json.load(r)

    def set_model(self, model: str) -> dict:
        return self.control("config", {"model": model})

    def trace_next(self) -> int:
        return self.control("trace?since=1000000000")["next"]

    def trace_since(self, i: int) -> list[dict]:
        return self.control(f"trace?since={i}")["requests"]

    def env(self, endpoint: str) -> dict:
        # Without RUST_BACKTRACE, as in Lambda (see bench.py `measure`).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("AWS_") and k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}
        env.update(CREDS)
        env.update({"AWS_ENDPOINT_URL": endpoint, "DMS2ICEBERG_S3_PATH_STYLE": "true"})
        return env


def table_config(c: Case) -> str:
    lines = ['[source]', 'bucket_folder = "dms"', '', '[tables."shop.orders"]', PRIMARY_KEY]
    if c.ordering:
        lines.append(ORDERING)
    if c.partitions:
        lines.append(PARTITION.format(n=c.partitions))
    return "\n".join(lines) + "\n"


def base_db(base: tuple[int, int]) -> str:
    n, p = base
    return f"base_{label_rows(n)}" + (f"_p{p}" if p else "")


def load_base(aws: Aws, base: tuple[int, int], meta: dict, work: Path, timeout: float) -> dict:
    """The base table, loaded by the release CLI through Glue (undelayed port)."""
    n, p = base
    db = base_db(base)
    cfg = work / f"{db}.toml"
    body = table_config(Case(n, "warm", "off", 1, p))
    cfg.write_text(body.replace(PRIMARY_KEY, f'{PRIMARY_KEY}\ntarget = "{db}.orders"'))
    r = B.measure([B.CLI, "--catalog", "glue", "ingest", *meta["load_files"], "--warehouse",
                   WAREHOUSE, "--config", cfg, "--format", "json"], timeout,
                  env=aws.env(aws.direct), logfile=work / "logs" / "load.log")
    if not r.ok:
        raise SystemExit(f"loading {db} failed: {r.err[-3000:]}")
    return {"db": db, "load_s": r.wall_s}


def copy_table(aws: Aws, base: tuple[int, int], db: str) -> None:
    t = aws.glue.get_table(DatabaseName=base_db(base), Name="orders")["Table"]
    ti = {k: t[k] for k in ("Name", "Description", "Owner", "Retention", "StorageDescriptor",
                            "PartitionKeys", "TableType", "Parameters") if k in t}
    aws.glue.create_database(DatabaseInput={"Name": db})
    aws.glue.create_table(DatabaseName=db, TableInput=ti)


# ---------------------------------------------------------------------------------------------
# Driving the function


def function_env(aws: Aws, c: Case, runtime_port: int, spool: Path) -> dict:
    env = aws.env(aws.delayed)
    env.update({
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{runtime_port}",
        "AWS_LAMBDA_FUNCTION_NAME": "dms2iceberg-ingest",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(B.LAMBDA_BUDGET_MB),
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_LOG_STREAM_NAME": "bench", "AWS_LAMBDA_LOG_GROUP_NAME": "bench",
        "DMS2ICEBERG_WAREHOUSE": WAREHOUSE,
        "DMS2ICEBERG_GLUE_DATABASE": c.name,
        "DMS2ICEBERG_CONFIG": f"s3://{CONFIG_BUCKET}/{c.name}.toml",
        "DMS2ICEBERG_SPOOL_DIR": str(spool),
    })
    return env


def event_for(bucket: str, key: str, size: int, i: int) -> dict:
    return {"version": "0", "id": f"bench-{i}", "detail-type": "Object Created",
            "source": "aws.s3", "account": "123456789012", "time": "2026-12-01T12:00:00Z",
            "region": "us-east-1", "resources": [f"arn:aws:s3:::{bucket}"],
            "detail": {"version": "0", "bucket": {"name": bucket},
                       "object": {"key": key, "size": size}, "reason": "PutObject"}}


def http_json(url: str, body: bytes | None = None, timeout: float = 60) -> dict:
    req = urllib.request.Request(url, data=body, method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


class Runtime:
    """A Runtime API emulator and one function process under it."""

    def __init__(self, aws: Aws, c: Case, d: Path, tag: str, events: list[dict] | None = None):
        d.mkdir(parents=True, exist_ok=True)
        port_file = d / f"rt-{tag}.port"
        args = [PY, EMULATOR, "--port", "0", "--port-file", port_file]
        if events:
            ev = d / f"ev-{tag}"
            ev.mkdir(exist_ok=True)
            for i, e in enumerate(events):
                (ev / f"{i:03d}.json").write_text(json.dumps(e))
            args += ["--event", ev]
        self.emu = subprocess.Popen(args, stdout=subprocess.DEVNULL,
                                    stderr=open(d / f"rt-{tag}.log", "w"), start_new_session=True)
        self.port = B.wait_port(port_file, self.emu, "lambda_runtime_api.py")
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = d / f"fn-{tag}.log"
        self.spawned = time.time()
        self.fn = subprocess.Popen([B.LAMBDA], env=function_env(aws, c, self.port, d / f"spool-{tag}"),
                                   stdout=open(self.log_path, "w"), stderr=subprocess.STDOUT,
                                   start_new_session=True)
        self.log_pos = 0

    def wait_init(self, timeout: float = 120) -> float:
        end = time.time() + timeout
        while time.time() < end:
            st = http_json(f"{self.url}/_emulator/status")
            if st.get("init_error"):
                raise RuntimeError(f"function init failed: {st['init_error']}")
            if st.get("first_next_ms"):
                return st["first_next_ms"] / 1000 - self.spawned
            if self.fn.poll() is not None:
                break
            time.sleep(0.01)
        raise RuntimeError(f"function did not start: {self.log_path.read_text()[-2000:]}")

    def invoke(self, event: dict, timeout: float) -> dict:
        return http_json(f"{self.url}/_emulator/invoke?timeout_s={timeout}",
                         json.dumps(event).encode(), timeout + 30)

    def wait_result(self, timeout: float) -> dict:
        end = time.time() + timeout
        while time.time() < end:
            res = http_json(f"{self.url}/_emulator/results")
            if res:
                return res[0]
            if self.fn.poll() is not None:
                break
            time.sleep(0.005)
        return {"outcome": "none", "body": self.log_path.read_text()[-2000:]}

    def new_output(self) -> list[dict]:
        """EMF metric lines the function printed since the last call."""
        text = self.log_path.read_text()
        new, self.log_pos = text[self.log_pos:], len(text)
        out = []
        for line in new.splitlines():
            if line.startswith("{") and '"_aws"' in line:
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def stop(self):
        B.stop(self.fn)
        B.stop(self.emu)


def run_case(aws: Aws, c: Case, meta: dict, work: Path, timeout: float) -> dict:
    d = work / "cases" / c.name
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    bucket = "land-" + c.name.replace("_", "-")
    aws.s3.create_bucket(Bucket=bucket)
    aws.s3.put_object(Bucket=CONFIG_BUCKET, Key=f"{c.name}.toml", Body=table_config(c).encode())
    copy_table(aws, c.base, c.name)
    aws.set_model(c.model)
    files, all_trace = [], []
    rt = None
    try:
        if c.mode == "warm":
            rt = Runtime(aws, c, d, "warm")
            init_s = rt.wait_init()
        for i, path in enumerate(meta["change_files"]):
            key = "dms/shop/orders/" + Path(path).name
            aws.s3.upload_file(path, bucket, key)
            ev = event_for(bucket, key, os.path.getsize(path), i)
            since = aws.trace_next()
            if c.mode == "warm":
                o = rt.invoke(ev, timeout)
                window = (o["served_at_ms"] / 1000, o["finished_at_ms"] / 1000)
                emf = rt.new_output()
                spawned = None
            else:
                rt = Runtime(aws, c, d, f"cold{i}", [ev])
                o = rt.wait_result(timeout)
                spawned = rt.spawned
                emf = rt.new_output()
                rt.stop()
                rt = None
                window = (spawned, o["finished_at_ms"] / 1000) if o.get("finished_at_ms") else None
            trace = aws.trace_since(since)
            if o.get("outcome") != "response" or window is None:
                return {**c.describe(), "verified": False,
                        "problems": [f"{Path(path).name}: {o.get('outcome')}: "
                                     f"{str(o.get('body'))[:1500]}"]}
            applied = sum(m.get("FilesApplied", 0) for m in emf)
            rec = {"file": Path(path).name, "index": i,
                   "role": ("first of process" if i == 0 else "warm") if c.mode == "warm" else "cold",
                   "served": o["served_at_ms"] / 1000, "finished": o["finished_at_ms"] / 1000,
                   "spawned": spawned, "handler_ms": o["duration_ms"],
                   "latency_ms": (window[1] - window[0]) * 1000,
                   "files_applied": applied, "emf": {k: v for m in emf for k, v in m.items()
                                                     if k.endswith("Milliseconds") or k.startswith("Files")
                                                     or k.startswith("Rows") or k.startswith("Commit")}}
            for e in trace:
                e["file"] = i
            all_trace += trace
            rec["analysis"] = analyse(trace, window, (o["served_at_ms"] / 1000), all_trace, c)
            files.append(rec)
            if applied != 1:
                return {**c.describe(), "verified": False, "files_detail": files,
                        "problems": [f"{Path(path).name}: the invocation applied {applied} files, "
                                     f"expected 1 (EMF: {emf})"]}
            log(f"    {c.name} {rec['file']}: {rec['latency_ms']:.0f} ms, "
                f"{rec['analysis']['requests']} requests, {rec['analysis']['waves']} waves, "
                f"cpu {rec['analysis']['uncovered_ms']:.0f} ms")
        if c.mode == "warm":
            out = {"init_s": init_s}
        else:
            out = {}
    finally:
        if rt is not None:
            rt.stop()
        aws.set_model("off")
    (work / "traces").mkdir(exist_ok=True)
    with open(work / "traces" / f"{c.name}.jsonl", "w") as fh:
        for e in all_trace:
            fh.write(json.dumps(e) + "\n")
    v = B.measure([PY, B.PEERS, "verify", "--tool", "dms2iceberg", "--table", d, "--meta",
                   Path(meta["dir"]) / "meta.json", "--glue-endpoint", aws.direct,
                   "--glue-table", f"{c.name}.orders"] + (["--full"] if c.rows <= 1_000_000 else []),
                  timeout, logfile=d / "verify.log")
    vj = v.last_json() if v.ok else {"ok": False, "problems": [v.err[-1500:]]}
    shutil.rmtree(d, ignore_errors=True)
    return {**c.describe(), **out, "files_detail": files, "verified": vj.get("ok"),
            "problems": vj.get("problems"), "compared": vj.get("compared"),
            "reader": vj.get("reader")}


# ---------------------------------------------------------------------------------------------
# Trace analysis


def object_class(e: dict) -> str:
    """What a request is about, from its kind and key (our table layout and the bench's
    buckets): config, DMS listing/object, metadata.json, manifest list, manifest, data or
    delete file; Glue calls are their operation."""
    kind, key, bucket = e["kind"], e.get("key") or "", e.get("bucket") or ""
    if kind.startswith("Glue") or kind.startswith("other"):
        return kind
    if kind == "S3 LIST":
        return "S3 LIST DMS folder" if bucket.startswith("land-") else f"S3 LIST {bucket}"
    op = kind.split(" ", 1)[1]
    if bucket == CONFIG_BUCKET:
        what = "config"
    elif bucket.startswith("land-"):
        what = "DMS object"
    elif key.endswith(".metadata.json"):
        what = "metadata.json"
    elif "/metadata/snap-" in key:
        what = "manifest list"
    elif key.endswith(".avro"):
        what = "manifest"
    elif key.endswith(".parquet"):
        what = "delete file" if is_delete_file(key) else "data file"
    else:
        what = "other object"
    return f"S3 {op} {what}"


def is_delete_file(key: str) -> bool:
    name = key.rsplit("/", 1)[-1]
    return "delete" in name or name.startswith("pos-") or "-deletes" in name


WRITE_OPS = ("PUT", "MPU part", "MPU create", "MPU complete", "COPY")


def is_write(e: dict) -> bool:
    return any(e["kind"] == f"S3 {w}" for w in WRITE_OPS)


def waves_of(reqs: list[dict]) -> list[list[dict]]:
    """Groups of requests in flight together: connected components of the overlap of their
    [start, end) intervals, in time order."""
    waves, cur, cur_end = [], [], None
    for e in sorted(reqs, key=lambda e: e["start"]):
        if cur and e["start"] < cur_end:
            cur.append(e)
            cur_end = max(cur_end, e["end"])
        else:
            if cur:
                waves.append(cur)
            cur, cur_end = [e], e["end"]
    if cur:
        waves.append(cur)
    return waves


def longest_chain(reqs: list[dict]) -> int:
    """The most requests one after another (each starting after the previous ended)."""
    if not reqs:
        return 0
    by_start = sorted(reqs, key=lambda e: e["start"])
    by_end = sorted(range(len(by_start)), key=lambda i: by_start[i]["end"])
    ends = [by_start[i]["end"] for i in by_end]
    chain = [0] * len(by_start)
    best_before, p = 0, 0
    for i, e in enumerate(by_start):
        while p < len(by_end) and ends[p] <= e["start"]:
            best_before = max(best_before, chain[by_end[p]])
            p += 1
        chain[i] = best_before + 1
    return max(chain)


# Which earlier request a request really needs (by object class). A request whose wave follows a
# wave holding none of these could have been in flight earlier: the wave is not forced.
DMS_READ = "S3 GET DMS object"
PRED = {
    "S3 LIST DMS folder": ["S3 GET config"],
    "Glue GetTable": ["S3 GET config"],
    "S3 GET metadata.json": ["Glue GetTable"],
    "S3 GET manifest list": ["S3 GET metadata.json"],
    "S3 GET manifest": ["S3 GET manifest list"],
    "S3 GET delete file": ["S3 GET manifest"],
    "S3 HEAD data file": ["S3 GET manifest"],
    "S3 GET data file": ["S3 GET manifest", "S3 GET data file", "S3 HEAD data file"],
    DMS_READ: ["S3 LIST DMS folder", "S3 GET metadata.json"],
    "S3 HEAD DMS object": ["S3 LIST DMS folder"],
    # What is written needs the changes (the DMS object) and the lookup (key columns, deletes)
    # computed; nothing written needs another write to have finished: a manifest holds the
    # sizes and statistics of files the writer already holds in memory, and so on up the tree.
    # Only the catalog swap must wait for every write to be durable.
    "S3 PUT data file": [DMS_READ, "S3 GET data file", "S3 GET delete file"],
    "S3 PUT delete file": [DMS_READ, "S3 GET data file", "S3 GET delete file"],
    "S3 PUT manifest": [DMS_READ, "S3 GET data file", "S3 GET delete file"],
    "S3 PUT manifest list": [DMS_READ, "S3 GET manifest", "S3 GET data file", "S3 GET delete file"],
    "S3 PUT metadata.json": [DMS_READ, "S3 GET manifest list", "S3 GET data file",
                             "S3 GET delete file"],
    "Glue UpdateTable": ["S3 PUT data file", "S3 PUT delete file", "S3 PUT manifest",
                         "S3 PUT manifest list", "S3 PUT metadata.json"],
}


def analyse(trace: list[dict], window: tuple[float, float], served: float,
            process_trace: list[dict], c: Case) -> dict:
    t0, t1 = window
    reqs = [e for e in trace if e["start"] >= t0 - 0.002 and e["end"] <= t1 + 0.002]
    for e in reqs:
        e["class"] = object_class(e)
    kinds: dict[str, int] = {}
    classes: dict[str, int] = {}
    for e in reqs:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
        classes[e["class"]] = classes.get(e["class"], 0) + 1
    bytes_read = sum(e["bytes_out"] for e in reqs if e["kind"] == "S3 GET")
    bytes_written = sum(e["bytes_in"] for e in reqs if is_write(e))
    waves = waves_of(reqs)
    covered = sum(max(e["end"] for e in w) - w[0]["start"] for w in waves)
    # Requests that need not be made at all: reading back what this process wrote, or what it
    # already read (same object, same range), and a second GetTable of the same table.
    earlier = [e for e in process_trace if e["start"] < t0 - 0.002] if c.mode == "warm" else []
    seen_put, seen_get, seen_table = set(), set(), set()

    def remember(e):
        if is_write(e):
            seen_put.add((e["bucket"], e["key"]))
        if e["kind"] in ("S3 GET", "S3 HEAD"):
            seen_get.add((e["bucket"], e["key"], e["range"]))

    for e in sorted(earlier, key=lambda e: e["start"]):
        remember(e)
    for e in sorted(reqs, key=lambda e: e["start"]):
        red = None
        if e["kind"] in ("S3 GET", "S3 HEAD") and (e["bucket"], e["key"]) in seen_put:
            red = "reads back a file this process wrote"
        elif e["kind"] in ("S3 GET", "S3 HEAD") and (e["bucket"], e["key"], e["range"]) in seen_get \
                and e["class"] != "S3 GET config":
            red = "reads again what this process already read"
        elif e["kind"] == "Glue GetTable" and e["key"] in seen_table:
            red = "GetTable again in one invocation (UpdateTable's VersionId guards the commit)"
        e["redundant"] = red
        remember(e)
        if e["kind"] == "Glue GetTable":
            seen_table.add(e["key"])
    # Waves: forced when a request in it needs a request of the wave just before.
    avoidable: dict[str, dict] = {}
    wave_rows = []
    for k, w in enumerate(waves):
        dur = (max(e["end"] for e in w) - w[0]["start"]) * 1000
        wclasses = sorted({e["class"] for e in w})
        forced, why = k == 0, "first"
        if k > 0:
            prev = waves[k - 1]
            for e in w:
                if e.get("redundant"):
                    continue
                need = PRED.get(e["class"], None)
                if need is None:
                    continue
                hit = [q for q in prev if q["class"] in need
                       and (q["class"] != e["class"] or q["key"] == e["key"])]
                if hit:
                    forced, why = True, f"{e['class']} needs {hit[0]['class']}"
                    break
            else:
                why = "no request in it needs the wave before"
        if all(e.get("redundant") for e in w):
            forced, why = False, w[0]["redundant"]
        wave_rows.append({"wave": k + 1, "start_ms": (w[0]["start"] - t0) * 1000, "ms": dur,
                          "requests": len(w), "classes": wclasses, "forced": forced, "why": why})
        if not forced:
            main = max(w, key=lambda e: e["end"] - e["start"])
            label = (f"{main['class']}: {main['redundant']}" if main.get("redundant")
                     else f"{main['class']} after {', '.join(sorted({q['class'] for q in waves[k - 1]}))}")
            a = avoidable.setdefault(label, {"waves": 0, "ms": 0.0})
            a["waves"] += 1
            a["ms"] += dur
    redundant = {}
    for e in reqs:
        if e.get("redundant"):
            r = redundant.setdefault(f"{e['class']}: {e['redundant']}", {"requests": 0})
            r["requests"] += 1
    ports = {e["port"] for e in reqs}
    # The emulator's own time (request in → response ready, before the modelled wait): where it
    # exceeds the model, the figure is the emulator's, not the protocol's.
    put_emu = sorted(e["emu_ms"] for e in reqs if e["kind"] == "S3 PUT")
    emulator = {
        "put_emu_ms_median": statistics.median(put_emu) if put_emu else None,
        "put_emu_ms_p95": put_emu[min(len(put_emu) - 1, int(0.95 * len(put_emu)))] if put_emu else None,
        "put_emu_ms_max": put_emu[-1] if put_emu else None,
        "emu_ms_median": statistics.median(e["emu_ms"] for e in reqs) if reqs else None,
        "over_model": sum(1 for e in reqs if e["model_ms"] > 0 and e["emu_ms"] > e["model_ms"]),
    }
    return {
        "requests": len(reqs), "by_kind": kinds, "by_class": classes,
        "bytes_read": bytes_read, "bytes_written": bytes_written,
        "waves": len(waves), "longest_chain": longest_chain(reqs),
        "max_in_flight": max_in_flight(reqs),
        "covered_ms": covered * 1000, "uncovered_ms": (t1 - t0 - covered) * 1000,
        "before_handler_ms": max(0.0, (served - t0) * 1000),
        "connections": len(ports),
        "floor": floor(reqs, c), "avoidable": avoidable, "redundant": redundant,
        "wave_list": wave_rows, "emulator": emulator,
    }


def max_in_flight(reqs: list[dict]) -> int:
    ev = sorted([(e["start"], 1) for e in reqs] + [(e["end"], -1) for e in reqs],
                key=lambda x: (x[0], x[1]))
    cur = best = 0
    for _, d in ev:
        cur += d
        best = max(best, cur)
    return best


def floor(reqs: list[dict], c: Case) -> dict:
    """The least the model allows for one change file under our commit protocol, with the
    sizes this file's requests actually moved. Chains (→ must follow, ∥ overlap):

      read side, cold:  GetTable → metadata.json → manifest list → manifests (∥) →
                        key reads (∥: delete files, data-file footer → key column chunk)
      read side, warm:  GetTable (the cached metadata is current: nothing else to read)
      ∥ LIST the DMS folder → DMS object
      then, named chain: data + delete files (∥) → manifests (∥) → manifest list ∥
                         metadata.json (the metadata names the list by its path: both are
                         written together) → UpdateTable
      or, one write wave: data, delete files, manifests, manifest list, metadata.json (∥:
                         their contents are in memory before the first upload) → UpdateTable
    """
    model = LS.ISSUE_13

    def t(kind: str, nbytes: float = 0) -> float:
        first, per_mb = model[kind]
        return first + per_mb * nbytes / LS.MB

    def size(cls: str, default: float = 0) -> float:
        xs = [e["bytes_out"] if e["kind"] == "S3 GET" else e["bytes_in"]
              for e in reqs if e["class"] == cls]
        return max(xs) if xs else default

    gt = t("Glue GetTable")
    steps_cold = [("GetTable", gt),
                  ("metadata.json", t("S3 GET", size("S3 GET metadata.json"))),
                  ("manifest list", t("S3 GET", size("S3 GET manifest list"))),
                  ("manifests", t("S3 GET", size("S3 GET manifest")))]
    data_gets = sorted(e["bytes_out"] for e in reqs if e["class"] == "S3 GET data file")
    if data_gets or size("S3 GET delete file"):
        footer = t("S3 GET", min(data_gets)) if data_gets else 0
        chunk = t("S3 GET", max(data_gets)) if data_gets else 0
        steps_cold.append(("key reads", max(footer + chunk, t("S3 GET", size("S3 GET delete file")))))
    warm = c.mode == "warm"
    read_side = [("GetTable", gt)] if warm else steps_cold
    dms = [("LIST", t("S3 LIST")), ("DMS object", t("S3 GET", size(DMS_READ)))]
    data_put = max(size("S3 PUT data file"), size("S3 PUT delete file"))
    writes_named = [("data + delete files", t("S3 PUT", data_put)),
                    ("manifests", t("S3 PUT", size("S3 PUT manifest"))),
                    ("manifest list ∥ metadata.json",
                     max(t("S3 PUT", size("S3 PUT manifest list")),
                         t("S3 PUT", size("S3 PUT metadata.json")))),
                    ("UpdateTable", t("Glue UpdateTable"))]
    all_put = max([data_put, size("S3 PUT manifest"), size("S3 PUT manifest list"),
                   size("S3 PUT metadata.json")])
    writes_one = [("all writes", t("S3 PUT", all_put)), ("UpdateTable", t("Glue UpdateTable"))]
    rs, ds = sum(x for _, x in read_side), sum(x for _, x in dms)
    named = max(rs, ds) + sum(x for _, x in writes_named)
    one = max(rs, ds) + sum(x for _, x in writes_one)
    chain = (" → ".join(n for n, _ in read_side) + " ∥ " + " → ".join(n for n, _ in dms)
             + ", then " + " → ".join(n for n, _ in writes_named))
    return {"named_ms": named, "one_write_wave_ms": one, "named_chain": chain,
            "named_waves": (len(read_side) + (1 if "key reads" in dict(read_side) else 0)
                            if rs >= ds else len(dms)) + len(writes_named),
            "read_side_ms": rs, "dms_side_ms": ds}


# ---------------------------------------------------------------------------------------------
# Summaries and the report


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def summarise(r: dict) -> None:
    files = r.get("files_detail") or []
    steady = [f for f in files if f["role"] in ("warm", "cold")]
    if not steady:
        return
    A = lambda f: f["analysis"]  # noqa: E731
    r["median"] = {
        "latency_ms": med([f["latency_ms"] for f in steady]),
        "handler_ms": med([f["handler_ms"] for f in steady]),
        "requests": med([A(f)["requests"] for f in steady]),
        "waves": med([A(f)["waves"] for f in steady]),
        "longest_chain": med([A(f)["longest_chain"] for f in steady]),
        "uncovered_ms": med([A(f)["uncovered_ms"] for f in steady]),
        "bytes_read": med([A(f)["bytes_read"] for f in steady]),
        "bytes_written": med([A(f)["bytes_written"] for f in steady]),
        "floor_named_ms": med([A(f)["floor"]["named_ms"] for f in steady]),
        "floor_one_wave_ms": med([A(f)["floor"]["one_write_wave_ms"] for f in steady]),
        "lookup_ms": med([f["emf"].get("LookupMilliseconds") for f in steady]),
        "connections": med([A(f)["connections"] for f in steady]),
        "max_in_flight": med([A(f)["max_in_flight"] for f in steady]),
        "put_emu_ms_median": med([A(f)["emulator"]["put_emu_ms_median"] for f in steady]),
        "put_emu_ms_p95": med([A(f)["emulator"]["put_emu_ms_p95"] for f in steady]),
        "put_emu_ms_max": med([A(f)["emulator"]["put_emu_ms_max"] for f in steady]),
        "emu_ms_median": med([A(f)["emulator"]["emu_ms_median"] for f in steady]),
        "over_model": med([A(f)["emulator"]["over_model"] for f in steady]),
    }
    kinds = {}
    for f in steady:
        for k, v in A(f)["by_kind"].items():
            kinds.setdefault(k, []).append(v)
    r["median"]["by_kind"] = {k: med(v + [0] * (len(steady) - len(v))) for k, v in sorted(kinds.items())}
    av = {}
    for f in steady:
        for k, v in A(f)["avoidable"].items():
            a = av.setdefault(k, {"waves": 0, "ms": 0.0})
            a["waves"] += v["waves"]
            a["ms"] += v["ms"]
    r["avoidable_per_file"] = sorted(
        ({"what": k, "waves": v["waves"] / len(steady), "ms": v["ms"] / len(steady)}
         for k, v in av.items()), key=lambda x: -x["ms"])


def fmt(x, nd=0):
    return B.fmt(float(x), nd) if isinstance(x, (int, float)) else B.fmt(x, nd)


def kinds_short(by_kind: dict) -> str:
    order = ["S3 GET", "S3 PUT", "S3 LIST", "S3 HEAD", "S3 DELETE"]
    parts = [f"{fmt(by_kind[k])} {k.split(' ', 1)[1]}" for k in order if by_kind.get(k)]
    glue = {k: v for k, v in by_kind.items() if k.startswith("Glue") and v}
    if glue:
        parts.append(f"{fmt(sum(glue.values()))} Glue ("
                     + ", ".join(f"{fmt(v)} {k[5:]}" for k, v in glue.items()) + ")")
    rest = {k: v for k, v in by_kind.items() if k not in order and not k.startswith("Glue") and v}
    parts += [f"{fmt(v)} {k}" for k, v in rest.items()]
    return ", ".join(parts)


def trace_table(f: dict, trace: list[dict]) -> list[str]:
    t0 = f["spawned"] or f["served"]
    reqs = sorted((e for e in trace if e["file"] == f["index"]), key=lambda e: e["start"])
    waves = waves_of(reqs)
    wave_of = {id(e): k + 1 for k, w in enumerate(waves) for e in w}
    L = ["| # | wave | start ms | end ms | kind | object | bytes | note |",
         "|---:|---:|---:|---:|---|---|---:|---|"]
    for n, e in enumerate(reqs, 1):
        key = e.get("key") or ""
        short = (f"{e['bucket']}/…/{key.rsplit('/', 2)[-2]}/{key.rsplit('/', 1)[-1]}"
                 if key.count("/") > 1 else f"{e.get('bucket') or ''}/{key}".strip("/"))
        nbytes = e["bytes_out"] if e["kind"] in ("S3 GET",) else e["bytes_in"]
        note = e.get("redundant") or ""
        if e.get("range"):
            note = (note + "; " if note else "") + e["range"]
        L.append(f"| {n} | {wave_of[id(e)]} | {(e['start'] - t0) * 1000:.1f} | "
                 f"{(e['end'] - t0) * 1000:.1f} | {e['kind']} | {object_class(e).split(' ', 2)[-1]}: "
                 f"`{short}` | {fmt(nbytes)} | {note} |")
    return L


def markdown(res: dict, traces: dict) -> str:
    m = res["machine"]
    L = [f"Run {res['date']} ({res['started']} → {res['finished']}), command `{res['command']}`.\n",
         f"Machine: {m['nproc']} cores, {m['memory_gib']} GiB, {m['cpu']}, Linux {m['kernel']}. "
         f"1-minute load {res['load_start']:.2f} at the start, {res['load_end']:.2f} at the end. "
         f"Binaries: git {res['versions'].get('git_commit')}"
         + (f" (uncommitted outside bench/: {', '.join(res['versions']['git_dirty_outside_bench'])})"
            if res['versions'].get('git_dirty_outside_bench') else "")
         + (f"; the binaries measured are not that tree's build but {res['binaries']['cli']} and "
            f"{res['binaries']['ingest']} (BENCH_DMS2ICEBERG, BENCH_DMS2ICEBERG_INGEST)"
            if res.get("binaries", {}).get("from_env") else "") + ".\n",
         *([f"**{res['s3_backend']['note']}**\n"] if res.get("s3_backend", {}).get("fallback")
           else []),
         "### The model\n",
         "bench/latency_server.py: " + (
             "S3 served in memory by bench/fast_s3 (s3s; Rust, the delay layer in the same "
             "process), Glue by moto (tests/support/moto_server.py, `VersionId` enforced) behind "
             "it" if res.get("s3_backend", {}).get("backend") == "fast" and
             res["s3_backend"].get("store") == "mem" else
             "S3 served by s3s-fs (files) in bench/fast_s3 (Rust, the delay layer in the same "
             "process), Glue by moto (tests/support/moto_server.py, `VersionId` enforced) behind "
             "it" if res.get("s3_backend", {}).get("backend") == "fast" else
             "moto (tests/support/moto_server.py, Glue `VersionId` enforced) for S3 and Glue "
             "behind the Python delay layer")
         + f" (`--s3-backend {res.get('s3_backend', {}).get('backend', 'moto')}`). "
         "A request is answered no earlier than `start + first-byte ms + "
         "ms per MB × MB moved` (response bytes for GET, request bytes for PUT); requests in "
         "flight at once overlap (" + ("a task per connection, a timer per request"
                                       if res.get("s3_backend", {}).get("backend") == "fast" else
                                       "a thread per connection, a sleep per request") + "). Model "
         f"`{res['model_name']}`:\n",
         "| request | first byte ms | ms per MB |", "|---|---:|---:|"]
    for k, (a, b) in res["model"].items():
        L.append(f"| {k} | {a:g} | {b:g} |")
    L.append(f"\nWorkload: DMS CSV change files of {res['params']['changes']:,} rows (70% U / 20% I "
             f"/ 10% D, ~1 MB), K = {res['params']['files']} per case "
             f"({res['params']['partition_cold_files']} for the partitioned cold case); every case "
             "on its own copy of the loaded base table. Warm: one function process; its first "
             "file (caches empty) is shown apart and not in the medians. Cold: a fresh process "
             "(and Runtime API) per file, latency from process spawn (init included).\n")
    L.append("### Per change file (medians over the case's files)\n")
    L.append("| case | rows | partitions | ordering col | mode | model | latency ms | handler ms | "
             "requests | by kind | MB read / written | waves | longest chain | in flight max | "
             "not in any request (CPU) ms | floor ms: named chain / one write wave | verified |")
    L.append("|---|---:|---:|---|---|---|---:|---:|---:|---|---|---:|---:|---:|---:|---|---|")
    for r in res["cases"]:
        md = r.get("median")
        ver = ("yes, " + (r.get("compared") or "")) if r.get("verified") else \
            "NO: " + "; ".join(map(str, r.get("problems") or []))[:300]
        if not md:
            L.append(f"| {r['case']} | {r['rows']:,} | {r['partitions']} | {'yes' if r['ordering'] else ''} "
                     f"| {r['mode']} | {r['model']} | — | — | — | — | — | — | — | — | — | — | {ver} |")
            continue
        L.append(
            f"| {r['case']} | {r['rows']:,} | {r['partitions'] or ''} | {'yes' if r['ordering'] else ''} | "
            f"{r['mode']} | {r['model']} | {fmt(md['latency_ms'])} | {fmt(md['handler_ms'])} | "
            f"{fmt(md['requests'])} | {kinds_short(md['by_kind'])} | "
            f"{md['bytes_read'] / 1e6:.2f} / {md['bytes_written'] / 1e6:.2f} | {fmt(md['waves'])} | "
            f"{fmt(md['longest_chain'])} | {fmt(md['max_in_flight'])} | {fmt(md['uncovered_ms'])} | "
            f"{fmt(md['floor_named_ms'])} / {fmt(md['floor_one_wave_ms'])} | {ver} |")
    L.append("\nlatency: warm, the Runtime API's hand-over of the event → the function's response; "
             "cold, process spawn → response (init, the config read among it, included). waves: "
             "groups of requests in flight together (two requests are in one wave if their "
             "intervals overlap); longest chain: the most requests one after another; CPU: time of "
             "the latency covered by no request. floor: the least the model allows for our "
             "protocol with this file's sizes (see below), without CPU.\n")
    L.append("### The emulator's own time\n")
    L.append("Per request, from its arrival to the emulator's response being ready (before the "
             "modelled wait): where it exceeds the model the request ends late, and the figure is "
             "the emulator's rather than the protocol's. Medians over the case's files.\n")
    L.append("| case | S3 PUT emulator ms: median / p95 / max | any request, median ms | "
             "requests over the model per file |")
    L.append("|---|---|---:|---:|")
    for r in res["cases"]:
        md = r.get("median")
        if md and md.get("emu_ms_median") is not None:
            L.append(f"| {r['case']} | {fmt(md.get('put_emu_ms_median'), 2)} / "
                     f"{fmt(md.get('put_emu_ms_p95'), 2)} / {fmt(md.get('put_emu_ms_max'), 2)} | "
                     f"{fmt(md['emu_ms_median'], 2)} | {fmt(md.get('over_model'))} |")
    L.append("")
    firsts = [(r, f) for r in res["cases"] for f in r.get("files_detail") or []
              if f["role"] == "first of process"]
    if firsts:
        L.append("First file of each warm process (caches empty; not in the medians above):\n")
        L.append("| case | latency ms | requests | waves | CPU ms |")
        L.append("|---|---:|---:|---:|---:|")
        for r, f in firsts:
            a = f["analysis"]
            L.append(f"| {r['case']} | {fmt(f['latency_ms'])} | {a['requests']} | {a['waves']} | "
                     f"{fmt(a['uncovered_ms'])} |")
        L.append("")
    chains = [r for r in res["cases"] if r.get("files_detail")]
    if chains:
        L.append("### The model's floor for our protocol\n")
        seen = set()
        for r in chains:
            f = next((f for f in r["files_detail"] if f["role"] in ("warm", "cold")), None)
            if not f or (r["mode"], r["partitions"] > 0) in seen:
                continue
            seen.add((r["mode"], r["partitions"] > 0))
            fl = f["analysis"]["floor"]
            L.append(f"- {r['mode']}{' (partitioned)' if r['partitions'] else ''}: {fl['named_chain']} "
                     f"= {fl['named_ms']:.0f} ms ({fl['named_waves']} waves) in {r['case']}; with all "
                     f"writes in one wave {fl['one_write_wave_ms']:.0f} ms.")
        L.append("\nThe sizes are this file's (max per class); the floor leaves out CPU, the config "
                 "read (once per process if cached) and process start.\n")
    L.append("### What runs one after another that need not (ranked by modelled time per file)\n")
    L.append("From each file's trace: a wave is *forced* when a request in it needs a request of "
             "the wave just before (its dependency: metadata.json needs GetTable's pointer, a "
             "manifest needs the manifest list, the DMS object needs the listing, a key column "
             "chunk needs that file's footer, data/delete files need the lookup, UpdateTable needs "
             "every write); otherwise it could have been in flight with an earlier wave. Requests "
             "for what the process already holds are listed as *redundant*. ms: the wave time "
             "per file on the critical path under the model.\n")
    for r in res["cases"]:
        if not r.get("avoidable_per_file") or r["model"] == "off":
            continue
        L.append(f"**{r['case']}** (median {fmt(r['median']['latency_ms'])} ms per file, "
                 f"{fmt(r['median']['waves'])} waves):\n")
        L.append("| not forced | waves per file | ms per file |")
        L.append("|---|---:|---:|")
        for a in r["avoidable_per_file"][:12]:
            L.append(f"| {a['what']} | {a['waves']:.1f} | {a['ms']:.0f} |")
        L.append("")
    base = res.get("baselines")
    if base:
        L.append("### Baselines for issue 13's goals 2 and 3 (model off, same harness)\n")
        L.append("| ratio | value | from |")
        L.append("|---|---:|---|")
        for b in base:
            L.append(f"| {b['what']} | {b['ratio']:.2f}x | {b['from']} |")
        L.append("")
    for title, (r, f, tr) in traces.items():
        L.append(f"### Trace: {title} ({r['case']}, {f['file']}, {fmt(f['latency_ms'])} ms)\n")
        a = f["analysis"]
        L.append(f"{a['requests']} requests in {a['waves']} waves, longest chain "
                 f"{a['longest_chain']}, {a['connections']} connections; times from "
                 + ("process spawn" if f["spawned"] else "the event's hand-over") + ".\n")
        L += trace_table(f, tr)
        L.append("")
    return "\n".join(L)


def baselines(res: dict) -> list[dict]:
    """Ratios for issue 13's goals: warm with an ordering column vs without, cold 10M vs 1M."""
    by = {r["case"]: r for r in res["cases"] if r.get("verified") and r.get("median")}
    out = []

    def ratio(what, a, b, key="latency_ms"):
        ra, rb = by.get(a), by.get(b)
        if ra and rb and ra["median"].get(key) and rb["median"].get(key):
            out.append({"what": what, "ratio": ra["median"][key] / rb["median"][key],
                        "from": f"{a} {fmt(ra['median'][key])} ms / {b} {fmt(rb['median'][key])} ms"
                                f" ({key})"})

    for n in ("1m", "10m"):
        ratio(f"warm, ordering column vs none, {n} rows: per file", f"n{n}_ord_warm_off", f"n{n}_warm_off")
        ratio(f"warm, ordering column vs none, {n} rows: lookup", f"n{n}_ord_warm_off", f"n{n}_warm_off",
              "lookup_ms")
    for o in ("", "_ord"):
        tag = " (ordering column)" if o else ""
        ratio(f"fresh process 10M vs 1M rows{tag}: per file", f"n10m{o}_cold_off", f"n1m{o}_cold_off")
        ratio(f"fresh process 10M vs 1M rows{tag}: lookup", f"n10m{o}_cold_off", f"n1m{o}_cold_off",
              "lookup_ms")
        ratio(f"warm 10M vs 1M rows{tag}: per file", f"n10m{o}_warm_off", f"n1m{o}_warm_off")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="100000,1000000", help="table sizes (rows), comma-separated")
    ap.add_argument("--big", action="store_true", help="add 10M rows")
    ap.add_argument("--changes", type=int, default=10_000, help="rows per change file")
    ap.add_argument("--files", type=int, default=6, help="change files per case (K)")
    ap.add_argument("--partitions", type=int, default=200, help="the partitioned case's buckets "
                    "(0: no partitioned case)")
    ap.add_argument("--partition-cold-files", type=int, default=3)
    ap.add_argument("--model-only", action="store_true", help="skip the model-off cases")
    ap.add_argument("--no-ordering", action="store_true", help="skip the ordering-column cases")
    ap.add_argument("--only", help="case names to run, comma-separated")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--work", type=Path, default=HERE / "work")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--tag", default="latency")
    ap.add_argument("--s3-backend", choices=LS.BACKENDS, default="auto",
                    help="who serves S3: fast (bench/fast_s3, built with cargo on first use), moto, "
                         "or auto (fast if it builds, else moto with a warning in the results)")
    ap.add_argument("--s3-store", choices=("mem", "fs"), default="mem",
                    help="fast backend: objects in memory, or as files (s3s-fs)")
    ap.add_argument("--setup-json", type=Path)
    ap.add_argument("--command", default="bench/latency")
    fl = ap.add_argument_group("parallel full load (bench/latency_fullload.py; replaces the "
                               "change-file cases when given)")
    fl.add_argument("--full-load", metavar="FILES:MB",
                    help="one DMS full load of FILES CSV files of MB MiB each, applied by N "
                         "concurrent ingest functions for each N of --functions (e.g. 16:256)")
    fl.add_argument("--functions", default="1,4,16",
                    help="function processes per run, comma-separated (N = 1 always runs: the "
                         "model needs each file's time alone)")
    fl.add_argument("--alone-cpus", type=int, default=1,
                    help="pin the N = 1 function to this many CPUs (one Lambda's vCPU; 0: no pin)")
    fl.add_argument("--project-files", type=int, default=1000, help="projection: files")
    fl.add_argument("--project-gib", type=float, default=1.0, help="projection: GiB per file")
    fl.add_argument("--project-lanes", type=int, default=100,
                    help="projection: concurrent invocations")
    fl.add_argument("--project-redelivery-s", type=float, default=1800,
                    help="projection: seconds before a failed file is delivered again (SQS "
                         "visibility timeout; template.yaml's QueueVisibilityTimeout default)")
    fl.add_argument("--keep", action="store_true",
                    help="keep each N's warehouse in the emulator (default: dropped once verified)")
    a = ap.parse_args()
    for p in (B.CLI, B.LAMBDA):
        if not p.exists():
            raise SystemExit(f"{p} missing: cargo build --release -p dms2iceberg-cli -p dms2iceberg-ingest")
    cases = plan(a) if not a.full_load else []
    try:
        backend, note = LS.resolve_backend(a.s3_backend)
    except LS.FastS3Unavailable as e:
        raise SystemExit(f"--s3-backend fast: {e}")
    log(f"S3 backend: {backend} ({note})")
    if backend == "moto" and a.s3_backend == "auto":
        log("WARNING: " + note)
    if a.full_load:
        import latency_fullload as FL
        FL.run(a, sys.modules[__name__], backend, note)
        return
    lw = a.work / "latency"
    shutil.rmtree(lw, ignore_errors=True)
    (lw / "logs").mkdir(parents=True)
    started = dt.datetime.now()
    log(f"{len(cases)} cases: {', '.join(c.name for c in cases)}")
    metas = {}
    for c in cases:
        if (c.rows, c.files) not in metas:
            metas[(c.rows, c.files)] = B.workload(a.work, c.rows, c.changes, c.files, a.seed)
    res = {"date": started.strftime("%Y-%m-%d"), "started": started.strftime("%H:%M:%S"),
           "command": a.command, "machine": B.machine(), "versions": B.versions(),
           "binaries": {"cli": str(B.CLI), "ingest": str(B.LAMBDA),
                        "from_env": bool(os.environ.get("BENCH_DMS2ICEBERG")
                                         or os.environ.get("BENCH_DMS2ICEBERG_INGEST"))},
           "load_start": os.getloadavg()[0], "model_name": "issue-13",
           "model": LS.ISSUE_13, "params": {"changes": a.changes, "files": a.files,
                                            "partition_cold_files": a.partition_cold_files,
                                            "seed": a.seed},
           "bases": {}, "cases": [],
           "s3_backend": {"backend": backend, "store": a.s3_store if backend == "fast" else None,
                          "note": note, "fallback": note.startswith("FALLBACK")}}
    aws = Aws(lw, "off", backend, a.s3_store)
    try:
        for base in sorted({c.base for c in cases}):
            meta = next(metas[k] for k in metas if k[0] == base[0])
            log(f"loading base {base_db(base)} ({base[0]:,} rows)")
            res["bases"][base_db(base)] = load_base(aws, base, meta, lw, a.timeout)
        for c in cases:
            log(f"case {c.name}")
            r = run_case(aws, c, metas[(c.rows, c.files)], lw, a.timeout)
            summarise(r)
            res["cases"].append(r)
            md = r.get("median") or {}
            log(f"  {c.name}: median {fmt(md.get('latency_ms'))} ms, waves {fmt(md.get('waves'))}, "
                f"verified {r.get('verified')} {'' if r.get('verified') else r.get('problems')}")
    finally:
        aws.stop()
    res["finished"] = dt.datetime.now().strftime("%H:%M:%S")
    res["load_end"] = os.getloadavg()[0]
    res["baselines"] = baselines(res)
    traces = {}
    for mode in ("warm", "cold"):
        r = next((r for r in res["cases"] if r["mode"] == mode and r["model"] != "off"
                  and not r["partitions"] and r.get("files_detail") and r.get("verified")), None)
        if r:
            f = next(f for f in r["files_detail"] if f["role"] == mode)
            tr = [json.loads(l) for l in open(lw / "traces" / f"{r['case']}.jsonl")]
            traces[f"one {mode} file"] = (r, f, tr)
    md = markdown(res, traces)
    a.results.mkdir(parents=True, exist_ok=True)
    # Never over an earlier result of the same name (a figure RESULTS.md may cite): -2, -3, ...
    base = f"{res['date']}-{a.tag}"
    stem, n = base, 1
    while (a.results / f"{stem}.json").exists() or (a.results / f"{stem}.md").exists():
        n += 1
        stem = f"{base}-{n}"
    for r in res["cases"]:  # the wave lists stay in the JSON; the traces in bench/work
        for f in r.get("files_detail") or []:
            f["analysis"]["wave_list"] = f["analysis"]["wave_list"][:400]
    res["traces"] = {k: [e for e in tr if e["file"] == f["index"]] for k, (r, f, tr) in traces.items()}
    (a.results / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str))
    (a.results / f"{stem}.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {a.results / stem}.json and .md; traces of every file in {lw / 'traces'}")
    bad = [r["case"] for r in res["cases"] if not r.get("verified")]
    if bad:
        print("NOT VERIFIED (figures do not count): " + ", ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
