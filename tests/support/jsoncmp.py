#!/usr/bin/env python3
"""Compare two lists of rows in the dms2iceberg JSON contract, with a readable diff.

The JSON contract (what `dms2iceberg scan --format json` prints, and what
`dmsgen.py` writes to expected/*.jsonl): one JSON object per line, keys = column
names lower-cased, rows sorted by primary key.
  int/long -> number; float/double -> number; decimal -> string with the scale's
  digits ("12.50"); boolean -> true/false; string -> string; date -> "2022-03-02";
  time -> "11:30:01.000000"; timestamp -> "2022-03-02 11:30:01.000000";
  timestamptz -> same + "+00:00"; binary -> lower-case hex; NULL -> null.

Comparison is exact, but tolerant of representation where the contract allows:
decimals are compared by value (string or number, any trailing zeros), integers
by integer value (never through a float), floats as floats.

Usage as a CLI:
  jsoncmp.py EXPECTED.jsonl ACTUAL.jsonl [--meta EXPECTED.meta.json] [--key a,b]
exit 0 if equal, 1 (and a diff on stdout) if not.
"""
from __future__ import annotations

import argparse
import json
import sys
from decimal import Decimal, InvalidOperation
from pathlib import Path

MAX_ITEMS = 25


def read_jsonl(path) -> list[dict]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as e:
                raise SystemExit(f"{path}:{n}: not JSON: {e}: {line[:200]!r}")
    return rows


def load_meta(expected_path) -> dict | None:
    """expected/<t>.jsonl -> expected/<t>.meta.json if present."""
    p = Path(expected_path)
    name = p.name
    for suffix in (".initial.jsonl", ".jsonl"):
        if name.endswith(suffix):
            m = p.with_name(name[: -len(suffix)] + ".meta.json")
            if m.exists():
                return json.loads(m.read_text(encoding="utf-8"))
    return None


def _as_decimal(v):
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return Decimal(repr(v)) if isinstance(v, float) else Decimal(v)
    if isinstance(v, str):
        try:
            d = Decimal(v.strip())
        except InvalidOperation:
            return None
        return d if d.is_finite() else None
    return None


def values_equal(exp, act, ty: str | None) -> bool:
    if exp is None or act is None:
        return exp is None and act is None
    t = (ty or "").lower()
    if t.startswith("decimal"):
        a, b = _as_decimal(exp), _as_decimal(act)
        return a is not None and b is not None and a == b
    if t in ("int", "long"):
        if isinstance(exp, bool) or isinstance(act, bool):
            return False

        def as_int(v):
            if isinstance(v, int):
                return v
            if isinstance(v, float) and v.is_integer():
                return int(v)
            return None

        a, b = as_int(exp), as_int(act)
        return a is not None and a == b
    if t in ("float", "double"):
        if isinstance(exp, bool) or isinstance(act, bool):
            return False
        if isinstance(exp, (int, float)) and isinstance(act, (int, float)):
            return float(exp) == float(act)
        return False
    if t == "binary" and isinstance(exp, str) and isinstance(act, str):
        return exp.lower() == act.lower()
    if not t:
        # Unknown type: numbers compare by value, everything else exactly.
        if isinstance(exp, bool) or isinstance(act, bool):
            return exp is act
        if isinstance(exp, (int, float)) and isinstance(act, (int, float)):
            if isinstance(exp, int) and isinstance(act, int):
                return exp == act
            return float(exp) == float(act)
    return type(exp) is type(act) and exp == act


def _key_of(row: dict, key: list[str] | None, idx: int, types: dict | None = None):
    if not key:
        return ("#", idx)
    out = []
    for k in key:
        v = row.get(k)
        numeric = not isinstance(v, str) or (types or {}).get(k, "").startswith("decimal")
        d = _as_decimal(v) if numeric else None
        out.append(d if d is not None else v)
    return tuple(out)


def _fmt_key(key: list[str] | None, k) -> str:
    if not key:
        return f"row {k[1]}"
    def show(v):
        if isinstance(v, Decimal):
            return str(int(v)) if v == v.to_integral_value() else str(v)
        return json.dumps(v, ensure_ascii=False)
    return ", ".join(f"{n}={show(v)}" for n, v in zip(key, k))


