#!/usr/bin/env python3
"""peers.py: what people use today to apply DMS change files, one process per phase so that the
orchestrator (bench.py) measures each phase's wall clock and peak RSS from outside.

  peers.py load     --tool pyiceberg|delta|duckdb --table DIR --meta META.json
  peers.py changes  --tool pyiceberg|delta|duckdb --table DIR --meta META.json
  peers.py verify   --tool pyiceberg|delta|duckdb|dms2iceberg --table DIR --meta META.json [--full]
  peers.py duckdb   --tool pyiceberg|delta|duckdb|dms2iceberg --table DIR --meta META.json [--runs 3]
  peers.py files    --tool pyiceberg|delta|duckdb|dms2iceberg --table DIR

Every command prints one JSON object on its last stdout line.

Per change file both peers do what a hand-written DMS applier does (the idiomatic recipe of each
library, no tuning): read the CSV with pyarrow (explicit column types, the same types
dms2iceberg infers: long, long, string, decimal(38,2), string, timestamp), dedupe to the last
change per key (a key changed twice in a file must be applied once, or the later version is
lost), then one commit:
- PyIceberg 0.12: one transaction with `upsert(rows of I and U, join_cols=[order_id])` and
  `delete(In(order_id, keys of D))` on a SqlCatalog (sqlite) table whose identifier field is
  order_id.
- delta-rs: `merge(source, "t.order_id = s.order_id")` with delete when s.op = 'D', update all
  and insert all otherwise.
- DuckDB 1.5 (iceberg extension) on an Iceberg table in a REST catalog (rustberg, the server the
  tests run, file:// warehouse, started by this process): in one transaction, `MERGE INTO`
  (update all / insert all) of the I and U rows, then `DELETE ... WHERE order_id IN` the D keys.
  DuckDB 1.5.5 refuses a MERGE with both an UPDATE and a DELETE action on Iceberg ("only
  supports a single UPDATE/DELETE action"), hence two statements. The full load is one
  `INSERT ... SELECT` per LOAD file from DuckDB's own CSV reader.
The per-file time covers read + dedupe + commit, measured in the process.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sqlite3
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

NS, TABLE = "shop", "orders"
KEY = "order_id"
COLUMN_TYPES = {
    "Op": pa.string(),
    "order_id": pa.int64(),
    "customer_id": pa.int64(),
    "status": pa.string(),
    "amount": pa.decimal128(38, 2),
    "note": pa.string(),
    "updated_at": pa.timestamp("us"),
}


def read_dms_csv(path: str) -> pa.Table:
    return pacsv.read_csv(
        path,
        convert_options=pacsv.ConvertOptions(
            column_types=COLUMN_TYPES, strings_can_be_null=False, quoted_strings_can_be_null=False),
    )


def dedupe_last(t: pa.Table) -> pa.Table:
    """Last row per key, in file order."""
    t = t.append_column("_row", pa.array(range(t.num_rows), pa.int64()))
    last = t.group_by(KEY, use_threads=False).aggregate([("_row", "max")])
    rows = last["_row_max"]
    return t.take(pc.take(rows, pc.sort_indices(rows))).drop_columns(["_row"])


def data_schema() -> pa.Schema:
    return pa.schema([
        pa.field("order_id", pa.int64(), nullable=False),
        pa.field("customer_id", pa.int64()),
        pa.field("status", pa.string()),
        pa.field("amount", pa.decimal128(38, 2)),
        pa.field("note", pa.string()),
        pa.field("updated_at", pa.timestamp("us")),
    ])


def rows_only(t: pa.Table) -> pa.Table:
    return t.drop_columns(["Op"]).cast(data_schema())


# ---------------------------------------------------------------------------------------------
# PyIceberg


def iceberg_catalog(table_dir: Path):
    from pyiceberg.catalog.sql import SqlCatalog
    table_dir.mkdir(parents=True, exist_ok=True)
    return SqlCatalog("default", uri=f"sqlite:///{table_dir}/catalog.db",
                      warehouse=f"file://{table_dir}")


def pyiceberg_load(table_dir: Path, meta: dict) -> dict:
    from pyiceberg.schema import Schema
    from pyiceberg.types import (DecimalType, LongType, NestedField, StringType, TimestampType)
    cat = iceberg_catalog(table_dir)
    cat.create_namespace_if_not_exists(NS)
    schema = Schema(
        NestedField(1, "order_id", LongType(), required=True),
        NestedField(2, "customer_id", LongType(), required=False),
        NestedField(3, "status", StringType(), required=False),
        NestedField(4, "amount", DecimalType(38, 2), required=False),
        NestedField(5, "note", StringType(), required=False),
        NestedField(6, "updated_at", TimestampType(), required=False),
        identifier_field_ids=[1],
    )
    # format-version 2 (the default) so merge-on-read would be possible
    tbl = cat.create_table(f"{NS}.{TABLE}", schema=schema,
                           properties={"format-version": "2"})
    times = []
    for f in meta["load_files"]:
        s = time.perf_counter()
        tbl.append(rows_only(read_dms_csv(f)))
        times.append(time.perf_counter() - s)
    return {"per_file_s": times}


def pyiceberg_changes(table_dir: Path, meta: dict) -> dict:
    from pyiceberg.expressions import In
    cat = iceberg_catalog(table_dir)
    tbl = cat.load_table(f"{NS}.{TABLE}")
    times, details = [], []
    for f in meta["change_files"]:
        s = time.perf_counter()
        t = dedupe_last(read_dms_csv(f))
        is_del = pc.equal(t["Op"], "D")
        upserts = rows_only(t.filter(pc.invert(is_del)))
        deletes = t.filter(is_del)[KEY].to_pylist()
        with tbl.transaction() as tx:
            r = tx.upsert(upserts, join_cols=[KEY])
            if deletes:
                tx.delete(delete_filter=In(KEY, deletes))
        times.append(time.perf_counter() - s)
        details.append({"rows_updated": r.rows_updated, "rows_inserted": r.rows_inserted,
                        "deletes": len(deletes)})
        tbl = cat.load_table(f"{NS}.{TABLE}")
    return {"per_file_s": times, "details": details}


# ---------------------------------------------------------------------------------------------
# delta-rs


def delta_load(table_dir: Path, meta: dict) -> dict:
    from deltalake import write_deltalake
    times = []
    for f in meta["load_files"]:
        s = time.perf_counter()
        write_deltalake(str(table_dir), rows_only(read_dms_csv(f)), mode="append")
        times.append(time.perf_counter() - s)
    return {"per_file_s": times}


def delta_changes(table_dir: Path, meta: dict) -> dict:
    from deltalake import DeltaTable
    times, details = [], []
    for f in meta["change_files"]:
        s = time.perf_counter()
        t = dedupe_last(read_dms_csv(f)).rename_columns(
            ["op"] + [c for c in read_schema_names() if c != "Op"])
        dt = DeltaTable(str(table_dir))
        r = (
            dt.merge(source=t, predicate=f"t.{KEY} = s.{KEY}", source_alias="s",
                     target_alias="t")
            .when_matched_delete(predicate="s.op = 'D'")
            .when_matched_update_all(predicate="s.op <> 'D'", except_cols=["op"])
            .when_not_matched_insert_all(predicate="s.op <> 'D'", except_cols=["op"])
            .execute()
        )
        times.append(time.perf_counter() - s)
        details.append({k: r.get(k) for k in ("num_target_rows_updated", "num_target_rows_inserted",
                                              "num_target_rows_deleted", "num_target_files_added",
                                              "num_target_files_removed")})
    return {"per_file_s": times, "details": details}


# ---------------------------------------------------------------------------------------------
# DuckDB on an Iceberg REST catalog


def rustberg_bin() -> str:
    """The REST server the tests build (scripts/test caches it), or DMS2ICEBERG_RUSTBERG."""
    env = os.environ.get("DMS2ICEBERG_RUSTBERG")
    if env:
        return env
    cache = os.environ.get("DMS2ICEBERG_CACHE", os.path.expanduser("~/.cache/dms2iceberg"))
    found = sorted(glob.glob(os.path.join(cache, "rustberg-*", "bin", "rustberg")))
    if not found:
        raise SystemExit("no rustberg binary: run scripts/test once (it builds and caches it) "
                         "or set DMS2ICEBERG_RUSTBERG")
    return found[-1]


class Rustberg:
    """rustberg on a free port, its catalog and file:// warehouse under table_dir (kept across
    the load and changes processes)."""

    TOKEN = "rb_bench_token"

    def __init__(self, table_dir: Path):
        import socket
        import subprocess
        data, wh = table_dir / "catalog", table_dir / "warehouse"
        data.mkdir(parents=True, exist_ok=True)
        wh.mkdir(parents=True, exist_ok=True)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        config = table_dir / "rustberg.toml"
        template = (Path(__file__).resolve().parent.parent / "tests" / "support"
                    / "rustberg.toml").read_text()
        config.write_text(template.replace("@PORT@", str(self.port)).replace("@DATA@", str(data))
                          + f'warehouse_location = "file://{wh}"\n')
        log = open(table_dir / "rustberg.log", "ab")
        self.proc = subprocess.Popen(
            [rustberg_bin(), "--config", str(config), "--insecure-http"],
            env={**os.environ, "RUSTBERG_KEY": self.TOKEN},
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        self.uri = f"http://127.0.0.1:{self.port}"
        import urllib.request
        end = time.time() + 30
        while time.time() < end:
            try:
                urllib.request.urlopen(f"{self.uri}/ready", timeout=1)
                return
            except Exception:  # noqa: BLE001 - not up yet
                if self.proc.poll() is not None:
                    break
                time.sleep(0.1)
        raise SystemExit(f"rustberg did not start; see {table_dir / 'rustberg.log'}")

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def duckdb_rest(table_dir: Path):
    server = Rustberg(table_dir)
    con = duckdb_connect(httpfs=True)
    con.execute(f"CREATE SECRET rest_token (TYPE iceberg, TOKEN '{Rustberg.TOKEN}')")
    con.execute("ATTACH '' AS cat (TYPE iceberg, ENDPOINT ?, SECRET rest_token)", [server.uri])
    return server, con


DUCK_COLUMNS = ("order_id BIGINT NOT NULL, customer_id BIGINT, status VARCHAR, "
                "amount DECIMAL(38,2), note VARCHAR, updated_at TIMESTAMP")
DATA_COLUMNS = ["order_id", "customer_id", "status", "amount", "note", "updated_at"]


def duckdb_load(table_dir: Path, meta: dict) -> dict:
    server, con = duckdb_rest(table_dir)
    try:
        con.execute(f"CREATE SCHEMA IF NOT EXISTS cat.{NS}")
        con.execute(f"CREATE TABLE cat.{NS}.{TABLE} ({DUCK_COLUMNS})")
        types = {k: str(v) for k, v in {
            "Op": "VARCHAR", "order_id": "BIGINT", "customer_id": "BIGINT", "status": "VARCHAR",
            "amount": "DECIMAL(38,2)", "note": "VARCHAR", "updated_at": "TIMESTAMP"}.items()}
        times = []
        for f in meta["load_files"]:
            s = time.perf_counter()
            con.execute(f"""INSERT INTO cat.{NS}.{TABLE}
                SELECT {', '.join(DATA_COLUMNS)} FROM read_csv(?, header = true, columns = ?)""",
                        [f, types])
            times.append(time.perf_counter() - s)
        return {"per_file_s": times}
    finally:
        server.close()


def duckdb_changes(table_dir: Path, meta: dict) -> dict:
    if ONLY is not None:
        meta = {**meta, "change_files": [meta["change_files"][ONLY]]}
    server, con = duckdb_rest(table_dir)
    t_name = f"cat.{NS}.{TABLE}"
    sets = ", ".join(f"{c} = s.{c}" for c in DATA_COLUMNS if c != KEY)
    values = ", ".join(f"s.{c}" for c in DATA_COLUMNS)
    times, details = [], []
    try:
        for f in meta["change_files"]:
            s = time.perf_counter()
            t = dedupe_last(read_dms_csv(f))
            is_del = pc.equal(t["Op"], "D")
            upserts = rows_only(t.filter(pc.invert(is_del)))
            deletes = pa.table({KEY: t.filter(is_del)[KEY]})
            con.register("upserts", upserts)
            con.register("deletes", deletes)
            con.execute("BEGIN")
            merged = con.execute(f"""MERGE INTO {t_name} AS t USING upserts AS s
                ON t.{KEY} = s.{KEY}
                WHEN MATCHED THEN UPDATE SET {sets}
                WHEN NOT MATCHED THEN INSERT VALUES ({values})""").fetchall()
            deleted = con.execute(
                f"DELETE FROM {t_name} WHERE {KEY} IN (SELECT {KEY} FROM deletes)").fetchall()
            con.execute("COMMIT")
            con.unregister("upserts")
            con.unregister("deletes")
            times.append(time.perf_counter() - s)
            details.append({"merged": merged[0][0] if merged else None,
                            "deleted": deleted[0][0] if deleted else None})
        return {"per_file_s": times, "details": details}
    finally:
        server.close()


def duckdb_metadata_location(table_dir: Path) -> str:
    """The table's newest metadata file (the server writes them numbered), read statically."""
    found = glob.glob(str(table_dir / "warehouse" / "**" / "metadata" / "*.metadata.json"),
                      recursive=True)
    if not found:
        raise SystemExit(f"no metadata under {table_dir / 'warehouse'}")
    return max(found, key=lambda p: int(os.path.basename(p).split("-")[0]))


