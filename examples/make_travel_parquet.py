#!/usr/bin/env python3
"""Writes the Parquet sample under examples/dms/travel/trips/ the way a DMS task with
DataFormat=parquet, IncludeOpForFullLoad=true, TimestampColumnName=dms_commit_ts,
ParquetTimestampInMillisecond=true and an AR_H_CHANGE_SEQ column writes it (needs pyarrow).
The files are committed; this script only documents how they were made."""
from decimal import Decimal
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

OUT = Path(__file__).resolve().parent / "dms" / "travel" / "trips"
SCHEMA = pa.schema([
    ("Op", pa.string()),
    ("dms_commit_ts", pa.string()),
    ("trip_id", pa.int64()),
    ("departure", pa.timestamp("ms")),
    ("route_id", pa.int32()),
    ("seats_free", pa.uint16()),
    ("fare", pa.decimal128(10, 2)),
    ("destination", pa.string()),
    ("ar_h_change_seq", pa.string()),
])


def seq(ts, n):
    return ts.strftime("%Y%m%d%H%M%S") + "00" + f"{n:019d}"


def write(name, rows):
    cols = list(zip(*rows))
    table = pa.table([pa.array(c, type=f.type) for c, f in zip(cols, SCHEMA)], schema=SCHEMA)
    pq.write_table(table, OUT / name, compression="snappy")


t0 = datetime(2022, 3, 2, 11, 30, 1)
load = [
    ("I", "2022-03-02 11:30:01.000000", 1, datetime(2022, 4, 1, 8, 0), 10, 120, Decimal("49.90"), "Lisbon", ""),
    ("I", "2022-03-02 11:30:01.000000", 2, datetime(2022, 4, 1, 9, 30), 11, 80, Decimal("89.00"), "Porto", ""),
    ("I", "2022-03-02 11:30:01.000000", 3, datetime(2022, 4, 2, 7, 15), 12, 0, Decimal("120.50"), "Faro", ""),
    ("I", "2022-03-02 11:30:01.000000", 4, datetime(2022, 4, 3, 18, 45), 10, 64, Decimal("49.90"), "Lisbon", ""),
]
t1 = datetime(2022, 3, 2, 11, 34, 1)
cdc1 = [
    ("U", "2022-03-02 11:34:01.120000", 2, datetime(2022, 4, 1, 9, 30), 11, 79, Decimal("89.00"), "Porto", seq(t1, 1)),
    ("I", "2022-03-02 11:34:01.480000", 5, datetime(2022, 4, 5, 6, 0), 13, 150, Decimal("35.00"), "Coimbra", seq(t1, 2)),
    ("U", "2022-03-02 11:34:01.900000", 2, datetime(2022, 4, 1, 9, 30), 11, 78, Decimal("95.00"), "Porto", seq(t1, 3)),
]
t2 = datetime(2022, 3, 2, 11, 35, 1)
cdc2 = [
    ("D", "2022-03-02 11:35:01.000000", 3, datetime(2022, 4, 2, 7, 15), 12, 0, Decimal("120.50"), "Faro", seq(t2, 4)),
    ("U", "2022-03-02 11:35:01.250000", 4, datetime(2022, 4, 3, 19, 0), 10, 63, Decimal("52.40"), "Lisbon", seq(t2, 5)),
]
OUT.mkdir(parents=True, exist_ok=True)
write("LOAD00000001.parquet", load)
write("20220302-1134010000.parquet", cdc1)
write("20220302-1135010000.parquet", cdc2)
