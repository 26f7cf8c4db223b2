#!/usr/bin/env python3
"""Read a dms2iceberg table with independent engines and compare it with an expected state.

  check_readers.py --warehouse W --table ns.table --expected FILE.jsonl [--snapshot-id ID]
                   [--key col,col] [--readers pyiceberg,duckdb] [--catalog-name NAME]
  check_readers.py --rest-uri URI --table ns.table --expected FILE.jsonl ...

Readers:
  pyiceberg  SqlCatalog(NAME, uri="sqlite:///W/catalog.db", warehouse="file://W")
             .load_table(table).scan([snapshot_id]).to_arrow()   (NAME: "default" unless given)
  duckdb     iceberg_scan('<metadata_location read from W/catalog.db>' [, snapshot_from_id=ID]),
             with the avro and iceberg extensions loaded from the installed PyPI packages
             duckdb-extension-avro / duckdb-extension-iceberg (offline, unsigned allowed).

With --rest-uri the table is found through an Iceberg REST catalog instead (token from
DMS2ICEBERG_REST_TOKEN), by each reader's own REST client:
  pyiceberg  RestCatalog("rest", uri=URI, token=TOKEN).load_table(table)
  duckdb     ATTACH '' AS rest (TYPE iceberg, ENDPOINT URI, SECRET <iceberg secret with TOKEN>),
             SELECT * FROM rest.<namespace>.<table>   (httpfs loaded from duckdb-extension-httpfs)

A table on S3 behind a REST catalog (--s3-endpoint URL, an emulator): PyIceberg reads its files
with the storage credentials the catalog vends (X-Iceberg-Access-Delegation: vended-credentials,
when DMS2ICEBERG_REST_VENDED_CREDENTIALS=1), and DuckDB reads the metadata location the catalog
names with iceberg_scan over httpfs, with the S3 credentials of the environment
(AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY).

Both results are normalized to the JSON contract (see jsoncmp.py) and compared with the expected
rows (primary key and column types from FILE's sibling .meta.json when present, or --key).
Exit 0 if every reader matches, 1 with a diff per failing reader otherwise, 2 on usage errors.
"""
from __future__ import annotations

import argparse
import datetime as dt
import glob
import importlib.util
import json
import os
import sqlite3
import statistics
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The catalog_name of the table's row in catalog.db (dms2iceberg --catalog-name).
CATALOG_NAME = "default"
sys.path.insert(0, str(HERE))
import jsoncmp  # noqa: E402


def arrow_value_to_json(v, t):
    import pyarrow as pa
    if v is None:
        return None
    if pa.types.is_boolean(t):
        return bool(v)
    if pa.types.is_integer(t):
        return int(v)
    if pa.types.is_decimal(t):
        return format(v, f".{t.scale}f")
    if pa.types.is_floating(t):
        return float(v)
    if pa.types.is_timestamp(t):
        if t.tz is not None:
            return v.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f") + "+00:00"
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if pa.types.is_date(t):
        return v.isoformat()
    if pa.types.is_time(t):
        return v.strftime("%H:%M:%S.%f")
    if pa.types.is_binary(t) or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t) \
            or (hasattr(pa.types, "is_binary_view") and pa.types.is_binary_view(t)):
        return bytes(v).hex()
    if isinstance(v, (bytes, bytearray)):
        return bytes(v).hex()
    if isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def arrow_to_rows(tbl) -> list[dict]:
    """pyarrow Table -> list of JSON-contract dicts (column names lower-cased)."""
    cols = []
    for name, col in zip(tbl.column_names, tbl.columns):
        t = col.type
        cols.append((name.lower(), [arrow_value_to_json(v, t) for v in col.to_pylist()]))
    n = tbl.num_rows
    return [{name: vals[i] for name, vals in cols} for i in range(n)]


def sort_rows(rows: list[dict], key: list[str] | None, types: dict | None) -> list[dict]:
    if not key:
        return rows
    return sorted(rows, key=lambda r: jsoncmp._key_of(r, key, 0, types))


