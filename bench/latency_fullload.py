#!/usr/bin/env python3
"""latency_fullload.py: the parallel full-load case of bench/latency (`--full-load FILES:MB`).

  bench/latency --full-load 16:256 --functions 1,4,16 [--alone-cpus 1] [--no-build]
  bench/.venv/bin/python bench/latency_fullload.py verify ...   (internal: the verifier)

One DMS full load of a new table, `FILES` CSV files of `MB` MiB each (bench/gen_load.py:
`dms/shop/items/LOAD00000001.csv` ..., header `Op,id,name,qty`, rows `I,<id>,<~48 chars>,<int>`,
ids ascending and consecutive per file, as DMS unloads a table in key order; cached under
<work>/latency-fullload-data/ and reused by a later run with the same parameters), uploaded once
to the emulated S3's landing bucket (undelayed port). Then for each N in `--functions`:

1. a fresh table: its own Glue database `fullload_n<N>` (created first, as the template does) and
   its own warehouse prefix `s3://warehouse/fl-n<N>`; the table itself does not exist yet, the
   first commit creates it (concurrent first commits of one load all create it: one wins, the
   others' files fit the winner's table and commit on it, see shared/src/commit/validate.rs);
2. N release `dms2iceberg-ingest` processes, each under its own Runtime API emulator
   (tests/support/lambda_runtime_api.py), as bench/latency starts one, against the delay layer
   (model issue-13);
3. the FILES S3 `Object Created` events (EventBridge shape, one file each, in DMS order) in a
   queue: each function takes the next event when it is free. An invocation that fails is put
   back at the end of the queue (SQS would deliver it again), at most 3 deliveries per event;
4. measured: wall time from the first dispatch until every file is applied; GB/s (input bytes /
   wall); per invocation its latency (dispatch → response), the handler's duration, the function
   process's CPU time (utime + stime delta of /proc/<pid>/stat around the invocation), the time
   its threads were runnable but waiting for a CPU (/proc/<pid>/task/*/schedstat), and from the
   function's JSON logs per commit: attempts (a lost compare-and-swap retried without re-reading
   the file), replans (the plan thrown away: the file read again), timings per pipeline step;
   its EMF line (CommitAttempts, CommitConflicts, FilesApplied...); peak RSS of every function
   process (VmHWM at the end); from the delay layer's trace: every request by kind, catalog
   swaps refused (UpdateTable answered with an error = a lost swap), manifest reads (what a
   retry's re-validation costs), successful commits per second;
5. the final table verified (PyIceberg through the Glue emulator: row count, sum(id), sum(qty)
   and gen_load.py's order-independent hash over (id, name, qty), no duplicate ids) against the
   generator's expected summary, before any figure counts.

N = 1 always runs (the model needs it) and its function is pinned to one CPU (`--alone-cpus 1`,
sched_setaffinity; 0 = not pinned): one Lambda of 1,769 MB has one vCPU's worth of CPU.

Why a model: this machine has 2 cores; 16 functions on 2 cores cannot show what 16 Lambdas (a
vCPU each) do, since a file's parse + encode is seconds of CPU. So the report gives, per N,
(a) MEASURED: the wall time on this machine (N processes sharing its cores);
(b) MODELLED, "lanes": N lanes, each taking the next file in queue order when free; a file costs
    its own N = 1 latency (measured alone, one CPU) plus what the N run measured on top for that
    file: every lost swap costs the measured per-attempt commit time (extra commit time per extra
    attempt, from the N runs' logs; fallback: one reload + one N = 1 commit step), every replan
    the file's N = 1 plan time again, every redelivery its whole N = 1 latency again;
(c) MODELLED, "CAS simulation": the same lanes, but the commits simulated rather than taken from
    the N run: optimistic compare-and-swap on one table pointer with the function's retry policy
    (20 retries, full-jitter backoff 50 ms doubling to 5 s, 600 s in all:
    shared/src/commit/retry.rs); the first attempt builds on the table loaded at the invocation's
    start (its UpdateTable arrives 120 ms before the file's N = 1 latency is up); each retry = the
    refused UpdateTable's answer + two DELETEs (its manifest list and metadata.json) + backoff +
    GetTable + metadata.json GET + re-validation (per snapshot committed since the previous
    attempt: its manifest list and its manifest, 16 snapshots at a time:
    shared/src/commit/validate.rs) + manifest list and metadata.json PUT + UpdateTable;
    the swap takes effect at UpdateTable's arrival; a commit out of retries fails its invocation
    (delivered again after --project-redelivery-s, the file read again). Request times from the
    model (issue-13), object sizes from the trace. (c) is checked against (b) and the measured
    lost swaps on the measured N, then used for the projection.
Projection: a 1 TB full load (`--project-files 1000` files of `--project-gib 1` GiB) with
`--project-lanes 100` concurrent invocations: a file's time scaled from N = 1 (what comes before
the ingest starts and the final metadata PUT + UpdateTable fixed, the rest in proportion to
bytes; the first file, which creates the table, left out), (i) the simple bound max(lanes:
ceil(files / lanes) x file time, catalog: files / commits per second the largest N's run
sustained), (ii) the CAS simulation, with the code's re-validation (the snapshots since the
previous attempt, 16 at a time) and with the code before 419b63d's (every snapshot since the
plan, one after another), each also with failed files delivered again at once.
"""
from __future__ import annotations

import argparse
import datetime as dt
import heapq
import json
import math
import os
import queue
import random
import re
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench as B  # noqa: E402

PY = sys.executable
SELF = str(Path(__file__).resolve())
GEN = str(HERE / "gen_load.py")
EMULATOR = HERE.parent / "tests" / "support" / "lambda_runtime_api.py"
BUCKET = "land-fullload"
CONFIG_KEY = "fullload.toml"
NS, TABLE = "shop", "items"
TABLE_CONFIG = (f'[source]\nbucket_folder = "dms"\n\n[tables."{NS}.{TABLE}"]\n'
                f'primary_key = ["id"]\n')
MAX_DELIVERIES = 3
CLK_TCK = os.sysconf("SC_CLK_TCK")
# shared/src/commit/retry.rs defaults; table.rs MANIFEST_LISTS_CACHED
RETRIES, MIN_WAIT_MS, MAX_WAIT_MS = 20, 50.0, 5000.0
LISTS_CACHED = 8
READ_CONCURRENCY = 16  # shared/src/lookup: manifests read at once
log = B.log


# ---------------------------------------------------------------------------------------------
# The workload


def parse_spec(s: str) -> tuple[int, float]:
    try:
        f, mb = s.split(":")
        return int(f), float(mb)
    except ValueError:
        raise SystemExit(f"--full-load {s}: expected FILES:MB (e.g. 16:256)")


def workload(work: Path, files: int, mb: float, seed: int, timeout: float) -> dict:
    """gen_load.py's files (sorted keys, CSV), reused when already generated."""
    import gen_load as G
    d = work / "latency-fullload-data" / f"{files}x{mb:g}m-s{seed}".replace(".", "p")
    want = G.params(files * mb, files, "sorted", "csv", 0.0, seed)
    m = G.cached(d, want)
    if m:
        log(f"full load: reusing {d} ({m['rows']:,} rows, {sum(m['file_bytes']) / 2**20:,.1f} MiB)")
    else:
        log(f"full load: generating {files} x {mb:g} MiB in {d}")
        r = B.measure([PY, GEN, "gen", "--out", f"csv={d}", "--mb", files * mb, "--files", files,
                       "--order", "sorted", "--seed", seed], timeout,
                      logfile=work / "latency-fullload-data" / "gen.log")
        if not r.ok:
            raise SystemExit(f"gen_load.py failed: {r.err[-3000:]}")
        m = json.loads((d / "meta.json").read_text())
        m["gen_wall_s"] = r.wall_s
        log(f"  generated in {r.wall_s:.1f} s: {m['rows']:,} rows")
    m["dir"] = str(d)
    return m


