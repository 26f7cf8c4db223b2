#!/usr/bin/env python3
"""dmsgen: write what an AWS DMS S3-target task writes, plus the expected Iceberg table.

Written from the project's format notes (shared/docs/dms-format.md) only.

  python3 tests/support/dmsgen.py product   --out DIR [options]
  python3 tests/support/dmsgen.py synthetic --out DIR [--rows N --cdc-files K --cdc-rows M ...] [options]
  python3 tests/support/dmsgen.py selfcheck [--keep DIR]

Output under DIR (several runs into the same DIR add tables; config.toml is merged):
  dms/<schema>/<table>/[YYYY/MM/DD/]LOAD00000001.csv | 20220302-1134010000.csv[.gz] | .parquet
  pending/dms/...                  files held back (--pending-from-file, --corrupt): a test moves
                                   them into dms/ for a second ingest run
  expected/<ns>.<table>.jsonl      final table state (JSON contract, sorted by primary key),
                                   from applying every valid file, pending ones included
  expected/<ns>.<table>.initial.jsonl   state after the non-pending files only (if any pending)
  expected/<ns>.<table>.asof.json  [{"after_file": "<path under dms/>", "pending": bool, "rows": [...]}]
                                   state after each file, in apply order (small scenarios / --asof)
  expected/<ns>.<table>.meta.json  table name, primary key, column types, files in apply order
  expected/<ns>.<table>.corrupt.json    with --corrupt: which file/line/column is bad
  config.toml                      dms2iceberg --config for all tables generated into DIR
  (--events DIR2) one S3 ObjectCreated:Put event JSON per object, in upload order

The expected state comes from a tiny model: apply every change in source order to a dict keyed by
primary key; D removes; a U whose before-image key differs from its key removes the old key.
The `selfcheck` subcommand re-reads generated trees with the csv module / pyarrow (independent of
the model) and checks that applying them gives the same states.
"""
from __future__ import annotations

import argparse
import base64
import csv
import datetime as dt
import gzip
import hashlib
import io
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import urllib.parse
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import jsoncmp  # noqa: E402

TS_FMT = "%Y-%m-%d %H:%M:%S.%f"

# --------------------------------------------------------------------------------------------
# Types
# Generator column types are DMS/Parquet physical types; iceberg_type() is the table type the
# JSON contract uses (unsigned ints widened: uint8/16 -> int, uint32 -> long, uint64 -> decimal(20,0)).

ICEBERG_OF = {
    "int8": "int", "int16": "int", "int32": "int", "int64": "long",
    "uint8": "int", "uint16": "int", "uint32": "long", "uint64": "decimal(20,0)",
    "float32": "float", "float64": "double", "string": "string", "binary": "binary",
    "bool": "boolean", "date": "date", "time": "string", "timestamp": "timestamp",
    # --dms-types (CSV): a zip code (digits, leading zeros in change files) and DMS doubles,
    # written as DMS writes REAL8: `+5.0656025000000000e+05`.
    "zip": "string", "dmsdouble": "double",
}


def decimal_scale(ty: str) -> int:
    m = re.fullmatch(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)", ty)
    assert m, ty
    return int(m.group(2))


def iceberg_type(ty: str) -> str:
    return ty if ty.startswith("decimal") else ICEBERG_OF[ty]


def csv_inferred_type(ty: str) -> str:
    """The type the contract's CSV inference gives a column generated with type `ty`."""
    if ty.startswith("decimal"):
        return f"decimal(38,{decimal_scale(ty)})"
    if ty.startswith(("int", "uint")):
        return "long"
    return {"timestamp": "timestamp", "date": "date", "bool": "boolean", "dmsdouble": "double",
            "zip": "long"}.get(ty, "string")


def json_value(v, ity: str):
    """Python value -> JSON contract value for Iceberg type `ity`."""
    if v is None:
        return None
    if isinstance(v, dt.time):  # DMS TIME, stored per time_type (default: text)
        if ity == "long":
            return ((v.hour * 60 + v.minute) * 60 + v.second) * 1_000_000 + v.microsecond
        return v.strftime("%H:%M:%S.%f")
    if ity in ("int", "long"):
        return int(v)
    if ity.startswith("decimal"):
        return format(Decimal(v), f".{decimal_scale(ity)}f")
    if ity in ("float", "double"):
        return float(v)
    if ity == "boolean":
        return bool(v)
    if ity == "date":
        return v.isoformat()
    if ity == "time":
        return v.strftime("%H:%M:%S.%f")
    if ity == "timestamp":
        return v.strftime(TS_FMT)
    if ity == "binary":
        return bytes(v).hex()
    return str(v)


