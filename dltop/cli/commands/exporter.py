"""``dltop exporter``: serve every training job on this node as Prometheus metrics (prometheus-client loads in run).

One process per node: it follows every training job (dltop/live/node.py), keeps the newest view in
a sink (export/state.py) and serves it at /metrics (export/metrics.py, export/server.py).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import sys
import threading

from dltop.cli.options import _positive, add_stack_options, settings_from
from dltop.live.schedule import ticks_in_window

NAME = "exporter"
HELP = "serve every training job on this node as Prometheus metrics"
DEFAULT_PORT = 9488  # not node_exporter's 9100, dcgm-exporter's 9400, nvitop's 8000, Prometheus's 9090/9091
DEFAULT_INTERVAL_S = 5.0


def _port(text: str) -> int:
    """0-65535 (an ArgumentTypeError says so: argparse's own error would name this function)."""
    if not text.strip().isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"must be 0-65535, got {text!r}")
    return int(text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--listen", default="0.0.0.0", metavar="ADDR", help="address to listen on (default 0.0.0.0)")
    parser.add_argument(
        "--port",
        type=_port,
        default=DEFAULT_PORT,
        help=f"port to serve /metrics on (default {DEFAULT_PORT}; 0 picks a free one)",
    )
    parser.add_argument(
        "--interval",
        type=_positive,
        default=DEFAULT_INTERVAL_S,
        metavar="S",
        help=f"seconds between passes over the jobs (default {DEFAULT_INTERVAL_S:g})",
    )
    parser.add_argument(
        "--discover-every",
        type=_positive,
        default=None,
        metavar="S",
        help="look for new jobs this often (default 10, or --interval if longer)",
    )
    parser.add_argument(
        "--web.config.file",
        dest="web_config_file",
        metavar="PATH",
        help="TLS and basic auth from this exporter-toolkit web config file, as node_exporter takes (docs/exporter.md)",
    )
    add_stack_options(parser)


def run(args: argparse.Namespace) -> int:
    from dltop.export.metrics import NodeCollector
    from dltop.export.server import registry_for, serve
    from dltop.export.state import ExporterState
    from dltop.export.web_config import load_web_config
    from dltop.live.node import DISCOVER_EVERY_S, NodeWatcher

    web_config = load_web_config(args.web_config_file) if args.web_config_file else None  # one line if bad
    state = ExporterState()
    hostname = os.environ.get("NODE_NAME") or socket.gethostname()  # dcgm-exporter's Hostname label
    server = serve(registry_for(NodeCollector(state, hostname)), args.listen, args.port, web_config)
    host, port = server.server_address[:2]
    scheme = "https" if web_config is not None and web_config.tls is not None else "http"
    print(
        f"dltop exporter: serving {scheme}://{_url_host(host)}:{port}/metrics, every {args.interval:g} s",
        file=sys.stderr,
        flush=True,
    )
    watcher = NodeWatcher(
        settings_from(args),
        stacks=not args.no_stacks,
        discover_every_s=args.discover_every or max(DISCOVER_EVERY_S, args.interval),
        window_ticks=ticks_in_window(args.interval),
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())  # systemd and Kubernetes stop with SIGTERM
    try:
        watcher.run(args.interval, stop, state.update)
    finally:
        watcher.close()  # stop py-spy runs under way; the jobs go on
        server.shutdown()
    return 0


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
