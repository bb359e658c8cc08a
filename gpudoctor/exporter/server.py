"""The exporter's HTTP server (:func:`serve_metrics`): each connection gets at most 10 s and at
most 128 are served at once (more are answered 503 and closed), so idle or half-sent requests
cannot hold threads and file descriptors until scrapes fail."""

from __future__ import annotations

import errno
import socket
import sys
import threading
import time
from typing import TYPE_CHECKING, Any, Union

if TYPE_CHECKING:
    from socketserver import TCPServer as _MixedInto

    from prometheus_client import CollectorRegistry
else:
    _MixedInto = object  # the server class it is mixed into (WSGIServer) comes after it in the MRO

#: What socketserver hands a server as a request: a stream server's connected socket, or a datagram
#: server's (data, socket) pair (never this server's: it serves TCP).
_Request = Union[socket.socket, tuple[bytes, socket.socket]]
#: A connected client's address: (host, port) for IPv4, (host, port, flowinfo, scope id) for IPv6.
_ClientAddress = tuple[str | int, ...]

DEFAULT_PORT = 9402
LOOPBACK = {"127.0.0.1", "::1", "localhost"}
DEFAULT_MAX_CONNECTIONS = 128    # open connections served at once; more are answered 503 and closed
DEFAULT_REQUEST_TIMEOUT_S = 10.0  # a connection's whole life (Prometheus' default scrape timeout)
_FD_SHORTAGE = {getattr(errno, name) for name in ("EMFILE", "ENFILE", "ENOBUFS", "ENOMEM") if hasattr(errno, name)}
_BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class _OneLineErrors:
    """Where wsgiref writes a failed request's traceback: only its last line reaches stderr."""

    def __init__(self) -> None:
        self._parts: list[str] = []

    def write(self, text: str) -> int:
        if sum(map(len, self._parts)) < 65536:
            self._parts.append(text)
        return len(text)

    def flush(self) -> None:
        lines = [line for line in "".join(self._parts).splitlines() if line.strip()]
        self._parts.clear()
        if lines:
            print(f"gpudoctor exporter: request failed: {lines[-1].strip()[:200]}", file=sys.stderr, flush=True)


