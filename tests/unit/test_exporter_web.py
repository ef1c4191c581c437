"""The exporter's web config (exporter-toolkit's --web.config.file): real TLS with a throwaway CA
made by the openssl CLI, real bcrypt hashes, ``serve()`` on 127.0.0.1; bad configs; the
NetworkPolicy beside the DaemonSet. Prometheus itself scraping it is an integration test."""

from __future__ import annotations

import base64
import http.client
import os
import shutil
import socket
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Callable, Optional

import bcrypt
import pytest
import yaml

from dltop.errors import DltopError
from dltop.export import server as server_module
from dltop.export.server import serve
from dltop.export.web_config import load_web_config
from tests.support import ROOT
from tests.tls import PASSWORD, USER, hashed, issue, openssl, registry, tls_config


def client(pki: Path, certificate: Optional[str] = None) -> ssl.SSLContext:
    """A client that trusts the test CA, showing ``certificate``.crt if given."""
    context = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    if certificate:
        context.load_cert_chain(str(pki / f"{certificate}.crt"), str(pki / f"{certificate}.key"))
    return context


def get(port: int, context: Optional[ssl.SSLContext] = None, auth: Optional[str] = None, scheme: str = "https"):
    """(status, headers, body) of GET /metrics; a refused connection raises (OSError, HTTPException)."""
    request = urllib.request.Request(f"{scheme}://127.0.0.1:{port}/metrics")
    if auth is not None:
        request.add_header("Authorization", "Basic " + base64.b64encode(auth.encode()).decode())
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


def refused(call: Callable[[], object]) -> bool:
    try:
        call()
    except (OSError, http.client.HTTPException):  # URLError, SSLError and resets are OSErrors
        return True
    return False


# -- TLS, basic auth, client certificates ---------------------------------------------------------


def test_without_a_web_config_it_serves_plain_http_as_before(exporter):
    status, _, body = get(exporter(""), scheme="http")
    assert status == 200 and "dltop_web_test 42.0" in body


def test_tls_refuses_plain_http_and_serves_https_to_a_client_trusting_the_ca(exporter, pki):
    port = exporter(tls_config(pki))
    assert refused(lambda: get(port, scheme="http"))
    assert refused(lambda: get(port, ssl.create_default_context()))  # the system's CAs do not know ours
    status, _, body = get(port, client(pki))
    assert status == 200 and "dltop_web_test 42.0" in body


@pytest.mark.parametrize("tls", [True, False], ids=["https", "http"])
def test_basic_auth_is_401_with_www_authenticate_without_the_right_password(exporter, pki, tls):
    users = f"basic_auth_users:\n  {USER}: {hashed(prefix='$2y$')}\n  other: {hashed('other')}\n"
    headers = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n"
    port = exporter((tls_config(pki) if tls else "") + users + headers)
    context, scheme = (client(pki), "https") if tls else (None, "http")
    for auth in (None, f"{USER}:wrong", f"nobody:{PASSWORD}", f"other:{PASSWORD}", USER, "::"):
        status, answer, body = get(port, context, auth, scheme)
        assert (status, answer["WWW-Authenticate"], answer["X-Frame-Options"]) == (401, "Basic", "deny"), auth
        assert "dltop_web_test" not in body
    status, answer, body = get(port, context, f"{USER}:{PASSWORD}", scheme)
    assert status == 200 and "dltop_web_test 42.0" in body and answer["X-Frame-Options"] == "deny"


def test_a_right_password_is_checked_by_bcrypt_once_and_a_wrong_one_every_time(exporter, monkeypatch):
    calls: list = []
    checkpw = bcrypt.checkpw
    monkeypatch.setattr(server_module.bcrypt, "checkpw", lambda *a: calls.append(a) or checkpw(*a))
    port = exporter(f"basic_auth_users:\n  {USER}: {hashed()}\n")
    for _ in range(3):
        assert get(port, auth=f"{USER}:{PASSWORD}", scheme="http")[0] == 200
    assert len(calls) == 1
    for _ in range(2):
        assert get(port, auth=f"{USER}:wrong", scheme="http")[0] == 401
    assert len(calls) == 3