def csv_text(v, ty: str) -> str:
    """Python value -> the text DMS writes in a CSV field (None handled by the caller)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if ty.startswith("decimal"):
        return format(Decimal(v), f".{decimal_scale(ty)}f")
    if ty == "dmsdouble":
        return f"{v:+.16e}"
    if isinstance(v, dt.datetime):
        return v.strftime(TS_FMT)
    if isinstance(v, dt.date):
        return v.isoformat()
    if isinstance(v, dt.time):
        return v.strftime("%H:%M:%S.%f")
    if isinstance(v, bytes):
        return v.hex()
    return str(v)


# --------------------------------------------------------------------------------------------
# Table model


@dataclass
class Col:
    name: str
    ty: str


@dataclass
class Change:
    op: str  # I / U / D
    row: dict  # full row image (after image for I/U, before image for D)
    ts: dt.datetime  # commit timestamp (load time for full load)
    old_key: tuple | None = None  # U that changed the primary key: the key before
    seq: str | None = None  # AR_H_CHANGE_SEQ-like (None in full load)
    prev: dict | None = None  # U: the row before it (what the source did not change)


@dataclass
class DFile:
    kind: str  # "load" | "cdc"
    stem: str  # LOAD00000001 / 20220302-1134010000
    time: dt.datetime
    changes: list
    cols: list  # table columns in this file's order
    pending: bool = False
    corrupt: str | None = None
    relpath: str = ""  # under dms/, set when written


@dataclass
class Table:
    schema: str
    name: str
    cols: list
    pk: list
    files: list = field(default_factory=list)

    def key(self, row: dict) -> tuple:
        return tuple(row[k] for k in self.pk)


def cdc_stem(t: dt.datetime) -> str:
    return t.strftime("%Y%m%d-%H%M%S") + f"{t.microsecond // 1000:03d}0"


def load_stem(n: int) -> str:
    return f"LOAD{n:08X}"


def trunc_ts(t: dt.datetime, unit: str) -> dt.datetime:
    return t.replace(microsecond=(t.microsecond // 1000) * 1000) if unit == "ms" else t


# --------------------------------------------------------------------------------------------
# Scenarios


def scenario_product(a, rng: random.Random) -> Table:
    T = dt.datetime
    cols = [Col("product_id", "int64"), Col("category", "string"), Col("product_name", "string"),
            Col("quantity_available", "int32"), Col("last_update_time", "timestamp")]
    names = [c.name for c in cols]
    t_load, t1, t2 = T(2022, 3, 2, 11, 30, 1), T(2022, 3, 2, 11, 34, 1), T(2022, 3, 2, 11, 35, 1)
    items = [(100, "Smartphone", "Apple iPhone 12", 30), (101, "Smartphone", "Samsung Galaxy S21", 25),
             (102, "Laptop", "Dell XPS 13", 18), (103, "Laptop", "Lenovo ThinkPad X1", 12),
             (104, "Tablet", "Samsung Galaxy Tab S7", 20), (105, "Headphones", "Sony WH-1000XM4", 50)]

    def row(*v):
        return dict(zip(names, v))

    load = [Change("I", row(*it, t_load), t_load) for it in items]
    f1 = [Change("U", row(102, "Laptop", "Dell XPS 13", 16, t1), t1),
          Change("I", row(106, "Tablet", "Apple iPad Air", 40, t1), t1)]
    f2 = [Change("U", row(102, "Laptop", "Dell XPS 13", 11, t2), t2),
          Change("D", row(103, "Laptop", "Lenovo ThinkPad X1", 12, t_load), t2)]
    tb = Table(a.schema or "sales", a.table or "product", cols, ["product_id"])
    tb.files = [DFile("load", "LOAD00000001", t_load, load, list(cols)),
                DFile("cdc", "20220302-1134010000", t1, f1, list(cols)),
                DFile("cdc", "20220302-1135010000", t2, f2, list(cols))]
    return tb


STATUSES = ["NEW", "PAID", "SHIPPED", "DELIVERED", "CANCELLED", "RETURNED"]
WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliet"]


def make_note(rng: random.Random, a) -> str | None:
    null_token = a.null_value if a.null_value is not None else ""
    delim = a.delimiter
    plain = f"{rng.choice(WORDS)} {rng.choice(WORDS)} {rng.randint(1, 999)}"
    if rng.random() >= a.nasty_ratio:
        return plain if rng.random() > 0.08 else None
    kinds = [
        lambda: None,
        lambda: f"{plain}, with a comma",
        lambda: f'he said "hi" about {plain}',
        lambda: f"line one\nline two {plain}",
        lambda: f"crlf one\r\ncrlf two {plain}",
        lambda: f"Crème brûlée – 東京 🚀 naïve {plain}",
        lambda: f"  padded {plain}  ",
        lambda: f" leading {plain}",
        lambda: f"trailing {plain} ",
        lambda: "NULL",
        lambda: "null",
        lambda: "",
        lambda: f"has delimiter {delim} inside {plain}",
        lambda: '"fully quoted"',
        lambda: f'mix "q", comma\nnew line\r\nand ünïcode {delim} end',
        lambda: "\\N",
        lambda: f"tab\there {plain}",
        lambda: '""',
        lambda: ",",
        lambda: "\n",
    ]
    while True:
        v = rng.choice(kinds)()
        if v is not None and v == null_token:
            continue  # a string equal to the null token is ambiguous in DMS CSV: never generate it
        return v


class KeySet:
    """Set with O(1) random choice and removal."""

    def __init__(self):
        self.items, self.pos = [], {}

    def add(self, k):
        if k not in self.pos:
            self.pos[k] = len(self.items)
            self.items.append(k)

    def remove(self, k):
        i = self.pos.pop(k)
        last = self.items.pop()
        if i < len(self.items):
            self.items[i] = last
            self.pos[last] = i

    def choice(self, rng):
        return self.items[rng.randrange(len(self.items))]

    def __len__(self):
        return len(self.items)

    def __contains__(self, k):
        return k in self.pos


def scenario_synthetic(a, rng: random.Random) -> Table:
    parquet = a.format == "parquet"
    unit = a.timestamp_unit
    cols = [Col("order_id", "int64"), Col("customer_id", "int32"), Col("status", "string"),
            Col("amount", "decimal(12,2)"), Col("note", "string"), Col("version", "int64"),
            Col("updated_at", "timestamp")]
    if parquet:
        cols += [Col("tiny", "uint8"), Col("qty", "uint16"), Col("u32", "uint32"), Col("big", "uint64"),
                 Col("small", "int8"), Col("mid", "int16"), Col("flag", "bool"), Col("ship_date", "date"),
                 Col("ship_time", "time"), Col("weight", "float32"), Col("rating", "float64"),
                 Col("payload", "binary")]
    if a.dms_types:
        cols += [Col("zip", "zip"), Col("weight", "dmsdouble"), Col("units", "dmsdouble")]
    if a.dms_prices:
        cols += [Col("price", "dmsdouble")]
    t0 = dt.datetime(2022, 3, 2, 23, 30, 0)
    interval = dt.timedelta(seconds=a.file_interval)

    def dms_values(r: dict, in_load: bool):
        if a.dms_prices:
            # Cents as a DMS double (REAL8): most are not exact in binary (0.99 is written
            # `+9.8999999999999999e-01`).
            r["price"] = None if rng.random() < 0.05 else rng.choice(
                [0.99, 19.99, 0.07, 0.1, 0.3, rng.randint(0, 10**7) / 100])
        if not a.dms_types:
            return
        # The full load has no zip code with a leading zero: inference alone would make the
        # column a long, and the first change file with `01307` must not become 1307.
        z = rng.randint(10000 if in_load else 0, 99999)
        r["zip"] = f"{z:05d}" if in_load or rng.random() < 0.5 else f"0{rng.randint(0, 9999):04d}"
        r["weight"] = None if rng.random() < 0.1 else rng.randint(-4_000_000, 4_000_000) / 4
        r["units"] = float(rng.choice([0, 1, 42, 506560, 2**40, -7, rng.randint(-10**12, 10**12)]))

    def extras(r: dict):
        if not parquet:
            return
        r["tiny"] = rng.choice([0, 1, 127, 128, 255, rng.randint(0, 255)])
        r["qty"] = rng.choice([0, 32768, 65535, rng.randint(0, 65535)])
        r["u32"] = rng.choice([0, 2**31, 2**32 - 1, rng.randint(0, 2**32 - 1)])
        r["big"] = rng.choice([0, 2**63 - 1, 2**63, 2**64 - 1, rng.randint(0, 2**64 - 1)])
        r["small"] = rng.choice([-128, 0, 127, rng.randint(-128, 127)])
        r["mid"] = rng.choice([-32768, 32767, rng.randint(-32768, 32767)])
        r["flag"] = rng.choice([True, False, None])
        r["ship_date"] = dt.date(2022, 3, 1) + dt.timedelta(days=rng.randint(-800, 800))
        r["ship_time"] = dt.time(rng.randint(0, 23), rng.randint(0, 59), rng.randint(0, 59),
                                 rng.randint(0, 999) * 1000)
        r["weight"] = rng.randint(-4000, 4000) / 4
        r["rating"] = None if rng.random() < 0.1 else rng.randint(0, 80) / 8
        r["payload"] = None if rng.random() < 0.1 else bytes(rng.randrange(256) for _ in range(rng.randint(0, 8)))

    def amount():
        return None if rng.random() < 0.05 else (Decimal(rng.randint(0, 99_999_999)) / 100).quantize(Decimal("0.01"))

    def new_row(key, ts, first=False, in_load=False):
        r = {"order_id": key, "customer_id": rng.randint(1, 99_999), "status": rng.choice(STATUSES),
             "amount": amount(), "note": make_note(rng, a), "version": 1, "updated_at": trunc_ts(ts, unit)}
        if first:  # anchor type inference on the first row
            r["amount"], r["note"] = Decimal("12.50"), "first order"
        extras(r)
        dms_values(r, in_load)
        return r

    live: dict = {}
    last_version: dict = {}
    keys = KeySet()
    dead: list = []
    next_key = [rng.randint(1000, 2000)]

    def fresh_key():
        next_key[0] += rng.randint(1, 4)
        return next_key[0]

    # full load
    load_changes = []
    for i in range(a.rows):
        k = fresh_key()
        ts = t0 - dt.timedelta(days=rng.randint(0, 30), seconds=rng.randint(0, 86399),
                               microseconds=rng.randint(0, 999_999))
        r = new_row(k, ts, first=(i == 0), in_load=True)
        live[k] = r
        keys.add(k)
        load_changes.append(Change("I", dict(r), t0))
    # A source whose key is not enforced: some keys appear again later in the load, with other
    # values; the last one in DMS order (file order, then row order) is the row.
    if a.load_duplicates:
        for _ in range(int(len(load_changes) * a.load_duplicates)):
            k = keys.choice(rng)
            ts = t0 - dt.timedelta(seconds=rng.randint(0, 86399))
            r = new_row(k, ts, in_load=True)
            live[k] = r
            at = rng.randrange(len(load_changes) + 1)
            # After every earlier row of the key: the expected state keeps the last one.
            last = max(i for i, c in enumerate(load_changes) if c.row["order_id"] == k)
            load_changes.insert(max(at, last + 1), Change("I", dict(r), t0))
    if a.load_order == "shuffled":
        # An unsorted source (a heap table): rows in no key order, a key's rows anywhere
        # (other files included), still in their order.
        places = sorted(rng.random() for _ in load_changes)
        rng.shuffle(places)
        by_key: dict = {}
        for c, p in zip(load_changes, places):
            by_key.setdefault(c.row["order_id"], []).append(p)
        for ps in by_key.values():
            ps.sort()
        placed = [(by_key[c.row["order_id"]].pop(0), i) for i, c in enumerate(load_changes)]
        load_changes = [load_changes[i] for _, i in sorted(placed)]
    else:
        # Unloaded in key order: a key's rows together, in their order.
        load_changes.sort(key=lambda c: c.row["order_id"])
    tb = Table(a.schema or "shop", a.table or "orders", cols, ["order_id"])
    nload = max(1, a.load_files)
    per = max(1, -(-len(load_changes) // nload))
    for i in range(nload):
        tb.files.append(DFile("load", load_stem(i + 1), t0, load_changes[i * per:(i + 1) * per], list(cols)))

    start = t0
    max_step = max(1, int(interval / dt.timedelta(microseconds=1)) // max(1, a.cdc_rows))
    for _ in range(a.cdc_files):
        ts = start + dt.timedelta(microseconds=rng.randint(1, max_step))
        touched: list = []
        changes = []
        for _m in range(a.cdc_rows):
            if changes and rng.random() < 0.6:  # else: same transaction, same commit timestamp
                ts += dt.timedelta(microseconds=rng.randint(1, max_step))
            r = rng.random()
            if len(keys) and r < a.update_ratio:
                op = "U"
            elif len(keys) and r < a.update_ratio + a.delete_ratio:
                op = "D"
            else:
                op = "I"
            if op in "UD":
                hot = [k for k in touched[-8:] if k in keys]
                k = rng.choice(hot) if hot and rng.random() < 0.4 else keys.choice(rng)
            if op == "I":
                if dead and rng.random() < 0.3:
                    k = dead.pop(rng.randrange(len(dead)))  # re-insert a deleted key
                else:
                    k = fresh_key()
                row = new_row(k, ts)
                if a.ordering_column == "version" and k in last_version:
                    # A re-inserted key goes on counting: `version` orders its changes.
                    row["version"] = last_version[k] + 1
                live[k] = row
                keys.add(k)
                changes.append(Change("I", dict(row), ts))
            elif op == "D":
                row = live.pop(k)
                last_version[k] = row["version"]
                keys.remove(k)
                dead.append(k)
                changes.append(Change("D", dict(row), ts))
            else:
                prev = dict(live[k])
                row = dict(live[k])
                if a.partition_move and rng.random() < 0.6:
                    row["status"] = rng.choice([s for s in STATUSES if s != row["status"]])
                elif rng.random() < 0.5:
                    row["status"] = rng.choice(STATUSES)
                if rng.random() < 0.7:
                    row["amount"] = amount()
                if rng.random() < 0.7:
                    row["note"] = make_note(rng, a)
                row["version"] += 1
                row["updated_at"] = trunc_ts(ts, unit)
                if parquet and rng.random() < 0.5:
                    extras(row)
                if a.dms_types and rng.random() < 0.5:
                    dms_values(row, False)
                old = None
                if a.pk_update_ratio and rng.random() < a.pk_update_ratio:
                    nk = dead.pop(rng.randrange(len(dead))) if dead and rng.random() < 0.3 else fresh_key()
                    old = (k,)
                    del live[k]
                    keys.remove(k)
                    dead.append(k)
                    row["order_id"] = nk
                    k = nk
                    keys.add(k)
                live[k] = row
                changes.append(Change("U", dict(row), ts, old_key=old, prev=prev))
            touched.append(k)
        ftime = start + interval
        ftime = ftime.replace(microsecond=rng.randint(0, 999) * 1000)
        tb.files.append(DFile("cdc", cdc_stem(ftime), ftime, changes, list(cols)))
        start = ftime
    tb._gen_final = live  # for an internal consistency check
    return tb


def scenario_events(a, rng: random.Random) -> Table:
    """A keyless log table (`mode = "append"`): rows are only ever inserted; `order_id` repeats
    (it is no key) and whole rows may repeat too, as in an audit table. `event_id` is unique,
    for comparing tables only: the config names no key."""
    cols = [Col("event_id", "int64"), Col("order_id", "int64"), Col("kind", "string"),
            Col("note", "string"), Col("created_at", "timestamp")]
    t0 = dt.datetime(2022, 3, 2, 23, 30, 0)
    seq = iter(range(1, 10**9))
    made: list = []

    def row(ts):
        if made and rng.random() < 0.1:
            # The same event logged twice: a repeated row (but for its event id).
            r = dict(rng.choice(made), event_id=next(seq))
        else:
            r = {"event_id": next(seq), "order_id": rng.randint(1, max(2, a.rows // 3)),
                 "kind": rng.choice(STATUSES), "note": make_note(rng, a),
                 "created_at": ts.replace(microsecond=rng.randint(0, 999) * 1000)}
        made.append(r)
        return r

    tb = Table(a.schema or "audit", a.table or "events", cols, ["event_id"])
    tb.files = [DFile("load", load_stem(1), t0, [Change("I", row(t0), t0) for _ in range(a.rows)],
                      list(cols))]
    for i in range(a.cdc_files):
        t = t0 + dt.timedelta(seconds=a.file_interval * (i + 1))
        tb.files.append(DFile("cdc", cdc_stem(t), t,
                              [Change("I", row(t), t) for _ in range(a.cdc_rows)], list(cols)))
    return tb


SCENARIOS = {"product": scenario_product, "synthetic": scenario_synthetic, "events": scenario_events}

# --------------------------------------------------------------------------------------------
# Transforms


def apply_change(state: dict, tb: Table, ch: Change, extra: dict | None = None):
    """The model: one change applied to {key: row}."""
    key = tb.key(ch.row)
    if ch.op == "D":
        state.pop(key, None)
        return
    if ch.op == "U" and ch.old_key is not None and ch.old_key != key:
        state.pop(ch.old_key, None)
    row = dict(ch.row)
    if extra:
        row.update(extra)
    state[key] = row


def cache_first_changes(tb: Table, a):
    """Changes DMS cached during the full load: the first change file's commit timestamps lie
    before the load's (DMS stamps full-load rows with the transfer time). Full-load rows still
    come first: the model is unchanged."""
    cdc = [f for f in tb.files if f.kind == "cdc"]
    load_time = max(ch.ts for f in tb.files if f.kind == "load" for ch in f.changes)
    shift = max(ch.ts for ch in cdc[0].changes) - load_time + dt.timedelta(hours=1)
    for ch in cdc[0].changes:
        ch.ts -= shift
    assert all(ch.ts < load_time for ch in cdc[0].changes)


def delay_changes(tb: Table, a, rng: random.Random) -> int:
    """Moves a share of updates into a change file one or two files later, keeping their values
    (so their ordering column is older than changes the table applied in between). Only updates
    whose key is never deleted or re-keyed afterwards and whose later changes all have a greater
    ordering value are moved: those must end exactly as in source order (the oldest change is
    never applied over a newer row). Returns how many were moved."""
    col = a.ordering_column
    cdc = [f for f in tb.files if f.kind == "cdc"]
    seq = [(fi, ci, ch) for fi, f in enumerate(cdc) for ci, ch in enumerate(f.changes)]
    later: dict = {}  # key -> changes after each position, built backwards
    moves = []
    for fi, ci, ch in reversed(seq):
        k = tb.key(ch.row)
        after = later.get(k, [])
        if (ch.op == "U" and ch.old_key is None and fi + 1 < len(cdc) and rng.random() < a.delay_changes
                and ch.row.get(col) is not None
                and all(c.op != "D" and c.row.get(col) is not None and c.row[col] > ch.row[col]
                        for c in after)
                and not any(c.old_key == k for c in after)):
            moves.append((fi, ci, min(len(cdc) - 1, fi + 1 + rng.randint(0, 1))))
        later[k] = [ch] + after
        if ch.old_key is not None:
            later[ch.old_key] = [ch] + later.get(ch.old_key, [])
    # Take every moved change out first (positions refer to the files as generated), then
    # put each into its later file.
    taken = [(to, cdc[fi].changes[ci]) for fi, ci, to in moves]
    for fi, ci, _to in sorted(moves, key=lambda m: (m[0], -m[1])):
        cdc[fi].changes.pop(ci)
    for to, ch in taken:
        cdc[to].changes.insert(rng.randint(0, len(cdc[to].changes)), ch)
    return len(taken)


def add_column(tb: Table, a, rng: random.Random):
    newc = Col(a.new_column, "string")
    state: dict = {}
    cdc_n = 0
    for f in tb.files:
        if f.kind == "cdc":
            cdc_n += 1
        active = f.kind == "cdc" and cdc_n >= a.add_column_at_file
        if active:
            order = tb.cols + [newc]
            shuffled = list(order)
            while len(shuffled) > 1 and [c.name for c in shuffled] == [c.name for c in order]:
                rng.shuffle(shuffled)
            f.cols = shuffled
        for ch in f.changes:
            if active:
                if ch.op == "D":
                    ch.row[newc.name] = state.get(tb.key(ch.row), {}).get(newc.name)
                else:
                    ch.row[newc.name] = rng.choice(["web", "store", "phone, fax", "app", None])
            apply_change(state, tb, ch)
    if cdc_n < a.add_column_at_file:
        raise SystemExit(f"--add-column-at-file {a.add_column_at_file}: only {cdc_n} change files")
    tb.cols = tb.cols + [newc]


def assign_seq(tb: Table, rng: random.Random):
    counter = rng.randint(10**12, 10**13)
    for f in tb.files:
        if f.kind != "cdc":
            continue
        for ch in f.changes:
            counter += rng.randint(1, 3)
            ch.seq = ch.ts.strftime("%Y%m%d%H%M%S") + f"{ch.ts.microsecond // 10000:02d}" + f"{counter:019d}"
            assert len(ch.seq) == 35


def make_corrupt_file(tb: Table, a, state: dict, rng: random.Random) -> DFile:
    """One extra change file after the last one, holding valid rows and one bad row."""
    last = tb.files[-1]
    t = last.time + dt.timedelta(minutes=1)
    live = [state[k] for k in sorted(state)]
    if not live:
        raise SystemExit("--corrupt needs a non-empty table")
    changes = []
    for i in range(40):
        row = dict(live[i % len(live)])
        for c in tb.cols:  # keep every record on one physical line so line numbers are exact
            if c.ty == "string" and isinstance(row.get(c.name), str):
                row[c.name] = "plain"
        ts = t - dt.timedelta(seconds=30) + dt.timedelta(microseconds=i)
        changes.append(Change("U", row, ts, seq=None))
    if a.change_seq_column:
        base = int(max(ch.seq for f in tb.files for ch in f.changes if ch.seq)[16:])
        for i, ch in enumerate(changes):
            ch.seq = ch.ts.strftime("%Y%m%d%H%M%S") + f"{ch.ts.microsecond // 10000:02d}" + f"{base + i + 1:019d}"
    return DFile("cdc", cdc_stem(t), t, changes, list(last.cols), pending=True, corrupt=a.corrupt)


def corrupt_column(tb: Table) -> Col:
    for c in tb.cols:
        if c.name == "version":
            return c
    for c in tb.cols:
        if c.name not in tb.pk and c.ty.startswith("int"):
            return c
    raise SystemExit("no integer column to corrupt")


BAD_RECORD = 36  # 1-based data record index of the bad row in a corrupt CSV file

# --------------------------------------------------------------------------------------------
# Rendering


def layout(tb: Table, f: DFile, a):
    """[(header name, kind, Col)] in file order: [Op] [ts] columns [BI_*] [change seq]."""
    out = []
    # CdcInsertsOnly with IncludeOpForFullLoad=false: no Op field in either kind of file.
    no_op = a.no_op_in_load and (f.kind == "load" or a.cdc_inserts_only)
    if not no_op:
        out.append(("Op", "op", Col("Op", "string")))
    if a.timestamp_column:
        out.append((a.timestamp_column, "ts", Col(a.timestamp_column, "string")))
    for c in f.cols:
        out.append((c.name, "col", c))
    if a.before_image:
        pkcols = {c.name: c for c in tb.cols}
        for k in tb.pk:
            bi = Col(a.before_image_prefix + k, pkcols[k].ty)
            bi.bi_of = k
            out.append((bi.name, "bi", bi))
    if a.change_seq_column:
        out.append((a.change_seq_column, "seq", Col(a.change_seq_column, "string")))
    return out


def row_values(tb: Table, f: DFile, ch: Change, lay):
    out = []
    for name, kind, c in lay:
        if kind == "op":
            out.append(ch.op)
        elif kind == "ts":
            out.append(ch.ts.strftime(TS_FMT))
        elif kind == "col":
            out.append(ch.row.get(c.name))
        elif kind == "bi":
            k = c.bi_of
            if f.kind == "load" or ch.op == "I":
                out.append(None)
            elif ch.op == "U" and ch.old_key is not None:
                out.append(ch.old_key[tb.pk.index(k)])
            else:
                out.append(ch.row[k])
        elif kind == "seq":
            out.append(ch.seq)
    return out


def shuffled_changes(f: DFile, a, rng: random.Random) -> list:
    ch = list(f.changes)
    if not a.shuffle_rows or f.kind != "cdc":
        return ch
    if a.change_seq_column:
        rng.shuffle(ch)
        return ch
    # Only a commit timestamp: rows with equal timestamps keep their relative order (the row
    # index is the tie-breaker), rows with different timestamps are put in random order.
    perm = list(range(len(ch)))
    rng.shuffle(perm)
    slots: dict = {}
    for pos, i in enumerate(perm):
        slots.setdefault(ch[i].ts, []).append(pos)
    out = [None] * len(ch)
    groups: dict = {}
    for c in ch:
        groups.setdefault(c.ts, []).append(c)
    for ts, members in groups.items():
        for pos, c in zip(sorted(slots[ts]), members):
            out[pos] = c
    return out


def csv_field(text: str | None, delim: str, null_token: str) -> str:
    if text is None:
        return null_token
    if '"' in text or delim in text or "\n" in text or "\r" in text:
        return '"' + text.replace('"', '""') + '"'
    return text


def render_csv(tb, f, a, changes, lay, bad=None, txn=False) -> tuple[bytes, dict]:
    """A DMS CSV file; `txn`: rows of a CDC_TXN file (`op,TABLE,SCHEMA,field…`, no header)."""
    null_token = a.null_value if a.null_value is not None else ""
    d = a.delimiter
    lines = []
    if not a.no_header and not txn:
        lines.append(d.join(csv_field(n, d, null_token) for n, _k, _c in lay))
    info = {}
    # UseCsvNoSupValue: a column an update did not change, as a source that logs only changed
    # columns has DMS write it (its own random stream: the rest of the tree does not change).
    nosup = random.Random(f"{a.seed}/{f.stem}") if a.no_sup_value is not None else None
    for i, ch in enumerate(changes, 1):
        vals = row_values(tb, f, ch, lay)
        texts = [None if v is None else (v if k in ("op", "ts", "seq") else csv_text(v, c.ty))
                 for v, (_n, k, c) in zip(vals, lay)]
        if nosup and ch.op == "U" and ch.prev is not None and ch.old_key is None:
            for j, (name, kind, c) in enumerate(lay):
                if (kind == "col" and name not in tb.pk and name != a.ordering_column
                        and ch.prev.get(name) == ch.row.get(name) and nosup.random() < 0.7):
                    texts[j] = a.no_sup_value
        if bad and i == BAD_RECORD:
            kind, col = bad
            if kind == "column-count":
                texts.append("extra")
            elif kind == "unknown-op":
                texts[0] = "X"
            elif kind == "bad-number":
                idx = [n for n, _k, _c in lay].index(col)
                texts[idx] = "12x4"
            info = {"record": i, "line": i + (0 if a.no_header else 1)}
        if txn:
            texts[1:1] = [tb.name, tb.schema]
        lines.append(d.join(csv_field(t, d, null_token) for t in texts))
    # The line each record starts on (a quoted field may hold line breaks: CRLF, LF or CR).
    starts, line = [], 1
    for k, text in enumerate(lines):
        if k > 0 or a.no_header or txn:
            starts.append(line)
        line += len(re.findall(r"\r\n|\r|\n", text)) + 1
    info["record_lines"] = starts
    return ("\n".join(lines) + "\n").encode("utf-8"), info


def arrow_type(ty: str, a):
    import pyarrow as pa
    if ty.startswith("decimal"):
        m = re.fullmatch(r"decimal\((\d+),(\d+)\)", ty)
        return pa.decimal128(int(m.group(1)), int(m.group(2)))
    return {
        "int8": pa.int8(), "int16": pa.int16(), "int32": pa.int32(), "int64": pa.int64(),
        "uint8": pa.uint8(), "uint16": pa.uint16(), "uint32": pa.uint32(), "uint64": pa.uint64(),
        "float32": pa.float32(), "float64": pa.float64(), "string": pa.string(), "binary": pa.binary(),
        "bool": pa.bool_(), "date": pa.date32(), "time": pa.time32("ms"),
        "timestamp": pa.timestamp(a.timestamp_unit),
    }[ty]


def render_parquet(tb, f, a, changes, lay, bad=None) -> tuple[bytes, dict]:
    import pyarrow as pa
    import pyarrow.parquet as pq
    rows = [row_values(tb, f, ch, lay) for ch in changes]
    arrays, fields = [], []
    for j, (name, kind, c) in enumerate(lay):
        vals = [r[j] for r in rows]
        ty = pa.string() if kind in ("op", "ts", "seq") else arrow_type(c.ty, a)
        if bad and bad[0] == "long-to-string" and name == bad[1]:
            ty = pa.string()
            vals = [None if v is None else f"v{v}" for v in vals]
        fields.append(pa.field(name, ty))
        arrays.append(pa.array(vals, type=ty))
    table = pa.Table.from_arrays(arrays, schema=pa.schema(fields))
    buf = io.BytesIO()
    pq.write_table(table, buf, version=a.parquet_version, compression="gzip" if a.gzip else "none",
                   row_group_size=a.row_group_size, use_dictionary=True, write_statistics=True)
    return buf.getvalue(), ({"column": bad[1]} if bad else {})


# --------------------------------------------------------------------------------------------
# Output


def write_config(out: Path, entry_name: str, entry: dict, defaults: dict | None = None,
                 source: dict | None = None):
    """Merge this table's section into DIR/.dmsgen/tables.json and regenerate DIR/config.toml."""
    store = out / ".dmsgen" / "tables.json"
    store.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(store.read_text()) if store.exists() else {"defaults": {}, "tables": {}}
    data.setdefault("source", {})
    data["tables"][entry_name] = entry
    if defaults:
        data["defaults"].update(defaults)
    if source:
        data["source"].update(source)
    store.write_text(json.dumps(data, indent=1))

    def tv(v):
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return repr(v)
        if isinstance(v, str):
            return json.dumps(v, ensure_ascii=False)
        if isinstance(v, list):
            return "[" + ", ".join(tv(x) for x in v) + "]"
        if isinstance(v, dict):
            return "{ " + ", ".join(f"{k} = {tv(x)}" for k, x in v.items()) + " }"
        raise TypeError(v)

    lines = ["# written by tests/support/dmsgen.py"]
    if data["source"]:
        lines += ["[source]"] + [f"{k} = {tv(v)}" for k, v in data["source"].items()] + [""]
    lines += ["[defaults]"]
    lines += [f"{k} = {tv(v)}" for k, v in data["defaults"].items()]
    for name, e in data["tables"].items():
        lines += ["", f"[tables.{json.dumps(name, ensure_ascii=False)}]"]
        for k, v in e.items():
            if k == "columns":
                lines.append("columns = [")
                lines += [f"  {tv(x)}," for x in v]
                lines.append("]")
            else:
                lines.append(f"{k} = {tv(v)}")
    text = "\n".join(lines) + "\n"
    tomllib.loads(text)  # must parse
    (out / "config.toml").write_text(text, encoding="utf-8")


