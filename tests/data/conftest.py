"""A loopback HTTP mirror for the download tests: Range requests, and switches to misbehave; the published files'
stand-ins it serves."""

from __future__ import annotations

import dataclasses
import hashlib
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

import pytest

from seqssm.data.sources import DATASETS

from .published import published_files


class MirrorServer:
    """Serves `files` ({name: bytes}) at `url/<name>` on 127.0.0.1, honouring `Range: bytes=N-`.

    Switches: `drop` requests in a row send only half of what they promise, then close the
    connection; after those, `fail` requests in a row answer 503; `ignore_range` answers every
    request with the whole file. `requests` logs (name, Range header) of each request.
    """

    def __init__(self):
        self.files: dict[str, bytes] = {}
        self.requests: list[tuple[str, str | None]] = []
        self.drop = self.fail = 0
        self.ignore_range = False
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                name = unquote(self.path.removeprefix("/mirror/"))
                server.requests.append((name, self.headers.get("Range")))
                if server.fail and not server.drop:
                    server.fail -= 1
                    return self.send_error(503)
                if name not in server.files:
                    return self.send_error(404)
                data = server.files[name]
                start = 0
                wanted = self.headers.get("Range")
                if wanted and not server.ignore_range:
                    start = int(wanted.removeprefix("bytes=").split("-")[0])
                    if start >= len(data):
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(data)}")
                        self.send_header("Content-Length", "0")
                        return self.end_headers()
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                else:
                    self.send_response(200)
                body = data[start:]
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if server.drop:
                    server.drop -= 1
                    body = body[: len(body) // 2]  # then the connection closes: HTTP/1.0, one request each
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/mirror"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def names_requested(self) -> list[str]:
        return [name for name, _ in self.requests]

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def mirror():
    """A running MirrorServer, shut down after the test."""
    server = MirrorServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """{source file name: bytes} of a stand-in for every published file."""
    return published_files(tmp_path_factory.mktemp("published"))


@pytest.fixture
def served(mirror, published, monkeypatch):
    """The mirror serving every published stand-in; the table's published md5s become the stand-ins' md5s."""
    mirror.files.update(published)
    for name, d in DATASETS.items():
        files = tuple(dataclasses.replace(f, md5=hashlib.md5(published[f.name]).hexdigest(), size=len(published[f.name]))
                      if f.md5 else f for f in d.files)
        monkeypatch.setitem(DATASETS, name, dataclasses.replace(d, files=files))
    return mirror
