#!/usr/bin/env python3
"""Seed corpus for tests/fuzz/fuzz-frame.c: valid frames of each type, a stream of several,
and a few broken ones. Run from the repo root: python3 tools/gen-frame-corpus.py"""
import os
import struct

OUT = "tests/fuzz/corpus/frame"
MAGIC, VERSION = 0x464D4454, 1


def frame(ftype, body):
    return struct.pack("<IHHI", MAGIC, VERSION, ftype, len(body)) + body


def blob(b):
    return struct.pack("<I", len(b)) + b


def sampling():
    return struct.pack("<QfffIfffI", 42, 0.7, 0.9, 0.0, 50, 1.0, 0.0, 0.0, 2)


seeds = {
    "heartbeat": frame(6, struct.pack("<QQQ", 1, 2, 3)),
    "abort": frame(4, struct.pack("<QH", 5, 2) + blob(b"client gone")),
    "abort_ack": frame(5, struct.pack("<QBB", 5, 1, 1)),
    "transfer_info": frame(2, struct.pack("<QQII", 77, 1, 0, 3) + struct.pack("<3I", 1, 2, 3)
                           + struct.pack("<I", 1) + struct.pack("<I", 9) + sampling()),
    "status": frame(3, struct.pack("<QBHIfI", 77, 4, 0, 11, -0.5, 1) + struct.pack("<If", 11, -0.5)
                    + struct.pack("<II", 16, 2) + struct.pack("<2Q", 1, 2) + blob(b"")),
    "register_badlayout": frame(1, struct.pack("<QHHI", 1, 1, 1, 16) + blob(b"\0" * 32)),
    "unknown_type": frame(77, b"xyz"),
    "bad_magic": b"XXXX" + frame(6, struct.pack("<QQQ", 1, 2, 3))[4:],
    "huge_len": struct.pack("<IHHI", MAGIC, VERSION, 2, 0x7FFFFFFF),
    "huge_count": frame(2, struct.pack("<QQII", 1, 1, 0, 0x7FFFFFFF)),
}
seeds["stream"] = seeds["heartbeat"] + seeds["transfer_info"] + seeds["status"] + seeds["abort"]
os.makedirs(OUT, exist_ok=True)
for name, data in seeds.items():
    with open(os.path.join(OUT, name), "wb") as f:
        f.write(data)
print(f"wrote {len(seeds)} files to {OUT}")
