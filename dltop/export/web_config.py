"""The exporter's ``--web.config.file``: exporter-toolkit's format, so operators reuse the file they
already give node_exporter and every other exporter built on Prometheus' exporter-toolkit.

The keys, spelt as https://github.com/prometheus/exporter-toolkit/blob/master/docs/web-configuration.md
spells them::

    tls_server_config:
      cert_file: server.crt              # relative paths are relative to this file, as in the toolkit
      key_file: server.key
      client_auth_type: RequireAndVerifyClientCert
      client_ca_file: ca.crt             # or client_ca: inline PEM
      client_allowed_sans: [prometheus]  # a verified client certificate must carry one of these
      min_version: TLS12                 # TLS12 | TLS13
      max_version: TLS13
      cipher_suites: [TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256]  # Go's names; up to TLS 1.2, as in Go
      prefer_server_cipher_suites: true
    http_server_config:
      headers: {X-Frame-Options: deny}   # the toolkit's five headers, with its allowed values
      http2: true                        # accepted and ignored: this server speaks HTTP/1.1 only
    basic_auth_users:
      prometheus: $2y$10$...             # bcrypt, as `htpasswd -nBC 10 "" | tr -d ':\\n'` prints

What the toolkit has and this does not is refused with a line that says so, never ignored, because an
operator who wrote it expects it to hold: inline ``cert``/``key``, ``curve_preferences``,
``client_auth_type`` RequestClientCert/RequireAnyClientCert (Python's ssl cannot ask for a client
certificate without verifying it), TLS10/TLS11, an enabled ``rate_limit`` and the older
``auth_excluded_paths``. Ignored because nothing about access depends on them: ``http2``, TLS 1.3
names in ``cipher_suites`` (Go ignores them too) and a ``rate_limit`` with ``interval: 0`` (off).

The file is read once, at start; the certificate, key and CA files are read again when they change
(export/server.py), so a rotated certificate is served without a restart, as the toolkit does.
"""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import yaml  # type: ignore[import-untyped, unused-ignore]

from dltop.errors import DltopError

# Go's crypto/tls ClientAuthType names -> the verify mode that does the same here
CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
UNVERIFIED_CLIENT_AUTH = ("RequestClientCert", "RequireAnyClientCert", "RequireClientCert")
TLS_VERSIONS = {"TLS12": ssl.TLSVersion.TLSv1_2, "TLS13": ssl.TLSVersion.TLSv1_3}
# the toolkit's accepted cipher suites (Go's tls.CipherSuites()) -> OpenSSL's names; None: a TLS 1.3
# suite, which neither Go nor OpenSSL lets a server choose through this list
CIPHER_SUITES: dict[str, Optional[str]] = {
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA": "ECDHE-ECDSA-AES128-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA": "ECDHE-ECDSA-AES256-SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA": "ECDHE-RSA-AES128-SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA": "ECDHE-RSA-AES256-SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256": "ECDHE-ECDSA-AES128-GCM-SHA256",
    "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384": "ECDHE-ECDSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256": "ECDHE-RSA-AES128-GCM-SHA256",
    "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384": "ECDHE-RSA-AES256-GCM-SHA384",
    "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-RSA-CHACHA20-POLY1305",
    "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
    "TLS_AES_128_GCM_SHA256": None,
    "TLS_AES_256_GCM_SHA384": None,
    "TLS_CHACHA20_POLY1305_SHA256": None,
}
# the toolkit's settable response headers and, where it restricts them, their allowed values
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
# $2a$/$2b$/$2y$ (htpasswd writes 2y) and the rare $2x$, a cost of two digits, 22 + 31 characters
BCRYPT = re.compile(r"\$2[abxy]\$(\d\d)\$[./A-Za-z0-9]{53}\Z")

TOP_KEYS = ("tls_server_config", "http_server_config", "basic_auth_users", "rate_limit")
TLS_KEYS = (
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "client_ca", "client_allowed_sans",
    "min_version", "max_version", "cipher_suites", "prefer_server_cipher_suites",
)  # fmt: skip
HTTP_KEYS = ("headers", "http2")
# keys of the toolkit (or of its older versions) that are refused, and why
NOT_SUPPORTED = {
    "auth_excluded_paths": "every path of this exporter serves the metrics, so none can go without authentication",
    "tls_server_config.cert": "inline certificates are not supported here: put it in a file and set cert_file",
    "tls_server_config.key": "inline keys are not supported here: put it in a file and set key_file",
    "tls_server_config.curve_preferences": (
        "not supported: Python's ssl module cannot set a list of curves; remove it for OpenSSL's defaults"
    ),
}


