#!/usr/bin/env python3
"""gen.py: a fast synthetic AWS DMS workload for the comparison benchmark, plus the expected
final table computed independently of every tool under test.

  gen.py workload --out DIR --rows N --changes B --files K [--seed S]
                  [--ratios 0.7,0.2,0.1] [--twice 0.05] [--base-dir DIR]
  gen.py selfcheck

Why not tests/support/dmsgen.py synthetic: it builds every row in Python (one dict per row and
a per-row model), which is right for correctness tests but takes minutes at 10M rows. This
generator is vectorised (numpy + pyarrow string kernels) and writes the same DMS CSV layout the
Rust bench (benches/ingest.rs) writes:

  DIR/dms/shop/orders/LOAD00000001.csv ...          full load, keys 0..N-1, <= 1M rows per file
  DIR/dms/shop/orders/20220302-HHMM010000.csv       K change files of B rows each
  DIR/expected.parquet                              final state: order_id, customer_id, status,
                                                    cents, note, ts_us (sorted by order_id)
  DIR/meta.json                                     sizes, files, row counts and checksums

CSV as DMS writes it (AddColumnName=true, IncludeOpForFullLoad=true): header
`Op,order_id,customer_id,status,amount,note,updated_at`, unquoted fields except `note`, which
holds a comma and is quoted (RFC 4180). amount has two decimals; updated_at is
`YYYY-MM-DD HH:MM:SS.ffffff`.

Change mix per file (fractions of the file's rows, defaults): 70% U, 20% I, 10% D, and about
5% of the rows (`--twice`) are a second change of a key already changed earlier in the same
file: U then U, I then U, U then D, D then I (re-insert), I then D. Every change is valid in
source order: U and D only hit keys that exist at that point, I only keys that do not. When a
file has more updates than there are live keys (the 1 GB memory workload), single updates are
drawn with replacement, so keys are updated many times in one file.

Expected state (independent of the tools): an array per column indexed by key. Each file's rows
are put in source order, the last row per key wins (D removes, I/U set the values). `selfcheck`
replays generated files row by row through a plain dict model (re-read with the csv module),
asserting validity and comparing with expected.parquet.
"""
from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

HEADER = b"Op,order_id,customer_id,status,amount,note,updated_at\n"
STATUS = pa.array(["NEW", "PAID", "SHIPPED", "DELIVERED"])
OPS = pa.array(["I", "U", "D"])
I, U, D = 0, 1, 2
BASE_TS = 1646215201000000  # 2022-03-02 10:00:01 UTC, microseconds
LOAD_ROWS_PER_FILE = 1_000_000
CHUNK = 1_000_000


def change_file_name(f: int) -> str:
    # DMS change file names: YYYYMMDD-HHMMSSfff...; one minute apart from 2022-03-02 10:00:01,
    # in order (across midnight too: the read benchmark feeds days of them).
    import datetime as dt
    t = dt.datetime(2022, 3, 2, 10, 0, 1) + dt.timedelta(minutes=f)
    return t.strftime("%Y%m%d-%H%M%S") + "0000.csv"


def load_file_name(i: int) -> str:
    return f"LOAD{i + 1:08X}.csv"


