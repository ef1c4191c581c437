"""Command lines as they may leave the node (metrics, recordings, reports, the screen).

Training jobs are routinely started with tokens, passwords and signed URLs on their command line
(``--hf-token=hf_…``, ``--db-url=postgres://u:pw@h/db``, ``s3://…?X-Amz-Signature=…``). What
identifies a job stays — the program, the script or module, the launcher and its shape, ordinary
flags and their values — and whatever may be a secret becomes ``REDACTED``:

- the value of a flag or ``NAME=value`` pair whose name has a word like token, secret, password,
  credential, key or auth in it (``--api-key X``, ``--hf_token=X``, ``db.password=X``, ``HF_TOKEN=X``);
- the user and password of a URL (``scheme://user:pw@host`` → ``scheme://REDACTED@host``) and the
  values of its query parameters that carry signatures or credentials;
- a long value that looks random (three kinds of characters, or a known token prefix, and high
  entropy): an API key passed without a telling name. Paths, module names, hex digests and UUIDs
  are identifiers and stay.
"""

from __future__ import annotations

import functools
import math
import re
from collections import Counter

REDACTED = "***"
# words of a flag or variable name that say its value is a secret (names are split on - _ . and case)
SECRET_WORDS = frozenset({
    "token", "tokens", "secret", "secrets", "password", "passwd", "passphrase", "pwd", "pass", "credential",
    "credentials", "creds", "apikey", "auth", "authorization", "cookie", "signature", "sig", "sas",
    "privatekey", "accesskey", "secretkey", "bearer", "jwt", "dsn",
})  # fmt: skip
# "key" alone, or after one of these, names a secret (``--key``, ``--api-key``); ``--sort-key`` does not
KEY_QUALIFIERS = frozenset({"api", "access", "secret", "private", "encryption", "master", "ssh", "signing", "client"})
# query parameters of signed object-store URLs (S3, GCS, Azure SAS) and of tokens in URLs
SECRET_QUERY = re.compile(
    r"(?i)^(x-amz-(signature|credential|security-token)|x-goog-(signature|credential)|sig|signature|token"
    r"|access_token|api_key|apikey|key|secret|password|auth)$"
)
TOKEN_PREFIXES = ("hf_", "ghp_", "gho_", "ghs_", "github_pat_", "glpat-", "sk-", "xoxb-", "xoxp-", "AKIA", "ASIA")
MIN_RANDOM_CHARS = 20
MIN_ENTROPY_BITS = 3.5  # per character: a random key of 20+ characters has over 4
# share of neighbouring characters of different kinds (lower, upper, digit): ~0.6 in a random key
# over letters and digits, ~0.1-0.2 in CamelCase words
MIN_KIND_CHANGES = 0.35
# userinfo runs to the last @ before the path: a password may hold an @ of its own
_URL = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/\s]+@)?(?P<rest>[^\s]*)")
# a secret named inside a longer value: "Authorization: Bearer X", '{"password": "X"}', "token=X"
_NAMED_INSIDE = re.compile(
    r"""(?i)\b(?P<name>bearer|token|password|passwd|secret|api[_-]?key|access[_-]?token)\b(?P<sep>["']?\s*[:=]\s*["']?|\s+)"""
    r"""(?P<secret>[^\s"',;}&]+)"""
)
_FLAG = re.compile(r"^(?P<dashes>--?)(?P<name>[A-Za-z0-9][\w.-]*)(?:=(?P<value>.*))?$", re.S)
_ASSIGNMENT = re.compile(r"^(?P<prefix>[+~]{0,2})(?P<name>[A-Za-z_][\w.-]*)=(?P<value>.*)$", re.S)
_WORDS = re.compile(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])")


