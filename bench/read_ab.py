"""read_ab.py: DuckDB reads of one table's metadata versions, interleaved, against the same rows
as one plain Parquet file and as a fresh table (a checkpoint folder of `bench/read`).

    bench/.venv/bin/python bench/read_ab.py SNAPDIR LABEL=METADATA_JSON [LABEL=...]

SNAPDIR holds `plain.parquet` and `wh/` (the fresh table), as `bench/read` leaves them
(`<work>/cases/<label>/snap-<files>-<phase>`). Each round runs every source's scan
(`count(*), sum(customer_id), sum(length(note))`) in turn, and every other round a point lookup
of 10 keys sampled from the plain file; medians of 21 rounds. Used for section 10's snapshot
retention figures: the metadata.json before and after `expire --retain-max N` of the same table
(the current snapshot, and so the rows, the same).
"""
import glob
import statistics
import sys
import time

import peers

ROUNDS = 21
SCAN = "select count(*), sum(customer_id), sum(length(note)) from {}"


def main() -> None:
    snap = sys.argv[1]
    fresh = sorted(glob.glob(f"{snap}/wh/*/*/metadata/*.metadata.json"))[-1]
    plain = f"{snap}/plain.parquet"
    con = peers.duckdb_connect()
    srcs = {"plain": f"read_parquet('{plain}')", "fresh": f"iceberg_scan('{fresh}')"}
    for a in sys.argv[2:]:
        k, v = a.split("=", 1)
        srcs[k] = f"iceberg_scan('{v}')"
    keys = [r[0] for r in con.execute(
        f"select order_id from read_parquet('{plain}') using sample 10 rows (reservoir, 7)"
    ).fetchall()]
    scan = {k: [] for k in srcs}
    look = {k: [] for k in srcs if k != "plain"}
    for f in srcs.values():
        con.execute(SCAN.format(f)).fetchall()
    for r in range(ROUNDS):
        for k, f in srcs.items():
            s = time.perf_counter()
            con.execute(SCAN.format(f)).fetchall()
            scan[k].append(time.perf_counter() - s)
            if k != "plain" and r % 2 == 0:
                s = time.perf_counter()
                for key in keys:
                    got = con.execute(f"select * from {f} where order_id = {key}").fetchall()
                    assert len(got) == 1, (k, key, got)
                look[k].append((time.perf_counter() - s) / len(keys))
    p = statistics.median(scan["plain"])
    fl = statistics.median(look["fresh"])
    for k in srcs:
        m = statistics.median(scan[k])
        line = f"{k:10s} scan {m * 1e3:6.1f} ms {m / p:.2f}x plain"
        if k in look:
            lk = statistics.median(look[k])
            line += f" | lookup {lk * 1e3:6.2f} ms {lk / fl:.2f}x fresh"
        print(line)


if __name__ == "__main__":
    main()
