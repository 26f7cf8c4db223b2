#!/usr/bin/env python3
"""moto_server: a local S3 + Glue emulator (moto in server mode) for tests/aws/lambda.rs.

  moto_server.py serve [--host 127.0.0.1] [--port 0] [--port-file FILE] [--update-table-delay-ms N]
  moto_server.py selftest
  moto_server.py check-table --endpoint URL --table DB.TABLE --expected ROWS.jsonl [--meta META.json]
  moto_server.py check-s3tables --endpoint URL --bucket-arn ARN --table NS.TABLE --expected ROWS.jsonl [--meta META.json]
  moto_server.py vending-setup --endpoint URL --bucket B

serve      Every moto backend on one loopback port (S3 path-style and Glue among them). Prints
           `moto_server listening on 127.0.0.1:PORT` and, with --port-file, writes the port to FILE
           (atomically, once the socket is bound). Runs until killed.
selftest   Starts the server in-process and checks with boto3 what the tests rely on: S3 objects,
           Glue VersionId enforcement (sequential and with racing threads), the control endpoint,
           and `check-table` on a table PyIceberg itself writes through Glue.
check-table
           Reads DB.TABLE with PyIceberg's GlueCatalog pointed at the emulator (S3 through pyarrow,
           path-style) and compares it with ROWS.jsonl in the JSON contract (check_readers.py /
           jsoncmp.py). Exit 0 if equal, 1 with a diff otherwise.

vending-setup
           For an Iceberg REST catalog that vends storage credentials (tests/e2e/rest.rs): IAM
           user `admin` (every action allowed), user `nobody` (no policy), role `vending` (S3
           allowed; any principal may assume it), bucket B; then turns IAM authorization on.
           Prints {"admin": [key, secret], "nobody": [key, secret], "role_arn": ARN}.

check-s3tables
           Reads NS.TABLE of an S3 Tables table bucket as readers without an S3 Tables catalog
           do: PyIceberg's StaticTable and DuckDB's iceberg_scan (httpfs) on the metadata
           location the s3tables API returns; compared with ROWS.jsonl like check-table.

What moto 5.x gets wrong and this fixes (S3 Tables: the same for UpdateTableMetadataLocation's
version token, checked and set without a lock, and its answer's `namespace`, a string where the
API has a list, which SDKs refuse to parse): Glue `UpdateTable` ignores `VersionId`, so a writer that
read version N can overwrite version N+1. Real Glue refuses such a write with
`ConcurrentModificationException`; every catalog built on Glue (Iceberg's GlueCatalog, PyIceberg,
dms2iceberg) relies on that for its compare-and-swap. Here `UpdateTable` with a `VersionId` other
than the table's current version is refused with that error, the check and the update are atomic,
and every successful update bumps the version (moto's own bookkeeping). `UpdateTable` without a
`VersionId` is an unconditional write, as on Glue.

Control endpoint (paths no bucket can have; not part of any AWS API):
  GET  /_dms2iceberg/stats   {"update_table": {"applied": n, "refused": n, "unversioned": n},
                              "requests": {"glue GetTable": n, "s3 GET": n, ...}, ...}
  POST /_dms2iceberg/config  {"update_table_delay_ms": N}: every UpdateTable waits N ms after it
                             arrives and before its atomic check-and-write, which widens the
                             window in which two writers race from the same base
                             (tests/aws/lambda.rs uses it to make the VersionId refusal
                             happen, not just possible).
  POST /_dms2iceberg/config  {"enforce_auth": true}: from then on every request must be signed
                             by an access key moto's IAM knows and be allowed by its policies
                             (moto's IAM authorization, otherwise off); false turns it off again.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

REGION = "us-east-1"
CONTROL_PREFIX = "/_dms2iceberg/"

_lock = threading.Lock()
STATE = {
    "update_table_delay_ms": 0,
    "update_table": {"applied": 0, "refused": 0, "unversioned": 0},
    # S3 Tables UpdateTableMetadataLocation: applied / refused for a stale version token
    "s3tables_update": {"applied": 0, "refused": 0},
    "refusals": [],  # last few refused writes, for debugging
    "requests": {},  # "glue GetTable" / "s3 GET" / ... -> count
}


def patch_glue() -> None:
    """Make moto's Glue UpdateTable honour VersionId like AWS Glue."""
    from moto.core.responses import EmptyResult
    from moto.glue.exceptions import GlueClientError
    from moto.glue.responses import GlueResponse

    class ConcurrentModificationException(GlueClientError):
        def __init__(self, msg: str):
            super().__init__("ConcurrentModificationException", msg)

    def update_table(self):  # replaces GlueResponse.update_table
        params = self.parameters
        database_name = params.get("DatabaseName")
        table_input = params.get("TableInput") or {}
        table_name = table_input.get("Name")
        version_id = params.get("VersionId")
        delay = STATE["update_table_delay_ms"]
        if delay:
            time.sleep(delay / 1000.0)
        with _lock:
            table = self.glue_backend.get_table(database_name, table_name)
            current = str(table._current_version)
            if version_id is not None and str(version_id) != current:
                STATE["update_table"]["refused"] += 1
                STATE["refusals"] = (STATE["refusals"] + [{
                    "table": f"{database_name}.{table_name}", "version_id": str(version_id),
                    "current": current}])[-20:]
                raise ConcurrentModificationException(
                    f"Update table failed due to concurrent modifications: table "
                    f"{database_name}.{table_name} is at version {current}, the update was "
                    f"based on version {version_id}.")
            if version_id is None:
                STATE["update_table"]["unversioned"] += 1
            self.glue_backend.update_table(database_name, table_name, table_input)
            STATE["update_table"]["applied"] += 1
        return EmptyResult()

    GlueResponse.update_table = update_table