def s3_event(bucket: str, key: str, size: int, etag: str, when: dt.datetime, seq: int) -> dict:
    return {"Records": [{
        "eventVersion": "2.1", "eventSource": "aws:s3", "awsRegion": "us-east-1",
        "eventTime": when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{when.microsecond // 1000:03d}Z",
        "eventName": "ObjectCreated:Put",
        "userIdentity": {"principalId": "AWS:AROAEXAMPLE:dms-session"},
        "requestParameters": {"sourceIPAddress": "10.0.0.1"},
        "responseElements": {"x-amz-request-id": f"REQ{seq:013d}", "x-amz-id-2": "example"},
        "s3": {
            "s3SchemaVersion": "1.0", "configurationId": "dms2iceberg",
            "bucket": {"name": bucket, "ownerIdentity": {"principalId": "EXAMPLE"},
                       "arn": f"arn:aws:s3:::{bucket}"},
            "object": {"key": urllib.parse.quote_plus(key, safe="/"), "size": size, "eTag": etag,
                       "sequencer": f"{seq:016X}"},
        },
    }]}


def generate(a) -> dict:
    if a.no_header and a.add_column_at_file:
        raise SystemExit("--add-column-at-file needs a header (or Parquet): a headerless file cannot reorder columns")
    if a.pk_update_ratio and not a.before_image:
        raise SystemExit("--pk-update-ratio needs --before-image (without it DMS output cannot show key changes)")
    if a.shuffle_rows and not (a.change_seq_column or a.timestamp_column):
        raise SystemExit("--shuffle-rows needs --change-seq-column or --timestamp-column")
    if a.corrupt == "long-to-string" and a.format != "parquet":
        raise SystemExit("--corrupt long-to-string is a Parquet case")
    if a.corrupt in ("column-count", "unknown-op", "bad-number") and a.format != "csv":
        raise SystemExit(f"--corrupt {a.corrupt} is a CSV case")
    if a.dms_types and (a.format != "csv" or a.no_header or a.scenario != "synthetic"):
        raise SystemExit("--dms-types is a synthetic CSV case with a header")
    if a.mode == "append" and a.scenario != "events":
        raise SystemExit("--mode append is the events scenario (inserts only)")
    if a.no_sup_value is not None and (a.format != "csv" or a.scenario != "synthetic"):
        raise SystemExit("--no-sup-value is a synthetic CSV case (DMS writes the marker in CSV)")
    if a.cdc_path and (a.format != "csv" or a.add_column_at_file or a.gzip or a.corrupt):
        raise SystemExit("--cdc-path: CDC_TXN files are plain CSV, one column list")
    if a.cdc_inserts_only and a.scenario != "events":
        raise SystemExit("--cdc-inserts-only is the events scenario (inserts only)")
    if a.delay_changes and not a.ordering_column:
        raise SystemExit("--delay-changes needs --ordering-column (else DMS order decides)")
    if a.cached_changes and not (a.timestamp_column or a.change_seq_column):
        raise SystemExit("--cached-changes needs --timestamp-column")
    if a.format == "parquet" and (a.delimiter != "," or a.null_value is not None or a.no_header):
        raise SystemExit("--delimiter / --null-value / --no-header are CSV options")
    rng = random.Random(a.seed)
    tb = SCENARIOS[a.scenario](a, rng)
    if a.add_column_at_file:
        add_column(tb, a, rng)
    if a.cached_changes:
        cache_first_changes(tb, a)
    if a.change_seq_column:
        assign_seq(tb, rng)
    ts_col = a.timestamp_column.lower() if a.timestamp_column else None
    seq_col = a.change_seq_column.lower() if a.change_seq_column else None

    # pending: change files from index K (1-based) on are held back
    cdc_n = 0
    for f in tb.files:
        if f.kind == "cdc":
            cdc_n += 1
            if a.pending_from_file and cdc_n >= a.pending_from_file:
                f.pending = True

    # the model: state after each file, in apply order
    state: dict = {}
    states = []
    for f in tb.files:
        for ch in f.changes:
            extra = {}
            if ts_col:
                extra[ts_col] = ch.ts
            if seq_col:
                extra[seq_col] = ch.seq
            apply_change(state, tb, ch, extra)
        states.append((f, {k: dict(v) for k, v in state.items()}))
    if hasattr(tb, "_gen_final"):
        assert set(k[0] for k in state) == set(tb._gen_final), "generator and model disagree"
    if a.delay_changes:
        # The model above applied every change in source order; the files now carry some of
        # them late. States between files are not the model's any more: no as-of steps.
        a.delayed = delay_changes(tb, a, rng)
        a.asof = False
    if a.corrupt and a.corrupt != "no-pk":
        tb.files.append(make_corrupt_file(tb, a, state, rng))

    # column types of the resulting Iceberg table
    if a.format == "parquet":
        types = {c.name.lower(): iceberg_type(c.ty) for c in tb.cols}
    elif a.no_header:
        types = {c.name.lower(): iceberg_type(c.ty) for c in tb.cols}
    else:
        types = {c.name.lower(): csv_inferred_type(c.ty) for c in tb.cols}
    if ts_col:
        types[ts_col] = "timestamp"
    if seq_col:
        types[seq_col] = "string"
    if a.time_type:
        for c in tb.cols:
            if c.ty == "time":
                types[c.name.lower()] = a.time_type
    pins = dict(p.split("=", 1) for p in (a.pin or []))
    for name, ty in pins.items():
        types[name.lower()] = ty
    col_ty = {c.name.lower(): c for c in tb.cols}

    # columns the table has after each file (a column added later is absent before)
    known: list = []
    cols_after = []
    for f, _st in states:
        for c in f.cols:
            if c.name.lower() not in known:
                known.append(c.name.lower())
        cols_after.append([n for n in types if n in known or n in (ts_col, seq_col)])

    def to_json_rows(st: dict, cols: list | None = None) -> list:
        out = []
        for k in sorted(st):
            r = st[k]
            jr = {}
            for name in (cols if cols is not None else types):
                src = next((n for n in r if n.lower() == name), None)
                v = r.get(src) if src else None
                jr[name] = json_value(v, types[name])
            out.append(jr)
        return out

    out = Path(a.out)
    dms_root = out / "dms"
    pend_root = out / "pending" / "dms"
    ext = "parquet" if a.format == "parquet" else "csv"
    prefix = Path(a.bucket_folder) if a.bucket_folder else Path()
    corrupt_info = None
    events = []
    cdc_index = 0
    for f in tb.files:
        lay = layout(tb, f, a)
        changes = shuffled_changes(f, a, rng)
        if a.cdc_path and f.kind == "cdc":
            # PreserveTransactions: the table's changes go to a CDC_TXN file every table shares
            # (named by the k-th change file's slot, so that tables generated into one tree with
            # the same --cdc-files and --file-interval share files); rows appended after those
            # of tables generated before (a transaction order).
            cdc_index += 1
            data, _ = render_csv(tb, f, a, changes, lay, txn=True)
            slot = dt.datetime(2022, 3, 2, 23, 30, 0) + dt.timedelta(seconds=a.file_interval * cdc_index)
            stamp = slot.strftime("%Y%m%d%H%M%S") + f"{slot.microsecond // 1000:03d}"
            rel = (prefix / a.cdc_path / f"CDC_TXN-{stamp}.csv")
            f.relpath = rel.as_posix()
            root = pend_root if f.pending else dms_root
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            with open(root / rel, "ab") as out_f:
                out_f.write(data)
            events.append((f, rel.as_posix(), data))
            continue
        bad = None
        if f.corrupt:
            bad = (f.corrupt, corrupt_column(tb).name)
        if a.format == "parquet":
            data, info = render_parquet(tb, f, a, changes, lay, bad)
            f.rendered = list(zip(changes, range(1, len(changes) + 1)))
        else:
            data, info = render_csv(tb, f, a, changes, lay, bad)
            f.rendered = list(zip(changes, info.pop("record_lines")))
        name = f"{f.stem}.{ext}"
        if a.gzip and a.format == "csv":
            data = gzip.compress(data, mtime=0)
            name += ".gz"
        rel = prefix / tb.schema / tb.name
        if a.date_folders:
            rel = rel / f.time.strftime("%Y/%m/%d")
        rel = rel / name
        f.relpath = rel.as_posix()
        root = pend_root if f.pending else dms_root
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        events.append((f, rel.as_posix(), data))
        if f.corrupt:
            corrupt_info = {"kind": f.corrupt, "file": f"dms/{f.relpath}", "pending": True,
                            "line": info.get("line"), "record": info.get("record"),
                            "column": {"column-count": None, "unknown-op": "Op"}.get(f.corrupt, bad[1])}

    target = a.target or f"{tb.schema}.{tb.name}".lower()
    exp_dir = out / "expected"
    exp_dir.mkdir(parents=True, exist_ok=True)

    def write_jsonl(path: Path, rows: list):
        path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")

    if a.mode == "changelog":
        # Every change row, as DMS wrote it, with its Op, file and line or row: the history.
        for name, ty in (("dms_op", "string"), ("dms_file", "string"), ("dms_row", "long")):
            types[name] = ty
        log: list = []
        steps = []
        for f, _st in states:
            key = os.path.abspath(out / "dms" / f.relpath)
            for ch, pos in f.rendered:
                r = dict(ch.row)
                if ts_col:
                    r[ts_col] = ch.ts
                if seq_col:
                    r[seq_col] = ch.seq
                r.update({"dms_op": ch.op, "dms_file": key, "dms_row": pos})
                log.append(((key, pos), r))
            steps.append({k: v for k, v in log})
        states = [(f, st) for (f, _), st in zip(states, steps)]
        cols_after = [cols + ["dms_op", "dms_file", "dms_row"] for cols in cols_after]
    final = to_json_rows(states[-1][1])
    write_jsonl(exp_dir / f"{target}.jsonl", final)
    if any(f.pending for f in tb.files):
        initial, initial_cols = {}, []
        for (f, st), cols in zip(states, cols_after):
            if not f.pending:
                initial, initial_cols = st, cols
        write_jsonl(exp_dir / f"{target}.initial.jsonl", to_json_rows(initial, initial_cols))
    total_rows = sum(len(f.changes) for f in tb.files)
    if a.asof or (a.asof is None and total_rows <= 3000):
        asof = [{"after_file": f.relpath, "pending": f.pending, "rows": to_json_rows(st, cols)}
                for (f, st), cols in zip(states, cols_after)]
        (exp_dir / f"{target}.asof.json").write_text(json.dumps(asof, ensure_ascii=False, indent=0), encoding="utf-8")
    compare_key = [k.lower() for k in tb.pk]
    if a.mode == "changelog":
        compare_key = ["dms_file", "dms_row"]
    meta = {
        "table": target,
        "dms_table": f"{tb.schema}.{tb.name}",
        # What rows are compared by; with `mode` append or changelog the table has no key and
        # its rows come in no particular order.
        "primary_key": compare_key,
        "mode": a.mode,
        "columns": types,
        "files": [f.relpath for f, _ in states],
        "pending_files": [f.relpath for f, _ in states if f.pending],
        "format": a.format,
        "rows": len(final),
        "argv": a.argv,
        "delayed_changes": getattr(a, "delayed", 0),
    }
    (exp_dir / f"{target}.meta.json").write_text(json.dumps(meta, indent=1), encoding="utf-8")
    if a.corrupt:
        if a.corrupt == "no-pk":
            corrupt_info = {"kind": "no-pk", "file": None, "pending": False, "line": None, "record": None,
                            "column": None}
        corrupt_info["table"] = target
        (exp_dir / f"{target}.corrupt.json").write_text(json.dumps(corrupt_info, indent=1), encoding="utf-8")

    # config
    entry: dict = {}
    if a.mode != "upsert":
        entry["mode"] = a.mode
    elif a.corrupt != "no-pk":
        entry["primary_key"] = list(tb.pk)
    if a.target:
        entry["target"] = a.target
    if seq_col:
        entry["change_sequence_column"] = seq_col
    if ts_col:
        entry["commit_timestamp_column"] = ts_col
    part = list(a.partition_by or [])
    if a.partition_move and not part:
        part = ["status"] if "status" in col_ty else [tb.cols[1].name]
    if part:
        entry["partition_by"] = part
    if a.no_header or a.cdc_path:
        # Headerless files (CDC_TXN files are) take their names from `columns`.
        lay = layout(tb, tb.files[-1], a)
        cols = []
        for name, kind, c in lay:
            if kind == "op":
                continue
            ty = {"ts": "timestamp", "seq": "string"}.get(kind) or iceberg_type(c.ty)
            cols.append({"name": name, "type": ty})
        entry["columns"] = cols
    elif pins:
        # With a header, `columns` only pins the types of the columns it names.
        entry["columns"] = [{"name": n, "type": t} for n, t in pins.items()]
    if a.ordering_column:
        entry["ordering_column"] = a.ordering_column
    if a.time_type:
        entry["time_type"] = a.time_type
    if a.null_value is not None:
        entry["null_value"] = a.null_value
    if a.no_sup_value is not None:
        entry["no_sup_value"] = a.no_sup_value
    if a.delimiter != ",":
        entry["delimiter"] = a.delimiter
    if a.before_image:
        entry["before_image_prefix"] = a.before_image_prefix
    write_config(out, f"{tb.schema}.{tb.name}", entry,
                 source={"cdc_path": a.cdc_path} if a.cdc_path else None)

    if a.events:
        ev_dir = Path(a.events)
        ev_dir.mkdir(parents=True, exist_ok=True)
        existing = len(list(ev_dir.glob("*.json")))
        for i, (f, rel, data) in enumerate(events, existing + 1):
            ev = s3_event(a.bucket, rel, len(data), hashlib.md5(data).hexdigest(), f.time, i)
            (ev_dir / f"{i:05d}-{Path(rel).name}.json").write_text(json.dumps(ev, indent=1), encoding="utf-8")
    return meta


# --------------------------------------------------------------------------------------------
# CLI

def add_common(p: argparse.ArgumentParser):
    p.add_argument("--out", required=True, help="output directory (created; other tables in it are kept)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--format", choices=["csv", "parquet"], default="csv")
    p.add_argument("--gzip", action="store_true", help="CompressionType=GZIP (.csv.gz; gzip codec inside Parquet)")
    p.add_argument("--no-header", action="store_true", help="AddColumnName=false; config.toml lists the columns")
    p.add_argument("--no-op-in-load", action="store_true", help="IncludeOpForFullLoad=false: LOAD files have no Op")
    p.add_argument("--date-folders", action="store_true", help="DatePartitionEnabled: YYYY/MM/DD folders")
    p.add_argument("--timestamp-column", metavar="NAME", help="TimestampColumnName (STRING, right after Op)")
    p.add_argument("--change-seq-column", metavar="NAME", help="AR_H_CHANGE_SEQ-like column appended after the table columns")
    p.add_argument("--shuffle-rows", action="store_true",
                   help="rows inside each change file not in source order (needs an ordering column)")
    p.add_argument("--before-image", action="store_true", help="add-before-image-columns (pk-only) BI_<pk> columns")
    p.add_argument("--before-image-prefix", default="BI_")
    p.add_argument("--pk-update-ratio", type=float, default=0.0, help="share of updates that change the key")
    p.add_argument("--null-value", metavar="TOKEN", help="CsvNullValue (default: NULL = empty unquoted field)")
    p.add_argument("--delimiter", default=",", help="CsvDelimiter (any string)")
    p.add_argument("--add-column-at-file", type=int, metavar="K",
                   help="from change file K (1-based) on, a new column appears and column order is shuffled")
    p.add_argument("--new-column", default="channel", help="name of the column --add-column-at-file adds")
    p.add_argument("--partition-move", action="store_true",
                   help="partition by status (unless --partition-by) and make updates move rows between partitions")
    p.add_argument("--partition-by", action="append", metavar="SPEC", help="partition_by entry (repeatable)")
    p.add_argument("--timestamp-unit", choices=["us", "ms"], default="us", help="Parquet TIMESTAMP unit")
    p.add_argument("--parquet-version", default="1.0", help="pyarrow Parquet format version (DMS default parquet-1-0)")
    p.add_argument("--row-group-size", type=int, default=10024)
    p.add_argument("--schema", help="DMS schema name (folder)")
    p.add_argument("--table", help="DMS table name (folder)")
    p.add_argument("--target", help="config target namespace.table (default <schema>.<table> lower-cased)")
    p.add_argument("--bucket-folder", help="BucketFolder: extra leading folder under dms/")
    p.add_argument("--pending-from-file", type=int, metavar="K",
                   help="write change files K.. (1-based) under pending/dms instead of dms")
    p.add_argument("--corrupt", choices=["column-count", "unknown-op", "bad-number", "long-to-string", "no-pk"],
                   help="add one bad change file (under pending/dms) or leave the primary key unconfigured")
    p.add_argument("--asof", action=argparse.BooleanOptionalAction, default=None,
                   help="write expected/<t>.asof.json (default: only when the scenario is small)")
    p.add_argument("--events", metavar="DIR2", help="write one S3 ObjectCreated:Put event JSON per object")
    p.add_argument("--bucket", default="dms-output", help="bucket name in events")
    p.add_argument("--nasty-ratio", type=float, default=0.5, help="share of notes that are CSV edge cases")
    p.add_argument("--ordering-column", metavar="COL", help="config ordering_column (a table column, e.g. updated_at)")
    p.add_argument("--delay-changes", type=float, default=0.0, metavar="RATIO",
                   help="move this share of eligible updates 1-2 change files later (older than what is applied)")
    p.add_argument("--cached-changes", action="store_true",
                   help="the first change file's commit timestamps lie before the full load's")
    p.add_argument("--dms-types", action="store_true",
                   help="CSV: add zip (leading zeros in changes) and DMS doubles in exponent form")
    p.add_argument("--mode", choices=["upsert", "append", "changelog"], default="upsert",
                   help="the table's config mode; append: inserts only (scenario events); "
                        "changelog: expected = every change row with dms_op, dms_file, dms_row")
    p.add_argument("--cdc-inserts-only", action="store_true",
                   help="CdcInsertsOnly: with --no-op-in-load, change files have no Op either")
    p.add_argument("--no-sup-value", metavar="MARKER",
                   help="UseCsvNoSupValue: updates carry MARKER in most columns they did not "
                        "change (config no_sup_value); the expected state is unchanged")
    p.add_argument("--cdc-path", metavar="DIR",
                   help="PreserveTransactions with CdcPath: change files go to DIR/CDC_TXN-*.csv "
                        "(shared with tables generated into the same tree)")
    p.add_argument("--dms-prices", action="store_true",
                   help="CSV: add `price`, cents as DMS doubles (`+9.8999999999999999e-01` for 0.99)")
    p.add_argument("--pin", action="append", metavar="COL=TYPE",
                   help="config columns entry pinning one column's type (repeatable; header files)")
    p.add_argument("--time-type", choices=["string", "long", "time"],
                   help="config time_type for DMS TIME columns (default: string)")


def add_synthetic(p: argparse.ArgumentParser):
    p.add_argument("--rows", type=int, default=200, help="rows in the full load")
    p.add_argument("--cdc-files", type=int, default=4, help="number of change files")
    p.add_argument("--cdc-rows", type=int, default=100, help="changes per change file")
    p.add_argument("--update-ratio", type=float, default=0.5)
    p.add_argument("--delete-ratio", type=float, default=0.2)
    p.add_argument("--load-files", type=int, default=1, help="split the full load over N LOAD files")
    p.add_argument("--load-order", choices=["sorted", "shuffled"], default="sorted",
                   help="full-load rows in key order (MySQL, SQL Server) or not (a heap table)")
    p.add_argument("--load-duplicates", type=float, default=0.0, metavar="RATIO",
                   help="share of extra full-load rows repeating an earlier key with other values")
    p.add_argument("--file-interval", type=int, default=600, help="seconds between change files")


def add_events(p: argparse.ArgumentParser):
    p.add_argument("--rows", type=int, default=200, help="rows in the full load")
    p.add_argument("--cdc-files", type=int, default=4, help="number of change files")
    p.add_argument("--cdc-rows", type=int, default=100, help="inserts per change file")
    p.add_argument("--file-interval", type=int, default=600, help="seconds between change files")


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="scenario", required=True)
    p = sub.add_parser("product", help="the product-inventory example (sales/product)")
    add_common(p)
    p = sub.add_parser("synthetic", help="random shop/orders table")
    add_common(p)
    add_synthetic(p)
    p = sub.add_parser("events", help="a keyless log table audit/events, inserts only (mode append)")
    add_common(p)
    add_events(p)
    p = sub.add_parser("selfcheck", help="generate many trees, re-read them independently and compare")
    p.add_argument("--keep", help="keep generated trees under this directory")
    p.add_argument("-k", dest="only", help="run only cases whose name contains this")
    a = ap.parse_args(argv)
    if a.scenario == "selfcheck":
        return selfcheck(a)
    for n, d in (("load_files", 1), ("file_interval", 600), ("load_order", "sorted"),
                 ("load_duplicates", 0.0)):
        if not hasattr(a, n):
            setattr(a, n, d)
    a.argv = argv
    meta = generate(a)
    print(f"dmsgen: {meta['table']}: {len(meta['files'])} file(s), {meta['rows']} row(s) expected -> {a.out}")
    return 0


