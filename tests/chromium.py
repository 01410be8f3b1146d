"""Headless Chromium for the page tests, with the network cut off and every request recorded.

Pages are served from 127.0.0.1 by a recording HTTP server; every other address goes to a
proxy that refuses it and records that it was asked, so a test can assert that a page loaded
nothing from outside and that none of its own requests failed.
"""

from __future__ import annotations

import contextlib
import functools
import http.server
import shutil
import socketserver
import subprocess
import threading
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="chromium not installed (make browser)")


def chromium(profile: Path, *args: str, proxy: str | None = None, budget_ms: int = 5000) -> str:
    """Run headless Chromium with `args`; return its stdout (e.g. --dump-dom's DOM)."""
    command = [
        CHROMIUM,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        f"--virtual-time-budget={budget_ms}",
    ]
    if proxy:
        command.append(f"--proxy-server={proxy}")
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=120, check=True).stdout


class _Recording(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def log_request(self, code="-", size="-"):
        self.server.requests.append((self.path, int(code) if str(code).isdigit() else code))


class _Refusing(socketserver.StreamRequestHandler):
    """A proxy to nowhere: records the request line (CONNECT host:443 or GET http://...), answers 502."""

    def handle(self):
        line = self.rfile.readline(4096).decode("latin-1").strip()
        if line:
            self.server.requests.append(line)
        self.wfile.write(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")


@contextlib.contextmanager
def _serving(server):
    server.requests = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@contextlib.contextmanager
def offline_site(root: Path):
    """(base URL of `root` on 127.0.0.1, the site's request log, the refused outside requests)."""
    handler = functools.partial(_Recording, directory=str(root))
    with (
        _serving(http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)) as site,
        _serving(socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Refusing)) as proxy,
    ):
        yield (
            f"http://127.0.0.1:{site.server_address[1]}/",
            site.requests,
            f"http://127.0.0.1:{proxy.server_address[1]}",
            proxy.requests,
        )
