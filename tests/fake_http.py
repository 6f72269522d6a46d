"""The one fake HTTP server of the tests: a registry, a token service, GitHub's API, a proxy, a Docker engine on
its socket, or a folder of files, each answered by a function of the test's own.

FakeHTTP(answer) serves on 127.0.0.1 (or `address`, or a Unix socket) at a port the system picks (or `port`),
records every request in `seen` (method, path without the query, target as sent, query, headers - looked up
case-insensitively -, body, when) and answers each with `answer(request)`: (status, headers, body), the body
bytes, str, or anything JSON (sent as application/json). `request` is the handler itself (command, path,
headers, server). FakeHTTP.folder(directory) serves a folder's files as they are. Use it as a context manager,
or close() it.
"""

from __future__ import annotations

import functools
import http.server
import json
import socketserver
import threading
import time
import urllib.parse


class _UnixServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        request, _unused = super().get_request()
        return request, ("local", 0)  # BaseHTTPRequestHandler logs a client address


class FakeHTTP:
    def __init__(self, answer=None, *, address: str = "127.0.0.1", port: int = 0, unix_socket: str | None = None,
                 handler: type | None = None):
        self.seen: list[dict] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *_args):
                pass

            def _answer(self):
                split = urllib.parse.urlsplit(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                outer.seen.append({"method": self.command, "path": split.path, "target": self.path,
                                   "query": urllib.parse.parse_qs(split.query), "headers": self.headers,
                                   "body": self.rfile.read(length) if length else b"", "at": time.monotonic()})
                status, headers, body = answer(self)
                if not isinstance(body, (bytes, str)):
                    body, headers = json.dumps(body), {"Content-Type": "application/json", **headers}
                body = body.encode() if isinstance(body, str) else body
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

            do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _answer

        chosen = handler or Handler
        if unix_socket:
            self.httpd = _UnixServer(unix_socket, chosen)
            self.url = f"unix://{unix_socket}"
        else:
            self.httpd = http.server.ThreadingHTTPServer((address, port), chosen)
            self.netloc = f"{address}:{self.httpd.server_address[1]}"
            self.url = f"http://{self.netloc}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def host(self) -> str:
        """host:port, as a registry is named (a server on a unix socket has none: asking is a mistake of the test)."""
        if not hasattr(self, "netloc"):
            raise AttributeError(f"a server on a unix socket ({self.url}) has no host:port")
        return self.netloc

    @classmethod
    def folder(cls, directory: str, **kwargs) -> FakeHTTP:
        """The files of `directory`, served as they are (an apt repository, a key)."""
        handler = functools.partial(_QuietFiles, directory=str(directory))
        return cls(handler=handler, **kwargs)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def __enter__(self) -> FakeHTTP:
        return self

    def __exit__(self, *_exc) -> None:
        self.close()


class _QuietFiles(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *_args):
        pass