# --------------------------------------------------------------------------------------------
# Independent re-reader (selfcheck): config.toml + files on disk -> table states.
# Shares no code with the generator/model above except jsoncmp for the comparison.

INT_RE = re.compile(r"^-?\d+$")
DEC_RE = re.compile(r"^-?\d+\.(\d+)$")
TS_RE = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,9})?$")
DATE_RE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
LOAD_RE = re.compile(r"^(?:SEGMENT\d+_)?LOAD([0-9A-F]+)\.(csv|parquet)(\.gz)?$")
CDC_RE = re.compile(r"^(\d{8}-\d{6,})\.(csv|parquet)(\.gz)?$")


def split_fields(text: str, delim: str) -> list[list[tuple[str, bool]]]:
    """RFC 4180 records with any-length delimiter; fields as (text, was_quoted)."""
    recs, rec, i, n = [], [], 0, len(text)
    while i < n:
        if text[i] == '"':
            i += 1
            buf = []
            while True:
                j = text.index('"', i)
                buf.append(text[i:j])
                if j + 1 < n and text[j + 1] == '"':
                    buf.append('"')
                    i = j + 2
                    continue
                i = j + 1
                break
            rec.append(("".join(buf), True))
        else:
            m = i
            while m < n and text[m] != "\n" and not text.startswith(delim, m):
                m += 1
            rec.append((text[i:m], False))
            i = m
        if i >= n or text[i] == "\n":
            recs.append(rec)
            rec = []
            i += 1
        elif text.startswith(delim, i):
            i += len(delim)
            if i >= n:
                rec.append(("", False))
        else:
            raise ValueError(f"garbage after quoted field at offset {i}")
    if rec:
        recs.append(rec)
    return recs


