#!/usr/bin/env python3
"""moto_server: a local S3 + Glue emulator (moto in server mode) for tests/aws/lambda.rs.

  moto_server.py serve [--host 127.0.0.1] [--port 0] [--port-file FILE] [--update-table-delay-ms N]
                       [--fault-rate R] [--fault-seed N] [--fault-after-share S]
                       [--fault-buckets B1,B2] [--fault-services s3,glue,s3tables] [--quiet]
  moto_server.py selftest
  moto_server.py check-table --endpoint URL --table DB.TABLE --expected ROWS.jsonl [--meta META.json]
  moto_server.py check-s3tables --endpoint URL --bucket-arn ARN --table NS.TABLE --expected ROWS.jsonl [--meta META.json]
  moto_server.py vending-setup --endpoint URL --bucket B

serve      Every moto backend on one loopback port (S3 path-style and Glue among them). Prints
           `moto_server listening on 127.0.0.1:PORT` and, with --port-file, writes the port to FILE
           (atomically, once the socket is bound). Runs until killed. --fault-* set the fault
           injection below from the start (the same keys as the config endpoint).
selftest   Starts the server in-process and checks with boto3 what the tests rely on: S3 objects,
           Glue VersionId enforcement (sequential and with racing threads), the control endpoint,
           `check-table` on a table PyIceberg itself writes through Glue, and fault injection.
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
  POST /_dms2iceberg/config  {"faults": {"rate": 0.1, "seed": 7, "after_share": 0.5,
                             "buckets": ["warehouse"], "services": ["s3", "glue", "s3tables"]}}:
                             fault injection (below); the keys given replace the current ones,
                             `{"faults": null}` puts the defaults back (rate 0: off). Every
                             config answer (and GET /_dms2iceberg/config) carries
                             {"update_table_delay_ms": N, "faults": {the whole fault config}}.

Fault injection (off unless rate > 0; decided in the WSGI layer in front of moto, moto itself
untouched). In scope: S3 requests (path-style) on a bucket listed in `buckets` (every method,
object and bucket level); Glue GetTable, GetTables, CreateTable, UpdateTable, DeleteTable,
GetDatabase, GetDatabases, CreateDatabase; S3 Tables namespace and table actions (not the
table-bucket ones under /buckets). Never: the control paths, IAM / STS / Secrets Manager / any
other service, buckets not listed. Each in-scope request has a signature (`s3 PUT bucket/key?
query-names`, `glue UpdateTable db.table`, `s3tables UpdateTableMetadataLocation ARN/ns/name`)
and its occurrence number N (1, 2, ... per signature since the last fault config); the decision
is fault_proxy.py's: D = blake2b("{seed}\0{signature}\0{N}", 16 bytes), u1 = D[:8], u2 = D[8:]
(big-endian / 2**64); u1 < rate: fault, then u2 < after_share: "after", else "before".
  before  not passed to moto: S3 503 SlowDown (XML), Glue 400 ThrottlingException,
          S3 Tables 429 TooManyRequestsException
  after   moto serves the request to the end (the change is made, its answer read whole), then
          S3 500 InternalError, Glue 500 InternalServiceException, S3 Tables 500
          InternalServerErrorException
Stats: "faults": {"considered", "before", "after", "by": {"glue UpdateTable after": n, ...},
"last": [{"kind", "signature", "n", "status"}, ...] (50), "config"}.
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


# --------------------------------------------------------------------------------------------
# Fault injection (see the module docstring): decided in the WSGI layer, moto itself untouched.

from fault_proxy import Faults  # noqa: E402  (stdlib only: the decision scheme, shared)

FAULT_SERVICES = ["s3", "glue", "s3tables"]
# `actions`: only these (Glue or S3 Tables action names, S3 methods); empty: every action.
FAULTS = Faults(buckets=[], services=list(FAULT_SERVICES), actions=[])
GLUE_FAULT_ACTIONS = {"GetTable", "GetTables", "CreateTable", "UpdateTable", "DeleteTable",
                      "GetDatabase", "GetDatabases", "CreateDatabase"}


def _signing_service(environ) -> str | None:
    """The service of a SigV4 credential scope (Authorization header, or X-Amz-Credential of a
    presigned URL), as moto's dispatcher reads it; None if unsigned."""
    auth = environ.get("HTTP_AUTHORIZATION", "")
    cred = None
    if "Credential=" in auth:
        cred = auth.split("Credential=", 1)[1].split(",", 1)[0].strip()
    elif "X-Amz-Credential=" in environ.get("QUERY_STRING", ""):
        from urllib.parse import parse_qs
        cred = (parse_qs(environ["QUERY_STRING"]).get("X-Amz-Credential") or [""])[0]
    if cred is None:
        return "" if auth else None
    parts = cred.split("/")
    return parts[3].lower() if len(parts) == 5 else ""


