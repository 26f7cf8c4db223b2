#!/usr/bin/env python3
"""Apache Iceberg's Java library (Spark 3.5 + iceberg-spark-runtime 1.10) as an independent
reader and writer of dms2iceberg tables: one JVM, kept for a whole test file.

  spark_session.py serve      # requests on stdin, one JSON object per line; answers on stdout
  spark_session.py selftest   # start Spark, write and read a small table, exit 0 if fine

Run with the Spark venv's Python (scripts/test sets DMS2ICEBERG_SPARK_PYTHON and
DMS2ICEBERG_SPARK_JARS: the Iceberg runtime jar, the relocated Jackson and HttpClient 5 jars
built by relocate_jars.py, and Debian's SQLite JDBC driver).

Requests (`id` is echoed back; every answer has `ok` and, when not ok, `error`):
  {"op": "catalog", "name": N, "warehouse": W, "options": {...}}
        register Spark catalog N: Iceberg's JdbcCatalog on W/catalog.db (catalog name N, as
        JdbcCatalog uses the Spark catalog's name in its queries), warehouse file:W;
        `options` adds or overrides catalog properties
  {"op": "rest_catalog", "name": N, "uri": U, "token": T}
        register Spark catalog N: Iceberg's RESTCatalog at U, the bearer token T
  {"op": "sql", "statements": [S, ...]}
        run each statement; `results`: the rows of each, in the JSON contract
  {"op": "check", "source": SRC, "expected": FILE, "meta": META}
        read SRC, compare with the expected JSON-lines file (primary key and types from META):
        `rows` read, `diff` (empty when equal). SRC is {"table": "cat.ns.t"} or
        {"metadata": "<metadata.json location>"}, with an optional "snapshot_id".
  {"op": "rows", "source": SRC}
        `rows`: SRC's rows in the JSON contract (unsorted)
  {"op": "remove_orphans", "table": "cat.ns.t"}
        Iceberg's DeleteOrphanFiles action, files of any age (the SQL procedure refuses less
        than a day): `deleted`, the locations it removed

stdout carries only answers: everything else the JVM or Spark prints goes to stderr.
"""
from __future__ import annotations

import datetime as dt
import decimal
import json
import os
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import jsoncmp  # noqa: E402


def start_spark():
    # Timestamps come back as wall-clock values of the process time zone: make it UTC, as
    # the JSON contract is.
    os.environ["TZ"] = "UTC"
    time.tzset()
    jars = os.environ.get("DMS2ICEBERG_SPARK_JARS", "")
    if not jars:
        raise SystemExit("DMS2ICEBERG_SPARK_JARS is not set (scripts/test sets it up)")
    for j in jars.split(","):
        if not Path(j).is_file():
            raise SystemExit(f"DMS2ICEBERG_SPARK_JARS: {j} does not exist (run scripts/test)")
    from pyspark.sql import SparkSession
    b = (SparkSession.builder.master("local[2]").appName("dms2iceberg-tests")
         .config("spark.driver.memory", os.environ.get("DMS2ICEBERG_SPARK_MEMORY", "768m"))
         .config("spark.jars", jars)
         .config("spark.sql.extensions",
                 "org.apache.iceberg.spark.extensions.IcebergSparkSessionExtensions")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.driver.extraJavaOptions", "-Duser.timezone=UTC -XX:+UseSerialGC")
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.default.parallelism", "2")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1"))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def to_json(v, t):
    """One Spark value (collect()) -> the JSON contract (see jsoncmp.py)."""
    from pyspark.sql import types as T
    if v is None:
        return None
    if isinstance(t, T.DecimalType):
        return format(decimal.Decimal(v), f".{t.scale}f")
    if isinstance(t, T.BooleanType):
        return bool(v)
    if isinstance(t, (T.ByteType, T.ShortType, T.IntegerType, T.LongType)):
        return int(v)
    if isinstance(t, (T.FloatType, T.DoubleType)):
        return float(v)
    if isinstance(t, T.TimestampType):  # Iceberg timestamptz
        if v.tzinfo is not None:
            v = v.astimezone(dt.timezone.utc).replace(tzinfo=None)
        return v.strftime("%Y-%m-%d %H:%M:%S.%f") + "+00:00"
    if hasattr(T, "TimestampNTZType") and isinstance(t, T.TimestampNTZType):  # Iceberg timestamp
        return v.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(t, T.DateType):
        return v.isoformat()
    if isinstance(t, T.BinaryType):
        return bytes(v).hex()
    if isinstance(v, (str, int, float, bool)):
        return v
    return str(v)