def read_csv_records(data: bytes, delim: str, null_token: str) -> list[list]:
    text = data.decode("utf-8")
    if len(delim) == 1:
        rows = list(csv.reader(io.StringIO(text, newline=""), delimiter=delim, quotechar='"',
                               doublequote=True, strict=True))
        return [[None if f == null_token else f for f in r] for r in rows]
    return [[None if (f == null_token and not q) else f for f, q in r] for r in split_fields(text, delim)]


def infer(values: list) -> str:
    vs = [v for v in values if v is not None]
    if not vs:
        return "string"
    if all(INT_RE.match(v) for v in vs):
        return "long"
    if all(INT_RE.match(v) or DEC_RE.match(v) for v in vs):
        return f"decimal(38,{max(len(m.group(1)) if (m := DEC_RE.match(v)) else 0 for v in vs)})"
    if all(TS_RE.match(v) for v in vs):
        return "timestamp"
    if all(DATE_RE.match(v) for v in vs):
        return "date"
    if all(v in ("true", "false") for v in vs):
        return "boolean"
    return "string"


def text_to_json(v, ty: str):
    if v is None:
        return None
    if ty in ("int", "long"):
        return int(v)
    if ty.startswith("decimal"):
        return str(Decimal(v).quantize(Decimal(1).scaleb(-decimal_scale(ty))))
    if ty in ("float", "double"):
        return float(v)
    if ty == "boolean":
        return v == "true"
    if ty == "timestamp":
        d, _, frac = v.partition(".")
        return d + "." + (frac + "000000")[:6]
    return v