def redact_argv(argv: list[str]) -> list[str]:
    """``argv`` with every value that may be a secret replaced; the program itself is kept. A
    process that rewrote its title (setproctitle) has its whole command line in one string: its
    words are redacted as arguments."""
    if len(argv) == 1 and " " in argv[0].strip():
        argv = argv[0].split()
    if not argv:
        return []
    out, secret_next = [argv[0]], False
    for arg in argv[1:]:
        if secret_next and not arg.startswith("-"):
            out.append(REDACTED)
            secret_next = False
            continue
        secret_next = False
        flag = _FLAG.match(arg)
        if flag:
            secret = is_secret_name(flag["name"])
            if flag["value"] is None:
                secret_next = secret
                out.append(arg)
            else:
                value = REDACTED if secret else redact_value(flag["value"])
                out.append(f"{flag['dashes']}{flag['name']}={value}")
            continue
        assignment = _ASSIGNMENT.match(arg)
        if assignment and "://" not in assignment["name"]:
            value = REDACTED if is_secret_name(assignment["name"]) else redact_value(assignment["value"])
            out.append(f"{assignment['prefix']}{assignment['name']}={value}")
            continue
        out.append(redact_value(arg))
    return out


def redact_command(argv: list[str]) -> str:
    """The command line to show or publish: ``argv`` redacted, joined by spaces. Worked out once per
    distinct command line (~0.2 ms each): a job's workers share their trainer's, and a collector
    asks for every process every tick."""
    return _redacted(tuple(argv))


@functools.lru_cache(maxsize=1024)
def _redacted(argv: tuple[str, ...]) -> str:
    return " ".join(redact_argv(list(argv)))


def is_secret_name(name: str) -> bool:
    """Whether a flag or variable of this name holds a secret (``hf_token``, ``DB_PASSWORD``, ``apiKey``)."""
    words = [w.lower() for part in re.split(r"[-_.\s]+", name) for w in _WORDS.findall(part)]
    if set(words) & SECRET_WORDS:
        return True
    return any(w == "key" and (i == 0 and len(words) == 1 or i and words[i - 1] in KEY_QUALIFIERS)
               for i, w in enumerate(words))  # fmt: skip


def redact_value(value: str) -> str:
    """A single value: URLs lose their user:password and signed query values; a value that
    looks like a random key goes whole."""
    if looks_random(value):
        return REDACTED
    if "://" in value:
        value = _URL.sub(_redact_url, value)
    return _NAMED_INSIDE.sub(lambda m: f"{m['name']}{m['sep']}{REDACTED}", value)


def _redact_url(match: re.Match) -> str:
    userinfo = f"{REDACTED}@" if match["userinfo"] else ""
    rest = match["rest"]
    base, question, query = rest.partition("?")
    if question:
        params = []
        for param in query.split("&"):
            name, eq, val = param.partition("=")
            params.append(f"{name}={REDACTED}" if eq and (SECRET_QUERY.match(name) or looks_random(val)) else param)
        rest = f"{base}?{'&'.join(params)}"
    return f"{match['scheme']}{userinfo}{rest}"


def looks_random(value: str) -> bool:
    """A long token of mixed kinds of characters with high entropy, or with a known API-key prefix."""
    if len(value) < MIN_RANDOM_CHARS or any(c in value for c in " \\,:") or value.startswith(("/", ".", "~")):
        return False  # paths and prose (a base64 key may hold a / inside)
    if value.startswith(TOKEN_PREFIXES):
        return True
    kinds = [_kind(c) for c in value]
    if len(set(kinds) - {"other"}) < 3:
        return False  # hex digests, UUIDs, words and numbers are identifiers
    # random text changes between lower, upper and digit at most characters; CamelCase words seldom
    changes = sum(a != b for a, b in zip(kinds, kinds[1:])) / (len(value) - 1)
    counts = Counter(value)
    entropy = -sum(n / len(value) * math.log2(n / len(value)) for n in counts.values())
    return changes >= MIN_KIND_CHANGES and entropy >= MIN_ENTROPY_BITS


def _kind(char: str) -> str:
    return "lower" if char.islower() else "upper" if char.isupper() else "digit" if char.isdigit() else "other"
