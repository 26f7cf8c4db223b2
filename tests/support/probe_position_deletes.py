#!/usr/bin/env python3
"""Probe: do PyIceberg and DuckDB honour v2 *position deletes* whose paths are `file://` URIs?

dms2iceberg writes absolute `file:///...` locations. PyIceberg cannot write position deletes, so
this script builds one by hand (a Parquet file with the reserved columns file_path/pos, field ids
2147483546/2147483545, registered in a `content=deletes` manifest) on a table that PyIceberg itself
wrote into a SqlCatalog with a `file://` warehouse, then reads it back with both engines.

Variants (the delete file's `file_path` values vs the data file path in the manifest):
  same           exactly the data file's path as the manifest lists it (file:///...)
  plain          the path without the scheme (/tmp/...)
  java-style     file:/tmp/... (what Hadoop's Path.toString() gives)
  nobounds       same as `same`, but no lower/upper bounds on file_path in the manifest entry

  python3 probe_position_deletes.py [--dir DIR]
Prints one line per variant and reader: the ids it returned (expected: 1, 3, 5).
"""
from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def run(base: Path, variant: str) -> dict:
    import pyarrow as pa
    import pyarrow.parquet as pq
    from pyiceberg.catalog.sql import SqlCatalog
    from pyiceberg.conversions import to_bytes
    from pyiceberg.manifest import (DataFile, DataFileContent, FileFormat, ManifestContent,
                                    ManifestEntry, ManifestEntryStatus, ManifestWriterV2)
    from pyiceberg.table.snapshots import Operation
    from pyiceberg.table.update.snapshot import _FastAppendFiles
    from pyiceberg.typedef import Record
    from pyiceberg.types import StringType

    import check_readers

    wh = base / variant
    wh.mkdir(parents=True)
    cat = SqlCatalog("default", uri=f"sqlite:///{wh}/catalog.db", warehouse=f"file://{wh}")
    cat.create_namespace("ns")
    t = cat.create_table("ns.t", schema=pa.schema([pa.field("id", pa.int64(), nullable=False),
                                                   pa.field("s", pa.string())]))
    t.append(pa.table({"id": pa.array([1, 2, 3, 4, 5], pa.int64()), "s": list("abcde")},
                      schema=pa.schema([pa.field("id", pa.int64(), nullable=False), pa.field("s", pa.string())])))
    t = cat.load_table("ns.t")
    data_files = [task.file for task in t.scan().plan_files()]
    assert len(data_files) == 1
    data_path = data_files[0].file_path
    ref = {"same": data_path, "nobounds": data_path,
           "plain": data_path.removeprefix("file://"),
           "java-style": "file:" + data_path.removeprefix("file://")}[variant]

    # the position delete file (rows 1 and 3 -> ids 2 and 4)
    schema = pa.schema([
        pa.field("file_path", pa.string(), nullable=False, metadata={"PARQUET:field_id": "2147483546"}),
        pa.field("pos", pa.int64(), nullable=False, metadata={"PARQUET:field_id": "2147483545"}),
    ])
    del_local = wh / "ns" / "t" / "data" / f"pos-deletes-{uuid.uuid4()}.parquet"
    pq.write_table(pa.table({"file_path": [ref, ref], "pos": pa.array([1, 3], pa.int64())}, schema=schema),
                   del_local)
    del_uri = "file://" + str(del_local)
    bounds = {} if variant == "nobounds" else {
        "lower_bounds": {2147483546: to_bytes(StringType(), ref), 2147483545: (1).to_bytes(8, "little")},
        "upper_bounds": {2147483546: to_bytes(StringType(), ref), 2147483545: (3).to_bytes(8, "little")},
    }
    dfile = DataFile.from_args(
        content=DataFileContent.POSITION_DELETES, file_path=del_uri, file_format=FileFormat.PARQUET,
        partition=Record(), record_count=2, file_size_in_bytes=del_local.stat().st_size,
        value_counts={2147483546: 2, 2147483545: 2}, null_value_counts={2147483546: 0, 2147483545: 0},
        **bounds)
    dfile.spec_id = 0

    class DeleteManifestWriter(ManifestWriterV2):
        def content(self):
            return ManifestContent.DELETES

        @property
        def _meta(self):
            return {**super()._meta, "content": "deletes"}

    class AddDeletes(_FastAppendFiles):
        def _manifests(self):
            existing = self._existing_manifests()
            w = DeleteManifestWriter(self._transaction.table_metadata.spec(), self.schema(),
                                     self.new_manifest_output(), self._snapshot_id, self._compression)
            with w:
                w.add(ManifestEntry.from_args(status=ManifestEntryStatus.ADDED, snapshot_id=self._snapshot_id,
                                              sequence_number=None, file_sequence_number=None, data_file=dfile))
            return [w.to_manifest_file()] + existing

    with t.transaction() as tx:
        us = tx.update_snapshot()
        producer = AddDeletes(operation=Operation.DELETE, transaction=tx, io=us._io, branch=us._branch,
                              snapshot_properties={})
        producer._added_data_files.append(dfile)  # counted in the summary only
        producer.commit()

    t = cat.load_table("ns.t")
    out = {"metadata": t.metadata_location, "data_path": data_path, "delete_refs": ref}
    for name, fn in check_readers.READERS.items():
        try:
            tbl = fn(wh, "ns.t", None)
            out[name] = sorted(tbl.column("id").to_pylist())
        except Exception as e:  # noqa: BLE001
            out[name] = f"ERROR {type(e).__name__}: {str(e)[:300]}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir")
    a = ap.parse_args()
    base = Path(a.dir) if a.dir else Path(tempfile.mkdtemp(prefix="posdel-probe-"))
    if base.exists() and a.dir:
        shutil.rmtree(base)
    base.mkdir(parents=True, exist_ok=True)
    ok = True
    for v in ("same", "nobounds", "plain", "java-style"):
        r = run(base, v)
        print(f"{v:11s} data={r['data_path']}  delete file_path={r['delete_refs']}")
        for reader in ("pyiceberg", "duckdb"):
            good = r[reader] == [1, 3, 5]
            ok &= good or v != "same"
            print(f"    {reader:9s} -> {r[reader]} {'OK' if good else 'deletes NOT applied / error'}")
    if not a.dir:
        shutil.rmtree(base, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