def patch_s3tables() -> None:
    """Make moto's S3 Tables UpdateTableMetadataLocation an atomic check-and-set on the version
    token (moto checks and sets without a lock, so two racing writers from the same token can
    both win), answered in the shape of the real API (`namespace` a list, `tableARN`)."""
    from urllib.parse import unquote

    from moto.s3tables.exceptions import VersionTokenMismatch
    from moto.s3tables.responses import S3TablesResponse

    def update_table_metadata_location(self):
        _, arn, namespace, name, _ = self.raw_path.lstrip("/").split("/")
        arn = unquote(arn)
        body = json.loads(self.body)
        delay = STATE["update_table_delay_ms"]
        if delay:
            time.sleep(delay / 1000.0)
        with _lock:
            table = self.s3tables_backend.get_table(table_bucket_arn=arn, namespace=namespace, name=name)
            if table.version_token != body["versionToken"]:
                STATE["s3tables_update"]["refused"] += 1
                raise VersionTokenMismatch()
            table.update_metadata_location(metadata_location=body["metadataLocation"],
                                           version_token=body["versionToken"])
            STATE["s3tables_update"]["applied"] += 1
        return 200, self.default_response_headers, json.dumps({
            "name": table.name, "tableARN": table.arn, "namespace": [namespace],
            "versionToken": table.version_token, "metadataLocation": table.metadata_location})

    S3TablesResponse.update_table_metadata_location = update_table_metadata_location