def arrow_to_json(v, arrow_ty):
    import pyarrow as pa
    if v is None:
        return None
    if pa.types.is_unsigned_integer(arrow_ty) and arrow_ty.bit_width == 64:
        return str(v)
    if pa.types.is_integer(arrow_ty):
        return int(v)
    if pa.types.is_decimal(arrow_ty):
        return format(v, f".{arrow_ty.scale}f")
    if pa.types.is_floating(arrow_ty):
        return float(v)
    if pa.types.is_boolean(arrow_ty):
        return bool(v)
    if pa.types.is_timestamp(arrow_ty):
        return v.strftime(TS_FMT)
    if pa.types.is_date(arrow_ty):
        return v.isoformat()
    if pa.types.is_time(arrow_ty):
        return v.strftime("%H:%M:%S.%f")
    if pa.types.is_binary(arrow_ty):
        return v.hex()
    return v


def reread(out: Path) -> dict:
    """{target: [(relpath, state_rows_json)]} from config.toml and the files in out/dms."""
    import pyarrow.parquet as pq
    cfg = tomllib.loads((out / "config.toml").read_text(encoding="utf-8"))
    dms = out / "dms"
    tables: dict = {}
    for p in sorted(dms.rglob("*")):
        if not p.is_file():
            continue
        rel = p.relative_to(dms)
        parts = list(rel.parts[:-1])
        while parts and re.fullmatch(r"[0-9_-]+", parts[-1]):
            parts.pop()
        schema, table = parts[-2], parts[-1]
        tables.setdefault(f"{schema}.{table}", []).append(p)
    result = {}
    for dms_name, files in tables.items():
        tc = {**cfg.get("defaults", {}), **cfg["tables"][dms_name]}
        pk = [k.lower() for k in tc["primary_key"]]
        seq = tc.get("change_sequence_column")
        tsc = tc.get("commit_timestamp_column")
        bi_prefix = (tc.get("before_image_prefix") or "").lower()
        null_token = tc.get("null_value", "")
        delim = tc.get("delimiter", ",")

        def order(p: Path):
            m = LOAD_RE.match(p.name)
            if m:
                return (0, int(m.group(1), 16), "")
            m = CDC_RE.match(p.name)
            assert m, f"unexpected file name {p}"
            return (1, 0, m.group(1))

        files = sorted(files, key=order)
        # pass 1: read every file into (op, {lower col: text or python value}) records
        parsed = []
        for p in files:
            data = p.read_bytes()
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            recs = []
            if p.name.endswith((".parquet", ".parquet.gz")):
                t = pq.read_table(io.BytesIO(data))
                names = t.column_names
                arrow_types = {n.lower(): t.schema.field(n).type for n in names}
                for r in t.to_pylist():
                    op = r.get("Op", "I")
                    recs.append((op, {n.lower(): arrow_to_json(r[n], arrow_types[n.lower()])
                                      for n in names if n != "Op"}))
                parsed.append((p, recs, arrow_types))
                continue
            rows = read_csv_records(data, delim, null_token)
            if "columns" in tc:
                names = [c["name"].lower() for c in tc["columns"]]
                body = rows
            else:
                header, body = rows[0], rows[1:]
                names = [h.lower() for h in (header[1:] if header[0] == "Op" else header)]
            for r in body:
                assert len(r) in (len(names), len(names) + 1), f"{p}: bad field count {len(r)}"
                op, vals = (r[0], r[1:]) if len(r) == len(names) + 1 else ("I", r)
                recs.append((op, dict(zip(names, vals))))
            parsed.append((p, recs, None))
        # types
        types: dict = {}
        if "columns" in tc:
            types = {c["name"].lower(): c["type"] for c in tc["columns"]}
        else:
            all_vals: dict = {}
            for p, recs, at in parsed:
                if at is not None:
                    continue
                for _op, r in recs:
                    for k, v in r.items():
                        all_vals.setdefault(k, []).append(v)
            types = {k: infer(v) for k, v in all_vals.items()}
        if seq:
            types[seq] = "string"
        if tsc:
            types[tsc] = "timestamp"
        all_cols: list = []  # grows file by file: a column added later is absent before
        # pass 2: apply in order
        state: dict = {}
        states = []
        for p, recs, at in parsed:
            if at is None:
                recs = [(op, {k: text_to_json(v, types[k]) for k, v in r.items()}) for op, r in recs]
            else:
                fixed = []
                for op, r in recs:
                    if tsc and tsc in r and r[tsc] is not None:
                        r[tsc] = text_to_json(r[tsc], "timestamp")
                    fixed.append((op, r))
                recs = fixed
            for _op, r in recs[:1]:
                for k in r:
                    if k not in all_cols and not (bi_prefix and k.startswith(bi_prefix)):
                        all_cols.append(k)
            idx = list(range(len(recs)))
            if seq:
                idx.sort(key=lambda i: (recs[i][1].get(seq) or ""))
            elif tsc:
                idx.sort(key=lambda i: recs[i][1].get(tsc) or "")
            for i in idx:
                op, r = recs[i]
                key = tuple(json.dumps(r[k]) for k in pk)
                bi = None
                if bi_prefix and all(bi_prefix + k in r for k in pk):
                    bv = [r[bi_prefix + k] for k in pk]
                    if all(v is not None for v in bv):
                        bi = tuple(json.dumps(v) for v in bv)
                row = {k: v for k, v in r.items() if not (bi_prefix and k.startswith(bi_prefix))}
                if op == "D":
                    state.pop(key, None)
                elif op in ("I", "U"):
                    if op == "U" and bi is not None and bi != key:
                        state.pop(bi, None)
                    state[key] = row
                else:
                    raise ValueError(f"{p}: unknown op {op!r}")
            snapshot = []
            for k in sorted(state, key=lambda k: [json.loads(x) for x in k]):
                snapshot.append({c: state[k].get(c) for c in all_cols})
            states.append((p.relative_to(dms).as_posix(), snapshot))
        target = tc.get("target") or dms_name.lower()
        result[target] = states
    return result