def static_table(table_dir: Path):
    from pyiceberg.table import StaticTable
    return StaticTable.from_metadata(duckdb_metadata_location(table_dir))


def read_schema_names() -> list[str]:
    return list(COLUMN_TYPES)


# ---------------------------------------------------------------------------------------------
# Reading back: verification, file counts, DuckDB


def metadata_location(table_dir: Path) -> str:
    con = sqlite3.connect(table_dir / "catalog.db")
    try:
        return con.execute(
            "select metadata_location from iceberg_tables where table_namespace=? and table_name=?",
            (NS, TABLE)).fetchone()[0]
    finally:
        con.close()


def glue_catalog(endpoint: str):
    """PyIceberg's GlueCatalog on the local S3 + Glue emulator (tests/support/moto_server.py)."""
    from pyiceberg.catalog.glue import GlueCatalog
    props = {"glue.endpoint": endpoint, "s3.endpoint": endpoint, "s3.path-style-access": "true",
             "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    for k, v in {"access-key-id": "testing", "secret-access-key": "testing",
                 "region": "us-east-1"}.items():
        props[f"glue.{k}"] = v
        props[f"s3.{k}"] = v
    return GlueCatalog("glue", **props)


GLUE_ENDPOINT: str | None = None
ONLY: int | None = None
GLUE_TABLE = f"{NS}.{TABLE}"