@dataclass(frozen=True)
class TlsConfig:
    """``tls_server_config``, its paths absolute; ``context()`` builds what the server hands out."""

    cert_file: str
    key_file: str
    client_auth_type: str = "NoClientCert"
    client_ca_file: Optional[str] = None
    client_ca: Optional[str] = None  # inline PEM
    client_allowed_sans: tuple[str, ...] = ()
    min_version: str = "TLS12"
    max_version: str = "TLS13"
    cipher_suites: tuple[str, ...] = ()  # Go's names, as written
    prefer_server_cipher_suites: bool = True

    def files(self) -> tuple[str, ...]:
        """The files the context is built from: the server rebuilds it when one of them changes."""
        return tuple(f for f in (self.cert_file, self.key_file, self.client_ca_file) if f)

    def context(self) -> ssl.SSLContext:
        """A server-side context: certificate and key, client verification, versions and ciphers."""
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = TLS_VERSIONS[self.min_version]
        context.maximum_version = TLS_VERSIONS[self.max_version]
        tls12 = [CIPHER_SUITES[name] for name in self.cipher_suites if CIPHER_SUITES[name]]
        if tls12:
            try:
                context.set_ciphers(":".join(name for name in tls12 if name))
            except ssl.SSLError:
                raise _error("tls_server_config.cipher_suites", "OpenSSL here offers none of them") from None
        if not self.prefer_server_cipher_suites:
            context.options &= ~ssl.OP_CIPHER_SERVER_PREFERENCE
        try:
            # a passphrase-protected key fails here instead of prompting on the terminal
            context.load_cert_chain(self.cert_file, self.key_file, password=_no_passphrase)
        except (ssl.SSLError, OSError) as error:
            raise _error("tls_server_config.cert_file/key_file", f"cannot load them: {_reason(error)}") from None
        context.verify_mode = CLIENT_AUTH[self.client_auth_type]
        if self.client_ca_file or self.client_ca:
            key = "client_ca_file" if self.client_ca_file else "client_ca"
            try:
                context.load_verify_locations(cafile=self.client_ca_file, cadata=self.client_ca)
            except (ssl.SSLError, OSError, ValueError) as error:
                raise _error(f"tls_server_config.{key}", f"no CA certificate read: {_reason(error)}") from None
        return context


@dataclass(frozen=True)
class WebConfig:
    """What the exporter serves with: TLS or not, the users of basic auth, extra response headers."""

    path: str
    tls: Optional[TlsConfig] = None
    basic_auth_users: tuple[tuple[str, str], ...] = ()  # (user, bcrypt hash)
    headers: tuple[tuple[str, str], ...] = ()


def load_web_config(path: Union[str, Path]) -> WebConfig:
    """Read and check the file; every problem is one DltopError line that names the key.

    The TLS context is built once here so a bad certificate or key stops the exporter at start."""
    where = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise DltopError(f"web config {where}: cannot read it: {_reason(error)}") from None
    try:
        document = yaml.load(text, Loader=_StrictLoader)  # safe_load's loader, duplicate keys refused
    except yaml.YAMLError as error:
        raise DltopError(f"web config {where}: not valid YAML: {_yaml_reason(error)}") from None
    try:
        # relative to the folder as named, not resolved: a Kubernetes Secret's file is a symlink into a
        # timestamped folder that the kubelet deletes when it renews the Secret
        config = _parse(document, Path(path).absolute().parent, where)
        if config.tls is not None:
            config.tls.context()
    except DltopError as error:
        raise DltopError(f"web config {where}: {error}") from None
    return config


_TLS = "tls_server_config."  # the prefix of its keys in errors


def _parse(document: Any, directory: Path, where: str) -> WebConfig:
    top = _mapping(document, "the file") if document is not None else {}
    _known(top, TOP_KEYS, "")
    _rate_limit(top.get("rate_limit"))
    http = _mapping(top.get("http_server_config"), "http_server_config")
    _known(http, HTTP_KEYS, "http_server_config.")
    _boolean(http.get("http2", True), "http_server_config.http2")  # checked, then ignored: HTTP/1.1 only
    return WebConfig(
        path=where,
        tls=_tls(_mapping(top.get("tls_server_config"), "tls_server_config"), directory),
        basic_auth_users=_users(top.get("basic_auth_users")),
        headers=_headers(http.get("headers")),
    )