def test_a_required_client_certificate_is_verified_against_the_ca_and_the_allowed_sans(exporter, pki):
    port = exporter(
        tls_config(
            pki,
            client_auth_type="RequireAndVerifyClientCert",
            client_ca_file=str(pki / "ca.crt"),
            client_allowed_sans=[USER],
        )
    )
    assert refused(lambda: get(port, client(pki)))  # none
    assert refused(lambda: get(port, client(pki, "stranger")))  # another CA's
    assert refused(lambda: get(port, client(pki, "intruder")))  # our CA's, a SAN not allowed
    status, _, body = get(port, client(pki, "client"))
    assert status == 200 and "dltop_web_test 42.0" in body


def test_a_client_certificate_if_given_must_be_the_cas(exporter, pki):
    port = exporter(tls_config(pki, client_auth_type="VerifyClientCertIfGiven", client_ca_file=str(pki / "ca.crt")))
    assert get(port, client(pki))[0] == 200
    assert get(port, client(pki, "client"))[0] == 200
    assert refused(lambda: get(port, client(pki, "stranger")))


def test_a_client_that_connects_and_says_nothing_does_not_stall_scrapes(exporter, pki):
    """prometheus-client's own TLS takes the handshake in its accept loop: one such client stalls all."""
    port = exporter(tls_config(pki))
    with socket.create_connection(("127.0.0.1", port), timeout=10):
        time.sleep(0.2)
        started = time.monotonic()
        assert get(port, client(pki))[0] == 200
        assert time.monotonic() - started < 5


def test_plain_http_drops_a_client_that_sends_nothing(exporter, monkeypatch):
    """Without a web config too: a silent connection would hold one of the root daemon's threads for ever."""
    monkeypatch.setattr(server_module._QuietHandler, "timeout", 1.0)
    port = exporter("")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as silent:
        started = time.monotonic()
        assert silent.recv(1) == b""  # closed by the server
        assert time.monotonic() - started < 5


def served_certificate(port: int, pki: Path) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with client(pki).wrap_socket(raw, server_hostname="127.0.0.1") as connection:
            return connection.getpeercert(binary_form=True) or b""


def renewed_server_certificate(pki: Path, tmp_path: Path) -> Path:
    """A folder with a new server certificate and key from the same CA (a renewal)."""
    renewed = tmp_path / "renewed"
    renewed.mkdir()
    for name in ("ca.crt", "ca.key"):
        shutil.copy(pki / name, renewed / name)
    issue(renewed, "server", "ca", "IP:127.0.0.1", "serverAuth")
    return renewed


def test_a_renewed_certificate_is_served_without_a_restart_and_a_broken_one_is_not(exporter, pki, tmp_path, capfd):
    live = tmp_path / "live"
    live.mkdir()
    for name in ("server.crt", "server.key"):
        shutil.copy(pki / name, live / name)
    port = exporter(f"tls_server_config:\n  cert_file: {live / 'server.crt'}\n  key_file: {live / 'server.key'}\n")
    first = served_certificate(port, pki)
    renewed = renewed_server_certificate(pki, tmp_path)

    (live / "next.crt").write_text("not a certificate\n")
    os.replace(live / "next.crt", live / "server.crt")  # as a Secret volume swaps its files
    assert served_certificate(port, pki) == first
    assert "keeping the certificate in use" in capfd.readouterr().err
    for name in ("server.key", "server.crt"):
        shutil.copy(renewed / name, live / f"next-{name}")
        os.replace(live / f"next-{name}", live / name)
    second = served_certificate(port, pki)
    assert second != first and second == ssl.PEM_cert_to_DER_cert((renewed / "server.crt").read_text())


