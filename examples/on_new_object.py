#!/usr/bin/env python3
"""Starts a job for every new object: a webhook consumer of Lode's bucket events (README
"Pipelines and events"). For each `ObjectCreated:*` record it runs COMMAND with `{bucket}` and
`{key}` replaced (the key URL-decoded, as AWS consumers do), one job at a time, in the order
the events arrive. A delivery is answered only after the job ran, so a consumer that dies
mid-job gets the event again (Lode delivers at least once); a job must therefore be
idempotent, and may drop an event whose `sequencer` is older than one it already handled for
the same key.

    python3 on_new_object.py --port 9000 -- sh -c 'echo new: {bucket}/{key}'

Standard library only.
"""

import argparse
import json
import shlex
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, HTTPServer


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=9000)
    ap.add_argument("--bind", default="127.0.0.1")
    ap.add_argument("command", nargs=argparse.REMAINDER, help="the job, after --")
    a = ap.parse_args()
    cmd = [c for c in a.command if c != "--"]
    if not cmd:
        ap.error("give the command to run after --")
    newest = {}  # (bucket, key) -> the newest sequencer handled
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            for r in json.loads(body).get("Records", []):
                if not r.get("eventName", "").startswith("ObjectCreated:"):
                    continue
                bucket = r["s3"]["bucket"]["name"]
                key = urllib.parse.unquote_plus(r["s3"]["object"]["key"])
                seq = r["s3"]["object"].get("sequencer", "").rjust(32, "0")
                with lock:
                    if newest.get((bucket, key), "") >= seq:
                        continue  # a stale or repeated event
                    job = [c.replace("{bucket}", bucket).replace("{key}", key) for c in cmd]
                    rc = subprocess.run(job).returncode
                    if rc != 0:
                        print(f"job failed ({rc}): {shlex.join(job)}", file=sys.stderr)
                        self.send_response(500)  # Lode retries it
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                    newest[(bucket, key)] = seq
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = HTTPServer((a.bind, a.port), Handler)
    print(f"listening on http://{a.bind}:{srv.server_address[1]}/", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    main()
