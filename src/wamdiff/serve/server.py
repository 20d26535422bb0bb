"""The uvicorn side of the planner server: the socket, the connection timeouts, the server in a thread (tests).

uvicorn closes an idle kept-alive connection (`timeout_keep_alive`) but sets no deadline on a request's headers: a
client that opens a connection and sends half a request line holds it for ever. `HeaderDeadlineH11` adds one:
the headers must be complete within the read timeout of the connection's opening or of their first byte, else a
408 with one line and the connection is closed (the body's own deadline is `guards.read_body`'s).
uvicorn's `limit_concurrency` answers 503 to connections beyond a bound, a backstop behind the in-flight cap.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from contextlib import contextmanager

from uvicorn.protocols.http.h11_impl import H11Protocol

from wamdiff.serve.guards import ServerLimits

CONNECTION_MARGIN = 16  # connections beyond the in-flight cap that still get an answer from the app (/health, a 503)


class HeaderDeadlineH11(H11Protocol):
    """uvicorn's h11 protocol with a deadline on each request's headers (the limits ride on the config)."""

    def connection_made(self, transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._header_timer, self._partial = None, False
        self._arm()

    def _arm(self) -> None:
        timeout = self.config.wamdiff_limits.read_timeout_s
        self._header_timer = self.loop.call_later(timeout, self._headers_late, timeout)

    def _disarm(self) -> None:
        if self._header_timer is not None:
            self._header_timer.cancel()
            self._header_timer = None

    def data_received(self, data: bytes) -> None:
        cycle = self.cycle
        if cycle is None or cycle.response_complete:  # bytes of a new request's headers
            self._partial = True
            if self._header_timer is None:
                self._arm()
        super().data_received(data)
        if self.cycle is not cycle:  # its headers are complete: the app reads the body under its own deadline
            self._disarm()
            self._partial = False

    def on_response_complete(self) -> None:
        self._disarm()  # uvicorn's keep-alive timer takes over until the next request's first byte
        super().on_response_complete()

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _headers_late(self, timeout: float) -> None:
        self._header_timer = None
        if self.transport.is_closing() or not (self.cycle is None or self.cycle.response_complete):
            return
        if self._partial:  # a request began and stalled: say why before closing
            body = json.dumps({"error": f"the request headers did not arrive within {timeout:g} s"}).encode()
            self.transport.write(b"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
                                 b"connection: close\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        self.transport.close()


def server_config(app, host: str, port: int, limits: ServerLimits):
    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level="warning", access_log=False, lifespan="on",
                            http=HeaderDeadlineH11, timeout_keep_alive=max(1, round(limits.keep_alive_s)),
                            limit_concurrency=limits.max_in_flight + CONNECTION_MARGIN, server_header=False)
    config.wamdiff_limits = limits
    return config


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port (0: a free port; read it back with `bound_port`). OSError when it cannot."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host.strip("[]"), port))
        sock.listen(2048)
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def bound_port(sock: socket.socket) -> int:
    return sock.getsockname()[1]


@contextmanager
def running_server(app, host: str = "127.0.0.1", port: int = 0, limits: ServerLimits | None = None,
                   start_timeout: float = 60.0):
    """Serve `app` from a background thread for the block; yields its base URL (port 0: a free port)."""
    import uvicorn

    limits = limits or getattr(app.state, "limits", None) or ServerLimits()
    sock = bind(host, port)
    server = uvicorn.Server(server_config(app, host, port, limits))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="wamdiff-server", daemon=True)
    thread.start()
    t0 = time.monotonic()
    while not server.started:
        if not thread.is_alive() or time.monotonic() - t0 > start_timeout:
            server.should_exit = True
            sock.close()
            raise RuntimeError(f"the planner server did not start on {host}:{port}")
        time.sleep(0.02)
    try:
        yield f"http://{host}:{bound_port(sock)}"
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