def test_a_renewed_kubernetes_secret_is_served_through_its_symlinks(pki, tmp_path):
    """A Secret volume: each file is a symlink through ..data into a timestamped folder that the
    kubelet replaces (and deletes) on renewal. Relative paths follow the symlinks as named."""
    volume = tmp_path / "secret"
    volume.mkdir()

    def publish(stamp: str, source: Path) -> None:
        folder = volume / f"..{stamp}"
        folder.mkdir()
        for name in ("server.crt", "server.key"):
            shutil.copy(source / name, folder / name)
        (folder / "web-config.yml").write_text("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n")
        (volume / "..data_tmp").symlink_to(folder.name)
        os.replace(volume / "..data_tmp", volume / "..data")  # the kubelet's atomic swap

    publish("2026_01_01", pki)
    for name in ("server.crt", "server.key", "web-config.yml"):
        (volume / name).symlink_to(f"..data/{name}")
    server = serve(registry(), "127.0.0.1", 0, load_web_config(volume / "web-config.yml"))
    try:
        port = server.server_address[1]
        first = served_certificate(port, pki)
        renewed = renewed_server_certificate(pki, tmp_path)
        publish("2026_02_01", renewed)
        shutil.rmtree(volume / "..2026_01_01")  # the old folder goes
        second = served_certificate(port, pki)
        assert second != first and second == ssl.PEM_cert_to_DER_cert((renewed / "server.crt").read_text())
    finally:
        server.shutdown()
        server.server_close()


# -- the file: the toolkit's keys, and one line for each problem ------------------------------------


def test_a_file_written_for_node_exporter_loads_with_paths_relative_to_it(pki):
    (pki / "node-exporter.yml").write_text(
        "tls_server_config:\n"
        "  cert_file: server.crt\n"
        "  key_file: server.key\n"
        "  client_auth_type: RequireAndVerifyClientCert\n"
        "  client_ca_file: ca.crt\n"
        "  min_version: TLS12\n"
        "  max_version: TLS13\n"
        "  cipher_suites: [TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, TLS_AES_128_GCM_SHA256]\n"
        "  prefer_server_cipher_suites: true\n"
        "  curve_preferences: []\n"
        "http_server_config:\n"
        "  http2: false\n"
        "  headers:\n"
        "    X-Content-Type-Options: nosniff\n"
        '    Content-Security-Policy: ""\n'
        "rate_limit:\n"
        "  interval: 0s\n"
        "basic_auth_users:\n"
        f"  alice: {hashed(prefix='$2y$')}\n"
    )
    config = load_web_config(pki / "node-exporter.yml")
    assert config.tls is not None and config.tls.cert_file == str(pki / "server.crt")
    assert config.tls.client_ca_file == str(pki / "ca.crt")
    assert config.headers == (("X-Content-Type-Options", "nosniff"),)
    assert [user for user, _ in config.basic_auth_users] == ["alice"]
    assert config.tls.context().verify_mode == ssl.CERT_REQUIRED
    assert load_web_config(pki / "node-exporter.yml") == config  # frozen, comparable


