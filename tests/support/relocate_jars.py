#!/usr/bin/env python3
"""Build the relocated classes Iceberg's Spark runtime jar expects and lacks.

  relocate_jars.py jackson RUNTIME_JAR OUT_JAR
  relocate_jars.py httpclient OUT_JAR JAR...

The `iceberg-spark-runtime-3.5_2.12` jar that PyPI's `snowpark-connect-deps-iceberg` ships
lacks two libraries Iceberg relocates (shades) into `org.apache.iceberg.shaded`:

- Jackson (`org.apache.iceberg.shaded.com.fasterxml.jackson.*`): loading any table metadata
  fails with ClassNotFoundException. The same jar carries a complete Jackson (core, databind,
  annotations) relocated for Parquet under
  `org.apache.iceberg.shaded.org.apache.parquet.shaded.com.fasterxml.jackson`: `jackson`
  copies those classes to the package Iceberg's own classes reference.
- Apache HttpClient 5 (`org.apache.iceberg.shaded.org.apache.hc.*`), which Iceberg's
  RESTCatalog speaks HTTP with: `httpclient` relocates the classes of the given jars (Debian's
  libhttpclient5-java and libhttpcore5-java) from `org.apache.hc` to that package.

A class is relocated by rewriting the package name in every Utf8 constant of its constant pool
(the only place a JVM class names other classes); the result is written as a small jar to put
on the classpath next to the runtime jar.

Standard library only, deterministic output (fixed timestamps, sorted entries): the same input
jars always give the same bytes.
"""
from __future__ import annotations

import os
import struct
import sys
import zipfile

JACKSON_FROM = b"org/apache/iceberg/shaded/org/apache/parquet/shaded/com/fasterxml/jackson/"
JACKSON_TO = b"org/apache/iceberg/shaded/com/fasterxml/jackson/"
HC_FROM = b"org/apache/hc/"
HC_TO = b"org/apache/iceberg/shaded/org/apache/hc/"

# Constant pool entry sizes after the tag byte (JVMS 4.4), except Utf8 (length-prefixed).
FIXED = {3: 4, 4: 4, 5: 8, 6: 8, 7: 2, 8: 2, 9: 4, 10: 4, 11: 4, 12: 4, 15: 3, 16: 2,
         17: 4, 18: 4, 19: 2, 20: 2}


def relocate_class(data: bytes, old: bytes, new: bytes) -> bytes:
    """The class file with the package `old` replaced by `new` (slashed and dotted) in every
    Utf8 constant; the rest is copied as is (constant pool indices do not change, so nothing
    else needs rewriting)."""
    old_dotted, new_dotted = old.replace(b"/", b"."), new.replace(b"/", b".")
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
            if old in s or old_dotted in s:
                # Not inside an already relocated name (`new` may end with `old`). A raw NUL
                # never occurs in a class file's modified UTF-8: safe as a placeholder.
                s = s.replace(new, b"\0N").replace(new_dotted, b"\0D")
                s = s.replace(old, new).replace(old_dotted, new_dotted)
                s = s.replace(b"\0N", new).replace(b"\0D", new_dotted)
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


def relocated(jars: list[str], old: bytes, new: bytes) -> dict[str, bytes]:
    """Every class under `old` in `jars`, relocated to `new`, by its new entry name."""
    entries: dict[str, bytes] = {}
    for jar in jars:
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                # Base classes only: the multi-release variants (META-INF/versions/*) are
                # optional speed-ups of the same classes.
                if name.startswith(old.decode()) and name.endswith(".class"):
                    target = new.decode() + name[len(old):]
                    entries[target] = relocate_class(z.read(name), old, new)
    return entries


def empty_interface(name: bytes) -> bytes:
    """A class file declaring the public interface `name` (slashed), with no members."""
    def utf8(s: bytes) -> bytes:
        return bytes([1]) + struct.pack(">H", len(s)) + s
    pool = utf8(name) + bytes([7]) + struct.pack(">H", 1) \
        + utf8(b"java/lang/Object") + bytes([7]) + struct.pack(">H", 3)
    return (b"\xca\xfe\xba\xbe" + struct.pack(">HHH", 0, 52, 5) + pool
            # public interface abstract; this #2, super #4; no interfaces, fields, methods
            # or attributes.
            + struct.pack(">HHHHHHH", 0x0601, 2, 4, 0, 0, 0, 0))


# HttpClient 5.4 added this interface; Debian's 5.2 lacks it. Iceberg's RESTCatalog names it in
# one call it makes only when a TLS configurer is set (`rest.client.tls.configurer-impl`), but
# the JVM's verifier loads the type when it checks that method: an empty interface satisfies
# the verifier, and the call never runs in the tests (plain http on loopback).
TLS_SOCKET_STRATEGY = HC_TO + b"client5/http/ssl/TlsSocketStrategy"


def write_jar(dst: str, entries: dict[str, bytes]) -> None:
    with zipfile.ZipFile(dst + ".tmp", "w", zipfile.ZIP_DEFLATED) as z:
        manifest = "Manifest-Version: 1.0\r\nCreated-By: dms2iceberg relocate_jars.py\r\n\r\n"
        z.writestr(zipfile.ZipInfo("META-INF/MANIFEST.MF", (1980, 1, 1, 0, 0, 0)), manifest)
        for name in sorted(entries):
            info = zipfile.ZipInfo(name, (1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, entries[name])
    os.replace(dst + ".tmp", dst)


def main(argv: list[str]) -> int:
    if len(argv) >= 4 and argv[1] == "jackson":
        src, dst = argv[2], argv[3]
        entries = relocated([src], JACKSON_FROM, JACKSON_TO)
        if not any(n.endswith("databind/ObjectMapper.class") for n in entries):
            print(f"{src}: no Parquet-relocated Jackson databind found", file=sys.stderr)
            return 1
        to = JACKSON_TO
    elif len(argv) >= 4 and argv[1] == "httpclient":
        dst = argv[2]
        entries = relocated(argv[3:], HC_FROM, HC_TO)
        if not any(n.endswith("client5/http/impl/classic/HttpClientBuilder.class") for n in entries):
            print(f"{' '.join(argv[3:])}: no HttpClient 5 classes found", file=sys.stderr)
            return 1
        name = TLS_SOCKET_STRATEGY.decode() + ".class"
        entries.setdefault(name, empty_interface(TLS_SOCKET_STRATEGY))
        to = HC_TO
    else:
        print("\n".join(__doc__.strip().splitlines()[2:4]), file=sys.stderr)
        return 2
    write_jar(dst, entries)
    print(f"{dst}: {len(entries)} classes relocated to {to.decode().replace('/', '.')}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