SELFCHECK_CASES = [
    ("product", ["product"]),
    ("product-parquet", ["product", "--format", "parquet"]),
    ("product-headerless-noop", ["product", "--no-header", "--no-op-in-load"]),
    ("product-all-columns", ["product", "--timestamp-column", "dms_ts", "--change-seq-column",
                             "AR_H_CHANGE_SEQ", "--before-image", "--add-column-at-file", "2"]),
    ("synthetic", ["synthetic", "--rows", "300", "--cdc-files", "5", "--cdc-rows", "150"]),
    ("gzip-dates-ts-shuffle", ["synthetic", "--gzip", "--date-folders", "--timestamp-column", "dms_ts",
                               "--shuffle-rows", "--seed", "2"]),
    ("seq-bi-pkupdate", ["synthetic", "--change-seq-column", "AR_H_CHANGE_SEQ", "--shuffle-rows",
                         "--before-image", "--pk-update-ratio", "0.2", "--seed", "3"]),
    ("null-token-semicolon", ["synthetic", "--null-value", "NULL", "--delimiter", ";", "--seed", "4"]),
    ("null-backslash-multichar", ["synthetic", "--null-value", "\\N", "--delimiter", "||", "--seed", "5"]),
    ("tab-delimiter", ["synthetic", "--delimiter", "\t", "--seed", "6"]),
    ("headerless-everything", ["synthetic", "--no-header", "--timestamp-column", "ts", "--change-seq-column",
                               "AR_H_CHANGE_SEQ", "--before-image", "--pk-update-ratio", "0.1", "--seed", "7"]),
    ("headerless-noop", ["synthetic", "--no-header", "--no-op-in-load", "--seed", "8"]),
    ("parquet-ms-gzip-bi", ["synthetic", "--format", "parquet", "--gzip", "--timestamp-unit", "ms",
                            "--before-image", "--pk-update-ratio", "0.2", "--timestamp-column", "dms_ts",
                            "--seed", "9", "--row-group-size", "50"]),
    ("parquet-v26-newcol-partition", ["synthetic", "--format", "parquet", "--parquet-version", "2.6",
                                      "--add-column-at-file", "3", "--partition-move", "--seed", "10"]),
    ("newcol-hexload", ["synthetic", "--add-column-at-file", "2", "--load-files", "11", "--no-op-in-load",
                        "--seed", "11"]),
    ("corrupt-bad-number", ["synthetic", "--corrupt", "bad-number", "--pending-from-file", "3", "--seed", "12"]),
    ("corrupt-parquet", ["synthetic", "--format", "parquet", "--corrupt", "long-to-string", "--seed", "13"]),
    ("bucket-folder-events", ["synthetic", "--bucket-folder", "dms out", "--schema", "My Shop",
                              "--table", "Orders", "--date-folders", "--seed", "14"]),
]


