"""The far side of egress tests: an HTTP and a TLS server in a network namespace a test made itself.

Run as ``python3 egress_servers.py BIND_IP HTTP_PORT TLS_PORT CERT KEY``, inside that namespace. Answers
``GET /hello`` with one line naming the server, ``GET /bytes/N`` with N bytes, and a POST with the size of
its body; anything else 404. Prints ``ready`` once both listen.
"""

from __future__ import annotations

import http.server
import ssl
import sys
import threading

MAX_BYTES = 64 * 1024 * 1024


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Type", "application/octet-stream")
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/hello":
            self._send(200, f"hello from {self.server.server_address[1]} ({self.headers.get('Host')})\n".encode())
        elif self.path.startswith("/bytes/") and self.path[7:].isdigit() and int(self.path[7:]) <= MAX_BYTES:
            self._send(200, b"x" * int(self.path[7:]))
        else:
            self._send(404, b"not found\n")

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(min(length, MAX_BYTES))
        self._send(200, f"got {len(body)}\n".encode())

    def log_message(self, format: str, *args: object) -> None:
        pass


def main() -> None:
    bind, http_port, tls_port, cert, key = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
    plain = http.server.ThreadingHTTPServer((bind, http_port), Handler)
    secure = http.server.ThreadingHTTPServer((bind, tls_port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    secure.socket = context.wrap_socket(secure.socket, server_side=True)
    for server in (plain, secure):
        threading.Thread(target=server.serve_forever, daemon=True).start()
    print("ready", flush=True)
    sys.stdin.read()  # until the test closes our stdin (or dies)


if __name__ == "__main__":
    main()
