"""streams.py — the stream client of test-restart-streams.sh and test-stop-streams.sh.

argv: PORT STARTED OUT [--idle N] [--linger S] [--timeout S]. Opens N keep-alive connections that
sit idle after a finished GET /health (as a router's pool holds them; default 0), then 8 streamed
POST /generate (input_ids [1, 5, 9, 13], max_new_tokens 480, ignore_eos, greedy); writes STARTED
once every stream has a token, reads every stream to its end (or EOF), keeps the sockets open S
seconds more (--linger, default 0), then writes one line per stream to OUT: "<id> <last two
data lines>" ("(nothing)" when there was none). --timeout: each socket's (default 60 s).
Python's standard library only.
"""
import argparse
import json
import socket
import time

ap = argparse.ArgumentParser()
ap.add_argument("port", type=int)
ap.add_argument("started")
ap.add_argument("out")
ap.add_argument("--idle", type=int, default=0)
ap.add_argument("--linger", type=float, default=0)
ap.add_argument("--timeout", type=float, default=60)
a = ap.parse_args()


def conn():
    s = socket.create_connection(("127.0.0.1", a.port))
    s.settimeout(a.timeout)
    return s


idle = []
for _ in range(a.idle):
    s = conn()
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
    buf = b""
    while b"\r\n\r\n" not in buf:
        buf += s.recv(4096)
    idle.append(s)
body = json.dumps({"input_ids": [1, 5, 9, 13], "max_new_tokens": 480, "ignore_eos": True,
                   "stream": True, "sampling": {"temperature": 0}}).encode()
streams = []
for i in range(8):
    s = conn()
    s.sendall(b"POST /generate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: %d\r\n\r\n" % len(body) + body)
    streams.append([s, b""])
for st in streams:
    while b"token_id" not in st[1]:
        d = st[0].recv(65536)
        if not d:
            break
        st[1] += d
open(a.started, "w").write("started\n")
for st in streams:
    try:
        while b"[DONE]" not in st[1]:
            d = st[0].recv(65536)
            if not d:
                break
            st[1] += d
    except OSError:
        pass
time.sleep(a.linger)
with open(a.out, "w") as f:
    for i, st in enumerate(streams):
        lines = [l for l in st[1].decode("utf-8", "replace").split("\n") if l.startswith("data: ")]
        f.write("%d %s\n" % (i, " | ".join(lines[-2:]) if lines else "(nothing)"))
