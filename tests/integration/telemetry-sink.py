"""The control plane's telemetry endpoint as a sink for worker tests: every POSTed body is
appended to OUT as one JSON line and acked by its seq. Writes its port to PORT_FILE.

    python3 tests/integration/telemetry-sink.py OUT PORT_FILE
"""
import http.server
import json
import sys

out = open(sys.argv[1], "a")


class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        out.write(body.decode() + "\n")
        out.flush()
        ack = json.dumps({"acked_seq": json.loads(body)["seq"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(ack)))
        self.end_headers()
        self.wfile.write(ack)

    def log_message(self, *a):
        pass


s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
open(sys.argv[2], "w").write(str(s.server_address[1]))
s.serve_forever()
