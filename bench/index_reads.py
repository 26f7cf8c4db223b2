#!/usr/bin/env python3
"""index_reads.py: what a fresh process's lookup reads from a table's key indexes for one change
file, and what that costs on the latency model of AWS (bench/latency_server.py, ISSUE_13: an S3
GET answers after 20 ms + 10 ms per MB).

  .venv/bin/python bench/index_reads.py WAREHOUSE_TABLE_DATA_DIR CHANGE_FILE.csv [--key-column 1]

Reads every `<data file>.keyindex` directory (format: shared/src/files/index/stored.rs), takes
the change file's keys, and per data file computes the pages they fall in (as `PageDir::plan`)
and the range requests the lookup makes for them (neighbouring pages at most 64 KiB apart in one
request of at most 4 MiB, as `lookup/key_index.rs` coalesces). The model then schedules a fresh
process's reads as the lookup does: up to 64 files at once (each a directory GET, then its range
GETs, 4 at a time), and prints requests, bytes and the modelled time of the index reads, for the
policy the code uses and for two others (no coalescing; whole pages objects), so the trade is
visible. Needs `zstandard` (in the test venv).
"""
from __future__ import annotations

import csv
import glob
import os
import struct
import sys

import zstandard

GET_FIRST_MS, GET_PER_MB_MS = 20.0, 10.0
FILES_AT_ONCE, RANGES_AT_ONCE = 64, 4
PAGE_KEYS = 4096


def directory(path: str):
    b = open(path, "rb").read()
    assert b[:8] == b"DMS2IKEY", path
    (version,) = struct.unpack_from("<I", b, 8)
    assert version == 2, (path, version)
    at = 12
    size, rows, sig_len = struct.unpack_from("<QQI", b, at)
    at += 20 + sig_len
    page_keys, pages, pages_bytes = struct.unpack_from("<IQQ", b, at)
    at += 20
    body = zstandard.ZstdDecompressor().decompress(b[at:], max_output_size=pages * 20)
    entries = [struct.unpack_from("<qqI", body, i * 20) for i in range(pages)]
    offsets = [0]
    for _, _, n in entries:
        offsets.append(offsets[-1] + n)
    assert offsets[-1] == pages_bytes
    return len(b), entries, offsets


def needed_pages(entries, keys):
    """Pages whose key range holds one of `keys` (sorted), as PageDir::plan."""
    import bisect
    lasts = [e[1] for e in entries]
    out = set()
    for k in keys:
        p = bisect.bisect_left(lasts, k)
        while p < len(entries) and entries[p][0] <= k:
            out.add(p)
            p += 1
    return sorted(out)


def ranges(offsets, pages, gap, max_range):
    out = []
    for p in pages:
        s, e = offsets[p], offsets[p + 1]
        if s == e:
            continue  # a dense page: answered from the directory
        if out and s <= out[-1][1] + gap and e - out[-1][0] <= max_range:
            out[-1][1] = e
        else:
            out.append([s, e])
    return [e - s for s, e in out]


def get_ms(nbytes):
    return GET_FIRST_MS + GET_PER_MB_MS * nbytes / 2**20


def model(files):
    """files: [(directory bytes, [range bytes])]: ms until the last file's pages are in."""
    done = []
    slots = [0.0] * FILES_AT_ONCE
    for dir_bytes, rs in files:
        i = min(range(len(slots)), key=lambda j: slots[j])
        t = slots[i] + get_ms(dir_bytes)
        lanes = [t] * RANGES_AT_ONCE
        for r in rs:
            j = min(range(len(lanes)), key=lambda x: lanes[x])
            lanes[j] += get_ms(r)
        slots[i] = max(lanes)
        done.append(slots[i])
    return max(done) if done else 0.0


def main():
    data_dir, change = sys.argv[1], sys.argv[2]
    col = int(sys.argv[sys.argv.index("--key-column") + 1]) if "--key-column" in sys.argv else 1
    with open(change, newline="") as f:
        r = csv.reader(f)
        next(r)
        keys = sorted({int(row[col]) for row in r})
    dirs = sorted(glob.glob(os.path.join(data_dir, "*.keyindex")))
    policies = {
        "coalesced (64 KiB gaps, 4 MiB max; what the code does)": (64 << 10, 4 << 20),
        "one request per run of adjacent pages": (0, 4 << 20),
        "whole pages objects": (1 << 62, 1 << 62),
    }
    per_file = []
    total_pages = 0
    for d in dirs:
        size, entries, offsets = directory(d)
        lo, hi = entries[0][0], entries[-1][1]
        ks = [k for k in keys if lo <= k <= hi]
        if not ks:
            continue
        pages = needed_pages(entries, ks)
        total_pages += len(pages)
        per_file.append((size, entries, offsets, pages))
    print(f"{len(keys)} keys, {len(per_file)} indexed files touched, {total_pages} pages needed "
          f"of {sum(len(f[1]) for f in per_file)}; directories {sum(f[0] for f in per_file)/2**20:.1f} MiB")
    for name, (gap, mx) in policies.items():
        files = [(size, ranges(offsets, pages, gap, mx)) for size, _, offsets, pages in per_file]
        reqs = sum(len(rs) for _, rs in files) + len(files)
        nbytes = sum(sum(rs) + s for s, rs in files)
        print(f"  {name}: {reqs} GETs, {nbytes/2**20:.1f} MiB, modelled {model(files):.0f} ms")


if __name__ == "__main__":
    main()