def read_with_own_reader(tool: str, table_dir: Path) -> pa.Table:
    """The table through an engine other than DuckDB: PyIceberg for Iceberg tables (ours and
    PyIceberg's own), deltalake for Delta."""
    if GLUE_ENDPOINT:
        return glue_catalog(GLUE_ENDPOINT).load_table(GLUE_TABLE).scan().to_arrow()
    if tool == "delta":
        from deltalake import DeltaTable
        return DeltaTable(str(table_dir)).to_pyarrow_table()
    if tool == "duckdb":
        return static_table(table_dir).scan().to_arrow()
    return iceberg_catalog(table_dir).load_table(f"{NS}.{TABLE}").scan().to_arrow()


NORMALISED = """
    select order_id::BIGINT as order_id, customer_id::BIGINT as customer_id, status::VARCHAR as status,
           (amount * 100)::BIGINT as cents, note::VARCHAR as note, epoch_us(updated_at) as ts_us
    from {src}
"""


def duckdb_connect(httpfs: bool = False):
    import duckdb
    con = duckdb.connect(config={"allow_unsigned_extensions": "true",
                                 "autoinstall_known_extensions": "false",
                                 "autoload_known_extensions": "false"})
    import importlib.util
    for ext in ("avro", *(["httpfs"] if httpfs else []), "iceberg", "delta"):
        spec = importlib.util.find_spec(f"duckdb_extension_{ext}")
        if spec is None:
            continue
        found = glob.glob(os.path.join(os.path.dirname(spec.origin), "**",
                                       f"{ext}.duckdb_extension"), recursive=True)
        if found:
            con.execute(f"LOAD '{found[0]}'")
    return con