def split_table(name: str) -> tuple[str, str]:
    if "." not in name:
        raise SystemExit(f"table must be namespace.table, got {name!r}")
    ns, t = name.rsplit(".", 1)
    return ns, t


def metadata_location(warehouse: Path, table: str) -> str:
    ns, t = split_table(table)
    db = warehouse / "catalog.db"
    if not db.exists():
        raise RuntimeError(f"no catalog at {db}")
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT metadata_location FROM iceberg_tables "
            "WHERE catalog_name = ? AND table_namespace = ? AND table_name = ?",
            (CATALOG_NAME, ns, t)).fetchall()
    finally:
        con.close()
    if len(rows) != 1:
        raise RuntimeError(f"{table}: {len(rows)} row(s) in iceberg_tables of {db}")
    return rows[0][0]


# (uri, token) of the REST catalog the readers go through (--rest-uri), or None.
REST = None
# The S3 endpoint (an emulator) of a REST catalog's tables (--s3-endpoint), or None.
S3_ENDPOINT = None


def rest_catalog():
    from pyiceberg.catalog.rest import RestCatalog
    props = {"uri": REST[0], "token": REST[1]}
    if os.environ.get("DMS2ICEBERG_REST_VENDED_CREDENTIALS") == "1":
        props["header.X-Iceberg-Access-Delegation"] = "vended-credentials"
    if S3_ENDPOINT:
        props.update({"s3.endpoint": S3_ENDPOINT, "s3.path-style-access": "true",
                      "s3.region": os.environ.get("AWS_REGION", "us-east-1"),
                      "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"})
    return RestCatalog("rest", **props)


def read_pyiceberg(warehouse: Path, table: str, snapshot_id: int | None):
    if REST:
        cat = rest_catalog()
    else:
        from pyiceberg.catalog.sql import SqlCatalog
        cat = SqlCatalog(CATALOG_NAME, uri=f"sqlite:///{warehouse}/catalog.db", warehouse=f"file://{warehouse}")
    t = cat.load_table(table)
    scan = t.scan(snapshot_id=snapshot_id) if snapshot_id is not None else t.scan()
    return scan.to_arrow()


def extension_file(package: str) -> str:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"Python package {package} is not installed (see tests/support/requirements.txt)")
    for loc in spec.submodule_search_locations:
        hits = sorted(glob.glob(os.path.join(loc, "**", "*.duckdb_extension"), recursive=True))
        if hits:
            return hits[0]
    raise RuntimeError(f"no *.duckdb_extension file inside {package}")


def duckdb_connect():
    import duckdb
    con = duckdb.connect(config={
        "allow_unsigned_extensions": "true",
        "autoinstall_known_extensions": "false",
        "autoload_known_extensions": "false",
    })
    for pkg in ("duckdb_extension_avro", "duckdb_extension_iceberg"):  # avro first
        con.execute(f"LOAD '{extension_file(pkg)}'")
    return con


def read_duckdb_rest(table: str, snapshot_id: int | None):
    ns, t = split_table(table)
    con = duckdb_connect()
    try:
        con.execute(f"LOAD '{extension_file('duckdb_extension_httpfs')}'")
        con.execute("CREATE SECRET rest_token (TYPE iceberg, TOKEN ?)", [REST[1]])
        con.execute("ATTACH '' AS rest (TYPE iceberg, ENDPOINT ?, SECRET rest_token)", [REST[0]])
        at = f" AT (VERSION => {int(snapshot_id)})" if snapshot_id is not None else ""
        cur = con.execute(f'SELECT * FROM rest."{ns}"."{t}"{at}')
        to_arrow = getattr(cur, "to_arrow_table", None) or cur.fetch_arrow_table
        return to_arrow()
    finally:
        con.close()


