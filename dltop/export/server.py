"""prometheus-client's own HTTP server on a registry holding the node collector."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.process_collector import ProcessCollector

from dltop.errors import DltopError
from dltop.export.metrics import NodeCollector


def registry_for(collector: NodeCollector) -> CollectorRegistry:
    """The node's families, and the exporter's own process_* figures (its CPU, its memory)."""
    registry = CollectorRegistry(auto_describe=True)
    registry.register(collector)
    ProcessCollector(registry=registry)
    return registry


def serve(registry: CollectorRegistry, address: str, port: int):
    """Serve /metrics on a daemon thread; returns the server (``server_address`` has the port
    bound, so port 0 picks a free one). A port in use or an address not on this machine is
    one line, not a traceback."""
    try:
        server, _thread = start_http_server(port, addr=address, registry=registry)
    except OSError as error:  # EADDRINUSE, EADDRNOTAVAIL, EACCES; socket.gaierror for a bad name
        raise DltopError(f"cannot listen on {address}:{port}: {error.strerror or error}") from None
    return server
