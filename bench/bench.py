#!/usr/bin/env python3
"""bench.py: dms2iceberg side by side with PyIceberg and delta-rs on the same DMS change files.
Run through `bench/run` (it creates bench/.venv and builds the release binaries first).

For every table size N and change-file size B: generate the workload (gen.py), then for each tool
load the N-row base and apply K change files one by one (one commit each), verify the final table
against the generator's expected state (every row and column for N <= 1M, else count and
checksums), and only then record the figures: median seconds per change file, rows/s, peak RSS
of the process doing the work (wait4 rusage of that process), data and delete files in the table
afterwards, and the time DuckDB takes to read the whole table. Then: the slope of time per file
against N, dms2iceberg's peak RSS on one ~1 GB change file, and the ingest Lambda's cold start.

Each figure is measured in its own process:
- dms2iceberg warm: one `dms2iceberg ingest <K files> --json` process; per-file time is each
  commit report's `timings.total_us` (microseconds). cold: one process per change file (a fresh
  process per file, as a new Lambda sandbox would be); per-file time is that commit report's
  time too (open the catalog, read the key columns from storage, write, commit), and the
  process's wall clock (start to exit) is reported beside it.
- PyIceberg / delta-rs: one Python process for the K files (peers.py changes); per-file time
  measured around read + dedupe + commit inside it.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PY = sys.executable
PEERS = str(HERE / "peers.py")
GEN = str(HERE / "gen.py")
CLI = Path(os.environ.get("BENCH_DMS2ICEBERG", ROOT / "target" / "release" / "dms2iceberg"))
LAMBDA = Path(os.environ.get("BENCH_DMS2ICEBERG_INGEST", ROOT / "target" / "release" / "dms2iceberg-ingest"))
LAMBDA_BUDGET_MB = 1769
PEER_TOOLS = ["pyiceberg", "delta", "duckdb"]
CONFIG = '[tables."shop.orders"]\nprimary_key = ["order_id"]\n'


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {msg}", flush=True)


# ---------------------------------------------------------------------------------------------
# Running one measured process


class Measured:
    def __init__(self, rc, wall_s, rss_mib, out, err, timed_out):
        self.rc, self.wall_s, self.rss_mib = rc, wall_s, rss_mib
        self.out, self.err, self.timed_out = out, err, timed_out

    @property
    def ok(self) -> bool:
        return self.rc == 0 and not self.timed_out

    def last_json(self) -> dict:
        for line in reversed(self.out.strip().splitlines()):
            if line.startswith("{"):
                return json.loads(line)
        raise RuntimeError(f"no JSON in output: {self.out[-500:]} {self.err[-2000:]}")

    def json_lines(self) -> list[dict]:
        return [json.loads(l) for l in self.out.splitlines() if l.startswith("{")]


def measure(cmd: list[str], timeout: float, env: dict | None = None,
            logfile: Path | None = None) -> Measured:
    """Runs cmd; wall clock, exit code and the peak RSS of that process — the process itself,
    not the children it may start.

    Peak RSS is the kernel's high-water mark of the process's own memory (`VmHWM` in
    /proc/<pid>/status), read every 10 ms until it exits. Not wait4's ru_maxrss: Linux carries
    the parent's high-water mark across fork and exec into the child's maxrss, so a child of a
    large Python process (this one, after reading a 10M-row table) reported the parent's size.

    Without `RUST_BACKTRACE` (unless `env` says otherwise), as a Lambda function runs: with it
    set, a library that builds an error it then drops captures a backtrace each time (iceberg's
    metadata-location parser does, on every commit)."""
    import tempfile
    if env is None:
        env = {k: v for k, v in os.environ.items()
               if k not in ("RUST_BACKTRACE", "RUST_LIB_BACKTRACE")}
    fo = tempfile.TemporaryFile("w+")
    fe = tempfile.TemporaryFile("w+")
    started = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], stdout=fo, stderr=fe, env=env,
                         start_new_session=True)
    timed_out = threading.Event()

    def kill():
        timed_out.set()
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    timer = threading.Timer(timeout, kill)
    timer.start()
    hwm = [0]
    done = threading.Event()

    def watch():
        path = f"/proc/{p.pid}/status"
        while not done.is_set():
            try:
                with open(path) as fh:
                    for line in fh:
                        if line.startswith("VmHWM:"):
                            hwm[0] = max(hwm[0], int(line.split()[1]))
                            break
            except OSError:
                return
            done.wait(0.01)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.perf_counter() - started
    done.set()
    watcher.join()
    timer.cancel()
    peak_kib = hwm[0] or ru.ru_maxrss
    p.returncode = os.waitstatus_to_exitcode(status)
    fo.seek(0)
    fe.seek(0)
    out, err = fo.read(), fe.read()
    if logfile:
        logfile.parent.mkdir(parents=True, exist_ok=True)
        with open(logfile, "a") as fh:
            fh.write(f"$ {' '.join(map(str, cmd))}\n# rc={p.returncode} wall={wall:.3f}s "
                     f"maxrss={peak_kib / 1024:.1f}MiB timed_out={timed_out.is_set()}\n"
                     f"{out[-4000:]}\n{err[-8000:]}\n")
    return Measured(p.returncode, wall, peak_kib / 1024, out, err, timed_out.is_set())


def median(xs):
    return statistics.median(xs) if xs else None


# ---------------------------------------------------------------------------------------------
# Workloads


def workload(work: Path, n: int, b: int, k: int, seed: int, ratios="0.7,0.2,0.1",
             name: str | None = None) -> dict:
    out = work / (name or f"w-n{n}-b{b}-k{k}-s{seed}")
    meta_path = out / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if all(Path(p).exists() for p in meta["load_files"] + meta["change_files"]):
            meta["dir"] = str(out)
            meta["gen_s"] = None
            return meta
    s = time.perf_counter()
    r = measure([PY, GEN, "workload", "--out", out, "--rows", n, "--changes", b, "--files", k,
                 "--seed", seed, "--ratios", ratios, "--base-dir", work / "bases"], 3600,
                logfile=work / "logs" / "gen.log")
    if not r.ok:
        raise SystemExit(f"generator failed: {r.err[-3000:]}")
    meta = json.loads(meta_path.read_text())
    meta["dir"] = str(out)
    meta["gen_s"] = time.perf_counter() - s
    return meta


# ---------------------------------------------------------------------------------------------
# Tools


def read_back(tool: str, table: Path, meta: dict, logs: Path, timeout: float) -> dict:
    """Verification (own reader: PyIceberg for Iceberg tables, deltalake for Delta), file
    counts, DuckDB read time. Raises if the table is wrong."""
    mp = Path(meta["dir"]) / "meta.json"
    full = meta["rows"] <= 1_000_000
    v = measure([PY, PEERS, "verify", "--tool", tool, "--table", table, "--meta", mp]
                + (["--full"] if full else []), timeout, logfile=logs)
    if not v.ok:
        return {"verified": False, "problems": [f"verify failed: {v.err[-1500:]}"]}
    vj = v.last_json()
    f = measure([PY, PEERS, "files", "--tool", tool, "--table", table], timeout, logfile=logs)
    d = measure([PY, PEERS, "duckdb", "--tool", tool, "--table", table, "--meta", mp], timeout,
                logfile=logs)
    fj = f.last_json() if f.ok else {}
    dj = d.last_json() if d.ok else {"reader": "duckdb", "median_s": None, "ok": False,
                                     "error": d.err[-500:]}
    problems = list(vj["problems"])
    if not dj.get("ok"):
        problems.append(f"DuckDB read-back differs from the expected checksums: {dj}")
    return {"verified": not problems, "problems": problems, "compared": vj["compared"],
            "verify_reader": vj["reader"], "rows": vj["count"], "files": fj,
            "duckdb": dj}


def run_dms2iceberg(meta: dict, case: Path, timeout: float, cold: bool) -> list[dict]:
    logs = case / "dms2iceberg.log"
    cfg = case / "config.toml"
    cfg.write_text(CONFIG)
    warm_wh, cold_wh = case / "dms2iceberg-warm", case / "dms2iceberg-cold"
    base = [CLI, "ingest"]
    opts = lambda wh: ["--warehouse", wh, "--config", cfg, "--json"]  # noqa: E731
    load = measure(base + meta["load_files"] + opts(warm_wh), timeout, logfile=logs)
    if not load.ok:
        return [failed("dms2iceberg", "load", load)]
    # Warm and cold start from the same loaded snapshot: the cold warehouse gets a copy of the
    # catalog (the pointer to the metadata); table files are immutable and uniquely named, so
    # both runs can write next to each other (as benches/ingest.rs does).
    cold_wh.mkdir(parents=True, exist_ok=True)
    shutil.copy(warm_wh / "catalog.db", cold_wh / "catalog.db")
    rows = []
    warm = measure(base + meta["change_files"] + opts(warm_wh), timeout, logfile=logs)
    if not warm.ok:
        rows.append(failed("dms2iceberg", "changes (warm)", warm))
    else:
        reps = warm.json_lines()
        per = [seconds(r) for r in reps]
        check_reports(reps, meta)
        rows.append({
            "tool": "dms2iceberg", "mode": "warm (1 process, K files)",
            "load_s": load.wall_s, "load_rss_mib": load.rss_mib,
            "per_file_s": per, "median_s": median(per), "process_wall_s": warm.wall_s,
            "steps_ms": step_medians(reps),
            "wall_per_file_s": warm.wall_s / len(per), "peak_rss_mib": warm.rss_mib,
            "reports": [{k: r.get(k) for k in ("inserted", "updated", "deleted",
                                                "deletes_of_absent_keys", "data_files",
                                                "delete_files", "lookup", "elapsed_ms",
                                                "timings")}
                        for r in reps],
            **read_back("dms2iceberg", warm_wh, meta, logs, timeout),
        })
    if cold:
        per_wall, per_el, rss, reps, bad = [], [], [], [], None
        for f in meta["change_files"]:
            r = measure(base + [f] + opts(cold_wh), timeout, logfile=logs)
            if not r.ok:
                bad = r
                break
            rep = r.json_lines()
            per_wall.append(r.wall_s)
            per_el.append(sum(seconds(x) for x in rep))
            rss.append(r.rss_mib)
            reps += rep
        if bad:
            rows.append(failed("dms2iceberg", "changes (cold)", bad))
        else:
            check_reports(reps, meta)
            rows.append({
                "tool": "dms2iceberg", "mode": "cold (1 process per file)",
                "load_s": load.wall_s, "load_rss_mib": load.rss_mib,
                "per_file_s": per_el, "median_s": median(per_el),
                "steps_ms": step_medians(reps),
                "per_file_wall_s": per_wall, "wall_per_file_s": median(per_wall),
                "peak_rss_mib": max(rss),
                "reports": [{k: r.get(k) for k in ("lookup", "elapsed_ms", "timings")}
                            for r in reps],
                **read_back("dms2iceberg", cold_wh, meta, logs, timeout),
            })
    return rows


STEPS = ("load", "read", "lookup", "write", "commit")


def seconds(rep: dict) -> float:
    """A commit report's time: its `timings.total_us` (microseconds; `elapsed_ms` is rounded
    down to whole milliseconds, too coarse for files that take 15 ms)."""
    total = (rep.get("timings") or {}).get("total_us")
    return total / 1e6 if total is not None else rep["elapsed_ms"] / 1000


def step_medians(reps: list[dict]) -> dict:
    """Median milliseconds per pipeline step over the commit reports (`timings`)."""
    out = {}
    for s in STEPS:
        v = [r["timings"][f"{s}_us"] / 1000 for r in reps if r.get("timings")]
        if v:
            out[s] = median(v)
    return out


def check_reports(reps: list[dict], meta: dict) -> None:
    if len(reps) != len(meta["change_files"]) or any(r["status"] != "applied" for r in reps):
        raise SystemExit(f"dms2iceberg did not apply every change file once: {reps}")


def run_peer(tool: str, meta: dict, case: Path, timeout: float, cold: bool = False) -> list[dict]:
    logs = case / f"{tool}.log"
    table = case / tool
    mp = Path(meta["dir"]) / "meta.json"
    rows = run_peer_warm(tool, meta, table, mp, logs, timeout)
    if cold and tool == "duckdb":
        rows += run_peer_cold(tool, meta, case / f"{tool}-cold", mp, logs, timeout)
    return rows


def run_peer_cold(tool: str, meta: dict, table: Path, mp: Path, logs: Path,
                  timeout: float) -> list[dict]:
    """A fresh process per change file, as a function that starts cold would run the peer:
    the in-process time (read + dedupe + commit, after connecting) and the process's wall clock
    (which for DuckDB also starts its local REST server)."""
    load = measure([PY, PEERS, "load", "--tool", tool, "--table", table, "--meta", mp], timeout,
                   logfile=logs)
    if not load.ok:
        return [failed(tool, "load (cold)", load)]
    per, walls, rss = [], [], []
    for i in range(len(meta["change_files"])):
        r = measure([PY, PEERS, "changes", "--tool", tool, "--table", table, "--meta", mp,
                     "--only", str(i)], timeout, logfile=logs)
        if not r.ok:
            return [failed(tool, "changes (cold)", r)]
        per += r.last_json()["per_file_s"]
        walls.append(r.wall_s)
        rss.append(r.rss_mib)
    return [{
        "tool": tool, "mode": "cold (1 process per file)",
        "load_s": load.wall_s, "load_rss_mib": load.rss_mib,
        "per_file_s": per, "median_s": median(per), "per_file_wall_s": walls,
        "wall_per_file_s": median(walls), "peak_rss_mib": max(rss),
        **read_back(tool, table, meta, logs, timeout),
    }]


def run_peer_warm(tool: str, meta: dict, table: Path, mp: Path, logs: Path,
                  timeout: float) -> list[dict]:
    load = measure([PY, PEERS, "load", "--tool", tool, "--table", table, "--meta", mp], timeout,
                   logfile=logs)
    if not load.ok:
        return [failed(tool, "load", load)]
    ch = measure([PY, PEERS, "changes", "--tool", tool, "--table", table, "--meta", mp], timeout,
                 logfile=logs)
    if not ch.ok:
        return [failed(tool, "changes", ch)]
    j = ch.last_json()
    per = j["per_file_s"]
    return [{
        "tool": tool, "mode": "1 process, K files",
        "load_s": load.wall_s, "load_rss_mib": load.rss_mib,
        "per_file_s": per, "median_s": median(per), "process_wall_s": ch.wall_s,
        "wall_per_file_s": ch.wall_s / len(per),
        "peak_rss_mib": ch.rss_mib, "details": j.get("details"),
        **read_back(tool, table, meta, logs, timeout),
    }]


def failed(tool: str, phase: str, r: Measured) -> dict:
    why = "timeout" if r.timed_out else f"exit {r.rc}"
    return {"tool": tool, "mode": phase, "verified": False, "median_s": None,
            "problems": [f"{phase}: {why} after {r.wall_s:.1f}s: {r.err.strip()[-1500:]}"],
            "peak_rss_mib": r.rss_mib}


# ---------------------------------------------------------------------------------------------
# Memory (one ~1 GB change file) and cold start


def memory_case(work: Path, timeout: float, rows: int, changes: int) -> dict:
    log(f"memory: generating {changes:,} changes (~1 GB CSV) against {rows:,} rows")
    meta = workload(work, rows, changes, 1, 43, ratios="0.8,0.15,0.05", name="w-memory")
    case = work / "case-memory"
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    cfg = case / "config.toml"
    cfg.write_text(CONFIG)
    wh = case / "wh"
    logs = case / "dms2iceberg.log"
    opts = ["--warehouse", wh, "--config", cfg, "--json"]
    load = measure([CLI, "ingest"] + meta["load_files"] + opts, timeout, logfile=logs)
    if not load.ok:
        return {"ok": False, "problem": f"load failed: {load.err[-1500:]}"}
    log("memory: ingesting the 1 GB file")
    r = measure([CLI, "ingest"] + meta["change_files"] + opts, timeout, logfile=logs)
    res = {"table_rows": rows, "change_rows": changes,
           "file_bytes": meta["change_file_bytes"][0], "wall_s": r.wall_s,
           "peak_rss_mib": r.rss_mib, "budget_mib": LAMBDA_BUDGET_MB,
           "fits": r.ok and r.rss_mib <= LAMBDA_BUDGET_MB, "ok": r.ok,
           "ratios": meta["ratios"]}
    if not r.ok:
        res["problem"] = ("timeout" if r.timed_out else f"exit {r.rc}") + ": " + r.err[-1500:]
        return res
    res["report"] = r.json_lines()
    log("memory: verifying")
    res.update(read_back("dms2iceberg", wh, meta, logs, timeout))
    return res


EMULATOR = ROOT / "tests" / "support" / "lambda_runtime_api.py"
MOTO = ROOT / "tests" / "support" / "moto_server.py"


def wait_port(port_file: Path, proc: subprocess.Popen, what: str, timeout: float = 60) -> int:
    end = time.time() + timeout
    while time.time() < end:
        if port_file.exists() and port_file.read_text().strip():
            return int(port_file.read_text().strip())
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not start")


def stop(p: subprocess.Popen) -> None:
    if p.poll() is None:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    p.wait()


def invoke_fresh(d: Path, tag: str, event: dict, env_extra: dict, timeout: float = 300) -> dict:
    """A fresh function process (a cold sandbox) under the Runtime API emulator, given one
    event queued before it starts: process start -> first `next` -> response."""
    (d / f"ev-{tag}").mkdir(parents=True)
    (d / f"ev-{tag}" / "001.json").write_text(json.dumps(event))
    port_file, results = d / f"port-{tag}", d / f"results-{tag}.jsonl"
    emu = subprocess.Popen([PY, EMULATOR, "--port", "0", "--port-file", port_file, "--event",
                            d / f"ev-{tag}", "--results", results],
                           stdout=subprocess.DEVNULL, stderr=open(d / f"emu-{tag}.log", "w"),
                           start_new_session=True)
    fn = None
    try:
        port = wait_port(port_file, emu, "lambda_runtime_api.py")
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({
            "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
            "AWS_LAMBDA_FUNCTION_NAME": "dms2iceberg-ingest",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(LAMBDA_BUDGET_MB),
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_LOG_STREAM_NAME": "bench", "AWS_LAMBDA_LOG_GROUP_NAME": "bench",
            "AWS_REGION": "us-east-1", "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true",
            "DMS2ICEBERG_SPOOL_DIR": str(d / f"spool-{tag}"),
        })
        env.update(env_extra)
        t0 = time.time() * 1000
        fn = subprocess.Popen([LAMBDA], env=env, stdout=open(d / f"fn-{tag}.log", "w"),
                              stderr=subprocess.STDOUT, start_new_session=True)
        end = time.time() + timeout
        while time.time() < end:
            if results.exists() and results.read_text().strip():
                o = json.loads(results.read_text().strip().splitlines()[0])
                # the event is queued before the function starts: its first `next` gets it
                return {"outcome": o["outcome"], "first_next_ms": o["served_at_ms"] - t0,
                        "first_event_handled_ms": o["finished_at_ms"] - t0,
                        "handler_ms": o.get("duration_ms"), "body": o.get("body")}
            if fn.poll() is not None:
                break
            time.sleep(0.005)
        return {"outcome": "none", "log": (d / f"fn-{tag}.log").read_text()[-1500:]}
    finally:
        if fn is not None:
            stop(fn)
        stop(emu)


def cold_start(work: Path, meta: dict | None, timeout: float) -> dict:
    res = {"binary": str(LAMBDA.relative_to(ROOT)) if LAMBDA.is_relative_to(ROOT) else str(LAMBDA)}
    if not LAMBDA.exists():
        res["problem"] = "binary not built"
        return res
    res["binary_bytes"] = LAMBDA.stat().st_size
    res["binary_mib"] = LAMBDA.stat().st_size / 2**20
    try:
        import re
        res["file"] = re.sub(r", BuildID\[\w+\]=[0-9a-f]+", "", subprocess.run(
            ["file", "-b", LAMBDA], capture_output=True, text=True).stdout.strip())
    except FileNotFoundError:
        pass
    try:  # what a deployment zip would hold if stripped
        stripped = work / "dms2iceberg-ingest.stripped"
        subprocess.run(["strip", "-o", stripped, LAMBDA], check=True, capture_output=True)
        res["stripped_bytes"] = stripped.stat().st_size
        res["stripped_mib"] = stripped.stat().st_size / 2**20
        stripped.unlink()
    except (FileNotFoundError, subprocess.CalledProcessError):
        pass
    if not EMULATOR.exists():
        res["runtime_emulator"] = "tests/support/lambda_runtime_api.py missing: not measured"
        return res
    d = work / "cold-start"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    # 1. An SQS batch with no records: the handler parses it and answers without calling AWS.
    #    Measures exec, tracing, environment, AWS config and clients, handler construction.
    runs = [invoke_fresh(d, f"empty{i}", {"Records": []},
                         {"AWS_ENDPOINT_URL": "http://127.0.0.1:9",
                          "DMS2ICEBERG_WAREHOUSE": "s3://warehouse/warehouse"})
            for i in range(5)]
    res["empty"] = {"event": "SQS batch with no records (no S3/Glue call)", "runs": runs}
    good = [r for r in runs if r.get("outcome") == "response"]
    if good:
        res["empty"]["median_first_next_ms"] = median([r["first_next_ms"] for r in good])
        res["empty"]["median_first_event_handled_ms"] = median(
            [r["first_event_handled_ms"] for r in good])
    # 2. Through the local S3 + Glue emulator: every change file lands, then a fresh function
    #    process gets its EventBridge event and applies it to the Glue table on S3.
    res["s3_glue"] = lambda_s3_glue(d, meta, timeout) if meta else {"problem": "no workload"}
    return res


def lambda_s3_glue(d: Path, meta: dict, timeout: float) -> dict:
    if not MOTO.exists():
        return {"problem": "tests/support/moto_server.py missing: not measured"}
    try:
        import boto3
        import moto  # noqa: F401
    except ImportError as e:
        return {"problem": f"moto/boto3 not installed in bench/.venv ({e}): not measured"}
    port_file = d / "moto.port"
    mp = subprocess.Popen([PY, MOTO, "serve", "--port", "0", "--port-file", port_file],
                          stdout=open(d / "moto.log", "w"), stderr=subprocess.STDOUT,
                          start_new_session=True)
    try:
        port = wait_port(port_file, mp, "moto_server.py", 120)
        url = f"http://127.0.0.1:{port}"
        s3 = boto3.client("s3", endpoint_url=url, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
        for b in ("landing", "warehouse"):
            s3.create_bucket(Bucket=b)
        s3.put_object(Bucket="landing", Key="config/dms2iceberg.toml",
                      Body=('[source]\nbucket_folder = "dms"\n\n' + CONFIG).encode())
        env = {"AWS_ENDPOINT_URL": url, "DMS2ICEBERG_S3_PATH_STYLE": "true",
               "DMS2ICEBERG_WAREHOUSE": "s3://warehouse/warehouse",
               "DMS2ICEBERG_GLUE_DATABASE": "shop",
               "DMS2ICEBERG_CONFIG": "s3://landing/config/dms2iceberg.toml"}
        runs = []
        for i, path in enumerate(meta["load_files"] + meta["change_files"]):
            key = "dms/shop/orders/" + Path(path).name
            s3.upload_file(path, "landing", key)
            ev = {"version": "0", "id": f"bench-{i}", "detail-type": "Object Created",
                  "source": "aws.s3", "account": "123456789012", "time": "2026-11-30T12:00:00Z",
                  "region": "us-east-1", "resources": ["arn:aws:s3:::landing"],
                  "detail": {"version": "0", "bucket": {"name": "landing"},
                             "object": {"key": key, "size": os.path.getsize(path)},
                             "reason": "PutObject"}}
            r = invoke_fresh(d, f"s3glue{i}", ev, env, timeout)
            r["file"] = Path(path).name
            r["kind"] = "load" if i < len(meta["load_files"]) else "change"
            runs.append(r)
            if r.get("outcome") != "response":
                return {"problem": f"{r['file']}: {r}", "runs": runs}
        v = measure([PY, PEERS, "verify", "--tool", "dms2iceberg", "--table", d, "--meta",
                     Path(meta["dir"]) / "meta.json", "--full", "--glue-endpoint", url],
                    timeout, logfile=d / "verify.log")
        vj = v.last_json() if v.ok else {"ok": False, "problems": [v.err[-1500:]]}
        ch = [r for r in runs if r["kind"] == "change"]
        return {"event": "EventBridge Object Created for each file, one fresh process each",
                "table_rows": meta["rows"], "changes_per_file": meta["changes"],
                "runs": runs, "verified": vj.get("ok"), "problems": vj.get("problems"),
                "compared": vj.get("compared"), "reader": vj.get("reader"),
                "median_change_first_next_ms": median([r["first_next_ms"] for r in ch]),
                "median_change_first_event_handled_ms": median(
                    [r["first_event_handled_ms"] for r in ch]),
                "median_change_handler_ms": median([r["handler_ms"] for r in ch])}
    finally:
        stop(mp)


# ---------------------------------------------------------------------------------------------
# Environment


def machine() -> dict:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kib = int(next(l.split()[1] for l in Path("/proc/meminfo").read_text().splitlines()
                       if l.startswith("MemTotal")))
    return {"nproc": os.cpu_count(), "memory_gib": round(mem_kib / 2**20, 1), "cpu": cpu,
            "kernel": platform.release(), "python": platform.python_version()}


def versions() -> dict:
    v = {}
    for p in ["pyiceberg", "deltalake", "duckdb", "duckdb-extension-iceberg",
              "duckdb-extension-avro", "duckdb-extension-delta", "pyarrow", "numpy"]:
        try:
            v[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            v[p] = None
    for cmd, key in ((["rustc", "--version"], "rustc"), ([CLI, "--version"], "dms2iceberg")):
        try:
            out = subprocess.run(cmd, capture_output=True, text=True).stdout.strip()
            v[key] = out.removeprefix(key).strip()
        except FileNotFoundError:
            v[key] = None
    git = lambda *a: subprocess.run(["git", "-C", ROOT, *a], capture_output=True,  # noqa: E731
                                    text=True).stdout
    v["git_commit"] = git("rev-parse", "--short", "HEAD").strip()
    dirty = [l[3:] for l in git("status", "--porcelain").splitlines()
             if l[3:] and not l[3:].startswith("bench/")]
    v["git_dirty_outside_bench"] = dirty
    return v


def wait_for_quiet(threshold: float, max_wait_s: float) -> dict:
    start = time.time()
    seen = []
    while True:
        l1 = os.getloadavg()[0]
        seen.append(round(l1, 2))
        if l1 < threshold:
            return {"waited_s": round(time.time() - start), "load_1m_at_start": l1,
                    "quiet": True, "polled": seen}
        if time.time() - start >= max_wait_s:
            return {"waited_s": round(time.time() - start), "load_1m_at_start": l1,
                    "quiet": False, "polled": seen}
        log(f"waiting for the 1-minute load to drop below {threshold} (now {l1:.2f})")
        time.sleep(60)


# ---------------------------------------------------------------------------------------------
# Report


def fmt(x, nd=3):
    if x is None:
        return "—"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return f"{x:,}"


def fmt_x(x):
    return f"{x:.2f}x" if x else "—"


def analyse(res: dict) -> None:
    """Adds ratios, slopes and the Markdown tables to res."""
    cases = res["cases"]
    for c in cases:
        peers = [r for r in c["results"] if r["tool"] in PEER_TOOLS and r.get("verified")]
        best = min(peers, key=lambda r: r["median_s"]) if peers else None
        c["best_peer"] = best["tool"] if best else None
        for r in c["results"]:
            if r.get("median_s") and r.get("verified"):
                r["rows_per_s"] = c["changes"] / r["median_s"]
                if best:
                    r["time_vs_best_peer"] = r["median_s"] / best["median_s"]
                    r["rss_vs_best_peer"] = r["peak_rss_mib"] / best["peak_rss_mib"]
    # slopes at the scaling B
    sb = res["params"]["scaling_changes"]
    slopes = {}
    for key in {(r["tool"], r["mode"]) for c in cases for r in c["results"]}:
        pts = sorted((c["rows"], r["median_s"]) for c in cases if c["changes"] == sb
                     for r in c["results"] if (r["tool"], r["mode"]) == key
                     and r.get("verified") and r.get("median_s"))
        if len(pts) < 2:
            continue
        xs = [math.log10(n) for n, _ in pts]
        ys = [math.log10(t) for _, t in pts]
        mx, my = statistics.mean(xs), statistics.mean(ys)
        expo = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
        nx = [n / 1e6 for n, _ in pts]
        ty = [t for _, t in pts]
        mnx, mty = statistics.mean(nx), statistics.mean(ty)
        lin = sum((x - mnx) * (y - mty) for x, y in zip(nx, ty)) / \
            sum((x - mnx) ** 2 for x in nx)
        slopes[f"{key[0]} {key[1]}"] = {
            "points": [{"rows": n, "median_s": t} for n, t in pts],
            "loglog_exponent": expo, "s_per_million_rows": lin,
            "growth_last_vs_first": pts[-1][1] / pts[0][1],
            "rows_growth": pts[-1][0] / pts[0][0]}
    res["scaling"] = slopes


def markdown(res: dict) -> str:
    m = res["machine"]
    v = res["versions"]
    L = []
    L.append(f"Run {res['date']} ({res['started']} → {res['finished']}), command `{res['command']}`.\n")
    if res["params"].get("ordering_column"):
        L.append(f"dms2iceberg ran with `ordering_column = \"{res['params']['ordering_column']}\"`.\n")
    L.append(f"Machine: {m['nproc']} cores, {m['memory_gib']} GiB, {m['cpu']}, Linux "
             f"{m['kernel']}, Python {m['python']}. 1-minute load: {res['load']['load_1m_at_start']:.2f} "
             f"at the start ("
             + (f"no wait requested" if res['load'].get('threshold') is None else
                f"waited {res['load']['waited_s']} s for it to drop below {res['load']['threshold']}"
                + ("" if res['load']['quiet'] else ": it never did"))
             + "), "
             f"{res['load_end']:.2f} at the end; per case in the JSON.\n")
    L.append("Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()
                                        if k not in ("git_dirty_outside_bench",)) + ".")
    if v.get("git_dirty_outside_bench"):
        L.append(f" Working tree had uncommitted changes outside bench/ at the time of the run "
                 f"(other engineers' work in progress; the binaries were built from the tree "
                 f"as it was at build time): {', '.join(v['git_dirty_outside_bench'])}.")
    L.append(f"\nSetup: venv install {fmt(res['setup'].get('install_s'), 1)} s "
             f"({res['setup'].get('install_note', '')}), cargo build --release "
             f"{fmt(res['setup'].get('build_s'), 1) + ' s (incremental: no-op when up to date)' if res['setup'].get('build_s') is not None else 'skipped (--no-build)'}.\n")
    L.append(f"Workload: K={res['params']['files']} change files per case, 70% U / 20% I / 10% D, "
             f"~5% of each file's rows a second change of a key already changed in that file; "
             f"DMS CSV with header, ~100 bytes per row.\n")
    L.append("### Per change file\n")
    L.append("| N rows | B rows/file | tool | mode | median s/file | wall s/file | rows/s | time vs best peer | "
             "peak RSS MiB | RSS vs best peer | data files after K | delete files | DuckDB full read s | "
             "load s | verified |")
    L.append("|---:|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
    for c in res["cases"]:
        for r in c["results"]:
            fl = r.get("files") or {}
            dk = r.get("duckdb") or {}
            ver = ("yes, " + r.get("compared", "")) if r.get("verified") else \
                "NO: " + "; ".join(r.get("problems", []))[:200]
            L.append(
                f"| {c['rows']:,} | {c['changes']:,} | {r['tool']} | {r['mode']} | "
                f"{fmt(r.get('median_s'))} | {fmt(r.get('wall_per_file_s'))} | "
                f"{fmt(r.get('rows_per_s'), 0)} | "
                f"{fmt_x(r.get('time_vs_best_peer'))} | "
                f"{fmt(r.get('peak_rss_mib'), 0)} | "
                f"{fmt_x(r.get('rss_vs_best_peer'))} | "
                f"{fmt(fl.get('data_files'))} | {fmt(fl.get('delete_files'))} | "
                f"{fmt(dk.get('median_s'))} | {fmt(r.get('load_s'), 2)} | {ver} |")
    L.append("\nmedian s/file: measured in the process for each file (dms2iceberg: the commit "
             "report's `timings.total_us`, in microseconds; peers: read + dedupe + commit); rows/s and the ratios use it. "
             "wall s/file: the measured process's wall clock divided by K (warm, peers: includes "
             "process start, imports and opening the table once), or the median wall clock of "
             "one process per file (dms2iceberg cold). Peak RSS: that process (max over the K "
             "processes for cold). Ratios: against the fastest of PyIceberg, delta-rs and DuckDB in the "
             "same case.\n")
    L.append("\nDuckDB read: `iceberg_scan` (Iceberg tables) / `delta_scan` (Delta), extensions "
             "loaded offline from the PyPI packages; median of 3 reads of every column. "
             "Verification reader: PyIceberg for both Iceberg tables, deltalake for Delta.\n")
    stepped = [(c, r) for c in res["cases"] for r in c["results"] if r.get("steps_ms")]
    if stepped:
        L.append("### Where dms2iceberg's time goes\n")
        L.append("Median milliseconds per change file and pipeline step, from the `timings` of "
                 "each commit report (`ingest --json`).\n")
        L.append("| N rows | B rows/file | mode | " + " | ".join(STEPS) + " |")
        L.append("|---:|---:|---|" + "---:|" * len(STEPS))
        for c, r in stepped:
            L.append(f"| {c['rows']:,} | {c['changes']:,} | {r['mode']} | "
                     + " | ".join(fmt(r["steps_ms"].get(s), 1) for s in STEPS) + " |")
        L.append("")
    L.append(f"### Scaling (B = {res['params']['scaling_changes']:,})\n")
    L.append("| tool | mode | median s/file at each N | growth (time) for the N growth | "
             "log-log slope | s per extra 1M rows |")
    L.append("|---|---|---|---:|---:|---:|")
    for key, s in sorted(res["scaling"].items()):
        pts = ", ".join(f"{p['rows']:,}: {p['median_s']:.3f}" for p in s["points"])
        tool, mode = key.split(" ", 1)
        L.append(f"| {tool} | {mode} | {pts} | {s['growth_last_vs_first']:.2f}x for "
                 f"{s['rows_growth']:.0f}x | {s['loglog_exponent']:.2f} | "
                 f"{s['s_per_million_rows']:.4f} |")
    L.append("\nlog-log slope: exponent a in time ∝ N^a (0 = independent of the table size, "
             "1 = proportional to it).\n")
    mem = res.get("memory")
    if mem:
        L.append("### Memory: one ~1 GB change file\n")
        if mem.get("ok"):
            L.append(f"dms2iceberg ingesting one {mem['file_bytes'] / 1e9:.2f} GB CSV change file "
                     f"({mem['change_rows']:,} changes, {int(mem['ratios'][0]*100)}% U / "
                     f"{int(mem['ratios'][1]*100)}% I / {int(mem['ratios'][2]*100)}% D) into a "
                     f"{mem['table_rows']:,}-row table: peak RSS **{mem['peak_rss_mib']:,.0f} MiB** "
                     f"vs the {LAMBDA_BUDGET_MB:,} MB Lambda budget: "
                     f"**{'fits' if mem['fits'] else 'DOES NOT FIT'}**; {mem['wall_s']:.1f} s wall; "
                     f"verified: {'yes, ' + mem.get('compared', '') if mem.get('verified') else 'NO ' + str(mem.get('problems'))}.\n")
        else:
            L.append(f"dms2iceberg on one {mem.get('file_bytes', 0) / 1e9:.2f} GB change file "
                     f"failed: {mem.get('problem')} (peak RSS {fmt(mem.get('peak_rss_mib'), 0)} MiB "
                     f"when it stopped).\n")
    cs = res.get("cold_start")
    if cs:
        L.append("### Ingest Lambda: binary and cold start\n")
        L.append(f"`{cs['binary']}`: {fmt(cs.get('binary_mib'), 1)} MiB ({fmt(cs.get('binary_bytes'))} "
                 f"bytes; {cs.get('file', '')}); stripped: {fmt(cs.get('stripped_mib'), 1)} MiB.\n")
        e = cs.get("empty") or {}
        if e.get("median_first_event_handled_ms") is not None:
            L.append(f"- Fresh process, event = {e['event']}: start → first `next` (init done) median "
                     f"{e['median_first_next_ms']:.0f} ms, → first event handled median "
                     f"{e['median_first_event_handled_ms']:.0f} ms ({len(e['runs'])} runs).")
        elif cs.get("runtime_emulator"):
            L.append(f"- Cold start not measured: {cs['runtime_emulator']}")
        g = cs.get("s3_glue") or {}
        if g.get("median_change_first_event_handled_ms") is not None:
            loads = [r for r in g["runs"] if r["kind"] == "load"]
            L.append(f"- Fresh process per DMS file through the local S3 + Glue emulator "
                     f"(tests/support/moto_server.py, moto): a {g['table_rows']:,}-row table, "
                     f"change files of {g['changes_per_file']:,} rows. Change file: start → first "
                     f"`next` median {g['median_change_first_next_ms']:.0f} ms, → event handled "
                     f"(file applied and committed to Glue) median "
                     f"{g['median_change_first_event_handled_ms']:.0f} ms (handler "
                     f"{g['median_change_handler_ms']:.0f} ms); full load event "
                     f"{loads[0]['first_event_handled_ms']:.0f} ms. Final table verified through "
                     f"PyIceberg's GlueCatalog: {'yes, ' + (g.get('compared') or '') if g.get('verified') else 'NO ' + str(g.get('problems'))}.")
        elif g.get("problem"):
            L.append(f"- Through S3 + Glue: not measured ({g['problem'][:300]}).")
        L.append("\nRuntime API: tests/support/lambda_runtime_api.py, the event queued before "
                 "the process starts; times from process spawn.\n")
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--big", action="store_true", help="add N=10M and B=100k")
    ap.add_argument("--sizes", help="table sizes, comma-separated (default 100000,1000000)")
    ap.add_argument("--changes", help="rows per change file (default 1000,10000)")
    ap.add_argument("--files", type=int, default=5, help="change files per case (K)")
    ap.add_argument("--tools", default="dms2iceberg,pyiceberg,delta")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--no-cold", action="store_true", help="skip dms2iceberg one-process-per-file")
    ap.add_argument("--ordering", action="store_true",
                    help="dms2iceberg with ordering_column = \"updated_at\" (what the README "
                         "recommends; peers apply files in order and need none)")
    ap.add_argument("--no-memory", action="store_true", help="skip the 1 GB file")
    ap.add_argument("--memory-rows", type=int, default=1_000_000)
    ap.add_argument("--memory-changes", type=int, default=10_000_000)
    ap.add_argument("--no-cold-start", action="store_true")
    ap.add_argument("--timeout", type=float, default=1200, help="seconds per measured process")
    ap.add_argument("--wait-load", type=float, default=None,
                    help="wait (max --wait-max s, polling every 60 s) until the 1-minute load is "
                         "below this before measuring")
    ap.add_argument("--wait-max", type=float, default=1800)
    ap.add_argument("--work", type=Path, default=HERE / "work")
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--keep", action="store_true", help="keep the tables of each case")
    ap.add_argument("--setup-json", type=Path, help="written by bench/run: install/build times")
    ap.add_argument("--command", default="bench/run")
    ap.add_argument("--tag", help="results file name: <date>-<tag>.json (default: <date>[-big])")
    a = ap.parse_args()
    if a.ordering:
        global CONFIG
        CONFIG += 'ordering_column = "updated_at"\n'

    sizes = [int(x) for x in (a.sizes or "100000,1000000").split(",")]
    changes = [int(x) for x in (a.changes or "1000,10000").split(",")]
    if a.big:
        sizes = sorted(set(sizes) | {10_000_000})
        changes = sorted(set(changes) | {100_000})
    tools = a.tools.split(",")
    for t in tools:
        if t not in ("dms2iceberg", *PEER_TOOLS):
            raise SystemExit(f"unknown tool {t}")
    if "dms2iceberg" in tools and not CLI.exists():
        raise SystemExit(f"{CLI} missing: cargo build --release -p dms2iceberg-cli")
    a.work.mkdir(parents=True, exist_ok=True)
    a.results.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now()
    setup = json.loads(a.setup_json.read_text()) if a.setup_json and a.setup_json.exists() else {}

    # Generate everything first (not measured), then wait for a quiet machine, then measure.
    log(f"generating workloads: N {sizes}, B {changes}, K {a.files}")
    metas = {}
    for n in sizes:
        for b in changes:
            metas[(n, b)] = workload(a.work, n, b, a.files, a.seed)
            log(f"  N={n:,} B={b:,}: {metas[(n, b)]['expected_rows']:,} expected rows")
    if not a.no_memory and "dms2iceberg" in tools:
        workload(a.work, a.memory_rows, a.memory_changes, 1, 43, ratios="0.8,0.15,0.05",
                 name="w-memory")
    load = {"waited_s": 0, "load_1m_at_start": os.getloadavg()[0], "quiet": None}
    if a.wait_load is not None:
        load = wait_for_quiet(a.wait_load, a.wait_max)
    load["threshold"] = a.wait_load
    res = {"date": started.strftime("%Y-%m-%d"), "started": started.strftime("%H:%M:%S"),
           "command": a.command, "machine": machine(), "versions": versions(), "setup": setup,
           "load": load,
           "params": {"sizes": sizes, "changes": changes, "files": a.files, "tools": tools,
                      "seed": a.seed, "scaling_changes": 10_000 if 10_000 in changes else changes[0],
                      "ordering_column": "updated_at" if a.ordering else None},
           "cases": []}
    for n in sizes:
        for b in changes:
            meta = metas[(n, b)]
            case = a.work / f"case-n{n}-b{b}"
            shutil.rmtree(case, ignore_errors=True)
            case.mkdir(parents=True)
            c = {"rows": n, "changes": b, "files": a.files,
                 "change_file_bytes": meta["change_file_bytes"],
                 "expected_rows": meta["expected_rows"], "load_1m_before": os.getloadavg()[0],
                 "results": []}
            for t in tools:
                log(f"N={n:,} B={b:,}: {t}")
                if t == "dms2iceberg":
                    rows = run_dms2iceberg(meta, case, a.timeout, not a.no_cold)
                else:
                    rows = run_peer(t, meta, case, a.timeout, cold=not a.no_cold)
                for r in rows:
                    log(f"    {r['tool']} {r['mode']}: median {fmt(r.get('median_s'))} s/file, "
                        f"peak RSS {fmt(r.get('peak_rss_mib'), 0)} MiB, verified "
                        f"{r.get('verified')} {'' if r.get('verified') else r.get('problems')}")
                c["results"] += rows
            c["load_1m_after"] = os.getloadavg()[0]
            res["cases"].append(c)
            if not a.keep:
                shutil.rmtree(case, ignore_errors=True)
    if not a.no_memory and "dms2iceberg" in tools:
        res["memory"] = memory_case(a.work, a.timeout, a.memory_rows, a.memory_changes)
        log(f"memory: peak RSS {fmt(res['memory'].get('peak_rss_mib'), 0)} MiB")
        if not a.keep:
            shutil.rmtree(a.work / "case-memory", ignore_errors=True)
    if not a.no_cold_start:
        lam = metas.get((100_000, 1_000)) or metas[min(metas)]
        log(f"lambda cold start (empty event; then S3/Glue emulator, N={lam['rows']:,} "
            f"B={lam['changes']:,})")
        res["cold_start"] = cold_start(a.work, lam, a.timeout)
        cs = res["cold_start"]
        log(f"cold start: empty {cs.get('empty', {}).get('median_first_event_handled_ms')} ms, "
            f"S3/Glue {cs.get('s3_glue', {}).get('median_change_first_event_handled_ms')} ms "
            f"{cs.get('s3_glue', {}).get('problem') or ''}")
    res["finished"] = dt.datetime.now().strftime("%H:%M:%S")
    res["load_end"] = os.getloadavg()[0]
    analyse(res)
    md = markdown(res)
    # Never over an earlier result of the same name (a figure RESULTS.md may cite): -2, -3, ...
    base = res["date"] + (f"-{a.tag}" if a.tag else "-big" if a.big else "")
    stem, n = base, 1
    while (a.results / f"{stem}.json").exists() or (a.results / f"{stem}.md").exists():
        n += 1
        stem = f"{base}-{n}"
    out_json = a.results / f"{stem}.json"
    out_md = a.results / f"{stem}.md"
    out_json.write_text(json.dumps(res, indent=1, default=str))
    out_md.write_text(md + "\n")
    print(md)
    print(f"\nwrote {out_json} and {out_md}")
    bad = [f"N={c['rows']} B={c['changes']} {r['tool']} {r['mode']}" for c in res["cases"]
           for r in c["results"] if not r.get("verified")]
    if bad:
        print("NOT VERIFIED (figures excluded from ratios): " + "; ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
