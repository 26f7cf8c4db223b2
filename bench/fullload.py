#!/usr/bin/env python3
"""fullload.py: a DMS full load of ~1 GiB into a new table: dms2iceberg `ingest` against
PyIceberg 0.12 `append`, delta-rs `write_deltalake` and DuckDB 1.5's `INSERT` into an Iceberg
table of a REST catalog, each in its own process, one after another, every final table
verified. Run through `bench/run --fullload [options]` (it creates
bench/.venv first; `--no-build` skips the cargo build).

  bench/run --fullload [--mb 1024] [--cases csv-sorted,csv-shuffled,csvgz-sorted,parquet-sorted,multi-sorted]
                       [--files 4] [--file-mb MB] [--parallel 1,4] [--dup-fraction F]
                       [--tools dms2iceberg,pyiceberg,delta] [--work /tmp/dms2iceberg-fullload]
                       [--timeout 3600] [--tag TAG] [--keep] [--no-duckdb] [--wait-load 1.0]
                       [--generate-only]

Cases (`--cases`; FORMAT-ORDER):
- csv-sorted, csv-displaced (5% of the rows each moved to a random place, as a long-lived
  table's heap holds them), csv-shuffled, csvgz-sorted, csvgz-shuffled, parquet-sorted,
  parquet-shuffled: one
  full-load file of `--mb` MiB (its CSV size; the gzip'd and Parquet files hold the same rows),
  `LOAD00000001.csv` / `.csv.gz` / `.parquet`. Every tool in `--tools`.
- multi-sorted, multi-shuffled: `--files` CSV files of `--file-mb` MiB (default: `--mb` split
  over the files), keys split as DMS does (sorted: consecutive ranges; shuffled: each file a
  random subset); dms2iceberg only, once per `--parallel` value (`ingest --parallel N`; `none`
  runs it without the flag). A binary that refuses the flag gives a failed row, not a crash.
Default: csv-sorted, csv-shuffled, csvgz-sorted, parquet-sorted, multi-sorted (4 x 256 MiB,
--parallel 1,4).

The files (bench/gen_load.py) go to `<work>/<case>-<size>/dms/shop/items/` with a meta.json
(parameters, sizes, row counts, expected summary); a later run with the same parameters reuses
them. Generation is not measured against any tool.

Measured per tool (bench.py's `measure()`: the process's wall clock and its own peak RSS,
VmHWM, polled every 10 ms), in a fresh output folder:
- dms2iceberg: `dms2iceberg ingest <files> --warehouse WH --config CFG --format json
  [--parallel N]`, the config `[tables."shop.items"] primary_key = ["id"]`; binary
  `$BENCH_DMS2ICEBERG`, else target/release/dms2iceberg. Its JSON reports (one per commit) are
  kept: commits, rows_read, inserted, read_twice, data files, timings.
- PyIceberg: one Python process: pyarrow.csv.read_csv (pq.read_table for Parquet) of the
  file(s), drop Op, SqlCatalog (sqlite) `create_table` from the Arrow schema, `append`.
- delta-rs: one Python process: the same read, `write_deltalake(path, table)`.
- DuckDB (`--tools ...,duckdb`): one Python process: rustberg (the REST catalog the tests run,
  as bench/peers.py starts it) on a `file://` warehouse, DuckDB's iceberg extension attached to
  it, `CREATE TABLE`, then `INSERT INTO ... SELECT id, name, qty FROM read_csv(...)` (or
  `read_parquet`): DuckDB reads the file itself. Not with repeated keys (a failed row).
With `--dup-fraction` > 0 the peers keep the last row per id first (group_by on the row
number), as a full load with repeated keys needs; dms2iceberg dedupes itself.
The peer's wall clock includes starting Python and importing its libraries (reported apart in
the notes: the in-process read and write times).

Verification (its own process, not timed against the tool): the table read back (ours and
PyIceberg's through PyIceberg's SqlCatalog, delta-rs's through deltalake; ours also through
DuckDB's iceberg extension, loaded offline) summarised as row count, sum(id), sum(qty), a
row-order-independent hash of (id, name, qty) and duplicate ids, compared with the expected
final table (one row per id, its last occurrence). A tool's figures count only if its table
verifies.

Writes bench/results/<UTC date>-fullload[-TAG].{json,md} (--results elsewhere); exit code 1 when
a table did not verify or a tool failed. `--generate-only` writes (or checks) the files and
stops. The generator alone: `bench/.venv/bin/python bench/gen_load.py selfcheck`.
"""
from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sqlite3
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench  # noqa: E402  (measure(), machine(), versions(), wait_for_quiet())