def verify(tool: str, table_dir: Path, meta_path: Path, full: bool) -> dict:
    meta = json.loads(meta_path.read_text())
    exp_sum = meta["checksum"]
    con = duckdb_connect()
    actual = read_with_own_reader(tool, table_dir)
    con.register("actual_raw", actual)
    con.execute(f"create temp table a as {NORMALISED.format(src='actual_raw')}")
    con.unregister("actual_raw")
    del actual
    got = con.execute("""select count(*), coalesce(sum(order_id),0), coalesce(sum(customer_id),0),
                                coalesce(sum(cents),0), coalesce(sum(ts_us),0) from a""").fetchone()
    checks = {"count": got[0], "sum_order_id": int(got[1]), "sum_customer_id": int(got[2]),
              "sum_cents": int(got[3]), "sum_ts_us": int(got[4])}
    problems = [f"{k}: got {checks[k]}, expected {exp_sum[k]}" for k in checks
                if checks[k] != exp_sum[k]]
    dup = con.execute("select count(*) - count(distinct order_id) from a").fetchone()[0]
    if dup:
        problems.append(f"{dup} duplicate keys")
    compared = "count+checksums"
    if full:
        exp = Path(meta_path).parent / "expected.parquet"
        only_a = con.execute(f"""select count(*) from (select * from a except all
                                  select * from read_parquet('{exp}'))""").fetchone()[0]
        only_e = con.execute(f"""select count(*) from (select * from read_parquet('{exp}')
                                  except all select * from a)""").fetchone()[0]
        if only_a or only_e:
            sample = con.execute(f"""select * from (select * from a except all
                                  select * from read_parquet('{exp}')) order by order_id limit 3""").fetchall()
            problems.append(f"full compare: {only_a} rows only in the table, {only_e} only in "
                            f"the expected state; e.g. {sample}")
        compared = "full (every row and column)"
    return {"ok": not problems, "problems": problems, "compared": compared,
            "reader": "deltalake" if tool == "delta" else
            ("pyiceberg GlueCatalog" if GLUE_ENDPOINT else
             "pyiceberg StaticTable" if tool == "duckdb" else "pyiceberg"), **checks}


