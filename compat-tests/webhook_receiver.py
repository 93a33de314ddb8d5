"""A webhook event receiver, run as its own process by the event tests (and usable by hand):
each POST body is appended as one JSON line to OUT, with the request's signature header and
whether it verifies against SECRET_FILE's secret. It listens on 127.0.0.1:PORT (0: any free
port, written to OUT + ".port" once listening). With LODE_RECEIVER_TLS=CERT:KEY (PEM files) it
speaks HTTPS.

    python3 webhook_receiver.py OUT PORT [SECRET_FILE]
"""

import hashlib
import hmac
import json
import os
import ssl
import sys
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main():
    out, port = sys.argv[1], int(sys.argv[2])
    secret = None
    if len(sys.argv) > 3:
        with open(sys.argv[3], "rb") as f:
            secret = f.read().strip()
    lock_path = out

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            sig = self.headers.get("X-Lode-Signature")
            verified = None
            if secret is not None:
                want = "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
                verified = sig is not None and hmac.compare_digest(sig, want)
            line = json.dumps({"body": json.loads(body), "signature": sig, "verified": verified,
                               "arrived": time.time()})
            # Written before the answer: what was answered is on record (a kill of this
            # process keeps what write() handed to the kernel).
            with open(lock_path, "a") as f:
                f.write(line + "\n")
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    if os.environ.get("LODE_RECEIVER_TLS"):
        cert, key = os.environ["LODE_RECEIVER_TLS"].split(":")
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    with open(out + ".port", "w") as f:
        f.write(str(srv.server_address[1]))
    srv.serve_forever()


if __name__ == "__main__":
    main()