def _text(wsgi_str: str) -> str:
    """A PATH_INFO-style WSGI string (bytes as latin-1) as text."""
    return wsgi_str.encode("latin-1").decode("utf-8", "replace")


def _s3tables_action(method: str, environ) -> tuple[str, str] | None:
    """(action, resource) of an S3 Tables REST request, None for table-bucket-level ones (never
    faulted). The table bucket ARN is one percent-encoded path segment (its `/` sent as %2F)."""
    from urllib.parse import parse_qsl, unquote
    raw = environ.get("RAW_URI") or environ.get("REQUEST_URI") or environ.get("PATH_INFO", "")
    raw = _text(raw).split("?", 1)[0]
    segs = [unquote(x) for x in raw.split("/")[1:]]
    out = []
    i = 0
    while i < len(segs):  # an ARN sent with a bare `/` (not %2F): put it back together
        if segs[i].startswith("arn:") and "/" not in segs[i] and i + 1 < len(segs):
            out.append(f"{segs[i]}/{segs[i + 1]}")
            i += 2
        else:
            out.append(segs[i])
            i += 1
    segs = [x for x in out if x] or [""]
    head, n = segs[0], len(segs)
    if head == "namespaces":
        action = {(2, "PUT"): "CreateNamespace", (2, "GET"): "ListNamespaces",
                  (3, "GET"): "GetNamespace", (3, "DELETE"): "DeleteNamespace"}.get((n, method))
    elif head == "get-table":
        query = sorted(parse_qsl(_text(environ.get("QUERY_STRING", ""))))
        return "GetTable", "&".join(f"{k}={v}" for k, v in query)
    elif head == "tables":
        action = {(2, "GET"): "ListTables", (3, "PUT"): "CreateTable", (4, "GET"): "GetTable",
                  (4, "DELETE"): "DeleteTable"}.get((n, method))
        if n == 5:
            action = {("metadata-location", "GET"): "GetTableMetadataLocation",
                      ("metadata-location", "PUT"): "UpdateTableMetadataLocation",
                      ("rename", "PUT"): "RenameTable"}.get((segs[4], method))
    else:
        return None  # /buckets...: table bucket actions
    return action or f"{method} {head}", "/".join(segs[1:])


def fault_scope(environ) -> tuple[str, str, str, str] | None:
    """(service, action, signature, by-label) of a request faults may hit, None if out of scope."""
    scope = _fault_scope(environ)
    actions = FAULTS.get("actions")
    if scope is None or (actions and scope[1] not in actions):
        return None
    return scope


def _fault_scope(environ) -> tuple[str, str, str, str] | None:
    services = FAULTS.get("services")
    method = environ.get("REQUEST_METHOD", "GET")
    target = environ.get("HTTP_X_AMZ_TARGET", "")
    if target:
        if not target.startswith("AWSGlue.") or "glue" not in services:
            return None
        action = target.split(".", 1)[1]
        if action not in GLUE_FAULT_ACTIONS:
            return None
        body = _buffer_body(environ)
        try:
            p = json.loads(body or b"{}")
        except ValueError:
            p = {}
        if not isinstance(p, dict):
            p = {}
        db = p.get("DatabaseName") or (p.get("DatabaseInput") or {}).get("Name") or ""
        name = (p.get("Name") if "DatabaseName" in p else None) or (p.get("TableInput") or {}).get("Name")
        if action in ("GetDatabase",):
            db, name = p.get("Name") or "", None
        resource = f"{db}.{name}" if name else db
        return "glue", action, f"glue {action} {resource}", f"glue {action}"
    service = _signing_service(environ)
    if service == "s3tables":
        if "s3tables" not in services:
            return None
        found = _s3tables_action(method, environ)
        if found is None:
            return None
        action, resource = found
        return "s3tables", action, f"s3tables {action} {resource}", f"s3tables {action}"
    if service not in (None, "", "s3") or "s3" not in services:  # moto's default is S3 too
        return None
    path = _text(environ.get("PATH_INFO", ""))
    bucket, _, key = path.lstrip("/").partition("/")
    if not bucket or bucket not in FAULTS.get("buckets"):
        return None
    from urllib.parse import parse_qsl
    names = sorted({k for k, _ in parse_qsl(environ.get("QUERY_STRING", ""), keep_blank_values=True)})
    query = f"?{'&'.join(names)}" if names else ""
    return "s3", method, f"s3 {method} {bucket}/{key}{query}", f"s3 {method}"