def duckdb_read(tool: str, table_dir: Path, meta_path: Path, runs: int) -> dict:
    meta = json.loads(meta_path.read_text())
    con = duckdb_connect()
    if tool == "delta":
        try:
            con.execute(f"select count(*) from delta_scan('{table_dir}')").fetchone()
            src, reader = f"delta_scan('{table_dir}')", "duckdb delta_scan"
        except Exception as e:  # noqa: BLE001 - reported, then fall back
            from deltalake import DeltaTable
            con.register("dt", DeltaTable(str(table_dir)).to_pyarrow_dataset())
            src, reader = "dt", f"deltalake dataset via duckdb ({e.__class__.__name__})"
    else:
        location = (duckdb_metadata_location(table_dir) if tool == "duckdb"
                    else metadata_location(table_dir))
        src, reader = f"iceberg_scan('{location}')", "duckdb iceberg_scan"
    # every column is read; the sums double as a check independent of the writer's own reader
    q = f"""select count(*), sum(customer_id), sum((amount * 100)::BIGINT), max(status),
                   max(note), sum(epoch_us(updated_at)) from {src}"""
    times, got = [], None
    for _ in range(runs):
        s = time.perf_counter()
        got = con.execute(q).fetchone()
        times.append(time.perf_counter() - s)
    exp = meta["checksum"]
    ok = (got[0] == exp["count"] and int(got[1] or 0) == exp["sum_customer_id"]
          and int(got[2] or 0) == exp["sum_cents"] and int(got[5] or 0) == exp["sum_ts_us"])
    times.sort()
    return {"reader": reader, "median_s": times[len(times) // 2], "runs_s": times, "ok": ok,
            "count": got[0]}


def count_files(tool: str, table_dir: Path) -> dict:
    if tool == "delta":
        from deltalake import DeltaTable
        dt = DeltaTable(str(table_dir))
        files = dt.file_uris()
        size = sum(os.path.getsize(f.removeprefix("file://")) for f in files)
        return {"data_files": len(files), "delete_files": 0, "data_bytes": size,
                "versions": dt.version() + 1}
    tbl = (static_table(table_dir) if tool == "duckdb"
           else iceberg_catalog(table_dir).load_table(f"{NS}.{TABLE}"))
    f = tbl.inspect.files().select(["content", "file_size_in_bytes"]).to_pylist()
    data = [r for r in f if r["content"] == 0]
    pos = [r for r in f if r["content"] == 1]
    eq = [r for r in f if r["content"] == 2]
    return {"data_files": len(data), "delete_files": len(pos), "equality_delete_files": len(eq),
            "data_bytes": sum(r["file_size_in_bytes"] for r in data),
            "delete_bytes": sum(r["file_size_in_bytes"] for r in pos),
            "snapshots": len(tbl.snapshots()),
            "operations": [s.summary.operation.value if s.summary else None
                           for s in tbl.snapshots()]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("cmd", choices=["load", "changes", "verify", "duckdb", "files"])
    ap.add_argument("--tool", required=True,
                    choices=["pyiceberg", "delta", "duckdb", "dms2iceberg"])
    ap.add_argument("--table", required=True, type=Path)
    ap.add_argument("--meta", type=Path)
    ap.add_argument("--full", action="store_true")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--only", type=int, help="changes (duckdb): apply only the change file at "
                    "this index (a cold process per file)")
    ap.add_argument("--glue-endpoint", help="verify: read the table through Glue + S3 there")
    ap.add_argument("--glue-table", default=f"{NS}.{TABLE}",
                    help="verify through Glue: the table (database.table)")
    a = ap.parse_args()
    global GLUE_ENDPOINT, GLUE_TABLE, ONLY
    GLUE_ENDPOINT, GLUE_TABLE, ONLY = a.glue_endpoint, a.glue_table, a.only
    table_dir = a.table.resolve()
    meta = json.loads(a.meta.read_text()) if a.meta else {}
    if a.cmd == "load":
        out = {"pyiceberg": pyiceberg_load, "delta": delta_load,
               "duckdb": duckdb_load}[a.tool](table_dir, meta)
    elif a.cmd == "changes":
        out = {"pyiceberg": pyiceberg_changes, "delta": delta_changes,
               "duckdb": duckdb_changes}[a.tool](table_dir, meta)
    elif a.cmd == "verify":
        out = verify(a.tool, table_dir, a.meta, a.full)
    elif a.cmd == "duckdb":
        out = duckdb_read(a.tool, table_dir, a.meta, a.runs)
    else:
        out = count_files(a.tool, table_dir)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