class _LimitedServer(_MixedInto):
    """A thread per connection, at most ``max_connections`` at once, each for at most
    ``request_timeout_s``: idle or half-sent requests (slowloris) cannot hold threads and
    file descriptors until scrapes fail. Connections over the cap are answered 503 and
    closed at once; running out of file descriptors costs one pause, never a traceback."""

    handler_class: Any = None  # set by _metrics_server_class (wsgiref is imported there)
    # The kernel's queue of connections not yet accepted (socketserver's default is 5): with a short
    # one, a burst of scrapes (many Prometheus replicas, a dashboard reload) lost its SYNs and timed
    # out instead of being served or answered 503. Linux caps it at net.core.somaxconn.
    request_queue_size = 1024

    def __init__(self, address: tuple[Any, ...], family: int, *, max_connections: int,
                 request_timeout_s: float) -> None:
        self.address_family = family
        self.max_connections = max_connections
        self.request_timeout_s = request_timeout_s
        self.refused = 0          # connections closed because the cap was reached
        self.timed_out = 0        # connections ended by request_timeout_s
        self.fd_shortages = 0     # accept() failures for want of file descriptors
        self.peak_connections = 0  # most connections served at once
        self._active: dict[Any, float] = {}
        self._lock = threading.Lock()
        super().__init__(address, self.handler_class)

    def get_request(self) -> Any:
        try:
            return super().get_request()
        except OSError as exc:
            if exc.errno in _FD_SHORTAGE:
                # The listening socket stays readable: pause instead of spinning, and let
                # the connections being served finish and give their descriptors back.
                self.fd_shortages += 1
                time.sleep(0.05)
            raise  # socketserver drops a failed accept() quietly

    def process_request(self, request: _Request, client_address: _ClientAddress) -> None:
        if not isinstance(request, socket.socket):
            raise TypeError("the metrics server serves stream (TCP) connections only")
        with self._lock:
            full = len(self._active) >= self.max_connections
            if not full:
                self._active[request] = time.monotonic()
                self.peak_connections = max(self.peak_connections, len(self._active))
        if full:
            self.refused += 1
            self._refuse(request)
            return
        try:
            threading.Thread(target=self._serve, args=(request, client_address),
                             name="gpudoctor-http", daemon=True).start()
        except RuntimeError:  # no thread could be started: this connection only
            self._forget(request)
            self._refuse(request)

    def _serve(self, request: socket.socket, client_address: _ClientAddress) -> None:
        try:
            self.finish_request(request, client_address)
        except Exception:
            self.handle_error(request, client_address)
        finally:
            self._forget(request)
            self.shutdown_request(request)

    def _forget(self, request: socket.socket) -> None:
        with self._lock:
            self._active.pop(request, None)

    def _refuse(self, request: socket.socket) -> None:
        try:
            request.setblocking(False)
            request.send(_BUSY)
        except OSError:
            pass
        self.shutdown_request(request)

    def service_actions(self) -> None:
        """Between polls of serve_forever: cut connections older than the timeout. Their
        threads see end-of-file, finish and close; shutdown() frees no descriptor under them."""
        limit = time.monotonic() - self.request_timeout_s
        with self._lock:
            old = [r for r, started in self._active.items() if started < limit]
        for request in old:
            with self._lock:
                self.timed_out += 1
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def handle_error(self, request: _Request, client_address: _ClientAddress) -> None:
        exc = sys.exc_info()[1]
        if isinstance(exc, TimeoutError):  # one read or write took the whole timeout
            with self._lock:
                self.timed_out += 1
            return
        if isinstance(exc, OSError):  # resets, broken pipes: the client's side
            return
        print(f"gpudoctor exporter: request failed: {type(exc).__name__}: {str(exc)[:200]}",
              file=sys.stderr, flush=True)


def _metrics_server_class() -> Any:
    """The server class, built on first use (wsgiref is only imported by the exporter command)."""
    from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

    class Handler(WSGIRequestHandler):
        """One connection: a socket timeout on every read and write, no access log."""

        def setup(self) -> None:
            super().setup()
            server = self.server
            if isinstance(server, _LimitedServer):  # always: the handler of MetricsServer only
                self.connection.settimeout(server.request_timeout_s)

        def log_message(self, format: str, *args: object) -> None:
            pass

        def get_stderr(self) -> Any:
            return _OneLineErrors()

    class MetricsServer(_LimitedServer, WSGIServer):
        handler_class = Handler

    return MetricsServer


def serve_metrics(registry: CollectorRegistry, host: str, port: int, *, max_connections: int = DEFAULT_MAX_CONNECTIONS,
                  request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
                  poll_interval_s: float | None = None) -> tuple[Any, threading.Thread]:
    """Serve ``registry`` at http://host:port/metrics from a background thread.

    Returns (server, thread); ``server.server_address`` has the port chosen for port 0.
    ``server.shutdown()`` then ``server.server_close()`` stop it. OSError if it cannot listen.
    """
    from prometheus_client import make_wsgi_app
    # Imported now, not inside the first scrape: an import needs a file descriptor, and one
    # that fails for want of one (EMFILE) leaves the module half-initialised for good.
    import prometheus_client.core  # noqa: F401  (the collector's metric families)

    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, _type, _proto, _name, address = infos[0]
    server = _metrics_server_class()(address, family, max_connections=max_connections,
                                     request_timeout_s=request_timeout_s)
    server.set_app(make_wsgi_app(registry))
    poll = poll_interval_s if poll_interval_s is not None else min(0.5, request_timeout_s / 4)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll},
                              name="gpudoctor-http-server", daemon=True)
    thread.start()
    return server, thread

