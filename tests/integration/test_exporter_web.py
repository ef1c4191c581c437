"""The exporter's web config with a real Prometheus (Debian's `prometheus` package): it scrapes
``serve()`` over HTTPS with a client certificate from a throwaway CA and basic auth, queried
through its HTTP API."""

from __future__ import annotations

from tests.prometheus import Prometheus
from tests.support import wait_for
from tests.tls import PASSWORD, USER, hashed, tls_config

# -- a real Prometheus, scraping over HTTPS with a client certificate and basic auth -----------------


def test_prometheus_scrapes_over_https_with_a_client_certificate_and_basic_auth(exporter, pki, tmp_path):
    port = exporter(
        tls_config(pki, client_auth_type="RequireAndVerifyClientCert", client_ca_file=str(pki / "ca.crt"))
        + f"basic_auth_users:\n  {USER}: {hashed(prefix='$2y$')}\n"
    )
    tls = {"ca_file": str(pki / "ca.crt"), "cert_file": str(pki / "client.crt"), "key_file": str(pki / "client.key")}

    def job(name: str, password: str) -> dict:
        return {
            "job_name": name,
            "scheme": "https",
            "tls_config": tls,
            "basic_auth": {"username": USER, "password": password},
            "static_configs": [{"targets": [f"127.0.0.1:{port}"]}],
        }

    prometheus = Prometheus(tmp_path, [job("right", PASSWORD), job("wrong", "not the password")])
    try:
        wait_for(lambda: prometheus.value('up{job="right"}') == "1", 60, "Prometheus to scrape with the password")
        wait_for(lambda: prometheus.value('up{job="wrong"}') == "0", 60, "Prometheus to fail without it")
        assert prometheus.value('dltop_web_test{job="right"}') == "42"
        assert prometheus.value('dltop_web_test{job="wrong"}') is None
        errors = {t["labels"]["job"]: t["lastError"] for t in prometheus.api("targets")["activeTargets"]}
        assert errors["right"] == "" and "401" in errors["wrong"], errors
    finally:
        prometheus.stop()