HERE = bench.HERE
ROOT = bench.ROOT
PY = bench.PY
CLI = bench.CLI
SELF = str(Path(__file__).resolve())
GEN = str(HERE / "gen_load.py")
NS, TABLE = "shop", "items"
CONFIG = f'[tables."{NS}.{TABLE}"]\nprimary_key = ["id"]\n'
PEERS = ["pyiceberg", "delta", "duckdb"]
FORMATS = {"csv": "csv", "csvgz": "csv.gz", "parquet": "parquet", "multi": "csv"}
DEFAULT_CASES = "csv-sorted,csv-shuffled,csvgz-sorted,parquet-sorted,multi-sorted"
log = bench.log
fmt = bench.fmt


# ---------------------------------------------------------------------------------------------
# Child processes: a peer's load, and reading a table back


def read_input(files: list[str], parquet: bool):
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq
    if parquet:
        parts = [pq.read_table(f) for f in files]
    else:
        types = {"Op": pa.string(), "id": pa.int64(), "name": pa.string(), "qty": pa.int64()}
        opts = pacsv.ConvertOptions(column_types=types, strings_can_be_null=False,
                                    quoted_strings_can_be_null=False)
        parts = [pacsv.read_csv(f, convert_options=opts) for f in files]
    t = parts[0] if len(parts) == 1 else pa.concat_tables(parts)
    return t.drop_columns(["Op"])


def last_per_id(t):
    """The last row per id, in input order (what the table must hold with repeated ids)."""
    import pyarrow as pa
    import pyarrow.compute as pc
    t = t.append_column("_row", pa.array(range(t.num_rows), pa.int64()))
    rows = t.group_by("id", use_threads=False).aggregate([("_row", "max")])["_row_max"]
    return t.take(pc.take(rows, pc.sort_indices(rows))).drop_columns(["_row"])


def duckdb_peer(a) -> None:
    """DuckDB 1.5's INSERT into an Iceberg table of a REST catalog (rustberg, as bench/peers.py
    runs it), straight from DuckDB's own CSV or Parquet reader: no pyarrow in between."""
    t0 = time.perf_counter()
    import peers
    t1 = time.perf_counter()
    if a.dedupe:
        raise SystemExit("duckdb: full loads with repeated keys are not measured")
    server, con = peers.duckdb_rest(a.table)
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS cat.{NS}")
        con.execute(f"CREATE TABLE cat.{NS}.{TABLE} (id BIGINT NOT NULL, name VARCHAR, qty BIGINT)")
        t2 = time.perf_counter()
        if a.parquet:
            source = "read_parquet(?)"
            args = [a.files]
        else:
            source = "read_csv(?, header = true, columns = ?)"
            args = [a.files, {"Op": "VARCHAR", "id": "BIGINT", "name": "VARCHAR",
                              "qty": "BIGINT"}]
        rows = con.execute(f"INSERT INTO cat.{NS}.{TABLE} SELECT id, name, qty FROM {source}",
                           args).fetchall()[0][0]
        t3 = time.perf_counter()
    finally:
        server.close()
    print(json.dumps({"tool": "duckdb", "rows_read": rows, "rows_written": rows,
                      "import_s": t1 - t0, "read_s": 0.0, "dedupe_s": 0.0,
                      "write_s": t3 - t2}))


def peer_main(a) -> None:
    if a.tool == "duckdb":
        return duckdb_peer(a)
    t0 = time.perf_counter()
    import pyarrow  # noqa: F401
    if a.tool == "pyiceberg":
        from pyiceberg.catalog.sql import SqlCatalog
    else:
        from deltalake import write_deltalake
    t1 = time.perf_counter()
    t = read_input(a.files, a.parquet)
    rows_read = t.num_rows
    t_read = time.perf_counter()
    if a.dedupe:
        t = last_per_id(t)
    t2 = time.perf_counter()
    out: dict = {"tool": a.tool, "rows_read": rows_read, "rows_written": t.num_rows}
    if a.tool == "pyiceberg":
        a.table.mkdir(parents=True, exist_ok=True)
        cat = SqlCatalog("default", uri=f"sqlite:///{a.table}/catalog.db",
                         warehouse=f"file://{a.table}")
        cat.create_namespace(NS)
        tbl = cat.create_table(f"{NS}.{TABLE}", schema=t.schema)
        tbl.append(t)
    else:
        write_deltalake(str(a.table), t)
    t3 = time.perf_counter()
    out.update({"import_s": t1 - t0, "read_s": t_read - t1, "dedupe_s": t2 - t_read,
                "write_s": t3 - t2})
    print(json.dumps(out))


def iceberg_metadata_location(wh: Path) -> str:
    con = sqlite3.connect(wh / "catalog.db")
    try:
        return con.execute("select metadata_location from iceberg_tables where "
                           "table_namespace=? and table_name=?", (NS, TABLE)).fetchone()[0]
    finally:
        con.close()


