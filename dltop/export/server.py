"""prometheus-client's own HTTP server on a registry holding the node collector; with a web config
(export/web_config.py), prometheus-client's WSGI app and threading server behind TLS and basic auth.

Why not ``start_http_server(certfile=…)``: it wraps the listening socket, so the TLS handshake runs
in the one thread that accepts connections, and a client that connects and says nothing stalls
every scrape until it goes; it verifies client certificates only as "required" and has no place for
basic auth. Here each connection's handshake runs in that connection's own thread, with a timeout.
"""

from __future__ import annotations

import base64
import binascii
import errno
import hmac
import ipaddress
import os
import secrets
import socket
import ssl
import sys
import threading
import time
from typing import Any, Callable, Iterable, Optional, Protocol, cast
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import bcrypt
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.process_collector import ProcessCollector

from dltop.errors import DltopError
from dltop.export.metrics import NodeCollector
from dltop.export.web_config import TlsConfig, WebConfig

# a client that stalls in the TLS handshake or in sending its request holds one thread this long at most
CONNECTION_TIMEOUT_S = 30.0
# a (user, password) that passed bcrypt passes again without it for this long: a scrape every 15 s
# costs one bcrypt check (about 0.1 s of a core at cost 10) per 5 minutes instead of one per scrape
AUTH_CACHE_S = 300.0
AUTH_CACHE_ENTRIES = 100  # exporter-toolkit's cache size

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict, StartResponse], Iterable[bytes]]

PRIVILEGED_BELOW = 1024  # the kernel's ip_unprivileged_port_start default


class MetricsServer(Protocol):
    """What serve() returns: prometheus-client's server or this module's, both socketserver servers."""

    @property
    def server_address(self) -> tuple[Any, ...]: ...  # (host, port) or IPv6's (host, port, flow, scope)

    def shutdown(self) -> None: ...

    def server_close(self) -> None: ...