TLS = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n"
BAD = {
    "not YAML": ("tls_server_config: [\n", "not valid YAML"),
    "a list": ("- tls_server_config\n", "the file: must be a mapping"),
    "an unknown key": ("tls_config:\n  cert_file: server.crt\n", "tls_config: unknown key"),
    "an unknown TLS key": (TLS + "  certfile: x\n", "tls_server_config.certfile: unknown key"),
    "a certificate without a key": ("tls_server_config:\n  cert_file: server.crt\n", "key_file: missing"),
    "a missing file": (TLS.replace("server.key", "nowhere.key"), "tls_server_config.key_file: no such file"),
    "a key of another certificate": (TLS.replace("server.key", "client.key"), "cannot load them"),
    "a passphrase on the key": (TLS.replace("server.key", "locked.key"), "passphrase"),
    "a password, not a hash": ("basic_auth_users:\n  alice: hunter2\n", "basic_auth_users.alice: not a bcrypt hash"),
    "a user twice": (f"basic_auth_users:\n  a: {'$2y$04$' + 'a' * 53}\n  a: x\n", "'a' is written twice"),
    "an unverified client auth": (
        TLS + "  client_auth_type: RequireAnyClientCert\n  client_ca_file: ca.crt\n",
        "RequireAnyClientCert is not supported",
    ),
    "an unknown client auth": (TLS + "  client_auth_type: Always\n", "client_auth_type: unknown 'Always'"),
    "client auth without a CA": (TLS + "  client_auth_type: RequireAndVerifyClientCert\n", "needs client_ca_file"),
    "a CA without client auth": (TLS + "  client_ca_file: ca.crt\n", "client_auth_type is NoClientCert"),
    "curves": (TLS + "  curve_preferences: [X25519]\n", "curve_preferences: not supported"),
    "inline certificate": (TLS + "  cert: '-----BEGIN CERTIFICATE-----'\n", "tls_server_config.cert: inline"),
    "TLS 1.0": (TLS + "  min_version: TLS10\n", "TLS10 is not supported"),
    "an unknown cipher": (TLS + "  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n", "unknown cipher suite"),
    "a rate limit": ("rate_limit:\n  interval: 1s\n  burst: 5\n", "rate_limit: not supported"),
    "excluded paths": ("auth_excluded_paths: [/metrics]\n", "auth_excluded_paths: every path"),
    "another header": ("http_server_config:\n  headers:\n    X-Powered-By: dltop\n", "cannot be set"),
    "a header value": ("http_server_config:\n  headers:\n    X-Frame-Options: allow\n", "'allow' is not one of"),
    "TLS settings without TLS": ("tls_server_config:\n  min_version: TLS13\n", "TLS would be off"),
}


@pytest.mark.parametrize("text, fragment", list(BAD.values()), ids=list(BAD))
def test_a_bad_web_config_is_one_line_naming_the_key(pki, text, fragment):
    if not (pki / "locked.key").exists():
        openssl(pki, "pkey", "-in", "server.key", "-aes256", "-passout", "pass:secret", "-out", "locked.key")
    path = pki / "bad.yml"
    path.write_text(text)
    with pytest.raises(DltopError) as raised:
        load_web_config(path)
    message = str(raised.value)
    assert message.startswith(f"web config {path}: ") and "\n" not in message and fragment in message, message


def test_a_missing_web_config_is_one_line(tmp_path):
    with pytest.raises(DltopError, match=r"^web config .*nowhere\.yml: cannot read it: No such file or directory$"):
        load_web_config(tmp_path / "nowhere.yml")


def test_an_empty_web_config_serves_plain_http_as_the_toolkit_does(exporter):
    assert get(exporter("# nothing\n"), scheme="http")[0] == 200


# -- the NetworkPolicy beside the DaemonSet ----------------------------------------------------------


def test_the_network_policy_admits_only_the_prometheus_namespace_to_the_daemonsets_port():
    kubernetes = ROOT / "deploy" / "kubernetes"
    daemonset = yaml.safe_load((kubernetes / "daemonset.yaml").read_text())
    policy = yaml.safe_load((kubernetes / "networkpolicy.yaml").read_text())
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == "metrics"]
    assert policy["kind"] == "NetworkPolicy" and policy["metadata"]["namespace"] == daemonset["metadata"]["namespace"]
    assert policy["spec"]["podSelector"]["matchLabels"] == daemonset["spec"]["template"]["metadata"]["labels"]
    assert sorted(policy["spec"]["policyTypes"]) == ["Egress", "Ingress"] and policy["spec"]["egress"] == []
    (rule,) = policy["spec"]["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": port}]
    assert rule["from"] == [{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}]