def _buffer_body(environ) -> bytes:
    """Reads the request body once and puts it back for moto (wsgi.input a BytesIO, with its
    CONTENT_LENGTH)."""
    import io
    from werkzeug.wsgi import get_input_stream
    if "dms2iceberg.body" in environ:
        return environ["dms2iceberg.body"]
    body = get_input_stream(environ).read()
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    environ["dms2iceberg.body"] = body
    return body


def _drain_body(environ) -> None:
    """Reads and drops the request body of a request that is not forwarded (the client gets the
    answer instead of a reset connection for unread data)."""
    from werkzeug.wsgi import get_input_stream
    if "dms2iceberg.body" in environ:
        return
    stream = get_input_stream(environ)
    while stream.read(1 << 16):
        pass


def fault_answer(service: str, kind: str, environ) -> tuple[str, list, bytes]:
    """The error answer (status, headers, body) of an injected fault."""
    import uuid
    rid = uuid.uuid4().hex.upper()
    if service == "s3":
        code, message, status = (("SlowDown", "Please reduce your request rate.", "503 Slow Down")
                                 if kind == "before" else
                                 ("InternalError", "We encountered an internal error. Please try again.",
                                  "500 Internal Server Error"))
        resource = environ.get("RAW_URI", "").split("?", 1)[0]
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>{message}'
                f'</Message><Resource>{_xml_escape(_text(resource))}</Resource><RequestId>{rid}</RequestId>'
                f'</Error>').encode()
        headers = [("Content-Type", "application/xml"), ("x-amz-request-id", rid)]
        if environ.get("REQUEST_METHOD") == "HEAD":
            body = b""
    else:
        if service == "glue":
            ctype = "application/x-amz-json-1.1"
            code, message, status = (("ThrottlingException", "Rate exceeded", "400 Bad Request")
                                     if kind == "before" else
                                     ("InternalServiceException", "Internal service error",
                                      "500 Internal Server Error"))
        else:  # s3tables (REST-JSON)
            ctype = "application/json"
            code, message, status = (("TooManyRequestsException", "Rate exceeded", "429 Too Many Requests")
                                     if kind == "before" else
                                     ("InternalServerErrorException", "Internal server error",
                                      "500 Internal Server Error"))
        body = json.dumps({"__type": code, "message": message}).encode()
        headers = [("Content-Type", ctype), ("x-amzn-ErrorType", code), ("x-amzn-RequestId", rid)]
    headers.append(("Content-Length", str(len(body))))
    return status, headers, body


