#!/usr/bin/env python3
"""underload.py: compaction on a schedule against a hot table that ingest keeps changing.

  bench/compaction --under-load [--rows 1000000] [--changes 2000] [--feed-files 150]
                   [--interval 0.4] [--writers 2] [--every 5] [--sample 10]

A table of `--rows` rows (full load) receives `--feed-files` change files of `--changes` rows each
(70% U / 20% I / 10% D over the whole key space), one every `--interval` seconds into a feed
folder; `--writers` ingest processes loop over the feed (as several Lambdas would; each run of
`dms2iceberg ingest` applies what it finds, exactly once). Twice, on fresh copies of the same
loaded table: once with `dms2iceberg compact` started every `--every` seconds (the scheduled
compaction function), once without (the baseline, same run, same feed). Every `--sample`
seconds: live data files and delete files, and the time to read the whole table with DuckDB
(`iceberg_scan`, every column), PyIceberg (`scan().to_arrow()`) and our `scan`. At the end
each table is verified against the generator's expected state (PyIceberg full compare up to
1M rows, checksums above; DuckDB checksums).

Reported: compaction runs, commits, re-plans, give-ups (runs that failed), rows deleted by
ingest meanwhile and carried over, peak RSS per run; file counts and read times over time.
"""
from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path

import bench
import peers


def loaded(meta: dict, d: Path, logs: Path, timeout: float) -> Path:
    """A warehouse with the full load applied."""
    wh = d / "wh"
    cfg = d / "config.toml"
    cfg.write_text(bench.CONFIG)
    r = bench.measure([bench.CLI, "ingest"] + meta["load_files"] +
                      ["--warehouse", wh, "--config", cfg, "--json"], timeout, logfile=logs)
    if not r.ok:
        raise SystemExit(f"load failed: {r.err[-3000:]}")
    return wh


def files_now(wh: Path) -> dict:
    try:
        return peers.count_files("dms2iceberg", wh)
    except Exception as e:  # noqa: BLE001 - a sample may race a commit; reported as missing
        return {"error": str(e)[:200]}


def read_times(wh: Path, meta_path: Path) -> dict:
    out = {}
    try:
        out["duckdb_s"] = peers.duckdb_read("dms2iceberg", wh, meta_path, 1)["median_s"]
    except Exception as e:  # noqa: BLE001
        out["duckdb_error"] = str(e)[:200]
    try:
        s = time.perf_counter()
        peers.iceberg_catalog(wh).load_table(f"{peers.NS}.{peers.TABLE}").scan().to_arrow()
        out["pyiceberg_s"] = time.perf_counter() - s
    except Exception as e:  # noqa: BLE001
        out["pyiceberg_error"] = str(e)[:200]
    r = bench.measure([bench.CLI, "scan", f"{peers.NS}.{peers.TABLE}", "--warehouse", wh,
                       "--format", "csv"], 600)
    if r.ok:
        out["scan_s"] = r.wall_s
    return out


def phase(name: str, meta: dict, d: Path, a, compact: bool) -> dict:
    """Both phases start from the same full load, applied afresh (table paths are absolute:
    a copied warehouse would point into the original)."""
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    logs = d / "run.log"
    wh = loaded(meta, d, logs, a.timeout)
    cfg = d / "config.toml"
    feed = d / "feed" / peers.NS / peers.TABLE
    feed.mkdir(parents=True)
    stop = threading.Event()
    fed_all = threading.Event()
    started = time.perf_counter()
    ingests: list[dict] = []
    runs: list[dict] = []
    samples: list[dict] = []
    lock = threading.Lock()

    def feeder():
        for f in meta["change_files"]:
            tmp = d / "feed" / (Path(f).name + ".tmp")
            shutil.copy(f, tmp)
            os.replace(tmp, feed / Path(f).name)
            time.sleep(a.interval)
        fed_all.set()

    def writer(i: int):
        while not stop.is_set():
            done = fed_all.is_set()
            r = bench.measure([bench.CLI, "ingest", d / "feed", "--warehouse", wh, "--config",
                               cfg, "--json"], a.timeout, logfile=d / f"writer{i}.log")
            with lock:
                ingests.append({"t": time.perf_counter() - started, "ok": r.ok,
                                "wall_s": r.wall_s, "commits": len(r.json_lines()) if r.ok else 0})
            if done:
                return
            time.sleep(0.05)

    def compactor():
        while not stop.is_set():
            t0 = time.perf_counter()
            r = bench.measure([bench.CLI, "compact", f"{peers.NS}.{peers.TABLE}", "--warehouse",
                               wh, "--format", "json"], a.timeout, logfile=d / "compact.log")
            run = {"t": t0 - started, "ok": r.ok, "wall_s": r.wall_s, "peak_rss_mib": r.rss_mib}
            if r.ok:
                run["report"] = r.last_json()
            else:
                run["error"] = r.err[-500:]
            with lock:
                runs.append(run)
            stop.wait(max(0.0, a.every - (time.perf_counter() - t0)))

    def sampler():
        while not stop.is_set():
            t = time.perf_counter() - started
            s = {"t": t, "fed": len(list(feed.iterdir())), **files_now(wh),
                 **read_times(wh, Path(meta["dir"]) / "meta.json")}
            with lock:
                samples.append(s)
            stop.wait(a.sample)

    threads = [threading.Thread(target=feeder)]
    threads += [threading.Thread(target=writer, args=(i,)) for i in range(a.writers)]
    if compact:
        threads.append(threading.Thread(target=compactor))
    threads.append(threading.Thread(target=sampler))
    for t in threads:
        t.start()
    threads[0].join()
    for t in threads[1:1 + a.writers]:
        t.join()
    # One last ingest picks up whatever the writers' last runs did not see.
    r = bench.measure([bench.CLI, "ingest", d / "feed", "--warehouse", wh, "--config", cfg,
                       "--json"], a.timeout, logfile=logs)
    if compact:
        # The schedule keeps going for one more period after ingest stops.
        time.sleep(a.every)
    stop.set()
    for t in threads[1 + a.writers:]:
        t.join()
    final = {"t": time.perf_counter() - started, **files_now(wh),
             **read_times(wh, Path(meta["dir"]) / "meta.json")}
    back = bench.read_back("dms2iceberg", wh, meta, logs, a.timeout)
    ok_runs = [x for x in runs if x["ok"]]
    return {
        "phase": name, "compaction": compact, "last_ingest_ok": r.ok,
        "ingest_runs": len(ingests), "ingest_failures": sum(not x["ok"] for x in ingests),
        "compaction_runs": len(runs),
        "compaction_commits": sum(x["report"]["commits"] for x in ok_runs),
        "compaction_replans": sum(x["report"]["replans"] for x in ok_runs),
        "compaction_give_ups": sum(not x["ok"] for x in runs),
        "deletes_carried": sum(x["report"]["deletes_carried"] for x in ok_runs),
        "compaction_peak_rss_mib": max((x["peak_rss_mib"] for x in runs), default=None),
        "compaction_median_s": bench.median([x["wall_s"] for x in ok_runs]),
        "compaction_max_s": max((x["wall_s"] for x in ok_runs), default=None),
        "samples": samples, "final": final, "runs": runs,
        "verified": back["verified"], "problems": back.get("problems", []),
        "compared": back.get("compared"),
    }