def df_rows(df) -> list[dict]:
    fields = [(f.name.lower(), f.dataType) for f in df.schema.fields]
    return [{n: to_json(r[i], t) for i, (n, t) in enumerate(fields)} for r in df.collect()]


class Server:
    def __init__(self, spark):
        self.spark = spark

    def source_df(self, src: dict):
        snap = src.get("snapshot_id")
        if "metadata" in src:
            r = self.spark.read.format("iceberg")
            if snap is not None:
                r = r.option("snapshot-id", int(snap))
            return r.load(src["metadata"])
        q = f"SELECT * FROM {src['table']}"
        if snap is not None:
            q += f" VERSION AS OF {int(snap)}"
        return self.spark.sql(q)

    def op_catalog(self, req):
        name = req["name"]
        wh = Path(req["warehouse"]).resolve()
        props = {
            "": "org.apache.iceberg.spark.SparkCatalog",
            ".type": "jdbc",
            ".uri": f"jdbc:sqlite:{wh / 'catalog.db'}",
            ".warehouse": f"file:{wh}",
            # Never CREATE TABLE: that holds a write lock on catalog.db.
            ".jdbc.init-catalog-tables": "false",
            ".jdbc.schema-version": "V1",
            # dms2iceberg commits between Spark's queries: read the catalog every time (the
            # default caches a table's metadata for 30 s, and a cached one may name files our
            # `expire` has deleted since).
            ".cache-enabled": "false",
        }
        props.update({"." + k: str(v) for k, v in (req.get("options") or {}).items()})
        for k, v in props.items():
            self.spark.conf.set(f"spark.sql.catalog.{name}{k}", v)
        return {}

    def op_rest_catalog(self, req):
        name = req["name"]
        props = {
            "": "org.apache.iceberg.spark.SparkCatalog",
            ".type": "rest",
            ".uri": req["uri"],
            ".token": req["token"],
            ".cache-enabled": "false",
        }
        for k, v in props.items():
            self.spark.conf.set(f"spark.sql.catalog.{name}{k}", v)
        return {}

    def op_sql(self, req):
        results = []
        for s in req["statements"]:
            results.append(df_rows(self.spark.sql(s)))
        return {"results": results}

    def op_check(self, req):
        meta = json.loads(Path(req["meta"]).read_text())
        key, types = meta.get("primary_key"), meta.get("columns")
        expected = jsoncmp.read_jsonl(req["expected"])
        rows = df_rows(self.source_df(req["source"]))
        rows.sort(key=lambda r: jsoncmp._key_of(r, key, 0, types))
        return {"rows": len(rows), "diff": jsoncmp.compare(expected, rows, key, types)}

    def op_rows(self, req):
        return {"rows": df_rows(self.source_df(req["source"]))}

    def op_remove_orphans(self, req):
        jvm = self.spark._jvm
        table = jvm.org.apache.iceberg.spark.Spark3Util.loadIcebergTable(
            self.spark._jsparkSession, req["table"])
        now_ms = int(time.time() * 1000)
        result = (jvm.org.apache.iceberg.spark.actions.SparkActions.get(self.spark._jsparkSession)
                  .deleteOrphanFiles(table).olderThan(now_ms).execute())
        return {"deleted": [str(p) for p in result.orphanFileLocations()]}

    def handle(self, req: dict) -> dict:
        t0 = time.perf_counter()
        try:
            fn = getattr(self, "op_" + str(req.get("op")), None)
            if fn is None:
                out = {"ok": False, "error": f"unknown op {req.get('op')!r}"}
            else:
                out = {"ok": True, **fn(req)}
        except Exception as e:  # noqa: BLE001 - every failure goes back to the test
            msg = str(e)
            # Py4J errors carry the whole Java stack: the first lines say what happened.
            out = {"ok": False, "error": f"{type(e).__name__}: {msg[:4000]}",
                   "trace": traceback.format_exc(limit=4)[-4000:]}
        out["id"] = req.get("id")
        out["secs"] = round(time.perf_counter() - t0, 3)
        return out


