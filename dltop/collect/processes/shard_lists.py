"""How many parts an iterable dataset's source has, from its own list of shards where one shows.

A webdataset pipeline is built from a list of shard URLs or a brace pattern
(``shard-{000..009}.tar``), which it expands with ``braceexpand``. From outside, that list shows as
a local's repr in a worker's frames (a forked worker keeps the trainer's frames that built the
loader) and a pattern as an argument on the trainer's command line. Either counts the parts
exactly, unlike the files in a shard's folder (which may hold more than the loader reads) or the
files seen read (fewer, until every worker has moved through its shards). A list or pattern counts
only once it names a file the workers were seen reading: a script may hold other lists (its
validation shards). The count of a pattern is worked out without expanding it or reading files.
"""

from __future__ import annotations

import os
import re
import string
from dataclasses import dataclass
from typing import Optional

_INT_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?")
_CHAR_RANGE = re.compile(r"([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?")
_QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
_LETTERS = string.ascii_uppercase + string.ascii_lowercase  # the order braceexpand ranges letters in


@dataclass(frozen=True)
class PartsCount:
    """A count of a source's parts and how it was learnt, in words."""

    parts: int
    where: str
    seen: Optional[int] = None  # a folder's count (it may hold more than is read): of its files, those seen read


@dataclass(frozen=True)
class _Pattern:
    count: int  # how many names it expands to
    regex: str  # matches each of them


def brace_count(pattern: str) -> Optional[int]:
    """How many URLs webdataset makes of a string: ``::`` separates patterns, each brace-expanded
    (``{000..009}`` is 10, ``{a,b}`` 2, groups multiply); None for unbalanced braces."""
    parsed = [_parse(p) for p in pattern.split("::")]
    return None if None in parsed else sum(p.count for p in parsed if p is not None)


def brace_matches(pattern: str, path: str) -> bool:
    """Whether ``path`` could be one of the names the pattern expands to (or ends as one, where
    the pattern is relative or the file a local copy of a URL: its last component is compared)."""
    for piece in pattern.split("::"):
        parsed = _parse(piece)
        if parsed is not None and re.search(rf"(?:^|/){parsed.regex}\Z", path):
            return True
        tail = _parse(_last_component(piece))
        if tail is not None and re.fullmatch(tail.regex, os.path.basename(path)):
            return True
    return False


def listed_parts(candidates: dict[str, str], read: set[str]) -> Optional[PartsCount]:
    """The parts of the largest list or pattern among locals' reprs (``"main's urls"`` -> its repr,
    ``frames.shard_list_locals``) that names a file seen read; a list py-spy cut short (``...``)
    counts no parts."""
    found = [count for name, text in sorted(candidates.items()) if (count := _listed(name, text, read))]
    return max(found, key=lambda c: c.parts, default=None)


def command_line_parts(argv: list[str], read: set[str]) -> Optional[PartsCount]:
    """The parts of a brace pattern passed on the command line (``--shards 'd/s-{000..009}.tar'``)
    that names a file seen read."""
    found = [
        PartsCount(count, f"{count} shards of {arg} on the command line")
        for arg in argv
        if "{" in arg and any(brace_matches(arg, f) for f in read) and (count := brace_count(arg))
    ]
    return max(found, key=lambda c: c.parts, default=None)


def _listed(name: str, text: str, read: set[str]) -> Optional[PartsCount]:
    text = text.strip()
    if text.startswith("[") and text.endswith("]"):
        items = [m.group(1) for m in _QUOTED.finditer(text)]
        rest = _QUOTED.sub("", text[1:-1])
        if items and not rest.replace(",", "").strip() and _names_read(items, read):
            return PartsCount(len(items), f"{len(items)} shards listed in {name}")
        return None
    quoted = _QUOTED.fullmatch(text)
    if quoted is None or "{" not in quoted.group(1) or text.endswith('..."'):
        return None
    pattern = quoted.group(1)
    count = brace_count(pattern) if any(brace_matches(pattern, f) for f in read) else None
    return PartsCount(count, f"{count} shards of {pattern} ({name})") if count else None


def _names_read(items: list[str], read: set[str]) -> bool:
    """Whether a list names a file seen read (as it is, or by its last component: a URL's local copy)."""
    names = set(items) | {os.path.basename(i) for i in items}
    return any(f in names or os.path.basename(f) in names for f in read)


def _last_component(pattern: str) -> str:
    """What follows the last ``/`` outside braces."""
    depth, cut = 0, 0
    for index, char in enumerate(pattern):
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "/" and depth == 0:
            cut = index + 1
    return pattern[cut:]


def _parse(pattern: str) -> Optional[_Pattern]:
    """braceexpand's grammar: a ``{...}`` holding top-level commas is alternatives, one holding a
    range (``1..10``, ``01..10..2``, ``a..e``) its values, anything else is literal; the pieces
    of a pattern multiply. None where braces do not balance (braceexpand raises)."""
    count, regex, depth, start, pos = 1, "", 0, 0, 0
    while pos < len(pattern):
        char = pattern[pos]
        if char == "\\":
            pos += 2
            continue
        if char == "{":
            if depth == 0 and pos > start:
                regex += _literal(pattern[start:pos])
                start = pos
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                inner = _expression(pattern[start + 1 : pos])
                if inner is None:
                    inner = _parse(pattern[start + 1 : pos])
                    if inner is None:
                        return None
                    inner = _Pattern(inner.count, r"\{" + inner.regex + r"\}")
                count, regex, start = count * inner.count, regex + inner.regex, pos + 1
        pos += 1
    if depth != 0:
        return None
    return _Pattern(count, regex + _literal(pattern[start:]))


def _literal(text: str) -> str:
    """The regex of text outside braces: its escapes (``\\{``) stand for the character."""
    return re.escape(re.sub(r"\\(.)", r"\1", text))


def _expression(text: str) -> Optional[_Pattern]:
    """A brace group's content: a range or alternatives; None for neither (a literal group)."""
    ranged = _INT_RANGE.fullmatch(text) or _CHAR_RANGE.fullmatch(text)
    if ranged is not None:
        low, high, step = ranged.groups()
        numeric = ranged.re is _INT_RANGE
        span = abs(int(high) - int(low)) if numeric else abs(_LETTERS.index(high) - _LETTERS.index(low))
        return _Pattern(span // max(int(step or 1), 1) + 1, r"-?\d+" if numeric else ".")
    items = _alternatives(text)
    if items is None:
        return None
    parsed = [_parse(i) for i in items]
    if any(p is None for p in parsed):
        return None
    alive = [p for p in parsed if p is not None]
    return _Pattern(sum(p.count for p in alive), "(?:" + "|".join(p.regex for p in alive) + ")")


def _alternatives(text: str) -> Optional[list[str]]:
    """The items between top-level commas, or None where there is no such comma."""
    items, depth, start, pos = [], 0, 0, 0
    while pos < len(text):
        char = text[pos]
        if char == "\\":
            pos += 2
            continue
        depth += {"{": 1, "}": -1}.get(char, 0)
        if char == "," and depth == 0:
            items.append(text[start:pos])
            start = pos + 1
        pos += 1
    return [*items, text[start:]] if items else None