def verify_main(a) -> None:
    """Reads the table back in batches and compares its summary with the expected one."""
    import pyarrow as pa
    import gen_load as G
    meta = json.loads(a.meta.read_text())
    exp = meta["expected"]
    res: dict = {"tool": a.tool, "problems": []}

    def check(label: str, batches) -> dict:
        s = G.Summary()
        t = time.perf_counter()
        for b in batches:
            if isinstance(b, pa.Table):
                b = b.combine_chunks()
            s.add(b.column("id"), b.column("name"), b.column("qty"))
        got = s.result()
        dup = s.duplicate_keys()
        out = {"reader": label, "read_s": time.perf_counter() - t, **got,
               "duplicate_ids": dup, "null_values": s.nulls}
        bad = [f"{k}: got {got[k]}, expected {exp[k]}" for k in exp if got[k] != exp[k]]
        if dup:
            bad.append(f"{dup} duplicate ids")
        if s.nulls:
            bad.append(f"{s.nulls} NULL values in id/name/qty")
        out["ok"] = not bad
        res["problems"] += [f"{label}: {b}" for b in bad]
        return out

    cols = ["id", "name", "qty"]
    if a.tool == "duckdb":
        import peers
        tbl = peers.static_table(a.table)
        res["schema"] = str(tbl.schema())
        res["own"] = check("pyiceberg",
                           tbl.scan(selected_fields=tuple(cols)).to_arrow_batch_reader())
        f = tbl.inspect.files().select(["content", "file_size_in_bytes"]).to_pylist()
        res["files"] = {"data_files": sum(1 for r in f if r["content"] == 0),
                        "delete_files": sum(1 for r in f if r["content"] != 0),
                        "data_bytes": sum(r["file_size_in_bytes"] for r in f
                                          if r["content"] == 0)}
    elif a.tool == "delta":
        from deltalake import DeltaTable
        d = DeltaTable(str(a.table))
        ds = d.to_pyarrow_dataset()
        res["schema"] = str(ds.schema)
        res["own"] = check("deltalake", ds.to_batches(columns=cols))
        uris = d.file_uris()
        res["files"] = {"data_files": len(uris), "data_bytes": sum(
            os.path.getsize(u.removeprefix("file://")) for u in uris), "version": d.version()}
    else:
        from pyiceberg.catalog.sql import SqlCatalog
        cat = SqlCatalog("default", uri=f"sqlite:///{a.table}/catalog.db",
                         warehouse=f"file://{a.table}")
        tbl = cat.load_table(f"{NS}.{TABLE}")
        res["schema"] = str(tbl.schema())
        res["own"] = check("pyiceberg",
                           tbl.scan(selected_fields=tuple(cols)).to_arrow_batch_reader())
        f = tbl.inspect.files().select(["content", "file_size_in_bytes", "record_count"])
        f = f.to_pylist()
        res["files"] = {"data_files": sum(1 for r in f if r["content"] == 0),
                        "delete_files": sum(1 for r in f if r["content"] != 0),
                        "data_bytes": sum(r["file_size_in_bytes"] for r in f
                                          if r["content"] == 0),
                        "snapshots": len(tbl.snapshots())}
        if a.duckdb:
            try:
                import peers
                con = peers.duckdb_connect()
                loc = iceberg_metadata_location(a.table)
                r = con.execute(f"select id, name, qty from iceberg_scan('{loc}')")
                res["duckdb"] = check("duckdb iceberg_scan", r.fetch_record_batch(1_000_000))
            except Exception as e:  # noqa: BLE001 - a reader that cannot read is a failure
                res["duckdb"] = {"reader": "duckdb iceberg_scan", "ok": False,
                                 "error": f"{e.__class__.__name__}: {e}"}
                res["problems"].append(f"duckdb iceberg_scan: {e.__class__.__name__}: {e}")
    res["ok"] = not res["problems"]
    print(json.dumps(res, default=str))


# ---------------------------------------------------------------------------------------------
# Orchestrator: workloads


def size_tag(mb: float) -> str:
    return f"{mb:g}m".replace(".", "p")


def case_dir(work: Path, case: str, a) -> tuple[Path, dict]:
    fmt_, order = case.split("-", 1)
    multi = fmt_ == "multi"
    files = a.files if multi else 1
    file_mb = (a.file_mb or a.mb / a.files) if multi else a.mb
    total = file_mb * files
    name = f"{case}-{files}x{size_tag(file_mb)}" if multi else f"{case}-{size_tag(a.mb)}"
    if a.dup_fraction:
        name += f"-dup{a.dup_fraction:g}".replace(".", "p")
    if a.seed != 42:
        name += f"-s{a.seed}"
    return work / name, {"mb": float(total), "files": files, "order": order,
                         "format": FORMATS[fmt_], "dup_fraction": float(a.dup_fraction),
                         "seed": a.seed}