def serve() -> int:
    # The protocol gets its own copy of stdout; fd 1 then points at stderr so that nothing the
    # JVM (a child process inheriting fd 1) prints can mix into the answers.
    proto = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    t0 = time.perf_counter()
    try:
        spark = start_spark()
    except BaseException as e:  # noqa: BLE001
        proto.write(json.dumps({"id": None, "ok": False, "error": f"Spark did not start: {e}"}) + "\n")
        return 1
    proto.write(json.dumps({"id": None, "ok": True, "ready": True,
                            "startup_secs": round(time.perf_counter() - t0, 3)}) + "\n")
    server = Server(spark)
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
        except json.JSONDecodeError as e:
            proto.write(json.dumps({"id": None, "ok": False, "error": f"bad request: {e}"}) + "\n")
            continue
        proto.write(json.dumps(server.handle(req)) + "\n")
    spark.stop()
    return 0


def selftest() -> int:
    import tempfile
    t0 = time.perf_counter()
    spark = start_spark()
    started = time.perf_counter() - t0
    s = Server(spark)
    with tempfile.TemporaryDirectory() as d:
        import sqlite3
        # The two tables of Iceberg's JDBC catalog schema, as dms2iceberg creates them.
        con = sqlite3.connect(Path(d) / "catalog.db")
        con.executescript("""
            CREATE TABLE iceberg_tables (catalog_name VARCHAR(255) NOT NULL,
              table_namespace VARCHAR(255) NOT NULL, table_name VARCHAR(255) NOT NULL,
              metadata_location VARCHAR(1000), previous_metadata_location VARCHAR(1000),
              iceberg_type VARCHAR(5), PRIMARY KEY (catalog_name, table_namespace, table_name));
            CREATE TABLE iceberg_namespace_properties (catalog_name VARCHAR(255) NOT NULL,
              namespace VARCHAR(255) NOT NULL, property_key VARCHAR(255) NOT NULL,
              property_value VARCHAR(1000), PRIMARY KEY (catalog_name, namespace, property_key));
        """)
        con.close()
        for r in (s.handle({"op": "catalog", "name": "selftest", "warehouse": d}),
                  s.handle({"op": "sql", "statements": [
                      "CREATE NAMESPACE selftest.ns",
                      "CREATE TABLE selftest.ns.t (id bigint, d decimal(10,2), b binary, "
                      "ts timestamp_ntz) USING iceberg",
                      "INSERT INTO selftest.ns.t VALUES (1, 1.50, X'00ff', "
                      "TIMESTAMP_NTZ'2022-03-02 11:30:01.5'), (2, NULL, NULL, NULL)",
                      "SELECT * FROM selftest.ns.t ORDER BY id"]})):
            if not r["ok"]:
                print(r, file=sys.stderr)
                return 1
        got = r["results"][-1]
        want = [{"id": 1, "d": "1.50", "b": "00ff", "ts": "2022-03-02 11:30:01.500000"},
                {"id": 2, "d": None, "b": None, "ts": None}]
        if got != want:
            print(f"selftest: read {got}, expected {want}", file=sys.stderr)
            return 1
    spark.stop()
    print(f"spark selftest ok: startup {started:.1f}s, total {time.perf_counter() - t0:.1f}s")
    return 0


def main(argv: list[str]) -> int:
    if len(argv) != 2 or argv[1] not in ("serve", "selftest"):
        print(__doc__, file=sys.stderr)
        return 2
    return serve() if argv[1] == "serve" else selftest()


if __name__ == "__main__":
    sys.exit(main(sys.argv))