def control_app(inner):
    """WSGI middleware: /_dms2iceberg/* is ours, everything else goes to moto."""

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if not path.startswith(CONTROL_PREFIX):
            target = environ.get("HTTP_X_AMZ_TARGET", "")
            what = f"glue {target.split('.', 1)[-1]}" if target.startswith("AWSGlue.") else \
                f"{'other ' + target if target else 's3 ' + environ.get('REQUEST_METHOD', '?')}"
            with _lock:
                STATE["requests"][what] = STATE["requests"].get(what, 0) + 1
            return inner(environ, start_response)
        what = path[len(CONTROL_PREFIX):]
        method = environ.get("REQUEST_METHOD", "GET")
        status, body = "404 Not Found", {"error": f"unknown control path {path}"}
        if what == "stats" and method == "GET":
            with _lock:
                status, body = "200 OK", json.loads(json.dumps(STATE))
        elif what == "config" and method == "POST":
            n = int(environ.get("CONTENT_LENGTH") or 0)
            req = json.loads(environ["wsgi.input"].read(n) or b"{}")
            with _lock:
                if "update_table_delay_ms" in req:
                    STATE["update_table_delay_ms"] = int(req["update_table_delay_ms"])
                if "enforce_auth" in req:
                    from moto import settings
                    # moto authorizes once this many requests have been served (0: all).
                    settings.INITIAL_NO_AUTH_ACTION_COUNT = 0 if req["enforce_auth"] else float("inf")
                status, body = "200 OK", {"update_table_delay_ms": STATE["update_table_delay_ms"]}
        data = json.dumps(body).encode()
        start_response(status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
        return [data]

    return app


def make_server(host: str, port: int, quiet: bool = False):
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server as wz_make_server

    patch_glue()
    patch_s3tables()
    handler = MotoRequestHandler
    if quiet:
        class QuietHandler(MotoRequestHandler):
            def log_request(self, *a, **k):
                pass
        handler = QuietHandler
    app = control_app(DomainDispatcherApplication(create_backend_app))
    return wz_make_server(host, port, app, threaded=True, request_handler=handler)


def write_port_file(path: str, port: int) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    Path(tmp).write_text(f"{port}\n")
    os.replace(tmp, path)


def cmd_serve(a) -> int:
    STATE["update_table_delay_ms"] = a.update_table_delay_ms
    server = make_server(a.host, a.port, quiet=a.quiet)
    host, port = server.server_address[:2]
    print(f"moto_server listening on {host}:{port}", flush=True)
    if a.port_file:
        write_port_file(a.port_file, port)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    return 0


# --------------------------------------------------------------------------------------------
# Reading a table through Glue with PyIceberg


def glue_catalog(endpoint: str):
    from pyiceberg.catalog.glue import GlueCatalog
    creds = {"access-key-id": "testing", "secret-access-key": "testing", "region": REGION}
    props = {"glue.endpoint": endpoint, "s3.endpoint": endpoint, "s3.path-style-access": "true",
             "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    for k, v in creds.items():
        props[f"glue.{k}"] = v
        props[f"s3.{k}"] = v
    return GlueCatalog("glue", **props)


def cmd_check_table(a) -> int:
    import check_readers
    import jsoncmp
    meta = json.loads(Path(a.meta).read_text()) if a.meta else jsoncmp.load_meta(a.expected)
    key = a.key.split(",") if a.key else (meta or {}).get("primary_key")
    types = (meta or {}).get("columns")
    expected = jsoncmp.read_jsonl(a.expected)
    cat = glue_catalog(a.endpoint)
    t = cat.load_table(a.table)
    scan = t.scan(snapshot_id=a.snapshot_id) if a.snapshot_id is not None else t.scan()
    rows = check_readers.sort_rows(check_readers.arrow_to_rows(scan.to_arrow()), key, types)
    diffs = jsoncmp.compare(expected, rows, key, types)
    where = f"{a.table} (metadata {t.metadata_location})"
    if diffs:
        print(f"[pyiceberg-glue] {where} differs from {a.expected}:")
        print("\n".join("    " + d for d in diffs))
        return 1
    print(f"[pyiceberg-glue] {where}: {len(rows)} row(s) as expected")
    return 0


def cmd_check_s3tables(a) -> int:
    """Reads NS.TABLE of table bucket ARN as readers without an S3 Tables catalog do: the
    metadata location the s3tables API returns, opened as a static table by PyIceberg, and by
    DuckDB's iceberg_scan over httpfs; both compared with ROWS.jsonl."""
    import boto3
    import check_readers
    import jsoncmp
    from pyiceberg.table import StaticTable

    meta = json.loads(Path(a.meta).read_text()) if a.meta else jsoncmp.load_meta(a.expected)
    key = a.key.split(",") if a.key else (meta or {}).get("primary_key")
    types = (meta or {}).get("columns")
    expected = jsoncmp.read_jsonl(a.expected)
    ns, name = a.table.split(".", 1)
    client = boto3.client("s3tables", endpoint_url=a.endpoint, region_name=REGION,
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    location = client.get_table_metadata_location(tableBucketARN=a.bucket_arn, namespace=ns,
                                                  name=name)["metadataLocation"]
    props = {"s3.endpoint": a.endpoint, "s3.path-style-access": "true", "s3.region": REGION,
             "s3.access-key-id": "testing", "s3.secret-access-key": "testing",
             "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO"}
    failed = 0
    t = StaticTable.from_metadata(location, properties=props)
    readers = {"pyiceberg-static": lambda: check_readers.arrow_to_rows(t.scan().to_arrow())}

    def duck():
        con = check_readers.duckdb_connect()
        con.execute(f"LOAD '{check_readers.extension_file('duckdb_extension_httpfs')}'")
        host = a.endpoint.split("://", 1)[1]
        con.execute(f"CREATE SECRET moto (TYPE s3, KEY_ID 'testing', SECRET 'testing', "
                    f"REGION '{REGION}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)")
        return check_readers.arrow_to_rows(
            con.execute("SELECT * FROM iceberg_scan(?)", [location]).fetch_arrow_table())

    readers["duckdb"] = duck
    for reader, read in readers.items():
        rows = check_readers.sort_rows(read(), key, types)
        diffs = jsoncmp.compare(expected, rows, key, types)
        if diffs:
            print(f"[{reader}] {a.table} ({location}) differs from {a.expected}:")
            print("\n".join("    " + d for d in diffs))
            failed += 1
        else:
            print(f"[{reader}] {a.table} ({location}): {len(rows)} row(s) as expected")
    return 1 if failed else 0


def cmd_vending_setup(a) -> int:
    import boto3
    import urllib.request

    def client(svc, key="setup", secret="setup"):
        return boto3.client(svc, endpoint_url=a.endpoint, region_name=REGION,
                            aws_access_key_id=key, aws_secret_access_key=secret)

    def doc(statement):
        return json.dumps({"Version": "2012-10-17", "Statement": [statement]})

    iam = client("iam")
    out = {}
    for user, allowed in (("admin", True), ("nobody", False)):
        iam.create_user(UserName=user)
        if allowed:
            iam.put_user_policy(UserName=user, PolicyName="all", PolicyDocument=doc(
                {"Effect": "Allow", "Action": "*", "Resource": "*"}))
        k = iam.create_access_key(UserName=user)["AccessKey"]
        out[user] = [k["AccessKeyId"], k["SecretAccessKey"]]
    role = iam.create_role(RoleName="vending", AssumeRolePolicyDocument=doc(
        {"Effect": "Allow", "Principal": {"AWS": "*"}, "Action": "sts:AssumeRole"}))["Role"]
    iam.put_role_policy(RoleName="vending", PolicyName="s3", PolicyDocument=doc(
        {"Effect": "Allow", "Action": "s3:*", "Resource": "*"}))
    out["role_arn"] = role["Arn"]
    client("s3", *out["admin"]).create_bucket(Bucket=a.bucket)
    req = urllib.request.Request(f"{a.endpoint}{CONTROL_PREFIX}config",
                                 data=b'{"enforce_auth": true}', method="POST")
    urllib.request.urlopen(req).read()
    print(json.dumps(out))
    return 0


# --------------------------------------------------------------------------------------------
# Self-test


def cmd_selftest(a) -> int:
    import tempfile
    import urllib.request

    import boto3
    import pyarrow as pa
    from botocore.config import Config
    from botocore.exceptions import ClientError

    server = make_server("127.0.0.1", 0, quiet=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    ep = f"http://127.0.0.1:{port}"
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "testing")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "testing")
    cfg = Config(s3={"addressing_style": "path"}, retries={"max_attempts": 1})
    s3 = boto3.client("s3", endpoint_url=ep, region_name=REGION, config=cfg)
    glue = boto3.client("glue", endpoint_url=ep, region_name=REGION, config=cfg)
    checks = 0

    def check(cond, what):
        nonlocal checks
        if not cond:
            raise AssertionError(what)
        checks += 1

    # S3
    s3.create_bucket(Bucket="landing")
    s3.put_object(Bucket="landing", Key="dms/sales/order items/LOAD00000001.csv", Body=b"Op,id\nI,1\n")
    got = s3.get_object(Bucket="landing", Key="dms/sales/order items/LOAD00000001.csv")["Body"].read()
    check(got == b"Op,id\nI,1\n", f"S3 round trip: {got!r}")
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket="landing", Prefix="dms/sales/")["Contents"]]
    check(keys == ["dms/sales/order items/LOAD00000001.csv"], f"S3 listing: {keys}")

    # Glue VersionId, sequentially
    glue.create_database(DatabaseInput={"Name": "db"})
    glue.create_table(DatabaseName="db", TableInput={"Name": "t", "Parameters": {"v": "0"}})

    def get():
        t = glue.get_table(DatabaseName="db", Name="t")["Table"]
        return t["VersionId"], t["Parameters"]["v"]

    def update(v, version_id):
        kw = {} if version_id is None else {"VersionId": version_id}
        glue.update_table(DatabaseName="db", TableInput={"Name": "t", "Parameters": {"v": v}}, **kw)

    def refused(v, version_id):
        try:
            update(v, version_id)
        except ClientError as e:
            return e.response["Error"]["Code"]
        return None

    v0, p = get()
    check(p == "0", "initial parameters")
    update("1", v0)
    v1, p = get()
    check(p == "1" and v1 != v0, f"update from the current version applies and bumps it ({v0} -> {v1})")
    code = refused("stale", v0)
    check(code == "ConcurrentModificationException", f"a stale VersionId is refused, got {code}")
    check(get() == (v1, "1"), "a refused update changes nothing")
    check(refused("bogus", "999") == "ConcurrentModificationException", "an unknown VersionId is refused")
    update("2", None)
    v2, p = get()
    check(p == "2" and v2 != v1, "an update without VersionId is unconditional and bumps the version")
    update("3", v2)
    check(get()[1] == "3", "update from the new current version")

    # Glue VersionId, racing threads from the same base: exactly one wins
    STATE["update_table_delay_ms"] = 30
    base, _ = get()
    results = []
    barrier = threading.Barrier(6)

    def racer(i):
        c = boto3.client("glue", endpoint_url=ep, region_name=REGION, config=cfg)
        barrier.wait()
        try:
            c.update_table(DatabaseName="db", TableInput={"Name": "t", "Parameters": {"v": f"r{i}"}},
                           VersionId=base)
            results.append(("ok", i))
        except ClientError as e:
            results.append((e.response["Error"]["Code"], i))

    threads = [threading.Thread(target=racer, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    STATE["update_table_delay_ms"] = 0
    winners = [i for r, i in results if r == "ok"]
    losers = [r for r, _ in results if r != "ok"]
    check(len(winners) == 1, f"exactly one of 6 racing writers wins: {results}")
    check(set(losers) == {"ConcurrentModificationException"}, f"the others are refused: {results}")
    check(get()[1] == f"r{winners[0]}", "the winner's write is what the table holds")

    # control endpoint
    with urllib.request.urlopen(f"{ep}/_dms2iceberg/stats") as r:
        stats = json.load(r)
    check(stats["update_table"]["refused"] >= 7, f"stats count refusals: {stats}")
    check(stats["requests"].get("glue UpdateTable", 0) == 11 and stats["requests"].get("s3 PUT", 0) >= 2,
          f"stats count requests by service and action: {stats['requests']}")
    req = urllib.request.Request(f"{ep}/_dms2iceberg/config", data=b'{"update_table_delay_ms": 5}',
                                 method="POST")
    with urllib.request.urlopen(req) as r:
        check(json.load(r)["update_table_delay_ms"] == 5, "config sets the delay")
    STATE["update_table_delay_ms"] = 0

    # check-table on a table PyIceberg writes itself through Glue (its commits use VersionId)
    from pyiceberg.schema import Schema
    from pyiceberg.types import LongType, NestedField, StringType
    os.environ.setdefault("AWS_REGION", REGION)
    s3.create_bucket(Bucket="pywarehouse")
    cat = glue_catalog(ep)
    cat.create_namespace("pydb")
    schema = Schema(NestedField(1, "id", LongType(), required=True), NestedField(2, "name", StringType()),
                    identifier_field_ids=[1])
    tbl = cat.create_table("pydb.people", schema=schema, location="s3://pywarehouse/pydb.db/people")
    arrow_schema = pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("name", pa.string())])
    tbl.append(pa.Table.from_pylist([{"id": 2, "name": "b"}, {"id": 1, "name": "a"}], schema=arrow_schema))
    tbl.append(pa.Table.from_pylist([{"id": 3, "name": None}], schema=arrow_schema))
    gt = glue.get_table(DatabaseName="pydb", Name="people")["Table"]
    check(gt["Parameters"].get("metadata_location") == cat.load_table("pydb.people").metadata_location,
          "PyIceberg commits through the patched UpdateTable")
    with tempfile.TemporaryDirectory() as d:
        good = Path(d, "good.jsonl")
        good.write_text('{"id": 1, "name": "a"}\n{"id": 2, "name": "b"}\n{"id": 3, "name": null}\n')
        bad = Path(d, "bad.jsonl")
        bad.write_text('{"id": 1, "name": "a"}\n{"id": 2, "name": "x"}\n')
        base_args = ["--endpoint", ep, "--table", "pydb.people", "--key", "id"]
        import contextlib
        import io
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            rc_good = main(["check-table", *base_args, "--expected", str(good)])
            rc_bad = main(["check-table", *base_args, "--expected", str(bad)])
        check(rc_good == 0, f"check-table accepts the right rows:\n{out.getvalue()}")
        check(rc_bad == 1 and "differs" in out.getvalue(), f"check-table reports a difference:\n{out.getvalue()}")
    server.shutdown()
    print(f"moto_server selftest: {checks} checks passed (S3, Glue VersionId enforcement, racing "
          f"writers, control endpoint, PyIceberg through Glue)")
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="run the emulator")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--update-table-delay-ms", type=int, default=0)
    p.add_argument("--quiet", action="store_true", help="no request log")
    sub.add_parser("selftest", help="check the emulator and the VersionId patch")
    p = sub.add_parser("check-table", help="read a Glue table with PyIceberg and compare")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--table", required=True, help="database.table")
    p.add_argument("--expected", required=True)
    p.add_argument("--meta")
    p.add_argument("--key")
    p.add_argument("--snapshot-id", type=int)
    p = sub.add_parser("check-s3tables",
                       help="read an S3 Tables table (PyIceberg static table, DuckDB) and compare")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket-arn", required=True)
    p.add_argument("--table", required=True, help="NAMESPACE.TABLE")
    p.add_argument("--expected", required=True)
    p.add_argument("--meta")
    p.add_argument("--key")
    p = sub.add_parser("vending-setup",
                       help="users, a role and a bucket for credential vending; IAM auth on")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--bucket", required=True)
    a = ap.parse_args(argv)
    return {"serve": cmd_serve, "selftest": cmd_selftest, "check-table": cmd_check_table,
            "check-s3tables": cmd_check_s3tables, "vending-setup": cmd_vending_setup}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
