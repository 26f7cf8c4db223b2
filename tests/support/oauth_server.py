#!/usr/bin/env python3
"""A stand-in identity provider for OAuth2 client credentials (RFC 6749 section 4.4), for the
REST catalog tests: POST /token with grant_type=client_credentials and the right client id and
secret gets TOKEN (what the catalog under test accepts as a bearer token) with expires_in
seconds; anything else gets 401 with an RFC 6749 error. Every grant appends a line to
--grants, so a test can count how often the client fetched a token.

  oauth_server.py --port-file F --client-id ID --client-secret S --token T --grants G [--expires-in N]
"""
import argparse
import json
import os
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def main() -> int:
    ap = argparse.ArgumentParser()
    for a in ("--port-file", "--client-id", "--client-secret", "--token", "--grants"):
        ap.add_argument(a, required=True)
    ap.add_argument("--expires-in", type=int, default=3600)
    a = ap.parse_args()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def answer(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            n = int(self.headers.get("Content-Length") or 0)
            form = urllib.parse.parse_qs(self.rfile.read(n).decode())
            one = lambda k: (form.get(k) or [""])[0]
            if self.path != "/token":
                return self.answer(404, {"error": "not_found"})
            if one("grant_type") != "client_credentials":
                return self.answer(400, {"error": "unsupported_grant_type"})
            if one("client_id") != a.client_id or one("client_secret") != a.client_secret:
                return self.answer(401, {"error": "invalid_client",
                                         "error_description": "unknown client or wrong secret"})
            with open(a.grants, "a") as f:
                f.write(json.dumps({"scope": one("scope")}) + "\n")
            self.answer(200, {"access_token": a.token, "token_type": "bearer",
                              "expires_in": a.expires_in})

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    tmp = a.port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(server.server_address[1]))
    os.replace(tmp, a.port_file)
    server.serve_forever()
    return 0


if __name__ == "__main__":
    sys.exit(main())