def prepare(work: Path, cases: list[str], a, timeout: float) -> dict[str, dict]:
    """Each case's meta (reused or generated); cases sharing rows are generated in one pass."""
    import gen_load as G
    metas: dict[str, dict] = {}
    todo: dict[tuple, dict[str, tuple[str, Path]]] = {}
    for c in cases:
        d, p = case_dir(work, c, a)
        want = G.params(p["mb"], p["files"], p["order"], p["format"], p["dup_fraction"], p["seed"])
        m = G.cached(d, want)
        if m:
            m["dir"], m["reused"] = str(d), True
            metas[c] = m
            log(f"{c}: reusing {d} ({m['rows']:,} rows, {sum(m['file_bytes']) / 2**20:,.1f} MiB)")
            continue
        key = (p["mb"], p["files"], p["order"], p["dup_fraction"], p["seed"],
               c.startswith("multi-"))
        todo.setdefault(key, {})[p["format"]] = (c, d)
    for (mb, files, order, dup, seed, _), outs in todo.items():
        what = ", ".join(f"{c} ({f})" for f, (c, _) in outs.items())
        log(f"generating {what}: {mb:g} MiB in {files} file(s), {order}"
            + (f", {dup:g} repeated" if dup else ""))
        cmd = [PY, GEN, "gen", "--mb", mb, "--files", files, "--order", order,
               "--dup-fraction", dup, "--seed", seed]
        for f, (_, d) in outs.items():
            cmd += ["--out", f"{f}={d}"]
        r = bench.measure(cmd, timeout, logfile=work / "logs" / "gen.log")
        if not r.ok:
            raise SystemExit(f"generator failed ({'timeout' if r.timed_out else r.rc}): "
                             f"{r.err[-3000:]}")
        for f, (c, d) in outs.items():
            m = json.loads((d / "meta.json").read_text())
            m["dir"], m["reused"] = str(d), False
            m["gen_wall_s"], m["gen_peak_rss_mib"] = r.wall_s, r.rss_mib
            metas[c] = m
        log(f"  generated in {r.wall_s:.1f} s (peak RSS {r.rss_mib:,.0f} MiB): "
            f"{m['rows']:,} rows, {m['distinct_keys']:,} distinct ids")
    return {c: metas[c] for c in cases}


# ---------------------------------------------------------------------------------------------
# Orchestrator: tools


def failed_row(tool: str, label: str, r, why: str | None = None) -> dict:
    msg = why or (f"timeout after {r.wall_s:.0f} s" if r.timed_out else
                  f"exit {r.rc} after {r.wall_s:.1f} s: {(r.err.strip() or r.out.strip())[-1500:]}")
    return {"tool": tool, "label": label, "ok": False, "verified": False,
            "wall_s": r.wall_s, "peak_rss_mib": r.rss_mib, "rc": r.rc,
            "timed_out": r.timed_out, "problems": [msg]}


def verify(tool: str, table: Path, meta_path: Path, duckdb: bool, timeout: float,
           logs: Path) -> dict:
    cmd = [PY, SELF, "verify", "--tool", tool, "--table", table, "--meta", meta_path]
    if duckdb:
        cmd.append("--duckdb")
    v = bench.measure(cmd, timeout, logfile=logs)
    if not v.ok:
        why = "timeout" if v.timed_out else f"exit {v.rc}"
        return {"verified": False, "problems": [f"verification {why}: {v.err.strip()[-1500:]}"]}
    j = v.last_json()
    j["verify_wall_s"] = v.wall_s
    return {"verified": j["ok"], "problems": j["problems"], "verify": j}


def run_dms2iceberg(meta: dict, run_dir: Path, parallel: int | None, a) -> dict:
    label = "dms2iceberg" + (f" --parallel {parallel}" if parallel is not None else "")
    wh = run_dir / ("dms2iceberg" + (f"-p{parallel}" if parallel is not None else ""))
    shutil.rmtree(wh, ignore_errors=True)
    cfg = run_dir / "config.toml"
    cfg.write_text(CONFIG)
    logs = run_dir / "dms2iceberg.log"
    cmd = [CLI, "ingest", *meta["files"], "--warehouse", wh, "--config", cfg, "--format", "json"]
    if parallel is not None:
        cmd += ["--parallel", parallel]
    binary = {"path": str(CLI)}
    try:
        st = CLI.stat()
        binary.update(size=st.st_size, mtime=dt.datetime.fromtimestamp(
            st.st_mtime, dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))
    except OSError as e:
        binary["error"] = str(e)
    r = bench.measure(cmd, a.timeout, logfile=logs)
    if not r.ok:
        row = failed_row("dms2iceberg", label, r)
        row.update(binary=binary, parallel=parallel, args=[str(x) for x in cmd[2 + len(meta["files"]):]])
        return row
    try:
        reps = r.json_lines()
    except ValueError as e:
        return failed_row("dms2iceberg", label, r, f"unreadable JSON report: {e}")
    row = {"tool": "dms2iceberg", "label": label, "parallel": parallel, "ok": True,
           "wall_s": r.wall_s, "peak_rss_mib": r.rss_mib, "binary": binary,
           "commits": len(reps), "reports": reps}
    for k in ("rows_read", "inserted", "updated", "deleted", "data_files", "delete_files"):
        vals = [x.get(k) for x in reps if isinstance(x.get(k), int)]
        if vals:
            row[k] = sum(vals)
    row["read_twice"] = any(x.get("read_twice") for x in reps)
    t = {}
    for x in reps:
        for k, v in (x.get("timings") or {}).items():
            if isinstance(v, (int, float)):
                t[k] = t.get(k, 0) + v
    if t:
        row["timings_us"] = t
    bad = [x for x in reps if x.get("status") != "applied"]
    if bad or not reps:
        row["ok"] = False
        row["verified"] = False
        row["problems"] = [f"not every file applied: {[(x.get('files'), x.get('status'), x.get('note')) for x in bad] or 'no report'}"]
        return row
    row.update(verify("dms2iceberg", wh, Path(meta["dir"]) / "meta.json", not a.no_duckdb,
                      a.timeout, logs))
    if not a.keep:
        shutil.rmtree(wh, ignore_errors=True)
    return row