def registry_for(collector: NodeCollector) -> CollectorRegistry:
    """The node's families, and the exporter's own process_* figures (its CPU, its memory)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


def serve(
    registry: CollectorRegistry, address: str, port: int, web_config: Optional[WebConfig] = None
) -> MetricsServer:
    """Serve /metrics on a daemon thread; returns the server (``server_address`` has the port
    bound, so port 0 picks a free one; ``shutdown()`` stops it). Without a web config, plain HTTP
    as prometheus-client serves it (with a timeout on a client that sends nothing: it would hold a
    thread for ever); with one, its TLS, basic auth and headers. A port in use, an address not on
    this machine or a certificate that cannot be loaded is one line, not a traceback."""
    app = make_wsgi_app(registry)
    try:
        server = _bind(address, port, app if web_config is None else _Access(app, web_config))
    except OSError as error:  # EADDRINUSE, EADDRNOTAVAIL, EACCES; socket.gaierror for a bad name
        hint = ""
        if error.errno == errno.EACCES and 0 < port < PRIVILEGED_BELOW:
            hint = f" (ports below {PRIVILEGED_BELOW} need root or CAP_NET_BIND_SERVICE: use --port 9488, the default)"
        raise DltopError(f"cannot listen on {address}:{port}: {error.strerror or error}{hint}") from None
    if web_config is not None and web_config.tls is not None:
        try:
            server.use_tls(web_config.tls)
        except DltopError:
            server.server_close()
            raise
    threading.Thread(target=server.serve_forever, name="dltop-exporter-http", daemon=True).start()
    return server


def _bind(address: str, port: int, app: WsgiApp) -> _WebServer:
    """Listen as prometheus-client does: the address family that the address resolves to."""
    family, _, _, _, sockaddr = socket.getaddrinfo(address, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    server_class = type("_WebServer", (_WebServer,), {"address_family": family})
    server: WSGIServer = make_server(
        str(sockaddr[0]), port, app, server_class=server_class, handler_class=_QuietHandler
    )
    return cast(_WebServer, server)


class _QuietHandler(WSGIRequestHandler):
    """No line per request (as prometheus-client's handler), and a timeout on a silent client."""

    timeout = CONNECTION_TIMEOUT_S  # StreamRequestHandler sets it on the connection

    def log_message(self, format: str, *args: Any) -> None:
        pass


class _WebServer(ThreadingWSGIServer):
    """prometheus-client's thread-per-connection WSGI server, TLS taken in each connection's thread."""

    tls: Optional[_Tls] = None

    def use_tls(self, config: TlsConfig) -> None:
        self.tls = _Tls(config)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        if self.tls is not None:
            request = self.tls.accept(request)
            if request is None:
                return  # not TLS, a certificate refused, a handshake that timed out: closed
        super().process_request_thread(request, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away or broke TLS mid-answer is not worth a traceback."""
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Tls:
    """The server's SSL context, rebuilt when its certificate, key or CA file changes (a rotated
    Kubernetes Secret, a renewed certificate) as exporter-toolkit rereads them; a change that does
    not load (a key written before its certificate) keeps the context in use and says so once."""

    def __init__(self, config: TlsConfig) -> None:
        self.config = config
        self._lock = threading.Lock()
        self._stamp = self._files_now()
        self._context = config.context()
        self._refused: Optional[tuple] = None
        self._sans = frozenset(config.client_allowed_sans)

    def accept(self, raw: socket.socket) -> Optional[ssl.SSLSocket]:
        """The handshake, in the connection's thread; None (and the connection closed) if it fails."""
        raw.settimeout(CONNECTION_TIMEOUT_S)
        try:
            connection = self.context().wrap_socket(raw, server_side=True)
        except (OSError, ValueError):
            raw.close()
            return None
        certificate = connection.getpeercert()
        if self._sans and certificate and not (_subject_alt_names(certificate) & self._sans):
            connection.close()  # exporter-toolkit's client_allowed_sans: none of the certificate's names
            return None
        return connection

    def context(self) -> ssl.SSLContext:
        stamp = self._files_now()
        with self._lock:
            if stamp != self._stamp and stamp != self._refused:
                try:
                    self._context, self._stamp = self.config.context(), stamp
                except DltopError as error:
                    self._refused = stamp
                    print(f"dltop exporter: keeping the certificate in use: {error}", file=sys.stderr, flush=True)
            return self._context

    def _files_now(self) -> tuple:
        stamps: list[Optional[tuple[int, int, int]]] = []
        for path in self.config.files():
            try:
                found = os.stat(path)
            except OSError:
                stamps.append(None)
            else:
                stamps.append((found.st_ino, found.st_size, found.st_mtime_ns))
        return tuple(stamps)


def _subject_alt_names(certificate: dict) -> set[str]:
    """The SANs as Go prints them (exporter-toolkit compares those): DNS, e-mail, IP, URI."""
    names = set()
    for kind, value in certificate.get("subjectAltName", ()):
        if kind == "IP Address":
            try:
                names.add(str(ipaddress.ip_address(value.strip())))
            except ValueError:
                continue
        elif kind in ("DNS", "email", "URI"):
            names.add(value)
    return names


class _Access:
    """WSGI middleware before prometheus-client's app: the configured response headers on every
    answer, and HTTP basic auth (401 with ``WWW-Authenticate: Basic`` without the right one)."""

    def __init__(self, app: WsgiApp, config: WebConfig) -> None:
        self.app = app
        self.headers = list(config.headers)
        self.passwords = _Passwords(dict(config.basic_auth_users)) if config.basic_auth_users else None

    def __call__(self, environ: dict, start_response: StartResponse) -> Iterable[bytes]:
        def with_headers(status: str, headers: list, exc_info: Any = None) -> Any:
            return start_response(status, [*headers, *self.headers], exc_info)

        if self.passwords is not None and not self.passwords.allow(environ.get("HTTP_AUTHORIZATION", "")):
            text = b"Unauthorized\n"
            with_headers(
                "401 Unauthorized",
                [
                    ("WWW-Authenticate", "Basic"),
                    ("Content-Type", "text/plain; charset=utf-8"),
                    ("Content-Length", str(len(text))),
                ],
            )
            return [text]
        return self.app(environ, with_headers)


class _Passwords:
    """bcrypt checks of basic-auth credentials, as exporter-toolkit makes them: one at a time (a flood
    of guesses costs one core, not all), an unknown user checked against a decoy hash of the same
    cost (no telling users apart by time), and a success remembered for AUTH_CACHE_S, by an HMAC
    under a key of this process (not the password), at most AUTH_CACHE_ENTRIES, so a scrape every
    few seconds does not pay bcrypt's deliberate slowness each time. Failures are not remembered."""

    def __init__(self, users: dict[str, str]) -> None:
        self.users = {user: hashed.encode() for user, hashed in users.items()}
        cost = max(int(hashed[4:6]) for hashed in users.values())
        self._decoy = bcrypt.hashpw(secrets.token_urlsafe(16).encode(), bcrypt.gensalt(rounds=cost))
        self._key = secrets.token_bytes(32)
        self._passed: dict[bytes, float] = {}  # HMAC of (user, password) -> until when it passes
        self._lock = threading.Lock()
        self._bcrypt = threading.Lock()

    def allow(self, authorization: str) -> bool:
        scheme, _, token = authorization.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            user, colon, password = base64.b64decode(token.strip(), validate=True).partition(b":")
        except (binascii.Error, ValueError):
            return False
        return bool(colon) and self.check(user, password)

    def check(self, user: bytes, password: bytes) -> bool:
        try:
            hashed = self.users.get(user.decode("utf-8"))
        except UnicodeDecodeError:
            hashed = None
        key = hmac.new(self._key, len(user).to_bytes(4, "big") + user + password, "sha256").digest()
        now = time.monotonic()
        with self._lock:
            if hashed is not None and self._passed.get(key, 0.0) > now:
                return True
        with self._bcrypt:
            try:
                passed = bcrypt.checkpw(password, hashed or self._decoy)
            except ValueError:  # over 72 bytes: bcrypt refuses it, as Go's bcrypt does
                passed = False
        if not passed or hashed is None:
            return False
        with self._lock:
            for old in [k for k, until in self._passed.items() if until <= now]:
                del self._passed[old]
            while len(self._passed) >= AUTH_CACHE_ENTRIES:
                del self._passed[next(iter(self._passed))]  # the oldest
            self._passed[key] = now + AUTH_CACHE_S
        return True