# ---------------------------------------------------------------------------------------------
# /proc


def proc_cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as fh:
        rest = fh.read().rsplit(")", 1)[1].split()
    return (int(rest[11]) + int(rest[12])) / CLK_TCK


def proc_wait_s(pid: int) -> float:
    """Seconds the process's live threads spent runnable but not running (summed over threads)."""
    total = 0
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for t in tasks:
        try:
            with open(f"/proc/{pid}/task/{t}/schedstat") as fh:
                total += int(fh.read().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def proc_hwm_mib(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


# ---------------------------------------------------------------------------------------------
# One function process under its Runtime API emulator


def http_json(url: str, body: bytes | None = None, timeout: float = 60) -> dict:
    import urllib.request
    req = urllib.request.Request(url, data=body, method="GET" if body is None else "POST")
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.load(r)


class Function:
    def __init__(self, aws, d: Path, tag: str, env_extra: dict, cpus: set[int] | None):
        d.mkdir(parents=True, exist_ok=True)
        port_file = d / f"rt-{tag}.port"
        self.emu = subprocess.Popen([PY, EMULATOR, "--port", "0", "--port-file", port_file],
                                    stdout=subprocess.DEVNULL,
                                    stderr=open(d / f"rt-{tag}.log", "w"), start_new_session=True)
        self.port = B.wait_port(port_file, self.emu, "lambda_runtime_api.py")
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = d / f"fn-{tag}.log"
        env = aws.env(aws.delayed)
        env.update({
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{self.port}",
            "AWS_LAMBDA_FUNCTION_NAME": "dms2iceberg-ingest",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(B.LAMBDA_BUDGET_MB),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_STREAM_NAME": f"bench-{tag}", "AWS_LAMBDA_LOG_GROUP_NAME": "bench",
            "DMS2ICEBERG_SPOOL_DIR": str(d / f"spool-{tag}"),
            **env_extra,
        })
        pre = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
        self.spawned = time.time()
        self.fn = subprocess.Popen([B.LAMBDA], env=env, stdout=open(self.log_path, "w"),
                                   stderr=subprocess.STDOUT, start_new_session=True,
                                   preexec_fn=pre)
        self.pid = self.fn.pid
        self.log_pos = 0
        self.tag = tag

    def wait_init(self, timeout: float = 120) -> float:
        end = time.time() + timeout
        while time.time() < end:
            st = http_json(f"{self.url}/_emulator/status")
            if st.get("init_error"):
                raise RuntimeError(f"function {self.tag}: init failed: {st['init_error']}")
            if st.get("first_next_ms"):
                return st["first_next_ms"] / 1000 - self.spawned
            if self.fn.poll() is not None:
                break
            time.sleep(0.01)
        raise RuntimeError(f"function {self.tag} did not start: {self.log_path.read_text()[-2000:]}")

    def invoke(self, event: dict, timeout: float) -> dict:
        try:
            return http_json(f"{self.url}/_emulator/invoke?timeout_s={timeout}",
                             json.dumps(event).encode(), timeout + 30)
        except Exception as e:  # noqa: BLE001 - a dead function is an outcome, not a crash
            return {"outcome": "driver-error", "body": f"{e.__class__.__name__}: {e}; "
                    f"log: {self.log_path.read_text()[-1500:]}"}

    def new_lines(self) -> list[dict]:
        """JSON lines (logs and EMF) the function printed since the last call."""
        with open(self.log_path) as fh:
            fh.seek(self.log_pos)
            text = fh.read()
        cut = text.rfind("\n") + 1
        self.log_pos += len(text[:cut].encode())
        out = []
        for line in text[:cut].splitlines():
            if line.startswith("{"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
        return out

    def stop(self):
        B.stop(self.fn)
        B.stop(self.emu)


def event_for(key: str, size: int, i: int) -> dict:
    return {"version": "0", "id": f"fullload-{i}", "detail-type": "Object Created",
            "source": "aws.s3", "account": "123456789012", "time": "2026-12-01T12:00:00Z",
            "region": "us-east-1", "resources": [f"arn:aws:s3:::{BUCKET}"],
            "detail": {"version": "0", "bucket": {"name": BUCKET},
                       "object": {"key": key, "size": size}, "reason": "PutObject"}}


TIMING = re.compile(r"(\w+)_us: (\d+)")


def digest_lines(lines: list[dict]) -> dict:
    """What one invocation's log says: its commits (the `applied` lines), lost races, the EMF
    metrics, errors."""
    commits, emf, notes, lost = [], {}, [], 0
    for j in lines:
        if "_aws" in j:
            for k, v in j.items():
                if k not in ("_aws", "Function", "Table") and isinstance(v, (int, float)):
                    emf[k] = emf.get(k, 0) + v
            continue
        f = j.get("fields") or {}
        msg = f.get("message")
        if msg == "applied":
            t = {k: int(v) / 1000 for k, v in TIMING.findall(str(f.get("timings", "")))}
            commits.append({"files": f.get("files"), "rows": f.get("rows_read"),
                            "attempts": int(f.get("attempts", 1)),
                            "replans": int(f.get("replans", 0)),
                            "elapsed_ms": f.get("elapsed_ms"),
                            "ms": {k: round(v, 1) for k, v in t.items()}})
        elif msg == "planning again":
            notes.append(f"replan: {f.get('conflict')}")
        elif j.get("level") in ("WARN", "ERROR"):
            notes.append(f"{j.get('level')}: {msg} {f.get('error') or f.get('reason') or ''}".strip())
    lost = sum(c["attempts"] - 1 for c in commits)
    return {"commits": commits, "emf": emf, "notes": notes[:20], "lost_swaps": lost,
            "replans": sum(c["replans"] for c in commits)}


# ---------------------------------------------------------------------------------------------
# One N


def run_n(aws, n: int, meta: dict, keys: list[str], lw: Path, a) -> dict:
    d = lw / f"n{n}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    db = f"fullload_n{n}"
    warehouse = f"s3://warehouse/fl-n{n}"
    try:
        aws.glue.delete_database(Name=db)
    except Exception:  # noqa: BLE001 - not there
        pass
    aws.glue.create_database(DatabaseInput={"Name": db})
    env_extra = {"DMS2ICEBERG_WAREHOUSE": warehouse, "DMS2ICEBERG_GLUE_DATABASE": db,
                 "DMS2ICEBERG_CONFIG": f"s3://bench-config/{CONFIG_KEY}"}
    cpus = None
    if n == 1 and a.alone_cpus:
        avail = sorted(os.sched_getaffinity(0))
        cpus = set(avail[-a.alone_cpus:])
    aws.set_model("issue-13")
    fns: list[Function] = []
    out: dict = {"n": n, "database": db, "warehouse": warehouse,
                 "pinned_cpus": sorted(cpus) if cpus else None}
    try:
        for k in range(n):
            fns.append(Function(aws, d, f"f{k}", env_extra, cpus))
        out["init_s"] = [round(f.wait_init(), 3) for f in fns]
        since = aws.trace_next()
        q: queue.Queue = queue.Queue()
        for i, (key, size) in enumerate(zip(keys, meta["file_bytes"])):
            q.put((i, key, size, 1))
        invocations: list[dict] = []
        failed: list[str] = []
        lock = threading.Lock()
        remaining = [len(keys)]

        def worker(k: int, f: Function) -> None:
            while True:
                with lock:
                    if remaining[0] == 0:
                        return
                try:
                    i, key, size, delivery = q.get(timeout=0.05)
                except queue.Empty:
                    continue
                ev = event_for(key, size, i)
                cpu0, wait0 = proc_cpu_s(f.pid), proc_wait_s(f.pid)
                t0 = time.time()
                o = f.invoke(ev, a.timeout)
                t1 = time.time()
                try:
                    cpu1, wait1 = proc_cpu_s(f.pid), proc_wait_s(f.pid)
                except OSError:
                    cpu1, wait1 = cpu0, wait0
                lines = digest_lines(f.new_lines())
                rec = {"file": Path(key).name, "index": i, "function": k, "delivery": delivery,
                       "bytes": size, "dispatched": t0, "returned": t1,
                       "latency_ms": (t1 - t0) * 1000, "outcome": o.get("outcome"),
                       "handler_ms": o.get("duration_ms"),
                       "served": (o.get("served_at_ms") or 0) / 1000 or None,
                       "cpu_s": cpu1 - cpu0, "cpu_wait_s": wait1 - wait0,
                       "hwm_mib": proc_hwm_mib(f.pid), **lines}
                if o.get("outcome") != "response":
                    rec["error"] = str(o.get("body"))[:1500]
                applied = int(lines["emf"].get("FilesApplied", 0))
                with lock:
                    invocations.append(rec)
                    # A response (not an error) says the file the event names is applied.
                    if o.get("outcome") == "response":
                        remaining[0] -= 1
                    elif delivery < MAX_DELIVERIES and o.get("outcome") == "error":
                        q.put((i, key, size, delivery + 1))
                    else:
                        failed.append(f"{Path(key).name}: {o.get('outcome')}: "
                                      f"{str(o.get('body'))[:800]} (FilesApplied {applied})")
                        remaining[0] -= 1
                log(f"    N={n} f{k} {rec['file']}: {rec['latency_ms']:.0f} ms, cpu "
                    f"{rec['cpu_s']:.2f} s, attempts "
                    f"{[c['attempts'] for c in lines['commits']]}, replans {lines['replans']}, "
                    f"{o.get('outcome')}" + ("" if applied == 1 else f" (FilesApplied {applied})")
                    + (f": {str(o.get('body'))[:300]}" if o.get("outcome") != "response" else ""))

        started = time.time()
        threads = [threading.Thread(target=worker, args=(k, f), daemon=True)
                   for k, f in enumerate(fns)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        out["wall_s"] = max(r["returned"] for r in invocations) - min(r["dispatched"] for r in invocations)
        out["driver_wall_s"] = time.time() - started
        out["peak_rss_mib"] = [proc_hwm_mib(f.pid) for f in fns]
        out["function_cpu_s"] = [round(proc_cpu_s(f.pid), 2) for f in fns]
        trace = aws.trace_since(since)
    finally:
        for f in fns:
            f.stop()
        aws.set_model("off")
    invocations.sort(key=lambda r: r["dispatched"])
    out["invocations"] = invocations
    out["failed"] = failed
    out["trace"] = trace_summary(trace, invocations)
    (lw / "traces").mkdir(exist_ok=True)
    with open(lw / "traces" / f"n{n}.jsonl", "w") as fh:
        for e in trace:
            fh.write(json.dumps(e) + "\n")
    v = B.measure([PY, SELF, "verify", "--endpoint", aws.direct, "--table", f"{db}.{TABLE}",
                   "--meta", Path(meta["dir"]) / "meta.json"], a.timeout,
                  logfile=d / "verify.log")
    vj = v.last_json() if v.ok else {"ok": False, "problems": [v.err[-1500:]]}
    out["verified"] = bool(vj.get("ok")) and not failed
    out["verify"] = vj
    out["problems"] = (vj.get("problems") or []) + failed
    if not a.keep:
        drop_warehouse(aws, warehouse)
    summarise_n(out, meta)
    return out


def drop_warehouse(aws, warehouse: str) -> None:
    """Frees the emulator's memory: every object under the warehouse prefix."""
    prefix = warehouse.removeprefix("s3://warehouse/") + "/"
    pg = aws.s3.get_paginator("list_objects_v2")
    for page in pg.paginate(Bucket="warehouse", Prefix=prefix):
        objs = [{"Key": o["Key"]} for o in page.get("Contents", [])]
        for k in range(0, len(objs), 1000):
            aws.s3.delete_objects(Bucket="warehouse", Delete={"Objects": objs[k:k + 1000]})


def trace_summary(trace: list[dict], invocations: list[dict]) -> dict:
    kinds: dict[str, int] = {}
    for e in trace:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    swaps = sorted((e for e in trace if e["kind"] in ("Glue UpdateTable", "Glue CreateTable")),
                   key=lambda e: e["start"])
    ok = [e for e in swaps if 200 <= int(e.get("status") or 0) < 300]
    refused = [e for e in swaps if not 200 <= int(e.get("status") or 0) < 300]
    meta_puts = sorted((e for e in trace if e["kind"] in ("S3 PUT", "S3 MPU part")
                        and (e.get("key") or "").endswith(".metadata.json")), key=lambda e: e["start"])
    man_gets = [e for e in trace if e["kind"] == "S3 GET" and (e.get("key") or "").endswith(".avro")
                and "/metadata/snap-" not in (e.get("key") or "")]
    list_gets = [e for e in trace if e["kind"] == "S3 GET" and "/metadata/snap-" in (e.get("key") or "")]
    meta_gets = [e for e in trace if e["kind"] == "S3 GET"
                 and (e.get("key") or "").endswith(".metadata.json")]
    dms_bytes = sum(e["bytes_out"] for e in trace if e["kind"] == "S3 GET"
                    and e.get("bucket") == BUCKET)
    written = sum(e["bytes_in"] for e in trace if e["kind"] in ("S3 PUT", "S3 MPU part")
                  and e.get("bucket") == "warehouse")
    t_ok = [e["start"] for e in ok]  # the swap takes effect on arrival (the response is delayed)
    rate = (len(t_ok) - 1) / (t_ok[-1] - t_ok[0]) if len(t_ok) >= 2 and t_ok[-1] > t_ok[0] else None
    w = min(8, len(t_ok))
    burst = None
    if w >= 2:
        spans = [t_ok[k + w - 1] - t_ok[k] for k in range(len(t_ok) - w + 1)]
        if min(spans) > 0:
            burst = (w - 1) / min(spans)
    # metadata.json grows with every snapshot: bytes per commit (least squares over the PUTs)
    growth = None
    if len(meta_puts) >= 3:
        xs = list(range(len(meta_puts)))
        ys = [e["bytes_in"] for e in meta_puts]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        den = sum((x - mx) ** 2 for x in xs)
        growth = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / den if den else None
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    return {
        "requests": len(trace), "by_kind": dict(sorted(kinds.items())),
        "swaps_ok": len(ok), "swaps_refused": len(refused),
        "refused_status": sorted({int(e.get("status") or 0) for e in refused}),
        "commit_times": [round(t - (t_ok[0] if t_ok else 0), 3) for t in t_ok],
        "commits_per_s_avg": rate, "commits_per_s_best_window": burst, "best_window": w,
        "manifest_gets": len(man_gets), "manifest_list_gets": len(list_gets),
        "metadata_gets": len(meta_gets),
        "manifest_bytes_median": med([e["bytes_out"] for e in man_gets]),
        "manifest_list_bytes_median": med([e["bytes_out"] for e in list_gets]),
        "metadata_bytes_last": meta_puts[-1]["bytes_in"] if meta_puts else None,
        "metadata_bytes_first": meta_puts[0]["bytes_in"] if meta_puts else None,
        "metadata_bytes_per_commit": growth,
        "dms_bytes_read": dms_bytes, "warehouse_bytes_written": written,
        "over_model": sum(1 for e in trace if e["model_ms"] > 0 and e["emu_ms"] > e["model_ms"]),
    }


def summarise_n(r: dict, meta: dict) -> None:
    inv = r["invocations"]
    ok = [x for x in inv if x["outcome"] == "response" and x["emf"].get("FilesApplied")]
    commits = [c for x in inv for c in x["commits"]]
    med = lambda xs: statistics.median(xs) if xs else None  # noqa: E731
    total = sum(meta["file_bytes"])
    r["input_bytes"] = total
    r["gb_per_s"] = total / 1e9 / r["wall_s"] if r.get("wall_s") else None
    r["commits"] = len(commits)
    r["lost_swaps"] = sum(c["attempts"] - 1 for c in commits)
    r["replans"] = sum(c["replans"] for c in commits)
    r["commit_conflicts_emf"] = sum(x["emf"].get("CommitConflicts", 0) for x in inv)
    r["commit_attempts_emf"] = sum(x["emf"].get("CommitAttempts", 0) for x in inv)
    r["redeliveries"] = sum(1 for x in inv if x["delivery"] > 1)
    r["failed_invocations"] = sum(1 for x in inv if x["outcome"] != "response")
    r["median"] = {
        "latency_ms": med([x["latency_ms"] for x in ok]),
        "cpu_s": med([x["cpu_s"] for x in ok]),
        "cpu_wait_s": med([x["cpu_wait_s"] for x in ok]),
        "commit_ms": med([c["ms"].get("commit", 0) for c in commits]),
        "read_ms": med([c["ms"].get("read", 0) for c in commits]),
        "write_ms": med([c["ms"].get("write", 0) for c in commits]),
    }
    r["latency_ms_max"] = max((x["latency_ms"] for x in ok), default=None)
    r["cpu_s_total"] = sum(x["cpu_s"] for x in inv)


# ---------------------------------------------------------------------------------------------
# The models


def per_attempt_ms(runs: list[dict], alone: dict, trace_alone: dict) -> tuple[float, str]:
    """What one lost swap costs (measured where the N runs had any): the extra commit time per
    extra attempt, (commit ms - the run's median commit ms of one-attempt commits) / (attempts -
    1), median over multi-attempt commits of every N run. Fallback: a reload (GetTable +
    metadata.json under the model) plus the N = 1 commit step."""
    xs = []
    for r in runs:
        cs = [c for x in r["invocations"] for c in x["commits"]]
        base = [c["ms"].get("commit", 0) for c in cs if c["attempts"] == 1 and not c["replans"]]
        if not base:
            continue
        b = statistics.median(base)
        xs += [(c["ms"].get("commit", 0) - b) / (c["attempts"] - 1) for c in cs
               if c["attempts"] > 1 and not c["replans"]]
    if xs:
        return max(0.0, statistics.median(xs)), f"measured: median of {len(xs)} multi-attempt commits"
    meta = trace_alone.get("metadata_bytes_last") or 0
    ms = 60 + 20 + 10 * meta / 1e6 + (alone["median"]["commit_ms"] or 0)
    return ms, "no lost swap in any run: model GetTable + metadata.json GET + the N = 1 commit step"


# The last two steps of a commit, under the model: the manifest list and metadata.json PUT
# (together), then UpdateTable; their sizes are small (the trace's metadata.json).
SWAP_PUT_MS, UPDATE_MS, GETTABLE_MS, DELETE_MS = 35.0, 120.0, 60.0, 30.0


def alone_costs(alone: dict) -> dict[int, dict]:
    """Per file index, from N = 1: its latency, its commit step (the log's `commit` timing: the
    last data file's upload, the manifests, the metadata, the swap), its plan time (latency minus
    the commit step), and the split used to scale a file: fixed = what comes before the ingest
    starts (the event's hand-over, config, listing, GetTable: latency minus the log's total) plus
    the final metadata PUT and UpdateTable; variable = the rest (download, parse, encode, upload:
    grows with the file)."""
    out = {}
    for x in alone["invocations"]:
        if x["outcome"] != "response" or not x["commits"]:
            continue
        c = x["commits"][0]["ms"]
        commit = c.get("commit", 0)
        lat = x["latency_ms"]
        before = max(0.0, lat - c.get("total", lat))
        fixed = min(lat, before + SWAP_PUT_MS + UPDATE_MS)
        out[x["index"]] = {"latency_ms": lat, "commit_ms": commit,
                           "plan_ms": max(0.0, lat - commit), "fixed_ms": fixed,
                           "variable_ms": lat - fixed, "bytes": x["bytes"]}
    return out


def lanes(durations: list[float], n: int) -> float:
    """List scheduling: n lanes, each takes the next job (queue order) when free; makespan."""
    free = [0.0] * n
    heapq.heapify(free)
    end = 0.0
    for dur in durations:
        t = heapq.heappop(free)
        heapq.heappush(free, t + dur)
        end = max(end, t + dur)
    return end


def lanes_model(r: dict, alone: dict, attempt_ms: float) -> dict:
    """(b): each file its N = 1 latency plus what the N run measured on top for it."""
    costs = alone_costs(alone)
    durs, extra_total = [], 0.0
    by_file: dict[int, list[dict]] = {}
    for x in r["invocations"]:
        by_file.setdefault(x["index"], []).append(x)
    for i in sorted(costs):
        xs = by_file.get(i, [])
        lost = sum(c["attempts"] - 1 for x in xs for c in x["commits"])
        replans = sum(c["replans"] for x in xs for c in x["commits"])
        redeliv = sum(1 for x in xs if x["delivery"] > 1)
        extra = lost * attempt_ms + replans * costs[i]["plan_ms"] + redeliv * costs[i]["latency_ms"]
        extra_total += extra
        durs.append(costs[i]["latency_ms"] + extra)
    wall = lanes(durs, r["n"]) / 1000
    return {"wall_s": wall, "gb_per_s": r["input_bytes"] / 1e9 / wall if wall else None,
            "retry_ms_added": extra_total}


def backoff_ms(rng: random.Random, retry: int) -> float:
    cap = min(MIN_WAIT_MS * 2 ** min(retry - 1, 16), MAX_WAIT_MS)
    return rng.uniform(cap / 2, cap)


def cas_sim(files: int, lanes_n: int, latency_ms, p: dict, seed: int = 1,
            redelivery_s: float = 0.0, validate_from: str = "code") -> dict:
    """(c): lanes + an optimistic compare-and-swap on one table pointer, simulated.

    latency_ms(i): file i's invocation time alone (its first attempt's UpdateTable arrives
    UPDATE_MS before its end); p: object sizes (request times are the model's); redelivery_s:
    how long a failed file waits before it is delivered again (SQS: the rest of the visibility
    timeout). Times in ms. The first attempt builds on the table the invocation loaded at its
    start and loses if anyone committed since. A retry, as shared/src/commit does it: the refused
    UpdateTable's answer, its manifest list and metadata.json deleted (one after the other), the
    backoff (retry.rs: 20 retries, lost swaps and replans alike, full jitter from 50 ms doubling
    to 5 s, 600 s in all), GetTable, metadata.json GET, re-validation, the manifest list +
    metadata.json PUT, UpdateTable; the swap takes effect at UpdateTable's arrival. A commit out
    of budget fails its invocation; the file is delivered again later and read again.
    validate_from: "code" (validate.rs `load_append_still_valid` since commit 419b63d: the
    snapshots committed since the previous attempt, each its manifest list then its manifest,
    READ_CONCURRENCY of them at once) or "base" (the code before 419b63d: every snapshot since
    the plan's base, its manifest list (8 cached) then its manifest, one after another)."""
    rng = random.Random(seed)
    get = lambda nbytes: 20 + 10 * nbytes / 1e6  # noqa: E731  (issue-13: S3 GET)
    man_get, list_get = get(p["manifest_bytes"]), get(p["manifest_list_bytes"])

    def meta_bytes(version: int) -> float:
        return p["metadata_bytes_first"] + p["metadata_bytes_per_commit"] * version

    commits: list[float] = []  # swap times, ascending (a commit is version len(commits))
    ready = [(0.0, i, i) for i in range(files)]  # (deliverable from, queue order, file)
    heapq.heapify(ready)
    order = files
    redeliveries, lost, gaveup, attempts_hist = 0, 0, 0, []
    heap: list[tuple[float, int, str, dict]] = []  # (time, seq, what, state)
    seq = 0

    def version_at(t: float) -> int:
        import bisect
        return bisect.bisect_right(commits, t)

    def start(lane_free: float):
        nonlocal seq
        if not ready:
            return
        when, _, i = heapq.heappop(ready)
        t0 = max(lane_free, when)
        st = {"file": i, "t0": t0, "base": None, "seen_lists": set(), "retry": 0, "attempt": 1}
        seq += 1
        heapq.heappush(heap, (t0, seq, "start", st))

    for _ in range(lanes_n):
        start(0.0)
    end = 0.0
    while heap:
        t, _, what, st = heapq.heappop(heap)
        if what == "start":
            st["base"] = version_at(t)  # the table the plan is made on
            seq += 1
            heapq.heappush(heap, (t + latency_ms(st["file"]) - UPDATE_MS, seq, "swap",
                                  {**st, "seen": st["base"]}))
        elif what == "attempt":
            seen = version_at(t)  # GetTable
            mb = meta_bytes(seen)
            if validate_from == "base":
                k = seen - st["base"]
                fresh = [v for v in range(st["base"], seen) if v not in st["seen_lists"]]
                lists = k if k > LISTS_CACHED else len(fresh)
                st["seen_lists"].update(range(st["base"], seen))
            else:
                fresh_n = seen - st.get("validated", st["base"])
                st["validated"] = seen
                k = lists = math.ceil(fresh_n / READ_CONCURRENCY)
            swap_at = (t + GETTABLE_MS + get(mb) + k * man_get + lists * list_get
                       + SWAP_PUT_MS + 10 * mb / 1e6)
            seq += 1
            heapq.heappush(heap, (swap_at, seq, "swap", {**st, "seen": seen}))
        elif what == "swap":
            if version_at(t) == st["seen"]:
                commits.append(t)
                attempts_hist.append(st["attempt"])
                done = t + UPDATE_MS
                end = max(end, done)
                start(done)
                continue
            lost += 1
            st["retry"] += 1
            if st["retry"] > RETRIES or t - st["t0"] > 600_000:
                gaveup += 1
                redeliveries += 1
                order += 1
                heapq.heappush(ready, (t + UPDATE_MS + redelivery_s * 1000, order, st["file"]))
                start(t + UPDATE_MS)
                continue
            st["attempt"] += 1
            seq += 1
            heapq.heappush(heap, (t + UPDATE_MS + 2 * DELETE_MS + backoff_ms(rng, st["retry"]),
                                  seq, "attempt", st))
    return {"wall_s": end / 1000, "commits": len(commits), "lost_swaps": lost,
            "gave_up": gaveup, "redeliveries": redeliveries,
            "attempts_max": max(attempts_hist, default=0),
            "attempts_mean": statistics.mean(attempts_hist) if attempts_hist else None}


def model_params(runs: list[dict], alone: dict) -> dict:
    tr = [r["trace"] for r in runs]
    pick = lambda k, d: next((t[k] for t in reversed(tr) if t.get(k)), d)  # noqa: E731
    return {"manifest_bytes": pick("manifest_bytes_median", 8000),
            "manifest_list_bytes": pick("manifest_list_bytes_median", 4000),
            "metadata_bytes_first": pick("metadata_bytes_first", 3000),
            "metadata_bytes_per_commit": max(0.0, pick("metadata_bytes_per_commit", 0.0) or 0.0)}


def models(res: dict, a) -> None:
    runs = [r for r in res["runs"] if r.get("verified")]
    alone = next((r for r in runs if r["n"] == 1), None)
    if not alone:
        res["model"] = {"error": "no verified N = 1 run: nothing to model from"}
        return
    attempt_ms, how = per_attempt_ms(runs, alone, alone["trace"])
    costs = alone_costs(alone)
    p = model_params(runs, alone)
    commit_med = statistics.median(c["commit_ms"] for c in costs.values())
    lat_by_file = {i: c["latency_ms"] for i, c in costs.items()}
    m = {"per_attempt_ms": attempt_ms, "per_attempt_how": how, "params": p,
         "alone_commit_ms": commit_med,
         "alone_latency_ms": {i: round(c["latency_ms"], 1) for i, c in costs.items()},
         "runs": []}
    for r in runs:
        lm = lanes_model(r, alone, attempt_ms)
        sims = [cas_sim(len(costs), r["n"], lat_by_file.__getitem__, p, seed=s)
                for s in range(1, 6)]
        m["runs"].append({
            "n": r["n"], "measured_wall_s": r["wall_s"], "lanes": lm,
            "cas": {"wall_s": statistics.median(s["wall_s"] for s in sims),
                    "lost_swaps": statistics.median(s["lost_swaps"] for s in sims),
                    "gave_up": max(s["gave_up"] for s in sims), "seeds": len(sims)},
            "measured_lost_swaps": r["lost_swaps"], "measured_replans": r["replans"]})
    # The projection: a file of project_gib scaled from N = 1: the part of the plan that grows
    # with the file (read + lookup + write) in proportion to bytes, the rest and the commit step
    # as measured.
    big = a.project_gib * 2**30
    # The first file creates the table (CreateTable, the function's first invocation): a load
    # has one such file; the others are the typical file.
    typical = {i: c for i, c in costs.items() if i != 0 or len(costs) < 3}
    scaled = {i: c["fixed_ms"] + c["variable_ms"] * big / c["bytes"] for i, c in typical.items()}
    file_ms = statistics.median(scaled.values())
    F, L = a.project_files, a.project_lanes
    waves = math.ceil(F / L)
    lanes_s = waves * file_ms / 1000
    rmax = next((r for r in sorted(runs, key=lambda r: -r["n"])), None)
    rate = rmax["trace"].get("commits_per_s_avg") if rmax else None
    burst = rmax["trace"].get("commits_per_s_best_window") if rmax else None
    catalog_s = F / rate if rate else None
    simple = max(lanes_s, catalog_s or 0)
    # Files differ a little: each projected file is one measured file scaled (drawn at random),
    # so the lanes do not commit in lockstep.
    draws = list(scaled.values())

    def project(validate_from: str, redelivery_s: float | None = None) -> dict:
        sims = []
        for s_ in range(1, 4):
            draw = random.Random(100 + s_)
            plans = [draw.choice(draws) for _ in range(F)]
            sims.append(cas_sim(F, L, plans.__getitem__, p, seed=s_,
                                redelivery_s=(a.project_redelivery_s if redelivery_s is None
                                              else redelivery_s),
                                validate_from=validate_from))
        wall = statistics.median(x["wall_s"] for x in sims)
        return {"wall_s": wall, "gb_per_s": F * big / 1e9 / wall if wall else None,
                "lost_swaps": statistics.median(x["lost_swaps"] for x in sims),
                "gave_up": max(x["gave_up"] for x in sims),
                "redeliveries": max(x["redeliveries"] for x in sims),
                "attempts_mean": statistics.median(x["attempts_mean"] for x in sims),
                "attempts_max": max(x["attempts_max"] for x in sims), "seeds": len(sims)}

    total_bytes = F * big
    m["projection"] = {
        "files": F, "gib_per_file": a.project_gib, "lanes": L, "total_bytes": total_bytes,
        "variable_ms_per_mib": statistics.median(c["variable_ms"] / c["bytes"] * 2**20
                                                 for c in typical.values()),
        "fixed_ms": statistics.median(c["fixed_ms"] for c in typical.values()),
        "file_ms": file_ms, "file_ms_alone_measured_size":
            statistics.median(c["latency_ms"] for c in costs.values()),
        "lanes_bound_s": lanes_s, "waves": waves,
        "catalog_rate_from": f"N = {rmax['n']}" if rmax else None,
        "catalog_commits_per_s_avg": rate, "catalog_commits_per_s_best_window": burst,
        "catalog_bound_s": catalog_s, "simple_s": simple,
        "simple_gb_per_s": total_bytes / 1e9 / simple if simple else None,
        "cas": project("code"), "cas_before_419b63d": project("base"),
        "cas_redeliver_at_once": project("code", 0.0),
        "cas_before_419b63d_redeliver_at_once": project("base", 0.0),
        "plan_spread": [min(draws) / file_ms, max(draws) / file_ms],
        "redelivery_s": a.project_redelivery_s,
    }
    res["model"] = m


# ---------------------------------------------------------------------------------------------
# The report


def fmt(x, nd=0):
    return B.fmt(float(x), nd) if isinstance(x, (int, float)) else B.fmt(x, nd)


def hms(s: float | None) -> str:
    if s is None:
        return "—"
    if s < 120:
        return f"{s:.1f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    return f"{s / 3600:.2f} h"


def markdown(res: dict) -> str:
    m = res["machine"]
    p = res["params"]
    L = [f"Run {res['date']} ({res['started']} → {res['finished']}), command `{res['command']}`.\n",
         f"Machine: {m['nproc']} cores, {m['memory_gib']} GiB, {m['cpu']}, Linux {m['kernel']}. "
         f"1-minute load {res['load_start']:.2f} at the start, {res['load_end']:.2f} at the end. "
         f"Binaries: git {res['versions'].get('git_commit')}"
         + (f" (uncommitted outside bench/: {', '.join(res['versions']['git_dirty_outside_bench'])})"
            if res['versions'].get('git_dirty_outside_bench') else "")
         + f"; ingest binary {res['binaries']['ingest']} ({res['binaries']['ingest_mtime']}).\n",
         *([f"**{res['s3_backend']['note']}**\n"] if res.get("s3_backend", {}).get("fallback") else []),
         "## Parallel full load (bench/latency --full-load)\n",
         f"One DMS full load of a new table `{NS}.{TABLE}`: {p['files']} CSV files of "
         f"{p['mb']:g} MiB ({res['workload']['rows']:,} rows, "
         f"{res['workload']['bytes'] / 1e9:.2f} GB; ids ascending, consecutive per file; "
         "bench/gen_load.py). S3 served by "
         + ("bench/fast_s3" if res["s3_backend"]["backend"] == "fast" else "moto")
         + ", Glue by moto, behind the delay layer, model issue-13 (S3 GET 20 ms + 10 ms/MB, PUT "
         "35 ms + 10 ms/MB, LIST 30, Glue GetTable 60, UpdateTable 120, CreateTable 150 ms). Per N: "
         "a fresh table (own Glue database and warehouse prefix), N ingest function processes "
         "(release build, each under its own Runtime API emulator), the S3 `Object Created` events "
         "in a queue, each function taking the next when free. "
         + (f"N = 1 ran pinned to {len(res['runs'][0]['pinned_cpus'] or [])} CPU (one Lambda's "
            "vCPU). " if res["runs"] and res["runs"][0].get("pinned_cpus") else "")
         + f"This machine has {m['nproc']} cores: every N above {m['nproc']} shares them.\n",
         "### Measured on this machine\n",
         "| N | wall s | GB/s | commits | lost swaps (retried, file not re-read) | replans (file re-read) | "
         "CommitConflicts (EMF) | failed invocations / redeliveries | swaps refused by Glue (trace) | "
         "invocation ms: median / max | CPU s per invocation (median) | runnable-waiting s (median) | "
         "peak RSS MiB per function | verified |",
         "|---:|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---|---|"]
    for r in res["runs"]:
        md = r.get("median") or {}
        rss = r.get("peak_rss_mib") or []
        ver = ("yes" if r.get("verified") else
               "NO: " + "; ".join(map(str, r.get("problems") or []))[:300])
        L.append(f"| {r['n']} | {fmt(r.get('wall_s'), 2)} | {fmt(r.get('gb_per_s'), 3)} | "
                 f"{r.get('commits')} | {r.get('lost_swaps')} | {r.get('replans')} | "
                 f"{fmt(r.get('commit_conflicts_emf'))} | {r.get('failed_invocations')} / "
                 f"{r.get('redeliveries')} | {r['trace'].get('swaps_refused')} | "
                 f"{fmt(md.get('latency_ms'))} / {fmt(r.get('latency_ms_max'))} | "
                 f"{fmt(md.get('cpu_s'), 2)} | {fmt(md.get('cpu_wait_s'), 2)} | "
                 f"{fmt(max((x for x in rss if x), default=None))} max"
                 f" ({', '.join(fmt(x) for x in rss if x)}) | {ver} |")
    L.append("\nwall: the first event's dispatch → the last file's response. GB/s: input bytes "
             "(10^9) / wall. lost swaps: Σ (attempts − 1) over the commits (`applied` log lines): "
             "the catalog's compare-and-swap refused, the commit re-validated and retried on the "
             "new table without reading the file again; replans: plans thrown away (the file read "
             "and written again); CommitConflicts: the EMF metric (lost swaps + replans, lost "
             "races included). CPU: utime + stime of the function process during the invocation; "
             "runnable-waiting: time its threads were ready to run but had no core "
             "(/proc/<pid>/task/*/schedstat, summed over threads) — how much the shared cores "
             "stretched it. peak RSS: VmHWM of each function process over the whole run.\n")
    L.append("### Per invocation\n")
    L.append("| N | file | function | delivery | latency ms | handler ms | CPU s | waiting s | "
             "attempts | replans | read / write / commit ms | VmHWM MiB |")
    L.append("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---|---:|")
    for r in res["runs"]:
        for x in r["invocations"]:
            c = x["commits"][0] if x["commits"] else {"ms": {}}
            L.append(f"| {r['n']} | {x['file']} | {x['function']} | {x['delivery']} | "
                     f"{fmt(x['latency_ms'])} | {fmt(x.get('handler_ms'))} | {x['cpu_s']:.2f} | "
                     f"{x['cpu_wait_s']:.2f} | {[cc['attempts'] for cc in x['commits']]} | "
                     f"{x['replans']} | {fmt(c['ms'].get('read'))} / {fmt(c['ms'].get('write'))} / "
                     f"{fmt(c['ms'].get('commit'))} | {fmt(x.get('hwm_mib'))} |"
                     + (f" {x['outcome']}: {x.get('error', '')[:200]}" if x["outcome"] != "response" else ""))
    L.append("")
    L.append("### The catalog (delay-layer trace)\n")
    L.append("| N | requests | by kind | swaps ok / refused | commits/s: average / best "
             "window | manifest + manifest-list GETs (re-validation) | metadata.json bytes: first "
             "→ last (per commit) | requests over the model |")
    L.append("|---:|---:|---|---|---|---|---|---:|")
    for r in res["runs"]:
        t = r["trace"]
        kinds = ", ".join(f"{v} {k}" for k, v in t["by_kind"].items())
        L.append(f"| {r['n']} | {t['requests']} | {kinds} | {t['swaps_ok']} / {t['swaps_refused']} "
                 f"{t['refused_status'] or ''} | {fmt(t['commits_per_s_avg'], 2)} / "
                 f"{fmt(t['commits_per_s_best_window'], 2)} ({t['best_window']} commits) | "
                 f"{t['manifest_gets']} + {t['manifest_list_gets']} | "
                 f"{fmt(t['metadata_bytes_first'])} → {fmt(t['metadata_bytes_last'])} "
                 f"({fmt(t['metadata_bytes_per_commit'])}) | {t['over_model']} |")
    L.append("")
    mo = res.get("model") or {}
    if mo.get("error"):
        L.append(f"**No model:** {mo['error']}\n")
        return "\n".join(L)
    L.append("### Modelled: one vCPU per function\n")
    L.append("Measured inputs: each file's invocation time alone (N = 1"
             + (", one CPU" if res["runs"] and res["runs"][0].get("pinned_cpus") else "")
             + f"; median {fmt(statistics.median(mo['alone_latency_ms'].values()))} ms, commit step "
             f"{fmt(mo['alone_commit_ms'])} ms), the lost swaps, replans and redeliveries of each "
             f"N run, the cost of one lost swap: {fmt(mo['per_attempt_ms'])} ms "
             f"({mo['per_attempt_how']}).\n")
    L.append("| N | measured wall s (this machine) | modelled (b) lanes + measured retries: wall s / GB/s | "
             "modelled (c) lanes + CAS simulation: wall s / lost swaps (measured) |")
    L.append("|---:|---:|---|---|")
    for x in mo["runs"]:
        L.append(f"| {x['n']} | {fmt(x['measured_wall_s'], 2)} | {fmt(x['lanes']['wall_s'], 2)} / "
                 f"{fmt(x['lanes']['gb_per_s'], 3)} | {fmt(x['cas']['wall_s'], 2)} / "
                 f"{fmt(x['cas']['lost_swaps'])} ({x['measured_lost_swaps']}) |")
    L.append("\n(b): N lanes take the files in queue order, each file costing its N = 1 latency "
             "plus, for what the N run measured for that file, the per-attempt cost per lost swap, "
             "its N = 1 plan time per replan and its N = 1 latency per redelivery. (c): the same "
             "lanes with the commits simulated instead of taken from the N run: optimistic "
             "compare-and-swap on the table pointer; a first attempt builds on the table its "
             "invocation loaded at the start; a retry = the refused UpdateTable's answer + two "
             "DELETEs + the function's backoff (full jitter, 50 ms doubling to 5 s, 20 retries) + "
             "GetTable + metadata.json GET + re-validation (per snapshot committed since the "
             "previous attempt: its manifest list and its manifest, 16 snapshots at a time) + "
             "manifest list and metadata.json PUT + UpdateTable; request times from the model, "
             f"object sizes from the trace (manifest {fmt(mo['params']['manifest_bytes'])} B, "
             f"list {fmt(mo['params']['manifest_list_bytes'])} B, metadata.json "
             f"{fmt(mo['params']['metadata_bytes_first'])} B + "
             f"{fmt(mo['params']['metadata_bytes_per_commit'])} B per commit); median of 5 seeds "
             "(backoff jitter). (b) and (c) are MODELLED; only the 'measured wall' column is "
             "measured. (c) close to (b) and its lost swaps close to the measured ones say the "
             "simulation used for the projection below holds at this scale.\n")
    pr = mo["projection"]
    L.append(f"### Projection: {pr['files']:,} files x {pr['gib_per_file']:g} GiB "
             f"({pr['total_bytes'] / 1e12:.2f} TB), {pr['lanes']} concurrent invocations "
             "(MODELLED)\n")
    L.append(f"- A file's time, from N = 1: what comes before the ingest starts (event, "
             "config, listing, GetTable) and the final metadata PUT + UpdateTable as measured "
             f"and modelled ({fmt(pr['fixed_ms'])} ms), the rest (download, parse, encode, upload, "
             f"manifests) scaled by bytes ({pr['variable_ms_per_mib']:.2f} ms per MiB): "
             f"**{hms(pr['file_ms'] / 1000)} per {pr['gib_per_file']:g} GiB file** "
             f"(median of the files but the first; measured {fmt(pr['file_ms_alone_measured_size'])} ms at "
             f"{res['params']['mb']:g} MiB)"
             + (" — OVER the 900 s Lambda limit" if pr["file_ms"] > 900_000 else "") + ".")
    L.append(f"- Lanes bound: ceil({pr['files']} / {pr['lanes']}) = {pr['waves']} waves x "
             f"{hms(pr['file_ms'] / 1000)} = {hms(pr['lanes_bound_s'])}.")
    if pr.get("catalog_bound_s"):
        L.append(f"- Catalog bound: {pr['files']} commits / {fmt(pr['catalog_commits_per_s_avg'], 2)} "
                 f"commits/s (average the catalog sustained in the {pr['catalog_rate_from']} run; "
                 f"best {fmt(pr['catalog_commits_per_s_best_window'], 2)}/s over a window) = "
                 f"{hms(pr['catalog_bound_s'])}. On a 2-core machine the commits of that run come "
                 "as fast as the shared CPU lets the files finish, so this rate is what was asked "
                 "of the catalog, a lower bound on what it sustains.")
    else:
        L.append("- Catalog bound: no commit rate measured (fewer than 2 commits in the largest N).")
    L.append(f"- **Simple estimate (max of the two): {hms(pr['simple_s'])}** "
             f"({fmt(pr['simple_gb_per_s'], 3)} GB/s).")
    c, c2 = pr["cas"], pr["cas_before_419b63d"]
    L.append(f"- **CAS simulation: {hms(c['wall_s'])}** ({fmt(c.get('gb_per_s'), 3)} GB/s): "
             f"{fmt(c['lost_swaps'])} lost swaps, {fmt(c['attempts_mean'], 1)} attempts per commit "
             f"on average (max {c['attempts_max']}), {c['gave_up']} commits out of retries "
             f"({c['redeliveries']} files delivered again {fmt(pr['redelivery_s'])} s later, "
             f"SQS's visibility timeout, and read again); median of {c['seeds']} seeds; file "
             f"times: measured files but the first scaled, drawn at random ({pr['plan_spread'][0]:.3f}-"
             f"{pr['plan_spread'][1]:.3f} x the median). A commit's first attempt builds on the "
             "table its invocation loaded at the start, so it loses if anyone committed during "
             "the plan; each retry reloads and re-validates the snapshots committed since its "
             "previous attempt (their manifest lists and manifests, 16 at a time), so a retry's "
             "window stays short however many commits came during the plan.")
    L.append(f"- Same simulation, the code before 419b63d (each retry re-validated every "
             "snapshot since the plan, a manifest list and a manifest each, one after another): "
             f"{hms(c2['wall_s'])} ({fmt(c2.get('gb_per_s'), 3)} GB/s), "
             f"{fmt(c2['lost_swaps'])} lost swaps, {fmt(c2['attempts_mean'], 1)} attempts per "
             f"commit (max {c2['attempts_max']}), {c2['gave_up']} out of retries.")
    c3, c4 = pr["cas_redeliver_at_once"], pr["cas_before_419b63d_redeliver_at_once"]
    L.append(f"- Both again with a failed file delivered again at once instead of after the "
             f"visibility timeout (the contention alone): {hms(c3['wall_s'])} "
             f"({c3['gave_up']} out of retries) and {hms(c4['wall_s'])} ({c4['gave_up']}).")
    L.append(f"\nAssumed: every file has landed when the load starts (DMS writes them over time: "
             "this is the ingest's capacity, not the load's end to end); one event per "
             "invocation, taken when a lane is free; each invocation a warm function with one "
             "vCPU. The deployed defaults differ (template.yaml: IngestBatchSize 10 events per "
             "invocation, IngestMaxConcurrency 5, IngestTimeout 300 s): "
             f"{pr['lanes']} lanes need IngestMaxConcurrency >= {pr['lanes']}, and a "
             f"{pr['gib_per_file']:g} GiB file's {hms(pr['file_ms'] / 1000)} must fit "
             "IngestTimeout.")
    L.append("\nNot modelled: S3 throughput limits per prefix (3,500 PUT / 5,500 GET per second) and "
             "Glue API throttling; TLS handshakes; tail latency (every request takes exactly its "
             "modelled time); Lambda cold starts (the functions here are warm after init); "
             "the CPU cost of metadata.json growing with the snapshot count (its transfer time is "
             "modelled).\n")
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------
# Orchestration (called by latency.py)


def run(a, LT, backend: str, note: str) -> None:
    files, mb = parse_spec(a.full_load)
    ns = sorted({int(x) for x in a.functions.split(",") if x.strip()})
    if 1 not in ns:
        log("--functions: adding N = 1 (the model needs each file's time alone)")
        ns = [1] + ns
    lw = a.work / "latency-fullload"
    shutil.rmtree(lw, ignore_errors=True)
    (lw / "logs").mkdir(parents=True)
    started = dt.datetime.now()
    meta = workload(a.work, files, mb, a.seed, a.timeout)
    ing = Path(B.LAMBDA)
    res = {"date": started.strftime("%Y-%m-%d"), "started": started.strftime("%H:%M:%S"),
           "command": a.command, "machine": B.machine(), "versions": B.versions(),
           "binaries": {"ingest": str(ing), "ingest_mtime": dt.datetime.fromtimestamp(
               ing.stat().st_mtime, dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")},
           "load_start": os.getloadavg()[0], "model_name": "issue-13",
           "params": {"files": files, "mb": mb, "functions": ns, "alone_cpus": a.alone_cpus,
                      "seed": a.seed, "project_files": a.project_files,
                      "project_gib": a.project_gib, "project_lanes": a.project_lanes,
                      "project_redelivery_s": a.project_redelivery_s},
           "workload": {"rows": meta["rows"], "bytes": sum(meta["file_bytes"]),
                        "file_bytes": meta["file_bytes"], "expected": meta["expected"],
                        "dir": meta["dir"]},
           "s3_backend": {"backend": backend, "store": a.s3_store if backend == "fast" else None,
                          "note": note, "fallback": note.startswith("FALLBACK")},
           "runs": []}
    aws = LT.Aws(lw, "off", backend, a.s3_store)
    try:
        from boto3.s3.transfer import TransferConfig
        aws.s3.create_bucket(Bucket=BUCKET)
        aws.s3.put_object(Bucket="bench-config", Key=CONFIG_KEY, Body=TABLE_CONFIG.encode())
        keys = []
        t = time.time()
        for path in meta["files"]:
            key = f"dms/{NS}/{TABLE}/{Path(path).name}"
            aws.s3.upload_file(path, BUCKET, key, Config=TransferConfig(max_concurrency=4))
            keys.append(key)
        log(f"uploaded {len(keys)} files ({res['workload']['bytes'] / 2**20:,.0f} MiB) in "
            f"{time.time() - t:.1f} s")
        for n in ns:
            log(f"N = {n}: {n} function(s), {files} files")
            r = run_n(aws, n, meta, keys, lw, a)
            res["runs"].append(r)
            log(f"  N = {n}: wall {r['wall_s']:.2f} s, {fmt(r.get('gb_per_s'), 3)} GB/s, "
                f"{r['commits']} commits, {r['lost_swaps']} lost swaps, {r['replans']} replans, "
                f"peak RSS {fmt(max((x for x in r['peak_rss_mib'] if x), default=None))} MiB, "
                f"verified {r['verified']} {'' if r['verified'] else r['problems']}")
    finally:
        aws.stop()
    res["finished"] = dt.datetime.now().strftime("%H:%M:%S")
    res["load_end"] = os.getloadavg()[0]
    models(res, a)
    md = markdown(res)
    a.results.mkdir(parents=True, exist_ok=True)
    tag = a.tag if a.tag != "latency" else "latency-fullload"
    stem = f"{res['date']}-{tag}"
    (a.results / f"{stem}.json").write_text(json.dumps(res, indent=1, default=str))
    (a.results / f"{stem}.md").write_text(md + "\n")
    print(md)
    print(f"\nwrote {a.results / stem}.json and .md; traces in {lw / 'traces'}")
    bad = [str(r["n"]) for r in res["runs"] if not r.get("verified")]
    if bad:
        print("NOT VERIFIED (figures do not count): N = " + ", ".join(bad))
        sys.exit(1)


# ---------------------------------------------------------------------------------------------
# The verifier (own process)


def verify_main(a) -> None:
    import pyarrow as pa
    import gen_load as G
    import peers
    meta = json.loads(Path(a.meta).read_text())
    exp = meta["expected"]
    res: dict = {"problems": []}
    t = time.perf_counter()
    tbl = peers.glue_catalog(a.endpoint).load_table(a.table)
    s = G.Summary()
    for b in tbl.scan(selected_fields=("id", "name", "qty")).to_arrow_batch_reader():
        if isinstance(b, pa.Table):
            b = b.combine_chunks()
        s.add(b.column("id"), b.column("name"), b.column("qty"))
    got = s.result()
    dup = s.duplicate_keys()
    bad = [f"{k}: got {got[k]}, expected {exp[k]}" for k in exp if got[k] != exp[k]]
    if dup:
        bad.append(f"{dup} duplicate ids")
    if s.nulls:
        bad.append(f"{s.nulls} NULL values in id/name/qty")
    res.update({"reader": "pyiceberg (Glue)", "read_s": round(time.perf_counter() - t, 2),
                **got, "duplicate_ids": dup, "problems": bad, "ok": not bad,
                "snapshots": len(tbl.snapshots())})
    try:
        f = tbl.inspect.files().select(["content", "record_count"]).to_pylist()
        res["data_files"] = sum(1 for r in f if r["content"] == 0)
        res["delete_files"] = sum(1 for r in f if r["content"] != 0)
    except Exception as e:  # noqa: BLE001 - informational only
        res["files_error"] = str(e)
    print(json.dumps(res, default=str))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    v = sub.add_parser("verify")
    v.add_argument("--endpoint", required=True)
    v.add_argument("--table", required=True)
    v.add_argument("--meta", required=True)
    r = sub.add_parser("remodel", help="recompute the MODELLED parts of a saved result from its "
                       "measurements (after the model changed) and rewrite its .json and .md")
    r.add_argument("json", type=Path)
    a = ap.parse_args()
    if a.cmd == "verify":
        verify_main(a)
    elif a.cmd == "remodel":
        res = json.loads(a.json.read_text())
        pa_ = res["params"]
        models(res, argparse.Namespace(project_files=pa_["project_files"],
                                       project_gib=pa_["project_gib"],
                                       project_lanes=pa_["project_lanes"],
                                       project_redelivery_s=pa_["project_redelivery_s"]))
        res["remodelled"] = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
        a.json.write_text(json.dumps(res, indent=1, default=str))
        a.json.with_suffix(".md").write_text(markdown(res) + "\n")
        print(markdown(res))


if __name__ == "__main__":
    main()