def run_peer(tool: str, meta: dict, run_dir: Path, a) -> dict:
    out = run_dir / tool
    shutil.rmtree(out, ignore_errors=True)
    logs = run_dir / f"{tool}.log"
    cmd = [PY, SELF, "peer", "--tool", tool, "--table", out]
    if meta["params"]["format"] == "parquet":
        cmd.append("--parquet")
    if meta["distinct_keys"] != meta["rows"]:
        cmd.append("--dedupe")
    r = bench.measure(cmd + ["--files", *meta["files"]], a.timeout, logfile=logs)
    if not r.ok:
        return failed_row(tool, tool, r)
    j = r.last_json()
    row = {"tool": tool, "label": tool, "ok": True, "wall_s": r.wall_s,
           "peak_rss_mib": r.rss_mib, **{k: j[k] for k in ("rows_read", "rows_written",
                                                         "import_s", "read_s", "dedupe_s",
                                                         "write_s")},
           "deduped": "--dedupe" in cmd}
    row.update(verify(tool, out, Path(meta["dir"]) / "meta.json", False, a.timeout, logs))
    if not a.keep:
        shutil.rmtree(out, ignore_errors=True)
    return row


# ---------------------------------------------------------------------------------------------
# Report


def rates(c: dict) -> None:
    mb = sum(c["input_bytes"]) / 1e6
    for r in c["results"]:
        if r.get("wall_s") and r.get("verified"):
            r["mb_per_s"] = mb / r["wall_s"]
            r["rows_per_s"] = c["rows"] / r["wall_s"]
            if c["format"] == "csv.gz":
                r["uncompressed_mb_per_s"] = c["csv_equivalent_bytes"] / 1e6 / r["wall_s"]
    ours = [r for r in c["results"] if r["tool"] == "dms2iceberg" and r.get("verified")]
    c["ratios"] = []
    for o in ours:
        for p in c["results"]:
            if p["tool"] in PEERS and p.get("verified"):
                c["ratios"].append({
                    "ours": o["label"], "peer": p["tool"],
                    "time_ratio": o["wall_s"] / p["wall_s"],
                    "speedup": p["wall_s"] / o["wall_s"],
                    "rss_ratio": o["peak_rss_mib"] / p["peak_rss_mib"]})
    if len(ours) > 1:  # the multi-file cases: each --parallel against the first one
        base = ours[0]
        for r in ours[1:]:
            r["speedup_vs_first"] = {"vs": base["label"], "speedup": base["wall_s"] / r["wall_s"]}


def notes(r: dict, c: dict) -> str:
    n = []
    if not r.get("ok") or not r.get("verified"):
        n.append("; ".join(r.get("problems") or [])[:400].replace("|", "\\|").replace("\n", " "))
    if r["tool"] == "dms2iceberg" and r.get("commits") is not None:
        n.append(f"{r['commits']} commit(s)")
        if r.get("rows_read") is not None:
            n.append(f"rows_read {r['rows_read']:,}")
        if r.get("inserted") is not None:
            n.append(f"inserted {r['inserted']:,}")
        if r.get("updated"):
            n.append(f"updated {r['updated']:,}")
        if r.get("delete_files"):
            n.append(f"{r['delete_files']} delete file(s)")
        if r.get("read_twice"):
            n.append("read_twice")
        t = r.get("timings_us") or {}
        steps = [f"{k.removesuffix('_us')} {v / 1e6:.2f}" for k, v in t.items()
                 if k != "total_us" and v >= 5000]
        if steps:
            n.append("s: " + ", ".join(steps))
        if r.get("speedup_vs_first"):
            x = r["speedup_vs_first"]
            n.append(f"{x['speedup']:.2f}x as fast as {x['vs']}")
    if r["tool"] in PEERS and r.get("read_s") is not None:
        n.append(f"import {r['import_s']:.2f} s, "
                 + ("" if r["tool"] == "duckdb" else f"read {r['read_s']:.2f} s, ")
                 + (f"dedupe {r['dedupe_s']:.2f} s, " if r.get("deduped") else "")
                 + f"write {r['write_s']:.2f} s (in the process)")
    files = (r.get("verify") or {}).get("files") or {}
    if files.get("data_files") is not None:
        n.append(f"{files['data_files']} data file(s), {files.get('data_bytes', 0) / 2**20:,.0f} MiB")
    if r.get("uncompressed_mb_per_s"):
        n.append(f"{r['uncompressed_mb_per_s']:,.1f} MB/s of CSV")
    dk = (r.get("verify") or {}).get("duckdb")
    if dk:
        n.append(f"DuckDB read-back {'ok' if dk.get('ok') else 'FAILED'}"
                 + (f" ({dk['read_s']:.2f} s)" if dk.get("read_s") is not None else ""))
    return "; ".join(x for x in n if x)