def _tls(section: dict, directory: Path) -> Optional[TlsConfig]:
    key = _TLS
    _known(section, TLS_KEYS, key, tolerated=("cert", "key", "curve_preferences"))
    if _tls_off(section):
        return None
    cert_file, key_file = (_file(section.get(k), key + k, directory, required=True) for k in ("cert_file", "key_file"))
    auth, client_ca_file, client_ca, sans = _client_auth(section, directory)
    versions = _versions(section)
    ciphers = _cipher_suites(section)
    prefer = section.get("prefer_server_cipher_suites")
    return TlsConfig(
        cert_file=cert_file or "",
        key_file=key_file or "",
        client_auth_type=auth,
        client_ca_file=client_ca_file,
        client_ca=client_ca,
        client_allowed_sans=sans,
        min_version=versions[0],
        max_version=versions[1],
        cipher_suites=ciphers,
        prefer_server_cipher_suites=True if prefer is None else _boolean(prefer, key + "prefer_server_cipher_suites"),
    )


def _tls_off(section: dict) -> bool:
    """The toolkit's test: no certificate, key, CA or client auth is plain HTTP; other TLS keys set
    without them are a mistake, not a request for plain HTTP."""
    if any(section.get(k) for k in ("cert_file", "key_file", "client_auth_type", "client_ca_file", "client_ca")):
        return False
    if any(v not in (None, "", []) for v in section.values()):
        raise _error("tls_server_config", "sets no cert_file and key_file, so TLS would be off")
    return True


def _client_auth(section: dict, directory: Path) -> tuple[str, Optional[str], Optional[str], tuple[str, ...]]:
    """(client_auth_type, client_ca_file, client_ca, client_allowed_sans), checked together: a
    client CA and a verifying client auth type go as a pair, and only verified certificates have SANs."""
    key = _TLS
    client_ca_file = _file(section.get("client_ca_file"), key + "client_ca_file", directory, required=False)
    client_ca = _string(section.get("client_ca"), key + "client_ca") or None
    if client_ca_file and client_ca:
        raise _error(key + "client_ca", "set either client_ca or client_ca_file, not both")
    auth = _auth_type(section)
    has_ca = bool(client_ca_file or client_ca)
    if auth == "NoClientCert" and has_ca:
        raise _error(key + "client_ca_file", "a client CA is set but client_auth_type is NoClientCert")
    if auth != "NoClientCert" and not has_ca:
        raise _error(key + "client_auth_type", f"{auth} needs client_ca_file: the CA that signs client certificates")
    sans = _strings(section.get("client_allowed_sans"), key + "client_allowed_sans")
    if sans and auth == "NoClientCert":
        raise _error(key + "client_allowed_sans", "needs a client_auth_type that verifies client certificates")
    return auth, client_ca_file, client_ca, sans


def _auth_type(section: dict) -> str:
    """client_auth_type, one Python's ssl module can do (it cannot ask without verifying)."""
    key = _TLS + "client_auth_type"
    auth = _string(section.get("client_auth_type"), key) or "NoClientCert"
    if auth in UNVERIFIED_CLIENT_AUTH:
        raise _error(
            key,
            f"{auth} is not supported: Python's ssl module cannot ask for a client certificate without verifying "
            "it; use RequireAndVerifyClientCert (or VerifyClientCertIfGiven) with client_ca_file",
        )
    if auth not in CLIENT_AUTH:
        raise _error(key, f"unknown {auth!r}: one of {', '.join(CLIENT_AUTH)}")
    return auth


def _versions(section: dict) -> tuple[str, str]:
    """(min_version, max_version), TLS 1.2 to 1.3 unless set, the lower one first."""
    key = _TLS
    low, high = (_version(section.get(k), key + k, d) for k, d in (("min_version", "TLS12"), ("max_version", "TLS13")))
    if TLS_VERSIONS[low] > TLS_VERSIONS[high]:
        raise _error(key + "min_version", f"{low} is above max_version {high}")
    return low, high


def _cipher_suites(section: dict) -> tuple[str, ...]:
    """cipher_suites by Go's names, each one known."""
    key = _TLS + "cipher_suites"
    ciphers = _strings(section.get("cipher_suites"), key)
    for name in ciphers:
        if name not in CIPHER_SUITES:
            raise _error(key, f"unknown cipher suite {name!r} (Go's names, e.g. {next(iter(CIPHER_SUITES))})")
    return ciphers


