#!/usr/bin/env python3
"""read.py: what the tables we write cost to read, as they live: a full load, then one change
file a minute, compaction on its schedule, and at checkpoints the table read by DuckDB and
PyIceberg beside the same rows as one plain Parquet file and as a fresh table.

  read.py --binary LABEL=PATH [--binary LABEL=PATH ...] [--rows 1000000] [--changes 500]
          [--files 1440] [--compact-every 60] [--checkpoints 0,60,120,300,480,1440]
          [--compact-args "..."] [--runs 7] [--lookups 10] [--work DIR] [--out NAME]

Each binary (e.g. `before=/tmp/d2i-before`, `after=target/release/dms2iceberg`) gets its own
warehouse and replays the same DMS files, one after another in one sitting:

1. the full load (`ingest LOAD*.csv`), then change files in segments: the files up to the next
   checkpoint or compaction are given to one `ingest` (one process, one commit per file, as a
   warm function applies them);
2. every `--compact-every` files, what the compaction function runs on its schedule:
   `compact TABLE` plus `--compact-args` (label-specific with `LABEL:ARGS`);
3. at each checkpoint, before the compaction due there and after it:
   - the current snapshot's shape: manifests, data files, delete files, how many delete files
     a reader matches to each data file (from `referenced_data_file` or the `file_path`
     bounds, as readers match them without opening them), metadata.json bytes;
   - the table checked against the generator's expected state at that point (count and
     checksums, DuckDB);
   - DuckDB: `count(*), sum(customer_id), sum(length(note))` over `iceberg_scan`, against the
     same over one plain Parquet file of the same rows (written by DuckDB, sorted by key);
     a point lookup `WHERE order_id = k` for `--lookups` live keys, against the same over a
     fresh table of the same rows (one full load by the same binary);
   - PyIceberg: a full scan and a point lookup, against the fresh table.
   Medians of `--runs` runs after one warm-up; each DuckDB query reads the table's metadata
   again (nothing is cached between queries by iceberg_scan).

Writes bench/results/<date>-read[-NAME].{json,md}.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

import gen  # noqa: E402
import peers  # noqa: E402

NS, TABLE = "shop", "orders"
IDENT = f"{NS}.{TABLE}"
CONFIG = '[tables."shop.orders"]\nprimary_key = ["order_id"]\n'
PATH_ID = 2147483546


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {msg}", flush=True)


def run(cmd: list, timeout: float = 7200) -> tuple[float, str]:
    t = time.perf_counter()
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout,
                       env={k: v for k, v in os.environ.items() if k != "RUST_BACKTRACE"})
    wall = time.perf_counter() - t
    if p.returncode != 0:
        raise SystemExit(f"{cmd[:3]} failed ({p.returncode}): {p.stderr[-3000:]}")
    return wall, p.stdout


def metadata_location(wh: Path) -> str:
    con = sqlite3.connect(wh / "catalog.db")
    try:
        return con.execute(
            "select metadata_location from iceberg_tables where table_namespace=? and "
            "table_name=?", (NS, TABLE)).fetchone()[0]
    finally:
        con.close()


def local(path: str) -> str:
    for p in ("file://", "file:"):
        if path.startswith(p):
            return path[len(p):]
    return path


def shape(loc: str) -> dict:
    """The current snapshot as a planner sees it: manifests, live files, delete-file matches."""
    from pyiceberg.table import StaticTable
    t = StaticTable.from_metadata(loc)
    snap = t.current_snapshot()
    out = {"metadata_bytes": os.path.getsize(local(loc)), "snapshots": len(t.metadata.snapshots)}
    if snap is None:
        return {**out, "manifests": 0, "data_files": 0, "delete_files": 0}
    manifests = snap.manifests(t.io)
    dead = sum(1 for m in manifests
               if (m.added_files_count or 0) + (m.existing_files_count or 0) == 0)
    data, deletes = [], []
    for m in manifests:
        for e in m.fetch_manifest_entry(t.io, discard_deleted=True):
            f = e.data_file
            (data if f.content.value == 0 else deletes).append(f)
    paths = sorted(f.file_path for f in data)
    import bisect
    per_data = {p: 0 for p in paths}
    pairs = 0
    scoped = 0
    for d in deletes:
        ref = getattr(d, "referenced_data_file", None) or puffin_target(d)
        lo = (d.lower_bounds or {}).get(PATH_ID)
        hi = (d.upper_bounds or {}).get(PATH_ID)
        if ref:
            targets = [ref] if ref in per_data else []
            scoped += 1
        elif lo is not None and hi is not None:
            lo, hi = lo.decode(), hi.decode()
            targets = paths[bisect.bisect_left(paths, lo):bisect.bisect_right(paths, hi)]
            scoped += lo == hi
        else:
            targets = paths
        for p in targets:
            per_data[p] += 1
        pairs += len(targets)
    counts = list(per_data.values()) or [0]
    return {**out, "manifests": len(manifests), "dead_manifests": dead,
            "manifest_bytes": sum(m.manifest_length for m in manifests),
            "data_files": len(data), "delete_files": len(deletes),
            "file_scoped_delete_files": scoped,
            "small_data_files": sum(1 for f in data if f.file_size_in_bytes < 48 << 20),
            "pairs": pairs, "max_deletes_per_data_file": max(counts),
            "mean_deletes_per_data_file": round(sum(counts) / len(counts), 2),
            "deleted_rows": sum(f.record_count for f in deletes)}


def timed(fn, runs: int) -> float:
    fn()
    ts = []
    for _ in range(runs):
        s = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - s)
    return statistics.median(ts)


def interleaved(fns: dict, runs: int) -> dict:
    """Median seconds of each function, the functions run in turn within each round."""
    for f in fns.values():
        f()
    ts = {k: [] for k in fns}
    for _ in range(runs):
        for k, f in fns.items():
            s = time.perf_counter()
            f()
            ts[k].append(time.perf_counter() - s)
    return {k: statistics.median(v) for k, v in ts.items()}


SCAN = "select count(*), sum(customer_id), sum(length(note)) from {src}"


def reads(con, loc: str, fresh_loc: str, plain: str, keys: list[int], runs: int) -> dict:
    it, fresh, pl = (f"iceberg_scan('{loc}')", f"iceberg_scan('{fresh_loc}')",
                     f"read_parquet('{plain}')")
    r = {}

    def lookups(src):
        def go():
            for k in keys:
                got = con.execute(f"select * from {src} where order_id = {k}").fetchall()
                assert len(got) == 1, (src, k, got)
        return go
    n = max(1, len(keys))
    # Interleaved, run by run: the machine's load moves every query of a round alike, so the
    # ratios hold where back-to-back blocks of one query each would not.
    scans = interleaved({
        "duckdb_scan_s": lambda: con.execute(SCAN.format(src=it)).fetchall(),
        "duckdb_plain_scan_s": lambda: con.execute(SCAN.format(src=pl)).fetchall(),
        "duckdb_fresh_scan_s": lambda: con.execute(SCAN.format(src=fresh)).fetchall(),
    }, runs)
    looks = interleaved({"duckdb_lookup_s": lookups(it), "duckdb_fresh_lookup_s": lookups(fresh)},
                        max(1, runs // 2))
    r.update(scans)
    r.update({k: v / n for k, v in looks.items()})
    r["duckdb_scan_vs_plain"] = r["duckdb_scan_s"] / r["duckdb_plain_scan_s"]
    r["duckdb_lookup_vs_fresh"] = r["duckdb_lookup_s"] / r["duckdb_fresh_lookup_s"]

    from pyiceberg.expressions import EqualTo
    from pyiceberg.table import StaticTable
    prun = max(1, runs // 3)
    r["pyiceberg_scan_s"] = timed(lambda: StaticTable.from_metadata(loc).scan().to_arrow(), prun)
    r["pyiceberg_fresh_scan_s"] = timed(
        lambda: StaticTable.from_metadata(fresh_loc).scan().to_arrow(), prun)
    k = keys[0]
    r["pyiceberg_lookup_s"] = timed(lambda: StaticTable.from_metadata(loc).scan(
        row_filter=EqualTo("order_id", k)).to_arrow(), prun)
    r["pyiceberg_fresh_lookup_s"] = timed(lambda: StaticTable.from_metadata(fresh_loc).scan(
        row_filter=EqualTo("order_id", k)).to_arrow(), prun)
    r["pyiceberg_scan_vs_fresh"] = r["pyiceberg_scan_s"] / r["pyiceberg_fresh_scan_s"]
    r["pyiceberg_lookup_vs_fresh"] = r["pyiceberg_lookup_s"] / r["pyiceberg_fresh_lookup_s"]
    return r


def check(con, loc: str, expected: dict) -> None:
    got = con.execute(f"""select count(*), coalesce(sum(order_id),0), coalesce(sum(customer_id),0),
        coalesce(sum((amount * 100)::BIGINT),0), coalesce(sum(epoch_us(updated_at)),0),
        count(*) - count(distinct order_id) from iceberg_scan('{loc}')""").fetchone()
    want = (expected["count"], expected["sum_order_id"], expected["sum_customer_id"],
            expected["sum_cents"], expected["sum_ts_us"], 0)
    if tuple(int(x) for x in got) != want:
        raise SystemExit(f"table at {loc} differs from the expected state: {got} != {want}")


def checkpoint(con, binary: Path, case: Path, wh: Path, at: int, phase: str, expected: dict,
               a) -> dict:
    loc = metadata_location(wh)
    check(con, loc, expected)
    sh = shape(loc)
    # The same rows once: one plain Parquet file (sorted by key), and a fresh table made of it
    # by a full load of the same binary.
    snap = case / f"snap-{at}-{phase}"
    shutil.rmtree(snap, ignore_errors=True)
    src = snap / "dms" / NS / TABLE
    src.mkdir(parents=True)
    plain = snap / "plain.parquet"
    con.execute(f"copy (select * from iceberg_scan('{loc}') order by order_id) to '{plain}' "
                "(format parquet)")
    shutil.copy(plain, src / "LOAD00000001.parquet")
    (snap / "config.toml").write_text(config_for(a, case.name))
    run([binary, "ingest", snap / "dms", "--warehouse", snap / "wh", "--config",
         snap / "config.toml", "--format", "json"])
    fresh_loc = metadata_location(snap / "wh")
    check(con, fresh_loc, expected)
    keys = [r[0] for r in con.execute(
        f"select order_id from read_parquet('{plain}') using sample {a.lookups} rows "
        "(reservoir, 7)").fetchall()]
    r = reads(con, loc, fresh_loc, str(plain), keys, a.runs)
    shutil.rmtree(snap / "dms")
    return {"files": at, "phase": phase, **sh, **r}


def puffin_target(d) -> str | None:
    """The data file a deletion vector deletes rows of, from its Puffin file's footer (PyIceberg
    0.12 does not expose `referenced_data_file`): ours hold one vector each."""
    fmt = getattr(d, "file_format", None)
    if "PUFFIN" not in str(fmt).upper():
        return None
    import struct
    with open(local(d.file_path), "rb") as f:
        f.seek(-12, 2)
        n = struct.unpack("<i", f.read(4))[0]
        f.seek(-12 - n, 2)
        blobs = json.loads(f.read(n))["blobs"]
    return blobs[0]["properties"]["referenced-data-file"] if len(blobs) == 1 else None


def config_for(a, label: str) -> str:
    v = a.version_for.get(label)
    return CONFIG + (f"format_version = {v}\n" if v else "")


def replay(label: str, binary: Path, meta: dict, a, base: Path) -> dict:
    case = base / label
    shutil.rmtree(case, ignore_errors=True)
    case.mkdir(parents=True)
    wh = case / "wh"
    cfg = case / "config.toml"
    props = a.props_for.get(label, {})
    cfg.write_text(config_for(a, label) + ("properties = { " + ", ".join(
        f'"{k}" = "{v}"' for k, v in props.items()) + " }\n" if props else ""))
    compact_args = a.compact_args_for.get(label, a.compact_args).split()
    con = peers.duckdb_connect()
    out = {"label": label, "binary": str(binary), "points": [], "ingest_s": [],
           "compactions": [], "props": props,
           "compact_every": a.every_for.get(label, a.compact_every),
           "compact_args": compact_args}
    wall, _ = run([binary, "ingest", *meta["load_files"], "--warehouse", wh, "--config", cfg,
                   "--format", "json"])
    out["load_s"] = wall
    points = sorted(set(a.checkpoints))
    done = 0
    files = meta["change_files"]
    every = a.every_for.get(label, a.compact_every)
    stops = sorted(set(points) | set(range(every, len(files) + 1, every)))
    expire_args = a.expire_for.get(label)
    if expire_args is not None:
        stops = sorted(set(stops) | set(range(a.expire_every, len(files) + 1, a.expire_every)))
    out["expire_args"] = expire_args
    for stop in stops:
        if stop > done:
            wall, stdout = run([binary, "ingest", *files[done:stop], "--warehouse", wh,
                                "--config", cfg, "--format", "json"])
            reps = [json.loads(x) for x in stdout.splitlines() if x.startswith("{")]
            applied = [r for r in reps if r.get("status") == "applied"]
            if len(applied) != stop - done:
                raise SystemExit(f"{label}: {len(applied)} of {stop - done} files applied")
            per = [r["timings"]["total_us"] / 1e6 for r in applied if r.get("timings")]
            out["ingest_s"].append({"from": done, "to": stop, "wall_s": wall,
                                    "median_file_s": statistics.median(per) if per else None})
            done = stop
        expected = meta["checksums_at"].get(str(stop))
        if stop in points:
            log(f"{label}: checkpoint {stop} (before compaction)")
            out["points"].append(checkpoint(con, binary, case, wh, stop, "before", expected, a))
            log(f"  {summary(out['points'][-1])}")
        maintained = False
        if stop > 0 and stop % every == 0:
            wall, stdout = run([binary, "compact", IDENT, "--warehouse", wh, "--format", "json",
                                *compact_args])
            out["compactions"].append({"at": stop, "wall_s": wall})
            maintained = True
        if expire_args is not None and stop > 0 and stop % a.expire_every == 0:
            run([binary, "expire", IDENT, "--warehouse", wh, *expire_args])
            maintained = True
        if maintained:
            if stop in points:
                log(f"{label}: checkpoint {stop} (after maintenance)")
                out["points"].append(
                    checkpoint(con, binary, case, wh, stop, "after", expected, a))
                log(f"  {summary(out['points'][-1])}")
    return out


def summary(p: dict) -> str:
    return (f"manifests {p['manifests']} (dead {p.get('dead_manifests', 0)}), data "
            f"{p['data_files']}, deletes {p['delete_files']} (max/data file "
            f"{p.get('max_deletes_per_data_file', 0)}), metadata "
            f"{p['metadata_bytes'] / 1e6:.2f} MB; DuckDB scan {p['duckdb_scan_s'] * 1e3:.1f} ms "
            f"= {p['duckdb_scan_vs_plain']:.2f}x plain, lookup "
            f"{p['duckdb_lookup_s'] * 1e3:.1f} ms = {p['duckdb_lookup_vs_fresh']:.2f}x fresh; "
            f"PyIceberg scan {p['pyiceberg_scan_vs_fresh']:.2f}x, lookup "
            f"{p['pyiceberg_lookup_vs_fresh']:.2f}x fresh")


def markdown(res: dict) -> str:
    L = [f"# Read cost as the table lives ({res['date']})", "",
         f"{res['rows']:,} rows, change files of {res['changes']} changes (70% U, 20% I, 10% D, "
         f"keys uniform); DuckDB "
         f"{res['versions'].get('duckdb')}, PyIceberg {res['versions'].get('pyiceberg')}; "
         f"medians of {res['runs']} runs. Machine: {res['machine']}.", ""]
    for r in res["results"]:
        L += [f"## {r['label']} (`{r['binary']}`)", "",
              f"`compact {' '.join(r.get('compact_args', []))}` every {r.get('compact_every')} "
              f"files; table properties {r.get('props') or 'as created'}.", "",
              f"Full load {r['load_s']:.2f} s; compactions: median "
              f"{statistics.median([c['wall_s'] for c in r['compactions']] or [0]):.2f} s, last "
              f"{(r['compactions'] or [{'wall_s': 0}])[-1]['wall_s']:.2f} s; per change file "
              f"(median of segment medians) "
              f"{statistics.median([s['median_file_s'] for s in r['ingest_s'] if s['median_file_s']] or [0]) * 1e3:.1f} ms.",
              "",
              "| files | phase | manifests (dead) | data files | delete files | max / mean deletes per data file | metadata MB | DuckDB scan ms | vs plain | DuckDB lookup ms | vs fresh | PyIceberg scan vs fresh | PyIceberg lookup vs fresh |",
              "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for p in r["points"]:
            L.append(
                f"| {p['files']} | {p['phase']} | {p['manifests']} ({p.get('dead_manifests', 0)}) "
                f"| {p['data_files']} | {p['delete_files']} | "
                f"{p.get('max_deletes_per_data_file', 0)} / {p.get('mean_deletes_per_data_file', 0)} "
                f"| {p['metadata_bytes'] / 1e6:.2f} | {p['duckdb_scan_s'] * 1e3:.1f} | "
                f"{p['duckdb_scan_vs_plain']:.2f}x | {p['duckdb_lookup_s'] * 1e3:.1f} | "
                f"{p['duckdb_lookup_vs_fresh']:.2f}x | {p['pyiceberg_scan_vs_fresh']:.2f}x | "
                f"{p['pyiceberg_lookup_vs_fresh']:.2f}x |")
        L.append("")
    return "\n".join(L)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--binary", action="append", default=[],
                    help="LABEL=PATH (default: after=target/release/dms2iceberg)")
    ap.add_argument("--setup-json", help="bench/run's venv and build timings")
    ap.add_argument("--command", help="how bench/run was invoked (recorded)")
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--changes", type=int, default=500)
    ap.add_argument("--files", type=int, default=1440)
    ap.add_argument("--compact-every", default="60",
                    help="files between compaction runs: N, or LABEL=N,LABEL=N")
    ap.add_argument("--checkpoints", default="0,60,120,300,480,1440")
    ap.add_argument("--compact-args", action="append", default=[],
                    help="extra arguments of `compact` (LABEL:ARGS for one binary only)")
    ap.add_argument("--expire-args", action="append", default=[],
                    help="LABEL:ARGS: run `expire TABLE ARGS` for that binary every "
                         "--expire-every files (the hourly maintenance)")
    ap.add_argument("--expire-every", type=int, default=60)
    ap.add_argument("--props", action="append", default=[],
                    help="LABEL=KEY:VALUE,...: table properties set at creation for one binary's "
                         "table (its config's `properties`)")
    ap.add_argument("--format-version", action="append", default=[],
                    help="LABEL=3: that binary's table (and its fresh copies) in Iceberg format "
                         "version 3 (default 2)")
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--lookups", type=int, default=10)
    ap.add_argument("--seed", type=int, default=42)
    ap.add_argument("--work", type=Path, default=Path(os.environ.get("TMPDIR", "/tmp"))
                    / "d2i-read-bench")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    if not a.binary:
        a.binary = [f"after={ROOT / 'target' / 'release' / 'dms2iceberg'}"]
    a.checkpoints = [int(x) for x in a.checkpoints.split(",") if x]
    a.version_for = dict(v.split("=", 1) for v in a.format_version)
    a.props_for = {}
    for spec in a.props:
        label, kvs = spec.split("=", 1)
        a.props_for[label] = dict(kv.split(":", 1) for kv in kvs.split(",") if kv)
    a.compact_args_for = {}
    shared_args = []
    for c in a.compact_args:
        if ":" in c and not c.split(":")[0].startswith("-"):
            label, args = c.split(":", 1)
            a.compact_args_for[label] = args
        else:
            shared_args.append(c)
    a.compact_args = " ".join(shared_args)
    every = {}
    for part in a.compact_every.split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            every[k] = int(v)
        else:
            every[""] = int(part)
    a.every_for = every
    a.expire_for = {}
    for c in a.expire_args:
        label, args = c.split(":", 1)
        a.expire_for[label] = args.split()
    a.compact_every = every.get("", 60)
    a.checkpoints = [c for c in a.checkpoints if c <= a.files]
    work = a.work
    wl = work / f"workload-{a.rows}-{a.changes}-{a.files}-{a.seed}"
    stops = set(a.checkpoints)
    for n in a.every_for.values():
        stops |= set(range(n, a.files + 1, n))
    stops = tuple(sorted(stops))
    if not (wl / "meta.json").exists() or not {str(c) for c in stops} <= set(
            json.loads((wl / "meta.json").read_text()).get("checksums_at", {})):
        log(f"generating {a.rows:,} rows + {a.files} change files of {a.changes}")
        gen.workload(wl, a.rows, a.changes, a.files, a.seed, (0.7, 0.2, 0.1), 0.05, None,
                     checkpoints=stops)
    meta = json.loads((wl / "meta.json").read_text())
    import bench
    res = {"date": time.strftime("%Y-%m-%d"), "rows": a.rows, "changes": a.changes,
           "files": a.files, "compact_every": a.compact_every, "runs": a.runs,
           "machine": bench.machine(), "versions": bench.versions(), "results": [],
           "command": a.command or " ".join(sys.argv)}
    # Never over an earlier result of the same name (a figure RESULTS.md may cite): -2, -3, ...
    out = HERE / "results"
    out.mkdir(exist_ok=True)
    base = f"{res['date']}-read" + (f"-{a.out}" if a.out else "")
    name, n = base, 1
    while (out / f"{name}.md").exists() or (out / f"{name}.json").exists():
        n += 1
        name = f"{base}-{n}"
    for spec in a.binary:
        label, path = spec.split("=", 1)
        log(f"{label}: {path} {a.props_for.get(label, '')}")
        res["results"].append(replay(label, Path(path), meta, a, work / "cases"))
    (out / f"{name}.json").write_text(json.dumps(res, indent=1))
    (out / f"{name}.md").write_text(markdown(res))
    log(f"wrote bench/results/{name}.md")


if __name__ == "__main__":
    main()