def markdown(res: dict) -> str:
    m, v, p = res["machine"], res["versions"], res["params"]
    L = [f"# Full load: dms2iceberg ingest vs PyIceberg append vs delta-rs write\n",
         f"Run {res['date']} {res['started']} → {res['finished']} UTC, command `{res['command']}`.\n",
         f"Machine: {m['nproc']} cores, {m['memory_gib']} GiB, {m['cpu']}, Linux {m['kernel']}, "
         f"Python {m['python']}. 1-minute load average: {res['load']['load_1m_at_start']:.2f} at "
         f"the start"
         + ("" if res['load'].get('threshold') is None else
            f" (waited {res['load']['waited_s']} s for it to drop below {res['load']['threshold']}"
            + ("" if res['load'].get('quiet') else ": it never did") + ")")
         + f", {res['load_end']:.2f} at the end; per case below.\n",
         "Versions: " + ", ".join(f"{k} {val}" for k, val in v.items()
                                  if k != "git_dirty_outside_bench") + ".",
         ]
    if v.get("git_dirty_outside_bench"):
        L.append(f" Uncommitted changes outside bench/ at the time of the run: "
                 f"{', '.join(v['git_dirty_outside_bench'])}.")
    L.append(f"\nBinary: `{res['binary']['path']}` ({res['binary'].get('mtime', '?')}). "
             f"Parameters: --mb {p['mb']:g}, --files {p['files']}, --file-mb "
             f"{p['file_mb']:g}, --parallel {','.join('none' if x is None else str(x) for x in p['parallel'])}, --dup-fraction "
             f"{p['dup_fraction']:g}, --seed {p['seed']}, tools {', '.join(p['tools'])}, timeout "
             f"{p['timeout']:g} s per process.\n")
    L.append("Input: DMS full-load CSV (`Op,id,name,qty`, every row `I`; name ~48 characters, "
             "~5% quoted with a comma inside, ~1% with doubled quotes too; qty 0..999,999), "
             "gzip'd CSV (level 6) or Parquet (snappy, 1M-row row groups) with the same rows. "
             "MB/s = input bytes as stored (10^6) / wall seconds of the tool's process; "
             "peak RSS = that process's VmHWM. Ratios: ours / peer in the same run.\n")
    for c in res["cases"]:
        L.append(f"## {c['case']}\n")
        L.append(f"{len(c['files'])} file(s) ({c['format']}), {sum(c['input_bytes']) / 2**20:,.1f} MiB "
                 f"as stored ({sum(c['input_bytes']):,} bytes), {c['rows']:,} rows, "
                 f"{c['distinct_keys']:,} distinct ids, order {c['order']}"
                 + (f", {c['rows'] - c['distinct_keys']:,} repeated ids" if c['rows'] != c['distinct_keys'] else "")
                 + f". Files {'reused' if c['reused'] else 'generated in ' + fmt(c.get('gen_wall_s'), 1) + ' s'}. "
                 f"Load average {c['load_1m_before']:.2f} before, {c['load_1m_after']:.2f} after.\n")
        L.append("| tool | seconds | MB/s | peak RSS MiB | verified | notes |")
        L.append("|---|---:|---:|---:|---|---|")
        for r in c["results"]:
            ver = "yes" if r.get("verified") else "NO"
            # a process that ended before the first 10 ms poll has no reading of its own
            rss = r.get("peak_rss_mib") if (r.get("wall_s") or 0) >= 0.1 else None
            L.append(f"| {r['label']} | {fmt(r.get('wall_s'), 2)} | {fmt(r.get('mb_per_s'), 1)} | "
                     f"{fmt(rss, 0)} | {ver} | {notes(r, c)} |")
        if c["ratios"]:
            L.append("")
            for x in c["ratios"]:
                L.append(f"- {x['ours']} vs {x['peer']}: time {x['time_ratio']:.2f}x "
                         f"({x['speedup']:.2f}x as fast), peak RSS {x['rss_ratio']:.2f}x")
        L.append("")
    L.append("Verified: the table read back (PyIceberg for Iceberg tables, deltalake for Delta; "
             "dms2iceberg's also through DuckDB iceberg_scan) has the expected row count, "
             "sum(id), sum(qty), order-independent hash of (id, name, qty) and no duplicate "
             "ids. Figures of a table that does not verify are left out of the ratios.")
    return "\n".join(L)


