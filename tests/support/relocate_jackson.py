#!/usr/bin/env python3
"""Build the Jackson classes Iceberg's Spark runtime jar expects, from the same jar.

  relocate_jackson.py RUNTIME_JAR OUT_JAR

The `iceberg-spark-runtime-3.5_2.12` jar that PyPI's `snowpark-connect-deps-iceberg` ships
lacks Iceberg's relocated Jackson (`org.apache.iceberg.shaded.com.fasterxml.jackson.*`):
loading any table metadata fails with ClassNotFoundException. The same jar carries a complete
Jackson (core, databind, annotations) relocated for Parquet under
`org.apache.iceberg.shaded.org.apache.parquet.shaded.com.fasterxml.jackson`. This script copies
those classes to the package Iceberg's own classes reference, rewriting the package name in
every class file's constant pool (the only place a JVM class names other classes), and writes
them as a small jar to put on the classpath next to the runtime jar.

Standard library only, deterministic output (fixed timestamps, sorted entries): the same input
jar always gives the same bytes.
"""
from __future__ import annotations

import struct
import sys
import zipfile

FROM = b"org/apache/iceberg/shaded/org/apache/parquet/shaded/com/fasterxml/jackson/"
TO = b"org/apache/iceberg/shaded/com/fasterxml/jackson/"
FROM_DOTTED = FROM.replace(b"/", b".")
TO_DOTTED = TO.replace(b"/", b".")

# Constant pool entry sizes after the tag byte (JVMS 4.4), except Utf8 (length-prefixed).
FIXED = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2,
         17: 4, 18: 4, 19: 2, 20: 2}


def relocate_class(data: bytes) -> bytes:
    """The class file with FROM replaced by TO in every Utf8 constant; the rest is copied as
    is (constant pool indices do not change, so nothing else needs rewriting)."""
    if data[:4] != b"\xca\xfe\xba\xbe":
        raise ValueError("not a class file")
    count = struct.unpack_from(">H", data, 8)[0]
    out = bytearray(data[:10])
    pos = 10
    i = 1
    while i < count:
        tag = data[pos]
        if tag == 1:
            (n,) = struct.unpack_from(">H", data, pos + 1)
            s = data[pos + 3:pos + 3 + n]
            s = s.replace(FROM, TO).replace(FROM_DOTTED, TO_DOTTED)
            if len(s) > 0xFFFF:
                raise ValueError("constant too long after relocation")
            out += bytes([1]) + struct.pack(">H", len(s)) + s
            pos += 3 + n
        elif tag in FIXED:
            size = FIXED[tag]
            out += data[pos:pos + 1 + size]
            pos += 1 + size
            if tag in (5, 6):  # long and double take two slots
                i += 1
        else:
            raise ValueError(f"unknown constant pool tag {tag} at offset {pos}")
        i += 1
    out += data[pos:]
    return bytes(out)


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__.strip().splitlines()[2], file=sys.stderr)
        return 2
    src, dst = argv[1], argv[2]
    entries: dict[str, bytes] = {}
    with zipfile.ZipFile(src) as z:
        for name in z.namelist():
            # Base classes only: the multi-release variants (META-INF/versions/*) are optional
            # speed-ups of the same classes.
            if name.startswith(FROM.decode()) and name.endswith(".class"):
                new = TO.decode() + name[len(FROM):]
                entries[new] = relocate_class(z.read(name))
    if not any(n.endswith("databind/ObjectMapper.class") for n in entries):
        print(f"{src}: no Parquet-relocated Jackson databind found", file=sys.stderr)
        return 1
    with zipfile.ZipFile(dst + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        manifest = "Manifest-Version: 1.0\r\nCreated-By: dms2iceberg relocate_jackson.py\r\n\r\n"
        z.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", (1980, 1, 1, 0, 0, 0)), manifest)
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, entries[name])
    import os
    os.replace(dst + ".tmp", dst)
    print(f"{dst}: {len(entries)} classes relocated to {TO.decode().replace('/', '.')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