def selfcheck(a) -> int:
    import pyarrow.parquet as pq
    base = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="dmsgen-selfcheck-"))
    base.mkdir(parents=True, exist_ok=True)
    passed = failed = 0

    def check(name: str, cond: bool, msg: str = ""):
        nonlocal passed, failed
        if cond:
            passed += 1
        else:
            failed += 1
            print(f"FAIL {name}: {msg}")

    for name, args in SELFCHECK_CASES:
        if a.only and a.only not in name:
            continue
        out = base / name
        if out.exists():
            shutil.rmtree(out)
        extra = ["--events", str(out / "events")] if "events" in name else []
        meta = generate_args(args + ["--out", str(out)] + extra)
        target = meta["table"]
        exp_dir = out / "expected"
        expected = jsoncmp.read_jsonl(exp_dir / f"{target}.jsonl")
        try:
            # move pending (not corrupt) files into place: the final expected state includes them
            cj = exp_dir / f"{target}.corrupt.json"
            corrupt = json.loads(cj.read_text()) if cj.exists() else None
            if corrupt and corrupt["file"]:
                check(name, (out / "pending" / corrupt["file"]).exists(), "corrupt file missing")
                bad_path = out / "pending" / corrupt["file"]
                if corrupt["line"]:
                    lines = bad_path.read_text().split("\n")
                    bad_line = lines[corrupt["line"] - 1]
                    check(name, "12x4" in bad_line, f"bad value not on line {corrupt['line']}: {bad_line!r}")
                else:
                    t = pq.read_table(bad_path)
                    check(name, str(t.schema.field(corrupt["column"]).type) == "string", "column not string")
            pend = out / "pending" / "dms"
            if pend.exists():
                initial = jsoncmp.read_jsonl(exp_dir / f"{target}.initial.jsonl")
                st = reread(out)[target]
                d = jsoncmp.compare(initial, st[-1][1], meta["primary_key"], meta["columns"])
                check(name, not d, "initial state differs:\n" + "\n".join(d))
                for p in sorted(pend.rglob("*")):
                    if p.is_file() and not (corrupt and corrupt["file"] and
                                            p == out / "pending" / corrupt["file"]):
                        dest = out / "dms" / p.relative_to(pend)
                        dest.parent.mkdir(parents=True, exist_ok=True)
                        shutil.copy(p, dest)
            states = reread(out)[target]
            d = jsoncmp.compare(expected, states[-1][1], meta["primary_key"], meta["columns"])
            check(name, not d, "final state differs:\n" + "\n".join(d))
            check(name, [s[0] for s in states] == meta["files"],
                  f"apply order {[s[0] for s in states]} != {meta['files']}")
            asof_p = exp_dir / f"{target}.asof.json"
            if asof_p.exists():
                asof = json.loads(asof_p.read_text())
                check(name, [x["after_file"] for x in asof] == [s[0] for s in states], "asof files differ")
                for x, (rel, st) in zip(asof, states):
                    d = jsoncmp.compare(x["rows"], st, meta["primary_key"], meta["columns"])
                    check(name, not d, f"state after {rel} differs:\n" + "\n".join(d[:10]))
            check(name, len(expected) > 0, "empty expected table")
            if extra:
                evs = sorted((out / "events").glob("*.json"))
                check(name, len(evs) == len(meta["files"]), "one event per object")
                for e in evs:
                    key = json.loads(e.read_text())["Records"][0]["s3"]["object"]["key"]
                    decoded = urllib.parse.unquote_plus(key)
                    check(name, " " not in key and ((out / "dms" / decoded).exists()
                                                  or (out / "pending" / "dms" / decoded).exists()),
                          f"event key {key!r} -> {decoded!r} not a file")
        except Exception as e:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            check(name, False, f"{type(e).__name__}: {e}")
        print(f"selfcheck {name}: ok" if not failed else f"selfcheck {name}: {failed} failure(s) so far")

    # determinism + config merge (two tables in one directory)
    if not a.only or "determinism" in a.only:
        d1, d2 = base / "det1", base / "det2"
        for d in (d1, d2):
            if d.exists():
                shutil.rmtree(d)
            generate_args(["synthetic", "--seed", "42", "--out", str(d), "--gzip", "--change-seq-column", "SEQ"])
            generate_args(["product", "--out", str(d), "--format", "parquet"])

        def digest(d: Path):
            return {p.relative_to(d).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
                    for p in sorted(d.rglob("*")) if p.is_file() and ".dmsgen" not in p.parts
                    and p.name != "shop.orders.meta.json" and p.name != "sales.product.meta.json"}
        check("determinism", digest(d1) == digest(d2), "same seed gave different bytes")
        cfg = tomllib.loads((d1 / "config.toml").read_text())
        check("config-merge", set(cfg["tables"]) == {"shop.orders", "sales.product"}, str(cfg))
        print("selfcheck determinism/config-merge: done")
    if not a.keep:
        shutil.rmtree(base, ignore_errors=True)
    print(f"dmsgen selfcheck: {passed} passed, {failed} failed")
    return 1 if failed else 0


def generate_args(argv: list) -> dict:
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="scenario", required=True)
    for s in SCENARIOS:
        p = sub.add_parser(s)
        add_common(p)
        if s == "synthetic":
            add_synthetic(p)
        if s == "events":
            add_events(p)
    a = ap.parse_args(argv)
    for n, d in (("load_files", 1), ("file_interval", 600), ("load_order", "sorted"),
                 ("load_duplicates", 0.0)):
        if not hasattr(a, n):
            setattr(a, n, d)
    a.argv = argv
    return generate(a)


if __name__ == "__main__":
    sys.exit(main())