def csv_bytes(op, key, cust, status, cents, ver, ts) -> bytes:
    """DMS CSV lines (no header) for the given column arrays, built with Arrow kernels."""
    out = []
    n = len(key)
    for s in range(0, n, CHUNK):
        e = min(n, s + CHUNK)
        k = pc.cast(pa.array(key[s:e], pa.int64()), pa.string())
        c = cents[s:e]
        amount = pc.binary_join_element_wise(
            pc.cast(pa.array(c // 100, pa.int64()), pa.string()),
            pc.utf8_lpad(pc.cast(pa.array(c % 100, pa.int64()), pa.string()), 2, "0"),
            ".",
        )
        note = pc.binary_join_element_wise(
            '"note, ', k, " v", pc.cast(pa.array(ver[s:e], pa.int64()), pa.string()),
            ' lorem ipsum dolor sit"', "",
        )
        line = pc.binary_join_element_wise(
            pc.take(OPS, pa.array(op[s:e], pa.int8())),
            k,
            pc.cast(pa.array(cust[s:e], pa.int64()), pa.string()),
            pc.take(STATUS, pa.array(status[s:e], pa.int8())),
            amount,
            note,
            pc.cast(pa.array(ts[s:e], pa.timestamp("us")), pa.string()),
            ",",
        )
        line = pc.binary_join_element_wise(line, "", "\n")  # line + "\n" + ""
        line = line.cast(pa.large_string())
        offs = np.frombuffer(line.buffers()[1], dtype=np.int64)[line.offset: line.offset + len(line) + 1]
        data = line.buffers()[2]
        out.append(data.to_pybytes()[offs[0]: offs[-1]])
    return b"".join(out)


def note_array(key: np.ndarray, ver: np.ndarray) -> pa.Array:
    return pc.binary_join_element_wise(
        "note, ", pc.cast(pa.array(key, pa.int64()), pa.string()), " v",
        pc.cast(pa.array(ver, pa.int64()), pa.string()), " lorem ipsum dolor sit", "",
    )


class State:
    """The expected table: one array per column, indexed by key."""

    def __init__(self, cap: int):
        self.live = np.zeros(cap, dtype=bool)
        self.cust = np.zeros(cap, dtype=np.int64)
        self.status = np.zeros(cap, dtype=np.int8)
        self.cents = np.zeros(cap, dtype=np.int64)
        self.ver = np.zeros(cap, dtype=np.int64)
        self.ts = np.zeros(cap, dtype=np.int64)

    def apply_last_wins(self, op, key, cust, status, cents, ver, ts) -> None:
        """Rows are in source order; the last row per key decides."""
        n = len(key)
        order = np.lexsort((np.arange(n), key))
        ks = key[order]
        last = order[np.r_[ks[1:] != ks[:-1], True]]
        k = key[last]
        o = op[last]
        dead = o == D
        self.live[k[dead]] = False
        up = ~dead
        ku, lu = k[up], last[up]
        self.live[ku] = True
        self.cust[ku] = cust[lu]
        self.status[ku] = status[lu]
        self.cents[ku] = cents[lu]
        self.ver[ku] = ver[lu]
        self.ts[ku] = ts[lu]

    def table(self) -> pa.Table:
        k = np.flatnonzero(self.live)
        return pa.table({
            "order_id": pa.array(k, pa.int64()),
            "customer_id": pa.array(self.cust[k], pa.int64()),
            "status": pc.take(STATUS, pa.array(self.status[k], pa.int8())),
            "cents": pa.array(self.cents[k], pa.int64()),
            "note": note_array(k, self.ver[k]),
            "ts_us": pa.array(self.ts[k], pa.int64()),
        })


def gen_change_file(rng, st: State, next_key: int, f: int, b: int, ratios, twice: float):
    """One change file of b rows; returns (columns in source order, next_key)."""
    ru, ri, rd = ratios
    s = twice / 0.05
    n_uu = int(round(0.02 * b * s))
    n_iu = int(round(0.01 * b * s))
    n_ud = int(round(0.01 * b * s))
    n_di = int(round(0.005 * b * s))
    n_id = int(round(0.005 * b * s))
    n_u = int(round(ru * b)) - 2 * n_uu - n_iu - n_ud
    n_i = int(round(ri * b)) - n_iu - n_di - n_id
    n_d = b - (n_u + n_i + 2 * (n_uu + n_iu + n_ud + n_di + n_id))
    if min(n_u, n_i, n_d) < 0:
        raise SystemExit(f"ratios {ratios} with --twice {twice} leave a negative count")
    live = np.flatnonzero(st.live)
    n_del = n_d + n_ud + n_di
    if n_del > len(live):
        raise SystemExit(f"file {f}: {n_del} deletes but only {len(live)} live keys")
    dk = live[rng.choice(len(live), n_del, replace=False)]
    d_single, d_ud, d_di = dk[:n_d], dk[n_d:n_d + n_ud], dk[n_d + n_ud:]
    mask = st.live.copy()
    mask[dk] = False
    pool = np.flatnonzero(mask)
    if n_uu + n_u <= len(pool):
        uk = pool[rng.choice(len(pool), n_uu + n_u, replace=False)]
        u_uu, u_single = uk[:n_uu], uk[n_uu:]
    else:  # more updates than keys: single updates repeat keys
        u_uu = pool[rng.choice(len(pool), min(n_uu, len(pool)), replace=False)]
        u_single = pool[rng.integers(0, len(pool), n_u)]
    new = np.arange(next_key, next_key + n_i + n_iu + n_id, dtype=np.int64)
    next_key += len(new)
    i_single, i_iu, i_id = new[:n_i], new[n_i:n_i + n_iu], new[n_i + n_iu:]

    # (key, op, position, which value: 0 = fresh, 1 = state, 2 = values of the pair's first row)
    parts = []

    def single(keys, op, val):
        parts.append((keys, np.full(len(keys), op, np.int8), rng.random(len(keys)),
                      np.full(len(keys), val, np.int8), None))

    def pair(keys, op1, op2, val2):
        p = np.sort(rng.random((len(keys), 2)), axis=1)
        parts.append((keys, np.full(len(keys), op1, np.int8), p[:, 0],
                      np.full(len(keys), 0 if op1 != D else 1, np.int8), None))
        parts.append((keys, np.full(len(keys), op2, np.int8), p[:, 1],
                      np.full(len(keys), val2, np.int8), len(parts) - 1))

    single(u_single, U, 0)
    single(i_single, I, 0)
    single(d_single, D, 1)
    pair(u_uu, U, U, 0)
    pair(i_iu, I, U, 0)
    pair(d_ud, U, D, 2)
    pair(d_di, D, I, 0)
    pair(i_id, I, D, 2)

    key = np.concatenate([p[0] for p in parts])
    op = np.concatenate([p[1] for p in parts])
    pos = np.concatenate([p[2] for p in parts])
    val = np.concatenate([p[3] for p in parts])
    n = len(key)
    assert n == b, (n, b)
    cust = rng.integers(0, 100_000, n)
    status = rng.integers(0, 4, n).astype(np.int8)
    cents = rng.integers(0, 1_000_000, n)
    order = np.argsort(pos, kind="stable")
    rank = np.empty(n, np.int64)
    rank[order] = np.arange(n)
    ts = BASE_TS + (f + 1) * 60_000_000 + rank  # one microsecond apart, in source order
    ver = 1_000_000 * (f + 1) + rank  # unique per row: every version of a note differs
    # D rows carry the row as it was: the state's values, or those of the pair's first row.
    starts = np.cumsum([0] + [len(p[0]) for p in parts])
    for pi, p in enumerate(parts):
        a, z = starts[pi], starts[pi + 1]
        sel = np.arange(a, z)
        if p[4] is not None and p[3].size and p[3][0] == 2:
            src = np.arange(starts[p[4]], starts[p[4] + 1])
            for arr in (cust, status, cents, ver, ts):
                arr[sel] = arr[src]
        elif p[3].size and p[3][0] == 1:
            k = key[sel]
            cust[sel], status[sel], cents[sel] = st.cust[k], st.status[k], st.cents[k]
            ver[sel], ts[sel] = st.ver[k], st.ts[k]
    cols = [a[order] for a in (op, key, cust, status, cents, ver, ts)]
    return cols, next_key


def workload(out: Path, n: int, b: int, k: int, seed: int, ratios, twice: float,
             base_dir: Path | None, load_file_rows: int = LOAD_ROWS_PER_FILE,
             checkpoints: tuple[int, ...] = ()) -> dict:
    """`checkpoints`: numbers of change files after which the expected state's checksum is
    recorded too (meta["checksums_at"]), for readers that check the table part way."""
    table = out / "dms" / "shop" / "orders"
    if out.exists():
        shutil.rmtree(out)
    table.mkdir(parents=True)
    cap = n + int(k * b * max(ratios[1] + 0.01, 0.05)) + 16
    st = State(cap)
    # Base: keys 0..n-1 in key order (a full load), seeded by n alone so every B shares it.
    rb = np.random.default_rng(seed * 1_000_003 + n)
    key = np.arange(n, dtype=np.int64)
    cust = rb.integers(0, 100_000, n)
    status = rb.integers(0, 4, n).astype(np.int8)
    cents = rb.integers(0, 1_000_000, n)
    ver = np.zeros(n, np.int64)
    ts = np.full(n, BASE_TS, np.int64)
    op = np.full(n, I, np.int8)
    st.apply_last_wins(op, key, cust, status, cents, ver, ts)
    load_files = []
    for i, s in enumerate(range(0, n, load_file_rows)):
        e = min(n, s + load_file_rows)
        name = load_file_name(i)
        base = f"base-{seed}-{n}" + ("" if load_file_rows == LOAD_ROWS_PER_FILE
                                     else f"-{load_file_rows}")
        cached = base_dir / base / name if base_dir else None
        if cached is not None and cached.exists():
            os.link(cached, table / name)
        else:
            data = HEADER + csv_bytes(op[s:e], key[s:e], cust[s:e], status[s:e], cents[s:e],
                                      ver[s:e], ts[s:e])
            (table / name).write_bytes(data)
            if cached is not None:
                cached.parent.mkdir(parents=True, exist_ok=True)
                tmp = cached.with_suffix(".tmp")
                tmp.write_bytes(data)
                os.replace(tmp, cached)
        load_files.append(str(table / name))
    rc = np.random.default_rng(seed * 7_919 + n * 31 + b)
    next_key = n
    change_files = []
    checksums_at = {}
    if 0 in checkpoints:
        checksums_at["0"] = checksum_expected(st.table())
    for f in range(k):
        cols, next_key = gen_change_file(rc, st, next_key, f, b, ratios, twice)
        name = change_file_name(f)
        (table / name).write_bytes(HEADER + csv_bytes(*cols))
        st.apply_last_wins(*cols)
        change_files.append(str(table / name))
        if f + 1 in checkpoints:
            checksums_at[str(f + 1)] = checksum_expected(st.table())
    exp = st.table()
    pq.write_table(exp, out / "expected.parquet")
    meta = {
        "rows": n, "changes": b, "files": k, "seed": seed, "ratios": list(ratios),
        "twice": twice, "load_files": load_files, "change_files": change_files,
        "change_file_bytes": [os.path.getsize(p) for p in change_files],
        "expected_rows": exp.num_rows,
        "checksum": checksum_expected(exp),
        "checksums_at": checksums_at,
    }
    (out / "meta.json").write_text(json.dumps(meta, indent=1))
    return meta


def checksum_expected(t: pa.Table) -> dict:
    def total(col: str) -> int:  # exact: int64 sums of 10M timestamps would overflow
        return int(pc.sum(pc.cast(t[col], pa.decimal128(38, 0))).as_py() or 0)

    return {
        "count": t.num_rows,
        "sum_order_id": total("order_id"),
        "sum_customer_id": total("customer_id"),
        "sum_cents": total("cents"),
        "sum_ts_us": total("ts_us"),
    }


# ---------------------------------------------------------------------------------------------
# selfcheck: a row-by-row dict model over the CSV text, independent of the vectorised code


def replay(meta: dict) -> dict:
    state: dict[int, tuple] = {}

    def parse_ts(s: str) -> int:
        import datetime as dt
        d = dt.datetime.strptime(s, "%Y-%m-%d %H:%M:%S.%f").replace(tzinfo=dt.timezone.utc)
        return int(d.timestamp()) * 1_000_000 + d.microsecond

    for path in meta["load_files"] + meta["change_files"]:
        with open(path, newline="") as fh:
            r = csv.reader(fh)
            assert next(r) == HEADER.decode().strip().split(",")
            for line, row in enumerate(r, 2):
                op, key = row[0], int(row[1])
                whole, frac = row[4].split(".")
                val = (int(row[2]), row[3], int(whole) * 100 + int(frac), row[5], parse_ts(row[6]))
                if op == "I":
                    assert key not in state, f"{path}:{line}: insert of live key {key}"
                    state[key] = val
                elif op == "U":
                    assert key in state, f"{path}:{line}: update of absent key {key}"
                    state[key] = val
                elif op == "D":
                    assert key in state, f"{path}:{line}: delete of absent key {key}"
                    assert state[key] == val, f"{path}:{line}: delete image differs"
                    del state[key]
                else:
                    raise AssertionError(f"{path}:{line}: op {op!r}")
    return state


def selfcheck() -> None:
    cases = [(1000, 200, 3, (0.7, 0.2, 0.1), 0.05), (500, 3000, 2, (0.8, 0.15, 0.05), 0.05),
             (20, 10, 4, (0.7, 0.2, 0.1), 0.2), (2000, 1000, 5, (0.7, 0.2, 0.1), 0.05)]
    with tempfile.TemporaryDirectory() as d:
        for i, (n, b, k, ratios, twice) in enumerate(cases):
            out = Path(d) / f"c{i}"
            meta = workload(out, n, b, k, 7 + i, ratios, twice, None)
            model = replay(meta)
            exp = pq.read_table(out / "expected.parquet").to_pylist()
            got = {r["order_id"]: (r["customer_id"], r["status"], r["cents"], r["note"],
                                   r["ts_us"]) for r in exp}
            assert got == model, f"case {i}: expected.parquet differs from the row model"
            # the file really has keys changed twice
            twice_rows = 0
            for p in meta["change_files"]:
                with open(p) as fh:
                    keys = [ln.split(",", 2)[1] for ln in fh.read().splitlines()[1:]]
                twice_rows += len(keys) - len(set(keys))
            assert twice_rows > 0, f"case {i}: no key changed twice in a file"
            print(f"selfcheck case {i}: N={n} B={b} K={k}: {len(model)} rows, "
                  f"{twice_rows} repeated-key rows: ok")
    print("gen.py selfcheck: ok")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("workload")
    w.add_argument("--out", required=True, type=Path)
    w.add_argument("--rows", type=int, required=True)
    w.add_argument("--changes", type=int, required=True)
    w.add_argument("--files", type=int, default=5)
    w.add_argument("--seed", type=int, default=42)
    w.add_argument("--ratios", default="0.7,0.2,0.1")
    w.add_argument("--twice", type=float, default=0.05)
    w.add_argument("--base-dir", type=Path)
    w.add_argument("--load-file-rows", type=int, default=LOAD_ROWS_PER_FILE,
                   help="rows per full-load file (LOAD00000001.csv, ...)")
    w.add_argument("--checkpoints", default="",
                   help="comma-separated change-file counts to record the expected checksum at")
    sub.add_parser("selfcheck")
    a = ap.parse_args()
    if a.cmd == "selfcheck":
        selfcheck()
        return
    ratios = tuple(float(x) for x in a.ratios.split(","))
    checkpoints = tuple(int(x) for x in a.checkpoints.split(",") if x)
    meta = workload(a.out, a.rows, a.changes, a.files, a.seed, ratios, a.twice, a.base_dir,
                    a.load_file_rows, checkpoints)
    print(json.dumps({k: meta[k] for k in ("rows", "changes", "files", "expected_rows",
                                           "change_file_bytes")}))


if __name__ == "__main__":
    sys.exit(main())