def read_duckdb(warehouse: Path, table: str, snapshot_id: int | None):
    if REST and not S3_ENDPOINT:
        return read_duckdb_rest(table, snapshot_id)
    con = duckdb_connect()
    if REST:
        # Only the metadata location from the catalog: the files with the environment's keys.
        loc = rest_catalog().load_table(table).metadata_location
        con.execute(f"LOAD '{extension_file('duckdb_extension_httpfs')}'")
        host = S3_ENDPOINT.split("://", 1)[1]
        con.execute("CREATE SECRET s3env (TYPE s3, KEY_ID ?, SECRET ?, REGION ?, ENDPOINT ?, "
                    "URL_STYLE 'path', USE_SSL false)",
                    [os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"],
                     os.environ.get("AWS_REGION", "us-east-1"), host])
    else:
        loc = metadata_location(warehouse, table)
    try:
        args = "?"
        params = [loc]
        if snapshot_id is not None:
            args += ", snapshot_from_id = ?"
            params.append(snapshot_id)
        cur = con.execute(f"SELECT * FROM iceberg_scan({args})", params)
        to_arrow = getattr(cur, "to_arrow_table", None) or cur.fetch_arrow_table
        return to_arrow()
    finally:
        con.close()


READERS = {"pyiceberg": read_pyiceberg, "duckdb": read_duckdb}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--warehouse")
    ap.add_argument("--rest-uri", help="find the table through this Iceberg REST catalog")
    ap.add_argument("--s3-endpoint", help="the S3 endpoint of the REST catalog's tables")
    ap.add_argument("--table", required=True, help="namespace.table")
    ap.add_argument("--expected", required=True, help="expected rows, JSON lines (JSON contract)")
    ap.add_argument("--snapshot-id", type=int)
    ap.add_argument("--key", help="primary key columns, comma-separated (default: from .meta.json)")
    ap.add_argument("--meta", help="meta.json (default: next to --expected)")
    ap.add_argument("--readers", default="pyiceberg,duckdb")
    ap.add_argument("--catalog-name", default="default",
                    help="catalog_name of the table in catalog.db (dms2iceberg --catalog-name)")
    ap.add_argument("--dump", action="store_true", help="print what each reader returned")
    ap.add_argument("--repeat", type=int, default=1,
                    help="read N times and report the median read time (read_s=...)")
    a = ap.parse_args(argv)

    global CATALOG_NAME, REST, S3_ENDPOINT
    CATALOG_NAME = a.catalog_name
    S3_ENDPOINT = a.s3_endpoint
    if a.rest_uri:
        REST = (a.rest_uri, os.environ.get("DMS2ICEBERG_REST_TOKEN", ""))
    elif not a.warehouse:
        print("--warehouse or --rest-uri is required", file=sys.stderr)
        return 2
    warehouse = Path(a.warehouse or ".").resolve()
    meta = json.loads(Path(a.meta).read_text()) if a.meta else jsoncmp.load_meta(a.expected)
    key = a.key.split(",") if a.key else (meta or {}).get("primary_key")
    types = (meta or {}).get("columns")
    expected = jsoncmp.read_jsonl(a.expected)
    failed = []
    for name in a.readers.split(","):
        name = name.strip()
        if name not in READERS:
            print(f"unknown reader {name!r}", file=sys.stderr)
            return 2
        try:
            times = []
            for _ in range(max(1, a.repeat)):
                t0 = time.perf_counter()
                table = READERS[name](warehouse, a.table, a.snapshot_id)
                times.append(time.perf_counter() - t0)
            rows = sort_rows(arrow_to_rows(table), key, types)
        except Exception as e:  # noqa: BLE001 - report every reader's failure
            failed.append(name)
            print(f"[{name}] {a.table}: reading failed: {type(e).__name__}: {e}")
            traceback.print_exc(limit=3, file=sys.stdout)
            continue
        if a.dump:
            for r in rows:
                print(f"[{name}] " + json.dumps(r, ensure_ascii=False))
        diffs = jsoncmp.compare(expected, rows, key, types)
        if diffs:
            failed.append(name)
            print(f"[{name}] {a.table}" + (f"@{a.snapshot_id}" if a.snapshot_id is not None else "")
                  + f" differs from {a.expected}:")
            print("\n".join("    " + d for d in diffs))
        else:
            print(f"[{name}] {a.table}: {len(rows)} row(s) as expected; "
                  f"read_s={statistics.median(times):.4f}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