def _short(v) -> str:
    s = json.dumps(v, ensure_ascii=False)
    return s if len(s) <= 200 else s[:200] + "…"


def compare(expected: list[dict], actual: list[dict], key: list[str] | None = None,
            types: dict[str, str] | None = None, check_order: bool = True) -> list[str]:
    """Return a list of human-readable differences (empty list = equal)."""
    types = {k.lower(): v for k, v in (types or {}).items()}
    key = [k.lower() for k in key] if key else None
    diffs: list[str] = []
    exp_map, act_map = {}, {}
    for name, rows, m in (("expected", expected, exp_map), ("actual", actual, act_map)):
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                diffs.append(f"{name} row {i} is not a JSON object: {_short(r)}")
                continue
            k = _key_of(r, key, i, types)
            if k in m:
                diffs.append(f"{name} has duplicate key {_fmt_key(key, k)}")
            m[k] = r
    missing = [k for k in exp_map if k not in act_map]
    extra = [k for k in act_map if k not in exp_map]
    if missing:
        diffs.append(f"{len(missing)} row(s) missing from actual:")
        for k in missing[:MAX_ITEMS]:
            diffs.append(f"  - {_fmt_key(key, k)}: {_short(exp_map[k])}")
        if len(missing) > MAX_ITEMS:
            diffs.append(f"  ... and {len(missing) - MAX_ITEMS} more")
    if extra:
        diffs.append(f"{len(extra)} unexpected row(s) in actual:")
        for k in extra[:MAX_ITEMS]:
            diffs.append(f"  + {_fmt_key(key, k)}: {_short(act_map[k])}")
        if len(extra) > MAX_ITEMS:
            diffs.append(f"  ... and {len(extra) - MAX_ITEMS} more")
    exp_cols = set().union(*(r.keys() for r in expected)) if expected else set(types)
    act_cols = set().union(*(r.keys() for r in actual)) if actual else set()
    if actual and expected:
        if exp_cols - act_cols:
            diffs.append(f"columns missing from actual: {sorted(exp_cols - act_cols)}")
        if act_cols - exp_cols:
            diffs.append(f"unexpected columns in actual: {sorted(act_cols - exp_cols)}")
    n_diff_rows = 0
    shown = 0
    for k, er in exp_map.items():
        ar = act_map.get(k)
        if ar is None:
            continue
        cols = []
        for c in sorted(set(er) | set(ar)):
            if c not in ar:
                cols.append(f"{c}: expected {_short(er[c])}, column absent in actual")
            elif c not in er:
                cols.append(f"{c}: not expected, actual {_short(ar[c])}")
            elif not values_equal(er[c], ar[c], types.get(c)):
                cols.append(f"{c}: expected {_short(er[c])}, actual {_short(ar[c])}")
        if cols:
            n_diff_rows += 1
            if shown < MAX_ITEMS:
                shown += 1
                diffs.append(f"row {_fmt_key(key, k)} differs: " + "; ".join(cols))
    if n_diff_rows > shown:
        diffs.append(f"... and {n_diff_rows - shown} more differing row(s)")
    if n_diff_rows:
        diffs.append(f"{n_diff_rows} row(s) differ")
    if check_order and key and not diffs:
        ak = [_key_of(r, key, i, types) for i, r in enumerate(actual)]
        try:
            if ak != sorted(ak):
                diffs.append("rows are not sorted by primary key " + ",".join(key))
        except TypeError:
            pass
    if diffs:
        diffs.insert(0, f"expected {len(expected)} row(s), actual {len(actual)} row(s)")
    return diffs


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("expected")
    ap.add_argument("actual")
    ap.add_argument("--meta", help="meta.json with primary_key and columns (default: next to EXPECTED)")
    ap.add_argument("--key", help="comma-separated primary key columns")
    a = ap.parse_args(argv)
    meta = json.loads(Path(a.meta).read_text()) if a.meta else load_meta(a.expected)
    key = a.key.split(",") if a.key else (meta or {}).get("primary_key")
    types = (meta or {}).get("columns")
    d = compare(read_jsonl(a.expected), read_jsonl(a.actual), key, types)
    if d:
        print("\n".join(d))
        return 1
    print("equal")
    return 0


if __name__ == "__main__":
    sys.exit(main())
