#!/usr/bin/env python3
"""Self-test of check_readers.py, independent of dms2iceberg.

For a few generated scenarios, write the *expected* rows into an Iceberg table with PyIceberg
(types from the .meta.json), then run check_readers against it: it must pass; after a one-row
change to the table it must fail and name the row. Also runs probe_position_deletes (position
deletes with file:// paths must be honoured by both readers).

  python3 tests/support/readers_selftest.py [--keep DIR]
"""
from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import shutil
import subprocess
import sys
import tempfile
from contextlib import redirect_stdout
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import check_readers  # noqa: E402
import dmsgen  # noqa: E402
import jsoncmp  # noqa: E402


def arrow_schema(types: dict, pk: list):
    import pyarrow as pa
    fields = []
    for name, ty in types.items():
        if ty.startswith("decimal"):
            p, s = ty[len("decimal("):-1].split(",")
            at = pa.decimal128(int(p), int(s))
        else:
            at = {"int": pa.int32(), "long": pa.int64(), "float": pa.float32(), "double": pa.float64(),
                  "boolean": pa.bool_(), "string": pa.string(), "binary": pa.binary(), "date": pa.date32(),
                  "time": pa.time64("us"), "timestamp": pa.timestamp("us"),
                  "timestamptz": pa.timestamp("us", tz="UTC")}[ty]
        fields.append(pa.field(name, at, nullable=name not in pk))
    return pa.schema(fields)


def from_json(v, ty):
    if v is None:
        return None
    if ty.startswith("decimal"):
        return Decimal(v)
    if ty == "timestamp":
        return dt.datetime.strptime(v, "%Y-%m-%d %H:%M:%S.%f")
    if ty == "date":
        return dt.date.fromisoformat(v)
    if ty == "time":
        return dt.datetime.strptime(v, "%H:%M:%S.%f").time()
    if ty == "binary":
        return bytes.fromhex(v)
    return v


def write_reference(wh: Path, table: str, rows: list, meta: dict):
    import pyarrow as pa
    from pyiceberg.catalog.sql import SqlCatalog
    wh.mkdir(parents=True, exist_ok=True)
    cat = SqlCatalog("default", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    ns = table.rsplit(".", 1)[0]
    if (ns,) not in cat.list_namespaces():
        cat.create_namespace(ns)
    types = meta["columns"]
    schema = arrow_schema(types, meta["primary_key"])
    t = cat.create_table(table, schema=schema)
    cols = {n: [from_json(r.get(n), ty) for r in rows] for n, ty in types.items()}
    t.append(pa.Table.from_pydict(cols, schema=schema))
    return cat.load_table(table)


def run_check(wh, table, expected_path, snapshot=None) -> tuple[int, str]:
    buf = io.StringIO()
    argv = ["--warehouse", str(wh), "--table", table, "--expected", str(expected_path)]
    if snapshot is not None:
        argv += ["--snapshot-id", str(snapshot)]
    with redirect_stdout(buf):
        rc = check_readers.main(argv)
    return rc, buf.getvalue()


CASES = [
    ("product", ["product"]),
    ("parquet-types", ["synthetic", "--format", "parquet", "--rows", "60", "--cdc-files", "2", "--cdc-rows", "40",
                       "--timestamp-column", "dms_ts", "--change-seq-column", "AR_H_CHANGE_SEQ",
                       "--add-column-at-file", "2"]),
    ("csv-nasty", ["synthetic", "--rows", "80", "--cdc-files", "2", "--cdc-rows", "40", "--nasty-ratio", "1",
                   "--null-value", "NULL"]),
]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep")
    a = ap.parse_args()
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="readers-selftest-"))
    if a.keep and base.exists():
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    passed = failed = 0

    def check(name, cond, msg=""):
        nonlocal passed, failed
        if cond:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: {msg}")

    for name, args in CASES:
        out = base / name
        meta = dmsgen.generate_args(args + ["--out", str(out)])
        table = meta["table"]
        exp = out / "expected" / f"{table}.jsonl"
        rows = jsoncmp.read_jsonl(exp)
        wh = out / "wh"
        t = write_reference(wh, table, rows, meta)
        first_snapshot = t.current_snapshot().snapshot_id
        rc, text = run_check(wh, table, exp)
        check(name, rc == 0, "check_readers failed on a correct table:\n" + text)
        # change one row: both readers must report it
        pk = meta["primary_key"][0]
        victim = rows[len(rows) // 2]
        t.delete(f"{pk} = {victim[pk]}")
        rc, text = run_check(wh, table, exp)
        check(name, rc == 1 and text.count("row(s) missing from actual") == 2 and str(victim[pk]) in text,
              "a deleted row was not reported by both readers:\n" + text)
        # time travel to the first snapshot: equal again
        rc, text = run_check(wh, table, exp, snapshot=first_snapshot)
        check(name, rc == 0, "snapshot-id read failed:\n" + text)
        print(f"readers selftest {name}: {'ok' if not failed else 'FAILED'}")

    probe = subprocess.run([sys.executable, str(HERE / "probe_position_deletes.py"), "--dir", str(base / "posdel")],
                           capture_output=True, text=True)
    print("readers selftest position-deletes (file:// paths): " + ("ok" if probe.returncode == 0 else "FAILED"))
    check("position-deletes", probe.returncode == 0, probe.stdout + probe.stderr)
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    print(f"readers selftest: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