def _xml_escape(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _run_to_completion(inner, environ) -> str:
    """Runs moto on the request to the end (its whole answer consumed, so whatever it does is
    done) and drops the answer; returns its status line."""
    got = {}

    def start_response(status, headers, exc_info=None):
        got["status"] = status
        return lambda data: None

    result = inner(environ, start_response)
    try:
        for _ in result:
            pass
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return got.get("status", "")


def faulting(inner, environ, start_response):
    """The request through moto, or a fault instead of / after it."""
    scope = fault_scope(environ)
    if scope is None:
        return inner(environ, start_response)
    service, action, signature, label = scope
    kind, n = FAULTS.decide(signature)
    if kind is None:
        return inner(environ, start_response)
    if kind == "before":
        _drain_body(environ)
        FAULTS.record("before", label, signature, n)
    else:
        status = _run_to_completion(inner, environ)
        FAULTS.record("after", label, signature, n, status=int(status.split(" ", 1)[0] or 0))
    status, headers, body = fault_answer(service, kind, environ)
    start_response(status, headers)
    return [body]


def configure_faults(changes) -> dict:
    """FAULTS.configure, with the moto-specific keys checked; ValueError if invalid."""
    if isinstance(changes, dict) and "services" in changes:
        services = changes["services"]
        services = services.split(",") if isinstance(services, str) else services
        bad = [x for x in services or [] if x not in FAULT_SERVICES]
        if bad or not isinstance(services, list):
            raise ValueError(f"services must be a subset of {FAULT_SERVICES}, got {changes['services']!r}")
    return FAULTS.configure(changes)


def faults_from_args(a) -> dict:
    return {"rate": a.fault_rate, "seed": a.fault_seed, "after_share": a.fault_after_share,
            "buckets": a.fault_buckets or "", "services": a.fault_services or ",".join(FAULT_SERVICES)}


def control_app(inner):
    """WSGI middleware: /_dms2iceberg/* is ours, everything else goes to moto (through the
    fault injection while faults are on)."""

    def app(environ, start_response):
        path = environ.get("PATH_INFO", "")
        if not path.startswith(CONTROL_PREFIX):
            target = environ.get("HTTP_X_AMZ_TARGET", "")
            what = f"glue {target.split('.', 1)[-1]}" if target.startswith("AWSGlue.") else \
                f"{'other ' + target if target else 's3 ' + environ.get('REQUEST_METHOD', '?')}"
            with _lock:
                STATE["requests"][what] = STATE["requests"].get(what, 0) + 1
            if FAULTS.on:
                return faulting(inner, environ, start_response)
            return inner(environ, start_response)
        what = path[len(CONTROL_PREFIX):]
        method = environ.get("REQUEST_METHOD", "GET")
        status, body = "404 Not Found", {"error": f"unknown control path {path}"}
        if what == "stats" and method == "GET":
            with _lock:
                body = json.loads(json.dumps(STATE))
            body["faults"] = FAULTS.snapshot()
            status = "200 OK"
        elif what == "config" and method == "GET":
            status, body = "200 OK", {"update_table_delay_ms": STATE["update_table_delay_ms"],
                                      "faults": FAULTS.snapshot()["config"]}
        elif what == "config" and method == "POST":
            n = int(environ.get("CONTENT_LENGTH") or 0)
            try:
                req = json.loads(environ["wsgi.input"].read(n) or b"{}")
                if "faults" in req:
                    configure_faults(req["faults"])
                status = "200 OK"
            except (ValueError, TypeError) as e:
                status, body = "400 Bad Request", {"error": f"bad config: {e}"}
            if status == "200 OK":
                with _lock:
                    if "update_table_delay_ms" in req:
                        STATE["update_table_delay_ms"] = int(req["update_table_delay_ms"])
                    if "enforce_auth" in req:
                        from moto import settings
                        # moto authorizes once this many requests have been served (0: all).
                        settings.INITIAL_NO_AUTH_ACTION_COUNT = 0 if req["enforce_auth"] else float("inf")
                    body = {"update_table_delay_ms": STATE["update_table_delay_ms"]}
                body["faults"] = FAULTS.snapshot()["config"]
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
    try:
        configure_faults(faults_from_args(a))
    except ValueError as e:
        raise SystemExit(f"moto_server: {e}")
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


def duckdb_s3(endpoint: str):
    """A DuckDB connection with the iceberg and httpfs extensions, reading S3 from `endpoint`."""
    import check_readers
    con = check_readers.duckdb_connect()
    con.execute(f"LOAD '{check_readers.extension_file('duckdb_extension_httpfs')}'")
    host = endpoint.split("://", 1)[1]
    con.execute(f"CREATE SECRET moto (TYPE s3, KEY_ID 'testing', SECRET 'testing', "
                f"REGION '{REGION}', ENDPOINT '{host}', URL_STYLE 'path', USE_SSL false)")
    return con


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
    readers = {"pyiceberg-glue": lambda: check_readers.arrow_to_rows(scan.to_arrow())}
    if a.duckdb:
        # DuckDB has no Glue catalog here: it reads the metadata Glue names, as an engine
        # handed the table's location does.
        def duck():
            con = duckdb_s3(a.endpoint)
            sql = "SELECT * FROM iceberg_scan(?)" if a.snapshot_id is None else \
                "SELECT * FROM iceberg_scan(?, snapshot_from_id => ?)"
            args = [t.metadata_location] if a.snapshot_id is None else \
                [t.metadata_location, a.snapshot_id]
            return check_readers.arrow_to_rows(con.execute(sql, args).fetch_arrow_table())
        readers["duckdb"] = duck
    failed = 0
    where = f"{a.table} (metadata {t.metadata_location})"
    for reader, read in readers.items():
        rows = check_readers.sort_rows(read(), key, types)
        diffs = jsoncmp.compare(expected, rows, key, types)
        if diffs:
            print(f"[{reader}] {where} differs from {a.expected}:")
            print("\n".join("    " + d for d in diffs))
            failed += 1
        else:
            print(f"[{reader}] {where}: {len(rows)} row(s) as expected")
    return 1 if failed else 0


def cmd_unreferenced(a) -> int:
    """Prints `TABLE<TAB>path` for each file under a table's folder in S3 that its metadata, as
    PyIceberg reads it, does not reference: the current and logged metadata files, every
    snapshot's manifest list, manifests and the files their entries name (live or not), and
    statistics files. Key indexes (`<data file>.keyindex` and `.keypages`, ours) count as
    referenced with their data file. Exit 0; the caller judges the list."""
    import boto3
    from botocore.config import Config

    cat = glue_catalog(a.endpoint)
    s3 = boto3.client("s3", endpoint_url=a.endpoint, region_name=REGION,
                      aws_access_key_id="testing", aws_secret_access_key="testing",
                      config=Config(s3={"addressing_style": "path"}))
    for name in a.table:
        t = cat.load_table(name)
        md = t.metadata
        io = t.io
        refs = {t.metadata_location}
        refs.update(e.metadata_file for e in md.metadata_log)
        refs.update(s.statistics_path for s in md.statistics)
        refs.update(s.statistics_path for s in getattr(md, "partition_statistics", []) or [])
        for snap in md.snapshots:
            refs.add(snap.manifest_list)
            for m in snap.manifests(io):
                refs.add(m.manifest_path)
                for e in m.fetch_manifest_entry(io, discard_deleted=False):
                    refs.add(e.data_file.file_path)
        location = md.location.rstrip("/")
        bucket, prefix = location[len("s3://"):].split("/", 1)
        listed = []
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
            listed.extend(f"s3://{bucket}/{o['Key']}" for o in page.get("Contents", []))
        for f in sorted(listed):
            index_of = next((f[:-len(x)] for x in (".keyindex", ".keypages") if f.endswith(x)), None)
            if f in refs or index_of in refs:
                continue
            print(f"{name}\t{f}")
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
    selftest_faults(ep, check)
    server.shutdown()
    print(f"moto_server selftest: {checks} checks passed (S3, Glue VersionId enforcement, racing "
          f"writers, control endpoint, PyIceberg through Glue, fault injection)")
    return 0


def selftest_faults(ep: str, check) -> None:
    """Fault injection: both kinds on S3, Glue and S3 Tables, scope, reproducibility, stats."""
    import urllib.error
    import urllib.request

    import boto3
    from botocore.config import Config
    from botocore.exceptions import ClientError
    from fault_proxy import draw

    # One attempt, no retry (in botocore's legacy mode "max_attempts" counts retries).
    cfg = Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1})
    s3 = boto3.client("s3", endpoint_url=ep, region_name=REGION, config=cfg)
    glue = boto3.client("glue", endpoint_url=ep, region_name=REGION, config=cfg)
    s3t = boto3.client("s3tables", endpoint_url=ep, region_name=REGION, config=cfg)

    def control(method, what, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(f"{ep}{CONTROL_PREFIX}{what}", data=data, method=method)
        try:
            with urllib.request.urlopen(req) as r:
                return r.status, json.load(r)
        except urllib.error.HTTPError as e:
            return e.code, json.load(e)

    def faults(**kw):
        status, out = control("POST", "config", {"faults": kw or None})
        assert status == 200, out
        return out["faults"]

    def error(fn, *a, **kw):
        try:
            fn(*a, **kw)
        except ClientError as e:
            return e.response["Error"]["Code"], e.response["ResponseMetadata"]["HTTPStatusCode"]
        return None

    def glue_table(name="ft"):
        t = glue.get_table(DatabaseName="fdb", Name=name)["Table"]
        return t["VersionId"], t["Parameters"]["v"]

    def s3t_location():
        r = s3t.get_table_metadata_location(tableBucketARN=arn, namespace="fns", name="ft")
        return r["versionToken"], r.get("metadataLocation"), r["warehouseLocation"]

    def update_glue(v, version):
        glue.update_table(DatabaseName="fdb", TableInput={"Name": "ft", "Parameters": {"v": v}},
                          VersionId=version)

    def update_s3t(token, location):
        s3t.update_table_metadata_location(tableBucketARN=arn, namespace="fns", name="ft",
                                           versionToken=token, metadataLocation=location)

    s3.create_bucket(Bucket="fwarehouse")
    s3.create_bucket(Bucket="fother")
    glue.create_database(DatabaseInput={"Name": "fdb"})
    glue.create_table(DatabaseName="fdb", TableInput={"Name": "ft", "Parameters": {"v": "0"}})
    arn = s3t.create_table_bucket(name="ftables")["arn"]
    s3t.create_namespace(tableBucketARN=arn, namespace=["fns"])
    s3t.create_table(tableBucketARN=arn, namespace="fns", name="ft", format="ICEBERG")
    g0 = glue_table()
    t0 = s3t_location()
    applied0 = json.loads(json.dumps(STATE))

    # before: refused, nothing changed
    got = faults(rate=1.0, after_share=0.0, seed=1, buckets=["fwarehouse"])
    check(got == {"rate": 1.0, "seed": 1, "after_share": 0.0, "buckets": ["fwarehouse"],
                  "services": FAULT_SERVICES, "actions": []}, f"the config answer reflects the faults: {got}")
    check(error(s3.put_object, Bucket="fwarehouse", Key="a/k1", Body=b"x") == ("SlowDown", 503),
          "S3 PUT before: 503 SlowDown")
    try:
        s3.get_object(Bucket="fwarehouse", Key="a/k1")
    except ClientError as e:
        check(e.response["Error"]["Message"] == "Please reduce your request rate." and
              e.response["Error"]["Code"] == "SlowDown", f"S3 error body: {e.response['Error']}")
    check(error(s3.head_object, Bucket="fwarehouse", Key="a/k1") == ("503", 503), "S3 HEAD before: 503")
    check(error(s3.list_objects_v2, Bucket="fwarehouse", Prefix="a/") == ("SlowDown", 503),
          "S3 bucket-level listing before")
    check(error(s3.delete_object, Bucket="fwarehouse", Key="a/k0") == ("SlowDown", 503), "S3 DELETE before")
    s3.put_object(Bucket="fother", Key="a/k1", Body=b"other")
    check(s3.get_object(Bucket="fother", Key="a/k1")["Body"].read() == b"other",
          "a bucket not listed is never faulted")
    check(error(update_glue, "1", g0[0]) == ("ThrottlingException", 400), "Glue UpdateTable before: Throttling")
    check(error(glue.get_table, DatabaseName="fdb", Name="ft") == ("ThrottlingException", 400),
          "Glue GetTable before")
    check(error(glue.create_table, DatabaseName="fdb", TableInput={"Name": "ft2"}) ==
          ("ThrottlingException", 400), "Glue CreateTable before")
    check(error(glue.get_databases) == ("ThrottlingException", 400), "Glue GetDatabases before")
    check(error(update_s3t, t0[0], f"{t0[2]}/metadata/00001.metadata.json") ==
          ("TooManyRequestsException", 429), "S3 Tables UpdateTableMetadataLocation before: 429")
    check(error(s3t.get_table_metadata_location, tableBucketARN=arn, namespace="fns", name="ft") ==
          ("TooManyRequestsException", 429), "S3 Tables GetTableMetadataLocation before")
    check(error(s3t.get_table, tableBucketARN=arn, namespace="fns", name="ft") ==
          ("TooManyRequestsException", 429), "S3 Tables GetTable before")
    check(error(s3t.list_tables, tableBucketARN=arn) == ("TooManyRequestsException", 429),
          "S3 Tables ListTables before")
    check(s3t.get_table_bucket(tableBucketARN=arn)["name"] == "ftables", "table bucket actions: not faulted")
    check(boto3.client("sts", endpoint_url=ep, region_name=REGION, config=cfg)
          .get_caller_identity()["Account"], "STS is never faulted")
    faults()
    check(error(s3.head_object, Bucket="fwarehouse", Key="a/k1") == ("404", 404),
          "S3 PUT before: the object was not written")
    check(glue_table() == g0, "Glue UpdateTable before: the table did not change")
    check(error(glue.get_table, DatabaseName="fdb", Name="ft2")[0] == "EntityNotFoundException",
          "Glue CreateTable before: no table")
    check(s3t_location() == t0, "S3 Tables before: the metadata location did not change")

    # after: applied, then the answer lost
    faults(rate=1.0, after_share=1.0, seed=1, buckets=["fwarehouse"])
    check(error(s3.put_object, Bucket="fwarehouse", Key="a/k2", Body=b"after") == ("InternalError", 500),
          "S3 PUT after: 500 InternalError")
    check(error(update_glue, "1", g0[0]) == ("InternalServiceException", 500),
          "Glue UpdateTable after: InternalServiceException")
    check(error(glue.create_table, DatabaseName="fdb", TableInput={"Name": "ft3", "Parameters": {"v": "c"}})
          == ("InternalServiceException", 500), "Glue CreateTable after")
    location = f"{t0[2]}/metadata/00001.metadata.json"
    check(error(update_s3t, t0[0], location) == ("InternalServerErrorException", 500),
          "S3 Tables UpdateTableMetadataLocation after: 500 InternalServerErrorException")
    faults(rate=0)
    check(s3.get_object(Bucket="fwarehouse", Key="a/k2")["Body"].read() == b"after",
          "S3 PUT after: the object exists with its body")
    g1 = glue_table()
    check(g1[1] == "1" and g1[0] != g0[0], f"Glue UpdateTable after: applied, version bumped ({g0} -> {g1})")
    check(glue_table("ft3")[1] == "c", "Glue CreateTable after: the table exists")
    t1 = s3t_location()
    check(t1[1] == location and t1[0] != t0[0], "S3 Tables after: the location moved, a new token")
    check(STATE["update_table"]["applied"] == applied0["update_table"]["applied"] + 1 and
          STATE["s3tables_update"]["applied"] == applied0["s3tables_update"]["applied"] + 1,
          "an after fault on an update counts as applied")
    # What a client retrying the lost answer gets (the defect this reproduces): a refusal.
    check(error(update_glue, "1", g0[0]) == ("ConcurrentModificationException", 400),
          "retrying the UpdateTable whose answer was lost is refused")
    check(error(update_s3t, t0[0], location) == ("ConflictException", 409),
          "retrying the UpdateTableMetadataLocation whose answer was lost is refused")

    status, st = control("GET", "stats")
    f = st["faults"]
    by = f["by"]
    check(by.get("s3 PUT before") == 1 and by.get("s3 PUT after") == 1 and by.get("s3 HEAD before") == 1
          and by.get("glue UpdateTable before") == 1 and by.get("glue UpdateTable after") == 1
          and by.get("glue CreateTable after") == 1
          and by.get("s3tables UpdateTableMetadataLocation before") == 1
          and by.get("s3tables UpdateTableMetadataLocation after") == 1, f"stats by kind: {by}")
    check(f["before"] == sum(v for k, v in by.items() if k.endswith(" before")) and f["after"] == 4,
          f"stats totals: {f['before']} before, {f['after']} after")
    last = f["last"][-1]
    check(last["kind"] == "after" and last["signature"].startswith(
        f"s3tables UpdateTableMetadataLocation {arn}/fns/ft") and last["n"] == 1 and last["status"] == 200,
        f"last faults: {last}")
    check(st["requests"].get("glue UpdateTable", 0) >= 3, "requests are still counted")

    # the same seed, the same decisions for the same sequence of requests
    def run(seed):
        faults(rate=0.5, after_share=0.5, seed=seed, buckets=["fwarehouse"])
        out = []
        for i in range(24):
            r = error(s3.put_object, Bucket="fwarehouse", Key=f"r/{i % 4}", Body=b"r")
            out.append(r and r[1] or 200)
            r = error(glue.get_table, DatabaseName="fdb", Name="ft")
            out.append(r and r[1] or 200)
        return out

    r1, r2, r3 = run(42), run(42), run(43)
    check(r1 == r2, f"the same seed gives the same decisions: {r1} vs {r2}")
    check(r1 != r3, "another seed, other decisions")
    expected, counts = [], {}
    for i in range(24):
        for sig, ok, before in ((f"s3 PUT fwarehouse/r/{i % 4}", 200, 503), ("glue GetTable fdb.ft", 200, 400)):
            counts[sig] = counts.get(sig, 0) + 1
            u1, u2 = draw(42, sig, counts[sig])
            expected.append(ok if u1 >= 0.5 else (500 if u2 < 0.5 else before))
    check(r1 == expected, f"decisions follow the documented scheme: {r1} vs {expected}")

    # scope by service; flags; bad configurations
    faults(rate=1.0, after_share=0.0, buckets=["fwarehouse"], services=["glue"])
    s3.put_object(Bucket="fwarehouse", Key="a/k3", Body=b"x")
    check(error(glue.get_table, DatabaseName="fdb", Name="ft") == ("ThrottlingException", 400),
          "services=[glue]: Glue faulted, S3 not")
    faults(rate=1.0, after_share=0.0, buckets=["fwarehouse"], services=["glue"], actions=["UpdateTable"])
    check(error(glue.get_table, DatabaseName="fdb", Name="ft") is None,
          "actions=[UpdateTable]: GetTable not faulted")
    faults(actions=[])
    check(control("POST", "config", {"faults": {"rate": 1.5}})[0] == 400, "a rate above 1 is refused")
    check(control("POST", "config", {"faults": {"services": ["ec2"]}})[0] == 400, "unknown services refused")
    check(control("POST", "config", {"faults": {"bogus": 1}})[0] == 400, "unknown keys refused")
    a = parser().parse_args(["serve", "--fault-rate", "0.25", "--fault-seed", "9", "--fault-after-share",
                             "0.75", "--fault-buckets", "wh,wh2"])
    got = configure_faults(faults_from_args(a))
    check(got == {"rate": 0.25, "seed": 9, "after_share": 0.75, "buckets": ["wh", "wh2"],
                  "services": FAULT_SERVICES, "actions": []}, f"serve flags: {got}")
    got = faults()
    check(got["rate"] == 0.0 and not FAULTS.on and control("GET", "config")[1]["faults"] == got,
          f"faults null: off, the defaults: {got}")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("serve", help="run the emulator")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0: any free port")
    p.add_argument("--port-file", help="write the port here once listening")
    p.add_argument("--update-table-delay-ms", type=int, default=0)
    p.add_argument("--fault-rate", type=float, default=0.0,
                   help="share of in-scope requests faulted (0, the default: no faults)")
    p.add_argument("--fault-seed", type=int, default=0)
    p.add_argument("--fault-after-share", type=float, default=0.5,
                   help="share of the faults that are 'after' (applied, then the answer lost)")
    p.add_argument("--fault-buckets", default="", help="comma-separated S3 buckets faults may hit")
    p.add_argument("--fault-services", default="",
                   help="comma-separated subset of s3,glue,s3tables (default: all three)")
    p.add_argument("--quiet", action="store_true", help="no request log")
    sub.add_parser("selftest", help="check the emulator and the VersionId patch")
    p = sub.add_parser("check-table", help="read a Glue table with PyIceberg and compare")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--table", required=True, help="database.table")
    p.add_argument("--expected", required=True)
    p.add_argument("--meta")
    p.add_argument("--key")
    p.add_argument("--snapshot-id", type=int)
    p.add_argument("--duckdb", action="store_true",
                   help="also read the metadata Glue names with DuckDB's iceberg_scan (httpfs)")
    p = sub.add_parser("unreferenced",
                       help="files in Glue tables' S3 folders their metadata does not reference")
    p.add_argument("--endpoint", required=True)
    p.add_argument("--table", required=True, action="append", help="database.table (repeatable)")
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
    return ap


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    return {"serve": cmd_serve, "selftest": cmd_selftest, "check-table": cmd_check_table,
            "check-s3tables": cmd_check_s3tables,
            "unreferenced": cmd_unreferenced, "vending-setup": cmd_vending_setup}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main())
