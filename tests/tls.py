"""The exporter's web config under test: a throwaway PKI made by the openssl CLI, bcrypt hashes,
and ``serve()`` on 127.0.0.1 over a registry with one fixed series (the ``pki`` and ``exporter``
fixtures in tests/conftest.py)."""

from __future__ import annotations

import contextlib
import json
import subprocess
from pathlib import Path
from typing import Callable, Iterator, Optional

import bcrypt
from prometheus_client import CollectorRegistry
from prometheus_client.core import GaugeMetricFamily, Metric

from dltop.export.server import serve
from dltop.export.web_config import WebConfig, load_web_config
from tests.prometheus import tool

USER = "prometheus"
PASSWORD = "correct horse battery staple"


# -- a throwaway PKI, made by the openssl CLI --------------------------------------------------------


def openssl(directory: Path, *args: str) -> None:
    subprocess.run([tool("openssl"), *args], cwd=directory, check=True, capture_output=True, timeout=30)


def new_ca(directory: Path, name: str) -> None:
    openssl(
        directory, "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
    )  # fmt: skip


def issue(directory: Path, name: str, ca: str, san: str, usage: str) -> None:
    """``name``.crt/.key signed by ``ca``, with the SANs and extended key usage Go's TLS checks."""
    openssl(
        directory, "req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}",
    )  # fmt: skip
    (directory / f"{name}.ext").write_text(f"subjectAltName={san}\nextendedKeyUsage={usage}\n")
    openssl(
        directory, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
        "-CAcreateserial", "-days", "2", "-extfile", f"{name}.ext", "-out", f"{name}.crt",
    )  # fmt: skip


def make_pki(directory: Path) -> Path:
    """ca: signs server (127.0.0.1), client (SAN prometheus) and intruder (SAN intruder); other-ca signs stranger."""
    new_ca(directory, "ca")
    new_ca(directory, "other-ca")
    issue(directory, "server", "ca", "IP:127.0.0.1,DNS:localhost", "serverAuth")
    issue(directory, "client", "ca", f"DNS:{USER}", "clientAuth")
    issue(directory, "intruder", "ca", "DNS:intruder", "clientAuth")
    issue(directory, "stranger", "other-ca", f"DNS:{USER}", "clientAuth")
    return directory


def hashed(password: str = PASSWORD, prefix: str = "$2b$") -> str:
    """A bcrypt hash at the lowest cost (fast tests); ``$2y$`` is how htpasswd writes them."""
    return prefix + bcrypt.hashpw(password.encode(), bcrypt.gensalt(rounds=4)).decode()[4:]


# -- the exporter's server, on a registry with one fixed series ------------------------------------


class Fixed:
    """A custom collector: one gauge, no jobs needed."""

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("dltop_web_test", "A fixed gauge for the access tests", value=42)


def registry() -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=True)
    registry.register(Fixed())
    return registry


@contextlib.contextmanager
def exporters(directory: Path) -> Iterator[Callable[[str], int]]:
    """start(web config text, or "" for none) -> the port of ``serve()`` on 127.0.0.1; all stopped after."""
    servers: list = []

    def start(text: str) -> int:
        config: Optional[WebConfig] = None
        if text:
            path = directory / f"web-{len(servers)}.yml"
            path.write_text(text)
            config = load_web_config(path)
        servers.append(serve(registry(), "127.0.0.1", 0, config))
        return servers[-1].server_address[1]

    try:
        yield start
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()


def tls_config(pki: Path, **extra: object) -> str:
    lines = [f"  cert_file: {pki / 'server.crt'}", f"  key_file: {pki / 'server.key'}"]
    lines += [f"  {key}: {json.dumps(value)}" for key, value in extra.items()]  # JSON is YAML
    return "tls_server_config:\n" + "\n".join(lines) + "\n"