def _users(value: Any) -> tuple[tuple[str, str], ...]:
    users = []
    for user, hashed in _mapping(value, "basic_auth_users").items():
        if not isinstance(user, str) or not user:
            raise _error(f"basic_auth_users.{user}", "a user name must be a non-empty string (quote it)")
        if ":" in user:
            raise _error(f"basic_auth_users.{user}", "a user name cannot hold ':' (basic auth splits there)")
        match = BCRYPT.match(hashed) if isinstance(hashed, str) else None
        if match is None or not 4 <= int(match.group(1)) <= 31:
            raise _error(
                f"basic_auth_users.{user}",
                "not a bcrypt hash: write one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'` (starts $2y$10$)",
            )
        users.append((user, hashed))
    return tuple(users)


def _headers(value: Any) -> tuple[tuple[str, str], ...]:
    headers = []
    for name, text in _mapping(value, "http_server_config.headers").items():
        key = f"http_server_config.headers.{name}"
        if name not in HEADERS:
            raise _error(key, f"this header cannot be set (the toolkit's: {', '.join(HEADERS)})")
        text = _string(text, key)
        if HEADERS[name] and text not in HEADERS[name]:
            raise _error(key, f"{text!r} is not one of {', '.join(HEADERS[name])}")
        if text:  # the toolkit leaves a blank header unset
            headers.append((name, text))
    return tuple(headers)


def _rate_limit(value: Any) -> None:
    """Only an absent or switched-off limiter is accepted: there is no rate limiter here."""
    section = _mapping(value, "rate_limit")
    _known(section, ("interval", "burst"), "rate_limit.")
    if str(section.get("interval") or 0).strip() not in ("0", "0s", "0ms"):
        raise _error("rate_limit", "not supported: this exporter has no rate limiter; remove it or set interval: 0")


def _file(value: Any, key: str, directory: Path, required: bool) -> Optional[str]:
    text = _string(value, key)
    if not text:
        if required:
            raise _error(key, "missing: TLS needs both cert_file and key_file")
        return None
    path = directory / text  # an absolute path stays as it is
    if not path.is_file():
        raise _error(key, f"no such file: {path}")
    return str(path)


def _version(value: Any, key: str, default: str) -> str:
    text = _string(value, key) or default
    if text in ("TLS10", "TLS11"):
        raise _error(key, f"{text} is not supported: TLS12 or TLS13")
    if text not in TLS_VERSIONS:
        raise _error(key, f"unknown TLS version {text!r}: TLS12 or TLS13")
    return text


def _known(section: dict, keys: tuple[str, ...], prefix: str, tolerated: tuple[str, ...] = ()) -> None:
    """Refuse a key that is not ours; ``tolerated`` ones only while empty (an empty value sets nothing)."""
    for name, value in section.items():
        if name in keys or (name in tolerated and value in (None, "", [])):
            continue
        if prefix + str(name) in NOT_SUPPORTED:
            raise _error(prefix + str(name), NOT_SUPPORTED[prefix + str(name)])
        raise _error(prefix + str(name), f"unknown key (known here: {', '.join(keys)})")


def _mapping(value: Any, key: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _error(key, f"must be a mapping of keys to values, not {_kind(value)}")
    return value


def _string(value: Any, key: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise _error(key, f"must be a string, not {_kind(value)}")
    return value


def _strings(value: Any, key: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _error(key, "must be a list of strings")
    return tuple(value)


def _boolean(value: Any, key: str) -> bool:
    if not isinstance(value, bool):
        raise _error(key, f"must be true or false, not {_kind(value)}")
    return value


def _kind(value: Any) -> str:
    return {dict: "a mapping", list: "a list", str: "a string", bool: "a boolean"}.get(type(value), repr(value))


def _error(key: str, problem: str) -> DltopError:
    return DltopError(f"{key}: {problem}")


def _reason(error: BaseException) -> str:
    text = getattr(error, "strerror", None) or getattr(error, "reason", None) or str(error) or type(error).__name__
    return " ".join(str(text).split())


def _yaml_reason(error: yaml.YAMLError) -> str:
    mark = getattr(error, "problem_mark", None)
    problem = getattr(error, "problem", None) or str(error)
    where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
    return " ".join(f"{problem}{where}".split())


def _no_passphrase() -> bytes:
    raise DltopError("tls_server_config.key_file: the key is protected by a passphrase; give an unencrypted key")


class _StrictLoader(yaml.SafeLoader):
    """safe_load's loader that refuses a key written twice, as the toolkit's strict YAML decoding does."""

    def construct_mapping(self, node: Any, deep: bool = False) -> dict:
        seen: set = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, (str, int, float, bool)) and key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {key!r} is written twice", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
