#!/usr/bin/env python3
"""compaction.py: peak memory and time of `dms2iceberg compact` as the group it rewrites grows.

  bench/compaction [--sizes 1000000,10000000] [--load-files 10] [--changes-per-mille 10]
                   [--files 5] [--tag TAG] [--no-build]

Per size N: the generator (bench/gen.py) writes a full load of N rows in `--load-files` files
and `--files` change files of N x changes-per-mille / 1000 rows each (70% U / 20% I / 10% D),
with the final state computed independently. The release CLI ingests them into a fresh local
warehouse (one snapshot per file: full-load data files, change data files, position deletes
against every full-load file), then `compact` runs once with groups large enough to take every
small file of a kind in one snapshot (`--max-group-bytes 64 GiB`). Measured: wall time and the
process's peak RSS (its own high-water mark, VmHWM), the group's input (files, Parquet bytes, rows, and the rows' size as
Arrow arrays: what an in-memory rewrite would hold at least). The table is verified against the
expected final state (PyIceberg, full compare up to 1M rows, per-column checksums above; DuckDB
checksums) after compaction. Same case layout at every N: the same number of files per group, so
only the rows per file grow.

Writes bench/results/<date>-compaction[-TAG].{json,md}.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (the shared measuring and verifying helpers)

HERE = bench.HERE
WORK = HERE / "work" / "compaction"


def generate(n: int, load_files: int, changes: int, files: int) -> dict:
    out = WORK / f"w-n{n}-l{load_files}-b{changes}-k{files}"
    meta_path = out / "meta.json"
    if meta_path.exists():
        meta = json.loads(meta_path.read_text())
        if all(Path(p).exists() for p in meta["load_files"] + meta["change_files"]):
            meta["dir"] = str(out)
            return meta
    rows_per_file = -(-n // load_files)
    r = bench.measure([bench.PY, bench.GEN, "workload", "--out", out, "--rows", n, "--changes",
                       changes, "--files", files, "--seed", 7, "--load-file-rows",
                       rows_per_file], 3600, logfile=WORK / "logs" / "gen.log")
    if not r.ok:
        raise SystemExit(f"generator failed: {r.err[-3000:]}")
    meta = json.loads(meta_path.read_text())
    meta["dir"] = str(out)
    return meta


def arrow_bytes_per_row(wh: Path) -> float:
    """Arrow in-memory bytes per row of the table's largest data file."""
    files = sorted((p for p in wh.rglob("*.parquet") if "/data/" in str(p)),
                   key=lambda p: p.stat().st_size)
    t = pq.read_table(files[-1])
    return t.nbytes / max(t.num_rows, 1)


def case(n: int, a) -> dict:
    changes = n * a.changes_per_mille // 1000
    bench.log(f"compaction N={n:,}: generating ({a.load_files} load files, {a.files} change "
              f"files of {changes:,} rows)")
    meta = generate(n, a.load_files, changes, a.files)
    d = WORK / f"case-n{n}"
    shutil.rmtree(d, ignore_errors=True)
    d.mkdir(parents=True)
    cfg = d / "config.toml"
    cfg.write_text(bench.CONFIG)
    wh = d / "wh"
    logs = d / "dms2iceberg.log"
    opts = ["--warehouse", wh, "--config", cfg, "--json"]
    bench.log(f"compaction N={n:,}: ingesting")
    ing = bench.measure([bench.CLI, "ingest"] + meta["load_files"] + meta["change_files"] + opts,
                        a.timeout, logfile=logs)
    if not ing.ok:
        raise SystemExit(f"ingest failed: {ing.err[-3000:]}")
    bench.log(f"compaction N={n:,}: compacting")
    c = bench.measure([bench.CLI, "compact", "shop.orders", "--warehouse", wh,
                       "--max-group-bytes", str(64 << 30), "--max-bytes", str(64 << 30),
                       "--format", "json"], a.timeout, logfile=logs)
    if not c.ok:
        raise SystemExit(f"compact failed: {c.err[-3000:]}")
    rep = c.last_json()
    bench.log(f"compaction N={n:,}: verifying")
    back = bench.read_back("dms2iceberg", wh, meta, logs, a.timeout)
    per_row = arrow_bytes_per_row(wh)
    return {
        "rows": n, "load_files": a.load_files, "change_files": a.files,
        "change_rows_per_file": changes, "ingest_s": ing.wall_s,
        "compact_s": c.wall_s, "peak_rss_mib": c.rss_mib, "report": rep,
        "input_files": rep["data_files_rewritten"], "input_mib": rep["bytes_rewritten"] / 2**20,
        "rows_written": rep["records_written"],
        "arrow_mib": rep["records_written"] * per_row / 2**20,
        "verified": back["verified"], "problems": back.get("problems", []),
        "compared": back.get("compared"), "duckdb": back.get("duckdb"),
    }


