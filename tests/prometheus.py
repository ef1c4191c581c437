"""A real Prometheus for the tests (Debian's `prometheus` package: prometheus and promtool), on
127.0.0.1, scraping every second; queried through its HTTP API."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any, Optional

import pytest

from tests.support import wait_for


def series(families: dict, name: str, **labels) -> list:
    """The samples of family ``name`` (as prometheus_client's parser reads a scrape) with ``labels``."""
    return [s for s in families[name].samples if all(s.labels.get(k) == v for k, v in labels.items())]


def tool(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed: `apt-get install -y prometheus openssl` brings it (as .ci/run does)")
    return path


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Prometheus:
    """``scrape_configs`` scraped every second, with ``rule_files`` evaluated every second."""

    def __init__(self, directory: Path, scrape_configs: list[dict], rule_files: tuple[Path, ...] = ()) -> None:
        config: dict[str, Any] = {
            "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
            "scrape_configs": scrape_configs,
        }
        if rule_files:
            config["rule_files"] = [str(path) for path in rule_files]
        (directory / "prometheus.yml").write_text(json.dumps(config))  # JSON is YAML
        self.url = f"http://127.0.0.1:{free_port()}"
        command = [
            tool("prometheus"),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'tsdb'}",
            f"--web.listen-address={self.url[len('http://') :]}",
            "--log.level=warn",
        ]
        with open(directory / "prometheus-stderr.txt", "w") as stderr:
            self.proc = subprocess.Popen(command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=stderr)
        try:
            wait_for(self._ready, 30, "Prometheus to be ready")
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def api(self, path: str, **params: str) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        with urllib.request.urlopen(f"{self.url}/api/v1/{path}{query}", timeout=10) as response:
            return json.loads(response.read())["data"]

    def query(self, expr: str) -> list:
        return self.api("query", query=expr)["result"]

    def value(self, expr: str) -> Optional[str]:
        result = self.query(expr)
        return result[0]["value"][1] if result else None

    def firing(self, alertname: str, **labels: str) -> list:
        return [
            a["labels"]
            for a in self.api("alerts")["alerts"]
            if a["state"] == "firing" and a["labels"]["alertname"] == alertname
            and all(a["labels"].get(k) == v for k, v in labels.items())
        ]  # fmt: skip

    def stop(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)