# ---------------------------------------------------------------------------------------------


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in ("peer", "verify"):
        ap = argparse.ArgumentParser()
        ap.add_argument("cmd")
        ap.add_argument("--tool", required=True, choices=["dms2iceberg", *PEERS])
        ap.add_argument("--table", required=True, type=Path)
        ap.add_argument("--meta", type=Path)
        ap.add_argument("--parquet", action="store_true")
        ap.add_argument("--dedupe", action="store_true")
        ap.add_argument("--duckdb", action="store_true")
        ap.add_argument("--files", nargs="*")
        a = ap.parse_args()
        (peer_main if a.cmd == "peer" else verify_main)(a)
        return

    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=1024, help="MiB of CSV per single-file case")
    ap.add_argument("--cases", default=DEFAULT_CASES)
    ap.add_argument("--files", type=int, default=4, help="files of the multi-file cases")
    ap.add_argument("--file-mb", type=float, help="MiB per file of the multi-file cases "
                                                  "(default: --mb / --files)")
    ap.add_argument("--parallel", default="1,4",
                    help="dms2iceberg --parallel values for the multi-file cases; `none` runs "
                         "it without the flag (e.g. none,1,4)")
    ap.add_argument("--dup-fraction", type=float, default=0.0)
    ap.add_argument("--tools", default="dms2iceberg,pyiceberg,delta")
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--work", type=Path, default=Path("/tmp/dms2iceberg-fullload"))
    ap.add_argument("--results", type=Path, default=HERE / "results")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per process")
    ap.add_argument("--tag", help="results file name: <date>-fullload-<tag>.{json,md}")
    ap.add_argument("--keep", action="store_true", help="keep the written tables")
    ap.add_argument("--no-duckdb", action="store_true", help="skip the DuckDB read-back of ours")
    ap.add_argument("--generate-only", action="store_true",
                    help="generate (or check) the cases' files, then stop")
    ap.add_argument("--wait-load", type=float, help="wait (up to --wait-max s) for the 1-minute "
                                                    "load to drop below this before measuring")
    ap.add_argument("--wait-max", type=float, default=1800)
    ap.add_argument("--setup-json", type=Path)
    ap.add_argument("--command", default="bench/run --fullload")
    a = ap.parse_args()

    cases = [c.strip() for c in a.cases.split(",") if c.strip()]
    for c in cases:
        f, _, o = c.partition("-")
        if f not in FORMATS or o not in ("sorted", "displaced", "shuffled"):
            raise SystemExit(f"unknown case {c!r}: FORMAT-ORDER with FORMAT one of "
                             f"{', '.join(FORMATS)} and ORDER sorted, displaced or shuffled")
    tools = [t.strip() for t in a.tools.split(",") if t.strip()]
    for t in tools:
        if t not in ("dms2iceberg", *PEERS):
            raise SystemExit(f"unknown tool {t!r}")
    parallel = [None if x.strip() == "none" else int(x) for x in a.parallel.split(",")
                if x.strip()]
    if a.files < 1 or a.mb <= 0 or not 0 <= a.dup_fraction < 1:
        raise SystemExit("--files >= 1, --mb > 0, 0 <= --dup-fraction < 1")
    if "dms2iceberg" in tools and not CLI.exists() and not a.generate_only:
        raise SystemExit(f"{CLI} missing: cargo build --release -p dms2iceberg-cli "
                         f"(or set BENCH_DMS2ICEBERG)")
    a.work.mkdir(parents=True, exist_ok=True)
    a.results.mkdir(parents=True, exist_ok=True)
    started = dt.datetime.now(dt.timezone.utc)
    setup = json.loads(a.setup_json.read_text()) if a.setup_json and a.setup_json.exists() else {}
    load_start = os.getloadavg()[0]

    metas = prepare(a.work, cases, a, a.timeout)
    if a.generate_only:
        for c, m in metas.items():
            print(f"{c}: {m['dir']}: {len(m['files'])} file(s), {sum(m['file_bytes']):,} bytes, "
                  f"{m['rows']:,} rows, expected {m['expected']}"
                  + ("" if m["reused"] else f", generated in {m['gen_wall_s']:.1f} s "
                     f"(with {', '.join(m['generated_with'])})"))
        return
    load = {"waited_s": 0, "load_1m_at_start": load_start, "quiet": None}
    if a.wait_load is not None:
        load = bench.wait_for_quiet(a.wait_load, a.wait_max)
        load["load_1m_at_start_of_run"] = load_start
    load["threshold"] = a.wait_load
    binary = {"path": str(CLI)}
    if CLI.exists():
        binary["mtime"] = dt.datetime.fromtimestamp(CLI.stat().st_mtime, dt.timezone.utc) \
            .strftime("%Y-%m-%dT%H:%M:%SZ")
    res = {"date": started.strftime("%Y-%m-%d"), "started": started.strftime("%H:%M:%S"),
           "command": a.command, "machine": bench.machine(), "versions": bench.versions(),
           "setup": setup, "load": load, "binary": binary,
           "params": {"mb": a.mb, "cases": cases, "files": a.files,
                      "file_mb": a.file_mb or a.mb / a.files, "parallel": parallel,
                      "dup_fraction": a.dup_fraction, "tools": tools, "seed": a.seed,
                      "timeout": a.timeout, "work": str(a.work)},
           "cases": []}
    runs = a.work / "runs"
    for case in cases:
        meta = metas[case]
        run_dir = runs / case
        shutil.rmtree(run_dir, ignore_errors=True)
        run_dir.mkdir(parents=True)
        fmt_ = meta["params"]["format"]
        c = {"case": case, "dir": meta["dir"], "format": fmt_, "order": meta["params"]["order"],
             "files": meta["files"], "input_bytes": meta["file_bytes"], "rows": meta["rows"],
             "distinct_keys": meta["distinct_keys"], "expected": meta["expected"],
             "reused": meta["reused"], "gen_s": meta.get("gen_s"),
             "gen_wall_s": meta.get("gen_wall_s"), "load_1m_before": os.getloadavg()[0],
             "results": []}
        if fmt_ == "csv.gz":
            n = sum(meta.get("csv_bytes") or [])
            if not n:
                import gzip
                for f in meta["files"]:
                    with gzip.open(f) as fh:
                        while b := fh.read(1 << 24):
                            n += len(b)
            c["csv_equivalent_bytes"] = n
        multi = case.startswith("multi-")
        plan: list[tuple[str, int | None]] = []
        if "dms2iceberg" in tools:
            plan += [("dms2iceberg", n) for n in parallel] if multi else [("dms2iceberg", None)]
        elif multi:
            log(f"{case}: dms2iceberg not in --tools; the multi-file cases run only dms2iceberg")
        if not multi:
            plan += [(t, None) for t in tools if t in PEERS]
        for tool, par in plan:
            what = tool + (f" --parallel {par}" if par is not None else "")
            log(f"{case}: {what} ({len(meta['files'])} file(s), "
                f"{sum(meta['file_bytes']) / 2**20:,.1f} MiB, {meta['rows']:,} rows)")
            try:
                r = (run_dms2iceberg(meta, run_dir, par, a) if tool == "dms2iceberg"
                     else run_peer(tool, meta, run_dir, a))
            except Exception as e:  # noqa: BLE001 - one tool's failure is a row, not the end
                r = {"tool": tool, "label": what, "ok": False, "verified": False,
                     "problems": [f"harness error: {e.__class__.__name__}: {e}"]}
            r["load_1m_after"] = os.getloadavg()[0]
            c["results"].append(r)
            log(f"    {what}: {fmt(r.get('wall_s'), 2)} s, peak RSS "
                f"{fmt(r.get('peak_rss_mib'), 0)} MiB, verified {r.get('verified')}"
                + ("" if r.get("verified") else f" {(r.get('problems') or [''])[0][:300]}"))
        c["load_1m_after"] = os.getloadavg()[0]
        rates(c)
        res["cases"].append(c)
        if not a.keep:
            shutil.rmtree(run_dir, ignore_errors=True)
    res["finished"] = dt.datetime.now(dt.timezone.utc).strftime("%H:%M:%S")
    res["load_end"] = os.getloadavg()[0]
    md = markdown(res)
    # Never over an earlier result of the same name (a figure RESULTS.md may cite): -2, -3, ...
    base = f"{res['date']}-fullload" + (f"-{a.tag}" if a.tag else "")
    stem, n = base, 1
    while (a.results / f"{stem}.json").exists() or (a.results / f"{stem}.md").exists():
        n += 1
        stem = f"{base}-{n}"
    out_json, out_md = a.results / f"{stem}.json", a.results / f"{stem}.md"
    out_json.write_text(json.dumps(res, indent=1, default=str))
    out_md.write_text(md + "\n")
    print(md)
    print(f"\nwrote {out_json} and {out_md}")
    bad = [f"{c['case']} {r['label']}" for c in res["cases"] for r in c["results"]
           if not r.get("verified")]
    if bad:
        print("NOT VERIFIED (left out of the ratios): " + "; ".join(bad))
        sys.exit(1)


if __name__ == "__main__":
    main()