def markdown(res: dict) -> str:
    m = res["machine"]
    out = [f"Run {res['started']} → {res['ended']}, command `{res['command']}`.", "",
           f"Machine: {m.get('nproc')} cores, {m.get('memory_gib')} GiB, {m.get('cpu')}. "
           f"Binary: target/release/dms2iceberg, git {res['git']}.", "",
           "| rows in table | input files | input Parquet MiB | rows rewritten | the rows as Arrow MiB | "
           "commits | data files before → after | delete files before → after | compact s | "
           "peak RSS MiB | RSS / smallest case | input / smallest case | verified |",
           "|---:|---:|---:|---:|---:|---:|---|---|---:|---:|---:|---:|---|"]
    base = res["cases"][0]
    for c in res["cases"]:
        r = c["report"]
        out.append(
            f"| {c['rows']:,} | {c['input_files']} | {c['input_mib']:,.0f} | "
            f"{c['rows_written']:,} | {c['arrow_mib']:,.0f} | {r['commits']} | "
            f"{r['data_files_before']} → {r['data_files_after']} | "
            f"{r['delete_files_before']} → {r['delete_files_after']} | {c['compact_s']:.1f} | "
            f"{c['peak_rss_mib']:,.0f} | {c['peak_rss_mib'] / base['peak_rss_mib']:.2f}× | "
            f"{c['input_mib'] / base['input_mib']:.1f}× | "
            f"{'yes' if c['verified'] else 'NO: ' + '; '.join(c['problems'])} |")
    out += ["", "Input: the data files the run rewrote (full-load files in one group, change "
            "files in another, each one snapshot). Arrow MiB: rows rewritten × the Arrow size "
            "per row of the largest output file, what a rewrite holding its group in memory "
            "needs at least. Verified: PyIceberg against the generator's expected state "
            "(every row and column up to 1M rows, per-column checksums above) and DuckDB "
            "checksums, after compaction."]
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--load-files", type=int, default=10)
    ap.add_argument("--changes-per-mille", type=int, default=10)
    ap.add_argument("--files", type=int, default=5)
    ap.add_argument("--timeout", type=float, default=3600)
    ap.add_argument("--tag", default="")
    ap.add_argument("--command", default="bench/compaction")
    ap.add_argument("--setup-json")
    u = ap.add_argument_group("--under-load: compaction on a schedule during continuous ingest "
                              "(bench/underload.py)")
    u.add_argument("--under-load", action="store_true")
    u.add_argument("--rows", type=int, default=1_000_000)
    u.add_argument("--changes", type=int, default=2000)
    u.add_argument("--feed-files", type=int, default=150)
    u.add_argument("--interval", type=float, default=0.4)
    u.add_argument("--writers", type=int, default=2)
    u.add_argument("--every", type=float, default=5.0)
    u.add_argument("--sample", type=float, default=10.0)
    a = ap.parse_args()
    started = dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    if a.under_load:
        import underload
        a.files = a.feed_files
        res = underload.run(a)
        res.update({"started": started, "ended": dt.datetime.now().strftime("%H:%M:%S"),
                    "command": a.command, "machine": bench.machine()})
        name = dt.date.today().isoformat() + "-underload" + (f"-{a.tag}" if a.tag else "")
        (HERE / "results" / f"{name}.json").write_text(json.dumps(res, indent=1, default=str))
        md = (f"Run {started} → {res['ended']}, command `{a.command}`.\n\n"
              + underload.markdown(res))
        (HERE / "results" / f"{name}.md").write_text(md)
        print(md)
        sys.exit(0 if all(p["verified"] for p in res["phases"]) else 1)
    cases = [case(int(n), a) for n in a.sizes.split(",")]
    git = bench.subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                               text=True, cwd=bench.ROOT).stdout.strip()
    res = {"started": started, "ended": dt.datetime.now().strftime("%H:%M:%S"),
           "command": a.command, "machine": bench.machine(), "git": git, "cases": cases}
    name = dt.date.today().isoformat() + "-compaction" + (f"-{a.tag}" if a.tag else "")
    outdir = HERE / "results"
    (outdir / f"{name}.json").write_text(json.dumps(res, indent=1, default=str))
    md = markdown(res)
    (outdir / f"{name}.md").write_text(md)
    print(md)
    if not all(c["verified"] for c in cases):
        sys.exit(1)


if __name__ == "__main__":
    main()