def run(a) -> dict:
    work = bench.HERE / "work" / "underload"
    meta = bench.workload(work, a.rows, a.changes, a.files, 11)
    phases = []
    for name, compact in (("with scheduled compaction", True), ("no compaction (baseline)", False)):
        d = work / ("with" if compact else "without")
        bench.log(f"under load: {name}")
        phases.append(phase(name, meta, d, a, compact))
    return {"rows": a.rows, "changes_per_file": a.changes, "files": a.files,
            "interval_s": a.interval, "writers": a.writers, "every_s": a.every,
            "sample_s": a.sample, "phases": phases}


def markdown(res: dict) -> str:
    out = [f"Table {res['rows']:,} rows; {res['files']} change files of {res['changes_per_file']:,} "
           f"rows (70% U / 20% I / 10% D), one every {res['interval_s']} s, {res['writers']} "
           f"ingest processes looping over the feed; compaction every {res['every_s']} s; "
           f"samples every {res['sample_s']} s.", "",
           "| phase | compaction runs | commits | re-plans | give-ups | deletes carried | "
           "median / max run s | peak RSS MiB | data files at end | delete files at end | "
           "max data files | max delete files | DuckDB s at end | PyIceberg s at end | "
           "scan s at end | verified |",
           "|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for p in res["phases"]:
        f, s = p["final"], p["samples"]
        mx = lambda k: max((x.get(k, 0) for x in s + [f]), default=0)  # noqa: E731
        c = p["compaction"]
        out.append(
            f"| {p['phase']} | {p['compaction_runs'] if c else '—'} | "
            f"{p['compaction_commits'] if c else '—'} | {p['compaction_replans'] if c else '—'} | "
            f"{p['compaction_give_ups'] if c else '—'} | {p['deletes_carried'] if c else '—'} | "
            + (f"{bench.fmt(p['compaction_median_s'], 2)} / {bench.fmt(p['compaction_max_s'], 2)} | "
               f"{bench.fmt(p['compaction_peak_rss_mib'], 0)} | " if c else "— | — | ")
            + f"{f.get('data_files')} | {f.get('delete_files')} | {mx('data_files')} | "
            f"{mx('delete_files')} | {bench.fmt(f.get('duckdb_s'), 2)} | "
            f"{bench.fmt(f.get('pyiceberg_s'), 2)} | {bench.fmt(f.get('scan_s'), 2)} | "
            f"{'yes, ' + str(p['compared']) if p['verified'] else 'NO: ' + '; '.join(p['problems'])} |")
    out += ["", "Over time (t s: data files / delete files / DuckDB s / PyIceberg s / scan s):", ""]
    for p in res["phases"]:
        pts = [f"{x['t']:.0f}: {x.get('data_files')}/{x.get('delete_files')}/"
               f"{bench.fmt(x.get('duckdb_s'), 2)}/{bench.fmt(x.get('pyiceberg_s'), 2)}/"
               f"{bench.fmt(x.get('scan_s'), 2)}" for x in p["samples"] + [p["final"]]]
        out.append(f"- {p['phase']}: " + "; ".join(pts))
    return "\n".join(out) + "\n"
